/* backends/redis/redis.c - the redis backend module (dlock_redis.so).
 *
 * A lock NAME is the hash <prefix>{NAME} (Redisson's layout: the field
 * "<client id>:<thread>" holds the reentry count, the hash carries the
 * lease as its TTL), with the fence counter <prefix>{NAME}:fence. Waiters
 * are listed in <prefix>{NAME}:queue with deadlines in :timeouts, and each
 * listens on its own channel <prefix>{NAME}:ch:<owner>. Braces and '%' in
 * NAME are written as %7B, %7D, %25, so the hash tag is always exactly the
 * name: every key of a lock is in one Cluster slot, and no name can pin or
 * split a slot.
 *
 * One attempt is one EVALSHA. A busy answer registers the owner as a waiter;
 * a release wakes only the first live waiter (no herd: with N processes
 * waiting, one retries, not N). In fair mode only that waiter may take the
 * lock; otherwise anyone may (barging), and the woken waiter stays first.
 * Waiting uses the client's one subscriber connection: after the first busy
 * answer the lock subscribes to its channel, and only once the server has
 * confirmed does it try again, so a release between the two is never missed.
 * A waiter retries at the latest after the holder's TTL or half the waiter
 * timeout, which keeps its place and covers a lost message.
 *
 * Shared holds and permits use the same hash, with its field "" (never an
 * owner id) saying the kind ("s", or "p<N>" for N permits), and each holder
 * in <prefix>{NAME}:holders scored by its expiry on the server's clock; the
 * hash lives as long as the latest holder, so an exclusive request needs
 * no change to see them. They wait in the same queue: a queue entry with a
 * '/' in it is a shared or permit waiter (see dlock_provider_lock.owner). */
#include "config.h"

#include "../common/lock_kind.h"
#include "redis_backend.h"

#include <dlock/provider.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static const struct dlock_setting_spec redis_settings[] = {
    { "host", DLOCK_SETTING_STRING, 0, 0 },
    { "port", DLOCK_SETTING_INT, 1, 65535 },
    { "socket", DLOCK_SETTING_STRING, 0, 0 },
    { "user", DLOCK_SETTING_STRING, 0, 0 },
    { "password", DLOCK_SETTING_STRING, 0, 0 },
    { "db", DLOCK_SETTING_INT, 0, 100000 },
    { "prefix", DLOCK_SETTING_STRING, 0, 0 },
    { "connect_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "command_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "pool_size", DLOCK_SETTING_INT, 1, REDIS_POOL_MAX },
    { "waiter_timeout_ms", DLOCK_SETTING_INT, 100, 600000 },
    { "sentinels", DLOCK_SETTING_STRING_LIST, 0, 0 },
    { "master", DLOCK_SETTING_STRING, 0, 0 },
    { "wait_replicas", DLOCK_SETTING_INT, 0, 16 },
    { "wait_timeout_ms", DLOCK_SETTING_INT, 1, 60000 },
    { "cluster", DLOCK_SETTING_STRING_LIST, 0, 0 },
    { "allow_eviction", DLOCK_SETTING_BOOL, 0, 0 },
    { "sentinel_password", DLOCK_SETTING_STRING, 0, 0 },
    { NULL, 0, 0, 0 },
};

/* ---- keys ------------------------------------------------------------------- */

static bool is_fair(const struct dlock_provider_lock *lk)
{
    return (lk->flags & DLOCK_LOCK_FAIR) != 0;
}

static int ensure_keys(struct redis_instance *inst, struct dlock_provider_lock *lk)
{
    struct redis_lock *rl = lk->priv;
    return rl->k.key ? DLOCK_OK : redis_lock_keys_init(&rl->k, inst->prefix, lk->name, lk->name_len);
}

/* ---- subscription ---------------------------------------------------------------- */

/* Subscribes to the owner's own channel of the lock, on which a release
 * announces that it is this waiter's turn to try. */
static int subscribe(struct redis_instance *inst, struct dlock_provider_lock *lk)
{
    struct redis_lock *rl = lk->priv;
    size_t owner_len = strlen(lk->owner);
    size_t len = rl->k.channel_prefix_len + owner_len;
    char *channel = malloc(len + 1);
    if (!channel)
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory");
    memcpy(channel, rl->k.channel_prefix, rl->k.channel_prefix_len);
    memcpy(channel + rl->k.channel_prefix_len, lk->owner, owner_len + 1);
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
        free(channel);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "redis: cannot create an eventfd: %s", strerror(errno));
    }
    int rc = inst->route->subscribe(inst, channel, len, fd, &rl->sub);
    if (rc != DLOCK_OK) {
        close(fd);
        free(channel);
        return rc;
    }
    rl->notify_fd = fd + 1;
    rl->sub_channel = channel;
    rl->sub_channel_len = len;
    return DLOCK_OK;
}

