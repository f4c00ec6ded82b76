/* if2_amqp.h: what the IF2 benchmark's AMQP 0-9-1 clients in C (if2_consume.c, if2_publish.c; rabbitmq-c
 * 0.11) share: clocks, their own CPU, a JSON error line, and one connection as the IF2 back-office
 * makes it: TLS 1.3 only, the client certificate (CHAIN + KEY), the server's chain verified against
 * TRUST (its host name is not: the benchmark connects to 127.0.0.1 while the certificate names the
 * broker), SASL EXTERNAL as CN (the certificate's), channel 1 open. Header-only: each client is one
 * file plus this. */
#ifndef IF2_AMQP_H
#define IF2_AMQP_H

#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <openssl/ssl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static inline int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* This process's CPU (user + system) in seconds. */
static inline double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* The report line of a client that could not run (the caller reads "errors"), and exit 1. */
static inline void die(const char *what) {
  printf("{\"messages\": 0, \"cpu_s\": 0, \"errors\": \"%s\"}\n", what);
  exit(1);
}

static inline int rpc_ok(amqp_rpc_reply_t r) { return r.reply_type == AMQP_RESPONSE_NORMAL; }

static inline amqp_connection_state_t open_connection(const char *host, int port, const char *cert,
                                                      const char *key, const char *ca, const char *identity) {
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

#endif
