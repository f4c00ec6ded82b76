package croads.ingest;

import java.io.Serializable;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.CatalystTypeConverters$;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.KnownNotNull;
import org.apache.spark.sql.catalyst.expressions.UnsafeMapData;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeArrayWriter;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.catalyst.util.LegacyDateFormats$;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.catalyst.util.TimestampFormatter;
import org.apache.spark.sql.catalyst.util.TimestampFormatter$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.IntegerType$;
import org.apache.spark.sql.types.LongType$;
import org.apache.spark.sql.types.StringType$;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Option;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.List$;
import scala.collection.immutable.Seq;

import croads.catalyst.JavaExpression;

/**
 * A log line and its file to the row the ingest writes: the line's row in the messages table's layout
 * (spark/tables.py MESSAGES), written by this class into an {@link UnsafeRow}, when the line is a valid record of a
 * message event; otherwise null, and the line's row as spark/parse.py {@code parse} has it (value only for a
 * corrupt line, file, r, the properties, details, timestampMs, corruptReason) is handed to {@link KeepAside}.
 *
 * <p>The same rows as spark/parse.py {@code parse} followed by {@code messages} (the reference; the tests hold the
 * two equal): the line is read by {@link ParseLine}, the record's checks follow in the order of
 * {@code spark.parse.REASONS}, and each column is derived as {@code spark.parse.messages} derives it, with the same
 * Spark functions (a string cast to a number as {@code try_cast} does, ISO times as {@code try_cast(... as
 * timestamp)}, the partition date as {@code date_format}). Spark then only copies the row's fields into the sort's
 * row: no generated projection of ~80 fields out of the parse's nested struct.
 *
 * <p>Registered by spark/parse.py ({@link #register}); the texts of the reasons, the names and the ranges are its
 * contract ({@link Record}).
 */
public final class IngestLine extends JavaExpression implements Serializable {
    private static final long serialVersionUID = 1L;

    /** What spark/parse.py hands over besides the line parser's contract: the record checks and the layout. */
    public static final class Record implements Serializable {
        private static final long serialVersionUID = 1L;
        final long maxLineBytes;
        final int keptChars;
        /** TOO_LONG, VERSION_MISSING, the prefix of VERSION_UNKNOWN, timestamp, event, level missing. */
        final String[] reasons;
        final int[] versions;
        final String[] levels;
        final String[] messageEvents;
        /** The event whose consumer is its identity (v1), the events whose source is their address. */
        final String sent;
        final String[] deliveries;
        final long[] epochRange;
        final String[] epochFields;
        final String messagesJson;
        /** The parsed rows' schema (spark/parse.py parse's): the rows kept aside. */
        final String parsedJson;
        final String zone;

        Record(String[] reasons, String[] settings) {
            if (reasons.length != 6) {
                throw new IllegalArgumentException("6 record reasons expected, got " + reasons.length);
            }
            if (settings.length != 12) {
                throw new IllegalArgumentException("12 record settings expected, got " + settings.length);
            }
            this.reasons = reasons;
            maxLineBytes = Long.parseLong(settings[0]);
            keptChars = Integer.parseInt(settings[1]);
            versions = Arrays.stream(settings[2].split(",")).mapToInt(Integer::parseInt).toArray();
            levels = settings[3].split(",");
            messageEvents = settings[4].split(",");
            sent = settings[5];
            deliveries = settings[6].split(",");
            epochRange = Arrays.stream(settings[7].split(",")).mapToLong(Long::parseLong).toArray();
            epochFields = settings[8].split(",");
            messagesJson = settings[9];
            parsedJson = settings[10];
            zone = settings[11];
        }

        private String key() {
            return maxLineBytes + "|" + keptChars + "|" + String.join(",", reasons) + "|" + Arrays.toString(versions)
                    + "|" + String.join(",", levels) + "|" + String.join(",", messageEvents) + "|" + sent + "|"
                    + String.join(",", deliveries) + "|" + Arrays.toString(epochRange) + "|"
                    + String.join(",", epochFields) + "|" + messagesJson + "|" + parsedJson
                    + "|" + zone;
        }

