/*
 * loadgen: AMQP 1.0 load generator for the interchange broker benchmark (benchmarks/bench_broker.py).
 *
 * Written for this project against proton-C's proactor API (Debian: libqpid-proton11-dev).
 * One thread, one proactor. Two modes:
 *
 *   run      P producer connections publish M messages in total (DENM/IVIM-like application
 *            properties valid per tables 1-2, payload of a given size whose first 8 bytes are the
 *            send time in ns, CLOCK_REALTIME) while K receiver links (one line each of a consumer
 *            file: "address<TAB>selector", the selector optional and sent as an
 *            apache.org:selector-filter:string source filter) count deliveries and measure the
 *            latency of each from the embedded timestamp. JSON result on stdout.
 *   connect  open C connections at once and count how many are open (AMQP open received) within
 *            a deadline. JSON result on stdout.
 *
 * Message i of a producer (i = 0 .. its share - 1) has messageType IVIM when i % 4 == 3, else DENM,
 * and lies in quadTree cell (i / 4) % cells; cell c is the tile prefix ROOT + c in base 4
 * (log4(cells) digits). bench_broker.py relies on this rule to compute the expected deliveries.
 *
 * By default the application properties come from 2 * cells pre-encoded templates, so a broker
 * sees the same few property sections over and over (repetitions). With --distinct every message
 * carries its own: the same templates, with a run-unique counter patched into fixed-width places
 * before each send (the publicationId suffix, the digits of the zoom-18 reference tile after the
 * cell prefix, latitude and longitude), so the routing shape stays the same and the cost is a few
 * dozen byte writes per message.
 *
 * With --subject the message's subject is an InterCor IF2 routing key (for a topic exchange, e.g.
 * RabbitMQ's "/exchange/amq.topic" target): <messageType>.<version>.<publisherId>.<subtype>.<the
 * reference tile's 18 digits, one word each>, e.g. DENM.1_3_1.NO00001.1.1.2.0.2.0.2.1.0.3.0.1....
 *
 * With --property KEY=VALUE (repeatable) every message carries exactly these string application
 * properties instead of the DENM/IVIM ones (e.g. an IF2 export's SPATEM: messageType, protocolVersion,
 * publisherId, publicationId, originatingCountry, quadTree; benchmarks/bench_if2.py), and with
 * --ttl MS a header TTL. With --if2-stamps the body is bench_if2.py's text stamp instead of a binary
 * timestamp: "<send ns, 19 digits>:0:<index, 10 digits>:" + 64 zero bytes (97 bytes; the index counts
 * over all producers, so every body is distinct and an IF2 consumer counts lost and duplicated ones);
 * with --rate the send time written is the message's slot on the producer's fixed grid, so a late
 * sender shows up as latency (coordinated omission avoided).
 *
 * TLS (amqps://): client certificate + key, trust bundle, TLS 1.3 only, server name checked
 * against --vhost; SASL EXTERNAL. Plain (amqp://): SASL ANONYMOUS, or PLAIN with --user.
 *
 * With --sync the generator writes "READY" to stderr once every link is attached and waits for a
 * line on stdin before publishing, and writes "DONE" when the measurement is over and waits for
 * another line before closing: the caller samples the broker's CPU time at these two points.
 *
 * A consumer only (--producers 0, --duration S): once its links are attached it writes "READY" to
 * stderr (it does not wait: a consumer that stopped reading would pile messages up at the broker),
 * settles everything, counts the deliveries of S seconds after --warmup S, and writes "DONE" to
 * stderr when the window is over. With --tlex-stamps FILE the latency of each comes from a TLEX stamp
 * (benchmarks/bench_tlex.py, interchange.bridges.tlex.payloads.stamped: big-endian send time in ns,
 * station id and sequence number at bytes 6..21 of the data section) and every sample (latency ns
 * int64, station uint32, sequence uint32, native byte order) is written to FILE for the caller to
 * find losses per station; "cpu_s" is this process's CPU time over the counted window.
 *
 * A consumer until a count (--producers 0, --expect D): counts from its first delivery, finishes once D
 * arrived and --idle-ms passed without another (so a duplicate would still be counted), or 5 s after
 * the last one when fewer came. With --if2-samples FILE every body is read as bench_if2.py's IF2 text
 * stamp ("<send ns>:<publisher>:<index>:") and one sample per delivery (send ns int64, receive ns
 * int64 (CLOCK_REALTIME), publisher int32, index int32, native byte order) is written to FILE, for
 * the caller's latency, lost and duplicated counts; "cpu_s" is this process's CPU from the first
 * delivery to the last (an IF2 import's C-Roads consumer, apart from the node's cost).
 */
#define _GNU_SOURCE
#include <proton/connection.h>
#include <proton/condition.h>
#include <proton/delivery.h>
#include <proton/disposition.h>
#include <proton/event.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/sasl.h>
#include <proton/session.h>
#include <proton/ssl.h>
#include <proton/terminus.h>
#include <proton/transport.h>
#include <proton/codec.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SELECTOR_DESCRIPTOR "apache.org:selector-filter:string"
#define TILE_ROOT "1202021"          /* 7 digits; cell digits follow; filled up to zoom 18 */
#define HEAD_KEEP 65536               /* bytes of a delivery kept for finding the timestamp */
#define MAX_ERRORS 8

/* ------------------------------------------------------------------ options */
static const char *opt_mode = "run";
static char opt_scheme[8] = "amqps", opt_host[256] = "127.0.0.1", opt_port[16] = "5671";
static const char *opt_cert, *opt_key, *opt_ca, *opt_vhost, *opt_user, *opt_password;
static const char *opt_target = "bench-in", *opt_consumer_file;
static long opt_messages = 1000, opt_size = 200, opt_producers = 1, opt_window = 1000;
static long opt_consumer_connections = 1, opt_consumer_credit = 200, opt_cells = 16;
static long opt_expect = 0, opt_idle_ms = 2000, opt_connections = 1000, opt_deadline_ms = 10000;
static double opt_rate = 0.0, opt_timeout = 300.0, opt_setup_timeout = 300.0, opt_duration = 0.0, opt_warmup = 0.0;
static const char *opt_tlex_stamps; /* consumer: TLEX stamps in, samples out to this file */
static const char *opt_if2_samples; /* consumer: IF2 text stamps in, samples out to this file */
static bool opt_presettled = false, opt_consumer_unsettled = false, opt_sync = false, opt_distinct = false;
static bool opt_subject = false, opt_durable = false, opt_if2_stamps = false;
#define MAX_PROPS 16
static const char *opt_props[MAX_PROPS]; /* --property KEY=VALUE */
static int n_props;
static long opt_ttl_ms = 0;
#define IF2_STAMP_LEN 33 /* "%019lld:0:%010ld:" */
#define IF2_BODY_LEN (IF2_STAMP_LEN + 64)

/* ------------------------------------------------------------------ state */
typedef enum { ROLE_PRODUCER = 1, ROLE_CONSUMER, ROLE_PROBE } role_t;

typedef struct {
  pn_link_t *link;
  pn_connection_t *conn;
  long first_index; /* --if2-stamps: the index of this producer's first message over all producers */
  long to_send, sent, settled, accepted, rejected, released, modified;
  uint64_t tag;
  bool attached;
  int64_t *sent_ns; /* send time by tag % ring (accept latency; unsettled deliveries are at most --window) */
} producer_t;

