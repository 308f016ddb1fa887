/* backends/etcd/etcd_native.c - an attempt, or a release, without a
 * thread, for the non-blocking API, on libcurl's multi interface. The blocking attempt
 * (etcd.c) is one transaction (create our key unless it exists, and read
 * what decides the grant), then, when busy, one range read for the key
 * just before ours. Here both go over a channel: a multi handle with one
 * easy handle, whose sockets (CURLMOPT_SOCKETFUNCTION) and timer
 * (CURLMOPT_TIMERFUNCTION, as a timerfd) are kept in an epoll set that the
 * core polls. A multi handle keeps its connections in a cache of its own,
 * so channels are pooled by the instance and reused: a channel's first
 * transfer connects (without waiting: curl's connect and its threaded
 * resolver do not block; without an asynchronous resolver there are no
 * channels), later ones reuse that connection. At most half
 * of ETCD_IDLE_HANDLES channels exist, as the other backends send from at
 * most half their pool.
 *
 * Only what those two requests settle goes this way. Anything that needs
 * more (no lease granted yet, a semaphore's N not checked yet, orphans to
 * sweep, a key to make anew, a lease to refresh before the grant, any
 * failure or error answer) answers DLOCK_ENOTSUP, and the core makes the
 * attempt with acquire, which does those steps; the transaction is safe to
 * send again (our key, if this one made it, is found and kept). A
 * release is its delete transaction (compared with our key's revision),
 * over a channel the same way; one that fails is made again by release. */
#include "config.h"

#include "etcd_backend.h"

#include <curl/curl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define ETCD_NATIVE_CHANNELS (ETCD_IDLE_HANDLES / 2)

enum native_step { STEP_NONE, STEP_QUEUE, STEP_PREDECESSOR, STEP_RELEASE };

struct etcd_channel {
    CURLM *multi;
    CURL *easy;
    int epfd;                    /* the sockets curl watches, the timer, and done */
    int timer;                   /* timerfd, set no later than curl's next timeout */
    int64_t timer_until;         /* when it fires (dlock_provider_now_ms), 0 when not set */
    bool due_now;                /* curl asked to be called again at once (act) */
    curl_socket_t wants_out;     /* a socket curl asked to write to, during act */
    int done;                    /* eventfd: curl wants a call at once, or a transfer ended as it was started */
    struct curl_slist *headers;
    struct etcd_buffer answer;
    char *text;                  /* the request's body, alive for the transfer */
    char endpoint[256];
    const char *path;
};

struct etcd_native {
    pthread_mutex_t mu;
    struct etcd_channel *idle[ETCD_NATIVE_CHANNELS];
    int nidle;
    int count;                   /* idle and in use */
};

/* ---- a channel ------------------------------------------------------------------------ */

static int on_socket(CURL *easy, curl_socket_t s, int what, void *arg, void *socketp)
{
    (void)easy;
    (void)socketp;
    struct etcd_channel *ch = arg;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(ch->epfd, EPOLL_CTL_DEL, s, NULL);
        return 0;
    }
    struct epoll_event ev = { .events = 0, .data.fd = s };
    if (what & CURL_POLL_IN)
        ev.events |= EPOLLIN;
    if (what & CURL_POLL_OUT) {
        ev.events |= EPOLLOUT;
        ch->wants_out = s;
    }
    if (epoll_ctl(ch->epfd, EPOLL_CTL_MOD, s, &ev) != 0)
        epoll_ctl(ch->epfd, EPOLL_CTL_ADD, s, &ev);
    return 0;
}

/* curl's timer. A timeout of 0 asks to be called at once: each of our
 * calls into curl is made again while it asks so (act), with no timer.
 * A timer set to fire before curl's timeout is kept: when it fires curl
 * looks, finds nothing due and asks again, for what is left; and a timer
 * curl deletes is left to fire likewise. Each timerfd_settime arms a
 * kernel timer (a costly system call in a virtual machine), and curl asks
 * for three changes a request: at once, the command timeout, none. */
