/* backends/etcd/etcd_wanted.c - see etcd_wanted.h
 *
 * Each watched name has one stream: a POST to /v3/watch of the name's
 * directory, puts only (NODELETE), from a revision. The gateway answers
 * with one JSON message a line for as long as the watch lives. A watch
 * that starts in the past is served from the server's history, so the
 * stream may start late, or start again after a failure, without losing a
 * request: it asks from the revision after the last event it delivered.
 * Only a compacted history loses events; the watch is then told, since a
 * request may have been among them. */
#include "config.h"

#include "etcd_wanted.h"
#include "../common/quiet_thread.h"
#include "../common/reconnect_pause.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* After a stream that ended or failed, the next is opened after a pause
 * (reconnect_pause.h), so that a server that is down is not asked in a
 * loop. */
enum { POLL_CAP_MS = 1000 };

struct name_watch {
    struct name_watch *next;
    struct etcd_wanted *owner;
    struct dlock_provider_lock *lk;  /* NULL once unwatched (under owner->mu) */
    const int64_t *floor;            /* our hold's key revision (atomic loads) */
    char *dir, *own_key;
    size_t dir_len, own_key_len;
    int64_t from_revision;           /* where the next stream starts */
    CURL *easy;                      /* the stream, NULL between streams */
    struct curl_slist *headers;
    char *body;
    struct etcd_buffer in;           /* received, not yet a whole line */
    bool cancelled;                  /* the server ended the watch: the stream is dropped */
    bool reauthenticate;             /* it ended it for the token: get a new one first */
    int64_t reopen_at;               /* dlock_provider_now_ms() for the next stream */
    int64_t backoff_ms;
};

struct etcd_wanted {
    struct etcd_http *h;
    void (*tell)(struct dlock_provider_lock *lk);
    void *log_handle;
    pthread_mutex_t mu;              /* watches, their lk, stopping, started */
    struct name_watch *watches;
    bool started, stopping;
    pthread_t thread;
    CURLM *multi;                    /* the thread's only, but for curl_multi_wakeup */
};

int etcd_wanted_new(struct etcd_http *h, void (*tell)(struct dlock_provider_lock *lk), void *log_handle,
                    struct etcd_wanted **out)
{
    *out = NULL;
    struct etcd_wanted *w = calloc(1, sizeof *w);
    if (!w || !(w->multi = curl_multi_init())) {
        free(w);
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory for the watcher of kept holds");
    }
    w->h = h;
    w->tell = tell;
    w->log_handle = log_handle;
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return DLOCK_OK;
}

/* Tells nw's lock, if it is still watched. */
static void tell_watch(struct name_watch *nw)
{
    struct etcd_wanted *w = nw->owner;
    pthread_mutex_lock(&w->mu);
    if (nw->lk && w->tell)
        w->tell(nw->lk);
    pthread_mutex_unlock(&w->mu);
}

/* One event of the stream: a put of a key of the name. Another owner's
 * key created after our hold's asks for the name. A put of a key of this
 * client (own_key is the start they share), or of a key older than our
 * hold's (a late event of a request that was gone by our grant), does
 * not. */
static bool event_asks(struct name_watch *nw, struct json_object *ev)
{
    struct json_object *kv = etcd_json_get(ev, "kv");
    if (!kv)
        return false;
    char key[2048];
    int n = etcd_json_unb64(kv, "key", key, sizeof key);
    if (n >= (int)nw->own_key_len && memcmp(key, nw->own_key, nw->own_key_len) == 0)
        return false;
    pthread_mutex_lock(&nw->owner->mu);
    int64_t floor = nw->lk ? __atomic_load_n(nw->floor, __ATOMIC_ACQUIRE) : INT64_MAX;
    pthread_mutex_unlock(&nw->owner->mu);
    return etcd_json_int(kv, "create_revision") > floor;
}