static void unsubscribe(struct redis_lock *rl)
{
    if (!rl->notify_fd)
        return;
    redis_subscriber_remove(rl->sub, rl->sub_channel, rl->sub_channel_len, rl->notify_fd - 1);
    close(rl->notify_fd - 1);
    rl->notify_fd = 0;
    free(rl->sub_channel);
    rl->sub_channel = NULL;
}

/* ---- instance --------------------------------------------------------------------- */

static int redis_open(void **instance, const struct dlock_provider_env *env)
{
    struct redis_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory");
    struct redis_server srv;
    int rc = redis_server_from_settings(&srv, env->settings);
    if (rc == DLOCK_OK)
        redis_cap_command_timeout(&srv, env);
    const char *prefix = env->prefix;
    dlock_settings_string(env->settings, "prefix", &prefix);
    if (rc == DLOCK_OK && (strlen(prefix) >= sizeof inst->prefix || !redis_valid_prefix(prefix)))
        rc = dlock_seterr(DLOCK_ECONFIG, "%s: redis.prefix must be at most 64 bytes without spaces or braces",
                          dlock_settings_where(env->settings, "prefix"));
    int64_t pool_size = 8;
    dlock_settings_int(env->settings, "pool_size", &pool_size);
    inst->waiter_timeout_ms = 5000;
    dlock_settings_int(env->settings, "waiter_timeout_ms", &inst->waiter_timeout_ms);
    inst->wait_timeout_ms = 100;
    dlock_settings_int(env->settings, "wait_replicas", &inst->wait_replicas);
    dlock_settings_int(env->settings, "wait_timeout_ms", &inst->wait_timeout_ms);
    char seeds[REDIS_CLUSTER_MAX_SEEDS][128];
    int nseeds = rc == DLOCK_OK ? redis_cluster_seeds_from_settings(env->settings, &srv, seeds, &rc) : 0;
    if (rc != DLOCK_OK) {
        free(inst);
        return rc;
    }
    snprintf(inst->prefix, sizeof inst->prefix, "%s", prefix);
    inst->log_handle = env->log_handle;
    inst->wanted = env->wanted;
    inst->publish = "publish";
    inst->route = nseeds > 0 ? &redis_cluster_route : &redis_single_route;
    redis_pool_init(&inst->pool, &srv, (int)pool_size);
    redis_scripts_init(&inst->scripts);

    if (nseeds > 0) {
        /* A cluster: the map is read (and every node's AUTH checked on
         * first use) now; waiters subscribe on each slot's node. */
        rc = redis_cluster_open(&inst->cluster, &srv, seeds, nseeds, (int)pool_size, env->log_handle);
        if (rc == DLOCK_OK && redis_cluster_sharded_pubsub(inst->cluster))
            inst->publish = "spublish";
        if (rc != DLOCK_OK) {
            redis_scripts_destroy(&inst->scripts);
            redis_pool_destroy(&inst->pool);
            free(inst);
            return rc;
        }
        dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "%s: slot map read, key prefix '%s'",
                           redis_cluster_label(inst->cluster), inst->prefix);
        *instance = inst;
        return DLOCK_OK;
    }

    /* Connect and PING now, so a wrong address or a missing password is
     * reported at open, in the server's own words, not at the first lock. */
    const char *ping[1] = { "PING" };
    redisReply *r = redis_pool_command(&inst->pool, 1, ping, NULL, &rc);
    if (r) {
        if (r->type == REDIS_REPLY_ERROR)
            rc = dlock_seterr(strncmp(r->str, "NOAUTH", 6) == 0 ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE,
                              "%s: PING refused: %s%s", srv.label, r->str,
                              strncmp(r->str, "NOAUTH", 6) == 0 ? " (set redis.password)" : "");
        freeReplyObject(r);
    }
    if (rc == DLOCK_OK)
        rc = redis_check_version(&inst->pool);
    if (rc == DLOCK_OK)
        rc = redis_check_eviction(&inst->pool, env);
    if (rc == DLOCK_OK)
        rc = redis_subscriber_start(&inst->subscriber, &srv, false, env->log_handle);
    if (rc != DLOCK_OK) {
        redis_scripts_destroy(&inst->scripts);
        redis_pool_destroy(&inst->pool);
        free(inst);
        return rc;
    }
    dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "%s: connected, key prefix '%s'", srv.label, inst->prefix);
    *instance = inst;
    return DLOCK_OK;
}