typedef struct {
  char *address, *selector;
  pn_link_t *link;
  long deliveries;
  bool attached;
} consumer_t;

typedef struct {
  role_t role;
  int index;
  pn_connection_t *conn;
  int64_t started_ns, opened_ns;
  bool opened, closed;
} conn_ctx_t;

static pn_proactor_t *proactor;
static pn_ssl_domain_t *ssl_domain;
static producer_t *producers;
static consumer_t *consumers;
static long n_consumers, consumers_attached, producers_attached;
static conn_ctx_t *ctxs;
static long n_ctxs;

typedef struct {
  unsigned char *bytes;
  size_t len, ts_offset;
  /* --distinct: where the per-message parts are (byte offsets into bytes) */
  size_t pubid_off, tile_off, tile_digits, lat_off, lon_off, subject_tile_off; /* subject: 0 = none */
  double lat, lon;
} template_t;
static template_t *templates; /* [cell * 2 + is_ivim] */
#define PUBID_DIGITS 20               /* decimal digits of the --distinct counter in publicationId */
static uint64_t distinct_seq;        /* --distinct: counter, starts at the run's start time in ns */

static int64_t *latencies;
static long n_lat, cap_lat;
static int64_t *accept_lat; /* send to the broker's accepted disposition (ns), one per accepted delivery */
static long n_acc, cap_acc;
#define SENT_RING(w) ((w) * 4 + 16)
static long total_deliveries;
static int64_t t_start_real; /* CLOCK_REALTIME at the start of publishing (--if2-stamps slots) */
static int64_t t_start, t_sent_done, t_last_delivery, t_first_delivery, t_done, t_setup_start;
static bool started, sending_done, finished, timed_out, aborted;
static unsigned char head[HEAD_KEEP], scratch[HEAD_KEEP];
typedef struct { int64_t latency_ns; uint32_t station, seq; } stamp_sample_t;
static stamp_sample_t *stamp_samples;
static long n_stamps, cap_stamps;
typedef struct { int64_t sent_ns, received_ns; int32_t publisher, index; } if2_sample_t;
static if2_sample_t *if2_samples;
static long n_if2, cap_if2;
static double cpu_at_start, cpu_at_finish;

