package croads.ingest;

import java.util.List;

import org.apache.spark.SparkContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.CollectionAccumulator;
import org.apache.spark.util.LongAccumulator;

/**
 * A Spark SQL function that keeps the rows it is given aside, on their way to the driver, and is false: the
 * ingest's messages write filters with {@code isMessage OR keepAside(row)}, so that the rows that are not
 * messages (events and corrupt lines, a few) come out of the same pass over the lines as the messages.
 *
 * <p>The rows travel in an accumulator, which Spark applies once per task of the write's job (a result stage;
 * a failed attempt's rows are dropped). Each task keeps at most {@code budget} bytes (a row's line text and
 * 512 bytes for the rest); a task over it keeps no more and counts the rows it left, and the caller then finds
 * the others another way (spark/ingest.py reads the lines again). Not deterministic (Spark must not move or
 * repeat it): registered with {@code asNondeterministic}.
 */
public final class KeepAside implements UDF1<Row, Boolean> {
    private static final long serialVersionUID = 1L;
    /** What a row is counted besides its line: its fields and details, roughly. */
    static final long ROW_BYTES = 512;

    private final CollectionAccumulator<Row> rows;
    private final LongAccumulator bytes;
    private final LongAccumulator left;
    private final long budget;

    private KeepAside(SparkContext context, long budget) {
        this.rows = context.collectionAccumulator("ingest: rows kept aside");
        this.bytes = context.longAccumulator("ingest: bytes kept aside");
        this.left = context.longAccumulator("ingest: rows not kept aside (over the budget)");
        this.budget = budget;
    }

    /**
     * Registers a new function as {@code name} in the session, with its own accumulators; the caller reads them
     * with {@link #rows()} and {@link #complete()} once the job that ran it is done.
     *
     * @param budget the bytes each task may keep aside
     */
    public static KeepAside register(SparkSession spark, String name, long budget) {
        KeepAside aside = new KeepAside(spark.sparkContext(), budget);
        UserDefinedFunction udf = functions.udf(aside, DataTypes.BooleanType).asNondeterministic().asNonNullable();
        spark.udf().register(name, udf);
        return aside;
    }

    @Override
    public Boolean call(Row row) {
        Object line = row.get(0);
        long size = ROW_BYTES + (line == null ? 0 : ((String) line).length());
        if (left.value() > 0 || bytes.value() + size > budget) {  // this task's counts (its own copies)
            left.add(1);
        } else {
            rows.add(row);
            bytes.add(size);
        }
        return Boolean.FALSE;
    }

    /** The rows kept aside by the tasks of the finished job. */
    public List<Row> rows() {
        return rows.value();
    }

    /** Whether every row given was kept (no task was over its budget). */
    public boolean complete() {
        return left.value() == 0;
    }
}
