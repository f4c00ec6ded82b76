package croads.validate;

import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Records logged twice (spark/rules.py {@code records_logged_twice}: the records of one {@code RECORD_KEY}, node,
 * messageId, event, source, consumer, attempt, timestampMs and the columns that place a row in the walk,
 * publicationId, shardKey, shardSeq, arrivalMs, departureMs, more than once in the log), counted as {@link CrossWalk}
 * passes each record's own row ({@link CrossWalk#REC}; a record without messageId is not compared). The copies of a
 * record have the same columns but the file (and what no rule compares, such as the body), so their rows have one
 * role, one hash and one place in the role's order: in the walk's sort (hash, role, order, messageId, file, ...) they
 * are in one run of rows equal in that sort's first four keys. A run holds the few records of one message at one
 * point of its role's order; this keeps each of the run's records (a copy of its first row) with its copies, first
 * file and number of files, and yields a finding per record seen twice or more when the run ends: the frame's,
 * text for text (its identity from the record's row in the first file, as the frame's {@code first} of a group).
 */
final class LoggedTwice {
    private static final UTF8String AUDIT = UTF8String.fromString("AUDIT");
    private static final UTF8String CHECK = UTF8String.fromString("record_logged_twice");
    private static final UTF8String WARNING = UTF8String.fromString("warning");
    private static final UTF8String ONCE = UTF8String.fromString("each record once");

    /** One record of the run: its first row (a copy), its copies so far, its least file and its files. */
    private static final class Record {
        final InternalRow first;
        int copies = 1;
        UTF8String least;
        UTF8String last;
        int files;

        Record(InternalRow row) {
            first = row.copy();
            least = CrossWalk.text(first, CrossWalk.FILE);
            last = least;
            files = least == null ? 0 : 1;
        }

        /** Another copy: its file is at least the last one's (the sort orders a run's rows by file, nulls first). */
        void again(UTF8String file) {
            copies++;
            if (file != null && !file.equals(last)) {
                files++;
                last = file.clone();
                if (least == null) {
                    least = last;
                }
            }
        }
    }

    /** The run's first record, and while it is the only one, the run. */
    private Record single;
    /** A run of two records or more by their key's columns that are not the run's (a hash map: a message dropped or
     * expired in many sources has that many records alone in one run). */
    private final Map<List<Object>, Record> run = new LinkedHashMap<>();
    private long hash;
    private int kind;
    private boolean orderNull;
    private long order;
    private UTF8String messageId;
    /** Records found logged twice (the checked rows of a rule set without the per-record rules). */
    long found;

    /** A record's own row with a messageId: a copy of a record of the run, or a new record (a new run first). */
    void add(InternalRow row, ArrayDeque<InternalRow> out) {
        long rowHash = row.getLong(CrossWalk.HASH);
        int rowKind = row.getInt(CrossWalk.KIND);
        boolean rowOrderNull = row.isNullAt(CrossWalk.O1);
        long rowOrder = rowOrderNull ? 0 : row.getLong(CrossWalk.O1);
        UTF8String id = row.getUTF8String(CrossWalk.MESSAGE_ID);
        if (single == null || rowHash != hash || rowKind != kind || rowOrderNull != orderNull || rowOrder != order
                || !id.equals(messageId)) {
            finish(out);
            hash = rowHash;
            kind = rowKind;
            orderNull = rowOrderNull;
            order = rowOrder;
            single = new Record(row);
            messageId = single.first.getUTF8String(CrossWalk.MESSAGE_ID);
            return;
        }
        if (run.isEmpty()) {  // most runs are one record: keyed only when a second row comes
            run.put(key(single.first), single);
        }
        Record record = run.get(key(row));
        if (record != null) {
            record.again(CrossWalk.text(row, CrossWalk.FILE));
            return;
        }
        record = new Record(row);
        run.put(key(record.first), record);
    }

    /** The run's findings (its records seen more than once); the run is then empty. */
    void finish(ArrayDeque<InternalRow> out) {
        if (single == null) {
            return;
        }
        for (Record record : run.isEmpty() ? List.of(single) : run.values()) {
            if (record.copies > 1) {
                found++;
                InternalRow finding = CrossWalk.finding(record.first, AUDIT, CHECK, WARNING, UTF8String.fromString(
                        "logged " + record.copies + " times in " + record.files + " file(s)"), ONCE);
                finding.update(CrossWalk.FILE, record.least);
                out.add(finding);
            }
        }
        run.clear();
        single = null;
    }

    /**
     * The record key's columns that are not the run's: node, event, source, consumer, attempt, timestampMs, and the
     * ones that place a row (publicationId, shardKey, shardSeq, arrivalMs, departureMs): a run may hold rows of two
     * partitions that share a hash. Spark's UTF-8 strings compare and hash by their bytes.
     */
    private static List<Object> key(InternalRow row) {
        return Arrays.asList(CrossWalk.text(row, CrossWalk.NODE), CrossWalk.text(row, CrossWalk.EVENT),
                CrossWalk.text(row, CrossWalk.SOURCE), CrossWalk.text(row, CrossWalk.CONSUMER),
                row.isNullAt(CrossWalk.ATTEMPT) ? null : row.getInt(CrossWalk.ATTEMPT),
                number(row, CrossWalk.TIMESTAMP), CrossWalk.text(row, CrossWalk.PUBLICATION),
                CrossWalk.text(row, CrossWalk.SHARD_KEY), number(row, CrossWalk.SHARD_SEQ),
                number(row, CrossWalk.ARRIVAL), number(row, CrossWalk.DEPARTURE));
    }

    private static Long number(InternalRow row, int i) {
        return row.isNullAt(i) ? null : row.getLong(i);
    }
}