static double cpu_now(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
         (double)u.ru_stime.tv_usec / 1e6;
}
static char errors[MAX_ERRORS][256];
static int n_errors;
static bool bytes_blocked, closing;
static long transports_closed;
static long open_count, open_failed;
static int64_t *open_times;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void add_error(const char *fmt, ...) {
  if (n_errors >= MAX_ERRORS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errors[n_errors++], sizeof errors[0], fmt, ap);
  va_end(ap);
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "loadgen: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* ------------------------------------------------------------------ message templates */
static int cell_digits(void) {
  int d = 0;
  long c = 1;
  while (c < opt_cells) { c *= 4; d++; }
  if (c != opt_cells || d < 1 || d > 8) die("--cells must be a power of 4 between 4 and 65536");
  return d;
}

static void tile_prefix(long cell, char *out) {
  int d = cell_digits();
  strcpy(out, TILE_ROOT);
  size_t n = strlen(out);
  for (int k = d - 1; k >= 0; k--) out[n++] = (char)('0' + ((cell >> (2 * k)) & 3));
  out[n] = 0;
}

static void put_str_prop(pn_data_t *d, const char *k, const char *v) {
  pn_data_put_string(d, pn_bytes(strlen(k), k));
  pn_data_put_string(d, pn_bytes(strlen(v), v));
}

/* Offset of the only occurrence of needle in buf[0..len), or die. */
static size_t find_bytes(const unsigned char *buf, size_t len, const void *needle, size_t n) {
  const unsigned char *hit = memmem(buf, len, needle, n);
  if (!hit) die("template: placeholder not found");
  if (memmem(hit + 1, len - (size_t)(hit + 1 - buf), needle, n)) die("template: placeholder not unique");
  return (size_t)(hit - buf);
}

static void put_be_double(unsigned char *p, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  for (int k = 7; k >= 0; k--) { p[k] = (unsigned char)(u & 0xff); u >>= 8; }
}

/* Offset of the 8 value bytes of an encoded AMQP double (0x82 + big-endian IEEE 754). */
static size_t find_double(const unsigned char *buf, size_t len, double v) {
  unsigned char enc[9] = {0x82};
  put_be_double(enc + 1, v);
  return find_bytes(buf, len, enc, 9) + 1;
}

/* --distinct: make template t this message's own (counter in publicationId, reference tile digits
 * after the cell prefix, latitude/longitude); the lengths stay, so nothing else moves. */
static void make_distinct(template_t *t) {
  uint64_t seq = ++distinct_seq, v = seq;
  unsigned char *p = t->bytes + t->pubid_off;
  for (int k = PUBID_DIGITS - 1; k >= 0; k--) { p[k] = (unsigned char)('0' + v % 10); v /= 10; }
  p = t->bytes + t->tile_off;
  unsigned char *q = t->subject_tile_off ? t->bytes + t->subject_tile_off : NULL; /* every other byte */
  v = seq;
  for (long k = (long)t->tile_digits - 1; k >= 0; k--) {
    p[k] = (unsigned char)('0' + (v & 3));
    if (q) q[2 * k] = p[k];
    v >>= 2;
  }
  double d = (double)(seq % 1000000) * 1e-9; /* < 0.001 degree: stays near the cell's own position */
  put_be_double(t->bytes + t->lat_off, t->lat + d);
  put_be_double(t->bytes + t->lon_off, t->lon + d);
}

static void build_templates(void) {
  templates = calloc((size_t)opt_cells * 2, sizeof *templates);
  char *payload = calloc(1, (size_t)opt_size);
  for (long cell = 0; cell < opt_cells; cell++) {
    for (int ivim = 0; ivim < 2; ivim++) {
      char prefix[32], t1[32], t2[32], quad[80], pubid[64], subject[128];
      tile_prefix(cell, prefix);
      /* --distinct: placeholders ('x', '#') that make_distinct() overwrites before each send */
      snprintf(t1, sizeof t1, "%s%s", prefix, opt_distinct ? "xxxxxxxxxxxxxxxxxxxxxx" : "0123012301230123012301");
      snprintf(t2, sizeof t2, "%s%s", prefix, "3210321032103210321032");
      t1[18] = 0;
      t2[18] = 0;
      snprintf(quad, sizeof quad, ",%s,%s,", t1, t2);
      snprintf(pubid, sizeof pubid, "NO00001:bench-%s-%ld%s", ivim ? "ivim" : "denm", cell,
               opt_distinct ? "-####################" : "");
      pn_message_t *m = pn_message();
      pn_message_set_inferred(m, true);
      if (opt_durable) pn_message_set_durable(m, true);
      if (opt_subject) { /* IF2 routing key: type.version.provider.subtype.q1.q2...q18 */
        int n = snprintf(subject, sizeof subject, "%s.%s.NO00001.%d", ivim ? "IVIM" : "DENM",
                         ivim ? "2_0_0" : "1_3_1", ivim ? 0 : 1 + (int)(cell % 90));
        for (int k = 0; k < 18; k++) n += snprintf(subject + n, sizeof subject - (size_t)n, ".%c", t1[k]);
        pn_message_set_subject(m, subject);
      }
      if (opt_ttl_ms > 0) pn_message_set_ttl(m, (pn_millis_t)opt_ttl_ms);
      pn_data_t *p = pn_message_properties(m);
      pn_data_put_map(p);
      pn_data_enter(p);
      if (n_props) { /* --property: exactly these (the same for every cell and type) */
        for (int k = 0; k < n_props; k++) {
          const char *eq = strchr(opt_props[k], '=');
          pn_data_put_string(p, pn_bytes((size_t)(eq - opt_props[k]), opt_props[k]));
          pn_data_put_string(p, pn_bytes(strlen(eq + 1), eq + 1));
        }
        pn_data_exit(p);
        goto body;
      }
      put_str_prop(p, "publisherId", "NO00001");
      put_str_prop(p, "publicationId", pubid);
      put_str_prop(p, "originatingCountry", "NO");
      put_str_prop(p, "protocolVersion", ivim ? "IVIM:2.0.0" : "DENM:1.3.1");
      put_str_prop(p, "messageType", ivim ? "IVIM" : "DENM");
      put_str_prop(p, "quadTree", quad);
      if (!ivim) {
        pn_data_put_string(p, pn_bytes(9, "causeCode"));
        pn_data_put_int(p, 1 + (int)(cell % 90));
        pn_data_put_string(p, pn_bytes(12, "subCauseCode"));
        pn_data_put_int(p, 0);
      }
      pn_data_put_string(p, pn_bytes(8, "latitude"));
      pn_data_put_double(p, 59.9 + cell * 0.001);
      pn_data_put_string(p, pn_bytes(9, "longitude"));
      pn_data_put_double(p, 10.7 + cell * 0.001);
      pn_data_exit(p);
    body:
      pn_data_put_binary(pn_message_body(m), pn_bytes((size_t)opt_size, payload));
      size_t cap = (size_t)opt_size + 4096, len = cap;
      unsigned char *buf = malloc(cap);
      int rc = pn_message_encode(m, (char *)buf, &len);
      if (rc) die("pn_message_encode failed: %d", rc);
      pn_message_free(m);
      template_t *t = &templates[cell * 2 + ivim];
      t->bytes = buf;
      t->len = len;
      t->ts_offset = len - (size_t)opt_size;
      if (opt_distinct) {
        size_t props_end = t->ts_offset; /* the placeholders lie before the body */
        t->pubid_off = find_bytes(buf, props_end, "####################", PUBID_DIGITS);
        char tile_mark[40];
        int n = snprintf(tile_mark, sizeof tile_mark, ",%sx", prefix);
        t->tile_off = find_bytes(buf, props_end, tile_mark, (size_t)n) + (size_t)n - 1;
        t->tile_digits = 18 - strlen(prefix);
        t->lat = 59.9 + cell * 0.001;
        t->lon = 10.7 + cell * 0.001;
        t->lat_off = find_double(buf, props_end, t->lat);
        t->lon_off = find_double(buf, props_end, t->lon);
        if (opt_subject) { /* the subject's tile words after the prefix: ".x.x..." */
          char mark[64];
          int m = 0;
          for (size_t k = 0; k < strlen(prefix); k++) m += snprintf(mark + m, sizeof mark - (size_t)m, ".%c", prefix[k]);
          m += snprintf(mark + m, sizeof mark - (size_t)m, ".x");
          t->subject_tile_off = find_bytes(buf, props_end, mark, (size_t)m) + (size_t)m - 1;
        }
      }
      /* the body is the last section: data (0x00 0x53 0x75) holding vbin8 or vbin32 */
      size_t hdr = opt_size <= 255 ? 5 : 8;
      if (t->ts_offset < hdr || buf[t->ts_offset - hdr + 2] != 0x75)
        die("unexpected encoding of the message body");
    }
  }
  free(payload);
}

/* ------------------------------------------------------------------ AMQP skipping (consumer side) */
/* Size in bytes of the encoded value at p (constructor included), or 0 if unknown/truncated. */
static size_t amqp_value_size(const unsigned char *p, size_t avail) {
  if (avail < 1) return 0;
  unsigned char c = p[0];
  if (c == 0x00) { /* described: descriptor then value */
    size_t a = amqp_value_size(p + 1, avail - 1);
    if (!a) return 0;
    size_t b = amqp_value_size(p + 1 + a, avail - 1 - a);
    return b ? 1 + a + b : 0;
  }
  size_t n;
  switch (c >> 4) {
    case 0x4: return 1;
    case 0x5: return avail >= 2 ? 2 : 0;
    case 0x6: return avail >= 3 ? 3 : 0;
    case 0x7: return avail >= 5 ? 5 : 0;
    case 0x8: return avail >= 9 ? 9 : 0;
    case 0x9: return avail >= 17 ? 17 : 0;
    case 0xa: case 0xc: case 0xe:
      if (avail < 2) return 0;
      n = 2 + (size_t)p[1];
      return n <= avail ? n : 0;
    case 0xb: case 0xd: case 0xf:
      if (avail < 5) return 0;
      n = 5 + ((size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | (size_t)p[4]);
      return n <= avail ? n : 0;
    default: return 0;
  }
}

static uint64_t be_bytes(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

/* The first data section's bytes (and their length), or NULL. */
static const unsigned char *data_section(const unsigned char *p, size_t len, size_t *size);

/* The send timestamp in the first data section, or -1. */
static int64_t find_timestamp(const unsigned char *p, size_t len) {
  size_t off = 0;
  while (off + 3 < len) {
    if (p[off] != 0x00) return -1;
    if (p[off + 1] == 0x53 && p[off + 2] == 0x75) { /* data section */
      const unsigned char *v = p + off + 3;
      size_t rest = len - off - 3, skip;
      if (rest < 1) return -1;
      if (v[0] == 0xa0) skip = 2;
      else if (v[0] == 0xb0) skip = 5;
      else return -1;
      if (rest < skip + 8) return -1;
      int64_t ts;
      memcpy(&ts, v + skip, 8);
      return ts;
    }
    size_t s = amqp_value_size(p + off, len - off);
    if (!s) return -1;
    off += s;
  }
  return -1;
}

static const unsigned char *data_section(const unsigned char *p, size_t len, size_t *size) {
  size_t off = 0;
  while (off + 3 < len) {
    if (p[off] != 0x00) return NULL;
    if (p[off + 1] == 0x53 && p[off + 2] == 0x75) {
      const unsigned char *v = p + off + 3;
      size_t rest = len - off - 3;
      if (rest >= 2 && v[0] == 0xa0) { *size = v[1] <= rest - 2 ? v[1] : rest - 2; return v + 2; }
      if (rest >= 5 && v[0] == 0xb0) {
        size_t n = (size_t)be_bytes(v + 1, 4);
        *size = n <= rest - 5 ? n : rest - 5;
        return v + 5;
      }
      return NULL;
    }
    size_t s = amqp_value_size(p + off, len - off);
    if (!s) return NULL;
    off += s;
  }
  return NULL;
}

/* ------------------------------------------------------------------ connections */
static pn_connection_t *open_connection(role_t role, int index) {
  pn_connection_t *c = pn_connection();
  pn_transport_t *t = pn_transport();
  char container[128], addr[PN_MAX_ADDR];
  snprintf(container, sizeof container, "loadgen-%d-%d-%d", (int)getpid(), (int)role, index);
  pn_connection_set_container(c, container);
  if (opt_vhost) pn_connection_set_hostname(c, opt_vhost);
  pn_sasl_t *sasl = pn_sasl(t);
  if (strcmp(opt_scheme, "amqps") == 0) {
    pn_ssl_t *ssl = pn_ssl(t);
    if (pn_ssl_init(ssl, ssl_domain, NULL)) die("pn_ssl_init failed");
    if (opt_vhost) pn_ssl_set_peer_hostname(ssl, opt_vhost);
    pn_sasl_allowed_mechs(sasl, "EXTERNAL");
  } else if (opt_user) {
    pn_connection_set_user(c, opt_user);
    if (opt_password) pn_connection_set_password(c, opt_password);
    pn_sasl_allowed_mechs(sasl, "PLAIN");
    pn_sasl_set_allow_insecure_mechs(sasl, true);
  } else {
    pn_sasl_allowed_mechs(sasl, "ANONYMOUS");
  }
  conn_ctx_t *ctx = &ctxs[n_ctxs];
  ctx->role = role;
  ctx->index = index;
  ctx->conn = c;
  ctx->started_ns = mono_ns();
  pn_connection_set_context(c, ctx);
  n_ctxs++;
  pn_connection_open(c);
  pn_proactor_addr(addr, sizeof addr, opt_host, opt_port);
  pn_proactor_connect2(proactor, c, t, addr);
  return c;
}

static void setup_ssl(void) {
  if (strcmp(opt_scheme, "amqps") != 0) return;
  if (!opt_cert || !opt_key || !opt_ca) die("amqps needs --cert, --key and --ca");
  ssl_domain = pn_ssl_domain(PN_SSL_MODE_CLIENT);
  if (pn_ssl_domain_set_credentials(ssl_domain, opt_cert, opt_key, NULL)) die("cannot load %s / %s", opt_cert, opt_key);
  if (pn_ssl_domain_set_trusted_ca_db(ssl_domain, opt_ca)) die("cannot load %s", opt_ca);
  if (pn_ssl_domain_set_peer_authentication(ssl_domain, opt_vhost ? PN_SSL_VERIFY_PEER_NAME : PN_SSL_VERIFY_PEER, NULL))
    die("cannot set peer authentication");
  if (pn_ssl_domain_set_protocols(ssl_domain, "TLSv1.3")) die("cannot restrict TLS to 1.3");
}

static void open_producer_link(producer_t *p) {
  pn_session_t *s = pn_session(p->conn);
  pn_session_open(s);
  char name[64];
  snprintf(name, sizeof name, "producer-%ld", (long)(p - producers));
  p->link = pn_sender(s, name);
  pn_terminus_set_address(pn_link_target(p->link), opt_target);
  pn_link_set_snd_settle_mode(p->link, opt_presettled ? PN_SND_SETTLED : PN_SND_UNSETTLED);
  pn_link_set_context(p->link, p);
  pn_link_open(p->link);
}

static void open_consumer_links(pn_connection_t *c, long conn_index) {
  pn_session_t *s = pn_session(c);
  pn_session_set_incoming_capacity(s, 64 * 1024 * 1024);
  pn_session_open(s);
  for (long i = conn_index; i < n_consumers; i += opt_consumer_connections) {
    consumer_t *k = &consumers[i];
    char name[64];
    snprintf(name, sizeof name, "consumer-%ld", i);
    k->link = pn_receiver(s, name);
    pn_terminus_t *src = pn_link_source(k->link);
    pn_terminus_set_address(src, k->address);
    if (k->selector && *k->selector) {
      pn_data_t *f = pn_terminus_filter(src);
      pn_data_put_map(f);
      pn_data_enter(f);
      pn_data_put_symbol(f, pn_bytes(8, "selector"));
      pn_data_put_described(f);
      pn_data_enter(f);
      pn_data_put_symbol(f, pn_bytes(strlen(SELECTOR_DESCRIPTOR), SELECTOR_DESCRIPTOR));
      pn_data_put_string(f, pn_bytes(strlen(k->selector), k->selector));
      pn_data_exit(f);
      pn_data_exit(f);
    }
    pn_link_set_snd_settle_mode(k->link, opt_consumer_unsettled ? PN_SND_UNSETTLED : PN_SND_SETTLED);
    pn_link_set_rcv_settle_mode(k->link, PN_RCV_FIRST);
    pn_link_set_context(k->link, k);
    pn_link_open(k->link);
    pn_link_flow(k->link, (int)opt_consumer_credit);
  }
}

/* ------------------------------------------------------------------ producing */
static long allowed_by_rate(producer_t *p) {
  if (opt_rate <= 0) return p->to_send;
  double per = opt_rate / (double)opt_producers;
  double elapsed = (double)(mono_ns() - t_start) / 1e9;
  long n = (long)(elapsed * per) + 1;
  return n < p->to_send ? n : p->to_send;
}

/* --if2-stamps: "<ns>:0:<index>:" fixed width (the padding after it stays zero); paced: the slot. */
static void write_if2_stamp(producer_t *p, unsigned char *at, int64_t now) {
  int64_t stamp = now;
  if (opt_rate > 0) stamp = t_start_real + (int64_t)((double)p->sent * 1e9 * (double)opt_producers / opt_rate);
  char text[IF2_STAMP_LEN + 1];
  snprintf(text, sizeof text, "%019" PRId64 ":0:%010ld:", stamp, p->first_index + p->sent);
  memcpy(at, text, IF2_STAMP_LEN);
}

static void pump(producer_t *p) {
  if (!started || !p->link || finished) return;
  long limit = allowed_by_rate(p);
  pn_session_t *s = pn_link_session(p->link);
  while (p->sent < limit && pn_link_credit(p->link) > 0) {
    if (!opt_presettled && p->sent - p->settled >= opt_window) break;
    if (pn_session_outgoing_bytes(s) > (size_t)8 * 1024 * 1024) { bytes_blocked = true; break; }
    long i = p->sent;
    long cell = (i / 4) % opt_cells;
    int ivim = (i % 4) == 3;
    template_t *t = &templates[cell * 2 + ivim];
    uint64_t tag = ++p->tag;
    pn_delivery_t *d = pn_delivery(p->link, pn_dtag((const char *)&tag, sizeof tag));
    int64_t ts = now_ns();
    if (opt_if2_stamps) write_if2_stamp(p, t->bytes + t->ts_offset, ts);
    else memcpy(t->bytes + t->ts_offset, &ts, 8);
    if (opt_distinct) make_distinct(t);
    pn_link_send(p->link, (const char *)t->bytes, t->len);
    pn_link_advance(p->link);
    if (opt_presettled) pn_delivery_settle(d);
    else {
      if (!p->sent_ns) p->sent_ns = calloc((size_t)SENT_RING(opt_window), sizeof *p->sent_ns);
      p->sent_ns[tag % (uint64_t)SENT_RING(opt_window)] = mono_ns();
    }
    p->sent++;
  }
}

static void check_sending_done(void) {
  if (sending_done || !started) return;
  for (long i = 0; i < opt_producers; i++) {
    producer_t *p = &producers[i];
    if (p->sent < p->to_send) return;
    if (!opt_presettled && p->settled < p->sent) return;
  }
  sending_done = true;
  t_sent_done = mono_ns();
}

/* ------------------------------------------------------------------ readiness, finishing */
static void wait_stdin_line(void) {
  char line[64];
  if (!fgets(line, sizeof line, stdin)) { /* caller gone: go on */ }
}

static void maybe_start(void) {
  if (started || aborted) return;
  if (producers_attached < opt_producers || consumers_attached < n_consumers) return;
  if (opt_producers == 0) { /* a consumer: the window starts after the warm-up, nothing waits */
    fprintf(stderr, "READY\n");
    fflush(stderr);
    started = true;
    t_start = mono_ns() + (int64_t)(opt_warmup * 1e9);
    cpu_at_start = -1;
    return;
  }
  if (opt_sync) {
    fprintf(stderr, "READY\n");
    fflush(stderr);
    wait_stdin_line();
  }
  started = true;
  t_start = mono_ns();
  t_start_real = now_ns();
  cpu_at_start = cpu_now();
  /* a connection's objects are touched only while handling its own events: wake the producers */
  for (long i = 0; i < opt_producers; i++) pn_connection_wake(producers[i].conn);
}

static void finish(void) {
  if (finished) return;
  finished = true;
  t_done = mono_ns();
  cpu_at_finish = cpu_now();
  if (opt_producers == 0) {
    fprintf(stderr, "DONE\n");
    fflush(stderr);
  }
}

static void check_done(void) {
  if (finished || !started) return;
  check_sending_done();
  if (!sending_done) return;
  if (opt_duration > 0) { /* a consumer for a fixed window */
    if (mono_ns() - t_start >= (int64_t)(opt_duration * 1e9)) {
      if (cpu_at_start < 0) cpu_at_start = cpu_now();
      finish();
    }
    return;
  }
  if (opt_producers == 0 && opt_expect > 0) { /* a consumer until D deliveries, then --idle-ms quiet (a duplicate
                                                  would still come); short of D, it gives up after 5 s without one */
    int64_t quiet = t_last_delivery ? mono_ns() - t_last_delivery : 0;
    if ((total_deliveries >= opt_expect && quiet > opt_idle_ms * 1000000LL) || quiet > 5000000000LL) finish();
    return;
  }
  if (opt_expect > 0 && total_deliveries >= opt_expect) { finish(); return; }
  int64_t last = t_last_delivery > t_sent_done ? t_last_delivery : t_sent_done;
  if (mono_ns() - last > opt_idle_ms * 1000000LL) finish();
}

/* ------------------------------------------------------------------ events */
/* An IF2 text stamp "<send ns>:<publisher>:<index>:" (bench_if2.py, if2_loadgen.py; publisher and
 * index may be -1): false when the body is not one. */
static bool parse_if2_stamp(const unsigned char *v, size_t n, if2_sample_t *out) {
  int64_t field[3];
  size_t at = 0;
  for (int f = 0; f < 3; f++) {
    bool negative = at < n && v[at] == '-';
    if (negative) at++;
    int64_t x = 0;
    size_t digits = 0;
    for (; at < n && v[at] >= '0' && v[at] <= '9'; at++, digits++) x = x * 10 + (v[at] - '0');
    if (!digits || at >= n || v[at] != ':') return false;
    at++;
    field[f] = negative ? -x : x;
  }
  out->sent_ns = field[0];
  out->publisher = (int32_t)field[1];
  out->index = (int32_t)field[2];
  return true;
}

static void on_delivery(pn_event_t *e) {
  pn_delivery_t *d = pn_event_delivery(e);
  pn_link_t *l = pn_delivery_link(d);
  if (pn_link_is_sender(l)) {
    producer_t *p = pn_link_get_context(l);
    if (!pn_delivery_updated(d)) return;
    uint64_t state = pn_delivery_remote_state(d);
    if (!state && !pn_delivery_settled(d)) return;
    if (state == PN_ACCEPTED) {
      p->accepted++;
      pn_delivery_tag_t dt = pn_delivery_tag(d);
      uint64_t tag = 0;
      if (dt.size == sizeof tag && p->sent_ns) {
        memcpy(&tag, dt.start, sizeof tag);
        if (n_acc == cap_acc) {
          cap_acc = cap_acc ? cap_acc * 2 : 1 << 16;
          accept_lat = realloc(accept_lat, (size_t)cap_acc * sizeof *accept_lat);
        }
        accept_lat[n_acc++] = mono_ns() - p->sent_ns[tag % (uint64_t)SENT_RING(opt_window)];
      }
    }
    else if (state == PN_REJECTED) {
      p->rejected++;
      pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(d));
      if (pn_condition_is_set(c))
        add_error("rejected: %s %s", pn_condition_get_name(c), pn_condition_get_description(c) ? pn_condition_get_description(c) : "");
    } else if (state == PN_RELEASED) p->released++;
    else if (state == PN_MODIFIED) p->modified++;
    p->settled++;
    pn_delivery_settle(d);
    pump(p);
    check_done();
    return;
  }
  if (!pn_delivery_readable(d) || pn_delivery_partial(d)) return;
  consumer_t *k = pn_link_get_context(l);
  size_t size = pn_delivery_pending(d), kept = 0;
  ssize_t got;
  got = pn_link_recv(l, (char *)head, sizeof head);
  if (got > 0) kept = (size_t)got;
  while (kept == sizeof head && (got = pn_link_recv(l, (char *)scratch, sizeof scratch)) > 0) {}
  (void)size;
  int64_t now = now_ns();
  pn_link_advance(l);
  if (!pn_delivery_settled(d)) pn_delivery_update(d, PN_ACCEPTED);
  pn_delivery_settle(d);
  int credit = pn_link_credit(l);
  if (credit < opt_consumer_credit / 2) pn_link_flow(l, (int)opt_consumer_credit - credit);
  if (!started || finished) return;
  if (opt_producers == 0) {
    if (mono_ns() < t_start) return; /* warming up */
    if (cpu_at_start < 0) cpu_at_start = cpu_now();
  }
  k->deliveries++;
  total_deliveries++;
  if (opt_tlex_stamps) {
    size_t n = 0;
    const unsigned char *v = data_section(head, kept, &n);
    if (v && n >= 22) {
      if (n_stamps == cap_stamps) {
        cap_stamps = cap_stamps ? cap_stamps * 2 : 1 << 16;
        stamp_samples = realloc(stamp_samples, (size_t)cap_stamps * sizeof *stamp_samples);
      }
      stamp_sample_t *s = &stamp_samples[n_stamps++];
      s->latency_ns = now - (int64_t)be_bytes(v + 6, 8);
      s->station = (uint32_t)be_bytes(v + 14, 4);
      s->seq = (uint32_t)be_bytes(v + 18, 4);
    }
  }
  int64_t if2_sent = -1;
  if (opt_if2_samples) {
    size_t n = 0;
    const unsigned char *v = data_section(head, kept, &n);
    if (n_if2 == cap_if2) {
      cap_if2 = cap_if2 ? cap_if2 * 2 : 1 << 16;
      if2_samples = realloc(if2_samples, (size_t)cap_if2 * sizeof *if2_samples);
    }
    if (v && parse_if2_stamp(v, n, &if2_samples[n_if2])) {
      if2_samples[n_if2].received_ns = now;
      if2_sent = if2_samples[n_if2++].sent_ns;
    }
  }
  int64_t ts = opt_tlex_stamps ? -1 : opt_if2_samples ? if2_sent : find_timestamp(head, kept);
  if (opt_tlex_stamps && n_stamps) ts = now - stamp_samples[n_stamps - 1].latency_ns;
  if (ts > 0) {
    if (n_lat == cap_lat) {
      cap_lat = cap_lat ? cap_lat * 2 : 1 << 16;
      latencies = realloc(latencies, (size_t)cap_lat * sizeof *latencies);
    }
    latencies[n_lat++] = now - ts;
  }
  int64_t m = mono_ns();
  if (!t_first_delivery) t_first_delivery = m;
  t_last_delivery = m;
  check_done();
}

static void condition_error(const char *what, pn_condition_t *c) {
  if (c && pn_condition_is_set(c)) {
    add_error("%s: %s %s", what, pn_condition_get_name(c),
              pn_condition_get_description(c) ? pn_condition_get_description(c) : "");
  }
}

static void handle(pn_event_t *e) {
  switch (pn_event_type(e)) {
    case PN_CONNECTION_REMOTE_OPEN: {
      pn_connection_t *c = pn_event_connection(e);
      conn_ctx_t *ctx = pn_connection_get_context(c);
      if (ctx && !ctx->opened) {
        ctx->opened = true;
        ctx->opened_ns = mono_ns();
        if (ctx->role == ROLE_PROBE) open_times[open_count++] = ctx->opened_ns - t_setup_start;
      }
      break;
    }
    case PN_CONNECTION_WAKE: {
      conn_ctx_t *ctx = pn_connection_get_context(pn_event_connection(e));
      if (closing) pn_connection_close(pn_event_connection(e));
      else if (ctx && ctx->role == ROLE_PRODUCER) pump(&producers[ctx->index]);
      break;
    }
    case PN_LINK_REMOTE_OPEN: {
      pn_link_t *l = pn_event_link(e);
      if (pn_link_is_sender(l)) {
        producer_t *p = pn_link_get_context(l);
        if (p && !p->attached) { p->attached = true; producers_attached++; }
      } else {
        consumer_t *k = pn_link_get_context(l);
        if (k && !k->attached) { k->attached = true; consumers_attached++; }
      }
      maybe_start();
      break;
    }
    case PN_LINK_FLOW: {
      pn_link_t *l = pn_event_link(e);
      if (pn_link_is_sender(l)) pump(pn_link_get_context(l));
      break;
    }
    case PN_DELIVERY:
      on_delivery(e);
      break;
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH: {
      pn_link_t *l = pn_event_link(e);
      condition_error(pn_link_is_sender(l) ? "producer link closed" : "consumer link closed", pn_link_remote_condition(l));
      if (!finished) { aborted = true; if (!n_errors) add_error("link closed by the peer"); }
      pn_link_close(l);
      break;
    }
    case PN_CONNECTION_REMOTE_CLOSE: {
      pn_connection_t *c = pn_event_connection(e);
      condition_error("connection closed", pn_connection_remote_condition(c));
      pn_connection_close(c);
      break;
    }
    case PN_TRANSPORT_CLOSED: {
      pn_transport_t *t = pn_event_transport(e);
      pn_connection_t *c = pn_event_connection(e);
      conn_ctx_t *ctx = c ? pn_connection_get_context(c) : NULL;
      if (ctx && !ctx->closed) {
        ctx->closed = true;
        transports_closed++;
        if (ctx->role == ROLE_PROBE) {
          if (!ctx->opened) { open_failed++; condition_error("connection failed", pn_transport_condition(t)); }
        } else if (!finished) {
          condition_error("transport closed", pn_transport_condition(t));
          aborted = true;
          if (!n_errors) add_error("transport closed before the end");
        }
      }
      break;
    }
    default:
      break;
  }
}

/* ------------------------------------------------------------------ results */
static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct_of(const int64_t *values, long n, double q) {
  if (!n) return 0;
  long i = (long)(q * (double)(n - 1) + 0.5);
  return (double)values[i] / 1000.0;
}

static double pct(double q) { return pct_of(latencies, n_lat, q); }

static void print_errors(FILE *f) {
  fprintf(f, "\"errors\": [");
  for (int i = 0; i < n_errors; i++) {
    if (i) fprintf(f, ", ");
    json_string(f, errors[i]);
  }
  fprintf(f, "]");
}

static void report_run(void) {
  long sent = 0, accepted = 0, rejected = 0, released = 0, modified = 0, min_link = -1, max_link = 0;
  for (long i = 0; i < opt_producers; i++) {
    sent += producers[i].sent;
    accepted += producers[i].accepted;
    rejected += producers[i].rejected;
    released += producers[i].released;
    modified += producers[i].modified;
  }
  for (long i = 0; i < n_consumers; i++) {
    long d = consumers[i].deliveries;
    if (min_link < 0 || d < min_link) min_link = d;
    if (d > max_link) max_link = d;
  }
  qsort(latencies, (size_t)n_lat, sizeof *latencies, cmp64);
  if (n_acc) qsort(accept_lat, (size_t)n_acc, sizeof *accept_lat, cmp64);
  double mean = 0;
  for (long i = 0; i < n_lat; i++) mean += (double)latencies[i];
  if (n_lat) mean /= (double)n_lat * 1000.0;
  double send_s = sending_done ? (double)(t_sent_done - t_start) / 1e9 : (double)(t_done - t_start) / 1e9;
  double deliver_s = t_last_delivery ? (double)(t_last_delivery - t_start) / 1e9 : 0;
  FILE *f = stdout;
  fprintf(f, "{\"mode\": \"run\", \"producers\": %ld, \"consumers\": %ld, \"size\": %ld, \"presettled\": %s, ",
          opt_producers, n_consumers, opt_size, opt_presettled ? "true" : "false");
  fprintf(f, "\"sent\": %ld, \"accepted\": %ld, \"rejected\": %ld, \"released\": %ld, \"modified\": %ld, ",
          sent, accepted, rejected, released, modified);
  fprintf(f, "\"deliveries\": %ld, \"expected\": %ld, \"min_per_link\": %ld, \"max_per_link\": %ld, ",
          total_deliveries, opt_expect, min_link < 0 ? 0 : min_link, max_link);
  fprintf(f, "\"send_seconds\": %.6f, \"deliver_seconds\": %.6f, \"sent_per_s\": %.1f, \"delivered_per_s\": %.1f, ",
          send_s, deliver_s, send_s > 0 ? (double)sent / send_s : 0, deliver_s > 0 ? (double)total_deliveries / deliver_s : 0);
  fprintf(f, "\"latency_us\": {\"count\": %ld, \"p50\": %.1f, \"p90\": %.1f, \"p99\": %.1f, \"max\": %.1f, \"mean\": %.1f}, ",
          n_lat, pct(0.50), pct(0.90), pct(0.99), n_lat ? (double)latencies[n_lat - 1] / 1000.0 : 0, mean);
  fprintf(f, "\"accept_latency_us\": {\"count\": %ld, \"p50\": %.1f, \"p99\": %.1f, \"max\": %.1f}, \"durable\": %s, ",
          n_acc, pct_of(accept_lat, n_acc, 0.50), pct_of(accept_lat, n_acc, 0.99),
          n_acc ? (double)accept_lat[n_acc - 1] / 1000.0 : 0, opt_durable ? "true" : "false");
  fprintf(f, "\"timed_out\": %s, \"aborted\": %s, ", timed_out ? "true" : "false", aborted ? "true" : "false");
  fprintf(f, "\"cpu_s\": %.6f, \"stamps\": %ld, ", cpu_at_finish - cpu_at_start, n_stamps);
  if (opt_tlex_stamps) {
    FILE *out = fopen(opt_tlex_stamps, "wb");
    if (!out || fwrite(stamp_samples, sizeof *stamp_samples, (size_t)n_stamps, out) != (size_t)n_stamps)
      add_error("cannot write %s", opt_tlex_stamps);
    if (out) fclose(out);
  }
  if (opt_if2_samples) {
    FILE *out = fopen(opt_if2_samples, "wb");
    if (!out || fwrite(if2_samples, sizeof *if2_samples, (size_t)n_if2, out) != (size_t)n_if2)
      add_error("cannot write %s", opt_if2_samples);
    if (out) fclose(out);
  }
  fprintf(f, "\"if2_samples\": %ld, ", n_if2);
  print_errors(f);
  fprintf(f, "}\n");
  fflush(f);
}

static void report_connect(void) {
  qsort(open_times, (size_t)open_count, sizeof *open_times, cmp64);
  FILE *f = stdout;
  fprintf(f, "{\"mode\": \"connect\", \"attempted\": %ld, \"opened\": %ld, \"failed\": %ld, \"deadline_ms\": %ld, ",
          opt_connections, open_count, open_failed, opt_deadline_ms);
  fprintf(f, "\"open_ms\": {\"p50\": %.1f, \"max\": %.1f}, ",
          open_count ? (double)open_times[open_count / 2] / 1e6 : 0,
          open_count ? (double)open_times[open_count - 1] / 1e6 : 0);
  print_errors(f);
  fprintf(f, "}\n");
  fflush(f);
}

/* ------------------------------------------------------------------ main loop */
static void run_loop(bool (*done)(void), int64_t deadline_ns, int tick_ms_fast) {
  pn_proactor_set_timeout(proactor, 10);
  while (!done()) {
    pn_event_batch_t *b = pn_proactor_wait(proactor);
    pn_event_t *e;
    bool timeout = false;
    while ((e = pn_event_batch_next(b))) {
      if (pn_event_type(e) == PN_PROACTOR_TIMEOUT) timeout = true;
      else handle(e);
    }
    pn_proactor_done(proactor, b);
    if (timeout) {
      if (started && !finished) {
        bytes_blocked = false;
        for (long i = 0; i < opt_producers; i++) { /* wake the producers that may send now */
          producer_t *p = &producers[i];
          if (p->link && p->sent < allowed_by_rate(p) && (opt_presettled || p->sent - p->settled < opt_window))
            pn_connection_wake(p->conn);
        }
        check_done();
      }
      if (mono_ns() > deadline_ns) { timed_out = true; finish(); }
      bool fast = started && !sending_done && (opt_rate > 0 || bytes_blocked);
      pn_proactor_set_timeout(proactor, fast ? tick_ms_fast : 20);
    }
  }
}

static bool run_done(void) {
  if (aborted && !finished) finish();
  if (!started && mono_ns() - t_setup_start > (int64_t)(opt_setup_timeout * 1e9)) {
    add_error("setup timed out: %ld/%ld producer and %ld/%ld consumer links attached",
              producers_attached, opt_producers, consumers_attached, n_consumers);
    aborted = true;
    finish();
  }
  return finished;
}

static bool connect_done(void) {
  return open_count + open_failed >= opt_connections || finished;
}

static void load_consumers(void) {
  if (!opt_consumer_file) return;
  FILE *f = fopen(opt_consumer_file, "r");
  if (!f) die("cannot read %s: %s", opt_consumer_file, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  long cap_c = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, f)) > 0) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    if (!n || line[0] == '#') continue;
    if (n_consumers == cap_c) {
      cap_c = cap_c ? cap_c * 2 : 64;
      consumers = realloc(consumers, (size_t)cap_c * sizeof *consumers);
    }
    consumer_t *k = &consumers[n_consumers++];
    memset(k, 0, sizeof *k);
    char *tab = strchr(line, '\t');
    if (tab) { *tab = 0; k->selector = strdup(tab + 1); }
    k->address = strdup(line);
  }
  free(line);
  fclose(f);
}

