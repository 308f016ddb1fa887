/* backends/redis/redis_native.c - an attempt's or a release's round trip
 * without a thread, for the non-blocking API: acquire_send (release_send)
 * writes the script's EVALSHA on a connection of the pool and hands the
 * core its socket; acquire_recv (release_recv) reads what has come
 * (hiredis's reader, fed one read at a time) and answers as acquire
 * (release) would; the drops close a connection whose answer never came.
 *
 * Only what the plain path does in one round trip goes this way: no WAIT,
 * the script already loaded, an idle connection in the pool of the server
 * that serves the key (the one server, the sentinels' master, or the
 * cluster's master of the key's slot as the slot map says), so that
 * sending never connects or waits. Anything else (a cluster node that
 * answers MOVED, ASK, TRYAGAIN or CLUSTERDOWN, a script the server forgot,
 * a connection that died, a READONLY master after a failover) answers
 * DLOCK_ENOTSUP, and the core makes the attempt with acquire, which knows
 * how to recover: none of those answers ran the script. The subscription a
 * waiter needs after a busy answer is made by wait_arm (redis.c). */
#include "config.h"

#include "../common/native_room.h"
#include "redis_backend.h"

#include <string.h>

/* Gives ctx back to pool, closed when broken (readonly: closed, with the
 * pool's idle ones, since the server is no longer the master). */
static void give_back(struct redis_pool *pool, redisContext *ctx, bool readonly)
{
    if (readonly)
        ctx->err = REDIS_ERR_OTHER; /* closed by redis_pool_put */
    redis_pool_put(pool, ctx);
    if (readonly)
        conn_pool_drop_idle(&pool->conns);
}

/* Writes one EVALSHA of script which on an idle connection of the pool of
 * rl's key, as a native round trip: DLOCK_OK (in flight, *io filled),
 * DLOCK_ENOTSUP (nothing sent: the blocking call makes it), or a failure. */
static int send_script(struct redis_instance *inst, struct redis_lock *rl, enum redis_script which, int nkeys,
                       int nargs, const char **args, const size_t *lens, struct dlock_provider_io *io)
{
    struct redis_pool *pool = inst->route->native_pool(inst, rl->k.key, rl->k.key_len);
    if (!pool)
        return DLOCK_ENOTSUP;
    struct redis_evalsha e;
    int rc = redis_evalsha_build(&e, &inst->scripts, which, nkeys, nargs, args, lens);
    if (rc != DLOCK_OK)
        return rc;
    redisContext *ctx = NULL;
    /* Not loaded yet, or no idle connection: the blocking call loads the
     * script, or connects or waits for a connection, on a worker (this
     * call must not block: the core may make it on the caller's loop). */
    if (!e.sha[0] || redis_pool_take_idle(pool, &ctx) != DLOCK_OK) {
        redis_evalsha_free(&e);
        return DLOCK_ENOTSUP;
    }
    if (!native_room_try_take(&inst->native_in_flight, pool->conns.max)) {
        redis_evalsha_free(&e);
        give_back(pool, ctx, false);
        return DLOCK_ENOTSUP;
    }
    int done = 0;
    rc = redisAppendCommandArgv(ctx, e.argc, e.argv, e.lens) == REDIS_OK ? DLOCK_OK : DLOCK_ENOTSUP;
    redis_evalsha_free(&e);
    while (rc == DLOCK_OK && !done)
        if (redisBufferWrite(ctx, &done) != REDIS_OK)
            rc = DLOCK_ENOTSUP; /* ctx->err set: closed below; the blocking call sends it on a fresh one */
    if (rc != DLOCK_OK) {
        native_room_given_back(&inst->native_in_flight);
        give_back(pool, ctx, false);
        return rc;
    }
    rl->native_pool = pool;
    io->fd = ctx->fd;
    io->timeout_ms = pool->server.command_timeout_ms;
    io->priv = ctx;
    return DLOCK_OK;
}

/* Reads what has come for the round trip in io: DLOCK_PROVIDER_AGAIN (not
 * whole yet), DLOCK_OK with the reply in *out (the caller frees it), the
 * script's error, or DLOCK_ENOTSUP: the request is left to the blocking
 * call, either refused unrun (NOSCRIPT, or READONLY after a failover) or
 * on a connection that failed with it in flight (*broken: it may have
 * run). Every answer but DLOCK_PROVIDER_AGAIN gives the connection back. */
