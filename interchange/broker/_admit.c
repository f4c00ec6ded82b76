/*
 * interchange.broker._admit: optional C accelerator of message admission.
 *
 * admit(raw, capability_shard_count) -> (properties, valid, ttl_ms, absolute_expiry_time_ms) | None
 *
 * One pass over an encoded AMQP 1.0 message that does what, in pure Python,
 *   amqp_scan.scan_message(raw, decode_properties=False)
 *   + amqp_scan.decode_application_properties(raw, start, end)
 *   + validation.validate_application_properties(props, types, capability_shard_count=...)
 * do, for the common case. Those Python functions stay the reference and the authority:
 *
 * - None means "not handled here": malformed bytes of any kind, section descriptors other
 *   than smallulong, keys that are not str8/str32, values of type char/decimal/uuid or
 *   described/compound values, invalid UTF-8 or ASCII, duplicate keys, a capability shard
 *   count that is not a small int. The caller then runs the Python path, which produces the
 *   exact error (or result).
 * - Otherwise the tuple holds the decoded application properties (a dict equal, value types
 *   included, to what decode_application_properties returns; {} without the section),
 *   whether validate_application_properties would find no problem, the header ttl and the
 *   properties' absolute-expiry-time (None when absent or null). The caller produces the
 *   Rejected text from the Python path when valid is False.
 *
 * The profile's data (property names, kinds and value rules, message types, mandatory properties,
 * rules across properties, custom names) is _admit_profile.h, which interchange.broker.admit_header
 * generates from interchange.ground.profile; this file has the code of each kind of rule. A rule
 * it has no code for is left to Python (C_UNHANDLED, ADMIT_PROFILE_HANDLED 0).
 *
 * Every read is checked against the end of the buffer (or of the enclosing container);
 * positions are uint64_t, so position + 32-bit size never overflows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

typedef uint64_t pos_t;

/* ---- byte helpers ----------------------------------------------------------------------- */

#include "_be_bytes.h"

/* Encoded width by constructor, as amqp_scan._SKIP: 0 invalid, 1..17 fixed width + 1,
 * W8 a 1-byte size prefix, W32 a 4-byte size prefix. */
enum { W8 = 0xFE, W32 = 0xFF };
static const uint8_t SKIP[256] = {
    [0x40] = 1, [0x41] = 1, [0x42] = 1, [0x43] = 1, [0x44] = 1, [0x45] = 1,
    [0x50] = 2, [0x51] = 2, [0x52] = 2, [0x53] = 2, [0x54] = 2, [0x55] = 2, [0x56] = 2,
    [0x60] = 3, [0x61] = 3,
    [0x70] = 5, [0x71] = 5, [0x72] = 5, [0x73] = 5, [0x74] = 5,
    [0x80] = 9, [0x81] = 9, [0x82] = 9, [0x83] = 9, [0x84] = 9,
    [0x94] = 17, [0x98] = 17,
    [0xA0] = W8, [0xA1] = W8, [0xA3] = W8, [0xC0] = W8, [0xC1] = W8, [0xE0] = W8,
    [0xB0] = W32, [0xB1] = W32, [0xB3] = W32, [0xD0] = W32, [0xD1] = W32, [0xF0] = W32,
};

/* amqp_scan._skip_values: 0 and *out = offset after `count` values, or -1. */
static int
skip_values(const uint8_t *d, pos_t p, pos_t limit, uint64_t count, pos_t *out)
{
    while (count) {
        if (p >= limit)
            return -1;
        uint8_t c = d[p];
        if (c == 0x00) { /* described value: its descriptor, then the value */
            p += 1;
            count += 1;
            continue;
        }
        uint8_t w = SKIP[c];
        if (w == 0)
            return -1;
        if (w == W8) {
            if (p + 2 > limit)
                return -1;
            p += 2 + (pos_t)d[p + 1];
        }
        else if (w == W32) {
            if (p + 5 > limit)
                return -1;
            p += 5 + (pos_t)be32(d + p + 1);
        }
        else {
            p += w; /* 1 + width */
        }
        count -= 1;
    }
    if (p > limit)
        return -1;
    *out = p;
    return 0;
}

/* amqp_scan._compound_bounds; requires p < end. */
static int
compound(const uint8_t *d, pos_t p, pos_t end, uint8_t small, uint8_t large,
         uint64_t *count, pos_t *first, pos_t *stop)
{
    uint8_t c = d[p];
    uint64_t size, n;
    pos_t f, s;
    if (c == small) {
        if (p + 3 > end)
            return -1;
        size = d[p + 1];
        n = d[p + 2];
        f = p + 3;
        s = p + 2 + size;
        if (size < 1)
            return -1;
    }
    else if (c == large) {
        if (p + 9 > end)
            return -1;
        size = be32(d + p + 1);
        n = be32(d + p + 5);
        f = p + 9;
        s = p + 5 + size;
        if (size < 4)
            return -1;
    }
    else if (c == 0x45 && small == 0xC0) {
        *count = 0;
        *first = *stop = p + 1;
        return 0;
    }
    else {
        return -1;
    }
    if (s > end) /* s >= f from the size checks above */
        return -1;
    if (n > s - f)
        return -1;
    *count = n;
    *first = f;
    *stop = s;
    return 0;
}

