package croads.ingest;

import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * A Spark SQL function that keeps the rows it is given aside, on their way to the driver, and is false: the
 * ingest's messages write filters with {@code isMessage OR keepAside(row)}, so that the rows that are not
 * messages (events and corrupt lines, a few) come out of the same pass over the lines as the messages.
 *
 * <p>The rows travel in an accumulator ({@link KeptRows}), which Spark applies once per task of the write's job
 * (a result stage; a failed attempt's rows are dropped), within a budget per task and one on the driver; over
 * either, the caller finds the others another way (spark/ingest.py reads the lines again). Not deterministic
 * (Spark must not move or repeat it): registered with {@code asNondeterministic}.
 */
public final class KeepAside implements UDF1<Row, Boolean> {
    private static final long serialVersionUID = 1L;

    private final KeptRows rows;

    private KeepAside(KeptRows rows) {
        this.rows = rows;
    }

    /**
     * Registers a new function as {@code name} in the session, with its own accumulator; the caller reads it with
     * {@link #rows()} and {@link #complete()} once the job that ran it is done.
     *
     * @param taskBudget   the bytes each task may keep aside
     * @param driverBudget the bytes the driver may hold of all the tasks' rows
     */
    public static KeepAside register(SparkSession spark, String name, long taskBudget, long driverBudget) {
        KeptRows rows = new KeptRows(taskBudget, driverBudget);
        spark.sparkContext().register(rows, "ingest: rows kept aside");
        KeepAside aside = new KeepAside(rows);
        UserDefinedFunction udf = functions.udf(aside, DataTypes.BooleanType).asNondeterministic().asNonNullable();
        spark.udf().register(name, udf);
        return aside;
    }

    @Override
    public Boolean call(Row row) {
        rows.add(row);
        return Boolean.FALSE;
    }

    /** The rows kept aside by the tasks of the finished job. */
    public List<Row> rows() {
        return rows.value();
    }

    /** Whether every row given was kept (no budget was passed). */
    public boolean complete() {
        return rows.complete();
    }
}
