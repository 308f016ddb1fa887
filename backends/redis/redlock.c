/* backends/redis/redlock.c - the redlock backend module (dlock_redlock.so):
 * the redis backend's lock layout and Lua scripts on N independent masters,
 * granted by a majority (Redlock, as antirez describes it and redsync and
 * Redisson's RedissonRedLock implement it).
 *
 * One attempt sends the acquire script to every master before reading any
 * answer, so it costs about one round trip to the slowest master, not N.
 * It is granted when at least N/2+1 masters granted it and some validity is
 * left: lease - elapsed - (lease/100 + 2 ms) > 0. Otherwise it is undone on
 * every master (a master that granted must not keep a stray hold) and
 * reported busy, or "no quorum" when too few masters answered at all.
 *
 * Fencing: each master keeps its own counter, raised by its acquire script.
 * A grant takes F = the highest counter among the masters that granted and
 * makes sure a majority's counters are at least F: already so when a
 * majority answered F (counters move together while masters stay up), else
 * by a second round that raises them. Any later grant's
 * majority shares a master with that majority, whose counter is >= F and
 * whose acquire script answers more: tokens strictly increase as long as a
 * majority keeps its counters (no more than N/2 - 1 masters restarted
 * without persistence at once). Not linearizable in ZooKeeper's sense:
 * see docs/correctness.md.
 *
 * Waiting: a busy answer queues the owner on each master (the redis
 * backend's scripts), and a release on a master publishes to the first
 * live waiter of that master's queue. A waiter subscribes to its own
 * channel on every master (one subscriber connection and thread per master
 * per client, started at the first wait), and any message wakes it to try
 * again: a release wakes the queue heads, which are the same waiter on
 * every master unless the masters saw the waiters arrive in different
 * orders. A master whose subscriber is down only loses its wake-up; the
 * others still wake the waiter, and without any the core retries after the
 * holder's remaining TTL. */
#include "config.h"

#include "redis_conn.h"
#include "../common/host_port.h"
#include "redis_keys.h"
#include "redis_scripts.h"
#include "redis_multi_list.h"

#include "redis_subscriber.h"

#include <dlock/provider.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define REDLOCK_MAX_SERVERS 15
/* The unit, in microseconds, of the masters' clocks in a fence token. */
#define FENCE_CLOCK_UNIT_US "10000"

struct redlock_instance {
    int n;
    int quorum;
    struct redis_pool pools[REDLOCK_MAX_SERVERS];
    struct redis_scripts scripts;
    char prefix[65];
    int64_t waiter_timeout_ms;
    void *log_handle;
    pthread_mutex_t subscribers_mu;  /* guards starting the subscribers */
    struct redis_subscriber *subscribers[REDLOCK_MAX_SERVERS]; /* started at the first wait */
};

struct redlock_lock {
    struct redis_lock_keys k;   /* the redis backend's keys, on every master */
    int notify_fd;              /* eventfd + 1 the masters' messages signal; 0 when not subscribed */
    char *channel;              /* the owner's own channel, while subscribed */
    size_t channel_len;
    bool subscribed[REDLOCK_MAX_SERVERS];
    bool registered;            /* a busy answer may have queued the owner on a master */
    uint64_t gathered;          /* a parked wait: the masters' messages so far */
};

static const struct dlock_setting_spec redlock_settings[] = {
    { "servers", DLOCK_SETTING_STRING_LIST, 0, 0 },
    { "user", DLOCK_SETTING_STRING, 0, 0 },
    { "password", DLOCK_SETTING_STRING, 0, 0 },
    { "prefix", DLOCK_SETTING_STRING, 0, 0 },
    { "connect_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "server_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "pool_size", DLOCK_SETTING_INT, 1, REDIS_POOL_MAX },
    { NULL, 0, 0, 0 },
};

/* ---- keys ------------------------------------------------------------------------- */

static int ensure_keys(struct redlock_instance *inst, struct dlock_provider_lock *lk)
{
    struct redlock_lock *rl = lk->priv;
    return rl->k.key ? DLOCK_OK : redis_lock_keys_init(&rl->k, inst->prefix, lk->name, lk->name_len);
}