static void redis_close(void *instance)
{
    struct redis_instance *inst = instance;
    redis_subscriber_stop(inst->subscriber);
    redis_cluster_close(inst->cluster);
    redis_scripts_destroy(&inst->scripts);
    redis_pool_destroy(&inst->pool);
    free(inst);
}

/* ---- operations --------------------------------------------------------------------- */

/* The acquire script and WAIT in one pipeline, on one connection (WAIT
 * counts the replicas that have that connection's writes). *acked gets
 * WAIT's answer. Returns the script's reply, or NULL with *rc. */
static redisReply *acquire_and_wait(struct redis_instance *inst, enum redis_script which, int nkeys, int nargs,
                                    const char **args, const size_t *lens, long long *acked, int *rc)
{
    char replicas[24], timeout[24];
    snprintf(replicas, sizeof replicas, "%lld", (long long)inst->wait_replicas);
    snprintf(timeout, sizeof timeout, "%lld", (long long)inst->wait_timeout_ms);
    for (int attempt = 0; attempt < 2; attempt++) {
        struct redis_evalsha e;
        if ((*rc = redis_evalsha_build(&e, &inst->scripts, which, nkeys, nargs, args, lens)) != DLOCK_OK)
            return NULL;
        if (!e.sha[0]) { /* not loaded yet: load, then build again with the SHA1 */
            redis_evalsha_free(&e);
            if ((*rc = inst->route->preload(inst, args[0], lens[0])) != DLOCK_OK)
                return NULL;
            if ((*rc = redis_evalsha_build(&e, &inst->scripts, which, nkeys, nargs, args, lens)) != DLOCK_OK)
                return NULL;
        }
        const char *wait[3] = { "WAIT", replicas, timeout };
        size_t wait_lens[3] = { 4, strlen(replicas), strlen(timeout) };
        int argcs[2] = { e.argc, 3 };
        const char **argvs[2] = { e.argv, wait };
        const size_t *lenses[2] = { e.lens, wait_lens };
        redisReply *replies[2];
        *rc = inst->route->pipeline(inst, args[0], lens[0], 2, argcs, argvs, lenses, replies);
        redis_evalsha_free(&e);
        if (*rc != DLOCK_OK)
            return NULL;
        *acked = replies[1]->type == REDIS_REPLY_INTEGER ? replies[1]->integer : -1;
        freeReplyObject(replies[1]);
        redisReply *r = replies[0];
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 && attempt == 0) {
            freeReplyObject(r);
            if ((*rc = inst->route->preload(inst, args[0], lens[0])) != DLOCK_OK)
                return NULL;
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            *rc = redis_script_error(inst->route->label(inst), r->str);
            freeReplyObject(r);
            return NULL;
        }
        return r;
    }
    return NULL;
}

/* Runs one of the lock's scripts whose answer is an integer, into *out. */
static int script_integer(struct redis_instance *inst, enum redis_script which, int nkeys, int nargs, const char **args,
                          const size_t *lens, const char *what, long long *out)
{
    int rc;
    redisReply *r = inst->route->script(inst, which, nkeys, nargs, args, lens, &rc, NULL);
    if (!r)
        return rc;
    rc = r->type == REDIS_REPLY_INTEGER ? DLOCK_OK : redis_unexpected(inst, what);
    *out = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    return rc;
}

static int redis_release(void *instance, struct dlock_provider_lock *lk);

