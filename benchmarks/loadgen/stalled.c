/*
 * stalled: clients that never finish their preamble, in C (one thread, epoll, OpenSSL non-blocking), for
 * benchmarks/bench_deadline_phases.py --clients c and tests/integration/test_stalled_clients_c.py.
 *
 * The same connections, stalls and output as interchange/testing/stalled_clients.py (the Python clients,
 * asyncio + ssl), at about half their CPU per connection (OpenSSL 3.0's client handshake is most of what
 * is left): they stand for C-ITS actors on other hosts, so a load generator that takes the cores from the
 * node under test measures itself.
 *
 * Each connection stops at one stage, idle or trickling a piece every --trickle-s seconds, and reports
 * when it reached that stage (stalled) and when the server closed it (closed), in seconds of
 * CLOCK_MONOTONIC (Python's time.monotonic(), the asyncio loop's clock). Basic Interface stalls, in this
 * order, connection i getting stall i % 7: tcp (TCP, no TLS), tls-idle (TLS then nothing),
 * header-trickle (the SASL protocol header a byte at a time, 7 of its 8), sasl-header (the SASL header
 * alone), sasl-init-part (the header and 6 bytes of a sasl-init), open-missing (SASL EXTERNAL to its
 * outcome, then the AMQP header and no open), open-trickle (the same, then an open a byte at a time, all
 * but its last). Improved Interface stalls, i % 4: tcp, tls-idle, header-trickle ("GET / HTTP/1.1" and
 * Host, then a header line at a time), body-trickle (a POST to --path with Content-Length 1000 and "{",
 * then a space at a time). TLS 1.3 only, the client certificate of --cn in the PKI at --pki
 * (issued/CN/chain.pem and key.pem), the server's chain verified against trust.pem and its name against
 * --server-name (also sent as SNI). At most 50 connections are being set up at once (TCP, TLS, stage;
 * the II's listen backlog is 100), the BI's first. --bi (or --ii) given more than once: that interface's
 * connections are spread over the addresses, connection i to address i % n (a node's broker processes).
 *
 * Output, one JSON object per line on stdout: {"ready": n, "at": t} once every connection stalled (or
 * failed before), then one result per connection as it closes ({"interface", "mode", "stalled",
 * "closed", "error", "port": its local port, the "peer" port of the node's log records, "received": the
 * plaintext bytes the server sent}), then
 * {"done": n, "cpu_s": this process's CPU seconds}.
 *
 *   stalled --bi 127.0.0.1:5671 --ii 127.0.0.1:8443 --count 500 --pki PKI --cn actor-1 \
 *           --server-name ixc-a --trickle-s 0.5 --path /actor-1/subscriptions
 *
 * Compiled with -DMUTE_MODE='"name"', the stall of that name sends nothing after TLS (a mutant: the
 * tests show their checks catch it).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNECTING 50
#define OUT_MAX 1024

enum { BI, II };
enum { S_CONNECT, S_HANDSHAKE, S_STAGE, S_SASL, S_STALLED, S_CLOSED };

static const char *BI_STALLS[] = {"tcp", "tls-idle", "header-trickle", "sasl-header", "sasl-init-part",
                                  "open-missing", "open-trickle"};
static const char *II_STALLS[] = {"tcp", "tls-idle", "header-trickle", "body-trickle"};
#define BI_COUNT 7
#define II_COUNT 4

static const unsigned char SASL_HEADER[8] = {'A', 'M', 'Q', 'P', 3, 1, 0, 0};
static const unsigned char AMQP_HEADER[8] = {'A', 'M', 'Q', 'P', 0, 1, 0, 0};
/* sasl-init, mechanism EXTERNAL, no initial response (interchange.broker.sasl.init_frame) */
static const unsigned char SASL_INIT[24] = {0, 0, 0, 0x18, 2, 1, 0, 0, 0, 0x53, 0x41, 0xc0, 0x0b, 1, 0xa3, 8,
                                            'E', 'X', 'T', 'E', 'R', 'N', 'A', 'L'};