        @Override
        public boolean equals(Object other) {
            return other instanceof Record && key().equals(((Record) other).key());
        }

        @Override
        public int hashCode() {
            return key().hashCode();
        }

        @Override
        public String toString() {
            return "log record contract";
        }
    }

    /** The suffix of the name of the function that marks a column never null. */
    public static final String KNOWN_NOT_NULL = "_known_not_null";

    /** The aside row's fields (spark/parse.py parse's columns), in this order. */
    static final String[] ASIDE = {"value", "file", "r", "_standard", "_standardKinds", "_otherProperties",
        "_otherKinds", "_details", "timestampMs", "corruptReason"};

    private final Expression line;
    private final Expression file;
    /** The rows that are not messages are handed to it, as the parsed rows ({@link #aside}). */
    private final KeepAside keep;
    private final StructType aside;
    private final Seq<Expression> children;
    private final ParseLine.Contract contract;
    private final Record record;
    private final ParseLine parseLine;
    private final StructType messages;
    private final Columns columns;
    /** The record's texts as Spark's strings: the six reasons, the levels, the message events, sent, deliveries. */
    private final UTF8String[] reasons;
    private final UTF8String[] levels;
    private final UTF8String[] messageEvents;
    private final UTF8String sent;
    private final UTF8String[] deliveries;
    private transient volatile ThreadLocal<State> states;

    public IngestLine(Expression line, Expression file, ParseLine.Contract contract, Record record, KeepAside keep) {
        this.line = line;
        this.file = file;
        this.children = List$.MODULE$.<Expression>empty().$colon$colon(file).$colon$colon(line);
        this.contract = contract;
        this.record = record;
        this.keep = keep;
        this.parseLine = new ParseLine(line, contract, true);
        this.aside = (StructType) DataType.fromJson(record.parsedJson);
        if (!Arrays.equals(aside.fieldNames(), ASIDE)) {
            throw new IllegalArgumentException("the parsed rows' columns are " + String.join(",", aside.fieldNames())
                    + ", not " + String.join(",", ASIDE));
        }
        this.messages = (StructType) DataType.fromJson(record.messagesJson);
        this.columns = new Columns(messages, contract, record);
        this.reasons = utf8(record.reasons);
        this.levels = utf8(record.levels);
        this.messageEvents = utf8(record.messageEvents);
        this.sent = UTF8String.fromString(record.sent);
        this.deliveries = utf8(record.deliveries);
    }

    /**
     * Registers the expression as the function {@code name} of the session: two arguments, the line and its file;
     * and as {@code name} + {@link #KNOWN_NOT_NULL} Spark's {@code KnownNotNull}: a column of its row that is never
     * null (its node, its file when the file is not), so marked as Spark SQL's derivation has it.
     *
     * @param fields, standard, reasons, nonNumber as {@link ParseLine#register}
     * @param checks   the reasons of the record checks, separated by line feeds: TOO_LONG, VERSION_MISSING,
     *                 VERSION_UNKNOWN_PREFIX (the version follows it), TIMESTAMP_MISSING, EVENT_MISSING, LEVEL_MISSING
     * @param settings the {@link Record}'s settings, separated by line feeds (a list's items by commas): the
     *                 longest line's bytes, the characters kept of a longer one, the readable versions, the levels,
     *                 the message events, the event sent, the deliveries, the epoch-ms range, the epoch-ms fields,
     *                 the messages schema (JSON), the parsed rows' schema (JSON), the session's time zone
     * @param keep     where the rows that are not messages go ({@link KeepAside#create})
     */
    public static void register(org.apache.spark.sql.classic.SparkSession spark, String name, String fields,
                                String standard, String reasons, String nonNumber, String checks, String settings,
                                KeepAside keep) {
        ParseLine.Contract contract = new ParseLine.Contract(fields.split(","), standard.split(","),
                reasons.split("\n", -1), nonNumber);
        Record record = new Record(checks.split("\n", -1), settings.split("\n", -1));
        new IngestLine(null, null, contract, record, keep);  // the contract checked now, not in the first task
        spark.sessionState().functionRegistry().createOrReplaceTempFunction(name, arguments -> {
            if (arguments.size() != 2) {
                throw new IllegalArgumentException(name + " takes two arguments (the line, its file), not "
                        + arguments.size());
            }
            return new IngestLine(arguments.apply(0), arguments.apply(1), contract, record, keep);
        }, "java_udf");
        spark.sessionState().functionRegistry().createOrReplaceTempFunction(name + KNOWN_NOT_NULL, arguments -> {
            if (arguments.size() != 1) {
                throw new IllegalArgumentException(name + KNOWN_NOT_NULL + " takes one argument");
            }
            return new KnownNotNull(arguments.apply(0));
        }, "java_udf");
    }

