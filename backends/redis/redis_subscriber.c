/* backends/redis/redis_subscriber.c - see redis_subscriber.h
 *
 * The thread owns the connection: hiredis contexts are not thread-safe, so
 * other threads only edit the subscription table and poke the thread through
 * an eventfd; it writes SUBSCRIBE/UNSUBSCRIBE and reads every reply. */
#include "config.h"

#include "redis_subscriber.h"
#include "../common/reconnect_pause.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

enum sub_state {
    SUB_WANTED,      /* to be sent */
    SUB_SENT,        /* SUBSCRIBE written, confirmation pending */
    SUB_ACTIVE,      /* confirmed: messages are delivered */
    SUB_DROPPED      /* removed by its lock; UNSUBSCRIBE to be sent */
};

/* Eventfds one channel may notify: the channels of lock waiters are their
 * owners' own (one each), but observers of one election share its
 * channel. */
#define SUB_FDS_MAX 16

struct subscription {
    struct subscription *next;
    char *channel;
    size_t len;
    int fds[SUB_FDS_MAX]; /* written on each message; none once dropped */
    int nfds;
    /* Called on each message (and when one may have been missed), under
     * the subscriber's mutex: the holds told that someone asks. */
    struct {
        redis_watch_fn fn;
        struct dlock_provider_lock *lk;
    } watchers[SUB_FDS_MAX];
    int nwatchers;
    enum sub_state state;
    enum sub_state before_drop;  /* where the server stood when it was dropped */
    uint64_t conn_gen;   /* connection it was confirmed on */
    bool active_before;  /* confirmed at least once */
};

struct redis_subscriber {
    struct redis_server server;
    bool sharded;               /* SSUBSCRIBE/SUNSUBSCRIBE, "smessage" (a cluster node) */
    void *log_handle;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* a confirmation arrived, or the connection changed */
    int poke_fd;                /* eventfd: the table changed, or stop */
    bool stopping;
    struct subscription *subs;
    uint64_t conn_gen;          /* bumped on every (re)connection */
    bool connected;
    uint64_t connect_failures;  /* bumped on every failed connect */
    char last_error[512];
};

static void poke(struct redis_subscriber *sub);

static struct subscription *find_in(struct redis_subscriber *sub, const char *channel, size_t len, bool dropped)
{
    for (struct subscription *s = sub->subs; s; s = s->next)
        if (s->len == len && memcmp(s->channel, channel, len) == 0 && (s->state == SUB_DROPPED) == dropped)
            return s;
    return NULL;
}

static struct subscription *find(struct redis_subscriber *sub, const char *channel, size_t len)
{
    return find_in(sub, channel, len, false);
}

static void drop(struct redis_subscriber *sub, struct subscription *s)
{
    s->before_drop = s->state;
    s->state = SUB_DROPPED;
    s->nfds = 0;
    s->nwatchers = 0;
    poke(sub);
}

/* Takes fd out of s; drops s when it notifies nobody any more. */
static void remove_fd(struct redis_subscriber *sub, struct subscription *s, int fd)
{
    for (int i = 0; i < s->nfds; i++)
        if (s->fds[i] == fd) {
            s->fds[i] = s->fds[--s->nfds];
            break;
        }
    if (s->nfds == 0 && s->nwatchers == 0)
        drop(sub, s);
}

static void notify(const struct subscription *s)
{
    uint64_t one = 1;
    for (int i = 0; i < s->nfds; i++) {
        ssize_t ignored = write(s->fds[i], &one, sizeof one);
        (void)ignored;
    }
    for (int i = 0; i < s->nwatchers; i++)
        s->watchers[i].fn(s->watchers[i].lk);
}

static void poke(struct redis_subscriber *sub)
{
    uint64_t one = 1;
    ssize_t ignored = write(sub->poke_fd, &one, sizeof one);
    (void)ignored;
}

static void unlink_sub(struct redis_subscriber *sub, struct subscription *s)
{
    struct subscription **p = &sub->subs;
    while (*p && *p != s)
        p = &(*p)->next;
    if (*p)
        *p = s->next;
    free(s->channel);
    free(s);
}

/* ---- the thread ---------------------------------------------------------- */

/* Queues the commands the table asks for (mu held). */
static void append_changes(struct redis_subscriber *sub, redisContext *ctx)
{
    struct subscription *s = sub->subs, *next;
    for (; s; s = next) {
        next = s->next;
        const char *argv[2] = { NULL, s->channel };
        size_t lens[2] = { 0, s->len };
        if (s->state == SUB_WANTED) {
            argv[0] = sub->sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
            lens[0] = strlen(argv[0]);
            redisAppendCommandArgv(ctx, 2, argv, lens);
            s->state = SUB_SENT;
        } else if (s->state == SUB_DROPPED) {
            argv[0] = sub->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";
            lens[0] = strlen(argv[0]);
            redisAppendCommandArgv(ctx, 2, argv, lens);
            unlink_sub(sub, s);
        }
    }
}