/* the sasl-outcome performative's descriptor, read for before the AMQP header */
static const unsigned char SASL_OUTCOME[3] = {0, 0x53, 0x44};
/* an open frame, container-id "stalled-client-000" (trickled, all but its last byte) */
static const unsigned char OPEN[34] = {0, 0, 0, 0x22, 2, 0, 0, 0, 0, 0x53, 0x10, 0xc0, 0x15, 1, 0xa1, 0x12,
                                       's', 't', 'a', 'l', 'l', 'e', 'd', '-', 'c', 'l', 'i', 'e', 'n', 't',
                                       '-', '0', '0', '0'};

struct target {
  struct sockaddr_in addr;
  int on;
};

struct conn {
  int fd;
  SSL *ssl;
  int iface, index, mode, state, port, sent_pieces, pieces, matched;  /* index: its number on its interface */
  long received;  /* plaintext bytes from the server */
  double stalled, closed;
  int64_t next_ns;
  char error[160];
  unsigned char out[OUT_MAX];
  size_t out_len, out_off;
  uint32_t events;
};

static struct conn *conns;
static int total, next_start, setting_up, waiting, closed_count, epfd;
static double trickle_s = 1.0;
static int64_t trickle_ns, next_due = INT64_MAX;
static const char *server_name = "", *path = "/";
#define ADDRESSES_MAX 16
static struct target targets[2][ADDRESSES_MAX];  /* per interface, the addresses its connections spread over */
static int addresses[2];
static SSL_CTX *ctx;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double now_s(void) { return now_ns() / 1e9; }

static const char *mode_name(const struct conn *c) { return c->iface == BI ? BI_STALLS[c->mode] : II_STALLS[c->mode]; }

static int is(const struct conn *c, const char *name) { return strcmp(mode_name(c), name) == 0; }

static void json_time(double t) {
  if (t < 0) fputs("null", stdout);
  else printf("%.6f", t);
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') putchar('\\');
    putchar((unsigned char)*s < 0x20 ? ' ' : *s);
  }
  putchar('"');
}

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static void watch(struct conn *c, uint32_t events) {
  if (c->events == events) return;
  struct epoll_event ev = {.events = events, .data.ptr = c};
  epoll_ctl(epfd, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev);
  c->events = events;
}

static void start_next(void);

/* Once per connection: stalled or failed before; the ready line when it was the last. */
static void reached(struct conn *c) {
  setting_up--;
  if (--waiting == 0) {
    printf("{\"ready\": %d, \"at\": %.6f}\n", total, now_s());
    fflush(stdout);
  }
  start_next();
}

static void finish(struct conn *c, const char *error) {
  if (c->state == S_CLOSED) return;
  int before = c->state < S_STALLED;
  c->closed = now_s();
  if (error) snprintf(c->error, sizeof c->error, "%s", error);
  c->state = S_CLOSED;
  epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
  if (c->ssl) SSL_free(c->ssl);
  c->ssl = NULL;
  close(c->fd);
  printf("{\"interface\": \"%s\", \"mode\": \"%s\", \"stalled\": ", c->iface == BI ? "bi" : "ii", mode_name(c));
  json_time(c->stalled);
  fputs(", \"closed\": ", stdout);
  json_time(c->closed);
  fputs(", \"error\": ", stdout);
  if (c->error[0]) json_string(c->error);
  else fputs("null", stdout);
  printf(", \"port\": %d, \"received\": %ld}\n", c->port, c->received);
  fflush(stdout);
  closed_count++;
  if (before) reached(c);
}

/* An OpenSSL failure as text (the queue's first error, or errno's), then the connection finished. */
static void fail_ssl(struct conn *c, int err) {
  char buf[160];
  unsigned long e = ERR_get_error();
  if (e) snprintf(buf, sizeof buf, "SSLError: %s", ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "?");
  else if (err == SSL_ERROR_SYSCALL && errno) snprintf(buf, sizeof buf, "OSError: %s", strerror(errno));
  else if (err == SSL_ERROR_ZERO_RETURN || err == SSL_ERROR_SYSCALL) buf[0] = 0;  /* closed: EOF */
  else snprintf(buf, sizeof buf, "SSLError: error %d", err);
  ERR_clear_error();
  finish(c, buf[0] ? buf : NULL);
}