void redis_attempt_args(struct redis_instance *inst, struct dlock_provider_lock *lk, struct redis_attempt_args *a)
{
    struct redis_lock *rl = lk->priv;
    int lease_len = snprintf(a->lease, sizeof a->lease, "%lld", (long long)lk->lease_ms);
    int qt_len = snprintf(a->queue_timeout, sizeof a->queue_timeout, "%lld", (long long)inst->waiter_timeout_ms);
    const char *registered = rl->registered ? "1" : "0";
    bool shared = kind_is_shared(lk);
    unsigned limit = lk->mode == DLOCK_MODE_SEMAPHORE ? lk->permits : 0;
    int kind_len = limit ? snprintf(a->kind, sizeof a->kind, "p%u", limit) : snprintf(a->kind, sizeof a->kind, "s");
    int permits_len = snprintf(a->permits, sizeof a->permits, "%u", limit);
    a->nkeys = 4;
    a->nargs = 0;
    a->which = is_fair(lk) ? SCRIPT_ACQUIRE_FAIR : SCRIPT_ACQUIRE;
#define ARG(text, len) (a->args[a->nargs] = (text), a->lens[a->nargs++] = (size_t)(len))
    ARG(rl->k.key, rl->k.key_len);
    ARG(rl->k.fence_key, rl->k.fence_key_len);
    ARG(rl->k.queue_key, rl->k.queue_key_len);
    ARG(rl->k.timeouts_key, rl->k.timeouts_key_len);
    if (shared) {
        a->which = SCRIPT_ACQUIRE_SHARED;
        a->nkeys = 5;
        ARG(rl->k.holders_key, rl->k.holders_key_len);
    }
    ARG(lk->owner, strlen(lk->owner));
    ARG(a->lease, lease_len);
    ARG(a->queue_timeout, qt_len);
    if (shared || !is_fair(lk))
        ARG(registered, 1);
    if (!shared && inst->subscriber && !is_fair(lk))
        ARG("1", 1); /* the fence's clock unit, as when left out */
    if (shared) {
        ARG(a->kind, kind_len);
        ARG(a->permits, permits_len);
        ARG(rl->k.channel_prefix, rl->k.channel_prefix_len);
        ARG(inst->publish, strlen(inst->publish));
    }
    if (inst->subscriber) {
        /* A busy answer tells an exclusive holder that keeps released
         * holds that someone asks (where one subscriber serves the whole
         * server). */
        ARG(rl->k.wanted_prefix, rl->k.wanted_prefix_len);
        ARG(inst->publish, strlen(inst->publish));
    }
#undef ARG
}

int redis_attempt_answer(struct redis_instance *inst, struct dlock_provider_lock *lk, redisReply *r, long long acked,
                         struct dlock_grant *g)
{
    struct redis_lock *rl = lk->priv;
    if (!redis_is_int_array(r, 2)) {
        freeReplyObject(r);
        return redis_unexpected(inst, "acquire");
    }
    long long granted = r->element[0]->integer, value = r->element[1]->integer;
    /* A grant's third element: whether others are queued for the name. */
    int others_waiting = r->elements >= 3 && r->element[2]->type == REDIS_REPLY_INTEGER && r->element[2]->integer > 0;
    freeReplyObject(r);
    if (granted == 2)
        return kind_mismatch(inst->route->label(inst), lk, (unsigned long long)value); /* {2, permits} */
    rl->registered = !granted; /* a busy answer put us in the queue; a grant took us out */
    if (granted && inst->wait_replicas > 0 && acked < inst->wait_replicas) {
        /* A failover now could promote a replica without this grant and hand
         * the lock to someone else: give it back rather than hold it so. */
        redis_release(inst, lk);
        return dlock_seterr(DLOCK_EUNAVAILABLE,
                            "%s: granted, but only %lld of the %lld replicas (redis.wait_replicas) confirmed it "
                            "within %lld ms: given back",
                            inst->route->label(inst), acked < 0 ? 0 : acked, (long long)inst->wait_replicas,
                            (long long)inst->wait_timeout_ms);
    }
    if (granted) {
        g->fence = (uint64_t)value;
        g->has_fence = 1;
        g->others_waiting = others_waiting;
        return DLOCK_OK;
    }
    /* The holder's TTL, capped so that the waiter keeps its place. */
    g->retry_hint_ms = value;
    return DLOCK_EBUSY;
}

/* One run of the acquire script: DLOCK_OK (granted), DLOCK_EBUSY, or a failure. */
static int attempt(struct redis_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct redis_attempt_args a;
    redis_attempt_args(inst, lk, &a);
    int rc;
    long long acked = -1;
    g->retry_hint_ms = -1; /* set again only by a busy answer or a passing cluster state */
    redisReply *r = inst->wait_replicas > 0
                        ? acquire_and_wait(inst, a.which, a.nkeys, a.nargs, a.args, a.lens, &acked, &rc)
                        : inst->route->script(inst, a.which, a.nkeys, a.nargs, a.args, a.lens, &rc,
                                              &g->retry_hint_ms);
    if (!r)
        return rc;
    return redis_attempt_answer(inst, lk, r, acked, g);
}

