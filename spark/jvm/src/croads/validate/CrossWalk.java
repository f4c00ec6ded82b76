package croads.validate;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.LongAccumulator;

/**
 * The rules comparing records of a shard or a publication, in one walk over rows sorted by group (spark/rules.py,
 * {@code walked}): IP_128 (shard order per link), the AUDIT shard gaps, IP_048/IP_124/IP_136 (gaps between a
 * publication's arrivals) and re-published copies. Each row comes once per group it needs (columns {@link #IN});
 * the rows of one group are consecutive (sorted by the group's hash; rows of two groups with one hash are told
 * apart here). A group's rows are ordered in Java as each rule's window in spark/rules.py orders them, and the
 * findings are those rules' findings, text for text (Spark's null semantics of {@code concat} included). The
 * checked rows of each check are counted in accumulators ({@link #counts}).
 */
public final class CrossWalk implements Serializable {
    private static final long serialVersionUID = 1L;
    /** The input columns, in order. */
    static final int NODE = 0, PROCESS = 1, EVENT = 2, TIMESTAMP = 3, MESSAGE_ID = 4, PUBLICATION = 5, TYPE = 6,
            PUBLISHER = 7, CONSUMER = 8, FILE = 9, SOURCE = 10, SHARD_KEY = 11, SHARD_SEQ = 12, ARRIVAL = 13,
            DEPARTURE = 14, BODY = 15, ROLES = 16, HASH = 17, ATTEMPT = 18, OUTCOME = 19, SIZE = 20, EXPIRY = 21,
            REASON = 22, PROPERTIES = 23, INTERSECTIONS = 24;
    /** Roles of an input row (bits): of a publication, of a shard's sequence, of a link, a record checked alone. */
    static final int PUB = 1, SEQ = 2, LINK = 4, REC = 8;
    /** The messageId's admission sequence (spark/rules.py {@code admission}), for ids with a line terminator. */
    private static final Pattern ADMISSION = Pattern.compile("^(.+)/[0-9]+$");

    private final List<Gap> gaps = new ArrayList<>();
    private final Set<String> repeatedTypes = new HashSet<>();
    private final boolean order;
    private final boolean shardGap;
    private final boolean duplicates;
    private final Map<String, LongAccumulator> checked = new LinkedHashMap<>();
    /** The per-record checks that run (the walk counts every one's checked records anyway). */
    private final Set<String> recordChecks = new HashSet<>();
    private final RecordChecks.Limits limits;
    /** IP_104 (null: not run): per node, the first MAPEM arrival per intersection. */
    private final Map<UTF8String, Map<UTF8String, Long>> mapems;

    /** A gap check between a publication's arrivals. */
    static final class Gap implements Serializable {
        private static final long serialVersionUID = 1L;
        final String check;
        final UTF8String rule;
        final UTF8String checkText;
        final UTF8String severity;
        final UTF8String expected;
        final Set<UTF8String> types = new HashSet<>();
        final long low;
        final long high;

        Gap(JsonNode spec) {
            check = spec.get("check").asText();
            checkText = UTF8String.fromString(check);
            rule = UTF8String.fromString(spec.get("rule").asText());
            severity = UTF8String.fromString(spec.get("severity").asText());
            expected = UTF8String.fromString(spec.get("expected").asText());
            spec.get("types").forEach(t -> types.add(UTF8String.fromString(t.asText())));
            low = spec.get("low").asLong();
            high = spec.get("high").asLong();
        }
    }

