package croads.ingest;

import java.util.HashMap;
import java.util.Map;

/**
 * The position of a JSON key among known names, for keys read one after another: a record's keys come in the
 * order its writer gives them, so the key that followed a key on the last line is tried first, by identity
 * (Jackson hands out field names interned, as these names are), before the hash lookup.
 *
 * <p>Positions: {@code 0..n-1} the known names, {@link #unknown()} any other key; {@link #start()} is the position
 * "before the first key" to pass for a line's (or object's) first key. Not thread-safe: one per parser.
 */
final class KeyIndex {
    private final String[] names;
    private final Map<String, Integer> index = new HashMap<>();
    /** By the previous key's position (or {@link #start()}): the position of the key that followed it last time. */
    private final int[] next;

    KeyIndex(String[] known) {
        names = new String[known.length + 1];  // the last: unknown (null: no key is identical to it)
        for (int i = 0; i < known.length; i++) {
            names[i] = known[i].intern();
            index.put(names[i], i);
        }
        next = new int[known.length + 2];
        java.util.Arrays.fill(next, known.length);
    }

    int unknown() {
        return names.length - 1;
    }

    int start() {
        return names.length;
    }

    /** The position of {@code key}, read after the key at {@code previous} (or {@link #start()}). */
    int of(String key, int previous) {
        int guess = next[previous];
        if (names[guess] == key) {
            return guess;
        }
        Integer at = index.get(key);
        int position = at == null ? unknown() : at;
        next[previous] = position;
        return position;
    }
}