/* True when rl is subscribed to the channel of lk's current owner (which
 * changes with the contending thread). */
static bool subscribed_for(const struct redis_lock *rl, const struct dlock_provider_lock *lk)
{
    if (!rl->notify_fd)
        return false;
    size_t owner_len = strlen(lk->owner);
    return rl->sub_channel_len == rl->k.channel_prefix_len + owner_len &&
           memcmp(rl->sub_channel, rl->k.channel_prefix, rl->k.channel_prefix_len) == 0 &&
           memcmp(rl->sub_channel + rl->k.channel_prefix_len, lk->owner, owner_len) == 0;
}

static void drain_notifications(struct redis_lock *rl)
{
    uint64_t v;
    if (rl->notify_fd)
        while (read(rl->notify_fd - 1, &v, sizeof v) > 0)
            ;
}

int redis_attempt_prepare(struct redis_instance *inst, struct dlock_provider_lock *lk)
{
    struct redis_lock *rl = lk->priv;
    int rc = ensure_keys(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    if (rl->notify_fd && !subscribed_for(rl, lk))
        unsubscribe(rl);
    /* In a cluster the slot may have moved since (resharding, failover):
     * subscribe again on the node that serves it now. */
    if (rl->notify_fd && inst->route->moved(inst, rl))
        unsubscribe(rl);
    /* A message from before this attempt says nothing about after it; one
     * that arrives from now on will wake the wait. */
    drain_notifications(rl);
    return DLOCK_OK;
}

/* Subscribes for lk's turn after a busy answer; on failure the waiter
 * waits on the holder's TTL, said in the log. */
static int subscribe_after_busy(struct redis_instance *inst, struct dlock_provider_lock *lk)
{
    int rc = subscribe(inst, lk);
    if (rc != DLOCK_OK)
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                           "%s: cannot subscribe (%s); waiting on the holder's TTL instead",
                           inst->route->label(inst), dlock_errmsg());
    return rc;
}

static int redis_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    int rc = redis_attempt_prepare(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    rc = attempt(inst, lk, g);
    /* Subscribe, then look again: a release between the busy answer and
     * the subscription would otherwise go unheard until the TTL. */
    if (rc == DLOCK_EBUSY && !rl->notify_fd && subscribe_after_busy(inst, lk) == DLOCK_OK)
        rc = attempt(inst, lk, g);
    /* A subscription is kept after a grant: a lock that was contended will
     * most likely be again, and re-subscribing costs two round trips each
     * time. It goes when the waiter gives up (abandon) or the lock handle
     * is freed (lock_fini). */
    return rc;
}

void redis_release_args(struct redis_instance *inst, struct dlock_provider_lock *lk, struct redis_release_args *a)
{
    struct redis_lock *rl = lk->priv;
    a->nargs = 0;
#define ARG(text, len) (a->args[a->nargs] = (text), a->lens[a->nargs++] = (size_t)(len))
    ARG(rl->k.key, rl->k.key_len);
    ARG(rl->k.queue_key, rl->k.queue_key_len);
    ARG(rl->k.timeouts_key, rl->k.timeouts_key_len);
    if (kind_is_shared(lk)) {
        int permits_len = snprintf(a->number, sizeof a->number, "%u",
                                   lk->mode == DLOCK_MODE_SEMAPHORE ? lk->permits : 0);
        a->which = SCRIPT_RELEASE_SHARED;
        a->nkeys = 4;
        ARG(rl->k.holders_key, rl->k.holders_key_len);
        ARG(lk->owner, strlen(lk->owner));
        ARG(rl->k.channel_prefix, rl->k.channel_prefix_len);
        ARG(inst->publish, strlen(inst->publish));
        ARG(a->number, permits_len);
    } else {
        int lease_len = snprintf(a->number, sizeof a->number, "%lld", (long long)lk->lease_ms);
        a->which = SCRIPT_RELEASE;
        a->nkeys = 3;
        ARG(lk->owner, strlen(lk->owner));
        ARG(rl->k.channel_prefix, rl->k.channel_prefix_len);
        ARG(a->number, lease_len);
        ARG(inst->publish, strlen(inst->publish));
    }
#undef ARG
}

