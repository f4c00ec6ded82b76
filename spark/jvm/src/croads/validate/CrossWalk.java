package croads.validate;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;
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
 * The rules comparing records of a shard or a publication, in one walk over rows Spark sorted (spark/rules.py,
 * {@code walk_rows}): IP_128 (shard order per link), the AUDIT shard gaps, IP_048/IP_124/IP_136 (gaps between a
 * publication's arrivals) and re-published copies, with the per-record rules ({@link RecordChecks}), IP_104 and the
 * records logged twice ({@link LoggedTwice}) on the way. Each record comes once per role it has ({@link #KIND}: of a
 * publication, of a shard's sequence, of a link, or alone; {@link #REC}: the row its per-record rules run on); the
 * rows of a role's window partition (node and the key columns {@link #K1}..{@link #K4}) share a hash and come in the
 * window's order, so the walk keeps only the previous row's state per partition ({@link Group}) and holds no
 * partition's rows, however long a publication is (Spark's sort spills). Rows of two partitions with one hash interleave; {@link Runs} tells them apart.
 * Re-published copies need a second order (by body): the publication walk hands each kept arrival with a body on
 * ({@link #MID}), Spark sorts them within the same partition, and {@link #copies} walks them. Findings are yielded
 * as they are found (a few per row at a time). They are the frames' findings, text for text (Spark's null
 * semantics of {@code concat} included); the checked rows of each check are counted in accumulators
 * ({@link #counts}).
 */
public final class CrossWalk implements Serializable {
    private static final long serialVersionUID = 1L;
    /** The input columns, in order. */
    static final int NODE = 0, PROCESS = 1, EVENT = 2, TIMESTAMP = 3, MESSAGE_ID = 4, PUBLICATION = 5, TYPE = 6,
            PUBLISHER = 7, CONSUMER = 8, FILE = 9, SOURCE = 10, SHARD_KEY = 11, SHARD_SEQ = 12, ARRIVAL = 13,
            DEPARTURE = 14, BODY = 15, KIND = 16, HASH = 17, ATTEMPT = 18, OUTCOME = 19, SIZE = 20, EXPIRY = 21,
            REASON = 22, PROPERTIES = 23, INTERSECTIONS = 24, REC = 25, K1 = 26, K2 = 27, K3 = 28, K4 = 29, O1 = 30;
    /** A row's role ({@link #KIND}): of a publication, of a shard's sequence, of a link; 0: a record alone. */
    static final int PUB = 1, SEQ = 2, LINK = 4;

    private final List<Gap> gaps = new ArrayList<>();
    private final Set<String> repeatedTypes = new HashSet<>();
    private final boolean order;
    private final boolean shardGap;
    private final boolean duplicates;
    /** Whether records logged twice are found ({@link LoggedTwice}). */
    private final boolean loggedTwice;
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
        loggedTwice = spec.get("loggedTwice").asBoolean();
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
        List<String> names = new ArrayList<>(List.of("shard_order", "shard_gap", "duplicate",
                "record_logged_twice"));
        gaps.forEach(g -> names.add(g.check));
        for (String name : RecordChecks.COUNTED) {
            names.add("records:" + name);
        }
        for (String name : names) {
            checked.put(name, spark.sparkContext().longAccumulator("checked-" + name));
        }
    }

    /** A walk of the checks {@code spec} (JSON: gaps, repeatedTypes, order, shardGap, duplicates, loggedTwice, ...)
     * names. */
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

    /**
     * The findings over {@code rows} (the columns of {@link #KIND}'s list, sorted as spark/rules.py
     * {@code walk_rows} sorts them), in the columns of {@link #MID} (its copy columns null).
     */
    public Dataset<Row> findings(Dataset<Row> rows) {
        org.apache.spark.sql.classic.Dataset<Row> classic = (org.apache.spark.sql.classic.Dataset<Row>) rows;
        CrossWalk walk = this;
        RDD<InternalRow> found = classic.queryExecution().toRdd().toJavaRDD().mapPartitions(
                (org.apache.spark.api.java.function.FlatMapFunction<Iterator<InternalRow>, InternalRow>)
                        it -> walk.walk(it)).rdd();
        org.apache.spark.sql.classic.Dataset<Row> mid = classic.sparkSession().internalCreateDataFrame(found, MID, false);
        if (!duplicates) {
            return mid;
        }
        // each partition holds whole publications: the kept arrivals with a body are sorted where they are
        org.apache.spark.sql.classic.Dataset<Row> sorted = (org.apache.spark.sql.classic.Dataset<Row>)
                mid.sortWithinPartitions("copyHash", "arrivalMs", "messageId", "file", "timestampMs", "node",
                        "publicationId", "body");
        RDD<InternalRow> copied = sorted.queryExecution().toRdd().toJavaRDD().mapPartitions(
                (org.apache.spark.api.java.function.FlatMapFunction<Iterator<InternalRow>, InternalRow>)
                        it -> walk.copies(it)).rdd();
        return classic.sparkSession().internalCreateDataFrame(copied, MID, false);
    }

    /** The output: the identity columns of spark/rules.py and a finding's fields ({@link #FINDING} of them). */
    static final int FINDING = 16;
    /** Columns of {@link #MID} after a finding's: a kept arrival's for the copies' walk (null in a finding). */
    static final int COPY_HASH = 16, COPY_BODY = 17, COPY_ARRIVAL = 18;
    /** A finding's columns (identity in the input's positions), then those of a kept arrival with a body. */
    public static final StructType MID = schema(new String[] {"node", "process", "event", "timestampMs",
        "messageId", "publicationId", "messageType", "publisher", "consumer", "file", "rule", "check", "severity",
        "property", "observed", "expected", "copyHash", "body", "arrivalMs"});

    private static StructType schema(String[] names) {
        StructField[] fields = new StructField[names.length];
        for (int i = 0; i < names.length; i++) {
            DataType type = names[i].equals("process") ? DataTypes.IntegerType
                    : names[i].equals("timestampMs") || names[i].equals("copyHash") || names[i].equals("arrivalMs")
                    ? DataTypes.LongType : DataTypes.StringType;
            fields[i] = DataTypes.createStructField(names[i], type, true);
        }
        return DataTypes.createStructType(fields);
    }

    // --- the walk ------------------------------------------------------------------------------------

    /** The findings of {@code rows} as they come (each input row's few at a time), then the counts. */
    private abstract static class Lazily implements Iterator<InternalRow> {
        final ArrayDeque<InternalRow> out = new ArrayDeque<>();
        private final Iterator<InternalRow> rows;
        private boolean done;

        Lazily(Iterator<InternalRow> rows) {
            this.rows = rows;
        }

        abstract void step(InternalRow row);

        abstract void finish();

        @Override
        public boolean hasNext() {
            while (out.isEmpty()) {
                if (done) {
                    return false;
                }
                if (rows.hasNext()) {
                    step(rows.next());
                } else {
                    done = true;
                    finish();
                }
            }
            return true;
        }

        @Override
        public InternalRow next() {
            if (!hasNext()) {
                throw new NoSuchElementException();
            }
            return out.poll();
        }
    }

    /**
     * What a role keeps of one window partition (a group): its key (node and the key columns, copied), then
     * for a publication the previous row's messageId and arrival and each gap check's previous kept arrival;
     * for a shard the highest shardSeq below the current one and the current one; for a link the highest
     * shardSeq of the departures before the current one, the current departure and its highest shardSeq.
     */
    static final class Group {
        final List<UTF8String> key;
        boolean first = true;
        UTF8String previousId;
        boolean previousArrivalNull;
        long previousArrival;
        final long[] last;
        final boolean[] seen;
        boolean has;
        long below;
        long current;
        long departure;
        long departureMax;

        Group(List<UTF8String> key, int gaps) {
            this.key = key;
            last = new long[gaps];
            seen = new boolean[gaps];
        }
    }

    /** A group's key in a row: {@code columns}' values, copied (the row's bytes are reused). */
    static List<UTF8String> key(InternalRow row, int[] columns) {
        UTF8String[] key = new UTF8String[columns.length];
        for (int i = 0; i < columns.length; i++) {
            UTF8String value = text(row, columns[i]);
            key[i] = value == null ? null : value.clone();
        }
        return java.util.Arrays.asList(key);
    }

    /** Whether {@code row}'s {@code columns} hold {@code key}. */
    static boolean holds(List<UTF8String> key, InternalRow row, int[] columns) {
        for (int i = 0; i < columns.length; i++) {
            if (compareNullable(key.get(i), text(row, columns[i])) != 0) {
                return false;
            }
        }
        return true;
    }

    /**
     * The groups of one run of rows with the same hash (and role): the rows come sorted by hash, role, then their
     * order, so the rows of two groups with one hash (rare) are interleaved; each group keeps its own state.
     */
    static final class Runs<G> {
        private final int[] columns;
        private final java.util.function.Function<List<UTF8String>, G> create;
        private long hash;
        private int kind;
        private List<UTF8String> key;
        private G current;
        /** The other groups of the run, when there are (null: one group). */
        private Map<List<UTF8String>, G> others;
        /** Whether the last row was its group's first. */
        boolean fresh;

        Runs(int[] columns, java.util.function.Function<List<UTF8String>, G> create) {
            this.columns = columns;
            this.create = create;
        }

        G group(InternalRow row, long hash, int kind) {
            fresh = false;
            if (current != null && hash == this.hash && kind == this.kind) {
                if (holds(key, row, columns)) {
                    return current;
                }
                if (others == null) {
                    others = new HashMap<>();
                }
                others.put(key, current);
                key = key(row, columns);
                current = others.get(key);
                if (current != null) {
                    return current;
                }
            } else {
                this.hash = hash;
                this.kind = kind;
                others = null;
                key = key(row, columns);
            }
            fresh = true;
            current = create.apply(key);
            return current;
        }
    }

    /** A walk row's group: its node and its role's key columns. */
    private static final int[] GROUP = {NODE, K1, K2, K3, K4};

    Iterator<InternalRow> walk(Iterator<InternalRow> rows) {
        Counts counts = new Counts();
        int gapCount = gaps.size();
        Runs<Group> runs = new Runs<>(GROUP, key -> new Group(key, gapCount));
        LoggedTwice twice = loggedTwice ? new LoggedTwice() : null;
        return new Lazily(rows) {
            @Override
            void step(InternalRow row) {
                if (twice != null && row.getBoolean(REC) && !row.isNullAt(MESSAGE_ID)) {
                    twice.add(row, out);
                }
                CrossWalk.this.step(row, runs, counts, out);
            }

            @Override
            void finish() {
                if (twice != null) {
                    twice.finish(out);
                    counts.add("record_logged_twice", twice.found);
                }
                counts.add(checked);
            }
        };
    }

    private void step(InternalRow row, Runs<Group> runs, Counts counts, ArrayDeque<InternalRow> out) {
        if (row.getBoolean(REC)) {
            RecordChecks.check(row, limits, recordChecks, out, counts);
            if (mapems != null) {
                spatem(row, out);
            }
        }
        int kind = row.getInt(KIND);
        if (kind == 0) {
            return;
        }
        Group group = runs.group(row, row.getLong(HASH), kind);
        if (kind == PUB) {
            arrival(row, group, counts, out);
        } else if (kind == SEQ) {
            sequence(row, group, runs.fresh, counts, out);
        } else {
            link(row, group, runs.fresh, counts, out);
        }
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

    // --- a publication: gaps between arrivals, re-published copies ----------------------------------------

    /**
     * One row of a publication in arrival order (arrivalMs, messageId, file, timestampMs): a copy of the
     * previous row (the same messageId and arrival: a record logged twice) is skipped; else its gap checks,
     * and with a body it goes on to the copies' walk.
     */
    private void arrival(InternalRow row, Group state, Counts counts, ArrayDeque<InternalRow> out) {
        UTF8String id = text(row, MESSAGE_ID);
        boolean arrivalNull = row.isNullAt(ARRIVAL);
        long arrival = arrivalNull ? 0 : row.getLong(ARRIVAL);
        boolean again = !state.first && id != null && id.equals(state.previousId)
                && arrivalNull == state.previousArrivalNull && (arrivalNull || arrival == state.previousArrival);
        state.first = false;
        state.previousId = id == null ? null : id.clone();
        state.previousArrivalNull = arrivalNull;
        state.previousArrival = arrival;
        if (again) {
            return;
        }
        arrivalGaps(row, state.last, state.seen, out, counts);
        if (!row.isNullAt(BODY)) {
            counts.add("duplicate", 1);
            if (duplicates) {
                out.add(kept(row));
            }
        }
    }

    /** The gap checks of one kept arrival of a publication; {@code last}/{@code seen}: each check's previous one. */
    private void arrivalGaps(InternalRow row, long[] last, boolean[] seen, ArrayDeque<InternalRow> out,
                             Counts counts) {
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

    /** A kept arrival with a body, for the copies' walk ({@link #MID}): its body's hash in its publication's. */
    private static InternalRow kept(InternalRow row) {
        Object[] values = identity(row);
        UTF8String body = row.getUTF8String(BODY);
        values[COPY_HASH] = row.getLong(HASH) * 0x9E3779B97F4A7C15L + body.hashCode();
        values[COPY_BODY] = body;
        values[COPY_ARRIVAL] = row.isNullAt(ARRIVAL) ? null : row.getLong(ARRIVAL);
        return new GenericInternalRow(values);
    }

    /**
     * The copies' walk: the kept arrivals of a publication with one body in arrival order (then messageId), each
     * after the first a finding (its copy number and the first's arrival); the findings before them passed on.
     */
    Iterator<InternalRow> copies(Iterator<InternalRow> rows) {
        Runs<long[]> runs = new Runs<>(BODY_GROUP, key -> new long[3]);  // copies, first arrival null (1), first
        return new Lazily(rows) {
            @Override
            void step(InternalRow row) {
                if (row.isNullAt(COPY_HASH)) {
                    out.add(row);
                    return;
                }
                long[] body = runs.group(row, row.getLong(COPY_HASH), 0);
                if (runs.fresh) {
                    body[1] = row.isNullAt(COPY_ARRIVAL) ? 1 : 0;
                    body[2] = row.isNullAt(COPY_ARRIVAL) ? 0 : row.getLong(COPY_ARRIVAL);
                }
                long copies = ++body[0];
                if (copies > 1) {
                    UTF8String type = text(row, TYPE);
                    String severity = type != null && repeatedTypes.contains(type.toString()) ? "info" : "warning";
                    UTF8String observed = body[1] == 1 ? null : UTF8String.fromString(
                            "copy " + copies + " (another messageId), first arrived at " + body[2]);
                    out.add(finding(row, AUDIT, DUPLICATE, UTF8String.fromString(severity), observed, ONE_COPY));
                }
            }

            @Override
            void finish() {
            }
        };
    }

    /** A body's group in the copies' walk ({@link #MID}'s columns): node, publication, body. */
    private static final int[] BODY_GROUP = {NODE, PUBLICATION, COPY_BODY};

    // --- IP_104: a SPATEM after a MAPEM of its intersections ---------------------------------------------

    private static final UTF8String SPATEM = UTF8String.fromString("SPATEM");
    private static final UTF8String RECEIVED = UTF8String.fromString("received_message");
    /** spark/rules.py {@code _intersections}: {@code regexp_replace(id, '^,|,$', '')} split at commas. */
    private static final Pattern EDGE_COMMAS = Pattern.compile("^,|,$");

    /** A received SPATEM: its least intersection no MAPEM arrived for before it at the node (spark/rules.py spatems). */
    private void spatem(InternalRow row, ArrayDeque<InternalRow> out) {
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

    /**
     * One received message of a shard (node, admission sequence {@link #K1}, shardKey) in shardSeq order: a gap
     * below its shardSeq (the previous one's, a copy of the same record is no step) is a finding.
     */
    private void sequence(InternalRow row, Group state, boolean fresh, Counts counts, ArrayDeque<InternalRow> out) {
        counts.add("shard_gap", 1);
        long seq = row.getLong(SHARD_SEQ);
        if (fresh) {
            state.current = seq;
        }
        if (seq != state.current) {
            state.below = state.current;
            state.has = true;
            state.current = seq;
        }
        if (shardGap && state.has && seq - state.below - 1 > 0) {
            long low = state.below + 1;
            long high = seq - 1;
            String span = low == high ? Long.toString(low) : low + "-" + high;
            UTF8String admission = text(row, K1);
            UTF8String observed = admission == null ? null : UTF8String.fromString("shardSeq " + span + " of "
                    + text(row, SHARD_KEY) + " missing (" + (seq - state.below - 1) + " admitted, not logged; in "
                    + admission + ")");
            out.add(finding(row, AUDIT, SHARD_GAP, WARNING, observed, UTF8String.fromString("shardSeq " + low + " next")));
        }
    }

    // --- a link: deliveries in admission order -------------------------------------------------------------

    /**
     * One first delivery of a link (node, admission sequence, source, consumer, shardKey) in departure order:
     * a shardSeq below the highest one departed strictly earlier is a finding.
     */
    private void link(InternalRow row, Group state, boolean fresh, Counts counts, ArrayDeque<InternalRow> out) {
        counts.add("shard_order", 1);
        long departure = row.getLong(DEPARTURE);
        long seq = row.getLong(SHARD_SEQ);
        if (fresh) {
            state.departure = departure;
            state.departureMax = Long.MIN_VALUE;
        } else if (departure != state.departure) {
            state.below = state.has ? Math.max(state.below, state.departureMax) : state.departureMax;
            state.has = true;
            state.departure = departure;
            state.departureMax = Long.MIN_VALUE;
        }
        if (order && state.has && seq < state.below) {
            UTF8String key = text(row, SHARD_KEY);
            UTF8String observed = key == null ? null
                    : UTF8String.fromString("shardSeq " + seq + " after " + state.below + " on " + key);
            out.add(finding(row, IP_128, SHARD_ORDER, ERROR, observed, INCREASING));
        }
        state.departureMax = Math.max(state.departureMax, seq);
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

    /** A row of {@link #MID} with {@code row}'s identity columns (the input's first ten) and nothing else. */
    private static Object[] identity(InternalRow row) {
        Object[] values = new Object[MID.size()];
        values[NODE] = text(row, NODE);
        values[PROCESS] = row.isNullAt(PROCESS) ? null : row.getInt(PROCESS);
        values[EVENT] = text(row, EVENT);
        values[TIMESTAMP] = row.isNullAt(TIMESTAMP) ? null : row.getLong(TIMESTAMP);
        for (int i = MESSAGE_ID; i <= FILE; i++) {
            values[i] = text(row, i);
        }
        return values;
    }

    /** A finding about {@code row} (its identity columns are the input's first ten, in {@link #MID}'s places). */
    static InternalRow finding(InternalRow row, UTF8String rule, UTF8String check, UTF8String severity,
                               UTF8String observed, UTF8String expected) {
        Object[] values = identity(row);
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
}