static int on_timer(CURLM *multi, long timeout_ms, void *arg)
{
    (void)multi;
    struct etcd_channel *ch = arg;
    if (timeout_ms == 0) {
        ch->due_now = true;
        return 0;
    }
    if (timeout_ms < 0)
        return 0;
    int64_t until = dlock_provider_now_ms() + timeout_ms;
    if (ch->timer_until && ch->timer_until <= until)
        return 0;
    struct itimerspec t = { { 0, 0 }, { timeout_ms / 1000, (timeout_ms % 1000) * 1000000 } };
    timerfd_settime(ch->timer, 0, &t, NULL);
    ch->timer_until = until;
    return 0;
}

static void drain(int fd)
{
    uint64_t n;
    while (read(fd, &n, sizeof n) == (ssize_t)sizeof n)
        ;
}

/* The timer fired (read now): it is set no more. */
static void timer_fired(struct etcd_channel *ch)
{
    uint64_t n;
    if (read(ch->timer, &n, sizeof n) == (ssize_t)sizeof n)
        ch->timer_until = 0;
}

/* Whether fd can be written to now. */
static bool writable(curl_socket_t fd)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT);
}

/* curl_multi_socket_action, made again for as long as curl asks to be
 * called at once, or asks to write to a socket that can be written to
 * (it waits to be told so before it sends a request: on a kept-open
 * connection, told at once, it sends it now, rather than after a turn of
 * the caller's loop); if it still asks after a few, the done eventfd has
 * the core step the channel again. */
static void act(struct etcd_channel *ch, curl_socket_t fd, int flags, int *running)
{
    for (int i = 0; i < 8; i++) {
        ch->due_now = false;
        ch->wants_out = CURL_SOCKET_BAD;
        curl_multi_socket_action(ch->multi, fd, flags, running);
        if (ch->wants_out != CURL_SOCKET_BAD && writable(ch->wants_out)) {
            fd = ch->wants_out;
            flags = CURL_CSELECT_OUT;
            continue;
        }
        if (!ch->due_now)
            return;
        fd = CURL_SOCKET_TIMEOUT;
        flags = 0;
    }
    uint64_t one = 1;
    ssize_t w = write(ch->done, &one, sizeof one);
    (void)w;
}

static size_t collect(char *ptr, size_t size, size_t nmemb, void *arg)
{
    size_t n = size * nmemb;
    return etcd_buffer_append(arg, ptr, n) ? n : 0;
}

static void channel_free(struct etcd_channel *ch)
{
    if (!ch)
        return;
    if (ch->multi && ch->easy)
        curl_multi_remove_handle(ch->multi, ch->easy);
    if (ch->easy)
        curl_easy_cleanup(ch->easy);
    if (ch->multi)
        curl_multi_cleanup(ch->multi);
    curl_slist_free_all(ch->headers);
    free(ch->answer.data);
    free(ch->text);
    if (ch->epfd >= 0)
        close(ch->epfd);
    if (ch->timer >= 0)
        close(ch->timer);
    if (ch->done >= 0)
        close(ch->done);
    free(ch);
}

