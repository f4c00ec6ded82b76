/*
 * steady: one steady Basic Interface client in C (proton-C proactor, one thread), for
 * benchmarks/bench_deadline_phases.py --steady c and tests/integration/test_steady_client_c.py.
 *
 * The round trip of the benchmark's Python steady client (interchange.testing.broker_harness: a
 * BlockingConnection per actor), at a small part of its CPU, so that the client measuring the node's
 * latency is not itself a third of a loaded 2-core machine: a publisher connection (--pub-cn, default
 * actor-1) sends a DENM (the properties of broker_harness.denm()) to --target (default "in"); a consumer
 * connection (--sub-cn, default actor-2) holds a receiver on --source (default "all", credit 10). One
 * round trip at a time: it begins when the message is handed to proton and ends when both the node's
 * accepted disposition and the delivery on the receiver (then accepted and settled by us) have come; any
 * other outcome ends the run with an error. TLS 1.3, the client certificates of the PKI at --pki
 * (issued/CN/chain.pem and key.pem), the server's chain checked against trust.pem and its name against
 * --server-name (also the AMQP hostname), SASL EXTERNAL.
 *
 * Output, one JSON object per line on stdout: {"ready": true, "at": t} once both links are attached, then
 * per round trip {"at": its start, "rtt": seconds, "d": {NAME: [cpu ns, run-queue wait ns], ...}}, times
 * in seconds of CLOCK_MONOTONIC (Python's time.monotonic()); "d" holds, per watched schedstat file, what
 * it counted from just before the round trip to just after ("me": this thread, always watched; a path
 * ending in /task: summed over that process's threads); last {"done": n, "cpu_s": this process's CPU}.
 * Errors: {"error": "..."} and exit status 1.
 *
 * Commands on stdin, one a line, read between round trips: "watch NAME PATH" (watch another file from
 * the next round trip on), "stop" (close and exit); end of input also stops (a caller that died leaves no
 * client running). --count N stops after N round trips, and stdin is then not read; --pace-ms P starts
 * one round trip every P ms (0: back to back; a late one starts the next at once, no catching up).
 *
 *   steady --port 5671 --pki PKI --server-name ixc-a [--count N] [--pace-ms P] [--watch NAME=PATH]...
 */
#define _GNU_SOURCE
#include <proton/condition.h>
#include <proton/connection.h>
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

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_WATCH 16
#define CREDIT 10

typedef struct { char name[64], path[512]; uint64_t cpu, wait; } watch_t;

static pn_proactor_t *proactor;
static pn_connection_t *pub_conn, *sub_conn;
static pn_link_t *sender, *receiver;
static const char *opt_host = "127.0.0.1", *opt_port, *opt_pki, *opt_server, *opt_target = "in", *opt_source = "all";
static const char *opt_pub_cn = "actor-1", *opt_sub_cn = "actor-2";
static long opt_count = -1;
static double opt_pace_ms = 0;
static watch_t watches[MAX_WATCH];
static int n_watches;
static char message[1024];
static size_t message_len;
static uint64_t tag;
static long done_trips;
static int64_t started_ns, next_ns;
static bool in_flight, accepted, delivered, stopping, failed, ready, inactive;
static char stdin_buf[4096];
static size_t stdin_len;
static bool stdin_open = true;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

/* Each connection closes in its own batch (its wake). */
static void stop(void) {
  stopping = true;
  pn_proactor_cancel_timeout(proactor);
  if (pub_conn) pn_connection_wake(pub_conn);
  if (sub_conn) pn_connection_wake(sub_conn);
}

static void fail(const char *what, const char *detail) {
  if (!failed) {
    printf("{\"error\": \"%s%s", what, detail ? ": " : "");
    for (const char *p = detail ? detail : ""; *p; p++)
      if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) putchar(*p);
    printf("\"}\n");
    fflush(stdout);
  }
  failed = true;
  stop();
}

/* ------------------------------------------------------------------ schedstat */
static void read_schedstat(const char *path, uint64_t *cpu, uint64_t *wait) {
  char buf[128];
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  unsigned long long a = 0, b = 0;
  if (sscanf(buf, "%llu %llu", &a, &b) == 2) { *cpu += a; *wait += b; }
}

