package croads.ingest;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * One strict pass over a JSON log line's bytes (spark/parse.py owns the contract: the field names, the
 * reasons' texts and their order, the NaN pattern; they are handed to the constructor).
 *
 * <p>A line is a record only when it is valid UTF-8, has no lone UTF-16 surrogate escape and is exactly one
 * JSON object (RFC 8259: no NaN/Infinity, no single quotes, no comments) with no key given twice at its top
 * level, in {@code applicationProperties} or in {@code details}, and no number in exponent form too large for
 * a double. Otherwise {@link Result#reason} says why: the first of the reasons in the order of
 * {@code spark.parse.REASONS} (the checks on the record's values, schema version, timestamp, event, level, are
 * made by spark/parse.py on the fields returned). A UTF-8 byte order mark before the object is skipped.
 *
 * <p>The field values are text as Spark's {@code from_json} gives a string column: a JSON string decoded,
 * any other value as compact JSON (numbers as Jackson reads them: {@code 1e5} is {@code 100000.0}), JSON null
 * as null. {@code details}, when an object, is returned as a map of such texts in the order written;
 * {@code applicationProperties}, when an object, as the values and JSON kinds of tables 1-7's properties by
 * position and two maps of the other properties' values and kinds in the order written (each value once).
 *
 * <p>Not thread-safe (it reuses buffers): one instance per task.
 */
public final class LineParser {
    /** What a line is: a reason, or the fields of a record. */
    public static final class Result {
        public String reason;
        public final String[] fields;
        public Map<String, String> properties;
        public Map<String, String> kinds;
        public Map<String, String> details;
        /** The values and kinds of the properties of tables 1-7 by position (null: absent). */
        public String[] standard;
        public String[] standardKinds;

        Result(int width) {
            fields = new String[width];
        }
    }

    /** The reasons' texts, from spark/parse.py, in the order they are tested. */
    public static final class Reasons {
        final String notUtf8, surrogate, nonNumber, trailing, notObject, malformed, duplicateKey, outOfRange;

        public Reasons(String notUtf8, String surrogate, String nonNumber, String trailing, String notObject,
                       String malformed, String duplicateKey, String outOfRange) {
            this.notUtf8 = notUtf8;
            this.surrogate = surrogate;
            this.nonNumber = nonNumber;
            this.trailing = trailing;
            this.notObject = notObject;
            this.malformed = malformed;
            this.duplicateKey = duplicateKey;
            this.outOfRange = outOfRange;
        }
    }

    static final String PROPERTIES = "applicationProperties";
    static final String DETAILS = "details";

    private final KeyIndex index;
    private final RecordScanner scanner;
    private final int width;
    private final KeyIndex standardIndex;
    private final int standardWidth;
    private final Reasons reasons;
    private final Pattern nonNumber;
    private final JsonFactory factory;
    private final ByteArrayOutputStream buffer = new ByteArrayOutputStream(256);
    /** The top-level keys seen on this line: the known fields by index (the line's number), the others by name. */
    private final long[] seenField;
    private long lineNumber;
    private final Set<String> otherTopKeys = new HashSet<>();
    private final List<String> repeated = new ArrayList<>();
    private final List<String> repeatedProperties = new ArrayList<>();
    private final List<String> repeatedDetails = new ArrayList<>();
    private String firstHuge;

    /**
     * @param fields    the top-level fields returned (in this order), without applicationProperties/details
     * @param standard  the properties of tables 1-7, returned by position ({@link Result#standard})
     * @param nonNumber a regex whose group 1 is non-empty at a NaN/Infinity value outside strings
     */
    public LineParser(String[] fields, String[] standard, Reasons reasons, String nonNumber) {
        this.index = new KeyIndex(fields);
        this.scanner = new RecordScanner(fields, standard);
        this.width = fields.length;
        this.seenField = new long[fields.length];
        this.standardIndex = new KeyIndex(standard);
        this.standardWidth = standard.length;
        this.reasons = reasons;
        this.nonNumber = Pattern.compile(nonNumber);
        // the factory's defaults are RFC 8259 as Spark's JSON options have them (no NaN, no single quotes,
        // no comments, no leading zeros, no unescaped control characters); a string may be as long as a line
        this.factory = JsonFactory.builder()
                .streamReadConstraints(StreamReadConstraints.builder().maxStringLength(Integer.MAX_VALUE).build())
                .build();
    }

    /**
     * The line (without its line feed) as the values of {@link ParseLine}'s row when it is plainly one record
     * ({@link RecordScanner}: no Jackson, no Java strings); null when {@link #parse} must read it.
     */
    public Object[] scan(byte[] line) {
        return scanBytes(line) == 0 ? scanner.record(line, hasBom(line) ? 3 : 0) : null;
    }

    /** The line (without its line feed) as a record or a reason (the strict path: Jackson). */
    public Result parse(byte[] line) {
        Result result = new Result(width);
        int start = hasBom(line) ? 3 : 0;
        switch (scanBytes(line)) {
            case 1:
                result.reason = reasons.notUtf8;
                return result;
            case 2:
                result.reason = reasons.surrogate;
                return result;
            default:
                break;
        }
        if (!readObject(line, start, result)) {
            clear(result);
            result.reason = notOneObject(line, start);
            return result;
        }
        if (!repeated.isEmpty() || !repeatedProperties.isEmpty() || !repeatedDetails.isEmpty()) {
            clear(result);
            StringBuilder text = new StringBuilder(reasons.duplicateKey).append(": ");
            String separator = "";
            for (String key : repeated) {
                text.append(separator).append(key);
                separator = ", ";
            }
            for (String key : repeatedProperties) {
                text.append(separator).append(PROPERTIES).append('.').append(key);
                separator = ", ";
            }
            for (String key : repeatedDetails) {
                text.append(separator).append(DETAILS).append('.').append(key);
                separator = ", ";
            }
            result.reason = text.toString();
        } else if (firstHuge != null) {
            clear(result);
            result.reason = reasons.outOfRange + ": " + firstHuge;
        } else if (result.standard == null) {  // no properties object: tables 1-7's all absent
            result.standard = new String[standardWidth];
            result.standardKinds = new String[standardWidth];
        }
        return result;
    }

    private static boolean hasBom(byte[] line) {
        return line.length >= 3 && line[0] == (byte) 0xEF && line[1] == (byte) 0xBB && line[2] == (byte) 0xBF;
    }

    private static void clear(Result result) {
        java.util.Arrays.fill(result.fields, null);
        result.properties = null;
        result.kinds = null;
        result.details = null;
        result.standard = null;
        result.standardKinds = null;
    }

    // ---- the byte scan: UTF-8 validity and lone surrogate escapes, in one pass ----

    /** 0: fine; 1: not valid UTF-8; 2: a lone surrogate escape (UTF-8 is tested over the whole line first). */
    static int scanBytes(byte[] b) {
        int n = b.length;
        boolean escapes = false;
        int i = 0;
        while (i < n) {
            int c = b[i];
            if (c >= 0) {
                if (c == '\\') {
                    escapes = true;
                }
                i++;
                continue;
            }
            int length = sequenceLength(b, i);
            if (length == 0) {
                return 1;
            }
            i += length;
        }
        return escapes && hasLoneSurrogate(b) ? 2 : 0;
    }

    /** The length of the valid UTF-8 sequence at {@code i} (a non-ASCII lead byte), 0 if invalid. */
    private static int sequenceLength(byte[] b, int i) {
        int lead = b[i] & 0xFF;
        int n = b.length;
        if (lead >= 0xC2 && lead <= 0xDF) {
            return i + 1 < n && continuation(b[i + 1]) ? 2 : 0;
        }
        if (lead >= 0xE0 && lead <= 0xEF) {
            if (i + 2 >= n || !continuation(b[i + 1]) || !continuation(b[i + 2])) {
                return 0;
            }
            int second = b[i + 1] & 0xFF;
            if (lead == 0xE0 && second < 0xA0 || lead == 0xED && second > 0x9F) {
                return 0;  // overlong, or a UTF-16 surrogate encoded
            }
            return 3;
        }
        if (lead >= 0xF0 && lead <= 0xF4) {
            if (i + 3 >= n || !continuation(b[i + 1]) || !continuation(b[i + 2]) || !continuation(b[i + 3])) {
                return 0;
            }
            int second = b[i + 1] & 0xFF;
            if (lead == 0xF0 && second < 0x90 || lead == 0xF4 && second > 0x8F) {
                return 0;  // overlong, or above U+10FFFF
            }
            return 4;
        }
        return 0;
    }

    private static boolean continuation(byte b) {
        return (b & 0xC0) == 0x80;
    }

    /**
     * A {@code \\uD800}-{@code \\uDFFF} escape that is not half of a pair: escapes are read from the line's start
     * (an escaped backslash is one escape), a high surrogate must be followed at once by a low one.
     */
    static boolean hasLoneSurrogate(byte[] b) {
        int n = b.length;
        int i = 0;
        while (i < n) {
            if (b[i] != '\\') {
                i++;
                continue;
            }
            int unit = unicodeEscape(b, i);
            if (unit < 0) {
                i += 2;
            } else if (unit >= 0xD800 && unit <= 0xDBFF) {
                int next = unicodeEscape(b, i + 6);
                if (next < 0xDC00 || next > 0xDFFF) {
                    return true;
                }
                i += 12;
            } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
                return true;
            } else {
                i += 6;
            }
        }
        return false;
    }

    /** The code unit of a {@code \\uXXXX} escape at {@code i}, -1 if there is none. */
    private static int unicodeEscape(byte[] b, int i) {
        if (i + 5 >= b.length || b[i] != '\\' || (b[i + 1] != 'u' && b[i + 1] != 'U')) {
            return -1;
        }
        int unit = 0;
        for (int k = i + 2; k < i + 6; k++) {
            int digit = Character.digit(b[k], 16);
            if (digit < 0) {
                return -1;
            }
            unit = unit * 16 + digit;
        }
        return unit;
    }

    // ---- the record: one object, read once ----

    /** Reads the line as exactly one object into {@code result}; false when it is not (any JSON error). */
    private boolean readObject(byte[] line, int start, Result result) {
        lineNumber++;
        otherTopKeys.clear();
        repeated.clear();
        repeatedProperties.clear();
        repeatedDetails.clear();
        firstHuge = null;
        try (JsonParser p = factory.createParser(line, start, line.length - start)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                return false;
            }
            String name;
            int at = index.start();
            while ((name = p.nextFieldName()) != null) {
                at = index.of(name, at);
                boolean known = at < width;
                if (known ? !firstTime(at) : !otherTopKeys.add(name)) {
                    if (!repeated.contains(name)) {
                        repeated.add(name);
                    }
                }
                JsonToken token = p.nextToken();
                if (known) {
                    result.fields[at] = text(p, token);
                } else if (name.equals(PROPERTIES)) {
                    readProperties(p, token, result);
                } else if (name.equals(DETAILS)) {
                    result.details = token == JsonToken.START_OBJECT ? readMap(p, repeatedDetails) : skipValue(p, token);
                } else {
                    skipValue(p, token);
                }
            }
            return p.nextToken() == null;  // nothing but whitespace after the object
        } catch (IOException | RuntimeException e) {  // Jackson's parse errors, and its limits (StreamConstraintsException)
            return false;
        }
    }

    /** Whether the known field at {@code at} is seen for the first time on this line (it is marked seen). */
    private boolean firstTime(int at) {
        if (seenField[at] == lineNumber) {
            return false;
        }
        seenField[at] = lineNumber;
        return true;
    }

    /**
     * The properties object: tables 1-7's values and kinds by position, the others' in two maps in the order
     * written (each value goes to one place; a key given twice makes the line corrupt, its name is remembered).
     * Not an object: no properties (the maps null, tables 1-7's absent).
     */
    private void readProperties(JsonParser p, JsonToken token, Result result) throws IOException {
        String[] standard = new String[standardWidth];
        String[] standardKinds = new String[standardWidth];
        result.standard = standard;
        result.standardKinds = standardKinds;
        if (token != JsonToken.START_OBJECT) {
            result.properties = skipValue(p, token);
            result.kinds = null;
            return;
        }
        repeatedProperties.clear();
        Map<String, String> others = new LinkedHashMap<>();
        Map<String, String> otherKinds = new LinkedHashMap<>();
        String name;
        int at = standardIndex.start();
        while ((name = p.nextFieldName()) != null) {
            JsonToken value = p.nextToken();
            at = standardIndex.of(name, at);
            boolean standardName = at < standardWidth;
            boolean again = standardName ? standardKinds[at] != null : others.containsKey(name);
            if (again && !repeatedProperties.contains(name)) {
                repeatedProperties.add(name);
            }
            if (standardName) {
                standard[at] = text(p, value);
                standardKinds[at] = kind(value);  // never null: also marks the name seen
            } else {
                if (again) {  // the last value, in the last position (as a map built key by key)
                    others.remove(name);
                    otherKinds.remove(name);
                }
                others.put(name, text(p, value));
                otherKinds.put(name, kind(value));
            }
        }
        result.properties = others;
        result.kinds = otherKinds;
    }

    /** The object at the parser (its START_OBJECT read) as a map of value texts, in the order written. */
    private Map<String, String> readMap(JsonParser p, List<String> repeatedKeys) throws IOException {
        Map<String, String> values = new LinkedHashMap<>();
        String name;
        while ((name = p.nextFieldName()) != null) {
            JsonToken token = p.nextToken();
            if (values.containsKey(name)) {
                if (!repeatedKeys.contains(name)) {
                    repeatedKeys.add(name);
                }
                values.remove(name);  // the last value, in the last position (as a map built key by key)
            }
            values.put(name, text(p, token));
        }
        return values;
    }

    static String kind(JsonToken token) {
        switch (token) {
            case VALUE_STRING: return "string";
            case VALUE_NUMBER_INT: return "integer";
            case VALUE_NUMBER_FLOAT: return "float";
            case VALUE_TRUE:
            case VALUE_FALSE: return "boolean";
            case VALUE_NULL: return "null";
            case START_OBJECT: return "object";
            case START_ARRAY: return "array";
            default: return "?";
        }
    }

    /** The value at the parser as text (as Spark's from_json reads a string column). */
    private String text(JsonParser p, JsonToken token) throws IOException {
        switch (token) {
            case VALUE_STRING: return p.getText();
            case VALUE_NULL: return null;
            case VALUE_TRUE: return "true";
            case VALUE_FALSE: return "false";
            case VALUE_NUMBER_INT: return integerText(p);
            case VALUE_NUMBER_FLOAT: return Double.toString(floatValue(p));
            default: return structureText(p);
        }
    }

    /** An integer as written: JSON's grammar (no plus sign, no leading zero) leaves only -0 to write as 0. */
    private static String integerText(JsonParser p) throws IOException {
        String text = p.getText();
        return text.equals("-0") ? "0" : text;
    }

    /** A float's value; the first number in exponent form too large for a double is remembered. */
    private double floatValue(JsonParser p) throws IOException {
        double value = p.getDoubleValue();
        if (Double.isInfinite(value) && firstHuge == null) {
            String text = p.getText();
            if (text.indexOf('e') >= 0 || text.indexOf('E') >= 0) {
                firstHuge = text;
            }
        }
        return value;
    }

    /** An object or array as compact JSON (numbers as Jackson writes what it read). */
    private String structureText(JsonParser p) throws IOException {
        buffer.reset();
        try (JsonGenerator g = factory.createGenerator(buffer)) {
            int depth = 0;
            JsonToken token = p.currentToken();
            do {
                switch (token) {
                    case START_OBJECT:
                    case START_ARRAY:
                        depth++;
                        g.copyCurrentEvent(p);
                        break;
                    case END_OBJECT:
                    case END_ARRAY:
                        depth--;
                        g.copyCurrentEvent(p);
                        break;
                    case VALUE_NUMBER_FLOAT:
                        g.writeNumber(floatValue(p));
                        break;
                    default:
                        g.copyCurrentEvent(p);
                }
            } while (depth > 0 && (token = p.nextToken()) != null);
        }
        return new String(buffer.toByteArray(), StandardCharsets.UTF_8);
    }

    /** Reads past the value at the parser (every number checked); null. */
    private <T> T skipValue(JsonParser p, JsonToken token) throws IOException {
        int depth = 0;
        do {
            switch (token) {
                case START_OBJECT:
                case START_ARRAY:
                    depth++;
                    break;
                case END_OBJECT:
                case END_ARRAY:
                    depth--;
                    break;
                case VALUE_NUMBER_FLOAT:
                    floatValue(p);
                    break;
                case VALUE_STRING:
                    p.getTextLength();  // decodes the string: an invalid escape is an error here too
                    break;
                default:
                    break;
            }
        } while (depth > 0 && (token = p.nextToken()) != null);
        return null;
    }

    // ---- a line that is not one object: which reason (rare: only corrupt lines come here) ----

    /**
     * As spark/parse.py orders the checks: {@code [<line>]} read as an array of objects (not one: more than one
     * value); else NaN/Infinity where a value stands, a line not starting with <code>{</code>, an object
     * followed by more, or malformed.
     */
    private String notOneObject(byte[] line, int start) {
        String text = new String(line, start, line.length - start, StandardCharsets.UTF_8);
        int values = arrayLength("[" + text + "]");
        if (values >= 0) {
            return reasons.trailing;  // one object would have been read as the record
        }
        if (hasNonNumber(text)) {
            return reasons.nonNumber;
        }
        if (!stripSpaces(text).startsWith("{")) {
            return reasons.notObject;
        }
        return firstIsObject(text) ? reasons.trailing : reasons.malformed;
    }

    private boolean hasNonNumber(String text) {
        java.util.regex.Matcher m = nonNumber.matcher(text);
        while (m.find()) {
            String group = m.group(1);
            if (group != null && !group.isEmpty()) {
                return true;
            }
        }
        return false;
    }

    private static String stripSpaces(String text) {
        int i = 0;
        while (i < text.length() && text.charAt(i) == ' ') {
            i++;
        }
        return text.substring(i);
    }

    /**
     * The number of values in the JSON array {@code text}, -1 if it is not exactly one valid array of objects
     * (as Spark's from_json reads an array of records: a value of another kind fails the whole array).
     */
    private int arrayLength(String text) {
        try (JsonParser p = factory.createParser(text)) {
            p.nextToken();
            int count = 0;
            boolean objects = true;
            JsonToken token;
            while ((token = p.nextToken()) != JsonToken.END_ARRAY) {
                objects &= token == JsonToken.START_OBJECT;
                skipValue(p, token);
                count++;
            }
            if (!objects) {
                return -1;
            }
            return p.nextToken() == null ? count : -1;
        } catch (IOException | RuntimeException e) {
            return -1;
        }
    }

    /** Whether the text starts with a valid object (whatever follows it). */
    private boolean firstIsObject(String text) {
        try (JsonParser p = factory.createParser(text)) {
            JsonToken token = p.nextToken();
            if (token != JsonToken.START_OBJECT) {
                return false;
            }
            skipValue(p, token);
            return true;
        } catch (IOException | RuntimeException e) {
            return false;
        }
    }
}