static void parse_url(const char *url) {
  const char *p = strstr(url, "://");
  if (!p) die("bad URL %s (want amqps://host:port or amqp://host:port)", url);
  size_t sl = (size_t)(p - url);
  if (sl >= sizeof opt_scheme) die("bad scheme in %s", url);
  memcpy(opt_scheme, url, sl);
  opt_scheme[sl] = 0;
  if (strcmp(opt_scheme, "amqp") && strcmp(opt_scheme, "amqps")) die("scheme must be amqp or amqps");
  p += 3;
  const char *colon = strrchr(p, ':');
  const char *end = p + strlen(p);
  if (end > p && end[-1] == '/') end--;
  if (colon && colon > p) {
    snprintf(opt_host, sizeof opt_host, "%.*s", (int)(colon - p), p);
    snprintf(opt_port, sizeof opt_port, "%.*s", (int)(end - colon - 1), colon + 1);
  } else {
    snprintf(opt_host, sizeof opt_host, "%.*s", (int)(end - p), p);
    strcpy(opt_port, strcmp(opt_scheme, "amqps") == 0 ? "5671" : "5672");
  }
}

static void usage(void) {
  fprintf(stderr,
    "usage: loadgen [run|connect] --url amqps://host:port [options]\n"
    "  TLS:       --cert chain.pem --key key.pem --ca trust.pem --vhost server-name\n"
    "  plain:     [--user U --password P]   (SASL PLAIN, else ANONYMOUS)\n"
    "  run:       --target ADDR --messages M --size BYTES --producers P --window W\n"
    "             --rate MSGS_PER_S (0 = flat out) --presettled --cells 16\n"
    "             --distinct (every message its own application properties)\n"
    "             --subject (subject = IF2 routing key: type.version.provider.subtype.q1...q18)\n"
    "             --property KEY=VALUE (repeatable: these string properties only) --ttl MS\n"
    "             --if2-stamps (body: bench_if2.py's text stamp, send ns:0:index:, 97 bytes)\n"
    "             --durable (header durable = true; accept latency reported either way)\n"
    "             --consumers FILE (lines: address[<TAB>selector]) --consumer-connections C\n"
    "             --consumer-credit N --consumer-unsettled --expect D --idle-ms MS\n"
    "             --timeout S --setup-timeout S --sync\n"
    "             --producers 0 --duration S --warmup S (a consumer counting for S seconds)\n"
    "             --tlex-stamps FILE (latency, station, sequence from TLEX stamps; samples to FILE)\n"
    "             --producers 0 --expect D --idle-ms MS (a consumer until D deliveries and MS quiet)\n"
    "             --if2-samples FILE (IF2 text stamps: send ns, receive ns, publisher, index to FILE)\n"
    "  connect:   --connections C --deadline-ms MS\n");
  exit(2);
}

