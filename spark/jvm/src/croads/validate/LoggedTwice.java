package croads.validate;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
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

    private final List<Record> run = new ArrayList<>(4);
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
        if (run.isEmpty() || rowHash != hash || rowKind != kind || rowOrderNull != orderNull || rowOrder != order
                || !id.equals(messageId)) {
            finish(out);
            hash = rowHash;
            kind = rowKind;
            orderNull = rowOrderNull;
            order = rowOrder;
        } else {
            for (Record record : run) {
                if (sameRecord(record.first, row)) {
                    record.again(CrossWalk.text(row, CrossWalk.FILE));
                    return;
                }
            }
        }
        Record record = new Record(row);
        messageId = record.first.getUTF8String(CrossWalk.MESSAGE_ID);
        run.add(record);
    }

    /** The run's findings (its records seen more than once); the run is then empty. */
    void finish(ArrayDeque<InternalRow> out) {
        for (Record record : run) {
            if (record.copies > 1) {
                found++;
                InternalRow finding = CrossWalk.finding(record.first, AUDIT, CHECK, WARNING, UTF8String.fromString(
                        "logged " + record.copies + " times in " + record.files + " file(s)"), ONCE);
                finding.update(CrossWalk.FILE, record.least);
                out.add(finding);
            }
        }
        run.clear();
    }

    /**
     * The record key's columns that are not the run's: node, event, source, consumer, attempt, timestampMs, and the
     * ones that place a row (publicationId, shardKey, shardSeq, arrivalMs, departureMs): a run may hold rows of two
     * partitions that share a hash.
     */
    private static boolean sameRecord(InternalRow a, InternalRow b) {
        return same(a, b, CrossWalk.NODE) && same(a, b, CrossWalk.EVENT) && same(a, b, CrossWalk.SOURCE)
                && same(a, b, CrossWalk.CONSUMER) && sameNumber(a, b, CrossWalk.ATTEMPT, false)
                && sameNumber(a, b, CrossWalk.TIMESTAMP, true) && same(a, b, CrossWalk.PUBLICATION)
                && same(a, b, CrossWalk.SHARD_KEY) && sameNumber(a, b, CrossWalk.SHARD_SEQ, true)
                && sameNumber(a, b, CrossWalk.ARRIVAL, true) && sameNumber(a, b, CrossWalk.DEPARTURE, true);
    }

    private static boolean same(InternalRow a, InternalRow b, int i) {
        UTF8String x = CrossWalk.text(a, i);
        UTF8String y = CrossWalk.text(b, i);
        return x == null ? y == null : x.equals(y);
    }

    private static boolean sameNumber(InternalRow a, InternalRow b, int i, boolean wide) {
        if (a.isNullAt(i) || b.isNullAt(i)) {
            return a.isNullAt(i) && b.isNullAt(i);
        }
        return wide ? a.getLong(i) == b.getLong(i) : a.getInt(i) == b.getInt(i);
    }
}
