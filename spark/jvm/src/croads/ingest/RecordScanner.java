package croads.ingest;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The common case of {@link LineParser}, without Jackson: a line that is plainly one record, read in one pass
 * over its bytes straight into the values of {@link ParseLine}'s row, every string a {@link UTF8String} over the
 * line's own bytes (no {@code java.lang.String} decoded from them and encoded back).
 *
 * <p>The caller has tested the line's UTF-8 and its surrogate escapes ({@link LineParser#scanBytes}). This class
 * reads only what it can read with certainty as the strict path would: RFC 8259 JSON (whitespace: space, tab,
 * CR, LF) whose record, properties and details have no key twice, no escape in a key of theirs and only
 * strings, numbers, booleans and nulls as the values returned as text. Anything else (a key given twice, a
 * structure where compact JSON text is returned, a number in exponent form out of a double's range, numbers of
 * over {@value #MAX_NUMBER} characters, keys of over {@value #MAX_KEY} bytes, nesting over {@value #MAX_DEPTH}, over {@value #MAX_ENTRIES} other
 * properties or details, any syntax error) gives null: the line is then read by the strict Jackson path of
 * {@link LineParser}, which decides. On every line both read, the two give the same row (the ingest's tests hold
 * them equal through {@link ParseLine}'s reference function).
 *
 * <p>Not thread-safe (it keeps the line and scratch arrays): one per parser.
 */
final class RecordScanner {
    /** Not read here: the strict path reads the line. Thrown without a stack trace (one instance). */
    private static final class Bail extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Bail() {
            super(null, null, false, false);
        }
    }

    private static final Bail BAIL = new Bail();
    static final int MAX_NUMBER = 100;
    static final int MAX_DEPTH = 64;
    static final int MAX_ENTRIES = 64;
    static final int MAX_KEY = 1000;
    private static final int END = 256;

    static final UTF8String STRING = UTF8String.fromString("string");
    static final UTF8String INTEGER = UTF8String.fromString("integer");
    static final UTF8String FLOAT = UTF8String.fromString("float");
    static final UTF8String BOOLEAN = UTF8String.fromString("boolean");
    static final UTF8String NULL = UTF8String.fromString("null");
    private static final UTF8String TRUE = UTF8String.fromString("true");
    private static final UTF8String FALSE = UTF8String.fromString("false");
    private static final UTF8String ZERO = UTF8String.fromString("0");

    /** The record's keys: its fields (read as text), then the two objects. */
    private final ByteKeys top;
    private final int width;
    private final ByteKeys standardKeys;
    private final int standardWidth;
    /** The top-level keys seen on this line (by position): the line's number. */
    private final long[] seen;
    private long lineNumber;
    private final int[] unknownFrom = new int[8];
    private final int[] unknownTo = new int[8];
    private int unknowns;
    /** An object's other entries while it is read (then copied into its maps). */
    private final Object[] keys = new Object[MAX_ENTRIES];
    private final Object[] values = new Object[MAX_ENTRIES];
    private final Object[] kinds = new Object[MAX_ENTRIES];
    private byte[] scratch = new byte[256];
    /**
     * The texts of the floats read last, by a hash of the number as written: a log repeats its coordinates and
     * the like line after line, and parsing a double and writing it back is the dearest of the scalars.
     */
    private static final int FLOATS = 64;
    private final byte[][] floatsWritten = new byte[FLOATS][];
    private final UTF8String[] floatTexts = new UTF8String[FLOATS];

    private byte[] b;
    private int i;
    private int end;
    private int keyFrom;
    private int keyTo;
    /** The JSON kind of the value {@link #scalar} read last. */
    private UTF8String kind;

    RecordScanner(String[] fields, String[] standard) {
        String[] names = Arrays.copyOf(fields, fields.length + 2);
        names[fields.length] = LineParser.PROPERTIES;
        names[fields.length + 1] = LineParser.DETAILS;
        this.top = new ByteKeys(names);
        this.width = fields.length;
        this.seen = new long[names.length];
        this.standardKeys = new ByteKeys(standard);
        this.standardWidth = standard.length;
    }

    /**
     * The line from {@code start} (after a byte order mark) as ParseLine's row values: no reason, {@code r}, the
     * other properties and their kinds, details, tables 1-7's values and kinds; null when the strict path must read it.
     */
    Object[] record(byte[] line, int start) {
        b = line;
        i = start;
        end = line.length;
        lineNumber++;
        unknowns = 0;
        try {
            return object();
        } catch (Bail bail) {
            return null;
        } finally {
            b = null;
        }
    }

    private Object[] object() {
        space();
        expect('{');
        Object[] fields = new Object[width];
        Object[] row = new Object[7];
        space();
        if (peek() == '}') {
            i++;
        } else {
            members(fields, row);
        }
        space();
        if (i != end) {
            throw BAIL;
        }
        row[1] = new GenericInternalRow(fields);
        if (row[5] == null) {  // no properties object: tables 1-7's all absent
            row[5] = new GenericInternalRow(new Object[standardWidth]);
            row[6] = new GenericInternalRow(new Object[standardWidth]);
        }
        return row;
    }

    private void members(Object[] fields, Object[] row) {
        int at = top.start();
        while (true) {
            key();
            at = top.of(b, keyFrom, keyTo, at);
            if (at == top.unknown()) {
                unknownKey();
                skip(0);
            } else {
                if (seen[at] == lineNumber) {
                    throw BAIL;  // a key given twice: the strict path names it
                }
                seen[at] = lineNumber;
                if (at < width) {
                    fields[at] = scalar();
                } else if (at == width) {
                    properties(row);
                } else {
                    row[4] = peek() == '{' ? entries() : skipped();
                }
            }
            if (!more('}')) {
                return;
            }
        }
    }

    /** After a value: true at a comma (and the space after it), false at {@code close}. */
    private boolean more(int close) {
        space();
        int c = next();
        if (c == ',') {
            space();
            return true;
        }
        if (c == close) {
            return false;
        }
        throw BAIL;
    }

    private void unknownKey() {
        for (int k = 0; k < unknowns; k++) {
            if (Arrays.equals(b, unknownFrom[k], unknownTo[k], b, keyFrom, keyTo)) {
                throw BAIL;
            }
        }
        if (unknowns == unknownFrom.length) {
            throw BAIL;
        }
        unknownFrom[unknowns] = keyFrom;
        unknownTo[unknowns++] = keyTo;
    }

    /** {@code applicationProperties}: tables 1-7's by position into row[5..6], the others' maps into row[2..3]. */
    private void properties(Object[] row) {
        Object[] standard = new Object[standardWidth];
        Object[] standardKinds = new Object[standardWidth];
        row[5] = new GenericInternalRow(standard);
        row[6] = new GenericInternalRow(standardKinds);
        if (peek() != '{') {
            skip(0);
            return;
        }
        i++;
        space();
        int n = 0;
        if (peek() == '}') {
            i++;
        } else {
            int at = standardKeys.start();
            do {
                key();
                at = standardKeys.of(b, keyFrom, keyTo, at);
                UTF8String value = scalar();
                if (at < standardWidth) {
                    if (standardKinds[at] != null) {
                        throw BAIL;
                    }
                    standard[at] = value;
                    standardKinds[at] = kind;
                } else {
                    n = add(n, value);
                }
            } while (more('}'));
        }
        row[2] = map(values, n);
        row[3] = map(kinds, n);
    }

    /** An object's entries (its START_OBJECT next) as a map of value texts. */
    private ArrayBasedMapData entries() {
        i++;
        space();
        int count = 0;
        if (peek() == '}') {
            i++;
        } else {
            do {
                key();
                count = add(count, scalar());
            } while (more('}'));
        }
        return map(values, count);
    }

    /** Adds the key just read and {@code value} (and {@link #kind}) as entry {@code n}; the entries now. */
    private int add(int n, UTF8String value) {
        if (n == MAX_ENTRIES) {
            throw BAIL;
        }
        UTF8String name = UTF8String.fromBytes(b, keyFrom, keyTo - keyFrom);
        for (int k = 0; k < n; k++) {
            if (name.equals(keys[k])) {
                throw BAIL;
            }
        }
        keys[n] = name;
        values[n] = value;
        kinds[n] = kind;
        return n + 1;
    }

    private ArrayBasedMapData map(Object[] of, int n) {
        return new ArrayBasedMapData(new GenericArrayData(Arrays.copyOf(keys, n)),
                new GenericArrayData(Arrays.copyOf(of, n)));
    }

    private <T> T skipped() {
        skip(0);
        return null;
    }

    // ---- tokens ----

    /** A key (no escape in it) and its colon: {@link #keyFrom}, {@link #keyTo}. */
    private void key() {
        expect('"');
        int from = i;
        while (true) {
            if (i >= end) {
                throw BAIL;
            }
            byte c = b[i];
            if (c == '"') {
                break;
            }
            if (c == '\\' || c >= 0 && c < 0x20) {
                throw BAIL;
            }
            i++;
        }
        keyFrom = from;
        keyTo = i++;
        if (keyTo - keyFrom > MAX_KEY) {
            throw BAIL;  // Jackson limits a name's length
        }
        space();
        expect(':');
        space();
    }

    /** A string, number, boolean or null as text (null for JSON null), its kind in {@link #kind}. */
    private UTF8String scalar() {
        int c = peek();
        switch (c) {
            case '"':
                i++;
                kind = STRING;
                return string();
            case 't':
                literal("true");
                kind = BOOLEAN;
                return TRUE;
            case 'f':
                literal("false");
                kind = BOOLEAN;
                return FALSE;
            case 'n':
                literal("null");
                kind = NULL;
                return null;
            default:
                if (c == '-' || c >= '0' && c <= '9') {
                    return number();
                }
                throw BAIL;  // a structure (returned as compact JSON by the strict path), or not JSON
        }
    }

    /** The string whose opening quote was just read: a view of the line's bytes when it has no escape. */
    private UTF8String string() {
        int from = i;
        while (i < end) {
            byte c = b[i];
            if (c == '"') {
                i++;
                return UTF8String.fromBytes(b, from, i - 1 - from);
            }
            if (c == '\\') {
                return escaped(from);
            }
            if (c >= 0 && c < 0x20) {
                throw BAIL;  // a control character unescaped
            }
            i++;
        }
        throw BAIL;
    }

    /** The rest of a string with escapes, decoded to UTF-8 (as a Java string of it would encode). */
    private UTF8String escaped(int from) {
        if (scratch.length < end - from) {
            scratch = new byte[Math.max(end - from, scratch.length * 2)];
        }
        int n = i - from;
        System.arraycopy(b, from, scratch, 0, n);
        while (i < end) {
            byte c = b[i++];
            if (c == '"') {
                return UTF8String.fromBytes(Arrays.copyOf(scratch, n));
            }
            if (c >= 0 && c < 0x20) {
                throw BAIL;
            }
            if (c != '\\') {
                scratch[n++] = c;
                continue;
            }
            int e = next();
            switch (e) {
                case '"': case '\\': case '/': scratch[n++] = (byte) e; break;
                case 'b': scratch[n++] = '\b'; break;
                case 'f': scratch[n++] = '\f'; break;
                case 'n': scratch[n++] = '\n'; break;
                case 'r': scratch[n++] = '\r'; break;
                case 't': scratch[n++] = '\t'; break;
                case 'u': n = codePoint(n); break;
                default: throw BAIL;
            }
        }
        throw BAIL;
    }

    /** A {@code \\uXXXX} escape (its {@code \\u} read; a high surrogate with the low one after it) into scratch. */
    private int codePoint(int n) {
        int unit = hex4();
        int point = unit;
        if (unit >= 0xD800 && unit <= 0xDBFF) {
            expect('\\');
            expect('u');
            int low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) {
                throw BAIL;
            }
            point = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
        } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
            throw BAIL;
        }
        if (point < 0x80) {
            scratch[n++] = (byte) point;
        } else if (point < 0x800) {
            scratch[n++] = (byte) (0xC0 | point >> 6);
            scratch[n++] = (byte) (0x80 | point & 0x3F);
        } else if (point < 0x10000) {
            scratch[n++] = (byte) (0xE0 | point >> 12);
            scratch[n++] = (byte) (0x80 | point >> 6 & 0x3F);
            scratch[n++] = (byte) (0x80 | point & 0x3F);
        } else {
            scratch[n++] = (byte) (0xF0 | point >> 18);
            scratch[n++] = (byte) (0x80 | point >> 12 & 0x3F);
            scratch[n++] = (byte) (0x80 | point >> 6 & 0x3F);
            scratch[n++] = (byte) (0x80 | point & 0x3F);
        }
        return n;
    }

    private int hex4() {
        if (i + 4 > end) {
            throw BAIL;
        }
        int unit = 0;
        for (int k = 0; k < 4; k++) {
            int digit = Character.digit(b[i++], 16);
            if (digit < 0) {
                throw BAIL;
            }
            unit = unit << 4 | digit;
        }
        return unit;
    }

    /**
     * A number: an integer as written ({@code -0} as {@code 0}), a fraction or exponent as the double's
     * {@code Double.toString} (as the strict path gives Jackson's double); its kind in {@link #kind}.
     */
    private UTF8String number() {
        int from = i;
        if (b[i] == '-') {
            i++;
        }
        int c = peek();
        if (c == '0') {
            i++;
        } else if (c >= '1' && c <= '9') {
            digits();
        } else {
            throw BAIL;
        }
        boolean integer = true;
        if (peek() == '.') {
            i++;
            if (digits() == 0) {
                throw BAIL;
            }
            integer = false;
        }
        c = peek();
        if (c == 'e' || c == 'E') {
            i++;
            c = peek();
            if (c == '+' || c == '-') {
                i++;
            }
            if (digits() == 0) {
                throw BAIL;
            }
            integer = false;
        }
        int length = i - from;
        if (length > MAX_NUMBER) {
            throw BAIL;
        }
        if (integer) {
            kind = INTEGER;
            return length == 2 && b[from] == '-' && b[from + 1] == '0' ? ZERO : UTF8String.fromBytes(b, from, length);
        }
        kind = FLOAT;
        int hash = 0;
        for (int k = from; k < i; k++) {
            hash = hash * 31 + b[k];
        }
        int slot = (hash ^ hash >>> 16) & (FLOATS - 1);
        byte[] written = floatsWritten[slot];
        if (written != null && Arrays.equals(written, 0, written.length, b, from, i)) {
            return floatTexts[slot];
        }
        double value = Double.parseDouble(new String(b, from, length, StandardCharsets.ISO_8859_1));
        if (Double.isInfinite(value)) {
            throw BAIL;  // out of range: the strict path says so
        }
        UTF8String text = UTF8String.fromString(Double.toString(value));
        floatsWritten[slot] = Arrays.copyOfRange(b, from, i);
        floatTexts[slot] = text;
        return text;
    }

    private int digits() {
        int from = i;
        while (i < end && b[i] >= '0' && b[i] <= '9') {
            i++;
        }
        return i - from;
    }

    private void literal(String word) {
        int n = word.length();
        if (i + n > end) {
            throw BAIL;
        }
        for (int k = 0; k < n; k++) {
            if (b[i + k] != word.charAt(k)) {
                throw BAIL;
            }
        }
        i += n;
    }

    /** Reads past any value (checked as the strict path checks a value it skips). */
    private void skip(int depth) {
        int c = peek();
        if (c != '{' && c != '[') {
            scalar();
            return;
        }
        if (depth == MAX_DEPTH) {
            throw BAIL;
        }
        i++;
        space();
        int close = c == '{' ? '}' : ']';
        if (peek() == close) {
            i++;
            return;
        }
        do {
            if (c == '{') {
                expect('"');
                int from = i;
                string();
                if (i - from > MAX_KEY) {
                    throw BAIL;
                }
                space();
                expect(':');
                space();
            }
            skip(depth + 1);
        } while (more(close));
    }

    private void space() {
        while (i < end) {
            byte c = b[i];
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            i++;
        }
    }

    private int peek() {
        return i < end ? b[i] : END;
    }

    private int next() {
        if (i >= end) {
            throw BAIL;
        }
        return b[i++];
    }

    private void expect(int c) {
        if (i >= end || b[i] != c) {
            throw BAIL;
        }
        i++;
    }
}
