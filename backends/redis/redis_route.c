/* backends/redis/redis_route.c - the two routes of the redis backend (see
 * redis_backend.h): one server, or a cluster, where every command goes to
 * the node of its lock's slot, a script may touch one slot only, and a
 * renewal batch is one script per slot, those of one node pipelined. */
#include "config.h"

#include "redis_backend.h"
#include "redis_list.h"
#include "redis_multi_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool redis_is_int_array(const redisReply *r, size_t n)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return false;
    return true;
}

int redis_unexpected(struct redis_instance *inst, const char *what)
{
    return dlock_seterr(DLOCK_EPROTOCOL, "%s: the %s script answered something unexpected", inst->route->label(inst), what);
}

/* Exclusive holds are renewed by one script (a key per hold), shared holds
 * and permits by another (the lock and its holders set per hold). */
struct renew_kind {
    enum redis_script script;
    size_t keys;                /* keys per hold; each hold takes keys + 2 arguments */
};

static const struct renew_kind renew_exclusive = { SCRIPT_RENEW, 1 };
static const struct renew_kind renew_shared = { SCRIPT_RENEW_SHARED, 2 };

/* The renew script's arguments for locks[idx[0]], ..., locks[idx[m - 1]]
 * (keys ready): the keys, then (owner, lease) pairs, in args/lens
 * ((kind->keys + 2) m each), the leases' text in leases (m). */
static void renew_args(const struct renew_kind *kind, struct dlock_provider_lock *const *locks, const size_t *idx,
                       size_t m, const char **args, size_t *lens, char (*leases)[24])
{
    size_t pairs = kind->keys * m;
    for (size_t j = 0; j < m; j++) {
        const struct dlock_provider_lock *lk = locks[idx[j]];
        struct redis_lock *rl = lk->priv;
        args[kind->keys * j] = rl->k.key;
        lens[kind->keys * j] = rl->k.key_len;
        if (kind->keys == 2) {
            args[2 * j + 1] = rl->k.holders_key;
            lens[2 * j + 1] = rl->k.holders_key_len;
        }
        args[pairs + 2 * j] = lk->owner;
        lens[pairs + 2 * j] = strlen(lk->owner);
        lens[pairs + 2 * j + 1] = (size_t)snprintf(leases[j], sizeof leases[j], "%lld", (long long)lk->lease_ms);
        args[pairs + 2 * j + 1] = leases[j];
    }
}

/* Reads the renew script's answer for m holds into results[idx[j]]. */
static int renew_results(struct redis_instance *inst, const redisReply *r, const size_t *idx, size_t m,
                         int *results)
{
    if (!redis_is_int_array(r, m))
        return redis_unexpected(inst, "renew");
    for (size_t j = 0; j < m; j++)
        results[idx[j]] = r->element[j]->integer == 1 ? DLOCK_OK : DLOCK_ELOST;
    return DLOCK_OK;
}

struct slot_index {
    unsigned slot;
    size_t i;
};

static int by_slot(const void *a, const void *b)
{
    const struct slot_index *x = a, *y = b;
    return x->slot != y->slot ? (x->slot < y->slot ? -1 : 1) : (x->i < y->i ? -1 : x->i > y->i);
}

/* In a cluster a script may only touch one slot: one renew script per slot,
 * all those of one node in one pipeline (redis_cluster_scatter). A group
 * whose node is down fails only its own holds. */