static int read_reply(struct redis_instance *inst, struct redis_lock *rl, struct dlock_provider_io *io,
                      redisReply **out, bool *broken)
{
    redisContext *ctx = io->priv;
    struct redis_pool *pool = rl->native_pool;
    void *reply = NULL;
    *out = NULL;
    *broken = false;
    if (redisBufferRead(ctx) != REDIS_OK || redisGetReplyFromReader(ctx, &reply) != REDIS_OK) {
        io->priv = NULL;
        native_room_given_back(&inst->native_in_flight);
        give_back(pool, ctx, false);
        conn_pool_drop_idle(&pool->conns);
        *broken = true;
        return DLOCK_ENOTSUP;
    }
    if (!reply)
        return DLOCK_PROVIDER_AGAIN;
    io->priv = NULL;
    native_room_given_back(&inst->native_in_flight);
    redisReply *r = reply;
    bool readonly = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0;
    give_back(pool, ctx, readonly);
    int rc = DLOCK_OK;
    if (readonly || redis_reply_unrun(r))
        rc = DLOCK_ENOTSUP;
    else if (r->type == REDIS_REPLY_ERROR)
        rc = redis_script_error(inst->route->label(inst), r->str);
    if (rc != DLOCK_OK)
        freeReplyObject(r);
    else
        *out = r;
    return rc;
}

static void drop(struct redis_instance *inst, struct redis_lock *rl, struct dlock_provider_io *io)
{
    redisContext *ctx = io->priv;
    io->priv = NULL;
    if (ctx) {
        native_room_given_back(&inst->native_in_flight);
        ctx->err = REDIS_ERR_OTHER; /* closed by redis_pool_put: an answer may still come on it */
        redis_pool_put(rl->native_pool, ctx);
    }
}

/* WAIT for replicas is a second round trip: the blocking call makes both. */
static bool native_route(const struct redis_instance *inst)
{
    return inst->wait_replicas == 0;
}

int redis_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct redis_instance *inst = instance;
    if (!native_route(inst))
        return DLOCK_ENOTSUP;
    int rc = redis_attempt_prepare(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    struct redis_attempt_args a;
    redis_attempt_args(inst, lk, &a);
    return send_script(inst, lk->priv, a.which, a.nkeys, a.nargs, a.args, a.lens, io);
}

int redis_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                       struct dlock_grant *g)
{
    struct redis_instance *inst = instance;
    redisReply *r;
    bool broken;
    /* Not read (DLOCK_ENOTSUP): acquire sends it again on a fresh
     * connection (the script is safe to run twice for its owner), loads
     * the script again, or finds the new master or the slot's node. */
    int rc = read_reply(inst, lk->priv, io, &r, &broken);
    if (rc != DLOCK_OK)
        return rc;
    g->retry_hint_ms = -1;
    return redis_attempt_answer(inst, lk, r, -1, g);
}

void redis_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    drop(instance, lk->priv, io);
}

int redis_release_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    /* An election value to withdraw is a second round trip: release makes both. */
    if (!native_route(inst) || rl->published || !rl->k.key)
        return DLOCK_ENOTSUP;
    rl->release_sent_before = false;
    struct redis_release_args a;
    redis_release_args(inst, lk, &a);
    return send_script(inst, rl, a.which, a.nkeys, a.nargs, a.args, a.lens, io);
}

int redis_release_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    redisReply *r;
    bool broken;
    int rc = read_reply(inst, rl, io, &r, &broken);
    /* release sends it again; a hold it then finds gone is this one's work. */
    rl->release_sent_before = broken;
    if (rc != DLOCK_OK)
        return rc;
    rc = r->type == REDIS_REPLY_INTEGER ? (r->integer < 0 ? DLOCK_ENOTOWNER : DLOCK_OK)
                                        : redis_unexpected(inst, "release");
    freeReplyObject(r);
    return rc;
}

void redis_release_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    drop(instance, lk->priv, io);
}