static int redis_release(void *instance, struct dlock_provider_lock *lk)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    /* Sent before on a connection that died with it in flight (release_recv). */
    bool sent_before = rl->release_sent_before;
    rl->release_sent_before = false;
    struct redis_release_args a;
    redis_release_args(inst, lk, &a);
    long long left;
    int rc = script_integer(inst, a.which, a.nkeys, a.nargs, a.args, a.lens, "release", &left);
    if (rc != DLOCK_OK)
        return rc;
    redis_value_released(inst, lk);
    /* Sent twice because the connection died with the first in flight: a
     * hold already gone is the first release's work, not a loss. (Only our
     * own field is ever deleted, so nobody else's hold was touched.) */
    if (left < 0 && (sent_before || inst->route->resent()))
        return DLOCK_OK;
    return left < 0 ? DLOCK_ENOTOWNER : DLOCK_OK;
}

static int renew_one_kind(void *ctx, bool shared, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    struct redis_instance *inst = ctx;
    return inst->route->renew(inst, shared, locks, n, results);
}

static int redis_list(void *instance, struct dlock_provider_list *req)
{
    struct redis_instance *inst = instance;
    return inst->route->list(inst, req);
}

/* Exclusive holds in one script; shared holds and permits, if any, in a
 * second. */
static int redis_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    return renew_by_kind(instance, renew_one_kind, locks, n, results);
}

static int redis_renew(void *instance, struct dlock_provider_lock *lk)
{
    struct dlock_provider_lock *one[1] = { lk };
    int result;
    int rc = redis_renew_batch(instance, one, 1, &result);
    return rc == DLOCK_OK ? result : rc;
}

static int redis_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    (void)instance;
    struct redis_lock *rl = lk->priv;
    /* Not subscribed (the subscriber is down): the timeout is the holder's
     * TTL, or retry_cap_ms, and the core retries after it. */
    return redis_subscriber_wait(rl->notify_fd - 1, wake_fd, timeout_ms, "redis", NULL);
}

/* Parked on the subscription's eventfd; not subscribed, on the timeout
 * alone, as redis_wait. A busy answer read by acquire_recv left the
 * subscription to here: it is made now, and the eventfd signalled so that
 * the core looks again at once, as acquire does after subscribing (a
 * release between the answer and the subscription went unheard). */
static int redis_wait_arm(void *instance, struct dlock_provider_lock *lk, int64_t *timeout_ms, int *fd)
{
    struct redis_instance *inst = instance;
    (void)timeout_ms;
    struct redis_lock *rl = lk->priv;
    if (!rl->notify_fd && rl->k.key && subscribe_after_busy(inst, lk) == DLOCK_OK) {
        uint64_t one = 1;
        if (write(rl->notify_fd - 1, &one, sizeof one) != (ssize_t)sizeof one)
            return dlock_seterr(DLOCK_EUNAVAILABLE, "redis: cannot signal an eventfd: %s", strerror(errno));
    }
    *fd = rl->notify_fd - 1;
    return DLOCK_OK;
}

static int redis_wait_disarm(void *instance, struct dlock_provider_lock *lk, int fired, int64_t *timeout_ms)
{
    (void)timeout_ms;
    (void)instance;
    struct redis_lock *rl = lk->priv;
    return redis_subscriber_disarm(rl->notify_fd - 1, fired, NULL);
}

static void redis_abandon(void *instance, struct dlock_provider_lock *lk)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    if (rl->registered && rl->k.key) {
        /* Out of the queue now, so the waiters behind do not wait for our
         * deadline to pass. */
        const char *args[6] = { rl->k.key, rl->k.queue_key, rl->k.timeouts_key, lk->owner, rl->k.channel_prefix,
                                inst->publish };
        size_t lens[6] = { rl->k.key_len, rl->k.queue_key_len, rl->k.timeouts_key_len, strlen(lk->owner),
                           rl->k.channel_prefix_len, strlen(inst->publish) };
        int rc;
        redisReply *r = inst->route->script(inst, SCRIPT_LEAVE, 3, 6, args, lens, &rc, NULL);
        if (r)
            freeReplyObject(r);
        rl->registered = false;
    }
    unsubscribe(rl);
}

/* A hold that may be kept after its release hears of every owner that
 * asks for its name: the busy answer's script publishes "wanted" on the
 * name's channel for this client (redis_script_text.c). The subscription
 * is confirmed before the hold may be kept (one round trip, at the name's
 * first such grant in the client: the watch lasts across its holds), so
 * that no owner asks unheard after the release. */
