/* backends/redis/redis_native.c - an attempt's round trip without a thread,
 * for the non-blocking API: acquire_send writes the acquire script's
 * EVALSHA on a connection of the pool and hands the core its socket;
 * acquire_recv reads what has come (hiredis's reader, fed one read at a
 * time) and answers as acquire would; acquire_drop closes a connection
 * whose answer never came.
 *
 * Only what the plain path does in one round trip goes this way: one
 * server (or the sentinels' master), no WAIT, the script already loaded, an
 * idle connection in the pool (sending never connects or waits). Anything else (a cluster's redirections, a
 * script the server forgot, a connection that died, a READONLY master
 * after a failover) answers DLOCK_ENOTSUP, and the core makes the attempt
 * with acquire, which knows how to recover. The subscription a waiter
 * needs after a busy answer is made by wait_arm (redis.c). */
#include "config.h"

#include "../common/native_room.h"
#include "redis_backend.h"

#include <string.h>

/* Gives ctx back, closed when broken (readonly: closed, with the pool's
 * idle ones, since the server is no longer the master). */
static void give_back(struct redis_instance *inst, redisContext *ctx, bool readonly)
{
    if (readonly)
        ctx->err = REDIS_ERR_OTHER; /* closed by redis_pool_put */
    redis_pool_put(&inst->pool, ctx);
    if (readonly)
        conn_pool_drop_idle(&inst->pool.conns);
}

int redis_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct redis_instance *inst = instance;
    if (inst->route != &redis_single_route || inst->wait_replicas > 0)
        return DLOCK_ENOTSUP;
    int rc = redis_attempt_prepare(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    struct redis_attempt_args a;
    redis_attempt_args(inst, lk, &a);
    struct redis_evalsha e;
    if ((rc = redis_evalsha_build(&e, &inst->scripts, a.which, a.nkeys, a.nargs, a.args, a.lens)) != DLOCK_OK)
        return rc;
    redisContext *ctx = NULL;
    /* Not loaded yet, or no idle connection: acquire loads the script, or
     * connects or waits for a connection, on a worker (this call must not
     * block: the core may make it on the caller's loop). */
    if (!e.sha[0] || redis_pool_take_idle(&inst->pool, &ctx) != DLOCK_OK) {
        redis_evalsha_free(&e);
        return DLOCK_ENOTSUP;
    }
    if (!native_room_try_take(&inst->native_in_flight, inst->pool.conns.max)) {
        redis_evalsha_free(&e);
        give_back(inst, ctx, false);
        return DLOCK_ENOTSUP;
    }
    int done = 0;
    rc = redisAppendCommandArgv(ctx, e.argc, e.argv, e.lens) == REDIS_OK ? DLOCK_OK : DLOCK_ENOTSUP;
    redis_evalsha_free(&e);
    while (rc == DLOCK_OK && !done)
        if (redisBufferWrite(ctx, &done) != REDIS_OK)
            rc = DLOCK_ENOTSUP; /* ctx->err set: closed below; acquire sends it on a fresh one */
    if (rc != DLOCK_OK) {
        native_room_given_back(&inst->native_in_flight);
        give_back(inst, ctx, false);
        return rc;
    }
    io->fd = ctx->fd;
    io->timeout_ms = inst->pool.server.command_timeout_ms;
    io->priv = ctx;
    return DLOCK_OK;
}

int redis_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                       struct dlock_grant *g)
{
    struct redis_instance *inst = instance;
    redisContext *ctx = io->priv;
    void *reply = NULL;
    if (redisBufferRead(ctx) != REDIS_OK || redisGetReplyFromReader(ctx, &reply) != REDIS_OK) {
        /* The connection failed with the attempt in flight: acquire sends
         * it again on a fresh one (the script is safe to run twice for its
         * owner), as it does when this happens inside it. */
        io->priv = NULL;
        native_room_given_back(&inst->native_in_flight);
        give_back(inst, ctx, false);
        conn_pool_drop_idle(&inst->pool.conns);
        return DLOCK_ENOTSUP;
    }
    if (!reply)
        return DLOCK_PROVIDER_AGAIN;
    io->priv = NULL;
    native_room_given_back(&inst->native_in_flight);
    redisReply *r = reply;
    bool readonly = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0;
    give_back(inst, ctx, readonly);
    if (r->type == REDIS_REPLY_ERROR &&
        (readonly || strncmp(r->str, "NOSCRIPT", 8) == 0)) {
        /* Refused, not run: acquire loads the script again, or asks the
         * sentinels for the new master, and sends it. */
        freeReplyObject(r);
        return DLOCK_ENOTSUP;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        int rc = redis_script_error(inst->route->label(inst), r->str);
        freeReplyObject(r);
        return rc;
    }
    g->retry_hint_ms = -1;
    return redis_attempt_answer(inst, lk, r, -1, g);
}

void redis_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    (void)lk;
    redisContext *ctx = io->priv;
    io->priv = NULL;
    if (ctx) {
        struct redis_instance *inst = instance;
        native_room_given_back(&inst->native_in_flight);
        ctx->err = REDIS_ERR_OTHER; /* closed by redis_pool_put: an answer may still come on it */
        redis_pool_put(&inst->pool, ctx);
    }
}
