package croads.ingest;

import java.io.Serializable;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * Keeps the rows it is handed aside, on their way to the driver: the ingest's messages write hands it the rows that
 * are not messages (events and corrupt lines, a few; {@link IngestLine}), so that they come out of the same pass
 * over the lines as the messages.
 *
 * <p>The rows travel in an accumulator ({@link KeptRows}), which Spark applies once per task of the write's job
 * (a result stage; a failed attempt's rows are dropped), within a budget per task and one on the driver; over
 * either, the caller finds the others another way (spark/ingest.py reads the lines again).
 */
public final class KeepAside implements Serializable {
    private static final long serialVersionUID = 1L;

    private final KeptRows rows;

    private KeepAside(KeptRows rows) {
        this.rows = rows;
    }

    /**
     * A new one with its own accumulator, registered in the session; the caller reads it with {@link #rows()} and
     * {@link #complete()} once the job that handed it the rows is done.
     *
     * @param taskBudget   the bytes each task may keep aside
     * @param driverBudget the bytes the driver may hold of all the tasks' rows
     */
    public static KeepAside create(SparkSession spark, long taskBudget, long driverBudget) {
        KeptRows rows = new KeptRows(taskBudget, driverBudget);
        spark.sparkContext().register(rows, "ingest: rows kept aside");
        return new KeepAside(rows);
    }

    /** In a task: keeps the row aside (while the budgets last). */
    public void keep(Row row) {
        rows.add(row);
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
