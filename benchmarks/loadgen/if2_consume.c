/* if2_consume: an AMQP 0-9-1 consumer in C (rabbitmq-c) for the IF2 benchmark, so that RabbitMQ
 * alone is measured with a consumer as cheap as the import's C AMQP 1.0 one (loadgen.c).
 *
 *   if2_consume --host H --port P --identity CN --cert CHAIN --key KEY --ca TRUST --queue Q --samples FILE
 *               [--prefetch 2000] [--timeout 600] [--ack-every N]
 *
 * One connection (if2_amqp.h: TLS 1.3, the client certificate, SASL EXTERNAL); basic.qos prefetch,
 * basic.consume on Q with auto-ack (as the pika consumers of if2_loadgen.py); with --ack-every N > 0
 * the consumer acknowledges instead, as the IF2 bridge does once the BI accepted: one basic.ack
 * multiple=true for every N deliveries, and for what is left whenever its read buffer is empty. Prints READY on stderr once consuming. Every body
 * "<send ns>:<publisher>:<index>:..." is kept as one record (sent ns int64, received ns int64 from
 * CLOCK_REALTIME as the publishers' time.time_ns stamps, publisher int32, index int32, native byte
 * order: Python's struct "=qqii"), appended to FILE and flushed every 50 ms, so the caller can follow
 * the count from FILE's size. Runs until SIGTERM/SIGINT (or the timeout), then writes the rest, closes
 * the connection and prints one JSON line on stdout: {"messages": N, "cpu_s": S, "errors": "..."},
 * S being this process's CPU (getrusage) from consuming to the end.
 */
#include "if2_amqp.h"

#include <signal.h>
#include <string.h>

typedef struct {
  int64_t sent_ns, received_ns;
  int32_t publisher, index;
} sample_t;

static volatile sig_atomic_t stopping;
static void on_signal(int sig) { (void)sig; stopping = 1; }

/* "<sent>:<publisher>:<index>:" at the start of the body; 0 when it is not that. */
static int parse(const char *p, size_t n, sample_t *s) {
  char buf[80];
  size_t k = n < sizeof buf - 1 ? n : sizeof buf - 1;
  memcpy(buf, p, k);
  buf[k] = 0;
  char *end;
  s->sent_ns = strtoll(buf, &end, 10);
  if (*end != ':') return 0;
  s->publisher = (int32_t)strtol(end + 1, &end, 10);
  if (*end != ':') return 0;
  s->index = (int32_t)strtol(end + 1, &end, 10);
  return *end == ':';
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *identity = "", *cert = 0, *key = 0, *ca = 0, *queue = 0, *path = 0;
  int port = 5671, prefetch = 2000, ack_every = 0;
  double timeout_s = 600;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (!strcmp(a, "--host")) host = v;
    else if (!strcmp(a, "--port")) port = atoi(v);
    else if (!strcmp(a, "--identity")) identity = v;
    else if (!strcmp(a, "--cert")) cert = v;
    else if (!strcmp(a, "--key")) key = v;
    else if (!strcmp(a, "--ca")) ca = v;
    else if (!strcmp(a, "--queue")) queue = v;
    else if (!strcmp(a, "--samples")) path = v;
    else if (!strcmp(a, "--prefetch")) prefetch = atoi(v);
    else if (!strcmp(a, "--timeout")) timeout_s = atof(v);
    else if (!strcmp(a, "--ack-every")) ack_every = atoi(v);
    else die("unknown option");
  }
  if (!cert || !key || !ca || !queue || !path) die("--cert, --key, --ca, --queue and --samples are required");
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  FILE *out = fopen(path, "wb");
  if (!out) die("cannot write the samples file");
  amqp_connection_state_t conn = open_connection(host, port, cert, key, ca, identity);
  amqp_basic_qos(conn, 1, 0, (uint16_t)prefetch, 0);
  if (!rpc_ok(amqp_get_rpc_reply(conn))) die("basic.qos failed");
  amqp_basic_consume(conn, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, ack_every <= 0 /* no-ack */, 0,
                     amqp_empty_table);
  if (!rpc_ok(amqp_get_rpc_reply(conn))) die("basic.consume failed");
  fprintf(stderr, "READY\n");
  fflush(stderr);
  double cpu0 = cpu_s();
  int64_t deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)(timeout_s * 1e9), next_flush = 0;
  long messages = 0, unacked = 0;
  uint64_t last_tag = 0;
  const char *error = "";
  struct timeval wait = {0, 50000};
  while (!stopping && now_ns(CLOCK_MONOTONIC) < deadline) {
    amqp_envelope_t env;
    amqp_maybe_release_buffers(conn);
    amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &wait, 0);
    int64_t mono = now_ns(CLOCK_MONOTONIC);
    if (mono >= next_flush) {
      fflush(out);
      next_flush = mono + 50000000;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) continue;
    if (r.reply_type == AMQP_RESPONSE_NORMAL && ack_every > 0) {
      last_tag = env.delivery_tag;
      if (++unacked >= ack_every || (!amqp_data_in_buffer(conn) && !amqp_frames_enqueued(conn))) {
        if (amqp_basic_ack(conn, 1, last_tag, 1) != AMQP_STATUS_OK) {
          error = "basic.ack failed";
          amqp_destroy_envelope(&env);
          break;
        }
        unacked = 0;
      }
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
      error = "the connection failed while consuming";
      break;
    }
    sample_t s;
    if (parse(env.message.body.bytes, env.message.body.len, &s)) {
      s.received_ns = now_ns(CLOCK_REALTIME);
      fwrite(&s, sizeof s, 1, out);
      messages++;
    }
    amqp_destroy_envelope(&env);
  }
  fclose(out);
  double cpu = cpu_s() - cpu0;
  if (!*error) {
    amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  }
  amqp_destroy_connection(conn);
  printf("{\"messages\": %ld, \"cpu_s\": %.6f, \"errors\": \"%s\"}\n", messages, cpu, error);
  return *error ? 1 : 0;
}