/* ---- one script on every master at once ---------------------------------------------- */

struct call {
    int nkeys, nargs;
    const char **args;
    const size_t *lens;
};

/* Whether the next reply on c can be read before deadline. The answers
 * are read one master after another, each read with the connection's own
 * timeout: a slow master would push the next one's wait past the round's
 * timeout, and a late grant would count. So once the round is well into
 * its timeout, the rest wait only until its end (a poll before the read);
 * before that, the read's own timeout is the same bound and costs no
 * system call. */
static bool answer_in_time(redisContext *c, int64_t deadline, int64_t timeout_ms)
{
    int64_t left = deadline - dlock_provider_now_ms();
    if (left >= timeout_ms - 2)
        return true;
    struct pollfd p = { .fd = c->fd, .events = POLLIN };
    return poll(&p, 1, left > 0 ? (int)left : 0) == 1;
}

/* Runs script `which` on the masters whose only[i] is true (all when only is
 * NULL): sends it to each, then reads each answer, so the whole costs about
 * the slowest master's round trip. replies[i] is NULL for a master that did
 * not answer (or was not asked) and an error reply is dropped too. Returns
 * how many answered. */
static int fan_out(struct redlock_instance *inst, enum redis_script which, const struct call *call,
                   const bool *only, redisReply **replies)
{
    struct redis_evalsha e;
    if (redis_evalsha_build(&e, &inst->scripts, which, call->nkeys, call->nargs, call->args, call->lens) != DLOCK_OK) {
        for (int i = 0; i < inst->n; i++)
            replies[i] = NULL;
        return 0;
    }
    const char *sha = e.sha;
    redisContext *ctx[REDLOCK_MAX_SERVERS] = { 0 };
    for (int i = 0; i < inst->n; i++) {
        replies[i] = NULL;
        if ((only && !only[i]) || redis_pool_get(&inst->pools[i], &ctx[i]) != DLOCK_OK) {
            ctx[i] = NULL;
            continue;
        }
        int done = sha[0] ? 0 : 1; /* not loaded anywhere yet: the slow path below loads it */
        if (sha[0] && redisAppendCommandArgv(ctx[i], e.argc, e.argv, e.lens) == REDIS_OK) {
            while (!done && redisBufferWrite(ctx[i], &done) == REDIS_OK)
                ;
        }
        if (!done || !sha[0]) {
            redis_pool_put(&inst->pools[i], ctx[i]);
            ctx[i] = NULL;
            if (!sha[0]) { /* first use: run it the slow way, which loads it */
                int rc;
                replies[i] = redis_script_run(&inst->pools[i], &inst->scripts, which, call->nkeys, call->nargs,
                                              call->args, call->lens, &rc);
            }
        }
    }
    int answered = 0;
    int64_t deadline = dlock_provider_now_ms() + inst->pools[0].server.command_timeout_ms;
    for (int i = 0; i < inst->n; i++) {
        if (ctx[i]) {
            redisReply *r = NULL;
            if (!answer_in_time(ctx[i], deadline, inst->pools[0].server.command_timeout_ms) ||
                redisGetReply(ctx[i], (void **)&r) != REDIS_OK) {
                if (r)
                    freeReplyObject(r);
                r = NULL;
                /* The reply may still come: the connection is of no more
                 * use (the pool closes a broken one). */
                if (!ctx[i]->err)
                    ctx[i]->err = REDIS_ERR_OTHER;
            }
            redis_pool_put(&inst->pools[i], ctx[i]);
            if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
                /* This master lost its scripts (restart, SCRIPT FLUSH). */
                freeReplyObject(r);
                int rc;
                r = redis_script_run(&inst->pools[i], &inst->scripts, which, call->nkeys, call->nargs, call->args,
                                     call->lens, &rc);
            }
            if (r && r->type == REDIS_REPLY_ERROR) {
                dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN, "%s: %s", inst->pools[i].server.label, r->str);
                freeReplyObject(r);
                r = NULL;
            }
            replies[i] = r;
        }
        answered += replies[i] != NULL;
    }
    redis_evalsha_free(&e);
    return answered;
}

