/* if2_publish: an AMQP 0-9-1 publisher in C (rabbitmq-c) for the IF2 benchmark, so that RabbitMQ alone
 * and the bridge's import are fed by a publisher as cheap as the export's C AMQP 1.0 actor (loadgen.c).
 *
 *   if2_publish --host H --port P --identity CN --cert CHAIN --key KEY --ca TRUST --exchange X
 *               --routing-key K --publisher N --messages COUNT [--rate R] [--window 1000]
 *               [--expiration 60000] [--timeout 600] [--frame-writes]
 *
 * One connection (if2_amqp.h: TLS 1.3, the client certificate, SASL EXTERNAL) in confirm mode
 * (confirm.select). Prints READY on stderr once connected, then waits for a line on stdin and
 * publishes COUNT messages to X with K, mandatory, properties as the pika publishers of
 * if2_loadgen.py (expiration EXPIRATION ms, an empty headers table), body
 * "<send ns>:<N>:<index>:" + 64 zero bytes (send ns: CLOCK_REALTIME, as Python's time.time_ns).
 * At most WINDOW publishes are unconfirmed at a time; a basic.nack, a basic.return (unroutable) or
 * a publish still unconfirmed at the end (all confirmed, or TIMEOUT s) counts as failed. Flat out
 * without --rate; with it, R msgs/s on a fixed grid whose slot is the stamp, so a late publisher
 * shows up as latency (coordinated omission avoided). At the end it closes the connection and
 * prints one JSON line on stdout: {"messages": COUNT, "published": n, "confirmed": n, "nacked": n,
 * "returned": n, "failed": n, "cpu_s": S, "errors": "..."}, S being this process's CPU (getrusage)
 * from the go line to the last confirm.
 *
 * One TLS record per message: rabbitmq-c sends each frame of a publish (method, content header,
 * body) with its own socket send, on its TLS socket one SSL_write each (three records and three
 * write(2) per message, which RabbitMQ then decrypts one by one), where pika writes a publish's
 * frames at once. So the TLS socket's send is wrapped: frames flagged "more" are held and written
 * with the publish's last one (--frame-writes: rabbitmq-c's own three writes). This relies on
 * rabbitmq-c's socket layout (amqp_socket.h, not installed: a socket starts with a pointer to its
 * class, a table of six functions with send first; AMQP_SF_MORE = 1), the same from 0.4 to 0.13.
 */
#include "if2_amqp.h"

#include <poll.h>
#include <string.h>

enum { SF_MORE = 1, NEEDREAD = -0x1301, NEEDWRITE = -0x1302 };  /* amqp_private.h, amqp_socket.h */

typedef ssize_t (*send_fn)(void *, const void *, size_t, int);
struct socket_class {
  send_fn send;
  void *rest[5];
};

static struct socket_class coalescing;
static send_fn tls_send;
static int tls_fd = -1;
static char held[65536];
static size_t held_len;

/* Write ``buf`` whole through the TLS socket (SSL_write is retried with the same buffer until done). */
static ssize_t write_all(void *sock, const void *buf, size_t len, int flags) {
  for (;;) {
    ssize_t r = tls_send(sock, buf, len, flags);
    if (r != NEEDREAD && r != NEEDWRITE) return r;
    struct pollfd p = {tls_fd, r == NEEDREAD ? POLLIN : POLLOUT, 0};
    poll(&p, 1, 1000);
  }
}

static ssize_t coalesce_send(void *sock, const void *buf, size_t len, int flags) {
  if (held_len + len > sizeof held) {  /* (a frame larger than the buffer goes alone) */
    if (held_len && write_all(sock, held, held_len, flags) < 0) return -1;
    held_len = 0;
    if (len > sizeof held) return write_all(sock, buf, len, flags);
  }
  memcpy(held + held_len, buf, len);
  held_len += len;
  if (flags & SF_MORE) return (ssize_t)len;
  ssize_t r = write_all(sock, held, held_len, flags);
  held_len = 0;
  return r < 0 ? r : (ssize_t)len;
}

