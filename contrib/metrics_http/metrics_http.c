/* contrib/metrics_http/metrics_http.c - the metrics exporter module,
 * dlock_metrics_http.so: a client's metrics over HTTP for the
 * `metrics { listen = "ADDRESS:PORT"; }` setting, so that a Prometheus
 * server scrapes the process itself instead of something running
 * `dlock metrics`. The library loads it only when `listen` is set
 * (core/exporter.h), and so links no HTTP server of its own.
 *
 * GET /metrics (and HEAD) answers dlock_client_metrics()'s text with
 * Content-Type: text/plain; version=0.0.4. Any other path is 404, any other
 * method on /metrics 405, and a request on a loopback address that names
 * another host 421. libmicrohttpd does the HTTP, on one thread of its own
 * per server. */
#include "config.h"

#include "exporter.h"
#include "../http/http_listen.h"

#include <dlock/provider.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The version 0.0.4 text format is what dlock_client_metrics() writes. */
#define CONTENT_TYPE "text/plain; version=0.0.4"
#define METRICS_PATH "/metrics"
/* A scraper or two and someone with curl; more is a misuse, refused by
 * libmicrohttpd rather than paid for in descriptors. One address may not
 * take them all: a scraper needs one. An idle connection is kept 10 s:
 * longer than the usual 15 s scrape interval would keep idle sockets
 * forever for nothing. */
static const struct http_limits limits = { 16, 4, 10 };

struct exporter_server {
    struct MHD_Daemon *daemon;
    dlock_client *client;
    void *log_handle;
    char listen[64];
    bool loopback; /* bound to 127.0.0.0/8 or ::1: requests must name it */
};

/* libmicrohttpd's messages end in a newline; the client's log adds its own. */
static void log_from_mhd(void *cls, const char *fmt, va_list ap)
{
    struct exporter_server *server = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = 0;
    dlock_provider_log(server->log_handle, DLOCK_LOG_WARN, "metrics.listen %s: %s", server->listen, msg);
}

/* A fixed answer: 404, 405 (with the Allow header it requires), 421 or 500. */
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
 * The answer is queued at once: none of the cases reads a body, and
 * libmicrohttpd closes the connection of a request whose body it has not
 * read, so a POST with one cannot be mistaken for the next request. */
static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size,
                              void **request_state)
{
    (void)version; (void)upload_data; (void)upload_data_size; (void)request_state;
    struct exporter_server *server = cls;
    if (server->loopback &&
        !http_host_is_loopback(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST)))
        return reply_text(conn, 421, "Misdirected request: this server answers only to a loopback name "
                                     "(127.0.0.1, localhost, [::1])\n", NULL);
    if (strcmp(url, METRICS_PATH) != 0)
        return reply_text(conn, MHD_HTTP_NOT_FOUND, "Not found: the metrics are at " METRICS_PATH "\n", NULL);
    /* HEAD is GET without the body, which HTTP asks every server to take. */
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "Method not allowed: scrape with GET\n", "GET, HEAD");

    char *text = NULL;
    if (dlock_client_metrics(server->client, &text) != DLOCK_OK)
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

static int exporter_start(dlock_client *client, const char *listen, void *log_handle, void **out)
{
    *out = NULL;
    struct http_address addr;
    if (!http_address_parse(listen, &addr))
        return dlock_seterr(DLOCK_EINVAL, "metrics.listen \"%s\" is not ADDRESS:PORT", listen);
    struct exporter_server *server = calloc(1, sizeof *server);
    if (!server)
        return dlock_seterr(DLOCK_ENOMEM, "metrics.listen: out of memory for the HTTP server");
    server->client = client;
    server->log_handle = log_handle;
    server->loopback = addr.loopback;
    snprintf(server->listen, sizeof server->listen, "%s", listen);

    char why[512];
    int fd = http_listen_bind(&addr, limits.connections, "metrics.listen", why, sizeof why);
    if (fd < 0) {
        free(server);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "metrics.listen \"%s\": %s", listen, why);
    }
    server->daemon = http_listen_start(fd, &addr, MHD_USE_AUTO_INTERNAL_THREAD, answer, server, log_from_mhd,
                                       server, &limits);
    if (!server->daemon) {
        free(server);
        return dlock_seterr(DLOCK_EUNAVAILABLE,
                            "metrics.listen \"%s\": libmicrohttpd would not start its server (its reason is in "
                            "the client's log at warn: set DLOCK_LOG=warn to see it)",
                            listen);
    }
    dlock_provider_log(log_handle, DLOCK_LOG_INFO, "metrics served at http://%s%s", server->listen, METRICS_PATH);
    *out = server;
    return DLOCK_OK;
}

static void exporter_stop(void *p)
{
    struct exporter_server *server = p;
    MHD_stop_daemon(server->daemon);
    free(server);
}

static const struct dlock_exporter_table table = {
    .version = DLOCK_EXPORTER_VERSION,
    .start = exporter_start,
    .stop = exporter_stop,
};

const struct dlock_exporter_table *dlock_exporter_module(unsigned version);

const struct dlock_exporter_table *dlock_exporter_module(unsigned version)
{
    return version == DLOCK_EXPORTER_VERSION ? &table : NULL;
}