static void queue_out(struct conn *c, const void *data, size_t len) {
#ifdef MUTE_MODE
  if (is(c, MUTE_MODE)) return;
#endif
  if (c->out_len + len > OUT_MAX) len = OUT_MAX - c->out_len;
  memcpy(c->out + c->out_len, data, len);
  c->out_len += len;
}

/* Write what is queued; 1 when all of it is out, 0 when it waits for the socket, -1 when finished. */
static int flush_out(struct conn *c) {
  while (c->out_off < c->out_len) {
    int n;
    if (c->ssl) {
      ERR_clear_error();
      errno = 0;
      n = SSL_write(c->ssl, c->out + c->out_off, (int)(c->out_len - c->out_off));
      if (n <= 0) {
        int err = SSL_get_error(c->ssl, n);
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) return 0;
        fail_ssl(c, err);
        return -1;
      }
    } else {
      n = (int)send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN) return 0;
        finish(c, strerror(errno));
        return -1;
      }
    }
    c->out_off += (size_t)n;
  }
  c->out_len = c->out_off = 0;
  return 1;
}

/* The next trickled piece of the connection's stall into its output; 0 when it has none left. */
static int next_piece(struct conn *c) {
  if (c->sent_pieces >= c->pieces) return 0;
  int i = c->sent_pieces++;
  char line[32];
  if (is(c, "header-trickle") && c->iface == BI) queue_out(c, SASL_HEADER + i, 1);
  else if (is(c, "open-trickle")) queue_out(c, OPEN + i, 1);
  else if (is(c, "header-trickle")) queue_out(c, line, (size_t)snprintf(line, sizeof line, "X-Slow-%d: 1\r\n", i));
  else queue_out(c, " ", 1);
  return 1;
}

static void stalled(struct conn *c) {
  c->state = S_STALLED;
  c->stalled = now_s();
  if (is(c, "header-trickle")) c->pieces = c->iface == BI ? 7 : 1000;
  else if (is(c, "open-trickle")) c->pieces = (int)sizeof OPEN - 1;
  else if (is(c, "body-trickle")) c->pieces = 998;
  if (c->pieces) {
    c->next_ns = now_ns() + trickle_ns;
    if (c->next_ns < next_due) next_due = c->next_ns;
  }
  reached(c);
}