static int redis_watch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    if (!inst->subscriber || !inst->wanted || !rl->k.key)
        return dlock_seterr(DLOCK_ENOTSUP, "redis: holds are not kept on a cluster");
    const char *colon = strchr(lk->owner, ':');
    size_t id_len = colon ? (size_t)(colon - lk->owner) : strlen(lk->owner);
    size_t len = rl->k.wanted_prefix_len + id_len;
    char *channel = malloc(len + 1);
    if (!channel)
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for a channel name");
    memcpy(channel, rl->k.wanted_prefix, rl->k.wanted_prefix_len);
    memcpy(channel + rl->k.wanted_prefix_len, lk->owner, id_len);
    channel[len] = 0;
    int rc = redis_subscriber_watch(inst->subscriber, channel, len, inst->wanted, lk,
                                    inst->pool.server.command_timeout_ms);
    if (rc != DLOCK_OK) {
        free(channel);
        return rc;
    }
    free(rl->wanted_channel);
    rl->wanted_channel = channel;
    rl->wanted_channel_len = len;
    return DLOCK_OK;
}

static void redis_unwatch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    if (!rl->wanted_channel)
        return;
    redis_subscriber_unwatch(inst->subscriber, rl->wanted_channel, rl->wanted_channel_len, lk);
    free(rl->wanted_channel);
    rl->wanted_channel = NULL;
}

static void redis_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    struct redis_lock *rl = lk->priv;
    redis_unwatch_wanted(instance, lk);
    unsubscribe(rl);
    redis_lock_keys_free(&rl->k);
    memset(rl, 0, sizeof *rl);
}

/* Fills out from the lock hash's fields (HGETALL's array): an exclusive
 * holder's owner, or for a name held shared or as permits (the field ""
 * says which) how many hold it, from the holders set's size. */
static void status_holder(dlock_status_info *out, const redisReply *fields, const redisReply *holders)
{
    const char *kind = NULL;
    for (size_t i = 0; i + 1 < fields->elements; i += 2)
        if (fields->element[i]->type == REDIS_REPLY_STRING && fields->element[i]->len == 0 &&
            fields->element[i + 1]->type == REDIS_REPLY_STRING)
            kind = fields->element[i + 1]->str;
    long long n = holders->type == REDIS_REPLY_INTEGER ? holders->integer : 0;
    if (kind)
        kind_holders_text(out->holder, sizeof out->holder, n, kind[0] == 'p' ? strtoul(kind + 1, NULL, 10) : 0);
    else if (fields->element[0]->type == REDIS_REPLY_STRING)
        snprintf(out->holder, sizeof out->holder, "%s", fields->element[0]->str);
}

static int redis_status(struct redis_instance *inst, struct dlock_ctl_status *arg)
{
    size_t key_len, fence_len, holders_len;
    char *key = redis_key_for(inst->prefix, arg->name, arg->name_len, "", &key_len);
    char *fence = redis_key_for(inst->prefix, arg->name, arg->name_len, ":fence", &fence_len);
    char *holders = redis_key_for(inst->prefix, arg->name, arg->name_len, ":holders", &holders_len);
    int rc = DLOCK_OK;
    if (!key || !fence || !holders)
        rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory");
    const char *hgetall[2] = { "HGETALL", key }, *pttl[2] = { "PTTL", key }, *get[2] = { "GET", fence };
    const char *zcard[2] = { "ZCARD", holders };
    size_t l1[2] = { 7, key_len }, l2[2] = { 4, key_len }, l3[2] = { 3, fence_len }, l4[2] = { 5, holders_len };
    int argcs[4] = { 2, 2, 2, 2 };
    const char **argvs[4] = { hgetall, pttl, get, zcard };
    const size_t *lenses[4] = { l1, l2, l3, l4 };
    redisReply *r[4];
    if (rc == DLOCK_OK)
        rc = inst->route->pipeline(inst, key, key_len, 4, argcs, argvs, lenses, r);
    if (rc == DLOCK_OK) {
        dlock_status_info *out = arg->out;
        out->held = r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements >= 2;
        if (out->held)
            status_holder(out, r[0], r[3]);
        if (out->held && r[1]->type == REDIS_REPLY_INTEGER)
            out->ttl_ms = r[1]->integer;
        if (r[2]->type == REDIS_REPLY_STRING)
            out->fence = strtoull(r[2]->str, NULL, 10);
        for (int i = 0; i < 4; i++)
            freeReplyObject(r[i]);
    }
    free(key);
    free(fence);
    free(holders);
    return rc;
}