    private CrossWalk(org.apache.spark.sql.classic.SparkSession spark, JsonNode spec) {
        for (JsonNode gap : spec.get("gaps")) {
            gaps.add(new Gap(gap));
        }
        spec.get("repeatedTypes").forEach(t -> repeatedTypes.add(t.asText()));
        order = spec.get("order").asBoolean();
        shardGap = spec.get("shardGap").asBoolean();
        duplicates = spec.get("duplicates").asBoolean();
        spec.get("records").forEach(c -> recordChecks.add(c.asText()));
        limits = new RecordChecks.Limits(spec.get("payloadLimit").asLong(), spec.get("latencyLimitMs").asLong());
        if (spec.get("spatems").asBoolean()) {
            mapems = new HashMap<>();
            for (Map.Entry<String, JsonNode> node : spec.get("mapems").properties()) {
                Map<UTF8String, Long> first = new HashMap<>();
                for (Map.Entry<String, JsonNode> i : node.getValue().properties()) {
                    first.put(UTF8String.fromString(i.getKey()), i.getValue().asLong());
                }
                mapems.put(UTF8String.fromString(node.getKey()), first);
            }
        } else {
            mapems = null;
        }
        List<String> names = new ArrayList<>(List.of("shard_order", "shard_gap", "duplicate"));
        gaps.forEach(g -> names.add(g.check));
        for (String name : RecordChecks.COUNTED) {
            names.add("records:" + name);
        }
        for (String name : names) {
            checked.put(name, spark.sparkContext().longAccumulator("checked-" + name));
        }
    }