static void free_replies(struct redlock_instance *inst, redisReply **replies)
{
    for (int i = 0; i < inst->n; i++)
        if (replies[i])
            freeReplyObject(replies[i]);
}

static bool int_pair(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
           r->element[1]->type == REDIS_REPLY_INTEGER;
}

/* Releases lk on every master (or those in only): undoing a failed attempt,
 * or a release. Returns how many held it. */
static int release_everywhere(struct redlock_instance *inst, struct dlock_provider_lock *lk, const bool *only)
{
    struct redlock_lock *rl = lk->priv;
    char lease[24];
    int lease_len = snprintf(lease, sizeof lease, "%lld", (long long)lk->lease_ms);
    const char *args[7] = { rl->k.key, rl->k.queue_key, rl->k.timeouts_key, lk->owner, rl->k.channel_prefix, lease,
                            "publish" };
    size_t lens[7] = { rl->k.key_len, rl->k.queue_key_len, rl->k.timeouts_key_len, strlen(lk->owner),
                       rl->k.channel_prefix_len, (size_t)lease_len, 7 };
    struct call call = { 3, 7, args, lens };
    redisReply *replies[REDLOCK_MAX_SERVERS];
    fan_out(inst, SCRIPT_RELEASE, &call, only, replies);
    int held = 0;
    for (int i = 0; i < inst->n; i++)
        held += replies[i] && replies[i]->type == REDIS_REPLY_INTEGER && replies[i]->integer >= 0;
    free_replies(inst, replies);
    return held;
}

static int no_quorum(struct redlock_instance *inst, int answered, const char *what)
{
    return dlock_seterr(DLOCK_ENOQUORUM,
                        "redlock: %s: only %d of %d masters answered, %d needed (are the others down? "
                        "server_timeout_ms too short?)",
                        what, answered, inst->n, inst->quorum);
}

/* ---- the provider ------------------------------------------------------------------------ */

/* ---- waiting ------------------------------------------------------------------------ */

/* Takes the owner out of the waiter queues of the masters whose only[i] is
 * true (all when only is NULL); a master where that makes a new head wakes
 * it. Errors are ignored: a place left behind times out. */
static void leave_queues(struct redlock_instance *inst, struct dlock_provider_lock *lk, const bool *only)
{
    struct redlock_lock *rl = lk->priv;
    const char *args[6] = { rl->k.key, rl->k.queue_key, rl->k.timeouts_key, lk->owner, rl->k.channel_prefix,
                            "publish" };
    size_t lens[6] = { rl->k.key_len, rl->k.queue_key_len, rl->k.timeouts_key_len, strlen(lk->owner),
                       rl->k.channel_prefix_len, 7 };
    struct call call = { 3, 6, args, lens };
    redisReply *replies[REDLOCK_MAX_SERVERS];
    fan_out(inst, SCRIPT_LEAVE, &call, only, replies);
    free_replies(inst, replies);
}

/* The subscribers, one per master, started once; DLOCK_OK when at least one runs. */
static int start_subscribers(struct redlock_instance *inst)
{
    int running = 0, rc = DLOCK_OK;
    pthread_mutex_lock(&inst->subscribers_mu);
    for (int i = 0; i < inst->n; i++) {
        if (!inst->subscribers[i] &&
            redis_subscriber_start(&inst->subscribers[i], &inst->pools[i].server, false, inst->log_handle) != DLOCK_OK)
            rc = DLOCK_EUNAVAILABLE;
        running += inst->subscribers[i] != NULL;
    }
    pthread_mutex_unlock(&inst->subscribers_mu);
    return running > 0 ? DLOCK_OK : rc;
}

/* Subscribes the owner's channel on every master that confirms in time;
 * DLOCK_OK when at least one did (the others only cost their wake-ups). */