static int redis_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    struct redis_instance *inst = instance;
    struct redis_lock_keys k = { 0 };
    int rc = redis_lock_keys_init(&k, inst->prefix, name, name_len);
    if (rc != DLOCK_OK)
        return rc;
    const char *args[9];
    size_t lens[9];
    redis_break_args(&k, inst->publish, args, lens);
    redisReply *r = inst->route->script(inst, SCRIPT_BREAK, 5, 9, args, lens, &rc, NULL);
    if (r && !redis_is_int_array(r, 2))
        rc = redis_unexpected(inst, "break");
    if (rc == DLOCK_OK) {
        *broken = r->element[0]->integer == 1;
        *fence = (uint64_t)r->element[1]->integer;
    }
    if (r)
        freeReplyObject(r);
    redis_lock_keys_free(&k);
    return rc;
}

static int redis_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    int rc = ensure_keys(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    const char *args[8] = { rl->k.key, rl->k.fence_key, rl->k.queue_key, rl->k.timeouts_key, rl->k.holders_key,
                            lk->owner, rl->k.channel_prefix, inst->publish };
    size_t lens[8] = { rl->k.key_len, rl->k.fence_key_len, rl->k.queue_key_len, rl->k.timeouts_key_len,
                       rl->k.holders_key_len, strlen(lk->owner), rl->k.channel_prefix_len, strlen(inst->publish) };
    long long done;
    rc = script_integer(inst, SCRIPT_DOWNGRADE, 5, 8, args, lens, "downgrade", &done);
    if (rc != DLOCK_OK)
        return rc;
    if (!done)
        return dlock_seterr(DLOCK_ELOST, "%s: this owner no longer holds the lock (it expired or was broken): "
                            "nothing was downgraded", inst->route->label(inst));
    return DLOCK_OK;
}

static int redis_ctl(void *instance, int op, void *arg)
{
    struct redis_instance *inst = instance;
    if (op == DLOCK_CTL_STATUS)
        return redis_status(instance, arg);
    if (op == DLOCK_CTL_CAPABILITIES) {
        /* A cluster has a subscriber per node, which the holds' watches do
         * not use yet: it keeps no released holds. */
        if (!inst->subscriber)
            *(unsigned *)arg &= ~(unsigned)DLOCK_CAP_CACHE;
        return DLOCK_OK;
    }
    return DLOCK_ENOTSUP;
}

static const struct dlock_provider redis_provider = {
    .version = DLOCK_PROVIDER_VERSION_8,
    .name = "redis",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_NATIVE_WAIT | DLOCK_CAP_SERVER_EXPIRY |
                    DLOCK_CAP_MULTI_HOST | DLOCK_CAP_FAIR | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE |
                    DLOCK_CAP_DOWNGRADE | DLOCK_CAP_ELECTION | DLOCK_CAP_CACHE,
    .lock_priv_size = sizeof(struct redis_lock),
    .settings = redis_settings,
    .open = redis_open,
    .close = redis_close,
    .acquire = redis_acquire,
    .release = redis_release,
    .renew = redis_renew,
    .renew_batch = redis_renew_batch,
    .wait = redis_wait,
    .lock_fini = redis_lock_fini,
    .ctl = redis_ctl,
    .abandon = redis_abandon,
    .list = redis_list,
    .break_hold = redis_break,
    .downgrade = redis_downgrade,
    .wait_arm = redis_wait_arm,
    .wait_disarm = redis_wait_disarm,
    .value_put = redis_value_put,
    .leader_get = redis_leader_get,
    .watch_open = redis_watch_open,
    .watch_consume = redis_watch_consume,
    .watch_close = redis_watch_close,
    .acquire_send = redis_acquire_send,
    .acquire_recv = redis_acquire_recv,
    .acquire_drop = redis_acquire_drop,
    .release_send = redis_release_send,
    .release_recv = redis_release_recv,
    .release_drop = redis_release_drop,
    .watch_wanted = redis_watch_wanted,
    .unwatch_wanted = redis_unwatch_wanted,
};

DLOCK_MODULE(redis_provider)
