package croads.ingest;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.util.AccumulatorV2;

/**
 * The rows {@link KeepAside} keeps, on their way from the tasks to the driver, within two budgets of estimated
 * bytes (a row's line text and {@link #ROW_BYTES} for the rest): each task's copy keeps rows up to
 * {@code taskBudget}, and the driver's merges them up to {@code driverBudget}. Once either is passed the
 * accumulator is incomplete: it drops what it held (the driver's memory stays bounded however many tasks there
 * are) and its owner finds the rows another way.
 */
final class KeptRows extends AccumulatorV2<Row, List<Row>> {
    private static final long serialVersionUID = 1L;
    /** What a row is counted besides its line: its fields and details, roughly. */
    static final long ROW_BYTES = 512;

    private final long taskBudget;
    private final long driverBudget;
    private ArrayList<Row> rows = new ArrayList<>();
    private long bytes;
    private boolean incomplete;

    KeptRows(long taskBudget, long driverBudget) {
        this.taskBudget = taskBudget;
        this.driverBudget = driverBudget;
    }

    static long size(Row row) {
        Object line = row.get(0);
        return ROW_BYTES + (line == null ? 0 : ((String) line).length());
    }

    /** False when some row was not kept (and none is any more). */
    synchronized boolean complete() {
        return !incomplete;
    }

    @Override
    public synchronized boolean isZero() {
        return rows.isEmpty() && bytes == 0 && !incomplete;
    }

    @Override
    public synchronized KeptRows copy() {
        KeptRows copy = new KeptRows(taskBudget, driverBudget);
        copy.rows = new ArrayList<>(rows);
        copy.bytes = bytes;
        copy.incomplete = incomplete;
        return copy;
    }

    @Override
    public synchronized void reset() {
        rows = new ArrayList<>();
        bytes = 0;
        incomplete = false;
    }

    /** In a task: the row, while this task's budget lasts. */
    @Override
    public synchronized void add(Row row) {
        keep(List.of(row), size(row), taskBudget);
    }

    /** On the driver: a task's rows, while the driver's budget lasts. */
    @Override
    public synchronized void merge(AccumulatorV2<Row, List<Row>> other) {
        KeptRows task = (KeptRows) other;
        if (task.incomplete) {
            drop();
        } else {
            keep(task.rows, task.bytes, driverBudget);
        }
    }

    private void keep(List<Row> more, long size, long budget) {
        if (incomplete || bytes + size > budget) {
            drop();
        } else {
            rows.addAll(more);
            bytes += size;
        }
    }

    private void drop() {
        incomplete = true;
        rows = new ArrayList<>();
        bytes = 0;
    }

    @Override
    public synchronized List<Row> value() {
        return rows;
    }
}