int main(int argc, char **argv) {
  int i = 1;
  if (argc > 1 && argv[1][0] != '-') { opt_mode = argv[1]; i = 2; }
  for (; i < argc; i++) {
    const char *a = argv[i];
#define ARG (i + 1 < argc ? argv[++i] : (usage(), ""))
    if (!strcmp(a, "--url")) parse_url(ARG);
    else if (!strcmp(a, "--cert")) opt_cert = ARG;
    else if (!strcmp(a, "--key")) opt_key = ARG;
    else if (!strcmp(a, "--ca")) opt_ca = ARG;
    else if (!strcmp(a, "--vhost")) opt_vhost = ARG;
    else if (!strcmp(a, "--user")) opt_user = ARG;
    else if (!strcmp(a, "--password")) opt_password = ARG;
    else if (!strcmp(a, "--target")) opt_target = ARG;
    else if (!strcmp(a, "--messages")) opt_messages = atol(ARG);
    else if (!strcmp(a, "--size")) opt_size = atol(ARG);
    else if (!strcmp(a, "--producers")) opt_producers = atol(ARG);
    else if (!strcmp(a, "--window")) opt_window = atol(ARG);
    else if (!strcmp(a, "--rate")) opt_rate = atof(ARG);
    else if (!strcmp(a, "--presettled")) opt_presettled = true;
    else if (!strcmp(a, "--distinct")) opt_distinct = true;
    else if (!strcmp(a, "--subject")) opt_subject = true;
    else if (!strcmp(a, "--durable")) opt_durable = true;
    else if (!strcmp(a, "--if2-stamps")) opt_if2_stamps = true;
    else if (!strcmp(a, "--ttl")) opt_ttl_ms = atol(ARG);
    else if (!strcmp(a, "--property")) {
      const char *kv = ARG;
      if (n_props == MAX_PROPS || !strchr(kv, '=') || kv[0] == '=') die("--property KEY=VALUE (at most %d)", MAX_PROPS);
      opt_props[n_props++] = kv;
    }
    else if (!strcmp(a, "--cells")) opt_cells = atol(ARG);
    else if (!strcmp(a, "--consumers")) opt_consumer_file = ARG;
    else if (!strcmp(a, "--consumer-connections")) opt_consumer_connections = atol(ARG);
    else if (!strcmp(a, "--consumer-credit")) opt_consumer_credit = atol(ARG);
    else if (!strcmp(a, "--consumer-unsettled")) opt_consumer_unsettled = true;
    else if (!strcmp(a, "--expect")) opt_expect = atol(ARG);
    else if (!strcmp(a, "--idle-ms")) opt_idle_ms = atol(ARG);
    else if (!strcmp(a, "--timeout")) opt_timeout = atof(ARG);
    else if (!strcmp(a, "--setup-timeout")) opt_setup_timeout = atof(ARG);
    else if (!strcmp(a, "--sync")) opt_sync = true;
    else if (!strcmp(a, "--duration")) opt_duration = atof(ARG);
    else if (!strcmp(a, "--warmup")) opt_warmup = atof(ARG);
    else if (!strcmp(a, "--tlex-stamps")) opt_tlex_stamps = ARG;
    else if (!strcmp(a, "--if2-samples")) opt_if2_samples = ARG;
    else if (!strcmp(a, "--connections")) opt_connections = atol(ARG);
    else if (!strcmp(a, "--deadline-ms")) opt_deadline_ms = atol(ARG);
    else usage();
  }
  if (opt_if2_stamps) opt_size = IF2_BODY_LEN;
  if (opt_if2_stamps && (opt_distinct || opt_subject)) die("--if2-stamps does not go with --distinct or --subject");
  if (n_props && (opt_distinct || opt_subject)) die("--property does not go with --distinct or --subject");
  if (opt_size < 8) die("--size must be at least 8 (the timestamp)");
  if (opt_producers < 0 || (opt_producers == 0 && opt_duration <= 0 && opt_expect <= 0) || opt_window < 1 || opt_consumer_credit < 1 || opt_consumer_connections < 1) usage();

  struct rlimit rl; /* many connections: raise the descriptor limit to the hard limit */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  setup_ssl();
  proactor = pn_proactor();
  t_setup_start = mono_ns();

  if (!strcmp(opt_mode, "connect")) {
    ctxs = calloc((size_t)opt_connections, sizeof *ctxs);
    open_times = calloc((size_t)opt_connections, sizeof *open_times);
    for (long c = 0; c < opt_connections; c++) open_connection(ROLE_PROBE, (int)c);
    run_loop(connect_done, t_setup_start + opt_deadline_ms * 1000000LL, 10);
    report_connect();
  } else if (!strcmp(opt_mode, "run")) {
    load_consumers();
    if (opt_consumer_connections > n_consumers && n_consumers > 0) opt_consumer_connections = n_consumers;
    build_templates();
    distinct_seq = (uint64_t)now_ns(); /* unique per run: no property section repeats across runs */
    producers = calloc((size_t)opt_producers, sizeof *producers);
    ctxs = calloc((size_t)(opt_producers + opt_consumer_connections), sizeof *ctxs);
    if (n_consumers)
      for (long c = 0; c < opt_consumer_connections; c++) open_consumer_links(open_connection(ROLE_CONSUMER, (int)c), c);
    for (long p = 0; p < opt_producers; p++) {
      producers[p].to_send = opt_messages / opt_producers + (p < opt_messages % opt_producers ? 1 : 0);
      producers[p].first_index = p ? producers[p - 1].first_index + producers[p - 1].to_send : 0;
      producers[p].conn = open_connection(ROLE_PRODUCER, (int)p);
      open_producer_link(&producers[p]);
    }
    /* the measurement deadline counts from the start of publishing; setup has its own */
    int64_t deadline = t_setup_start + (int64_t)((opt_setup_timeout + opt_timeout) * 1e9);
    run_loop(run_done, deadline, 1);
    if (opt_sync) {
      fprintf(stderr, "DONE\n");
      fflush(stderr);
      wait_stdin_line();
    }
    report_run();
  } else {
    usage();
  }
  /* close every connection properly (AMQP close), then give up after 3 s */
  closing = true;
  finished = true;
  for (long c = 0; c < n_ctxs; c++)
    if (!ctxs[c].closed) pn_connection_wake(ctxs[c].conn);
  int64_t until = mono_ns() + 3000000000LL;
  pn_proactor_set_timeout(proactor, 3000);
  while (transports_closed < n_ctxs && mono_ns() < until) {
    pn_event_batch_t *b = pn_proactor_wait(proactor);
    pn_event_t *e;
    bool timeout = false;
    while ((e = pn_event_batch_next(b))) {
      if (pn_event_type(e) == PN_PROACTOR_TIMEOUT) timeout = true;
      else handle(e);
    }
    pn_proactor_done(proactor, b);
    if (timeout) break;
  }
  pn_proactor_free(proactor);
  if (ssl_domain) pn_ssl_domain_free(ssl_domain);
  return 0;
}