static bool watch_fd(int epfd, int fd)
{
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

static struct etcd_channel *channel_new(void)
{
    struct etcd_channel *ch = calloc(1, sizeof *ch);
    if (!ch)
        return NULL;
    ch->epfd = epoll_create1(EPOLL_CLOEXEC);
    ch->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ch->done = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ch->multi = curl_multi_init();
    ch->easy = curl_easy_init();
    if (ch->epfd < 0 || ch->timer < 0 || ch->done < 0 || !ch->multi || !ch->easy || !watch_fd(ch->epfd, ch->timer) ||
        !watch_fd(ch->epfd, ch->done)) {
        channel_free(ch);
        return NULL;
    }
    curl_multi_setopt(ch->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(ch->multi, CURLMOPT_SOCKETDATA, ch);
    curl_multi_setopt(ch->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(ch->multi, CURLMOPT_TIMERDATA, ch);
    curl_multi_setopt(ch->multi, CURLMOPT_MAXCONNECTS, 1L);
    return ch;
}

/* Whether the transfer ended; *result its CURLcode when it did. */
static bool transfer_ended(struct etcd_channel *ch, CURLcode *result)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(ch->multi, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == ch->easy) {
            *result = msg->data.result;
            return true;
        }
    }
    return false;
}

/* Starts a POST of body (not taken) to path on the current endpoint.
 * False when it could not be set up. */
static bool channel_start(struct etcd_instance *inst, struct etcd_channel *ch, const char *path,
                          struct json_object *body)
{
    char token[512];
    etcd_http_target(&inst->http, ch->endpoint, sizeof ch->endpoint, token, sizeof token);
    free(ch->text);
    ch->text = strdup(json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN));
    ch->answer.len = 0; /* and no text: an empty answer must not read as the last one */
    if (ch->answer.data)
        ch->answer.data[0] = '\0';
    curl_slist_free_all(ch->headers);
    curl_easy_reset(ch->easy);
    ch->headers = ch->text ? etcd_http_setup_post(&inst->http, ch->easy, ch->endpoint, path, token, ch->text,
                                                  collect, &ch->answer)
                           : NULL;
    /* No "Expect: 100-continue" wait before the body. */
    struct curl_slist *more = ch->headers ? curl_slist_append(ch->headers, "Expect:") : NULL;
    if (!more)
        return false;
    ch->headers = more;
    curl_easy_setopt(ch->easy, CURLOPT_HTTPHEADER, ch->headers);
    curl_easy_setopt(ch->easy, CURLOPT_TIMEOUT_MS, (long)inst->http.command_timeout_ms);
    /* A channel dropped during a name lookup does not wait for the
     * resolver's thread (the loop may be the one dropping it). */
    curl_easy_setopt(ch->easy, CURLOPT_QUICK_EXIT, 1L);
    ch->path = path;
    drain(ch->done);
    timer_fired(ch); /* while the channel was idle, maybe */
    if (curl_multi_add_handle(ch->multi, ch->easy) != CURLM_OK)
        return false;
    int running = 0;
    act(ch, CURL_SOCKET_TIMEOUT, 0, &running);
    if (!running) {
        /* Ended already (refused at once, say): the core is told by the
         * done eventfd, and the next step reads the end. */
        uint64_t one = 1;
        ssize_t w = write(ch->done, &one, sizeof one);
        (void)w;
    }
    return true;
}

/* Moves the transfer on with what epoll reports: true when it ended, with
 * *reply and the result as etcd_call reports them in *rc. */