    private static UTF8String[] utf8(String[] texts) {
        UTF8String[] utf8 = new UTF8String[texts.length];
        for (int i = 0; i < texts.length; i++) {
            utf8[i] = UTF8String.fromString(texts[i]);
        }
        return utf8;
    }

    /** How each column of the messages table is derived (spark/parse.py messages), by position. */
    static final class Columns implements Serializable {
        private static final long serialVersionUID = 1L;
        static final int TEXT = 0, INT = 1, LONG = 2, EPOCH = 3, EPOCH_OR_ISO = 4, TIMESTAMP = 5, CONSUMER = 6,
            SOURCE = 7, TEXT_OR_STANDARD = 8, STANDARD_TEXT = 9, SHARD_ID = 10, REASON = 11, STANDARD = 12,
            STANDARD_KINDS = 13, PROPERTIES = 14, KINDS = 15, FILE = 16, NODE = 17, DATE = 18;
        final int[] op;
        /** The field of r (or of the standard properties) each column reads, and a second one (-1: none). */
        final int[] first;
        final int[] second;
        final int width;
        final int standardWidth;
        final int schemaVersion, timestampMs, timestamp, level, event, identity, address, node;

        Columns(StructType messages, ParseLine.Contract contract, Record record) {
            Map<String, Integer> fields = index(contract.fields);
            Map<String, Integer> standard = index(contract.standard);
            width = contract.fields.length;
            standardWidth = contract.standard.length;
            schemaVersion = at(fields, "schemaVersion");
            timestampMs = at(fields, "timestampMs");
            timestamp = at(fields, "timestamp");
            level = at(fields, "level");
            event = at(fields, "event");
            identity = at(fields, "identity");
            address = at(fields, "address");
            node = at(fields, "node");
            StructField[] columns = messages.fields();
            op = new int[columns.length];
            first = new int[columns.length];
            second = new int[columns.length];
            Arrays.fill(second, -1);
            DataType text = StringType$.MODULE$;
            DataType map = DataTypes.createMapType(text, text, true);
            DataType struct = ((StructType) ParseLine.returnType(contract)).apply("standard").dataType();
            for (int i = 0; i < columns.length; i++) {
                String name = columns[i].name();
                DataType type = columns[i].dataType();
                switch (name) {
                    case "timestampMs": set(i, TIMESTAMP, -1, -1, type, LongType$.MODULE$); break;
                    case "standardProperties": set(i, STANDARD, -1, -1, type, struct); break;
                    case "standardKinds": set(i, STANDARD_KINDS, -1, -1, type, struct); break;
                    case "otherProperties": set(i, PROPERTIES, -1, -1, type, map); break;
                    case "otherKinds": set(i, KINDS, -1, -1, type, map); break;
                    case "file": set(i, FILE, -1, -1, type, text); break;
                    case "node": set(i, NODE, node, -1, type, text); break;
                    case "date": set(i, DATE, -1, -1, type, text); break;
                    case "messageType": case "publicationId":
                        set(i, TEXT_OR_STANDARD, at(fields, name), at(standard, name), type, text); break;
                    case "publisherId": set(i, STANDARD_TEXT, at(standard, name), -1, type, text); break;
                    case "shardId": set(i, SHARD_ID, at(fields, name), at(standard, name), type, LongType$.MODULE$); break;
                    case "arrivalMs": case "departureMs":
                        set(i, EPOCH_OR_ISO, at(fields, name), at(fields, name.replace("Ms", "Time")), type,
                            LongType$.MODULE$);
                        break;
                    case "consumer": set(i, CONSUMER, at(fields, name), -1, type, text); break;
                    case "source": set(i, SOURCE, at(fields, name), -1, type, text); break;
                    case "reason": set(i, REASON, at(fields, name), -1, type, text); break;
                    default:
                        int field = at(fields, name);
                        if (type.equals(text)) {
                            set(i, TEXT, field, -1, type, text);
                        } else if (type.equals(IntegerType$.MODULE$)) {
                            set(i, INT, field, -1, type, type);
                        } else if (type.equals(LongType$.MODULE$)) {
                            set(i, Arrays.asList(record.epochFields).contains(name) ? EPOCH : LONG, field, -1, type,
                                type);
                        } else {
                            throw new IllegalArgumentException("no derivation of column " + name + " (" + type + ")");
                        }
                }
            }
        }

