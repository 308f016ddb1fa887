/* contrib/cli/serve_http.c - dlock serve's HTTP side, on libmicrohttpd:
 * who may read, which paths answer, and a listing that is given up on
 * when the backend does not answer in time. */
#include "config.h"

#include "serve.h"
#include "cli.h"
#include "seen.h"
#include "../http/http_listen.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The page refreshes every 2 s: an answer later than this is worse than
 * "backend unreachable", and the page says so instead of hanging. */
#define LISTING_TIMEOUT_MS 3000
/* Listings of a backend that does not answer go on in the background
 * (dlock_list() cannot be interrupted); past this many, requests are
 * answered at once rather than piling up threads on a dead backend. */
#define MAX_RUNNING 4
/* A few browser tabs, a scraper and someone with curl. One address may
 * not take them all (idle connections held open before any credentials
 * are sent would lock everyone else out). */
static const struct http_limits limits = { 32, 8, 10 };

struct serve_http {
    struct MHD_Daemon *daemon;
    struct serve_settings s;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* a listing ended */
    int running;             /* listings under way, under mu */
    struct seen seen;        /* how long each hold has been seen, for backends without grant times */
};

/* One listing, shared by the request that waits for it and the thread that
 * runs it; whichever lets go last frees it. */
struct job {
    struct serve_http *server;
    char *prefix;
    size_t prefix_len;
    size_t limit;
    struct view view;
    bool done;
    int refs;                /* under server->mu */
};

static void job_unref(struct job *j)
{
    /* server->mu is held */
    if (--j->refs > 0)
        return;
    view_free(&j->view);
    free(j->prefix);
    free(j);
}

static void *run_job(void *arg)
{
    struct job *j = arg;
    struct serve_http *server = j->server;
    view_take(&j->view, server->s.client, j->prefix, j->prefix_len, j->limit);
    seen_apply(&server->seen, &j->view);
    pthread_mutex_lock(&server->mu);
    j->done = true;
    server->running--;
    pthread_cond_broadcast(&server->cv);
    job_unref(j);
    pthread_mutex_unlock(&server->mu);
    return NULL;
}

static void failed_view(struct view *v, int rc, const char *fmt, ...)
{
    memset(v, 0, sizeof *v);
    v->rc = rc;
    v->generated_ms = wall_ms();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->error, sizeof v->error, fmt, ap);
    va_end(ap);
}

static struct timespec deadline_in(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* Lists into *out within LISTING_TIMEOUT_MS; a failed or late listing is
 * a view with rc and error set. The caller frees *out with view_free. */
static void take_view(struct serve_http *server, const char *prefix, size_t prefix_len, size_t limit,
                      struct view *out)
{
    struct job *j = calloc(1, sizeof *j);
    char *p = malloc(prefix_len + 1);
    if (!j || !p) {
        free(j);
        free(p);
        failed_view(out, DLOCK_ENOMEM, "out of memory");
        return;
    }
    memcpy(p, prefix, prefix_len);
    p[prefix_len] = 0;
    *j = (struct job){ .server = server, .prefix = p, .prefix_len = prefix_len, .limit = limit, .refs = 2 };
    pthread_mutex_lock(&server->mu);
    if (server->running >= MAX_RUNNING) {
        pthread_mutex_unlock(&server->mu);
        free(p);
        free(j);
        failed_view(out, DLOCK_EUNAVAILABLE, "%d listings of the backend are still running: it does not answer",
                    MAX_RUNNING);
        return;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int err = pthread_create(&t, &attr, run_job, j);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        pthread_mutex_unlock(&server->mu);
        free(p);
        free(j);
        failed_view(out, DLOCK_ENOMEM, "cannot start a thread for the listing: %s", strerror(err));
        return;
    }
    server->running++;
    struct timespec deadline = deadline_in(LISTING_TIMEOUT_MS);
    while (!j->done && pthread_cond_timedwait(&server->cv, &server->mu, &deadline) != ETIMEDOUT)
        ;
    if (j->done) {
        *out = j->view; /* the entries move to the caller */
        memset(&j->view, 0, sizeof j->view);
    } else {
        failed_view(out, DLOCK_ETIMEDOUT, "no answer from the backend within %d ms", LISTING_TIMEOUT_MS);
    }
    job_unref(j);
    pthread_mutex_unlock(&server->mu);
}

/* ---- answers ------------------------------------------------------------------- */

/* Queues body (freed by libmicrohttpd when owned, else static) with the
 * headers every answer carries: nothing is cached, nothing is sniffed. */
static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
                               bool owned, const char *header, const char *value)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r =
        owned ? MHD_create_response_from_buffer_with_free_callback(strlen(body), body, free)
              : MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (owned)
            free(body);
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (ok == MHD_YES)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (ok == MHD_YES)
        ok = MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (ok == MHD_YES && header)
        ok = MHD_add_response_header(r, header, value);
    if (ok == MHD_YES)
        ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned status, const char *text,
                                    const char *header, const char *value)
{
    return respond(conn, status, "text/plain; charset=utf-8", (char *)text, false, header, value);
}

