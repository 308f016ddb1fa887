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

int etcd_watch_change(struct etcd_http *h, const char *key, size_t key_len, int64_t start_revision,
                      int64_t timeout_ms, int wake_fd)
{
    return etcd_watch_deletions(h, key, key_len, NULL, 0, start_revision, timeout_ms, wake_fd);
}

int etcd_watch_deletions(struct etcd_http *h, const char *key, size_t key_len, const char *range_end,
                         size_t range_end_len, int64_t start_revision, int64_t timeout_ms, int wake_fd)
{
    char endpoint[256], token[512];
    pthread_mutex_lock(&h->mu);
    snprintf(endpoint, sizeof endpoint, "%s", h->endpoints[h->current]);
    snprintf(token, sizeof token, "%s", h->token);
    pthread_mutex_unlock(&h->mu);

    struct json_object *create = json_object_new_object();
    json_object_object_add(create, "key", etcd_json_b64(key, key_len));
    /* One key: from the server's current revision, not from start_revision:
     * the server serves a watch that starts in the past from a loop that
     * runs every 100 ms, which put up to 100 ms into every hand-off. What
     * happened between start_revision and the watch's creation is looked
     * at once it is created (below). A range (a semaphore's waiters, any of
     * whose predecessors may go): from start_revision, and deletions only. */
    if (range_end) {
        json_object_object_add(create, "range_end", etcd_json_b64(range_end, range_end_len));
        json_object_object_add(create, "start_revision", etcd_json_int_str(start_revision));
        struct json_object *filters = json_object_new_array();
        json_object_array_add(filters, json_object_new_string("NOPUT"));
        json_object_object_add(create, "filters", filters);
    }
    struct json_object *body = json_object_new_object();
    json_object_object_add(body, "create_request", create);
    const char *text = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);

    struct stream s = { { NULL, 0, 0 }, false, 0 };
    bool checked = false;
    CURL *c = curl_easy_init();
    CURLM *m = curl_multi_init();
    struct curl_slist *headers =
        c ? etcd_http_setup_post(h, c, endpoint, "/v3/watch", token, text, on_data, &s) : NULL;
    if (!c || !m || !headers) {
        if (c)
            curl_easy_cleanup(c);
        if (m)
            curl_multi_cleanup(m);
        curl_slist_free_all(headers);
        json_object_put(body);
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory for a watch");
    }
    curl_multi_add_handle(m, c);

    int rc = DLOCK_ETIMEDOUT;
    int64_t deadline = dlock_provider_now_ms() + timeout_ms;
    for (;;) {
        int running = 0;
        curl_multi_perform(m, &running);
        if (s.changed) {
            rc = DLOCK_OK;
            break;
        }
        if (s.created_at && !checked && !range_end) {
            /* Created at s.created_at: changes after it will come as
             * events; one at start_revision .. created_at may have passed. */
            checked = true;
            if (s.created_at >= start_revision && changed_before_the_watch(h, key, key_len, start_revision)) {
                rc = DLOCK_OK;
                break;
            }
        }
        if (!running) { /* the stream ended without an event: look again */
            CURLMsg *msg;
            int left;
            rc = DLOCK_OK;
            while ((msg = curl_multi_info_read(m, &left)) != NULL)
                if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK)
                    rc = dlock_seterr(DLOCK_EUNAVAILABLE, "etcd %s: watch: %s", etcd_http_shown(h, endpoint),
                                      curl_easy_strerror(msg->data.result));
            break;
        }
        int64_t left_ms = deadline - dlock_provider_now_ms();
        if (left_ms <= 0)
            break;
        struct curl_waitfd extra = { .fd = wake_fd, .events = CURL_WAIT_POLLIN, .revents = 0 };
        int numfds = 0;
        curl_multi_poll(m, &extra, wake_fd >= 0 ? 1 : 0, left_ms > 1000 ? 1000 : (int)left_ms, &numfds);
        if (extra.revents) {
            rc = DLOCK_OK; /* cancelled: the core looks at its cancel flag */
            break;
        }
    }
    curl_multi_remove_handle(m, c);
    curl_easy_cleanup(c);
    curl_multi_cleanup(m);
    curl_slist_free_all(headers);
    json_object_put(body);
    free(s.b.data);
    return rc;
}