/* amqp_scan._field for a timestamp-or-null field: 0 (value in *value, *present), or -1. */
static int
timestamp_field(const uint8_t *d, pos_t *pp, pos_t limit, int *present, int64_t *value)
{
    pos_t p = *pp;
    if (p >= limit)
        return -1;
    if (d[p] == 0x40) {
        *present = 0;
        *pp = p + 1;
        return 0;
    }
    if (d[p] != 0x83 || p + 9 > limit)
        return -1;
    *present = 1;
    *value = (int64_t)be64(d + p + 1);
    *pp = p + 9;
    return 0;
}

/* ---- the message profile (interchange.ground.profile, as _admit_profile.h holds it) --------- */

enum kind { K_STRING, K_INTEGER, K_FLOATING };

/* The value checks the C code has; C_UNHANDLED: a rule it has none for (the Python path decides). */
enum check {
    C_NONE, C_NON_EMPTY, C_ONE_OF, C_MESSAGE_TYPE, C_INT_RANGE, C_FLOAT_RANGE, C_UPPER, C_LIST,
    C_INTEGER_LIST, C_PUBLISHER_ID, C_QUADTREE, C_UNHANDLED
};

/* One property of tables 1-7 and its value rule's parameters:
 * C_INT_RANGE low..high, or also when has_also; C_FLOAT_RANGE flow..fhigh; C_UPPER low letters;
 * C_PUBLISHER_ID low letters, then 1..also digits of a number at most high; C_QUADTREE a tile of
 * at least low digits; C_ONE_OF the n_values strings of ONE_OF_VALUES from first_value. */
struct name_spec {
    const char *name;
    uint8_t len;
    uint8_t kind;
    uint8_t check;
    uint8_t has_also;
    int64_t low, high, also;
    double flow, fhigh;
    uint8_t first_value, n_values;
};

/* s[:len] == lit[:len], inline (the names are short) */
static inline int
same(const uint8_t *s, const char *lit, pos_t len)
{
    for (pos_t i = 0; i < len; i++) {
        if (s[i] != (uint8_t)lit[i])
            return 0;
    }
    return 1;
}

#include "_admit_profile.h"

static int
message_type_id(const uint8_t *s, pos_t len)
{
    for (int i = 0; i < MT_COUNT; i++) {
        if (MESSAGE_TYPE_LENGTHS[i] == len && same(s, MESSAGE_TYPES[i], len))
            return i;
    }
    return -1;
}

/* C_ONE_OF: one of the rule's strings exactly */
static int
is_one_of(const struct name_spec *spec, const uint8_t *s, pos_t len)
{
    for (int i = spec->first_value; i < spec->first_value + spec->n_values; i++) {
        if (ONE_OF_LENGTHS[i] == len && same(s, ONE_OF_VALUES[i], len))
            return 1;
    }
    return 0;
}

/* C_UPPER: exactly n letters A-Z (the pattern [A-Z]{n}) */
static int
is_upper(const uint8_t *s, pos_t len, int64_t n)
{
    if ((int64_t)len != n)
        return 0;
    for (pos_t i = 0; i < len; i++) {
        if (s[i] < 'A' || s[i] > 'Z')
            return 0;
    }
    return 1;
}

/* The custom-name rule, <CUSTOM_PREFIX>[^-]+-.+ with DOTALL, fullmatch. In UTF-8 the byte '-' only
 * ever stands for the character '-', so the first '-' after the prefix must be the separator. */
static int
is_custom_name(const uint8_t *s, pos_t len)
{
    const pos_t prefix = sizeof CUSTOM_PREFIX - 1;
    if (len < prefix + 3 || memcmp(s, CUSTOM_PREFIX, prefix) != 0)
        return 0;
    const uint8_t *dash = memchr(s + prefix, '-', len - prefix);
    if (dash == NULL)
        return 0;
    pos_t j = (pos_t)(dash - s);
    return j > prefix && j + 1 < len;
}

/* _comma_list is not None: ",a,b," with no empty item. */
static int
is_comma_list(const uint8_t *s, pos_t len)
{
    if (len < 3 || s[0] != ',' || s[len - 1] != ',')
        return 0;
    for (pos_t i = 1; i < len; i++) {
        if (s[i] == ',' && s[i - 1] == ',')
            return 0;
    }
    return 1;
}

/* _check_integer_list passes: a comma list of items matching -?[0-9]+. */
static int
is_integer_list(const uint8_t *s, pos_t len)
{
    if (!is_comma_list(s, len))
        return 0;
    pos_t i = 1;
    while (i < len) { /* at the start of an item (the list's last byte is its final ',') */
        if (s[i] == '-')
            i++;
        pos_t digits = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            i++;
            digits++;
        }
        if (digits == 0 || i >= len || s[i] != ',')
            return 0;
        i++;
    }
    return 1;
}

/* C_PUBLISHER_ID: `letters` letters A-Z, then 1..`digits` digits of a number at most `highest` */
static int
is_publisher_id(const uint8_t *s, pos_t len, int64_t letters, int64_t highest, int64_t digits)
{
    if ((int64_t)len <= letters || (int64_t)len > letters + digits)
        return 0;
    for (pos_t i = 0; i < (pos_t)letters; i++) {
        if (s[i] < 'A' || s[i] > 'Z')
            return 0;
    }
    int64_t number = 0;
    for (pos_t i = (pos_t)letters; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        if (number <= highest) /* no overflow: once above highest it stays above */
            number = number * 10 + (s[i] - '0');
    }
    return number <= highest;
}

/* Word-at-a-time helpers for is_quadtree: bytes in little-endian order, 0x80 flags per byte. */
#define BYTES(b) (0x0101010101010101ULL * (uint64_t)(b))