/* (ns on a CPU, ns waiting on a run queue) of a thread, or summed over a process's threads (…/task). */
static void sample(const char *path, uint64_t *cpu, uint64_t *wait) {
  *cpu = *wait = 0;
  size_t len = strlen(path);
  if (len < 5 || strcmp(path + len - 5, "/task") != 0) { read_schedstat(path, cpu, wait); return; }
  DIR *dir = opendir(path);
  if (!dir) return;
  struct dirent *e;
  char file[640];
  while ((e = readdir(dir)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(file, sizeof file, "%s/%s/schedstat", path, e->d_name);
    read_schedstat(file, cpu, wait);
  }
  closedir(dir);
}

static void add_watch(const char *name, const char *path) {
  if (n_watches == MAX_WATCH) return;
  watch_t *w = &watches[n_watches++];
  snprintf(w->name, sizeof w->name, "%s", name);
  snprintf(w->path, sizeof w->path, "%s", path);
}

/* ------------------------------------------------------------------ stdin commands */
static void command(char *line) {
  char name[64], path[512];
  if (!strcmp(line, "stop")) stopping = true;
  else if (sscanf(line, "watch %63s %511s", name, path) == 2) add_watch(name, path);
}

/* The complete lines stdin holds now (never waits). */
static void read_commands(void) {
  while (stdin_open) {
    struct pollfd p = {0, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return;
    ssize_t n = read(0, stdin_buf + stdin_len, sizeof stdin_buf - 1 - stdin_len);
    if (n <= 0) { stdin_open = false; stopping = true; return; }
    stdin_len += (size_t)n;
    stdin_buf[stdin_len] = 0;
    char *start = stdin_buf, *nl;
    while ((nl = strchr(start, '\n')) != NULL) {
      *nl = 0;
      command(start);
      start = nl + 1;
    }
    stdin_len = strlen(start);
    memmove(stdin_buf, start, stdin_len);
    if (stdin_len == sizeof stdin_buf - 1) stdin_len = 0; /* a line that long is no command */
  }
}

/* ------------------------------------------------------------------ the round trip */
static void encode_denm(void) {
  pn_message_t *m = pn_message();
  pn_message_set_inferred(m, true);
  pn_data_t *p = pn_message_properties(m);
  pn_data_put_map(p);
  pn_data_enter(p);
  const char *strings[][2] = {{"publisherId", "NO00001"}, {"publicationId", "NO00001:denm-1"},
                              {"originatingCountry", "NO"}, {"protocolVersion", "DENM:1.3.1"},
                              {"messageType", "DENM"}, {"quadTree", ",120202130121133020,"}};
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
    pn_data_put_string(p, pn_bytes(strlen(strings[i][0]), strings[i][0]));
    pn_data_put_string(p, pn_bytes(strlen(strings[i][1]), strings[i][1]));
  }
  pn_data_put_string(p, pn_bytes(9, "causeCode"));
  pn_data_put_long(p, 1);
  pn_data_put_string(p, pn_bytes(12, "subCauseCode"));
  pn_data_put_long(p, 0);
  pn_data_put_string(p, pn_bytes(8, "latitude"));
  pn_data_put_double(p, 51.485992);
  pn_data_put_string(p, pn_bytes(9, "longitude"));
  pn_data_put_double(p, 4.735311);
  pn_data_exit(p);
  pn_data_put_binary(pn_message_body(m), pn_bytes(6, "\x01\x02" "denm"));
  message_len = sizeof message;
  if (pn_message_encode(m, message, &message_len)) { fprintf(stderr, "steady: cannot encode\n"); exit(2); }
  pn_message_free(m);
}

/* The next round trip's slot: a wake now, or the proactor's timeout (whole ms, rounded up) then. */
static void arm(void) {
  int64_t wait_ms = (next_ns - mono_ns() + 999999) / 1000000;
  if (wait_ms > 0) pn_proactor_set_timeout(proactor, (pn_millis_t)wait_ms);
  else pn_connection_wake(pub_conn);
}

/* In the publisher's batch: the next round trip, when both links are up, none is in flight and its slot came. */
static void maybe_send(void) {
  if (!ready || in_flight || stopping || pn_link_credit(sender) <= 0) return;
  if (opt_pace_ms > 0 && mono_ns() < next_ns) { arm(); return; } /* the proactor's timeout wakes us */
  for (int i = 0; i < n_watches; i++) sample(watches[i].path, &watches[i].cpu, &watches[i].wait);
  in_flight = true;
  accepted = delivered = false;
  uint64_t t = ++tag;
  pn_delivery(sender, pn_dtag((const char *)&t, sizeof t));
  started_ns = mono_ns();
  pn_link_send(sender, message, message_len);
  pn_link_advance(sender);
}

static void finish_trip(void) {
  int64_t ended = mono_ns();
  printf("{\"at\": %.9f, \"rtt\": %.9f, \"d\": {", started_ns / 1e9, (ended - started_ns) / 1e9);
  for (int i = 0; i < n_watches; i++) {
    uint64_t cpu, wait;
    sample(watches[i].path, &cpu, &wait);
    printf("%s\"%s\": [%lld, %lld]", i ? ", " : "", watches[i].name, (long long)(cpu - watches[i].cpu),
           (long long)(wait - watches[i].wait));
  }
  printf("}}\n");
  fflush(stdout);
  in_flight = false;
  done_trips++;
  if (opt_count >= 0 && done_trips >= opt_count) stopping = true;
  read_commands();
  if (stopping) stop();
  else if (opt_pace_ms > 0) {
    next_ns += (int64_t)(opt_pace_ms * 1e6);
    if (next_ns < started_ns) next_ns = started_ns; /* late: the next at once, no catching up */
    arm();
  } else {
    pn_connection_wake(pub_conn);
  }
}

/* ------------------------------------------------------------------ connections */
static pn_connection_t *connect_as(const char *cn, const char *container) {
  char chain[4096], key[4096], trust[4096], addr[PN_MAX_ADDR];
  snprintf(chain, sizeof chain, "%s/issued/%s/chain.pem", opt_pki, cn);
  snprintf(key, sizeof key, "%s/issued/%s/key.pem", opt_pki, cn);
  snprintf(trust, sizeof trust, "%s/trust.pem", opt_pki);
  pn_ssl_domain_t *domain = pn_ssl_domain(PN_SSL_MODE_CLIENT);
  if (pn_ssl_domain_set_credentials(domain, chain, key, NULL) || pn_ssl_domain_set_trusted_ca_db(domain, trust) ||
      pn_ssl_domain_set_peer_authentication(domain, PN_SSL_VERIFY_PEER_NAME, NULL) ||
      pn_ssl_domain_set_protocols(domain, "TLSv1.3")) {
    fprintf(stderr, "steady: cannot load %s, %s or %s\n", chain, key, trust);
    exit(2);
  }
  pn_connection_t *c = pn_connection();
  pn_transport_t *t = pn_transport();
  pn_connection_set_container(c, container);
  pn_connection_set_hostname(c, opt_server);
  pn_ssl_t *ssl = pn_ssl(t);
  if (pn_ssl_init(ssl, domain, NULL)) { fprintf(stderr, "steady: pn_ssl_init failed\n"); exit(2); }
  pn_ssl_set_peer_hostname(ssl, opt_server);
  pn_sasl_allowed_mechs(pn_sasl(t), "EXTERNAL");
  pn_ssl_domain_free(domain); /* the transport keeps its own reference */
  pn_connection_open(c);
  pn_proactor_addr(addr, sizeof addr, opt_host, opt_port);
  pn_proactor_connect2(proactor, c, t, addr);
  return c;
}

static void open_link(pn_connection_t *c) {
  pn_session_t *s = pn_session(c);
  pn_session_open(s);
  if (c == pub_conn) {
    sender = pn_sender(s, "steady-sender");
    pn_terminus_set_address(pn_link_target(sender), opt_target);
    pn_link_set_snd_settle_mode(sender, PN_SND_UNSETTLED);
    pn_link_open(sender);
  } else {
    receiver = pn_receiver(s, "steady-receiver");
    pn_terminus_set_address(pn_link_source(receiver), opt_source);
    pn_link_set_rcv_settle_mode(receiver, PN_RCV_FIRST);
    pn_link_open(receiver);
    pn_link_flow(receiver, CREDIT);
  }
}

static void on_delivery(pn_delivery_t *d) {
  pn_link_t *link = pn_delivery_link(d);
  if (link == sender) {
    if (!pn_delivery_updated(d) && !pn_delivery_settled(d)) return;
    uint64_t state = pn_delivery_remote_state(d);
    if (state == 0) return;
    pn_delivery_settle(d);
    if (state != PN_ACCEPTED) { fail("not accepted, outcome ", pn_disposition_type_name(state)); return; }
    accepted = true;
  } else if (link == receiver) {
    if (!pn_delivery_readable(d) || pn_delivery_partial(d)) return;
    char sink[4096];
    while (pn_link_recv(link, sink, sizeof sink) > 0) {}
    pn_delivery_update(d, PN_ACCEPTED);
    pn_delivery_settle(d);
    pn_link_advance(link);
    pn_link_flow(link, 1);
    if (!in_flight) { fail("a delivery with no round trip in flight", NULL); return; }
    delivered = true;
  }
  if (in_flight && accepted && delivered) finish_trip();
}

static void on_remote_close(pn_event_t *e, pn_condition_t *cond) {
  if (!stopping || pn_condition_is_set(cond)) {
    char what[512];
    snprintf(what, sizeof what, "%s: %s", pn_condition_get_name(cond) ? pn_condition_get_name(cond) : "closed",
             pn_condition_get_description(cond) ? pn_condition_get_description(cond) : "");
    fail(pn_event_type_name(pn_event_type(e)), what);
  }
}

static void handle(pn_event_t *e) {
  pn_connection_t *c = pn_event_connection(e);
  switch (pn_event_type(e)) {
    case PN_CONNECTION_REMOTE_OPEN: open_link(c); break;
    case PN_LINK_REMOTE_OPEN:
      if (sender && receiver && pn_link_state(sender) & PN_REMOTE_ACTIVE && pn_link_state(receiver) & PN_REMOTE_ACTIVE
          && !ready) {
        ready = true;
        printf("{\"ready\": true, \"at\": %.9f}\n", mono_ns() / 1e9);
        fflush(stdout);
        next_ns = mono_ns();
        pn_connection_wake(pub_conn);
      }
      break;
    case PN_LINK_FLOW: case PN_CONNECTION_WAKE:
      if (c == pub_conn) maybe_send();
      if (stopping && c) { pn_connection_close(c); }
      break;
    case PN_DELIVERY: on_delivery(pn_event_delivery(e)); break;
    case PN_PROACTOR_TIMEOUT: if (!stopping) pn_connection_wake(pub_conn); break;
    case PN_TRANSPORT_CLOSED: on_remote_close(e, pn_transport_condition(pn_event_transport(e))); break;
    case PN_CONNECTION_REMOTE_CLOSE: on_remote_close(e, pn_connection_remote_condition(c)); pn_connection_close(c); break;
    case PN_LINK_REMOTE_CLOSE: on_remote_close(e, pn_link_remote_condition(pn_event_link(e))); break;
    case PN_PROACTOR_INACTIVE: inactive = true; break;
    default: break;
  }
}

static void usage(void) {
  fputs("usage: steady --port PORT --pki DIR --server-name NAME [--host H] [--pub-cn CN] [--sub-cn CN]\n"
        "              [--target ADDR] [--source ADDR] [--count N] [--pace-ms P] [--watch NAME=PATH]...\n", stderr);
  exit(2);
}

int main(int argc, char **argv) {
  add_watch("me", "/proc/thread-self/schedstat");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) usage();
    i++;
    if (!strcmp(a, "--host")) opt_host = v;
    else if (!strcmp(a, "--port")) opt_port = v;
    else if (!strcmp(a, "--pki")) opt_pki = v;
    else if (!strcmp(a, "--server-name")) opt_server = v;
    else if (!strcmp(a, "--pub-cn")) opt_pub_cn = v;
    else if (!strcmp(a, "--sub-cn")) opt_sub_cn = v;
    else if (!strcmp(a, "--target")) opt_target = v;
    else if (!strcmp(a, "--source")) opt_source = v;
    else if (!strcmp(a, "--count")) opt_count = atol(v);
    else if (!strcmp(a, "--pace-ms")) opt_pace_ms = atof(v);
    else if (!strcmp(a, "--watch")) {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) usage();
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)(eq - v), v);
      add_watch(name, eq + 1);
    } else usage();
  }
  if (!opt_port || !opt_pki || !opt_server) usage();
  if (opt_count >= 0) stdin_open = false;
  encode_denm();
  proactor = pn_proactor();
  pub_conn = connect_as(opt_pub_cn, "steady-publisher");
  sub_conn = connect_as(opt_sub_cn, "steady-consumer");
  while (!inactive) {
    pn_event_batch_t *batch = pn_proactor_wait(proactor);
    pn_event_t *e;
    while ((e = pn_event_batch_next(batch))) handle(e);
    pn_proactor_done(proactor, batch);
  }
  if (!failed) printf("{\"done\": %ld, \"cpu_s\": %.6f}\n", done_trips, cpu_s());
  fflush(stdout);
  pn_proactor_free(proactor);
  return failed ? 1 : 0;
}
