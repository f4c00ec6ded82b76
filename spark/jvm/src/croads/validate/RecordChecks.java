package croads.validate;

import java.util.Collection;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The per-record rules of spark/rules.py ({@code records}: IP_012 latency, IP_033, IP_032, IP_016 and the
 * accounting checks) on one record of {@link CrossWalk}'s input, text for text, and the records each check of a
 * validate counts as checked ({@code counts} in spark/rules.py: a check's {@code records_scope}, counted as logged).
 */
final class RecordChecks {
    private RecordChecks() {
    }

    /** The checks whose checked records are counted here ("records:" + name). */
    static final List<String> COUNTED = List.of("latency", "delivered_after_expiry", "expired_undelivered", "dropped",
            "discarded", "unroutable", "rejected", "redelivery", "delivery_outcome", "properties",
            "record_logged_twice", "shard_order", "shard_gap", "duplicate", "spatem_after_mapem");
    /** Indexes into {@link CrossWalk.Counts#records}, in {@link #COUNTED}'s order. */
    static final int C_LATENCY = 0,
            C_DELIVERED_AFTER_EXPIRY = 1,
            C_EXPIRED_UNDELIVERED = 2,
            C_DROPPED = 3,
            C_DISCARDED = 4,
            C_UNROUTABLE = 5,
            C_REJECTED = 6,
            C_REDELIVERY = 7,
            C_DELIVERY_OUTCOME = 8,
            C_PROPERTIES = 9,
            C_RECORD_LOGGED_TWICE = 10,
            C_SHARD_ORDER = 11,
            C_SHARD_GAP = 12,
            C_DUPLICATE = 13,
            C_SPATEM_AFTER_MAPEM = 14;

    private static final UTF8String RECEIVED = u("received_message");
    private static final UTF8String SENT = u("sent_message");
    private static final UTF8String EXPIRED = u("expired_message");
    private static final UTF8String DROPPED = u("dropped_message");
    private static final UTF8String UNROUTABLE = u("unroutable_message");
    private static final UTF8String REJECTED = u("rejected_message");
    private static final UTF8String SPATEM = u("SPATEM");
    private static final UTF8String ACCEPTED = u("accepted");
    private static final UTF8String PRESETTLED = u("presettled");
    private static final String BUFFER_FULL = "buffer_full";
    private static final UTF8String AUDIT = u("AUDIT");
    private static final UTF8String INFO = u("info");
    private static final UTF8String WARNING = u("warning");
    private static final UTF8String ERROR = u("error");

    /** IP_012/IP_013's payload size and IP_012's bound (spark/rules.py PAYLOAD_LIMIT, LATENCY_LIMIT_MS). */
    static final class Limits implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final long payload;
        final long latencyMs;

        Limits(long payload, long latencyMs) {
            this.payload = payload;
            this.latencyMs = latencyMs;
        }
    }

    private static UTF8String u(String text) {
        return UTF8String.fromString(text);
    }

    private static String orQuestion(UTF8String value) {
        return value == null ? "?" : value.toString();
    }

    /** One record: its findings into {@code out}, its checked counts into {@code counts}. */
    static void check(InternalRow row, Limits limits, Set<String> on, Collection<InternalRow> out, CrossWalk.Counts counts) {
        UTF8String event = CrossWalk.text(row, CrossWalk.EVENT);
        boolean received = RECEIVED.equals(event);
        boolean sent = SENT.equals(event);
        int attempt = row.isNullAt(CrossWalk.ATTEMPT) ? 1 : row.getInt(CrossWalk.ATTEMPT);
        boolean arrived = !row.isNullAt(CrossWalk.ARRIVAL);
        boolean departed = !row.isNullAt(CrossWalk.DEPARTURE);
        delivery(row, limits, on, out, counts, sent, attempt, arrived, departed);
        accounted(row, on, out, counts, event, received);
        scopes(row, counts, received, sent && attempt == 1, arrived, departed);
    }

    private static void delivery(InternalRow row, Limits limits, Set<String> on, Collection<InternalRow> out,
                                 CrossWalk.Counts counts, boolean sent, int attempt, boolean arrived, boolean departed) {
        boolean small = row.isNullAt(CrossWalk.SIZE) || row.getLong(CrossWalk.SIZE) < limits.payload;
        if (sent && attempt == 1 && arrived && departed && small) {
            counts.records[C_LATENCY]++;
            long took = row.getLong(CrossWalk.DEPARTURE) - row.getLong(CrossWalk.ARRIVAL);
            if (on.contains("latency") && took >= limits.latencyMs) {
                out.add(CrossWalk.finding(row, u("IP_012"), u("latency"), ERROR, u(took + " ms"),
                        u("< " + limits.latencyMs + " ms")));
            }
        }
        if (sent && !row.isNullAt(CrossWalk.EXPIRY) && departed) {
            counts.records[C_DELIVERED_AFTER_EXPIRY]++;
            long late = row.getLong(CrossWalk.DEPARTURE) - row.getLong(CrossWalk.EXPIRY);
            if (on.contains("delivered_after_expiry") && late > 0) {
                out.add(CrossWalk.finding(row, u("IP_033"), u("delivered_after_expiry"), ERROR,
                        u("delivered " + late + " ms after expiry"), u("delivery before expiryMs")));
            }
        }
        if (sent) {
            counts.records[C_REDELIVERY]++;
            if (on.contains("redelivery") && attempt > 1) {
                out.add(CrossWalk.finding(row, AUDIT, u("redelivery"), INFO,
                        u("attempt " + attempt + " on " + orQuestion(CrossWalk.text(row, CrossWalk.SOURCE))),
                        u("attempt 1")));
            }
            UTF8String outcome = CrossWalk.text(row, CrossWalk.OUTCOME);
            if (outcome != null) {
                counts.records[C_DELIVERY_OUTCOME]++;
                if (on.contains("delivery_outcome") && !ACCEPTED.equals(outcome) && !PRESETTLED.equals(outcome)) {
                    out.add(CrossWalk.finding(row, AUDIT, u("delivery_outcome"), INFO, outcome, u("accepted")));
                }
            }
        }
    }

    private static void accounted(InternalRow row, Set<String> on, Collection<InternalRow> out, CrossWalk.Counts counts,
                                  UTF8String event, boolean received) {
        if (received) {
            counts.records[C_EXPIRED_UNDELIVERED]++;
            counts.records[C_DROPPED]++;
            counts.records[C_DISCARDED]++;
            counts.records[C_UNROUTABLE]++;
        }
        if (received || REJECTED.equals(event)) {
            counts.records[C_REJECTED]++;
        }
        String source = orQuestion(CrossWalk.text(row, CrossWalk.SOURCE));
        UTF8String reason = CrossWalk.text(row, CrossWalk.REASON);
        if (EXPIRED.equals(event) && on.contains("expired_undelivered")) {
            out.add(CrossWalk.finding(row, u("IP_033"), u("expired_undelivered"), INFO,
                    u("expired undelivered in " + source), u("delivered before expiry")));
        } else if (DROPPED.equals(event)) {
            String why = orQuestion(reason);
            UTF8String observed = u("dropped from " + source + ": " + why);
            if (BUFFER_FULL.equals(why)) {
                if (on.contains("dropped")) {
                    out.add(CrossWalk.finding(row, u("IP_032"), u("dropped"), WARNING, observed,
                            u("kept until delivered or expired")));
                }
            } else if (on.contains("discarded")) {
                out.add(CrossWalk.finding(row, AUDIT, u("discarded"), INFO, observed, u("delivered or expired")));
            }
        } else if (UNROUTABLE.equals(event) && on.contains("unroutable")) {
            out.add(CrossWalk.finding(row, AUDIT, u("unroutable"), INFO, u("no source took it"),
                    u("taken by a source")));
        } else if (REJECTED.equals(event) && on.contains("rejected")) {
            out.add(CrossWalk.finding(row, u("IP_016"), u("rejected"), WARNING,
                    reason == null ? u("no reason logged") : reason, u("a message that adheres to the profile")));
        }
    }

    /** The checked records of the checks counted over every record (spark/rules.py: their records_scope). */
    private static void scopes(InternalRow row, CrossWalk.Counts counts, boolean received, boolean firstDelivery,
                               boolean arrived, boolean departed) {
        boolean keyed = !row.isNullAt(CrossWalk.MESSAGE_ID);
        boolean sequenced = !row.isNullAt(CrossWalk.SHARD_SEQ);
        if (received && row.getBoolean(CrossWalk.PROPERTIES)) {
            counts.records[C_PROPERTIES]++;
        }
        if (keyed) {
            counts.records[C_RECORD_LOGGED_TWICE]++;
        }
        if (firstDelivery && sequenced && departed) {
            counts.records[C_SHARD_ORDER]++;
        }
        if (received && sequenced && keyed && !row.isNullAt(CrossWalk.SHARD_KEY)) {
            counts.records[C_SHARD_GAP]++;
        }
        if (received && !row.isNullAt(CrossWalk.PUBLICATION) && !row.isNullAt(CrossWalk.BODY)) {
            counts.records[C_DUPLICATE]++;
        }
        if (received && arrived && SPATEM.equals(CrossWalk.text(row, CrossWalk.TYPE))) {
            counts.records[C_SPATEM_AFTER_MAPEM]++;
        }
    }
}
