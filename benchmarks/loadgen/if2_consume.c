/* if2_consume: an AMQP 0-9-1 consumer in C (rabbitmq-c) for the IF2 benchmark, so that RabbitMQ
 * alone is measured with a consumer as cheap as the import's C AMQP 1.0 one (loadgen.c).
 *
 *   if2_consume --host H --port P --identity CN --cert CHAIN --key KEY --ca TRUST --queue Q --samples FILE
 *               [--prefetch 2000] [--timeout 600]
 *
 * One connection: TLS 1.3 only, the client certificate (CHAIN + KEY), the server's chain verified
 * against TRUST (its host name is not: the benchmark connects to 127.0.0.1 while the certificate
 * names the broker), SASL EXTERNAL as CN (the certificate's); basic.qos prefetch, basic.consume on Q with auto-ack (as the
 * pika consumers of if2_loadgen.py). Prints READY on stderr once consuming. Every body
 * "<send ns>:<publisher>:<index>:..." is kept as one record (sent ns int64, received ns int64 from
 * CLOCK_REALTIME as the publishers' time.time_ns stamps, publisher int32, index int32, native byte
 * order: Python's struct "=qqii"), appended to FILE and flushed every 50 ms, so the caller can follow
 * the count from FILE's size. Runs until SIGTERM/SIGINT (or the timeout), then writes the rest, closes
 * the connection and prints one JSON line on stdout: {"messages": N, "cpu_s": S, "errors": "..."},
 * S being this process's CPU (getrusage) from consuming to the end.
 */
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
  int64_t sent_ns, received_ns;
  int32_t publisher, index;
} sample_t;

static volatile sig_atomic_t stopping;
static void on_signal(int sig) { (void)sig; stopping = 1; }

static int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what) {
  printf("{\"messages\": 0, \"cpu_s\": 0, \"errors\": \"%s\"}\n", what);
  exit(1);
}

static int rpc_ok(amqp_rpc_reply_t r) { return r.reply_type == AMQP_RESPONSE_NORMAL; }

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

static amqp_connection_state_t open_connection(const char *host, int port, const char *cert, const char *key,
                                               const char *ca, const char *identity) {
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_ssl_socket_new(conn);
  if (!sock) die("cannot create the TLS socket");
  SSL_CTX_set_min_proto_version(amqp_ssl_socket_get_context(sock), TLS1_3_VERSION);
  amqp_ssl_socket_set_verify_peer(sock, 1);
  amqp_ssl_socket_set_verify_hostname(sock, 0);
  if (amqp_ssl_socket_set_cacert(sock, ca) || amqp_ssl_socket_set_key(sock, cert, key)) die("cannot load the PKI files");
  if (amqp_socket_open(sock, host, port)) die("cannot connect (TCP or TLS)");
  amqp_rpc_reply_t r = amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_EXTERNAL, identity);
  if (!rpc_ok(r)) {
    fprintf(stderr, "login: reply %d, %s\n", r.reply_type, amqp_error_string2(r.library_error));
    die("SASL EXTERNAL login refused");
  }
  amqp_channel_open(conn, 1);
  if (!rpc_ok(amqp_get_rpc_reply(conn))) die("channel.open failed");
  return conn;
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *identity = "", *cert = 0, *key = 0, *ca = 0, *queue = 0, *path = 0;
  int port = 5671, prefetch = 2000;
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
  amqp_basic_consume(conn, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 1 /* no-ack */, 0, amqp_empty_table);
  if (!rpc_ok(amqp_get_rpc_reply(conn))) die("basic.consume failed");
  fprintf(stderr, "READY\n");
  fflush(stderr);
  double cpu0 = cpu_s();
  int64_t deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)(timeout_s * 1e9), next_flush = 0;
  long messages = 0;
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