/* A 400 whose message is JSON, as the page and scripts read /api/locks. */
static enum MHD_Result respond_bad_query(struct MHD_Connection *conn, const char *msg)
{
    char *body = NULL;
    if (asprintf(&body, "{\"error\":\"%s\"}\n", msg) < 0)
        return MHD_NO;
    return respond(conn, MHD_HTTP_BAD_REQUEST, "application/json", body, true, NULL, NULL);
}

/* ---- who may read ------------------------------------------------------------------ */

/* Compares in time that depends on the lengths only, so that a wrong
 * guess does not tell how much of it was right. */
static bool same_secret(const char *given, const char *expected)
{
    size_t gl = strlen(given), el = strlen(expected);
    unsigned char diff = gl != el;
    for (size_t i = 0; i < el; i++)
        diff |= (unsigned char)(expected[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

static bool authorized(struct serve_http *server, struct MHD_Connection *conn)
{
    if (server->s.auth == AUTH_NONE)
        return true;
    const char *given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return given && same_secret(given, server->s.expected);
}

static enum MHD_Result respond_unauthorized(struct serve_http *server, struct MHD_Connection *conn)
{
    bool basic = server->s.auth == AUTH_BASIC;
    return respond_text(conn, MHD_HTTP_UNAUTHORIZED,
                        basic ? "Unauthorized: sign in with the user and password of the server's --basic-auth-file\n"
                              : "Unauthorized: send the token of the server's --token-file as "
                                "\"Authorization: Bearer TOKEN\"\n",
                        MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                        basic ? "Basic realm=\"dlock\", charset=\"UTF-8\"" : "Bearer realm=\"dlock\"");
}

/* ---- /api/locks query ------------------------------------------------------------- */

struct query {
    const char *prefix;
    size_t prefix_len;
    size_t limit;
    bool seen_prefix, seen_limit;
    const char *error;       /* the first problem, for the 400 */
};

static enum MHD_Result take_argument(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                     const char *value, size_t value_size)
{
    (void)kind;
    struct query *q = cls;
    if (strlen(key) != key_size) {
        q->error = "a parameter name contains a NUL byte";
    } else if (strcmp(key, "prefix") == 0) {
        if (q->seen_prefix)
            q->error = "prefix is given twice: give it once";
        else if (value && memchr(value, 0, value_size))
            q->error = "prefix contains a NUL byte, which no lock name has";
        else if (value_size > DLOCK_NAME_MAX)
            q->error = "prefix is longer than any lock name (512 bytes)";
        q->seen_prefix = true;
        q->prefix = value ? value : "";
        q->prefix_len = value ? value_size : 0;
    } else if (strcmp(key, "limit") == 0) {
        if (q->seen_limit)
            q->error = "limit is given twice: give it once";
        else if (!value || strlen(value) != value_size || !parse_count(value, VIEW_MAX, &q->limit))
            q->error = "limit takes a number of entries from 1 to 10000";
        q->seen_limit = true;
    } else {
        q->error = "unknown parameter: /api/locks takes prefix and limit";
    }
    return q->error ? MHD_NO : MHD_YES;
}

static enum MHD_Result answer_api(struct serve_http *server, struct MHD_Connection *conn)
{
    struct query q = { "", 0, VIEW_MAX, false, false, NULL };
    MHD_get_connection_values_n(conn, MHD_GET_ARGUMENT_KIND, take_argument, &q);
    if (q.error)
        return respond_bad_query(conn, q.error);
    struct view v;
    take_view(server, q.prefix, q.prefix_len, q.limit, &v);
    char *body = serve_render_api(&v, server->s.backend, server->s.stale_ms);
    unsigned status = v.rc == DLOCK_OK ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
    view_free(&v);
    return respond(conn, status, "application/json", body, true, NULL, NULL);
}

/* Always 200 when the view failed: dlock_panel_backend_up 0 is the answer,
 * and a scrape that fails would hide it from the alert. */
static enum MHD_Result answer_metrics(struct serve_http *server, struct MHD_Connection *conn)
{
    struct view v;
    take_view(server, "", 0, VIEW_MAX, &v);
    char *body = serve_render_metrics(&v, server->s.backend, server->s.stale_ms);
    view_free(&v);
    return respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, true, NULL, NULL);
}

/* The page's script only fetches from this server; no other origin, no
 * frame, no form, so a name that somehow became markup could not load
 * or send anything. */
#define PAGE_POLICY                                                                                               \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "            \
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* Called on a libmicrohttpd thread once the headers are in. Every path
 * answers at once: none reads a body. */
static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size,
                              void **request_state)
{
    (void)version; (void)upload_data; (void)upload_data_size; (void)request_state;
    struct serve_http *server = cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "Method not allowed: the panel is read-only\n",
                            MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    /* Without a secret the server is on loopback only, and a request must
     * name it there (see http_address.h). */
    if (server->s.auth == AUTH_NONE &&
        !http_host_is_loopback(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST)))
        return respond_text(conn, 421, "Misdirected request: this panel answers only to a loopback name "
                                       "(127.0.0.1, localhost, [::1])\n", NULL, NULL);
    bool page = strcmp(url, "/") == 0;
    /* With a token the page itself is served to anyone: it holds no data,
     * and a browser cannot send a bearer token for a page it navigates
     * to; the page asks for the token and sends it with each fetch. */
    if (!(page && server->s.auth == AUTH_TOKEN) && !authorized(server, conn))
        return respond_unauthorized(server, conn);
    if (page)
        return respond(conn, MHD_HTTP_OK, "text/html; charset=utf-8", (char *)panel_html, false,
                       "Content-Security-Policy", PAGE_POLICY);
    if (strcmp(url, "/api/locks") == 0)
        return answer_api(server, conn);
    if (strcmp(url, "/metrics") == 0)
        return answer_metrics(server, conn);
    return respond_text(conn, MHD_HTTP_NOT_FOUND, "Not found: the panel is at /, its data at /api/locks and "
                        "/metrics\n", NULL, NULL);
}