static void renew_in_cluster(struct redis_instance *inst, const struct renew_kind *kind,
                             struct dlock_provider_lock *const *locks, size_t n, size_t *idx, const char **args,
                             size_t *lens, char (*leases)[24], int *results)
{
    size_t per = kind->keys + 2;
    struct slot_index *order = malloc(n * sizeof *order);
    size_t *group_start = malloc((n + 1) * sizeof *group_start);
    struct redis_evalsha *calls = calloc(n, sizeof *calls);
    const char **keys = malloc(n * sizeof *keys);
    size_t *key_lens = malloc(n * sizeof *key_lens);
    int *argcs = malloc(n * sizeof *argcs), *rcs = malloc(n * sizeof *rcs);
    const char ***argvs = malloc(n * sizeof *argvs);
    const size_t **lenses = malloc(n * sizeof *lenses);
    redisReply **replies = malloc(n * sizeof *replies);
    size_t ngroups = 0, built = 0;
    int rc = DLOCK_OK;
    if (!order || !group_start || !calls || !keys || !key_lens || !argcs || !rcs || !argvs || !lenses || !replies)
        rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for a renewal batch");
    if (rc == DLOCK_OK) {
        for (size_t i = 0; i < n; i++) {
            const struct redis_lock *rl = locks[i]->priv;
            order[i].slot = redis_cluster_slot(rl->k.key, rl->k.key_len);
            order[i].i = i;
        }
        qsort(order, n, sizeof *order, by_slot);
        for (size_t i = 0; i < n; i++) {
            idx[i] = order[i].i;
            if (i == 0 || order[i].slot != order[i - 1].slot)
                group_start[ngroups++] = i;
        }
        group_start[ngroups] = n;
        /* The SHA1 must be known before EVALSHAs are built by hand. */
        const struct redis_lock *rl0 = locks[idx[0]]->priv;
        rc = redis_cluster_preload(inst->cluster, &inst->scripts, rl0->k.key, rl0->k.key_len);
    }
    /* Group g's arguments sit at args + per * group_start[g]. */
    for (size_t g = 0; rc == DLOCK_OK && g < ngroups; g++, built++) {
        size_t first = group_start[g], m = group_start[g + 1] - first;
        renew_args(kind, locks, idx + first, m, args + per * first, lens + per * first, leases + first);
        rc = redis_evalsha_build(&calls[g], &inst->scripts, kind->script, (int)(kind->keys * m), (int)(per * m),
                                 args + per * first, lens + per * first);
        keys[g] = args[per * first];
        key_lens[g] = lens[per * first];
        argcs[g] = calls[g].argc;
        argvs[g] = calls[g].argv;
        lenses[g] = calls[g].lens;
    }
    if (rc == DLOCK_OK)
        redis_cluster_scatter(inst->cluster, &inst->scripts, ngroups, keys, key_lens, argcs, argvs, lenses, replies,
                              rcs);
    for (size_t g = 0; g < ngroups; g++) {
        size_t first = group_start[g], m = group_start[g + 1] - first;
        int group_rc = rc;
        if (rc == DLOCK_OK && rcs[g] == DLOCK_OK && replies[g]->type == REDIS_REPLY_ERROR)
            group_rc = redis_script_error(inst->route->label(inst), replies[g]->str);
        else if (rc == DLOCK_OK && rcs[g] == DLOCK_OK)
            group_rc = renew_results(inst, replies[g], idx + first, m, results);
        else if (rc == DLOCK_OK)
            group_rc = rcs[g];
        if (rc == DLOCK_OK && replies[g])
            freeReplyObject(replies[g]);
        for (size_t j = first; group_rc != DLOCK_OK && j < first + m; j++)
            results[idx[j]] = group_rc;
    }
    for (size_t g = 0; g < built; g++)
        redis_evalsha_free(&calls[g]);
    for (size_t i = 0; ngroups == 0 && i < n; i++) /* failed before grouping */
        results[i] = rc;
    free(order);
    free(group_start);
    free(calls);
    free(keys);
    free(key_lens);
    free(argcs);
    free(rcs);
    free(argvs);
    free(lenses);
    free(replies);
}

/* One script for n holds of one kind on one server; per slot in a cluster. */
static int renew_kind_batch(struct redis_instance *inst, bool shared, struct dlock_provider_lock *const *locks,
                            size_t n, int *results, bool cluster)
{
    const struct renew_kind *kind = shared ? &renew_shared : &renew_exclusive;
    size_t per = kind->keys + 2;
    size_t *idx = malloc(n * sizeof *idx);
    const char **args = malloc(per * n * sizeof *args);
    size_t *lens = malloc(per * n * sizeof *lens);
    char (*leases)[24] = malloc(n * sizeof *leases);
    int rc = DLOCK_OK;
    if (!idx || !args || !lens || !leases)
        rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for a renewal batch");
    for (size_t i = 0; rc == DLOCK_OK && i < n; i++)
        idx[i] = i;
    if (rc == DLOCK_OK && cluster) {
        renew_in_cluster(inst, kind, locks, n, idx, args, lens, leases, results);
    } else if (rc == DLOCK_OK) {
        renew_args(kind, locks, idx, n, args, lens, leases);
        redisReply *r = redis_script_run(&inst->pool, &inst->scripts, kind->script, (int)(kind->keys * n),
                                         (int)(per * n), args, lens, &rc);
        if (r) {
            rc = renew_results(inst, r, idx, n, results);
            freeReplyObject(r);
        }
    }
    free(idx);
    free(args);
    free(lens);
    free(leases);
    return rc;
}

/* ---- one server --------------------------------------------------------------------- */

static const char *single_label(const struct redis_instance *inst)
{
    return inst->pool.server.label;
}

static redisReply *single_script(struct redis_instance *inst, enum redis_script which, int nkeys, int nargs,
                                 const char **args, const size_t *lens, int *rc, int64_t *retry_hint_ms)
{
    (void)retry_hint_ms;
    return redis_script_run(&inst->pool, &inst->scripts, which, nkeys, nargs, args, lens, rc);
}

static int single_pipeline(struct redis_instance *inst, const char *key, size_t key_len, size_t n, int *argcs,
                           const char ***argvs, const size_t **lenses, redisReply **replies)
{
    (void)key; (void)key_len;
    return redis_pool_pipeline(&inst->pool, n, argcs, argvs, lenses, replies);
}