/* Handles one push from the server (mu held). */
static void handle_reply(struct redis_subscriber *sub, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    struct subscription *s = find(sub, r->element[1]->str, r->element[1]->len);
    if (!s)
        return;
    /* The sharded kinds carry an 's' in front: "smessage", "ssubscribe". */
    if (sub->sharded && kind[0] == 's')
        kind++;
    if (strcmp(kind, "message") == 0) {
        notify(s);
    } else if (strcmp(kind, "subscribe") == 0 && s->state == SUB_SENT) {
        /* Confirmed again on a new connection: a release published while
         * the old one was down reached nobody. Wake the waiter so that it
         * looks now rather than at the holder's TTL. */
        bool again = s->active_before && s->conn_gen != sub->conn_gen;
        s->state = SUB_ACTIVE;
        s->active_before = true;
        s->conn_gen = sub->conn_gen;
        if (again)
            notify(s);
        pthread_cond_broadcast(&sub->cv);
    } else if (strcmp(kind, "unsubscribe") == 0 && sub->sharded && s->state == SUB_ACTIVE) {
        /* The node gave the slot away (resharding, or it became a replica)
         * and dropped the subscription. The waiter falls back on the
         * holder's TTL; wake it now so that it tries at once. */
        notify(s);
    }
}

/* Tells every watcher that a message may have been missed (mu held): a
 * request published while there is no connection reaches nobody. */
static void tell_all_watchers(struct redis_subscriber *sub)
{
    for (struct subscription *s = sub->subs; s; s = s->next)
        if (s->state != SUB_DROPPED)
            for (int i = 0; i < s->nwatchers; i++)
                s->watchers[i].fn(s->watchers[i].lk);
}

/* Connection lost (mu held): every live subscription must be sent again. */
static void mark_disconnected(struct redis_subscriber *sub)
{
    sub->connected = false;
    struct subscription *s = sub->subs, *next;
    for (; s; s = next) {
        next = s->next;
        if (s->state == SUB_DROPPED)
            unlink_sub(sub, s);
        else
            s->state = SUB_WANTED;
    }
    tell_all_watchers(sub);
    pthread_cond_broadcast(&sub->cv);
}

static void *subscriber_main(void *arg)
{
    struct redis_subscriber *sub = arg;
    redisContext *ctx = NULL;
    int64_t backoff_ms = 0, retry_at = 0;

    pthread_mutex_lock(&sub->mu);
    while (!sub->stopping) {
        if (!ctx) {
            /* Without a connection, dropped subscriptions need no UNSUBSCRIBE. */
            struct subscription *s = sub->subs, *next;
            for (; s; s = next) {
                next = s->next;
                if (s->state == SUB_DROPPED)
                    unlink_sub(sub, s);
            }
        }
        if (!ctx && sub->subs && dlock_provider_now_ms() >= retry_at) {
            pthread_mutex_unlock(&sub->mu);
            int rc;
            ctx = redis_connect(&sub->server, &rc);
            pthread_mutex_lock(&sub->mu);
            if (ctx) {
                backoff_ms = 0;
                sub->conn_gen++;
                sub->connected = true;
            } else {
                backoff_ms = reconnect_pause_next(backoff_ms);
                retry_at = dlock_provider_now_ms() + backoff_ms;
                snprintf(sub->last_error, sizeof sub->last_error, "%s", dlock_errmsg());
                sub->connect_failures++;
                tell_all_watchers(sub);
                pthread_cond_broadcast(&sub->cv);
                dlock_provider_log(sub->log_handle, DLOCK_LOG_WARN, "redis subscriber: %s; retrying in %lld ms",
                                   sub->last_error, (long long)backoff_ms);
            }
        }
        if (ctx) {
            append_changes(sub, ctx);
            int done = 0;
            while (!done && !ctx->err)
                if (redisBufferWrite(ctx, &done) != REDIS_OK)
                    break;
        }
        int fd = ctx && !ctx->err ? ctx->fd : -1;
        pthread_mutex_unlock(&sub->mu);

        struct pollfd p[2] = { { .fd = sub->poke_fd, .events = POLLIN }, { .fd = fd, .events = POLLIN } };
        int timeout = ctx ? 1000 : (int)(retry_at > dlock_provider_now_ms() ? retry_at - dlock_provider_now_ms() : 1000);
        poll(p, fd >= 0 ? 2 : 1, timeout);
        if (p[0].revents & POLLIN) {
            uint64_t v;
            ssize_t ignored = read(sub->poke_fd, &v, sizeof v);
            (void)ignored;
        }

        pthread_mutex_lock(&sub->mu);
        if (ctx && fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (redisBufferRead(ctx) == REDIS_OK) {
                void *reply;
                while (redisGetReplyFromReader(ctx, &reply) == REDIS_OK && reply) {
                    handle_reply(sub, reply);
                    freeReplyObject(reply);
                }
            }
        }
        if (ctx && ctx->err) {
            snprintf(sub->last_error, sizeof sub->last_error, "%s: subscriber connection lost: %s",
                     sub->server.label, ctx->errstr);
            dlock_provider_log(sub->log_handle, DLOCK_LOG_WARN, "%s", sub->last_error);
            redisFree(ctx);
            ctx = NULL;
            mark_disconnected(sub);
            retry_at = dlock_provider_now_ms() + (backoff_ms = RECONNECT_PAUSE_FIRST_MS);
        }
        if (ctx && !sub->subs) {
            /* Nobody waits: no need to keep a connection open. */
            redisFree(ctx);
            ctx = NULL;
            sub->connected = false;
        }
    }
    pthread_mutex_unlock(&sub->mu);
    if (ctx)
        redisFree(ctx);
    return NULL;
}