static void log_from_mhd(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    fprintf(stderr, "%s: serve: ", progname);
    vfprintf(stderr, fmt, ap);
}

struct serve_http *serve_http_start(int fd, const struct http_address *addr, const struct serve_settings *settings)
{
    struct serve_http *server = calloc(1, sizeof *server);
    if (!server) {
        close(fd);
        fprintf(stderr, "%s: serve: out of memory\n", progname);
        return NULL;
    }
    server->s = *settings;
    seen_init(&server->seen);
    pthread_mutex_init(&server->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&server->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* A thread per connection: a request may wait up to LISTING_TIMEOUT_MS
     * for the backend, and must not hold up the others meanwhile. */
    server->daemon = http_listen_start(fd, addr, MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION,
                                       answer, server, log_from_mhd, server, &limits);
    if (!server->daemon) {
        fprintf(stderr, "%s: serve: libmicrohttpd would not start its server (its reason is above)\n", progname);
        pthread_cond_destroy(&server->cv);
        pthread_mutex_destroy(&server->mu);
        seen_free(&server->seen);
        free(server);
        return NULL;
    }
    return server;
}

bool serve_http_stop(struct serve_http *server)
{
    MHD_stop_daemon(server->daemon);
    pthread_mutex_lock(&server->mu);
    struct timespec deadline = deadline_in(LISTING_TIMEOUT_MS);
    while (server->running > 0 && pthread_cond_timedwait(&server->cv, &server->mu, &deadline) != ETIMEDOUT)
        ;
    bool idle = server->running == 0;
    pthread_mutex_unlock(&server->mu);
    if (!idle)
        return false; /* the listings still use server: it stays */
    pthread_cond_destroy(&server->cv);
    pthread_mutex_destroy(&server->mu);
    seen_free(&server->seen);
    free(server);
    return true;
}