static inline uint64_t
load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24) |
           ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

/* 0x80 in every byte of x that is not zero (exact: no carry crosses a byte) */
static inline uint64_t
nonzero_bytes(uint64_t x)
{
    return (((x & BYTES(0x7F)) + BYTES(0x7F)) | x) & BYTES(0x80);
}

/* index of the first / last flagged byte of a non-zero flag word */
static inline unsigned
first_flag(uint64_t m)
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctzll(m) >> 3;
#else
    unsigned i = 0;
    while (!(m & 0x80))
        m >>= 8, i++;
    return i;
#endif
}

static inline unsigned
last_flag(uint64_t m)
{
#if defined(__GNUC__) || defined(__clang__)
    return (63u - (unsigned)__builtin_clzll(m)) >> 3;
#else
    unsigned i = 7;
    while (!(m & 0x8000000000000000ULL))
        m <<= 8, i--;
    return i;
#endif
}

/* C_QUADTREE passes: ,(?:[0-3]+,)+ with a tile of at least `zoom` digits; that is ',' first and
 * last, only ',' and 0-3, no ",,", and a run of `zoom` digits somewhere.
 * Eight bytes at a time without a branch per tile: a quadTree lists ~26 tiles of ~13 digits. */
static int
is_quadtree(const uint8_t *s, pos_t len, int64_t zoom)
{
    if (len < 2 || s[0] != ',' || s[len - 1] != ',')
        return 0;
    uint64_t bad = 0, empty = 0, prev = 0; /* prev: 0x80 if the byte before the word is ',' */
    pos_t run = 0;                         /* digits since the last ',' */
    int reference = 0;
    pos_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = load_le64(s + i);
        uint64_t comma = nonzero_bytes(w ^ BYTES(',')) ^ BYTES(0x80);
        uint64_t not_digit = nonzero_bytes((w ^ BYTES('0')) & BYTES(0xFC));
        bad |= not_digit & ~comma;
        empty |= comma & ((comma << 8) | prev);
        prev = comma >> 56;
        /* a tile longer than 7 digits ends at the word's first ',' (runs inside a word are shorter) */
        unsigned first = comma ? first_flag(comma) : 8;
        reference |= (int64_t)(run + first) >= zoom;
        run = comma ? 7 - last_flag(comma) : run + 8;
    }
    int previous_comma = prev != 0;
    for (; i < len; i++) {
        uint8_t c = s[i];
        if (c == ',') {
            if (previous_comma)
                return 0;
            reference |= (int64_t)run >= zoom;
            run = 0;
            previous_comma = 1;
        }
        else if (c >= '0' && c <= '3') {
            run++;
            previous_comma = 0;
        }
        else {
            return 0;
        }
    }
    return !bad && !empty && reference;
}

/* An AMQP integer as a Python int would compare: int64, or above INT64_MAX (ulong only). */
typedef struct {
    int64_t v;
    int huge;
} integer;

static inline int
int_lt(integer a, int64_t b)
{
    return !a.huge && a.v < b;
}

static inline int
int_gt(integer a, integer b) /* b is never huge where this is used: a checked shardCount or the capability's */
{
    return a.huge || (!b.huge && a.v > b.v);
}

static inline int
int_in(integer a, int64_t low, int64_t high)
{
    return !a.huge && a.v >= low && a.v <= high;
}

/* What validation needs to know of one standard property. */
typedef struct {
    uint8_t present; /* the name is in the map */
    uint8_t valid;   /* its type and value check passed (validation's `valid` dict) */
    integer i;
    const uint8_t *s;
    pos_t len;
} slot;

/* ---- module state ----------------------------------------------------------------------- */

typedef struct {
    PyObject *names[N_COUNT];          /* interned property names */
    PyObject *message_types[MT_COUNT]; /* interned messageType values */
} admit_state;