/* ---- the API --------------------------------------------------------------- */

int redis_subscriber_start(struct redis_subscriber **out, const struct redis_server *srv, bool sharded,
                           void *log_handle)
{
    struct redis_subscriber *sub = calloc(1, sizeof *sub);
    if (!sub)
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for the subscriber");
    sub->server = *srv;
    sub->sharded = sharded;
    sub->log_handle = log_handle;
    pthread_mutex_init(&sub->mu, NULL);
    pthread_cond_init(&sub->cv, NULL);
    sub->poke_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sub->poke_fd < 0) {
        free(sub);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "redis: cannot create an eventfd: %s", strerror(errno));
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&sub->thread, NULL, subscriber_main, sub);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(sub->poke_fd);
        free(sub);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "redis: cannot start the subscriber thread: %s", strerror(rc));
    }
    *out = sub;
    return DLOCK_OK;
}

void redis_subscriber_stop(struct redis_subscriber *sub)
{
    if (!sub)
        return;
    pthread_mutex_lock(&sub->mu);
    sub->stopping = true;
    pthread_mutex_unlock(&sub->mu);
    poke(sub);
    pthread_join(sub->thread, NULL);
    while (sub->subs)
        unlink_sub(sub, sub->subs);
    close(sub->poke_fd);
    pthread_cond_destroy(&sub->cv);
    pthread_mutex_destroy(&sub->mu);
    free(sub);
}

/* The subscription of channel, live or made (mu held): a dropped one not
 * yet unsubscribed is taken back as it stood on the server, since a new
 * entry would have its SUBSCRIBE undone by the old one's UNSUBSCRIBE.
 * NULL with the detail set when out of memory. */
static struct subscription *subscription_for(struct redis_subscriber *sub, const char *channel, size_t len)
{
    struct subscription *s = find(sub, channel, len);
    if (s)
        return s;
    if ((s = find_in(sub, channel, len, true)) != NULL) {
        s->state = s->before_drop == SUB_ACTIVE && s->conn_gen == sub->conn_gen && sub->connected ? SUB_ACTIVE
                 : s->before_drop == SUB_SENT ? SUB_SENT : SUB_WANTED;
    } else if (!s) {
        s = calloc(1, sizeof *s);
        char *copy = malloc(len + 1);
        if (!s || !copy) {
            free(s);
            free(copy);
            dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for a subscription");
            return NULL;
        }
        memcpy(copy, channel, len);
        copy[len] = 0;
        s->channel = copy;
        s->len = len;
        s->state = SUB_WANTED;
        s->next = sub->subs;
        sub->subs = s;
    }
    return s;
}

/* Takes lk's watch off s (sub->mu held), and s itself once nobody uses it. */
static void remove_watcher(struct redis_subscriber *sub, struct subscription *s, struct dlock_provider_lock *lk)
{
    for (int i = 0; i < s->nwatchers; i++)
        if (s->watchers[i].lk == lk) {
            s->watchers[i] = s->watchers[--s->nwatchers];
            break;
        }
    if (s->nfds == 0 && s->nwatchers == 0)
        drop(sub, s);
}

/* Waits (sub->mu held) until s is confirmed, the thread failed to
 * connect, or timeout_ms passed: DLOCK_OK once confirmed, else
 * DLOCK_EUNAVAILABLE. */