static void coalesce_writes(amqp_connection_state_t conn) {
  amqp_socket_t *sock = amqp_get_socket(conn);
  const struct socket_class **klass = (const struct socket_class **)sock;
  coalescing = **klass;
  tls_send = coalescing.send;
  coalescing.send = coalesce_send;
  tls_fd = amqp_socket_get_sockfd(sock);
  *klass = &coalescing;
}

typedef struct {
  long count, window, published, acked, nacked, returned, low;  /* low: the lowest unsettled tag */
  unsigned char *settled;  /* by delivery tag - 1: 0 pending, 1 acked, 2 nacked */
  const char *error;
} confirms_t;

static void settle(confirms_t *c, uint64_t tag, int multiple, unsigned char how) {
  long first = multiple ? c->low : (long)tag, last = (long)tag;
  for (long t = first; t <= last && t <= c->published; t++) {
    if (t < 1 || c->settled[t - 1]) continue;
    c->settled[t - 1] = how;
    if (how == 1) c->acked++;
    else c->nacked++;
  }
  while (c->low <= c->published && c->settled[c->low - 1]) c->low++;
}

static long outstanding(const confirms_t *c) { return c->published - c->acked - c->nacked; }

/* One frame from RabbitMQ: a confirm, a returned message (read whole), or the channel's end. */
static void on_frame(amqp_connection_state_t conn, confirms_t *c, amqp_frame_t *f) {
  if (f->frame_type != AMQP_FRAME_METHOD) return;
  switch (f->payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      amqp_basic_ack_t *a = f->payload.method.decoded;
      settle(c, a->delivery_tag, a->multiple, 1);
      break;
    }
    case AMQP_BASIC_NACK_METHOD: {
      amqp_basic_nack_t *n = f->payload.method.decoded;
      settle(c, n->delivery_tag, n->multiple, 2);
      break;
    }
    case AMQP_BASIC_RETURN_METHOD: {
      amqp_message_t m;
      if (!rpc_ok(amqp_read_message(conn, f->channel, &m, 0))) c->error = "a returned message could not be read";
      else amqp_destroy_message(&m);
      c->returned++;
      break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
      c->error = "RabbitMQ closed the channel or the connection";
      break;
    default:
      break;
  }
}

/* Every frame that arrives within ``wait_us`` (0: only those already there), then those buffered. */
static void take_frames(amqp_connection_state_t conn, confirms_t *c, long wait_us) {
  struct timeval tv = {wait_us / 1000000, wait_us % 1000000};
  amqp_maybe_release_buffers(conn);
  for (;;) {
    amqp_frame_t f;
    int r = amqp_simple_wait_frame_noblock(conn, &f, &tv);
    if (r == AMQP_STATUS_TIMEOUT) return;
    if (r != AMQP_STATUS_OK) {
      c->error = "the connection failed while waiting for confirms";
      return;
    }
    on_frame(conn, c, &f);
    if (c->error) return;
    tv.tv_sec = tv.tv_usec = 0;
    if (!amqp_frames_enqueued(conn) && !amqp_data_in_buffer(conn)) return;
  }
}

typedef struct {
  const char *exchange, *key, *expiration;
  int publisher;
  double rate, timeout_s;
} plan_t;