static inline admit_state *
get_state(PyObject *module)
{
    return (admit_state *)PyModule_GetState(module);
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* Kinds of decoded values, for the type checks of the tables. */
enum vtype { T_OTHER, T_STRING, T_INTEGER, T_FLOATING };

/* Decode the application-properties entries in [p, limit) into `props` and check each against
 * the tables, filling `slots` for the cross checks and clearing *ok on a problem.
 * Returns 0 (decoded), -1 not handled (bail out, no Python error set), or -2 with a Python
 * error set (e.g. MemoryError). */
static int
read_properties(admit_state *st, const uint8_t *d, pos_t p, pos_t limit, uint64_t pairs,
                PyObject *props, slot *slots, int *ok)
{
    for (uint64_t k = 0; k < pairs; k++) {
        /* key: str8-utf8 or str32-utf8 */
        const uint8_t *ks;
        pos_t klen;
        if (p < limit && d[p] == 0xA1 && p + 2 <= limit) {
            klen = d[p + 1];
            ks = d + p + 2;
            p += 2;
        }
        else if (p < limit && d[p] == 0xB1 && p + 5 <= limit) {
            klen = be32(d + p + 1);
            ks = d + p + 5;
            p += 5;
        }
        else {
            return -1;
        }
        if (p + klen > limit)
            return -1;
        p += klen;

        /* value */
        if (p >= limit)
            return -1;
        uint8_t c = d[p];
        enum vtype vt = T_OTHER;
        integer iv = {0, 0};
        double fv = 0.0;
        const uint8_t *vs = NULL;
        pos_t vlen = 0;
        int simple = 1; /* no Python object built yet */
        PyObject *value = NULL;
        pos_t r;
        switch (c) {
        case 0x40: /* null */
            r = p + 1;
            value = Py_None;
            Py_INCREF(value);
            simple = 0;
            break;
        case 0x41:
        case 0x42:
            r = p + 1;
            value = c == 0x41 ? Py_True : Py_False;
            Py_INCREF(value);
            simple = 0;
            break;
        case 0x56:
            r = p + 2;
            if (r > limit || d[p + 1] > 1)
                return -1;
            value = d[p + 1] ? Py_True : Py_False;
            Py_INCREF(value);
            simple = 0;
            break;
        case 0x43: /* uint0 */
        case 0x44: /* ulong0 */
            r = p + 1;
            vt = T_INTEGER;
            break;
        case 0x50: /* ubyte */
        case 0x52: /* smalluint */
        case 0x53: /* smallulong */
            r = p + 2;
            if (r > limit)
                return -1;
            vt = T_INTEGER;
            iv.v = d[p + 1];
            break;
        case 0x51: /* byte */
        case 0x54: /* smallint */
        case 0x55: /* smalllong */
            r = p + 2;
            if (r > limit)
                return -1;
            vt = T_INTEGER;
            iv.v = (int8_t)d[p + 1];
            break;
        case 0x60: /* ushort */
            r = p + 3;
            if (r > limit)
                return -1;
            vt = T_INTEGER;
            iv.v = ((uint16_t)d[p + 1] << 8) | d[p + 2];
            break;
        case 0x61: /* short */
            r = p + 3;
            if (r > limit)
                return -1;
            vt = T_INTEGER;
            iv.v = (int16_t)(((uint16_t)d[p + 1] << 8) | d[p + 2]);
            break;
        case 0x70: /* uint */
            r = p + 5;
            if (r > limit)
                return -1;
            vt = T_INTEGER;
            iv.v = be32(d + p + 1);
            break;
        case 0x71: /* int */
            r = p + 5;
            if (r > limit)
                return -1;
            vt = T_INTEGER;
            iv.v = (int32_t)be32(d + p + 1);
            break;
        case 0x80: { /* ulong */
            r = p + 9;
            if (r > limit)
                return -1;
            uint64_t u = be64(d + p + 1);
            vt = T_INTEGER;
            if (u > (uint64_t)INT64_MAX) {
                iv.huge = 1;
                value = PyLong_FromUnsignedLongLong(u);
                if (value == NULL)
                    return -2;
                simple = 0;
            }
            else {
                iv.v = (int64_t)u;
            }
            break;
        }
        case 0x81: /* long */
            r = p + 9;
            if (r > limit)
                return -1;
            vt = T_INTEGER;
            iv.v = (int64_t)be64(d + p + 1);
            break;
        case 0x83: /* timestamp: an int, but not of an integer type for the tables */
            r = p + 9;
            if (r > limit)
                return -1;
            value = PyLong_FromLongLong((int64_t)be64(d + p + 1));
            if (value == NULL)
                return -2;
            simple = 0;
            break;
        case 0x72: { /* float: its exact float32 value */
            r = p + 5;
            if (r > limit)
                return -1;
            uint32_t bits = be32(d + p + 1);
            float f;
            memcpy(&f, &bits, sizeof f);
            vt = T_FLOATING;
            fv = (double)f;
            break;
        }
        case 0x82: { /* double */
            r = p + 9;
            if (r > limit)
                return -1;
            uint64_t bits = be64(d + p + 1);
            memcpy(&fv, &bits, sizeof fv);
            vt = T_FLOATING;
            break;
        }
        case 0xA0: /* vbin8 */
        case 0xA1: /* str8-utf8 */
        case 0xA3: /* sym8 */
        case 0xB0: /* vbin32 */
        case 0xB1: /* str32-utf8 */
        case 0xB3: /* sym32 */
            if (c & 0x10) {
                if (p + 5 > limit)
                    return -1;
                vlen = be32(d + p + 1);
                vs = d + p + 5;
                r = p + 5 + vlen;
            }
            else {
                if (p + 2 > limit)
                    return -1;
                vlen = d[p + 1];
                vs = d + p + 2;
                r = p + 2 + vlen;
            }
            if (r > limit)
                return -1;
            if ((c & 0x0F) == 0x01) {
                vt = T_STRING;
            }
            else if ((c & 0x0F) == 0x00) {
                value = PyBytes_FromStringAndSize((const char *)vs, (Py_ssize_t)vlen);
                if (value == NULL)
                    return -2;
                simple = 0;
            }
            else {
                for (pos_t i = 0; i < vlen; i++) {
                    if (vs[i] & 0x80)
                        return -1; /* not ASCII */
                }
                value = PyUnicode_DecodeASCII((const char *)vs, (Py_ssize_t)vlen, NULL);
                if (value == NULL)
                    return -2;
                simple = 0;
            }
            break;
        default: /* char, decimals, uuid, described, compound, invalid: Python's business */
            return -1;
        }
        p = r;

        /* the key, and its check against the tables */
        int id = name_id(ks, klen);
        PyObject *key;
        int mt = -1;
        if (id >= 0) {
            slot *sl = &slots[id];
            const struct name_spec *spec = &NAMES[id];
            if (sl->present || spec->check == C_UNHANDLED) { /* a duplicate key, or a rule without C code */
                Py_XDECREF(value);
                return -1;
            }
            sl->present = 1;
            key = st->names[id];
            Py_INCREF(key);
            int good;
            if (spec->kind == K_STRING) {
                good = vt == T_STRING;
            }
            else if (spec->kind == K_INTEGER) {
                good = vt == T_INTEGER;
            }
            else {
                good = vt == T_FLOATING;
            }
            if (good) {
                switch (spec->check) {
                case C_NON_EMPTY:
                    good = vlen > 0;
                    break;
                case C_ONE_OF:
                    good = is_one_of(spec, vs, vlen);
                    break;
                case C_MESSAGE_TYPE:
                    mt = message_type_id(vs, vlen);
                    good = mt >= 0;
                    iv.v = mt; /* kept for cross_checks */
                    break;
                case C_INT_RANGE:
                    good = int_in(iv, spec->low, spec->high) || (spec->has_also && !iv.huge && iv.v == spec->also);
                    break;
                case C_FLOAT_RANGE:
                    good = fv >= spec->flow && fv <= spec->fhigh; /* False for NaN */
                    break;
                case C_UPPER:
                    good = is_upper(vs, vlen, spec->low);
                    break;
                case C_LIST:
                    good = is_comma_list(vs, vlen);
                    break;
                case C_INTEGER_LIST:
                    good = is_integer_list(vs, vlen);
                    break;
                case C_PUBLISHER_ID:
                    good = is_publisher_id(vs, vlen, spec->low, spec->high, spec->also);
                    break;
                case C_QUADTREE:
                    good = is_quadtree(vs, vlen, spec->low);
                    break;
                default: /* C_NONE: any value of its kind (rules across properties may apply) */
                    break;
                }
            }
            if (good) {
                sl->valid = 1;
                sl->i = iv;
                sl->s = vs;
                sl->len = vlen;
            }
            else {
                *ok = 0;
            }
        }
        else {
            if (!is_custom_name(ks, klen))
                *ok = 0;
            key = PyUnicode_DecodeUTF8((const char *)ks, (Py_ssize_t)klen, NULL);
            if (key == NULL) {
                Py_XDECREF(value);
                if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    return -1;
                }
                return -2;
            }
        }

        /* the value object, if not built above */
        if (simple) {
            if (vt == T_INTEGER) {
                value = PyLong_FromLongLong(iv.v);
            }
            else if (vt == T_FLOATING) {
                value = PyFloat_FromDouble(fv);
            }
            else if (mt >= 0) {
                value = st->message_types[mt];
                Py_INCREF(value);
            }
            else { /* T_STRING */
                value = PyUnicode_DecodeUTF8((const char *)vs, (Py_ssize_t)vlen, NULL);
                if (value == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    Py_DECREF(key);
                    return -1;
                }
            }
            if (value == NULL) {
                Py_DECREF(key);
                return -2;
            }
        }
        int err = PyDict_SetItem(props, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (err < 0)
            return -2;
    }
    if (p != limit)
        return -1;
    if ((uint64_t)PyDict_GET_SIZE(props) != pairs)
        return -1; /* duplicate (custom) keys */
    return 0;
}

/* The checks of validate_application_properties that involve several properties: the mandatory
 * ones and the profile's rules across properties. */
static int
cross_checks(const slot *slots, int has_cap, int64_t cap)
{
    for (const int8_t *m = MANDATORY_ALL; *m >= 0; m++) {
        if (!slots[*m].present)
            return 0;
    }
    const slot *mts = &slots[MESSAGE_TYPE_SLOT];
    int mt = mts->valid ? (int)mts->i.v : -1;
    if (mt >= 0) {
        for (const int8_t *m = MANDATORY_BY_TYPE[mt]; *m >= 0; m++) {
            if (!slots[*m].present)
                return 0;
        }
    }

#if HAS_PUBLICATION_RULE
    /* publicationId: "<publisherId>:<id>" for the message's own (valid) publisherId */
    const slot *pub = &slots[PUBLICATION_SLOT];
    if (pub->valid) {
        const uint8_t *colon = pub->len ? memchr(pub->s, PUBLICATION_SEPARATOR, pub->len) : NULL;
        if (colon == NULL)
            return 0;
        pos_t prefix = (pos_t)(colon - pub->s);
        if (prefix == 0 || prefix + 1 >= pub->len)
            return 0;
        const slot *pid = &slots[PUBLISHER_SLOT];
        if (pid->valid && (pid->len != prefix || memcmp(pid->s, pub->s, prefix) != 0))
            return 0;
    }
#endif

#if HAS_CANCELLATION_RULE
    /* DENM: causeCode and subCauseCode are -1 together (a cancellation) or neither is */
    if (mt == CANCELLATION_TYPE && slots[CANCELLATION_FIRST].valid && slots[CANCELLATION_SECOND].valid) {
        const slot *a = &slots[CANCELLATION_FIRST], *b = &slots[CANCELLATION_SECOND];
        if ((!a->i.huge && a->i.v == CANCELLATION_VALUE) != (!b->i.huge && b->i.v == CANCELLATION_VALUE))
            return 0;
    }
#endif

#if HAS_SHARD_RULE
    /* shards (IP_128-130, appendix G) */
    const slot *sid = &slots[SHARD_ID_SLOT], *scount = &slots[SHARD_COUNT_SLOT];
    integer capability = {cap, 0};
    if (!sid->valid) {
        if (scount->valid && !sid->present)
            return 0;
        return 1;
    }
    if (int_lt(sid->i, SHARD_FIRST))
        return 0;
    if (scount->valid && int_gt(sid->i, scount->i))
        return 0;
    if (has_cap && int_gt(sid->i, capability))
        return 0;
    if (has_cap && scount->valid && scount->i.v != cap)
        return 0;
#else
    (void)has_cap;
    (void)cap;
#endif
    return 1;
}

/* ---- admit() ------------------------------------------------------------------------------- */

enum {
    S_HEADER = 0x70, S_DELIVERY_ANNOTATIONS, S_MESSAGE_ANNOTATIONS, S_PROPERTIES,
    S_APPLICATION_PROPERTIES, S_DATA, S_AMQP_SEQUENCE, S_AMQP_VALUE, S_FOOTER
};

/* What the section walk found; the application-properties entries are [ap_first, ap_stop). */
typedef struct {
    int has_ttl, has_absolute, has_ap, has_body;
    pos_t body; /* the first body section's descriptor (has_body) */
    int64_t ttl, absolute;
    uint64_t ap_count;
    pos_t ap_start, ap_first, ap_stop; /* ap_start: the map's constructor (the section's encoded value) */
} scanned;

/* scan_message(decode_properties=False), with smallulong descriptors only: 0 or -1. */
static int
scan(const uint8_t *d, pos_t end, scanned *out)
{
    pos_t pos = 0;
    int last = 0;
    uint64_t count;
    pos_t first, stop;
    if (end == 0)
        return -1;
    while (pos < end) {
        if (!(d[pos] == 0x00 && pos + 3 <= end && d[pos + 1] == 0x53))
            return -1; /* other descriptor forms (and errors): the Python path */
        int code = d[pos + 2];
        pos += 3;
        if (code < S_HEADER || code > S_FOOTER)
            return -1;
        if (pos >= end)
            return -1;
        if (code >= S_DATA) {
            if (code != S_FOOTER) { /* the first body section: its value must fit */
                out->has_body = 1;
                out->body = pos - 3;
                uint8_t c = d[pos];
                if (!(code == S_DATA && c == 0xA0 && pos + 2 <= end && pos + 2 + d[pos + 1] <= end)) {
                    pos_t after;
                    if (code == S_DATA) {
                        if (c != 0xA0 && c != 0xB0)
                            return -1;
                        if (skip_values(d, pos, end, 1, &after) < 0)
                            return -1;
                    }
                    else if (code == S_AMQP_SEQUENCE) {
                        if (compound(d, pos, end, 0xC0, 0xD0, &count, &first, &stop) < 0)
                            return -1;
                    }
                    else if (skip_values(d, pos, end, 1, &after) < 0) {
                        return -1;
                    }
                }
            }
            else if (compound(d, pos, end, 0xC1, 0xD1, &count, &first, &stop) < 0 || stop != end) {
                return -1; /* a footer must be the last section */
            }
            break;
        }
        if (code <= last)
            return -1; /* repeated or out of order */
        last = code;
        if (code == S_HEADER || code == S_PROPERTIES) {
            if (compound(d, pos, end, 0xC0, 0xD0, &count, &first, &stop) < 0)
                return -1;
            pos_t p = first;
            if (code == S_HEADER && count) {
                /* durable: boolean or null */
                uint8_t c = d[p]; /* p < stop: count <= stop - first */
                if (c == 0x40 || c == 0x41 || c == 0x42) {
                    p += 1;
                }
                else if (c == 0x56 && p + 2 <= stop && d[p + 1] <= 1) {
                    p += 2;
                }
                else {
                    return -1;
                }
                if (count > 1) { /* priority: ubyte or null */
                    if (p >= stop)
                        return -1;
                    c = d[p];
                    if (c == 0x40)
                        p += 1;
                    else if (c == 0x50 && p + 2 <= stop)
                        p += 2;
                    else
                        return -1;
                    if (count > 2) { /* ttl: uint or null */
                        if (p >= stop)
                            return -1;
                        c = d[p];
                        if (c == 0x70 && p + 5 <= stop) {
                            out->has_ttl = 1;
                            out->ttl = be32(d + p + 1);
                        }
                        else if (c == 0x52 && p + 2 <= stop) {
                            out->has_ttl = 1;
                            out->ttl = d[p + 1];
                        }
                        else if (c == 0x43) {
                            out->has_ttl = 1;
                            out->ttl = 0;
                        }
                        else if (c != 0x40) {
                            return -1;
                        }
                    }
                }
            }
            else if (code == S_PROPERTIES && count > 8) {
                int present;
                int64_t created;
                if (skip_values(d, p, stop, 8, &p) < 0)
                    return -1;
                if (timestamp_field(d, &p, stop, &out->has_absolute, &out->absolute) < 0)
                    return -1;
                if (count > 9 && timestamp_field(d, &p, stop, &present, &created) < 0)
                    return -1;
            }
            pos = stop;
        }
        else { /* delivery-annotations, message-annotations, application-properties: maps */
            if (compound(d, pos, end, 0xC1, 0xD1, &count, &first, &stop) < 0)
                return -1;
            if (code == S_APPLICATION_PROPERTIES) {
                if (count & 1)
                    return -1;
                out->has_ap = 1;
                out->ap_start = pos;
                out->ap_count = count;
                out->ap_first = first;
                out->ap_stop = stop;
            }
            pos = stop;
        }
    }
    return 0;
}

static PyObject *
optional_int(int present, int64_t value)
{
    if (!present)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(value);
}

/* The result tuple of admit(); steals props, verdict, ttl and absolute (NULL: an error is set). */
static PyObject *
admit_result(PyObject *props, PyObject *verdict, PyObject *ttl, PyObject *absolute)
{
    PyObject *result = PyTuple_New(4);
    if (result == NULL) {
        Py_DECREF(props);
        Py_DECREF(verdict);
        Py_DECREF(ttl);
        Py_DECREF(absolute);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, props);
    PyTuple_SET_ITEM(result, 1, verdict);
    PyTuple_SET_ITEM(result, 2, ttl);
    PyTuple_SET_ITEM(result, 3, absolute);
    return result;
}

/* Most application-properties sections kept in a cache dict given to admit() (then it is emptied). */
#define ADMIT_CACHE_MAX 4096

static PyObject *
admit_impl(PyObject *module, const uint8_t *d, pos_t end, PyObject *capability, PyObject *cache)
{
#if !ADMIT_PROFILE_HANDLED
    /* the profile has a rule across properties or a custom-name rule the C code cannot follow */
    (void)module, (void)d, (void)end, (void)capability, (void)cache;
    Py_RETURN_NONE;
#endif
    int has_cap = 0;
    int64_t cap = 0;
    if (capability != Py_None) {
        if (!PyLong_Check(capability))
            Py_RETURN_NONE;
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(capability, &overflow);
        if (overflow)
            Py_RETURN_NONE;
        if (v == -1 && PyErr_Occurred())
            return NULL;
        has_cap = 1;
        cap = v;
    }

    scanned sc;
    memset(&sc, 0, sizeof sc);
    if (scan(d, end, &sc) < 0)
        Py_RETURN_NONE;

    PyObject *ttl = optional_int(sc.has_ttl, sc.ttl);
    PyObject *absolute = ttl ? optional_int(sc.has_absolute, sc.absolute) : NULL;
    if (absolute == NULL) {
        Py_XDECREF(ttl);
        return NULL;
    }
    /* the same section read before, for the same capability shard count (the cache is the caller's,
       one per count): its properties object and verdict again */
    PyObject *key = NULL;
    if (cache != NULL && sc.has_ap) {
        key = PyBytes_FromStringAndSize((const char *)d + sc.ap_start, (Py_ssize_t)(sc.ap_stop - sc.ap_start));
        if (key == NULL)
            goto error;
        PyObject *known = PyDict_GetItemWithError(cache, key); /* borrowed */
        if (known != NULL && PyTuple_CheckExact(known) && PyTuple_GET_SIZE(known) == 2) {
            Py_DECREF(key);
            PyObject *props = PyTuple_GET_ITEM(known, 0), *verdict = PyTuple_GET_ITEM(known, 1);
            Py_INCREF(props);
            Py_INCREF(verdict);
            return admit_result(props, verdict, ttl, absolute);
        }
        if (PyErr_Occurred())
            goto error;
    }

    /* presized for the usual property count (no resize while filling); bounded for hostile counts */
#if PY_VERSION_HEX < 0x030D0000 && !defined(Py_LIMITED_API)
    PyObject *props = _PyDict_NewPresized(sc.has_ap ? (Py_ssize_t)(sc.ap_count >> 1 < 32 ? sc.ap_count >> 1 : 32) : 0);
#else
    PyObject *props = PyDict_New();
#endif
    if (props == NULL)
        goto error;
    int ok = 1;
    if (sc.has_ap) {
        slot slots[N_COUNT];
        memset(slots, 0, sizeof slots);
        int rc = read_properties(get_state(module), d, sc.ap_first, sc.ap_stop, sc.ap_count >> 1, props, slots, &ok);
        if (rc < 0) {
            Py_DECREF(props);
            Py_XDECREF(key);
            Py_DECREF(ttl);
            Py_DECREF(absolute);
            if (rc == -2)
                return NULL;
            Py_RETURN_NONE;
        }
        if (ok)
            ok = cross_checks(slots, has_cap, cap);
    }
    else {
        ok = 0; /* the mandatory properties are missing */
    }
    PyObject *verdict = ok ? Py_True : Py_False;
    Py_INCREF(verdict);
    if (key != NULL) {
        if (PyDict_GET_SIZE(cache) >= ADMIT_CACHE_MAX)
            PyDict_Clear(cache);
        PyObject *entry = PyTuple_Pack(2, props, verdict);
        int stored = entry != NULL ? PyDict_SetItem(cache, key, entry) : -1;
        Py_XDECREF(entry);
        Py_DECREF(key);
        if (stored < 0) {
            Py_DECREF(props);
            Py_DECREF(verdict);
            Py_DECREF(ttl);
            Py_DECREF(absolute);
            return NULL;
        }
    }
    return admit_result(props, verdict, ttl, absolute);
error:
    Py_XDECREF(key);
    Py_DECREF(ttl);
    Py_DECREF(absolute);
    return NULL;
}

PyDoc_STRVAR(admit_doc,
"admit(raw, capability_shard_count, cache=None, /) -> (properties, valid, ttl_ms, absolute_expiry_time_ms) | None\n"
"\n"
"Scan an encoded AMQP 1.0 message, decode its application properties and check them against\n"
"tables 1-7, as amqp_scan.scan_message, amqp_scan.decode_application_properties and\n"
"validation.validate_application_properties do. None: not handled here (malformed or unusual\n"
"input), use the Python path. ``raw`` is any contiguous bytes-like object. ``cache``: a dict the\n"
"caller keeps for one capability_shard_count: a section read before gives the same properties\n"
"object (read-only) and verdict again, without decoding; at most 4096 sections, then emptied.");

static PyObject *
admit(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 && nargs != 3) {
        PyErr_Format(PyExc_TypeError, "admit() takes 2 or 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *cache = nargs == 3 && args[2] != Py_None ? args[2] : NULL;
    if (cache != NULL && !PyDict_CheckExact(cache)) {
        PyErr_SetString(PyExc_TypeError, "admit(): cache must be a dict or None");
        return NULL;
    }
    PyObject *raw = args[0];
    if (PyBytes_CheckExact(raw))
        return admit_impl(module, (const uint8_t *)PyBytes_AS_STRING(raw), (pos_t)PyBytes_GET_SIZE(raw), args[1],
                          cache);
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE; /* not a contiguous buffer: the Python path decides */
    }
    PyObject *result = admit_impl(module, (const uint8_t *)view.buf, (pos_t)view.len, args[1], cache);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(locate_doc,
"locate(raw, /) -> (properties_start, properties_end, ttl_ms, body_offset) | None\n"
"\n"
"Where amqp_scan.scan_message(raw, decode_properties=False) finds the application-properties\n"
"section (its descriptor to its end; None, None without one), the header ttl (None: absent)\n"
"and the first body section (None: no body). None: not handled here (malformed or unusual\n"
"input), use scan_message.");

static PyObject *
optional_pos(int present, pos_t value)
{
    if (!present)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(value);
}

static PyObject *
locate(PyObject *module, PyObject *raw)
{
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    scanned sc;
    memset(&sc, 0, sizeof sc);
    int rc = scan((const uint8_t *)view.buf, (pos_t)view.len, &sc);
    PyBuffer_Release(&view);
    if (rc < 0)
        Py_RETURN_NONE;
    /* the section from its descriptor (a smallulong: 3 bytes before the map), as scan_message gives it */
    return Py_BuildValue("(NNNN)", optional_pos(sc.has_ap, sc.ap_start - 3), optional_pos(sc.has_ap, sc.ap_stop),
                         optional_int(sc.has_ttl, sc.ttl), optional_pos(sc.has_body, sc.body));
}

PyDoc_STRVAR(durable_doc,
"durable(fallback, raw, /) -> bool\n"
"\n"
"The header's durable field of an admitted message, as amqp_scan.header_durable reads it at a\n"
"glance (False without a header; list0; list8 whose first field is true, false or null), for\n"
"bytes; anything else is fallback(raw)'s answer.");

static PyObject *
durable(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "durable() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *raw = args[1];
    if (PyBytes_CheckExact(raw)) {
        const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(raw);
        Py_ssize_t n = PyBytes_GET_SIZE(raw);
        if (n < 4 || d[0] != 0x00)
            Py_RETURN_FALSE;
        if (d[1] == 0x53) {
            if (d[2] != S_HEADER || d[3] == 0x45)
                Py_RETURN_FALSE;
            if (d[3] == 0xC0 && n > 6) {
                uint8_t first = d[5] ? d[6] : 0x40;
                if (first == 0x41)
                    Py_RETURN_TRUE;
                if (first == 0x42 || first == 0x40)
                    Py_RETURN_FALSE;
            }
        }
    }
    return PyObject_CallOneArg(args[0], raw);
}

static PyMethodDef admit_methods[] = {
    {"admit", (PyCFunction)(void (*)(void))admit, METH_FASTCALL, admit_doc},
    {"durable", (PyCFunction)(void (*)(void))durable, METH_FASTCALL, durable_doc},
    {"locate", (PyCFunction)locate, METH_O, locate_doc},
    {NULL, NULL, 0, NULL},
};

static int
admit_traverse(PyObject *module, visitproc visit, void *arg)
{
    admit_state *st = get_state(module);
    if (st == NULL)
        return 0;
    for (int i = 0; i < N_COUNT; i++)
        Py_VISIT(st->names[i]);
    for (int i = 0; i < MT_COUNT; i++)
        Py_VISIT(st->message_types[i]);
    return 0;
}

static int
admit_clear(PyObject *module)
{
    admit_state *st = get_state(module);
    if (st == NULL)
        return 0;
    for (int i = 0; i < N_COUNT; i++)
        Py_CLEAR(st->names[i]);
    for (int i = 0; i < MT_COUNT; i++)
        Py_CLEAR(st->message_types[i]);
    return 0;
}

static void
admit_free(void *module)
{
    admit_clear((PyObject *)module);
}

static struct PyModuleDef admit_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "interchange.broker._admit",
    .m_doc = "C accelerator of message admission (scan, decode, validate); "
             "interchange.broker.amqp_scan and validation are the reference.",
    .m_size = sizeof(admit_state),
    .m_methods = admit_methods,
    .m_traverse = admit_traverse,
    .m_clear = admit_clear,
    .m_free = admit_free,
};

PyMODINIT_FUNC
PyInit__admit(void)
{
    PyObject *module = PyModule_Create(&admit_module);
    if (module == NULL)
        return NULL;
    admit_state *st = get_state(module);
    for (int i = 0; i < N_COUNT; i++) {
        st->names[i] = PyUnicode_InternFromString(NAMES[i].name);
        if (st->names[i] == NULL)
            goto fail;
    }
    for (int i = 0; i < MT_COUNT; i++) {
        st->message_types[i] = PyUnicode_InternFromString(MESSAGE_TYPES[i]);
        if (st->message_types[i] == NULL)
            goto fail;
    }
    return module;
fail:
    Py_DECREF(module);
    return NULL;
}