static int await_active(struct redis_subscriber *sub, struct subscription *s, int64_t timeout_ms)
{
    int64_t deadline = dlock_provider_now_ms() + timeout_ms;
    uint64_t failures_before = sub->connect_failures;
    while (s->state != SUB_ACTIVE && sub->connect_failures == failures_before) {
        int64_t now = dlock_provider_now_ms();
        if (now >= deadline)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t step = deadline - now < 20 ? deadline - now : 20;
        ts.tv_nsec += (long)step * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&sub->cv, &sub->mu, &ts);
    }
    if (s->state == SUB_ACTIVE)
        return DLOCK_OK;
    return dlock_seterr(DLOCK_EUNAVAILABLE, "%s",
                        sub->last_error[0] ? sub->last_error : "redis: subscription not confirmed in time");
}

int redis_subscriber_add(struct redis_subscriber *sub, const char *channel, size_t len, int notify_fd,
                         int64_t timeout_ms)
{
    pthread_mutex_lock(&sub->mu);
    /* A subscription of this channel in place: one more fd to notify. */
    struct subscription *s = find(sub, channel, len);
    if (s && s->nfds == SUB_FDS_MAX) {
        pthread_mutex_unlock(&sub->mu);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "redis: more than %d watches of one channel in one client",
                            SUB_FDS_MAX);
    }
    if (!(s = subscription_for(sub, channel, len))) {
        pthread_mutex_unlock(&sub->mu);
        return DLOCK_ENOMEM;
    }
    s->fds[s->nfds++] = notify_fd;
    poke(sub);
    int rc = await_active(sub, s, timeout_ms);
    if (rc != DLOCK_OK)
        remove_fd(sub, s, notify_fd);
    pthread_mutex_unlock(&sub->mu);
    return rc;
}

int redis_subscriber_watch(struct redis_subscriber *sub, const char *channel, size_t len, redis_watch_fn fn,
                           struct dlock_provider_lock *lk, int64_t timeout_ms)
{
    pthread_mutex_lock(&sub->mu);
    struct subscription *s = find(sub, channel, len);
    if (s && s->nwatchers == SUB_FDS_MAX) {
        pthread_mutex_unlock(&sub->mu);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "redis: more than %d holds watching one channel in one client",
                            SUB_FDS_MAX);
    }
    if (!(s = subscription_for(sub, channel, len))) {
        pthread_mutex_unlock(&sub->mu);
        return DLOCK_ENOMEM;
    }
    s->watchers[s->nwatchers].fn = fn;
    s->watchers[s->nwatchers++].lk = lk;
    poke(sub);
    int rc = await_active(sub, s, timeout_ms);
    if (rc != DLOCK_OK)
        remove_watcher(sub, s, lk);
    pthread_mutex_unlock(&sub->mu);
    return rc;
}

void redis_subscriber_unwatch(struct redis_subscriber *sub, const char *channel, size_t len,
                              struct dlock_provider_lock *lk)
{
    pthread_mutex_lock(&sub->mu);
    struct subscription *s = find(sub, channel, len);
    if (s)
        remove_watcher(sub, s, lk);
    pthread_mutex_unlock(&sub->mu);
}

void redis_subscriber_remove(struct redis_subscriber *sub, const char *channel, size_t len, int notify_fd)
{
    pthread_mutex_lock(&sub->mu);
    struct subscription *s = find(sub, channel, len);
    if (s)
        remove_fd(sub, s, notify_fd);
    pthread_mutex_unlock(&sub->mu);
}

int redis_subscriber_disarm(int notify_fd, int fired, uint64_t *messages)
{
    uint64_t v = 0;
    if (fired && notify_fd >= 0 && read(notify_fd, &v, sizeof v) != (ssize_t)sizeof v)
        v = 0; /* an eventfd: the signals since the last read, added up */
    if (messages)
        *messages = v;
    return fired ? DLOCK_OK : DLOCK_ETIMEDOUT;
}

int redis_subscriber_wait(int notify_fd, int wake_fd, int64_t timeout_ms, const char *who, uint64_t *messages)
{
    if (messages)
        *messages = 0;
    struct pollfd p[2] = { { .fd = wake_fd, .events = POLLIN }, { .fd = notify_fd, .events = POLLIN } };
    int n = poll(p, notify_fd >= 0 ? 2 : 1, timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms);
    if (n < 0 && errno != EINTR)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: poll failed: %s", who, strerror(errno));
    if (n > 0 && notify_fd >= 0 && (p[1].revents & POLLIN)) {
        uint64_t v = 0;
        if (read(notify_fd, &v, sizeof v) == (ssize_t)sizeof v && messages)
            *messages = v; /* an eventfd: the signals since the last read, added up */
    }
    return n == 0 ? DLOCK_ETIMEDOUT : DLOCK_OK;
}
