/* backends/etcd/etcd_watch.c - see etcd_watch.h */
#include "config.h"

#include "etcd_watch.h"

#include <curl/curl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct stream {
    struct etcd_buffer b;
    bool changed;       /* an event came, or the server ended the watch */
    int64_t created_at; /* the revision the server created the watch at, 0 before */
};

/* Reads the whole messages (one JSON object a line) received so far. */
static void read_messages(struct stream *s)
{
    char *start = s->b.data, *nl;
    while ((nl = memchr(start, '\n', (size_t)(s->b.data + s->b.len - start))) != NULL) {
        *nl = 0;
        struct json_object *msg = json_tokener_parse(start);
        struct json_object *result = msg ? etcd_json_get(msg, "result") : NULL;
        if (!msg || etcd_json_get(msg, "error"))
            s->changed = true; /* the stream went wrong: look again rather than wait */
        else if (result && (etcd_json_get(result, "events") || etcd_json_get(result, "canceled")))
            s->changed = true; /* a change, or a watch the server ended (a compacted revision) */
        else if (result && etcd_json_get(result, "created"))
            s->created_at = etcd_json_int(etcd_json_get(result, "header"), "revision");
        if (msg)
            json_object_put(msg);
        start = nl + 1;
    }
    size_t rest = (size_t)(s->b.data + s->b.len - start);
    memmove(s->b.data, start, rest);
    s->b.len = rest;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct stream *s = arg;
    size_t n = size * nmemb;
    if (!etcd_buffer_append(&s->b, ptr, n))
        return 0;
    read_messages(s);
    return n;
}

/* Whether key changed between from_revision and the watch's creation: it
 * is gone, or it was written at from_revision or later (a newer key of the
 * same name, or the same key made shared by a downgrade: its mod revision
 * moves, its create revision stays). Any doubt (a failed read) counts as a
 * change. */
static bool changed_before_the_watch(struct etcd_http *h, const char *key, size_t key_len, int64_t from_revision)
{
    struct json_object *req = json_object_new_object(), *reply = NULL;
    json_object_object_add(req, "key", etcd_json_b64(key, key_len));
    json_object_object_add(req, "keys_only", json_object_new_boolean(1));
    int rc = etcd_call(h, "/v3/kv/range", req, &reply, NULL);
    json_object_put(req);
    if (rc != DLOCK_OK)
        return true;
    struct json_object *kvs = etcd_json_get(reply, "kvs");
    bool changed = !kvs || !json_object_is_type(kvs, json_type_array) || json_object_array_length(kvs) == 0 ||
                   etcd_json_int(json_object_array_get_idx(kvs, 0), "mod_revision") >= from_revision;
    json_object_put(reply);
    return changed;
}

struct etcd_watch {
    struct etcd_http *h;
    char endpoint[256];
    char *key;
    size_t key_len;
    bool range;
    int64_t start_revision;
    bool checked;               /* the read for what came before the watch was made */
    struct stream s;
    CURL *easy;
    CURLM *multi;
    struct curl_slist *headers;
    struct json_object *body;   /* the request, which curl reads from */
    int sock;                   /* the stream's socket, -1 before curl made it */
};

/* Notes the socket curl made for the watch (its own connection: the
 * watch's easy handle is never reused), which a parked wait polls. */
static int note_socket(void *arg, curl_socket_t fd, curlsocktype purpose)
{
    if (purpose == CURLSOCKTYPE_IPCXN)
        ((struct etcd_watch *)arg)->sock = (int)fd;
    return CURL_SOCKOPT_OK;
}

void etcd_watch_close(struct etcd_watch *w)
{
    if (!w)
        return;
    if (w->multi && w->easy)
        curl_multi_remove_handle(w->multi, w->easy);
    if (w->easy)
        curl_easy_cleanup(w->easy);
    if (w->multi)
        curl_multi_cleanup(w->multi);
    curl_slist_free_all(w->headers);
    if (w->body)
        json_object_put(w->body);
    free(w->s.b.data);
    free(w->key);
    free(w);
}

/* etcd_watch_open, and with changes a watch of every put and delete in
 * [key, range_end) from the server's current revision. */