static int single_preload(struct redis_instance *inst, const char *key, size_t key_len)
{
    (void)key; (void)key_len;
    return redis_scripts_preload(&inst->pool, &inst->scripts);
}

static int single_subscribe(struct redis_instance *inst, const char *channel, size_t len, int fd,
                            struct redis_subscriber **sub)
{
    *sub = inst->subscriber;
    return redis_subscriber_add(inst->subscriber, channel, len, fd, inst->pool.server.command_timeout_ms);
}

static bool single_moved(struct redis_instance *inst, const struct redis_lock *rl)
{
    (void)inst; (void)rl;
    return false;
}

static int single_renew(struct redis_instance *inst, bool shared, struct dlock_provider_lock *const *locks, size_t n,
                        int *results)
{
    return renew_kind_batch(inst, shared, locks, n, results, false);
}

static int single_list(struct redis_instance *inst, struct dlock_provider_list *req)
{
    return redis_list_page(&inst->pool, inst->prefix, req);
}

/* The one server's (or the sentinels' master's) pool. */
static struct redis_pool *single_native_pool(struct redis_instance *inst, const char *key, size_t key_len)
{
    (void)key;
    (void)key_len;
    return &inst->pool;
}

const struct redis_route redis_single_route = {
    .name = "single",
    .label = single_label,
    .script = single_script,
    .pipeline = single_pipeline,
    .preload = single_preload,
    .subscribe = single_subscribe,
    .moved = single_moved,
    .resent = redis_pool_last_resent,
    .renew = single_renew,
    .list = single_list,
    .native_pool = single_native_pool,
};

/* ---- a cluster ------------------------------------------------------------------------ */

static const char *cluster_label(const struct redis_instance *inst)
{
    return redis_cluster_label(inst->cluster);
}

static redisReply *cluster_script(struct redis_instance *inst, enum redis_script which, int nkeys, int nargs,
                                  const char **args, const size_t *lens, int *rc, int64_t *retry_hint_ms)
{
    return redis_cluster_script_run(inst->cluster, &inst->scripts, which, nkeys, nargs, args, lens, rc,
                                    retry_hint_ms);
}

static int cluster_pipeline(struct redis_instance *inst, const char *key, size_t key_len, size_t n, int *argcs,
                            const char ***argvs, const size_t **lenses, redisReply **replies)
{
    return redis_cluster_pipeline(inst->cluster, &inst->scripts, key, key_len, n, argcs, argvs, lenses, replies,
                                  NULL);
}

static int cluster_preload(struct redis_instance *inst, const char *key, size_t key_len)
{
    return redis_cluster_preload(inst->cluster, &inst->scripts, key, key_len);
}

/* On the node that serves the channel's slot. */
static int cluster_subscribe(struct redis_instance *inst, const char *channel, size_t len, int fd,
                             struct redis_subscriber **sub)
{
    return redis_cluster_subscribe(inst->cluster, channel, len, fd, inst->pool.server.command_timeout_ms, sub);
}

/* Resharding or a failover may have given the slot to another node. */
static bool cluster_moved(struct redis_instance *inst, const struct redis_lock *rl)
{
    return rl->sub != redis_cluster_subscriber_of(inst->cluster, rl->sub_channel, rl->sub_channel_len);
}

/* A cluster command is not sent twice by the pool. */
static bool cluster_resent(void)
{
    return false;
}

static int cluster_renew(struct redis_instance *inst, bool shared, struct dlock_provider_lock *const *locks, size_t n,
                         int *results)
{
    return renew_kind_batch(inst, shared, locks, n, results, true);
}

/* The master of the key's slot, as the map says: a node that has moved
 * the slot answers MOVED (or ASK), and the blocking call follows it. */
static struct redis_pool *cluster_native_pool(struct redis_instance *inst, const char *key, size_t key_len)
{
    return redis_cluster_pool_of(inst->cluster, key, key_len);
}

/* A SCAN sees one node's keys: master after master. */
static int cluster_list(struct redis_instance *inst, struct dlock_provider_list *req)
{
    struct redis_pool *masters[64];
    int n = redis_cluster_masters(inst->cluster, masters, 64);
    if (n == 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: no master serves a slot yet", cluster_label(inst));
    return redis_multi_list_page(masters, n, 0, inst->prefix, inst->log_handle, req);
}

const struct redis_route redis_cluster_route = {
    .name = "cluster",
    .label = cluster_label,
    .script = cluster_script,
    .pipeline = cluster_pipeline,
    .preload = cluster_preload,
    .subscribe = cluster_subscribe,
    .moved = cluster_moved,
    .resent = cluster_resent,
    .renew = cluster_renew,
    .list = cluster_list,
    .native_pool = cluster_native_pool,
};