/* One message of the stream. */
static void read_message(struct name_watch *nw, const char *line)
{
    struct json_object *msg = json_tokener_parse(line);
    struct json_object *result = msg ? etcd_json_get(msg, "result") : NULL;
    if (!result) {
        /* An error line: the stream ends after it, and is told then. */
        if (msg)
            json_object_put(msg);
        return;
    }
    struct json_object *canceled = etcd_json_get(result, "canceled");
    if (!canceled || !json_object_get_boolean(canceled))
        nw->backoff_ms = 0; /* the server answers: a stream that ends later starts again at once */
    struct json_object *events = etcd_json_get(result, "events");
    size_t n = events && json_object_is_type(events, json_type_array) ? json_object_array_length(events) : 0;
    bool asks = false;
    for (size_t i = 0; i < n; i++) {
        struct json_object *ev = json_object_array_get_idx(events, i);
        int64_t rev = etcd_json_int(etcd_json_get(ev, "kv"), "mod_revision");
        if (rev >= nw->from_revision)
            nw->from_revision = rev + 1;
        asks = asks || event_asks(nw, ev);
    }
    int64_t compacted = etcd_json_int(result, "compact_revision");
    if (compacted > nw->from_revision) {
        /* The history from from_revision is gone: what it held is not
         * known. The next stream starts where the history does. */
        nw->from_revision = compacted;
        asks = true;
    }
    /* A watch the server ended (a compacted revision, a token that
     * expired) sends nothing more, though its HTTP stream may stay open. */
    if (canceled && json_object_get_boolean(canceled)) {
        nw->cancelled = true;
        /* An expired or revoked token: the server cancels every watch
         * made with it at once, so the next is made with a new one. */
        const char *reason = json_object_get_string(etcd_json_get(result, "cancel_reason"));
        if (reason && strstr(reason, "auth"))
            nw->reauthenticate = true;
    }
    if (asks)
        tell_watch(nw);
    json_object_put(msg);
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct name_watch *nw = arg;
    size_t n = size * nmemb;
    if (!etcd_buffer_append(&nw->in, ptr, n))
        return 0; /* out of memory: the transfer fails, and the stream starts again */
    char *start = nw->in.data, *nl;
    while ((nl = memchr(start, '\n', (size_t)(nw->in.data + nw->in.len - start))) != NULL) {
        *nl = 0;
        read_message(nw, start);
        start = nl + 1;
    }
    if (nw->cancelled)
        return 0; /* ends the transfer: the stream is made again */
    size_t rest = (size_t)(nw->in.data + nw->in.len - start);
    memmove(nw->in.data, start, rest);
    nw->in.len = rest;
    return n;
}

/* The request body of nw's next stream. */
static char *watch_body(const struct name_watch *nw)
{
    char end[2048];
    memcpy(end, nw->dir, nw->dir_len);
    end[nw->dir_len - 1]++; /* the directory's last byte ('/') + 1: every key under it */
    struct json_object *create = json_object_new_object();
    json_object_object_add(create, "key", etcd_json_b64(nw->dir, nw->dir_len));
    json_object_object_add(create, "range_end", etcd_json_b64(end, nw->dir_len));
    json_object_object_add(create, "start_revision", etcd_json_int_str(nw->from_revision));
    struct json_object *filters = json_object_new_array();
    json_object_array_add(filters, json_object_new_string("NODELETE"));
    json_object_object_add(create, "filters", filters);
    struct json_object *body = json_object_new_object();
    json_object_object_add(body, "create_request", create);
    char *text = strdup(json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN));
    json_object_put(body);
    return text;
}

/* Ends nw's stream (the thread's). */
static void close_stream(struct etcd_wanted *w, struct name_watch *nw)
{
    if (nw->easy) {
        curl_multi_remove_handle(w->multi, nw->easy);
        curl_easy_cleanup(nw->easy);
        nw->easy = NULL;
    }
    curl_slist_free_all(nw->headers);
    nw->headers = NULL;
    free(nw->body);
    nw->body = NULL;
    nw->in.len = 0;
    nw->cancelled = false;
}

/* A stream that could not be made, or ended: told (a request may have come
 * unseen), and made again a little later. */
static void stream_ended(struct etcd_wanted *w, struct name_watch *nw)
{
    close_stream(w, nw);
    tell_watch(nw);
    nw->backoff_ms = reconnect_pause_next(nw->backoff_ms);
    nw->reopen_at = dlock_provider_now_ms() + nw->backoff_ms;
}