        private void set(int i, int what, int a, int b, DataType type, DataType expected) {
            if (!type.equals(expected)) {
                throw new IllegalArgumentException("column " + i + " is " + type + ", derived as " + expected);
            }
            op[i] = what;
            first[i] = a;
            second[i] = b;
        }

        private static Map<String, Integer> index(String[] names) {
            Map<String, Integer> index = new HashMap<>();
            for (int i = 0; i < names.length; i++) {
                index.put(names[i], i);
            }
            return index;
        }

        private static int at(Map<String, Integer> index, String name) {
            Integer at = index.get(name);
            if (at == null) {
                throw new IllegalArgumentException("the line's fields have no " + name);
            }
            return at;
        }
    }

    /** A task thread's writers (the message row is written again for each line: Spark copies it at once). */
    private final class State {
        final UnsafeRowWriter row = new UnsafeRowWriter(messages.size(), 1024);
        final UnsafeRowWriter standard = new UnsafeRowWriter(row, columns.standardWidth);
        final UnsafeArrayWriter keys = new UnsafeArrayWriter(row, 8);
        final UnsafeArrayWriter values = new UnsafeArrayWriter(row, 8);
        final ZoneId zone = ZoneId.of(record.zone);
        final boolean utc = zone.normalized().equals(ZoneOffset.UTC);
        final TimestampFormatter dates = TimestampFormatter$.MODULE$.apply("yyyy-MM-dd", zone,
                LegacyDateFormats$.MODULE$.SIMPLE_DATE_FORMAT(), false);
        final scala.Function1<Object, Object> toRow = CatalystTypeConverters$.MODULE$.createToScalaConverter(aside);
        long day = Long.MIN_VALUE;
        UTF8String date;
        /** The line's timestampMs (valid when {@link #hasTimestamp}). */
        long timestampMs;
        boolean hasTimestamp;

        UTF8String date(long ms) {
            long micros = Math.multiplyExact(ms, 1000L);
            if (!utc) {
                return UTF8String.fromString(dates.format(micros));
            }
            long of = Math.floorDiv(ms, 86_400_000L);
            if (of != day) {
                date = UTF8String.fromString(dates.format(micros));
                day = of;
            }
            return date;
        }
    }