static int subscribe(struct redlock_instance *inst, struct dlock_provider_lock *lk)
{
    struct redlock_lock *rl = lk->priv;
    int rc = start_subscribers(inst);
    if (rc != DLOCK_OK)
        return rc;
    size_t owner_len = strlen(lk->owner);
    rl->channel_len = rl->k.channel_prefix_len + owner_len;
    rl->channel = malloc(rl->channel_len + 1);
    if (!rl->channel)
        return dlock_seterr(DLOCK_ENOMEM, "redlock: out of memory");
    memcpy(rl->channel, rl->k.channel_prefix, rl->k.channel_prefix_len);
    memcpy(rl->channel + rl->k.channel_prefix_len, lk->owner, owner_len + 1);
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
        free(rl->channel);
        rl->channel = NULL;
        return dlock_seterr(DLOCK_EUNAVAILABLE, "redlock: cannot create an eventfd: %s", strerror(errno));
    }
    int confirmed = 0;
    for (int i = 0; i < inst->n; i++) {
        rl->subscribed[i] = inst->subscribers[i] &&
                            redis_subscriber_add(inst->subscribers[i], rl->channel, rl->channel_len, fd,
                                                 inst->pools[i].server.command_timeout_ms) == DLOCK_OK;
        confirmed += rl->subscribed[i];
    }
    rl->notify_fd = fd + 1;
    if (confirmed == 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "redlock: no master confirmed the subscription to '%s''s "
                            "release messages", lk->name);
    return DLOCK_OK;
}

static void unsubscribe(struct redlock_instance *inst, struct redlock_lock *rl)
{
    if (!rl->notify_fd)
        return;
    for (int i = 0; i < inst->n; i++)
        if (rl->subscribed[i]) {
            redis_subscriber_remove(inst->subscribers[i], rl->channel, rl->channel_len, rl->notify_fd - 1);
            rl->subscribed[i] = false;
        }
    close(rl->notify_fd - 1);
    rl->notify_fd = 0;
    free(rl->channel);
    rl->channel = NULL;
}

/* Whether the subscription is to this owner's channel: another thread of
 * the client contends for the name under its own owner id. */
static bool subscribed_for(const struct redlock_lock *rl, const struct dlock_provider_lock *lk)
{
    size_t owner_len = strlen(lk->owner);
    return rl->channel_len == rl->k.channel_prefix_len + owner_len &&
           memcmp(rl->channel + rl->k.channel_prefix_len, lk->owner, owner_len) == 0;
}

static void drain_notifications(struct redlock_lock *rl)
{
    uint64_t v;
    if (rl->notify_fd)
        while (read(rl->notify_fd - 1, &v, sizeof v) > 0)
            ;
}

/* How long a waiter woken by fewer than a majority of masters' release
 * messages waits for the rest before it tries anyway, in ms. */
#define GATHER_MS 5

/* A release reaches the masters one by one, and each publishes on its own:
 * trying at the first message finds the others still held, a failed
 * attempt that is undone on every master, and another wait (about one per
 * master, six attempts per grant). So the waiter gathers messages until a
 * majority's have come, or GATHER_MS after the first: a master whose queue
 * has another waiter first, or whose subscriber is down, sends none. */
static int redlock_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    struct redlock_instance *inst = instance;
    struct redlock_lock *rl = lk->priv;
    int64_t deadline = dlock_provider_now_ms() + timeout_ms;
    uint64_t got = 0;
    int rc = redis_subscriber_wait(rl->notify_fd - 1, wake_fd, timeout_ms, "redlock", &got);
    if (rc != DLOCK_OK || got == 0)
        return rc; /* the timeout, or wake_fd: the core looks at it now */
    int64_t until = dlock_provider_now_ms() + GATHER_MS;
    if (until > deadline)
        until = deadline;
    while (got < (uint64_t)inst->quorum) {
        int64_t left = until - dlock_provider_now_ms();
        uint64_t more = 0;
        if (left <= 0)
            break;
        rc = redis_subscriber_wait(rl->notify_fd - 1, wake_fd, left, "redlock", &more);
        if (rc == DLOCK_ETIMEDOUT)
            break;
        if (rc != DLOCK_OK || more == 0)
            return rc; /* poll failed, or wake_fd */
        got += more;
    }
    return DLOCK_OK;
}