/* After TLS (or TCP for tcp): the stall's first bytes; then stalled once they are out. */
static void stage(struct conn *c) {
  char head[OUT_MAX];
  c->state = S_STAGE;
  if (c->iface == BI) {
    if (is(c, "sasl-header")) queue_out(c, SASL_HEADER, 8);
    else if (is(c, "sasl-init-part")) {
      queue_out(c, SASL_HEADER, 8);
      queue_out(c, SASL_INIT, 6);
    } else if (is(c, "open-missing") || is(c, "open-trickle")) {
      queue_out(c, SASL_HEADER, 8);
      queue_out(c, SASL_INIT, sizeof SASL_INIT);
      c->state = S_SASL;
    }
  } else if (is(c, "header-trickle")) {
    queue_out(c, head, (size_t)snprintf(head, sizeof head, "GET / HTTP/1.1\r\nHost: %s\r\n", server_name));
  } else if (is(c, "body-trickle")) {
    queue_out(c, head, (size_t)snprintf(head, sizeof head,
                                        "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                                        "Content-Length: 1000\r\n\r\n{", path, server_name));
  }
  int r = flush_out(c);
  if (r < 0) return;
  if (r == 0) {
    watch(c, EPOLLIN | EPOLLOUT);
    return;
  }
  watch(c, EPOLLIN);
  if (c->state == S_STAGE) stalled(c);
}

/* Input: the sasl-outcome looked for while in SASL, everything else read and dropped; EOF finishes. */
static void readable(struct conn *c) {
  unsigned char buf[16384];
  for (;;) {
    int n;
    if (c->ssl) {
      ERR_clear_error();
      errno = 0;
      n = SSL_read(c->ssl, buf, sizeof buf);
      if (n <= 0) {
        int err = SSL_get_error(c->ssl, n);
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return;
        if (c->state == S_SASL && (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && !errno))) {
          finish(c, "ConnectionError: closed during SASL");
          return;
        }
        fail_ssl(c, err);
        return;
      }
    } else {
      n = (int)recv(c->fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        finish(c, n < 0 ? strerror(errno) : NULL);
        return;
      }
    }
    c->received += n;
    for (int i = 0; c->state == S_SASL && i < n; i++) {
      c->matched = buf[i] == SASL_OUTCOME[c->matched] ? c->matched + 1 : buf[i] == SASL_OUTCOME[0];
      if (c->matched == (int)sizeof SASL_OUTCOME) {
        c->state = S_STAGE;
        queue_out(c, AMQP_HEADER, 8);
        int r = flush_out(c);
        if (r < 0) return;
        if (r == 0) watch(c, EPOLLIN | EPOLLOUT);
        else stalled(c);
      }
    }
  }
}

static void handshake(struct conn *c) {
  ERR_clear_error();
  errno = 0;
  int n = SSL_do_handshake(c->ssl);
  if (n == 1) {
    stage(c);
    return;
  }
  int err = SSL_get_error(c->ssl, n);
  if (err == SSL_ERROR_WANT_READ) watch(c, EPOLLIN);
  else if (err == SSL_ERROR_WANT_WRITE) watch(c, EPOLLOUT);
  else fail_ssl(c, err);
}

static void connected(struct conn *c) {
  int error = 0;
  socklen_t len = sizeof error;
  getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &len);
  if (error) {
    finish(c, strerror(error));
    return;
  }
  struct sockaddr_in local;
  len = sizeof local;
  getsockname(c->fd, (struct sockaddr *)&local, &len);
  c->port = ntohs(local.sin_port);
  if (is(c, "tcp")) {
    watch(c, EPOLLIN);
    stage(c);
    return;
  }
  c->ssl = SSL_new(ctx);
  SSL_set_fd(c->ssl, c->fd);
  SSL_set_connect_state(c->ssl);
  SSL_set_tlsext_host_name(c->ssl, server_name);
  SSL_set1_host(c->ssl, server_name);
  c->state = S_HANDSHAKE;
  handshake(c);
}

/* Start set-ups up to CONNECTING at once, in order (the BI's connections first). */
static void start_next(void) {
  while (setting_up < CONNECTING && next_start < total) {
    struct conn *c = &conns[next_start++];
    setting_up++;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
      finish(c, strerror(errno));
      continue;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct target *t = &targets[c->iface][c->index % addresses[c->iface]];
    if (connect(c->fd, (struct sockaddr *)&t->addr, sizeof t->addr) < 0 && errno != EINPROGRESS) {
      finish(c, strerror(errno));
      continue;
    }
    watch(c, EPOLLOUT);
  }
}

static void ready(struct conn *c, uint32_t events) {
  switch (c->state) {
    case S_CLOSED:
      return;
    case S_CONNECT:
      connected(c);
      return;
    case S_HANDSHAKE:
      handshake(c);
      return;
    default:
      break;
  }
  if (events & EPOLLOUT) {
    int r = flush_out(c);
    if (r < 0) return;
    if (r == 1) {
      watch(c, EPOLLIN);
      if (c->state == S_STAGE) stalled(c);
    }
  }
  if (c->state != S_CLOSED && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) readable(c);
}

/* Trickle every due piece; next_due becomes the earliest piece still to come. */
static void trickle(int64_t now) {
  if (now < next_due) return;
  next_due = INT64_MAX;
  for (int i = 0; i < total; i++) {
    struct conn *c = &conns[i];
    if (c->state != S_STALLED || c->sent_pieces >= c->pieces) continue;
    if (c->next_ns <= now && !c->out_len) {
      next_piece(c);
      if (flush_out(c) < 0) continue;
      if (c->out_len) watch(c, EPOLLIN | EPOLLOUT);
      c->next_ns = now + trickle_ns;
    }
    if (c->sent_pieces < c->pieces && c->next_ns < next_due) next_due = c->next_ns;
  }
}

static int parse_target(const char *spec, int iface) {
  if (addresses[iface] == ADDRESSES_MAX) return -1;
  struct target *t = &targets[iface][addresses[iface]++];
  char host[64];
  const char *colon = strrchr(spec, ':');
  if (!colon || (size_t)(colon - spec) >= sizeof host) return -1;
  memcpy(host, spec, (size_t)(colon - spec));
  host[colon - spec] = 0;
  t->addr.sin_family = AF_INET;
  t->addr.sin_port = htons((uint16_t)atoi(colon + 1));
  t->on = inet_pton(AF_INET, host, &t->addr.sin_addr) == 1;
  return t->on ? 0 : -1;
}

static SSL_CTX *client_context(const char *pki, const char *cn) {
  char chain[4096], key[4096], trust[4096];
  snprintf(chain, sizeof chain, "%s/issued/%s/chain.pem", pki, cn);
  snprintf(key, sizeof key, "%s/issued/%s/key.pem", pki, cn);
  snprintf(trust, sizeof trust, "%s/trust.pem", pki);
  SSL_CTX *c = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);  /* IP_053/054: TLS 1.3 only */
  SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
  X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(c), X509_V_FLAG_X509_STRICT);
  SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(c, chain) != 1 || SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) != 1
      || SSL_CTX_load_verify_locations(c, trust, NULL) != 1) {
    fprintf(stderr, "stalled: cannot load %s, %s or %s\n", chain, key, trust);
    exit(2);
  }
  return c;
}