    private State state() {
        ThreadLocal<State> local = states;
        if (local == null) {
            synchronized (this) {
                if (states == null) {
                    states = ThreadLocal.withInitial(State::new);
                }
                local = states;
            }
        }
        return local.get();
    }

    /** The line's row (called by the generated code); the line is not null. */
    public UnsafeRow ingest(UTF8String text, UTF8String path) {
        State state = state();
        boolean tooLong = text.numBytes() > record.maxLineBytes;
        InternalRow read = tooLong ? null : parseLine.parse(text);
        InternalRow r = read == null || read.isNullAt(1) ? null : read.getStruct(1, columns.width);
        timestampMs(state, r);
        UTF8String reason = tooLong ? reasons[0]
                : !read.isNullAt(0) ? read.getUTF8String(0) : check(state, r);
        if (reason == null && among(text(r, columns.event), messageEvents)) {
            return message(state, r, read, path);
        }
        keep.keep((Row) state.toRow.apply(aside(state, text, path, tooLong, read, r, reason)));
        return null;
    }

    /** The record checks after the JSON's (spark/parse.py parse's reason, from schemaVersion on). */
    private UTF8String check(State state, InternalRow r) {
        Integer version = toInt(text(r, columns.schemaVersion));
        if (version == null || version < 1) {
            return reasons[1];
        }
        boolean readable = false;
        for (int known : record.versions) {
            readable |= known == version;
        }
        if (!readable) {
            return UTF8String.fromString(record.reasons[2] + version);
        }
        if (!state.hasTimestamp) {
            return reasons[3];
        }
        UTF8String event = text(r, columns.event);
        if (event == null || event.numBytes() == 0) {
            return reasons[4];
        }
        if (!among(text(r, columns.level), levels)) {
            return reasons[5];
        }
        return null;
    }

    private void timestampMs(State state, InternalRow r) {
        Long ms = epoch(toLong(text(r, columns.timestampMs)));
        if (ms == null) {
            ms = epoch(isoMs(state, text(r, columns.timestamp)));
        }
        state.hasTimestamp = ms != null;
        state.timestampMs = ms == null ? 0 : ms;
    }

    private InternalRow aside(State state, UTF8String text, UTF8String path, boolean tooLong, InternalRow read,
                              InternalRow r, UTF8String reason) {
        UTF8String value = reason == null ? null : tooLong ? text.substringSQL(1, record.keptChars) : text;
        return new GenericInternalRow(new Object[] {
            value, path, r,
            read == null ? null : read.get(5, null), read == null ? null : read.get(6, null),
            read == null ? null : read.get(2, null), read == null ? null : read.get(3, null),
            read == null ? null : read.get(4, null),
            state.hasTimestamp ? (Object) state.timestampMs : null, reason,
        });
    }