/* Parked on the subscriptions' eventfd, gathering as redlock_wait does: the
 * first message keeps the wait going for GATHER_MS at most, until a
 * majority's messages have come. */
static int redlock_wait_arm(void *instance, struct dlock_provider_lock *lk, int64_t *timeout_ms, int *fd)
{
    (void)instance;
    (void)timeout_ms;
    struct redlock_lock *rl = lk->priv;
    rl->gathered = 0;
    *fd = rl->notify_fd - 1;
    return DLOCK_OK;
}

static int redlock_wait_disarm(void *instance, struct dlock_provider_lock *lk, int fired, int64_t *timeout_ms)
{
    struct redlock_instance *inst = instance;
    struct redlock_lock *rl = lk->priv;
    uint64_t got = 0;
    int rc = redis_subscriber_disarm(rl->notify_fd - 1, fired, &got);
    bool first = rl->gathered == 0;
    rl->gathered += got;
    if (!fired)
        return rl->gathered > 0 ? DLOCK_OK : rc; /* the gathering time is over: look */
    if (got == 0 || rl->gathered >= (uint64_t)inst->quorum)
        return DLOCK_OK;
    if (first && *timeout_ms > GATHER_MS)
        *timeout_ms = GATHER_MS;
    return DLOCK_EBUSY;
}

static int attempt(struct redlock_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g);

static int redlock_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct redlock_instance *inst = instance;
    struct redlock_lock *rl = lk->priv;
    int rc = ensure_keys(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    if (rl->notify_fd && !subscribed_for(rl, lk))
        unsubscribe(inst, rl);
    /* A message from before this attempt says nothing about after it. */
    drain_notifications(rl);
    rc = attempt(inst, lk, g);
    if (rc == DLOCK_EBUSY && !rl->notify_fd) {
        /* Subscribe, then look again: a release between the busy answer and
         * the subscription would otherwise go unheard until the TTL. */
        if (subscribe(inst, lk) == DLOCK_OK)
            rc = attempt(inst, lk, g);
        else
            dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN, "%s; waiting on the holder's TTL instead",
                               dlock_errmsg());
    }
    /* Kept after a grant, as on the redis backend: a contended lock will
     * most likely be again. It goes with abandon or the handle. */
    return rc;
}