    /** A walk of the checks {@code spec} (JSON: gaps, repeatedTypes, order, shardGap, duplicates) names. */
    public static CrossWalk create(org.apache.spark.sql.classic.SparkSession spark, String spec) {
        try {
            return new CrossWalk(spark, new ObjectMapper().readTree(spec));
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
    }

    /** The rows each check checked, once the findings of {@link #findings} were computed. */
    public Map<String, Long> counts() {
        Map<String, Long> out = new LinkedHashMap<>();
        checked.forEach((name, accumulator) -> out.put(name, accumulator.value()));
        return out;
    }

    /** The findings over {@code rows} (columns {@link #IN}, each group's rows consecutive). */
    public Dataset<Row> findings(Dataset<Row> rows) {
        org.apache.spark.sql.classic.Dataset<Row> classic = (org.apache.spark.sql.classic.Dataset<Row>) rows;
        RDD<InternalRow> input = classic.queryExecution().toRdd();
        CrossWalk walk = this;
        RDD<InternalRow> found = input.toJavaRDD().mapPartitions(
                (org.apache.spark.api.java.function.FlatMapFunction<Iterator<InternalRow>, InternalRow>)
                        it -> walk.walk(it)).rdd();
        return classic.sparkSession().internalCreateDataFrame(found, OUT, false);
    }

    /** The output: the identity columns of spark/rules.py and a finding's fields. */
    public static final StructType OUT = schema(new String[] {"node", "process", "event", "timestampMs",
        "messageId", "publicationId", "messageType", "publisher", "consumer", "file", "rule", "check", "severity",
        "property", "observed", "expected"});

    private static StructType schema(String[] names) {
        StructField[] fields = new StructField[names.length];
        for (int i = 0; i < names.length; i++) {
            DataType type = names[i].equals("process") ? DataTypes.IntegerType
                    : names[i].equals("timestampMs") ? DataTypes.LongType : DataTypes.StringType;
            fields[i] = DataTypes.createStructField(names[i], type, true);
        }
        return DataTypes.createStructType(fields);
    }

    // --- the walk ------------------------------------------------------------------------------------

    Iterator<InternalRow> walk(Iterator<InternalRow> rows) {
        Counts counts = new Counts();
        return new Iterator<>() {
            private final List<InternalRow> run = new ArrayList<>();
            private List<InternalRow> out = new ArrayList<>();
            private int next;
            private InternalRow pending;
            private boolean done;

            @Override
            public boolean hasNext() {
                while (next >= out.size()) {
                    if (done) {
                        return false;
                    }
                    fill();
                }
                return true;
            }

            @Override
            public InternalRow next() {
                if (!hasNext()) {
                    throw new NoSuchElementException();
                }
                return out.get(next++);
            }

            private void fill() {
                out = new ArrayList<>();
                next = 0;
                run.clear();
                if (pending == null) {
                    if (!rows.hasNext()) {
                        finish();
                        return;
                    }
                    pending = rows.next().copy();
                }
                long hash = pending.getLong(HASH);
                run.add(pending);
                pending = null;
                while (rows.hasNext()) {
                    InternalRow row = rows.next();
                    if (row.getLong(HASH) != hash) {
                        pending = row.copy();
                        break;
                    }
                    run.add(row.copy());
                }
                for (List<InternalRow> group : groups(run)) {
                    group(group, out, counts);
                }
                if (pending == null && !rows.hasNext()) {
                    finish();
                }
            }

            private void finish() {
                done = true;
                counts.add(checked);
            }
        };
    }

    /** The rows of one hash, by group (node and group text): usually one. */
    private static List<List<InternalRow>> groups(List<InternalRow> run) {
        Map<List<UTF8String>, List<InternalRow>> by = new LinkedHashMap<>();
        for (InternalRow row : run) {
            List<UTF8String> key = java.util.Arrays.asList(text(row, NODE), group(row));
            by.computeIfAbsent(key, k -> new ArrayList<>()).add(row);
        }
        return new ArrayList<>(by.values());
    }

    /** The group a row's roles need (spark/rules.py {@code walk_rows}): its publication, its shard's, its message. */
    static UTF8String group(InternalRow row) {
        int roles = row.getInt(ROLES);
        if ((roles & PUB) != 0) {
            return text(row, PUBLICATION);
        }
        if ((roles & (SEQ | LINK)) != 0) {
            UTF8String key = text(row, SHARD_KEY);
            if (key == null) {
                return null;
            }
            // substring(shardKey, 1, length(shardKey) - length(substring_index(shardKey, '#', -1)) - 1)
            String text = key.toString();
            int hash = text.lastIndexOf('#');
            return UTF8String.fromString(hash < 0 ? "" : text.substring(0, hash));
        }
        return text(row, MESSAGE_ID);
    }

    /** Rows checked per check, per task (added to the accumulators once at the end). */
    static final class Counts {
        final Map<String, long[]> by = new HashMap<>();
        /** The checked records of {@link RecordChecks#COUNTED}. */
        final long[] records = new long[RecordChecks.COUNTED.size()];

        void add(String check, long n) {
            by.computeIfAbsent(check, k -> new long[1])[0] += n;
        }

        void add(Map<String, LongAccumulator> into) {
            for (int i = 0; i < records.length; i++) {
                add("records:" + RecordChecks.COUNTED.get(i), records[i]);
            }
            by.forEach((check, n) -> {
                LongAccumulator accumulator = into.get(check);
                if (accumulator != null) {
                    accumulator.add(n[0]);
                }
            });
        }
    }

    private void group(List<InternalRow> rows, List<InternalRow> out, Counts counts) {
        List<InternalRow> pub = new ArrayList<>();
        List<Keyed> seq = new ArrayList<>();
        List<Keyed> link = new ArrayList<>();
        for (InternalRow row : rows) {
            int roles = row.getInt(ROLES);
            if ((roles & REC) != 0) {
                RecordChecks.check(row, limits, recordChecks, out, counts);
                if (mapems != null) {
                    spatem(row, out);
                }
            }
            if ((roles & PUB) != 0) {
                pub.add(row);
            }
            if ((roles & (SEQ | LINK)) != 0) {
                UTF8String admission = admission(text(row, MESSAGE_ID));
                if ((roles & SEQ) != 0) {
                    seq.add(new Keyed(row, admission));
                }
                if ((roles & LINK) != 0) {
                    link.add(new Keyed(row, admission));
                }
            }
        }
        if (!pub.isEmpty()) {
            publication(pub, out, counts);
        }
        if (!seq.isEmpty()) {
            sequences(seq, out, counts);
        }
        if (!link.isEmpty()) {
            links(link, out, counts);
        }
    }

    /** A row with its admission sequence. */
    static final class Keyed {
        final InternalRow row;
        final UTF8String admission;

        Keyed(InternalRow row, UTF8String admission) {
            this.row = row;
            this.admission = admission;
        }
    }

    // --- a publication: gaps between arrivals, re-published copies ----------------------------------------

    private static final Comparator<InternalRow> ARRIVALS = (a, b) -> {
        int c = compareLong(a, b, ARRIVAL);
        if (c == 0) {
            c = compareText(a, b, MESSAGE_ID);
        }
        if (c == 0) {
            c = compareText(a, b, FILE);
        }
        return c != 0 ? c : compareLong(a, b, TIMESTAMP);
    };

    private void publication(List<InternalRow> rows, List<InternalRow> out, Counts counts) {
        rows.sort(ARRIVALS);
        long[] last = new long[gaps.size()];
        boolean[] seen = new boolean[gaps.size()];
        Map<UTF8String, long[]> bodies = new HashMap<>();  // body -> copies, first arrival (MIN: null)
        InternalRow before = null;
        long checkedCopies = 0;
        for (InternalRow row : rows) {
            InternalRow previous = before;
            before = row;
            UTF8String id = text(row, MESSAGE_ID);
            if (previous != null && id != null && id.equals(text(previous, MESSAGE_ID))
                    && sameLong(previous, row, ARRIVAL)) {
                continue;  // the same record again (logged twice): kept once
            }
            arrivalGaps(row, last, seen, out, counts);
            if (!row.isNullAt(BODY)) {
                checkedCopies++;
                copy(row, bodies, out);
            }
        }
        counts.add("duplicate", checkedCopies);
    }

    /** The gap checks of one kept arrival of a publication; {@code last}/{@code seen}: each check's previous one. */
    private void arrivalGaps(InternalRow row, long[] last, boolean[] seen, List<InternalRow> out, Counts counts) {
        if (row.isNullAt(ARRIVAL) || row.isNullAt(TYPE)) {
            return;
        }
        long arrival = row.getLong(ARRIVAL);
        UTF8String type = row.getUTF8String(TYPE);
        for (int i = 0; i < gaps.size(); i++) {
            Gap gap = gaps.get(i);
            if (!gap.types.contains(type)) {
                continue;
            }
            if (seen[i]) {
                counts.add(gap.check, 1);
                long took = arrival - last[i];
                if (took < gap.low || took > gap.high) {
                    out.add(finding(row, gap.rule, gap.checkText, gap.severity,
                            UTF8String.fromString(took + " ms since the previous one"), gap.expected));
                }
            }
            last[i] = arrival;
            seen[i] = true;
        }
    }

    /** Re-published copies: the copy number of a kept arrival's body in the publication (a row with a body). */
    private void copy(InternalRow row, Map<UTF8String, long[]> bodies, List<InternalRow> out) {
        long first = row.isNullAt(ARRIVAL) ? Long.MIN_VALUE : row.getLong(ARRIVAL);
        long[] copies = bodies.computeIfAbsent(row.getUTF8String(BODY), k -> new long[] {0, first});
        copies[0]++;
        if (duplicates && copies[0] > 1) {
            UTF8String type = text(row, TYPE);
            String severity = type != null && repeatedTypes.contains(type.toString()) ? "info" : "warning";
            UTF8String observed = copies[1] == Long.MIN_VALUE ? null : UTF8String.fromString(
                    "copy " + copies[0] + " (another messageId), first arrived at " + copies[1]);
            out.add(finding(row, AUDIT, DUPLICATE, UTF8String.fromString(severity), observed, ONE_COPY));
        }
    }

    // --- IP_104: a SPATEM after a MAPEM of its intersections ---------------------------------------------

    private static final UTF8String SPATEM = UTF8String.fromString("SPATEM");
    private static final UTF8String RECEIVED = UTF8String.fromString("received_message");
    /** spark/rules.py {@code _intersections}: {@code regexp_replace(id, '^,|,$', '')} split at commas. */
    private static final Pattern EDGE_COMMAS = Pattern.compile("^,|,$");

    /** A received SPATEM: its least intersection no MAPEM arrived for before it at the node (spark/rules.py spatems). */
    private void spatem(InternalRow row, List<InternalRow> out) {
        if (row.isNullAt(ARRIVAL) || !SPATEM.equals(text(row, TYPE)) || !RECEIVED.equals(text(row, EVENT))) {
            return;
        }
        UTF8String ids = text(row, INTERSECTIONS);
        String list = EDGE_COMMAS.matcher(ids == null ? "" : ids.toString()).replaceAll("");
        UTF8String node = text(row, NODE);
        Map<UTF8String, Long> first = node == null ? null : mapems.get(node);
        long arrival = row.getLong(ARRIVAL);
        UTF8String early = null;
        for (String item : list.split(",", -1)) {
            if (item.isEmpty()) {
                continue;
            }
            UTF8String intersection = UTF8String.fromString(item);
            Long mapem = first == null ? null : first.get(intersection);
            if ((mapem == null || mapem > arrival) && (early == null || intersection.binaryCompare(early) < 0)) {
                early = intersection;
            }
        }
        if (early != null) {
            out.add(finding(row, UTF8String.fromString("IP_104"), UTF8String.fromString("spatem_after_mapem"), ERROR,
                    UTF8String.fromString("SPATEM before any MAPEM of intersection '" + early + "'"),
                    UTF8String.fromString("a MAPEM of the same intersection earlier")));
        }
    }

    // --- a shard: gaps in its admission sequence ---------------------------------------------------------

    private static final Comparator<Keyed> SHARDS = (a, b) -> {
        int c = compareNullable(a.admission, b.admission);
        if (c == 0) {
            c = compareText(a.row, b.row, SHARD_KEY);
        }
        return c != 0 ? c : Long.compare(a.row.getLong(SHARD_SEQ), b.row.getLong(SHARD_SEQ));
    };

    private void sequences(List<Keyed> rows, List<InternalRow> out, Counts counts) {
        rows.sort(SHARDS);
        counts.add("shard_gap", rows.size());
        Keyed first = null;
        boolean has = false;
        long below = 0;  // the highest shardSeq below the current one in the shard
        long current = 0;
        for (Keyed k : rows) {
            if (first == null || !sameShard(first, k)) {
                first = k;
                has = false;
                current = k.row.getLong(SHARD_SEQ);
            }
            long seq = k.row.getLong(SHARD_SEQ);
            if (seq != current) {
                below = current;
                has = true;
                current = seq;
            }
            if (shardGap && has && seq - below - 1 > 0) {
                long low = below + 1;
                long high = seq - 1;
                String span = low == high ? Long.toString(low) : low + "-" + high;
                UTF8String observed = k.admission == null ? null : UTF8String.fromString("shardSeq " + span + " of "
                        + text(k.row, SHARD_KEY) + " missing (" + (seq - below - 1) + " admitted, not logged; in "
                        + k.admission + ")");
                out.add(finding(k.row, AUDIT, SHARD_GAP, WARNING, observed,
                        UTF8String.fromString("shardSeq " + low + " next")));
            }
        }
    }

    private static boolean sameShard(Keyed a, Keyed b) {
        return compareNullable(a.admission, b.admission) == 0 && compareText(a.row, b.row, SHARD_KEY) == 0;
    }

    // --- a link: deliveries in admission order -------------------------------------------------------------

    private static final Comparator<Keyed> LINKS = (a, b) -> {
        int c = compareNullable(a.admission, b.admission);
        if (c == 0) {
            c = compareText(a.row, b.row, SOURCE);
        }
        if (c == 0) {
            c = compareText(a.row, b.row, CONSUMER);
        }
        if (c == 0) {
            c = compareText(a.row, b.row, SHARD_KEY);
        }
        return c != 0 ? c : Long.compare(a.row.getLong(DEPARTURE), b.row.getLong(DEPARTURE));
    };

    private static boolean sameLink(Keyed a, Keyed b) {
        return compareNullable(a.admission, b.admission) == 0 && compareText(a.row, b.row, SOURCE) == 0
                && compareText(a.row, b.row, CONSUMER) == 0 && compareText(a.row, b.row, SHARD_KEY) == 0;
    }

    private void links(List<Keyed> rows, List<InternalRow> out, Counts counts) {
        rows.sort(LINKS);
        counts.add("shard_order", rows.size());
        int start = 0;
        while (start < rows.size()) {
            int end = start + 1;
            while (end < rows.size() && sameLink(rows.get(start), rows.get(end))) {
                end++;
            }
            link(rows.subList(start, end), out);
            start = end;
        }
    }

    /** One link's rows in departure order: each against the highest shardSeq departed strictly earlier. */
    private void link(List<Keyed> rows, List<InternalRow> out) {
        boolean has = false;
        long highest = 0;
        int i = 0;
        while (i < rows.size()) {
            long departure = rows.get(i).row.getLong(DEPARTURE);
            int end = i;
            long groupMax = Long.MIN_VALUE;
            while (end < rows.size() && rows.get(end).row.getLong(DEPARTURE) == departure) {
                InternalRow row = rows.get(end).row;
                long seq = row.getLong(SHARD_SEQ);
                if (order && has && seq < highest) {
                    UTF8String key = text(row, SHARD_KEY);
                    UTF8String observed = key == null ? null
                            : UTF8String.fromString("shardSeq " + seq + " after " + highest + " on " + key);
                    out.add(finding(row, IP_128, SHARD_ORDER, ERROR, observed, INCREASING));
                }
                groupMax = Math.max(groupMax, seq);
                end++;
            }
            highest = has ? Math.max(highest, groupMax) : groupMax;
            has = true;
            i = end;
        }
    }

    // --- values ----------------------------------------------------------------------------------------------

    private static final UTF8String AUDIT = UTF8String.fromString("AUDIT");
    private static final UTF8String DUPLICATE = UTF8String.fromString("duplicate");
    private static final UTF8String ONE_COPY = UTF8String.fromString("one copy per body");
    private static final UTF8String SHARD_GAP = UTF8String.fromString("shard_gap");
    private static final UTF8String WARNING = UTF8String.fromString("warning");
    private static final UTF8String ERROR = UTF8String.fromString("error");
    private static final UTF8String IP_128 = UTF8String.fromString("IP_128");
    private static final UTF8String SHARD_ORDER = UTF8String.fromString("shard_order");
    private static final UTF8String INCREASING = UTF8String.fromString("increasing shardSeq per shard and consumer");

    static InternalRow finding(InternalRow row, UTF8String rule, UTF8String check, UTF8String severity,
                                       UTF8String observed, UTF8String expected) {
        Object[] values = new Object[16];
        values[0] = text(row, NODE);
        values[1] = row.isNullAt(PROCESS) ? null : row.getInt(PROCESS);
        values[2] = text(row, EVENT);
        values[3] = row.isNullAt(TIMESTAMP) ? null : row.getLong(TIMESTAMP);
        for (int i = MESSAGE_ID; i <= FILE; i++) {
            values[i] = text(row, i);
        }
        values[10] = rule;
        values[11] = check;
        values[12] = severity;
        values[13] = null;
        values[14] = observed;
        values[15] = expected;
        return new GenericInternalRow(values);
    }

    static UTF8String text(InternalRow row, int i) {
        return row.isNullAt(i) ? null : row.getUTF8String(i);
    }

    /** Spark's ascending order, nulls first. */
    private static int compareNullable(UTF8String a, UTF8String b) {
        if (a == null || b == null) {
            return a == null ? (b == null ? 0 : -1) : 1;
        }
        return a.binaryCompare(b);
    }

    private static int compareText(InternalRow a, InternalRow b, int i) {
        return compareNullable(text(a, i), text(b, i));
    }

    private static int compareLong(InternalRow a, InternalRow b, int i) {
        boolean an = a.isNullAt(i);
        boolean bn = b.isNullAt(i);
        if (an || bn) {
            return an ? (bn ? 0 : -1) : 1;
        }
        return Long.compare(a.getLong(i), b.getLong(i));
    }

    private static boolean sameLong(InternalRow a, InternalRow b, int i) {
        return compareLong(a, b, i) == 0;
    }

    /** spark/rules.py {@code admission}: {@code nullif(regexp_extract(messageId, '^(.+)/[0-9]+$', 1), '')}. */
    static UTF8String admission(UTF8String id) {
        if (id == null) {
            return null;
        }
        String text = id.toString();
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '\n' || c == '\r' || c == '\u0085' || c == '\u2028' || c == '\u2029') {
                Matcher m = ADMISSION.matcher(text);
                String found = m.find() ? m.group(1) : "";
                return found.isEmpty() ? null : UTF8String.fromString(found);
            }
        }
        int slash = text.lastIndexOf('/');
        if (slash <= 0 || slash == text.length() - 1) {
            return null;
        }
        for (int i = slash + 1; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c < '0' || c > '9') {
                return null;
            }
        }
        return UTF8String.fromString(text.substring(0, slash));
    }
}
