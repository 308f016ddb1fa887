/*
 * core/metrics_http.h - a client's metrics served over HTTP, for the
 * `metrics { listen = "ADDRESS:PORT"; }` setting: a Prometheus server
 * scrapes the process itself instead of something running `dlock metrics`.
 *
 * GET /metrics (and HEAD) answers the text dlock__metrics_format() writes,
 * the same as dlock_client_metrics(), with
 * Content-Type: text/plain; version=0.0.4. Any other path is 404, any other
 * method on /metrics 405. libmicrohttpd does the HTTP, on one thread of its
 * own per server; this module only binds the address, so that a refusal
 * comes back with its errno and advice, and answers the three cases.
 *
 * Built only when configure found libmicrohttpd (DLOCK_HAVE_MICROHTTPD).
 * Without it the configuration refuses `listen` (core/config.c), so no
 * client ever asks for a server and nothing here is declared.
 */
#ifndef DLOCK_CORE_METRICS_HTTP_H
#define DLOCK_CORE_METRICS_HTTP_H

#include "internal.h"

#ifdef DLOCK_HAVE_MICROHTTPD

/* What a server serves and where it reports. Everything pointed to is
 * borrowed and must outlive the server. */
struct dlock__metrics_http_source {
    const struct dlock__metrics *metrics; /* read from the server's thread, with relaxed atomics */
    const char *backend;                  /* the value of the backend label */
    struct dlock__log *log;               /* where libmicrohttpd's own complaints go (warn) */
};

/*
 * Binds addr (addr_len bytes; listen is its text form from the
 * configuration, used in messages, and is copied), listens, and starts a
 * server thread that answers scrapes from source.
 *
 * Ownership: on DLOCK_OK *out owns the server (its thread, its listening
 * socket and its connections) until dlock__metrics_http_stop(). source is
 * copied; what it points to is borrowed.
 *
 * Errors (the detail says what to do; *out is NULL and nothing is left
 * open): DLOCK_EUNAVAILABLE when the address cannot be listened on (in use
 * by another process or client, not an address of this host, a port below
 * 1024 without the privilege) or libmicrohttpd would not start;
 * DLOCK_ENOMEM.
 *
 * Thread safety: servers are independent; call from any thread.
 */
int dlock__metrics_http_start(const struct sockaddr *addr, socklen_t addr_len, const char *listen,
                              const struct dlock__metrics_http_source *source,
                              struct dlock__metrics_http **out);

/*
 * Stops a server: closes its listening socket and every connection, waits
 * for its thread (a scrape being answered finishes first) and frees it.
 * After it returns the source is not read any more and the port is free
 * to be bound again. NULL is ignored.
 *
 * Thread safety: once per server, from any thread but the server's own
 * (never from a log sink it calls).
 */
void dlock__metrics_http_stop(struct dlock__metrics_http *server);

#endif /* DLOCK_HAVE_MICROHTTPD */

#endif