static int attempt(struct redlock_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct redlock_lock *rl = lk->priv;
    int64_t t0 = dlock_provider_now_ms();
    char lease[24], queue_timeout[24];
    int lease_len = snprintf(lease, sizeof lease, "%lld", (long long)lk->lease_ms);
    int qt_len = snprintf(queue_timeout, sizeof queue_timeout, "%lld", (long long)inst->waiter_timeout_ms);
    /* "1": the owner may be queued, and a master that grants takes it out.
     * FENCE_CLOCK_UNIT_US: the masters' clocks in the token, in 10 ms steps,
     * so that they agree and no raise round is due (redis_scripts.c). */
    const char *args[9] = { rl->k.key, rl->k.fence_key, rl->k.queue_key, rl->k.timeouts_key, lk->owner, lease,
                            queue_timeout, rl->registered ? "1" : "0", FENCE_CLOCK_UNIT_US };
    size_t lens[9] = { rl->k.key_len, rl->k.fence_key_len, rl->k.queue_key_len, rl->k.timeouts_key_len,
                       strlen(lk->owner), (size_t)lease_len, (size_t)qt_len, 1, sizeof FENCE_CLOCK_UNIT_US - 1 };
    struct call call = { 4, 9, args, lens };
    redisReply *replies[REDLOCK_MAX_SERVERS];
    int answered = fan_out(inst, SCRIPT_ACQUIRE, &call, NULL, replies);
    bool granted[REDLOCK_MAX_SERVERS] = { false }, busy[REDLOCK_MAX_SERVERS] = { false };
    long long counters[REDLOCK_MAX_SERVERS];
    int ngranted = 0;
    long long fence = 0, hint = -1;
    for (int i = 0; i < inst->n; i++) {
        if (!int_pair(replies[i]))
            continue;
        long long ok = replies[i]->element[0]->integer, value = replies[i]->element[1]->integer;
        if (ok == 1) {
            granted[i] = true;
            counters[i] = value;
            ngranted++;
            if (value > fence)
                fence = value;
        } else {
            busy[i] = true;
            if (hint < 0 || value < hint)
                hint = value;
        }
    }
    free_replies(inst, replies);
    if (answered > ngranted)
        rl->registered = true;
    /* Masters whose counter already reached the token: when they are a
     * majority (the usual case: counters move together), no raise is due. */
    int at_fence = 0;
    for (int i = 0; i < inst->n; i++)
        at_fence += granted[i] && counters[i] == fence;

    int64_t drift = dlock_provider_drift_ms(lk->lease_ms);
    if (ngranted >= inst->quorum) {
        /* A majority's counters must hold the token handed out, so that any
         * later majority sees it: raise them when they do not yet. */
        int raised = at_fence;
        if (at_fence < inst->quorum) {
            char value[24];
            int value_len = snprintf(value, sizeof value, "%lld", fence);
            const char *fargs[2] = { rl->k.fence_key, value };
            size_t flens[2] = { rl->k.fence_key_len, (size_t)value_len };
            struct call raise = { 1, 2, fargs, flens };
            raised = fan_out(inst, SCRIPT_FENCE_RAISE, &raise, NULL, replies);
            free_replies(inst, replies);
        }
        int64_t validity = lk->lease_ms - (dlock_provider_now_ms() - t0) - drift;
        if (raised >= inst->quorum && validity > 0) {
            g->fence = (uint64_t)fence;
            g->has_fence = 1;
            /* The masters that answered busy queued the owner: left there,
             * it would stay first in their queues and take the wake-ups
             * meant for the waiters behind it. */
            if (ngranted < answered)
                leave_queues(inst, lk, busy);
            rl->registered = false;
            return DLOCK_OK;
        }
        release_everywhere(inst, lk, NULL);
        if (raised < inst->quorum)
            return no_quorum(inst, raised, "raising the fence");
        /* Granted too late to be of use: as good as busy, try again. */
        g->retry_hint_ms = 0;
        return DLOCK_EBUSY;
    }
    /* Undo on every master that granted or did not answer in time: a reply
     * that timed out may still have been a grant, and left there it keeps
     * a majority taken for a whole lease with nobody holding it. The
     * release is owner-checked, so masters that did not grant are not
     * harmed. */
    if (ngranted > 0 || answered < inst->n)
        release_everywhere(inst, lk, NULL);
    if (answered < inst->quorum)
        return no_quorum(inst, answered, "acquire");
    g->retry_hint_ms = hint;
    return DLOCK_EBUSY;
}

static int redlock_release(void *instance, struct dlock_provider_lock *lk)
{
    struct redlock_instance *inst = instance;
    return release_everywhere(inst, lk, NULL) > 0 ? DLOCK_OK : DLOCK_ENOTOWNER;
}

static int redlock_renew(void *instance, struct dlock_provider_lock *lk)
{
    struct redlock_instance *inst = instance;
    struct redlock_lock *rl = lk->priv;
    int64_t t0 = dlock_provider_now_ms();
    char lease[24];
    int lease_len = snprintf(lease, sizeof lease, "%lld", (long long)lk->lease_ms);
    const char *args[3] = { rl->k.key, lk->owner, lease };
    size_t lens[3] = { rl->k.key_len, strlen(lk->owner), (size_t)lease_len };
    struct call call = { 1, 3, args, lens };
    redisReply *replies[REDLOCK_MAX_SERVERS];
    int answered = fan_out(inst, SCRIPT_RENEW, &call, NULL, replies);
    int renewed = 0;
    for (int i = 0; i < inst->n; i++)
        renewed += replies[i] && replies[i]->type == REDIS_REPLY_ARRAY && replies[i]->elements == 1 &&
                   replies[i]->element[0]->type == REDIS_REPLY_INTEGER && replies[i]->element[0]->integer == 1;
    free_replies(inst, replies);
    int64_t validity = lk->lease_ms - (dlock_provider_now_ms() - t0) - dlock_provider_drift_ms(lk->lease_ms);
    if (renewed >= inst->quorum && validity > 0)
        return DLOCK_OK;
    if (answered - renewed >= inst->n - inst->quorum + 1)
        /* A majority answered that it is not ours: whatever the others say,
         * no majority can hold it for us any more. */
        return dlock_seterr(DLOCK_ELOST, "redlock: '%s' is held by only %d of %d masters", lk->name, renewed,
                            inst->n);
    return no_quorum(inst, answered, "renew");
}