    private UnsafeRow message(State state, InternalRow r, InternalRow read, UTF8String path) {
        UnsafeRowWriter row = state.row;
        row.reset();
        row.zeroOutNullBytes();
        Columns c = columns;
        InternalRow standard = read.isNullAt(5) ? null : read.getStruct(5, c.standardWidth);
        UTF8String event = text(r, c.event);
        for (int i = 0; i < c.op.length; i++) {
            int a = c.first[i];
            switch (c.op[i]) {
                case Columns.TEXT: string(row, i, text(r, a)); break;
                case Columns.INT: {
                    Integer value = toInt(text(r, a));
                    if (value == null) {
                        row.setNullAt(i);
                    } else {
                        row.write(i, (int) value);
                    }
                    break;
                }
                case Columns.LONG: number(row, i, toLong(text(r, a))); break;
                case Columns.EPOCH: number(row, i, epoch(toLong(text(r, a)))); break;
                case Columns.EPOCH_OR_ISO: {
                    Long ms = epoch(toLong(text(r, a)));
                    number(row, i, ms != null ? ms : epoch(isoMs(state, text(r, c.second[i]))));
                    break;
                }
                case Columns.TIMESTAMP: row.write(i, state.timestampMs); break;
                case Columns.CONSUMER: {
                    UTF8String value = text(r, a);
                    string(row, i, value != null ? value
                            : event.equals(sent) ? text(r, c.identity) : null);
                    break;
                }
                case Columns.SOURCE: {
                    UTF8String value = text(r, a);
                    string(row, i, value != null ? value
                            : among(event, deliveries) ? text(r, c.address) : null);
                    break;
                }
                case Columns.TEXT_OR_STANDARD: {
                    UTF8String value = text(r, a);
                    string(row, i, value != null ? value : text(standard, c.second[i]));
                    break;
                }
                case Columns.STANDARD_TEXT: string(row, i, text(standard, a)); break;
                case Columns.SHARD_ID: {
                    Long value = toLong(text(r, a));
                    number(row, i, value != null ? value : toLong(text(standard, c.second[i])));
                    break;
                }
                case Columns.REASON: {
                    UTF8String value = text(r, a);
                    string(row, i, value != null ? value : lookup(read.isNullAt(4) ? null : read.getMap(4), "reason"));
                    break;
                }
                case Columns.STANDARD: struct(state, i, standard); break;
                case Columns.STANDARD_KINDS: struct(state, i, read.isNullAt(6) ? null : read.getStruct(6, c.standardWidth));
                    break;
                case Columns.PROPERTIES: map(state, i, read.isNullAt(2) ? null : read.getMap(2)); break;
                case Columns.KINDS: map(state, i, read.isNullAt(3) ? null : read.getMap(3)); break;
                case Columns.FILE: string(row, i, path); break;
                case Columns.NODE: {
                    UTF8String node = text(r, a);
                    row.write(i, node != null ? node : UNKNOWN);
                    break;
                }
                case Columns.DATE: row.write(i, state.date(state.timestampMs)); break;
                default: throw new IllegalStateException("column " + i);
            }
        }
        return row.getRow();
    }

    private static final UTF8String UNKNOWN = UTF8String.fromString("unknown");

    private static UTF8String text(InternalRow row, int i) {
        return row == null || i < 0 || row.isNullAt(i) ? null : row.getUTF8String(i);
    }

    private static boolean among(UTF8String value, UTF8String[] texts) {
        if (value == null) {
            return false;
        }
        for (UTF8String text : texts) {
            if (value.equals(text)) {
                return true;
            }
        }
        return false;
    }

    private static UTF8String lookup(MapData map, String key) {
        if (map == null) {
            return null;
        }
        ArrayData keys = map.keyArray();
        UTF8String wanted = UTF8String.fromString(key);
        for (int i = 0; i < map.numElements(); i++) {
            if (keys.getUTF8String(i).binaryEquals(wanted)) {
                ArrayData values = map.valueArray();
                return values.isNullAt(i) ? null : values.getUTF8String(i);
            }
        }
        return null;
    }

