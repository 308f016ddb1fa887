/* core/metrics_http.c - the HTTP server of `metrics.listen`, on libmicrohttpd
 * (see metrics_http.h for what it answers). */
#include "config.h"

#include "metrics_http.h"
#include "loopback_host.h"

/* Automake compiles this file only in a build with libmicrohttpd; the
 * fuzz targets (tests/fuzz/run.sh) compile all of core/ in any build. */
#ifdef DLOCK_HAVE_MICROHTTPD

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The version 0.0.4 text format is what dlock__metrics_format() writes. */
#define CONTENT_TYPE "text/plain; version=0.0.4"
#define METRICS_PATH "/metrics"
/* A scraper or two and someone with curl; more is a misuse, refused by
 * libmicrohttpd rather than paid for in descriptors. */
#define CONNECTION_LIMIT 16u
/* One address may not take them all: a scraper needs one. */
#define PER_ADDRESS_LIMIT 4u
/* Seconds an idle connection is kept: longer than a scrape interval of
 * the usual 15 s would keep idle sockets forever for nothing. */
#define CONNECTION_TIMEOUT_S 10u

struct dlock__metrics_http {
    struct MHD_Daemon *daemon;
    struct dlock__metrics_http_source source;
    char listen[64];
    bool loopback;          /* bound to 127.0.0.0/8 or ::1: requests must name it */
};

/* libmicrohttpd's messages end in a newline; the client's log adds its own. */
static void log_from_mhd(void *cls, const char *fmt, va_list ap)
{
    struct dlock__metrics_http *server = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = 0;
    dlock__logf(server->source.log, DLOCK_LOG_WARN, "metrics.listen %s: %s", server->listen, msg);
}

/* A fixed answer: 404, 405 (with the Allow header it requires) or 500. */
static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *text,
                                  const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
    if (ok == MHD_YES && allow)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (ok == MHD_YES)
        ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* Called by libmicrohttpd on its thread once the request's headers are in.
 * The answer is queued at once: none of the three cases reads a body, and
 * libmicrohttpd closes the connection of a request whose body it has not
 * read, so a POST with one cannot be mistaken for the next request. */
static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size,
                              void **request_state)
{
    (void)version; (void)upload_data; (void)upload_data_size; (void)request_state;
    struct dlock__metrics_http *server = cls;
    if (server->loopback &&
        !dlock__host_is_loopback(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST)))
        return reply_text(conn, 421, "Misdirected request: this server answers only to a loopback name "
                                     "(127.0.0.1, localhost, [::1])\n", NULL);
    if (strcmp(url, METRICS_PATH) != 0)
        return reply_text(conn, MHD_HTTP_NOT_FOUND, "Not found: the metrics are at " METRICS_PATH "\n", NULL);
    /* HEAD is GET without the body, which HTTP asks every server to take. */
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "Method not allowed: scrape with GET\n", "GET, HEAD");

    char *text = NULL;
    if (dlock__metrics_format(server->source.metrics, server->source.backend, &text) != DLOCK_OK)
        return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "Cannot format the metrics: out of memory\n",
                          NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(strlen(text), text, free);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
    if (ok == MHD_YES)
        ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* What to do when the address cannot be listened on, by errno. */
static const char *listen_advice(int err)
{
    switch (err) {
    case EADDRINUSE:
        return "another process, or another client in this one, already listens there: give each client "
               "its own port, or stop the other";
    case EADDRNOTAVAIL:
        return "that address is not one of this host's: use 127.0.0.1 (this host only), 0.0.0.0 (every "
               "interface) or an address of this host";
    case EACCES:
        return "ports below 1024 need privileges: use a port of 1024 or above (9464 is the usual one)";
    case EAFNOSUPPORT:
        return "this host has no network stack for that address family: use an IPv4 address";
    default:
        return "check the address in metrics.listen";
    }
}

/* The listening socket, bound here rather than by libmicrohttpd so that a
 * refusal is reported with its errno (libmicrohttpd only logs it). */
static int listen_on(const struct sockaddr *addr, socklen_t addr_len, const char *listen_text, int *out)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "metrics.listen \"%s\": cannot make a socket: %s; %s", listen_text,
                            strerror(errno), listen_advice(errno));
    /* A service restarted at once binds again, while connections of its
     * last run are still in TIME_WAIT. A second listener on the port is
     * still refused: that would take SO_REUSEPORT. */
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, addr, addr_len) != 0 || listen(fd, (int)CONNECTION_LIMIT) != 0) {
        int err = errno;
        close(fd);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "metrics.listen \"%s\": cannot listen there: %s; %s", listen_text,
                            strerror(err), listen_advice(err));
    }
    *out = fd;
    return DLOCK_OK;
}

int dlock__metrics_http_start(const struct sockaddr *addr, socklen_t addr_len, const char *listen_text,
                              const struct dlock__metrics_http_source *source,
                              struct dlock__metrics_http **out)
{
    *out = NULL;
    struct dlock__metrics_http *server = calloc(1, sizeof *server);
    if (!server)
        return dlock_seterr(DLOCK_ENOMEM, "metrics.listen: out of memory for the HTTP server");
    server->source = *source;
    snprintf(server->listen, sizeof server->listen, "%s", listen_text);

    int fd = -1;
    int rc = listen_on(addr, addr_len, server->listen, &fd);
    if (rc != DLOCK_OK) {
        free(server);
        return rc;
    }
    /* libmicrohttpd gets a copy of the socket: it closes what it was given
     * on most of its failure paths but not all, so ours is closed here in
     * every case and neither is closed twice. */
    int given = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (given < 0) {
        int err = errno;
        close(fd);
        free(server);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "metrics.listen \"%s\": cannot duplicate the socket: %s",
                            listen_text, strerror(err));
    }
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (addr->sa_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (addr->sa_family == AF_INET)
        server->loopback = (ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr) >> 24) == 127;
    else if (addr->sa_family == AF_INET6)
        server->loopback = IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)addr)->sin6_addr);
    /* The logger first, so that nothing libmicrohttpd says while starting
     * goes to stderr behind the application's back. */
    server->daemon = MHD_start_daemon(flags, 0, NULL, NULL, answer, server,
                                      MHD_OPTION_EXTERNAL_LOGGER, log_from_mhd, server,
                                      MHD_OPTION_LISTEN_SOCKET, given,
                                      MHD_OPTION_CONNECTION_LIMIT, CONNECTION_LIMIT,
                                      MHD_OPTION_PER_IP_CONNECTION_LIMIT, PER_ADDRESS_LIMIT,
                                      MHD_OPTION_CONNECTION_TIMEOUT, CONNECTION_TIMEOUT_S,
                                      MHD_OPTION_END);
    close(fd);
    if (!server->daemon) {
        free(server);
        return dlock_seterr(DLOCK_EUNAVAILABLE,
                            "metrics.listen \"%s\": libmicrohttpd would not start its server (its reason is in "
                            "the client's log at warn: set DLOCK_LOG=warn to see it)",
                            listen_text);
    }
    dlock__logf(source->log, DLOCK_LOG_INFO, "metrics served at http://%s%s", server->listen, METRICS_PATH);
    *out = server;
    return DLOCK_OK;
}

void dlock__metrics_http_stop(struct dlock__metrics_http *server)
{
    if (!server)
        return;
    MHD_stop_daemon(server->daemon);
    free(server);
}

#endif /* DLOCK_HAVE_MICROHTTPD */