/* Opens nw's stream (the thread's). */
static void open_stream(struct etcd_wanted *w, struct name_watch *nw)
{
    if (nw->reauthenticate) {
        nw->reauthenticate = false;
        if (etcd_authenticate(w->h) != DLOCK_OK)
            dlock_provider_log(w->log_handle, DLOCK_LOG_WARN, "%s: cannot renew the token of a watch: %s",
                               w->h->label, dlock_errmsg());
    }
    char endpoint[256], token[512];
    etcd_http_target(w->h, endpoint, sizeof endpoint, token, sizeof token);
    nw->body = watch_body(nw);
    nw->easy = nw->body ? curl_easy_init() : NULL;
    if (nw->easy) {
        nw->headers = etcd_http_setup_post(w->h, nw->easy, endpoint, "/v3/watch", token, nw->body, on_data, nw);
        /* A member cut off from its cluster's quorum would keep the stream
         * open and silent while requests are made through the others. Asked
         * to require a leader (gRPC metadata, which the gateway takes from
         * this header), it ends the stream after a few election timeouts
         * without one: the stream's end tells the name. */
        struct curl_slist *more = nw->headers ? curl_slist_append(nw->headers, "Grpc-Metadata-Hasleader: true") : NULL;
        if (more) {
            nw->headers = more;
            curl_easy_setopt(nw->easy, CURLOPT_HTTPHEADER, nw->headers);
        }
        /* A connection that the network dropped without a word is found
         * by the kernel's probes, and the stream made again. */
        curl_easy_setopt(nw->easy, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(nw->easy, CURLOPT_TCP_KEEPIDLE, 5L);
        curl_easy_setopt(nw->easy, CURLOPT_TCP_KEEPINTVL, 2L);
        curl_easy_setopt(nw->easy, CURLOPT_PRIVATE, nw);
    }
    if (!nw->headers || curl_multi_add_handle(w->multi, nw->easy) != CURLM_OK)
        stream_ended(w, nw);
}

static void free_watch(struct name_watch *nw)
{
    free(nw->in.data);
    free(nw->dir);
    free(nw->own_key);
    free(nw);
}

/* Under w->mu: drops the unwatched, and says how long the thread may
 * sleep until a stream is due to be opened. */
static int64_t tend_watches(struct etcd_wanted *w, struct name_watch **to_open)
{
    int64_t now = dlock_provider_now_ms(), sleep_ms = POLL_CAP_MS;
    *to_open = NULL;
    for (struct name_watch **p = &w->watches; *p;) {
        struct name_watch *nw = *p;
        if (!nw->lk) {
            *p = nw->next;
            close_stream(w, nw);
            free_watch(nw);
            continue;
        }
        if (!nw->easy) {
            if (nw->reopen_at <= now && !*to_open)
                *to_open = nw;
            else if (nw->reopen_at - now < sleep_ms)
                sleep_ms = nw->reopen_at > now ? nw->reopen_at - now : 0;
        }
        p = &nw->next;
    }
    return sleep_ms;
}

static void *run(void *arg)
{
    struct etcd_wanted *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        struct name_watch *to_open;
        int64_t sleep_ms;
        while ((sleep_ms = tend_watches(w, &to_open)), to_open) {
            /* Outside the mutex: a stream that cannot be made tells its
             * lock, which takes it. Only this thread frees a watch. */
            pthread_mutex_unlock(&w->mu);
            open_stream(w, to_open);
            pthread_mutex_lock(&w->mu);
        }
        pthread_mutex_unlock(&w->mu);
        int running = 0;
        curl_multi_perform(w->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(w->multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct name_watch *nw = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&nw);
            if (nw) {
                if (m->data.result != CURLE_OK)
                    dlock_provider_log(w->log_handle, DLOCK_LOG_DEBUG,
                                       "etcd: the watch of a kept name ended (%s); watching it again",
                                       curl_easy_strerror(m->data.result));
                pthread_mutex_lock(&w->mu);
                bool watched = nw->lk != NULL;
                pthread_mutex_unlock(&w->mu);
                if (watched) {
                    stream_ended(w, nw);
                    if (nw->backoff_ms < sleep_ms)
                        sleep_ms = nw->backoff_ms; /* made again after its pause, not the poll's */
                } else {
                    close_stream(w, nw);
                }
            }
        }
        curl_multi_poll(w->multi, NULL, 0, (int)sleep_ms, NULL);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int etcd_wanted_watch(struct etcd_wanted *w, struct dlock_provider_lock *lk, const char *dir, size_t dir_len,
                      const char *own_key, size_t own_key_len, const int64_t *floor, int64_t from_revision)
{
    struct name_watch *nw = calloc(1, sizeof *nw);
    if (!nw || !(nw->dir = malloc(dir_len)) || !(nw->own_key = malloc(own_key_len ? own_key_len : 1))) {
        if (nw)
            free(nw->dir);
        free(nw);
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory for the watch of a kept name");
    }
    memcpy(nw->dir, dir, dir_len);
    nw->dir_len = dir_len;
    memcpy(nw->own_key, own_key, own_key_len);
    nw->own_key_len = own_key_len;
    nw->owner = w;
    nw->lk = lk;
    nw->floor = floor;
    nw->from_revision = from_revision;
    pthread_mutex_lock(&w->mu);
    int rc = DLOCK_OK;
    if (!w->started) {
        int err = quiet_thread_create(&w->thread, run, w);
        if (err != 0)
            rc = dlock_seterr(DLOCK_ENOMEM, "etcd: could not start the watcher of kept holds");
        else
            w->started = true;
    }
    if (rc == DLOCK_OK) {
        nw->next = w->watches;
        w->watches = nw;
    }
    pthread_mutex_unlock(&w->mu);
    if (rc != DLOCK_OK) {
        free_watch(nw);
        return rc;
    }
    curl_multi_wakeup(w->multi);
    return DLOCK_OK;
}

void etcd_wanted_unwatch(struct etcd_wanted *w, struct dlock_provider_lock *lk)
{
    pthread_mutex_lock(&w->mu);
    for (struct name_watch *nw = w->watches; nw; nw = nw->next)
        if (nw->lk == lk)
            nw->lk = NULL; /* freed by the thread, which may be in its stream's callback */
    pthread_mutex_unlock(&w->mu);
    curl_multi_wakeup(w->multi);
}

void etcd_wanted_free(struct etcd_wanted *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    bool started = w->started;
    pthread_mutex_unlock(&w->mu);
    if (started) {
        curl_multi_wakeup(w->multi);
        pthread_join(w->thread, NULL);
    }
    for (struct name_watch *nw; (nw = w->watches) != NULL;) {
        w->watches = nw->next;
        close_stream(w, nw);
        free_watch(nw);
    }
    curl_multi_cleanup(w->multi);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