    /** {@code try_cast(text as int)}: Spark's exact parse (no fraction), null when it fails. */
    static Integer toInt(UTF8String text) {
        if (text == null) {
            return null;
        }
        try {
            return text.toIntExact();
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /** {@code try_cast(text as bigint)}. */
    static Long toLong(UTF8String text) {
        if (text == null) {
            return null;
        }
        try {
            return text.toLongExact();
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /** {@code unix_millis(try_cast(text as timestamp))}. */
    private static Long isoMs(State state, UTF8String text) {
        if (text == null) {
            return null;
        }
        Option<Object> micros = DateTimeUtils.stringToTimestamp(text, state.zone);
        return micros.isDefined() ? Math.floorDiv((Long) micros.get(), 1000L) : null;
    }

    private Long epoch(Long ms) {
        return ms != null && ms >= record.epochRange[0] && ms <= record.epochRange[1] ? ms : null;
    }

    private static void string(UnsafeRowWriter row, int i, UTF8String value) {
        if (value == null) {
            row.setNullAt(i);
        } else {
            row.write(i, value);
        }
    }

    private static void number(UnsafeRowWriter row, int i, Long value) {
        if (value == null) {
            row.setNullAt(i);
        } else {
            row.write(i, (long) value);
        }
    }

    private void struct(State state, int i, InternalRow texts) {
        UnsafeRowWriter row = state.row;
        if (texts == null) {
            row.setNullAt(i);
        } else if (texts instanceof UnsafeRow) {
            row.write(i, (UnsafeRow) texts);
        } else {
            int start = row.cursor();
            UnsafeRowWriter nested = state.standard;
            nested.resetRowWriter();
            for (int j = 0; j < columns.standardWidth; j++) {
                string(nested, j, texts.isNullAt(j) ? null : texts.getUTF8String(j));
            }
            row.setOffsetAndSizeFromPreviousCursor(i, start);
        }
    }

    /** A map of texts, laid out as Spark's generated projection writes one. */
    private static void map(State state, int i, MapData map) {
        UnsafeRowWriter row = state.row;
        if (map == null) {
            row.setNullAt(i);
            return;
        }
        if (map instanceof UnsafeMapData) {
            row.write(i, (UnsafeMapData) map);
            return;
        }
        int start = row.cursor();
        row.grow(8);
        row.increaseCursor(8);
        int keysAt = row.cursor();
        int n = map.numElements();
        ArrayData keys = map.keyArray();
        state.keys.initialize(n);
        for (int k = 0; k < n; k++) {
            state.keys.write(k, keys.getUTF8String(k));
        }
        Platform.putLong(row.getBuffer(), keysAt - 8, row.cursor() - keysAt);
        ArrayData values = map.valueArray();
        state.values.initialize(n);
        for (int k = 0; k < n; k++) {
            if (values.isNullAt(k)) {
                state.values.setNull8Bytes(k);
            } else {
                state.values.write(k, values.getUTF8String(k));
            }
        }
        row.setOffsetAndSizeFromPreviousCursor(i, start);
    }

    @Override
    public Seq<Expression> children() {
        return children;
    }

    @Override
    public DataType dataType() {
        return messages;
    }

    @Override
    public boolean nullable() {
        return true;
    }

    /**
     * Not deterministic: it hands the rows that are not messages to {@link KeepAside} (Spark must not move, repeat
     * or copy it into each field that reads its row: the filter on its row stays above it).
     */
    @Override
    public boolean deterministic() {
        return false;
    }

    /** Expensive, as {@link ParseLine} is: never copied into the fields that read its row. */
    @Override
    public boolean expensive() {
        return true;
    }

    @Override
    public Object eval(InternalRow input) {
        Object text = line.eval(input);
        Object path = file.eval(input);
        UnsafeRow row = text == null ? null : ingest((UTF8String) text, (UTF8String) path);
        return row == null ? null : row.copy();  // the generated code's row is written again for each line
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        String self = ctx.addReferenceObj("ingestLine", this, IngestLine.class.getName());
        ExprCode text = line.genCode(ctx);
        ExprCode path = file.genCode(ctx);
        String code = text.code() + "\n" + path.code() + "\n"
                + "boolean " + ev.isNull() + " = " + text.isNull() + ";\n"
                + "InternalRow " + ev.value() + " = null;\n"
                + "if (!" + ev.isNull() + ") {\n"
                + "  " + ev.value() + " = " + self + ".ingest(" + text.value() + ", " + path.isNull() + " ? null : "
                + path.value() + ");\n"
                + "  " + ev.isNull() + " = " + ev.value() + " == null;\n"
                + "}";
        return withCode(ev, code);
    }

    @Override
    protected Object[] arguments() {
        return new Object[] {line, file, contract, record, keep};
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
        return new IngestLine(newChildren.apply(0), newChildren.apply(1), contract, record, keep);
    }

    @Override
    public String prettyName() {
        return "croads_ingest_line";
    }
}