static int open_watch(struct etcd_http *h, const char *key, size_t key_len, const char *range_end,
                      size_t range_end_len, int64_t start_revision, bool changes, struct etcd_watch **out)
{
    *out = NULL;
    struct etcd_watch *w = calloc(1, sizeof *w);
    if (!w || !(w->key = malloc(key_len ? key_len : 1))) {
        free(w);
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory for a watch");
    }
    memcpy(w->key, key, key_len);
    w->key_len = key_len;
    w->h = h;
    w->sock = -1;
    w->range = range_end != NULL;
    w->checked = w->range; /* a range starts at start_revision: nothing to read first */
    w->start_revision = start_revision;
    char token[512];
    pthread_mutex_lock(&h->mu);
    snprintf(w->endpoint, sizeof w->endpoint, "%s", h->endpoints[h->current]);
    snprintf(token, sizeof token, "%s", h->token);
    pthread_mutex_unlock(&h->mu);

    struct json_object *create = json_object_new_object();
    json_object_object_add(create, "key", etcd_json_b64(key, key_len));
    /* One key: from the server's current revision, not from start_revision:
     * the server serves a watch that starts in the past from a loop that
     * runs every 100 ms, which put up to 100 ms into every hand-off. What
     * happened between start_revision and the watch's creation is looked
     * at once it is created (etcd_watch_step). A range (a semaphore's
     * waiters, any of whose predecessors may go): from start_revision, and
     * deletions only. */
    if (range_end && changes) {
        json_object_object_add(create, "range_end", etcd_json_b64(range_end, range_end_len));
    } else if (range_end) {
        json_object_object_add(create, "range_end", etcd_json_b64(range_end, range_end_len));
        json_object_object_add(create, "start_revision", etcd_json_int_str(start_revision));
        struct json_object *filters = json_object_new_array();
        json_object_array_add(filters, json_object_new_string("NOPUT"));
        json_object_object_add(create, "filters", filters);
    }
    w->body = json_object_new_object();
    json_object_object_add(w->body, "create_request", create);
    const char *text = json_object_to_json_string_ext(w->body, JSON_C_TO_STRING_PLAIN);
    w->easy = curl_easy_init();
    w->multi = curl_multi_init();
    w->headers = w->easy ? etcd_http_setup_post(h, w->easy, w->endpoint, "/v3/watch", token, text, on_data, &w->s)
                         : NULL;
    if (w->easy) {
        curl_easy_setopt(w->easy, CURLOPT_SOCKOPTFUNCTION, note_socket);
        curl_easy_setopt(w->easy, CURLOPT_SOCKOPTDATA, w);
    }
    if (!w->easy || !w->multi || !w->headers || curl_multi_add_handle(w->multi, w->easy) != CURLM_OK) {
        etcd_watch_close(w);
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory for a watch");
    }
    *out = w;
    return DLOCK_OK;
}

int etcd_watch_open(struct etcd_http *h, const char *key, size_t key_len, const char *range_end,
                    size_t range_end_len, int64_t start_revision, struct etcd_watch **out)
{
    return open_watch(h, key, key_len, range_end, range_end_len, start_revision, false, out);
}

int etcd_watch_open_changes(struct etcd_http *h, const char *key, size_t key_len, const char *range_end,
                            size_t range_end_len, struct etcd_watch **out)
{
    return open_watch(h, key, key_len, range_end, range_end_len, 0, true, out);
}

bool etcd_watch_step(struct etcd_watch *w, int *rc)
{
    int running = 0;
    *rc = DLOCK_OK;
    curl_multi_perform(w->multi, &running);
    if (w->s.changed)
        return true;
    if (w->s.created_at && !w->checked) {
        /* Created at s.created_at: changes after it will come as events;
         * one at start_revision .. created_at may have passed. */
        w->checked = true;
        if (w->s.created_at >= w->start_revision &&
            changed_before_the_watch(w->h, w->key, w->key_len, w->start_revision))
            return true;
    }
    if (!running) { /* the stream ended without an event: look again */
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(w->multi, &left)) != NULL)
            if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK)
                *rc = dlock_seterr(DLOCK_EUNAVAILABLE, "etcd %s: watch: %s", etcd_http_shown(w->h, w->endpoint),
                                   curl_easy_strerror(msg->data.result));
        return true;
    }
    return false;
}

/* Steps w until it is over or deadline passes, woken by curl's sockets,
 * wake_fd (-1: none) or a created watch (when until_created). True when
 * over (*rc), or when wake_fd fired or the time ran out (*rc
 * DLOCK_OK and DLOCK_ETIMEDOUT). */
static bool run_until(struct etcd_watch *w, int64_t deadline, int wake_fd, bool until_created, int *rc)
{
    for (;;) {
        if (etcd_watch_step(w, rc))
            return true;
        if (until_created && w->s.created_at && w->checked)
            return false;
        int64_t left_ms = deadline - dlock_provider_now_ms();
        if (left_ms <= 0) {
            *rc = DLOCK_ETIMEDOUT;
            return true;
        }
        struct curl_waitfd extra = { .fd = wake_fd, .events = CURL_WAIT_POLLIN, .revents = 0 };
        int numfds = 0;
        curl_multi_poll(w->multi, &extra, wake_fd >= 0 ? 1 : 0, left_ms > 1000 ? 1000 : (int)left_ms, &numfds);
        if (extra.revents)
            return true; /* cancelled: the core looks at its cancel flag (rc is DLOCK_OK) */
    }
}

bool etcd_watch_start(struct etcd_watch *w, int64_t timeout_ms, int *fd, int *rc)
{
    *fd = -1;
    if (run_until(w, dlock_provider_now_ms() + timeout_ms, -1, true, rc))
        return true;
    if (w->sock < 0) {
        *rc = DLOCK_OK; /* no socket to watch after all: look again */
        return true;
    }
    *fd = w->sock;
    return false;
}

int etcd_watch_wait(struct etcd_watch *w, int64_t timeout_ms, int wake_fd)
{
    int rc;
    run_until(w, dlock_provider_now_ms() + timeout_ms, wake_fd, false, &rc);
    return rc;
}