static void redlock_abandon(void *instance, struct dlock_provider_lock *lk)
{
    struct redlock_instance *inst = instance;
    struct redlock_lock *rl = lk->priv;
    if (!rl->k.key)
        return;
    /* A busy answer registered us as a waiter on each master: leave. */
    leave_queues(inst, lk, NULL);
    rl->registered = false;
    unsubscribe(inst, rl);
}

static void redlock_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    struct redlock_lock *rl = lk->priv;
    unsubscribe(instance, rl);
    redis_lock_keys_free(&rl->k);
}

static void redlock_close(void *instance)
{
    struct redlock_instance *inst = instance;
    for (int i = 0; i < inst->n; i++) {
        if (inst->subscribers[i])
            redis_subscriber_stop(inst->subscribers[i]);
        redis_pool_destroy(&inst->pools[i]);
    }
    pthread_mutex_destroy(&inst->subscribers_mu);
    redis_scripts_destroy(&inst->scripts);
    free(inst);
}

/* "host:port" into srv; false when it is not that. */
static bool parse_server(const char *text, struct redis_server *srv)
{
    if (!host_port_split(text, srv->host, sizeof srv->host, &srv->port))
        return false;
    snprintf(srv->label, sizeof srv->label, "redlock master %s", text);
    return true;
}

static int redlock_open(void **instance, const struct dlock_provider_env *env)
{
    const dlock_settings *s = env->settings;
    struct redlock_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "redlock: out of memory");
    size_t n = dlock_settings_list_count(s, "servers");
    const char *prefix = env->prefix, *user = "", *password = "";
    int64_t connect_timeout = 200, server_timeout = 100, pool_size = 4;
    dlock_settings_string(s, "prefix", &prefix);
    dlock_settings_string(s, "user", &user);
    dlock_settings_string(s, "password", &password);
    dlock_settings_int(s, "connect_timeout_ms", &connect_timeout);
    dlock_settings_int(s, "server_timeout_ms", &server_timeout);
    dlock_settings_int(s, "pool_size", &pool_size);
    int rc = DLOCK_OK;
    if (n < 3 || n > REDLOCK_MAX_SERVERS)
        rc = dlock_seterr(DLOCK_ECONFIG, "%s: redlock.servers must list 3 to %d independent masters (5 is usual)",
                          dlock_settings_where(s, n ? "servers" : NULL), REDLOCK_MAX_SERVERS);
    else if (strlen(prefix) >= sizeof inst->prefix || strpbrk(prefix, "{} "))
        rc = dlock_seterr(DLOCK_ECONFIG, "%s: redlock.prefix must be at most 64 bytes without spaces or braces",
                          dlock_settings_where(s, "prefix"));
    if (rc != DLOCK_OK) {
        free(inst);
        return rc;
    }
    redis_scripts_init(&inst->scripts);
    pthread_mutex_init(&inst->subscribers_mu, NULL);
    for (size_t i = 0; i < n && rc == DLOCK_OK; i++) {
        struct redis_server srv;
        memset(&srv, 0, sizeof srv);
        const char *item = dlock_settings_list_item(s, "servers", i);
        if (!parse_server(item, &srv)) {
            rc = dlock_seterr(DLOCK_ECONFIG, "%s: redlock.servers: \"%s\" is not \"host:port\"",
                              dlock_settings_where(s, "servers"), item);
            break;
        }
        snprintf(srv.user, sizeof srv.user, "%s", user);
        snprintf(srv.password, sizeof srv.password, "%s", password);
        srv.connect_timeout_ms = connect_timeout;
        srv.command_timeout_ms = server_timeout;
        redis_pool_init(&inst->pools[i], &srv, (int)pool_size);
        inst->n = (int)i + 1;
    }
    if (rc != DLOCK_OK) {
        redlock_close(inst);
        return rc;
    }
    inst->quorum = inst->n / 2 + 1;
    inst->waiter_timeout_ms = 5000;
    inst->log_handle = env->log_handle;
    snprintf(inst->prefix, sizeof inst->prefix, "%s", prefix);
    /* Load the scripts where we can; a majority must be reachable now, or
     * the configuration (or the deployment) is wrong. */
    int loaded = 0;
    for (int i = 0; i < inst->n; i++) {
        if (redis_scripts_preload(&inst->pools[i], &inst->scripts) == DLOCK_OK)
            loaded++;
        else
            dlock_provider_log(env->log_handle, DLOCK_LOG_WARN, "%s", dlock_errmsg());
    }
    if (loaded < inst->quorum) {
        rc = no_quorum(inst, loaded, "open");
        redlock_close(inst);
        return rc;
    }
    *instance = inst;
    return DLOCK_OK;
}