static void publish_all(amqp_connection_state_t conn, const plan_t *p, confirms_t *c) {
  amqp_basic_properties_t props;
  memset(&props, 0, sizeof props);
  props._flags = AMQP_BASIC_EXPIRATION_FLAG | AMQP_BASIC_HEADERS_FLAG;
  props.expiration = amqp_cstring_bytes(p->expiration);
  props.headers = amqp_empty_table;
  char body[160];
  int64_t t0 = now_ns(CLOCK_REALTIME), interval = p->rate > 0 ? (int64_t)(1e9 / p->rate) : 0;
  int64_t deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)(p->timeout_s * 1e9);
  for (long index = 0; index < c->count && !c->error; index++) {
    int64_t stamp = now_ns(CLOCK_REALTIME);
    if (interval) {  /* until the slot, taking confirms meanwhile */
      int64_t slot = t0 + index * interval;
      while (!c->error && (stamp = now_ns(CLOCK_REALTIME)) < slot) take_frames(conn, c, (long)((slot - stamp) / 1000));
      stamp = slot;
    }
    while (!c->error && outstanding(c) >= c->window) {
      if (now_ns(CLOCK_MONOTONIC) > deadline) c->error = "timed out waiting for confirms";
      else take_frames(conn, c, 100000);
    }
    if (c->error) break;
    int n = snprintf(body, sizeof body, "%lld:%d:%ld:", (long long)stamp, p->publisher, index);
    memset(body + n, 0, 64);
    if (amqp_basic_publish(conn, 1, amqp_cstring_bytes(p->exchange), amqp_cstring_bytes(p->key), 1, 0, &props,
                           (amqp_bytes_t){(size_t)n + 64, body}) != AMQP_STATUS_OK) {
      c->error = "basic.publish failed";
      break;
    }
    c->published++;
    if (c->published % 64 == 0) take_frames(conn, c, 0);
  }
  while (!c->error && outstanding(c) > 0 && now_ns(CLOCK_MONOTONIC) < deadline) take_frames(conn, c, 100000);
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *identity = "", *cert = 0, *key = 0, *ca = 0;
  plan_t plan = {0, 0, "60000", 0, 0.0, 600};
  confirms_t c;
  memset(&c, 0, sizeof c);
  c.window = 1000;
  int port = 5671, frame_writes = 0;
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(a, "--frame-writes")) frame_writes = 1, i--;
    else if (!strcmp(a, "--host")) host = v;
    else if (!strcmp(a, "--port")) port = atoi(v);
    else if (!strcmp(a, "--identity")) identity = v;
    else if (!strcmp(a, "--cert")) cert = v;
    else if (!strcmp(a, "--key")) key = v;
    else if (!strcmp(a, "--ca")) ca = v;
    else if (!strcmp(a, "--exchange")) plan.exchange = v;
    else if (!strcmp(a, "--routing-key")) plan.key = v;
    else if (!strcmp(a, "--expiration")) plan.expiration = v;
    else if (!strcmp(a, "--publisher")) plan.publisher = atoi(v);
    else if (!strcmp(a, "--messages")) c.count = atol(v);
    else if (!strcmp(a, "--rate")) plan.rate = atof(v);
    else if (!strcmp(a, "--window")) c.window = atol(v);
    else if (!strcmp(a, "--timeout")) plan.timeout_s = atof(v);
    else die("unknown option");
  }
  if (!cert || !key || !ca || !plan.exchange || !plan.key || c.count < 0 || c.window < 1)
    die("--cert, --key, --ca, --exchange and --routing-key are required; --messages >= 0, --window >= 1");
  c.settled = calloc((size_t)c.count + 1, 1);
  c.low = 1;
  amqp_connection_state_t conn = open_connection(host, port, cert, key, ca, identity);
  amqp_confirm_select(conn, 1);
  if (!rpc_ok(amqp_get_rpc_reply(conn))) die("confirm.select failed");
  if (!frame_writes) coalesce_writes(conn);
  fprintf(stderr, "READY\n");
  fflush(stderr);
  char line[16];
  if (!fgets(line, sizeof line, stdin)) die("no go line on stdin");
  double cpu0 = cpu_s();
  publish_all(conn, &plan, &c);
  double cpu = cpu_s() - cpu0;
  if (!c.error) {
    amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  }
  amqp_destroy_connection(conn);
  long failed = c.count - (c.acked - c.returned);
  printf("{\"messages\": %ld, \"published\": %ld, \"confirmed\": %ld, \"nacked\": %ld, \"returned\": %ld, "
         "\"failed\": %ld, \"cpu_s\": %.6f, \"errors\": \"%s\"}\n",
         c.count, c.published, c.acked, c.nacked, c.returned, failed, cpu, c.error ? c.error : "");
  free(c.settled);
  return c.error || failed ? 1 : 0;
}