static void usage(void) {
  fputs("usage: stalled [--bi HOST:PORT]... [--ii HOST:PORT]... [--count N] --pki DIR [--cn CN] --server-name NAME\n"
        "               [--trickle-s S] [--path PATH]\n", stderr);
  exit(2);
}

int main(int argc, char **argv) {
  int count = 500;
  const char *pki = NULL, *cn = "actor-1";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) usage();
    if (!strcmp(a, "--bi")) { if (parse_target(v, BI)) usage(); }
    else if (!strcmp(a, "--ii")) { if (parse_target(v, II)) usage(); }
    else if (!strcmp(a, "--count")) count = atoi(v);
    else if (!strcmp(a, "--pki")) pki = v;
    else if (!strcmp(a, "--cn")) cn = v;
    else if (!strcmp(a, "--server-name")) server_name = v;
    else if (!strcmp(a, "--trickle-s")) trickle_s = atof(v);
    else if (!strcmp(a, "--path")) path = v;
    else usage();
    i++;
  }
  if (!pki || !*server_name || count < 0) usage();
  trickle_ns = (int64_t)(trickle_s * 1e9);
  signal(SIGPIPE, SIG_IGN);
  struct rlimit files;  /* a socket per connection: the soft limit (often 1,024) raised to the hard one */
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  ctx = client_context(pki, cn);
  total = count * ((addresses[BI] > 0) + (addresses[II] > 0));
  conns = calloc((size_t)total + 1, sizeof *conns);
  int n = 0;
  for (int iface = BI; iface <= II; iface++) {
    if (!addresses[iface]) continue;
    for (int i = 0; i < count; i++, n++) {
      conns[n].iface = iface;
      conns[n].index = i;
      conns[n].mode = i % (iface == BI ? BI_COUNT : II_COUNT);
      conns[n].stalled = conns[n].closed = -1;
    }
  }
  waiting = total;
  epfd = epoll_create1(EPOLL_CLOEXEC);
  if (total == 0) {
    printf("{\"ready\": 0, \"at\": %.6f}\n", now_s());
  }
  start_next();
  struct epoll_event events[256];
  while (closed_count < total) {
    int64_t now = now_ns();
    int timeout = next_due == INT64_MAX ? -1 : next_due <= now ? 0 : (int)((next_due - now + 999999) / 1000000);
    int got = epoll_wait(epfd, events, 256, timeout);
    for (int i = 0; i < got; i++) ready(events[i].data.ptr, events[i].events);
    trickle(now_ns());
  }
  printf("{\"done\": %d, \"cpu_s\": %.4f}\n", total, cpu_s());
  fflush(stdout);
  return 0;
}