static bool channel_step(struct etcd_instance *inst, struct etcd_channel *ch, struct json_object **reply,
                         struct etcd_status *st, int *rc)
{
    struct epoll_event ev[8];
    int n = epoll_wait(ch->epfd, ev, 8, 0);
    int running = 0;
    for (int i = 0; i < n; i++) {
        int fd = ev[i].data.fd;
        if (fd == ch->timer || fd == ch->done) {
            if (fd == ch->timer)
                timer_fired(ch);
            else
                drain(fd);
            act(ch, CURL_SOCKET_TIMEOUT, 0, &running);
            continue;
        }
        int flags = (ev[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) | (ev[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                    (ev[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
        act(ch, fd, flags, &running);
    }
    CURLcode result;
    if (!transfer_ended(ch, &result))
        return false;
    long status = 0;
    curl_easy_getinfo(ch->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(ch->multi, ch->easy);
    st->sent = false;
    *rc = etcd_http_answer(&inst->http, ch->endpoint, ch->path, (int)result, status, &ch->answer, reply, st);
    return true;
}

/* ---- the instance's channels ----------------------------------------------------------- */

void etcd_native_init(struct etcd_instance *inst)
{
    /* A libcurl that resolves names in the calling thread would block
     * the application's loop: attempts then go through acquire. */
    if (!(curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_ASYNCHDNS))
        return;
    inst->native = calloc(1, sizeof *inst->native);
    if (inst->native)
        pthread_mutex_init(&inst->native->mu, NULL);
}

void etcd_native_destroy(struct etcd_instance *inst)
{
    struct etcd_native *n = inst->native;
    if (!n)
        return;
    for (int i = 0; i < n->nidle; i++)
        channel_free(n->idle[i]);
    pthread_mutex_destroy(&n->mu);
    free(n);
    inst->native = NULL;
}

/* An idle channel, or a new one while there are fewer than the cap. */
static struct etcd_channel *channel_take(struct etcd_instance *inst)
{
    struct etcd_native *n = inst->native;
    if (!n)
        return NULL;
    struct etcd_channel *ch = NULL;
    bool make = false;
    pthread_mutex_lock(&n->mu);
    if (n->nidle > 0)
        ch = n->idle[--n->nidle];
    else if (n->count < ETCD_NATIVE_CHANNELS) {
        n->count++;
        make = true;
    }
    pthread_mutex_unlock(&n->mu);
    if (make && !(ch = channel_new())) {
        pthread_mutex_lock(&n->mu);
        n->count--;
        pthread_mutex_unlock(&n->mu);
    }
    return ch;
}

/* Gives ch back; a channel whose transfer did not end cleanly is closed
 * (its connection with it). */
static void channel_give(struct etcd_instance *inst, struct etcd_channel *ch, bool healthy)
{
    struct etcd_native *n = inst->native;
    if (!healthy) {
        channel_free(ch);
        ch = NULL;
    }
    pthread_mutex_lock(&n->mu);
    if (ch)
        n->idle[n->nidle++] = ch;
    else
        n->count--;
    pthread_mutex_unlock(&n->mu);
}

/* ---- the attempt ----------------------------------------------------------------------- */

/* Starts transaction txn (put here) over a free channel as el's step: true
 * when in flight (io->fd set), false when no channel could take it. */
static bool send_txn(struct etcd_instance *inst, struct etcd_lock *el, struct json_object *txn, enum native_step step,
                     struct dlock_provider_io *io)
{
    struct etcd_channel *ch = channel_take(inst);
    bool started = ch && channel_start(inst, ch, "/v3/kv/txn", txn);
    json_object_put(txn);
    if (!started) {
        if (ch)
            channel_give(inst, ch, false);
        return false;
    }
    el->native = ch;
    el->native_step = step;
    io->fd = ch->epfd;
    return true;
}

int etcd_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    int64_t lease_id = 0;
    if (lk->mode == DLOCK_MODE_SEMAPHORE && !el->permits_checked)
        return DLOCK_ENOTSUP;
    int rc = etcd_ensure_keys(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    if (el->make_key_anew || etcd_orphans_any(&inst->orphans) || !etcd_lease_known(inst, lk->lease_ms, &lease_id))
        return DLOCK_ENOTSUP;
    if (!send_txn(inst, el, etcd_queueing_txn(lk, el, lease_id), STEP_QUEUE, io))
        return DLOCK_ENOTSUP;
    el->native_lease = lease_id;
    /* Three requests at most (a look that finds our key gone, the
     * transaction that queues it anew, the predecessor's read), each
     * bounded by the command timeout in the blocking attempt. */
    io->timeout_ms = 3 * inst->http.command_timeout_ms;
    io->priv = el;
    return DLOCK_OK;
}

/* The end of the attempt: the channel back, and what to answer. */
static int attempt_over(struct etcd_instance *inst, struct etcd_lock *el, struct dlock_provider_io *io, bool healthy,
                        int rc)
{
    channel_give(inst, el->native, healthy);
    el->native = NULL;
    el->native_step = STEP_NONE;
    io->priv = NULL;
    return rc;
}

int etcd_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                      struct dlock_grant *g)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    struct etcd_channel *ch = el->native;
    struct json_object *reply = NULL;
    struct etcd_status st;
    int rc;
    if (!channel_step(inst, ch, &reply, &st, &rc))
        return DLOCK_PROVIDER_AGAIN;
    if (rc != DLOCK_OK) /* acquire sends it again, and reports or recovers */
        return attempt_over(inst, el, io, !st.sent || st.grpc_code != 0, DLOCK_ENOTSUP);
    if (el->native_step == STEP_PREDECESSOR) {
        etcd_read_predecessor(lk, el, reply);
        json_object_put(reply);
        g->retry_hint_ms = el->pred ? -1 : 0; /* it just went: look again at once */
        return attempt_over(inst, el, io, true, DLOCK_EBUSY);
    }
    struct etcd_queueing q;
    etcd_read_queueing(lk, el, reply, el->native_lease, &q);
    json_object_put(reply);
    if (q.gone) {
        /* A look found our key gone: queue anew, on the same channel. */
        struct json_object *txn = etcd_queueing_txn(lk, el, el->native_lease);
        bool started = channel_start(inst, ch, "/v3/kv/txn", txn);
        json_object_put(txn);
        if (!started)
            return attempt_over(inst, el, io, false, DLOCK_ENOTSUP);
        io->fd = ch->epfd;
        return DLOCK_PROVIDER_AGAIN;
    }
    if (q.stale_key || !q.consistent) /* acquire makes the key anew, or says what was read */
        return attempt_over(inst, el, io, true, DLOCK_ENOTSUP);
    if (q.first) /* a lease too old for the grant: acquire refreshes it first */
        return attempt_over(inst, el, io, true, etcd_grant_if_fresh(inst, lk, el, g) ? DLOCK_OK : DLOCK_ENOTSUP);
    if (etcd_busy_without_predecessor(lk, el, &q, g))
        return attempt_over(inst, el, io, true, DLOCK_EBUSY);
    struct json_object *req = etcd_predecessor_request(lk, el);
    bool started = channel_start(inst, ch, "/v3/kv/range", req);
    json_object_put(req);
    if (!started)
        return attempt_over(inst, el, io, false, DLOCK_ENOTSUP);
    el->native_step = STEP_PREDECESSOR;
    io->fd = ch->epfd;
    return DLOCK_PROVIDER_AGAIN;
}

void etcd_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    io->priv = NULL;
    if (!el->native)
        return;
    /* No answer in time: the transaction may have made our key, and the
     * request gives up. As after a queueing that got no answer in acquire,
     * the key is remembered for a sweep (or for the next request of this
     * owner to adopt and make anew). */
    etcd_orphans_add(&inst->orphans, el->key, el->key_len, el->native_step == STEP_QUEUE ? 0 : el->create_rev);
    attempt_over(inst, el, io, false, DLOCK_EUNAVAILABLE);
}

/* ---- the release ----------------------------------------------------------------------- */

int etcd_release_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    if (!el->key || !el->create_rev) /* nothing of ours to delete: release says so */
        return DLOCK_ENOTSUP;
    if (!send_txn(inst, el, etcd_delete_txn(el->key, el->key_len, el->create_rev), STEP_RELEASE, io))
        return DLOCK_ENOTSUP;
    el->release_sent_before = false;
    io->timeout_ms = inst->http.command_timeout_ms;
    io->priv = el;
    return DLOCK_OK;
}

int etcd_release_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    struct json_object *reply = NULL;
    struct etcd_status st;
    int rc;
    if (!channel_step(inst, el->native, &reply, &st, &rc))
        return DLOCK_PROVIDER_AGAIN;
    attempt_over(inst, el, io, rc == DLOCK_OK || !st.sent || st.grpc_code != 0, DLOCK_OK);
    if (rc != DLOCK_OK) {
        /* release sends the delete again on a fresh connection (it is safe
         * twice: it compares our key's revision), and counts a key it finds
         * gone as this one's work if this one may have reached the server. */
        el->release_sent_before = st.sent;
        return DLOCK_ENOTSUP;
    }
    bool deleted = etcd_txn_succeeded(reply);
    json_object_put(reply);
    el->create_rev = el->granted_rev = 0;
    return deleted ? DLOCK_OK : DLOCK_ENOTOWNER;
}

void etcd_release_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    io->priv = NULL;
    if (!el->native)
        return;
    /* No answer in time: the key is remembered for a sweep. */
    etcd_remember_failed_delete(inst, el, DLOCK_EUNAVAILABLE);
    attempt_over(inst, el, io, false, DLOCK_EUNAVAILABLE);
}

void etcd_native_forget(struct etcd_instance *inst, struct etcd_lock *el)
{
    if (el->native) {
        channel_give(inst, el->native, false);
        el->native = NULL;
    }
}