static int redlock_list(void *instance, struct dlock_provider_list *req)
{
    struct redlock_instance *inst = instance;
    struct redis_pool *pools[REDLOCK_MAX_SERVERS];
    for (int i = 0; i < inst->n; i++)
        pools[i] = &inst->pools[i];
    return redis_multi_list_page(pools, inst->n, inst->quorum, inst->prefix, inst->log_handle, req);
}

/* The break script on every master at once: the hold goes wherever it is,
 * and every counter the next majority can meet moves past the tokens. A
 * quorum must answer, or a majority could still hold it. */
static int redlock_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    struct redlock_instance *inst = instance;
    struct redis_lock_keys k = { 0 };
    int rc = redis_lock_keys_init(&k, inst->prefix, name, name_len);
    if (rc != DLOCK_OK)
        return rc;
    const char *args[9];
    size_t lens[9];
    redis_break_args(&k, "publish", args, lens);
    struct call call = { 5, 9, args, lens };
    redisReply *replies[REDLOCK_MAX_SERVERS];
    int answered = fan_out(inst, SCRIPT_BREAK, &call, NULL, replies);
    *broken = 0;
    *fence = 0;
    for (int i = 0; i < inst->n; i++)
        if (int_pair(replies[i])) {
            *broken |= replies[i]->element[0]->integer == 1;
            if ((uint64_t)replies[i]->element[1]->integer > *fence)
                *fence = (uint64_t)replies[i]->element[1]->integer;
        }
    free_replies(inst, replies);
    redis_lock_keys_free(&k);
    if (answered < inst->quorum)
        return no_quorum(inst, answered, "break");
    return DLOCK_OK;
}

static const struct dlock_provider redlock_provider = {
    .version = DLOCK_PROVIDER_VERSION_5,
    .name = "redlock",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_SERVER_EXPIRY | DLOCK_CAP_MULTI_HOST |
                    DLOCK_CAP_NATIVE_WAIT,
    .lock_priv_size = sizeof(struct redlock_lock),
    .settings = redlock_settings,
    .open = redlock_open,
    .close = redlock_close,
    .acquire = redlock_acquire,
    .release = redlock_release,
    .renew = redlock_renew,
    .lock_fini = redlock_lock_fini,
    .abandon = redlock_abandon,
    .wait = redlock_wait,
    .list = redlock_list,
    .break_hold = redlock_break,
    .wait_arm = redlock_wait_arm,
    .wait_disarm = redlock_wait_disarm,
};

DLOCK_MODULE(redlock_provider)
