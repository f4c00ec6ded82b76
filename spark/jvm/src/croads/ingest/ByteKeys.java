package croads.ingest;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.unsafe.types.UTF8String;

/**
 * {@link KeyIndex} over a line's bytes: the position of a JSON key (its UTF-8 bytes, no escape in them) among
 * known names. The two keys that last followed a key are tried first (byte comparisons: records of two kinds
 * alternate in a log, e.g. receptions and deliveries, whose keys part ways here and there), then a hash lookup.
 *
 * <p>Positions: {@code 0..n-1} the known names, {@link #unknown()} any other key; {@link #start()} is the position
 * "before the first key" to pass for an object's first key. Not thread-safe: one per parser.
 */
final class ByteKeys {
    private final byte[][] names;
    private final Map<UTF8String, Integer> index = new HashMap<>();
    /** By the previous key's position (or {@link #start()}): the position of the key that followed it last time. */
    private final int[] next;
    /** ... and the one before that (when another). */
    private final int[] before;

    ByteKeys(String[] known) {
        names = new byte[known.length + 1][];  // the last: unknown (null: no key equals it)
        for (int i = 0; i < known.length; i++) {
            names[i] = known[i].getBytes(StandardCharsets.UTF_8);
            index.put(UTF8String.fromBytes(names[i]), i);
        }
        next = new int[known.length + 2];
        Arrays.fill(next, known.length);
        before = next.clone();
    }

    int unknown() {
        return names.length - 1;
    }

    int start() {
        return names.length;
    }

    /** The position of the key {@code b[from, to)}, read after the key at {@code previous} (or {@link #start()}). */
    int of(byte[] b, int from, int to, int previous) {
        int guess = next[previous];
        if (is(guess, b, from, to)) {
            return guess;
        }
        int other = before[previous];
        if (is(other, b, from, to)) {
            before[previous] = guess;
            next[previous] = other;
            return other;
        }
        Integer at = index.get(UTF8String.fromBytes(b, from, to - from));
        int position = at == null ? unknown() : at;
        before[previous] = guess;
        next[previous] = position;
        return position;
    }

    private boolean is(int position, byte[] b, int from, int to) {
        byte[] name = names[position];
        return name != null && Arrays.equals(name, 0, name.length, b, from, to);
    }
}
