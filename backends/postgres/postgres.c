/* backends/postgres/postgres.c - the postgres backend module (dlock_postgres.so).
 *
 * Two modes, chosen by postgres.mode, each a table of its own (pg_backend.h):
 * lease (default, pg_lease.c), a row per name with a lease the server's
 * clock ends; session (pg_session.c), PostgreSQL's advisory locks held by
 * one connection per client. This file is the provider's table, the
 * dispatch to the mode, and what both modes share.
 *
 * Every statement is prepared once per connection (planning the upsert
 * costs more than running it).
 *
 * Waiting, in both modes: a release (and, in lease mode, a downgrade, which
 * lets readers in) sends NOTIFY on a channel derived from the name.
 * Exclusive and permit requests that are kept waiting join the name's line
 * (pg_line.h: the server's own queue for an advisory "gate" lock), where
 * only the head LISTENs, so a release wakes one waiter and the others make
 * no request until their turn. Shared requests LISTEN on the channel
 * themselves (readers may all come in at once): after a busy answer on a
 * connection of their own, and only then look again, so a release between
 * the two cannot be missed. A missed notification (a dropped connection)
 * is covered by retrying after the holder's remaining lease. In fair mode
 * a request enters the line before its first look and looks only at the
 * head, so requests made in fair mode are granted in the order they came
 * (one made without it may still take a free lock ahead of the line). */
#include "config.h"

#include "../common/line.h"
#include "../common/lock_kind.h"
#include "../common/out_of_line.h"
#include "pg_backend.h"

#include <dlock/provider.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct dlock_setting_spec pg_settings[] = {
    { "conninfo", DLOCK_SETTING_STRING, 0, 0 },
    { "host", DLOCK_SETTING_STRING, 0, 0 },
    { "port", DLOCK_SETTING_INT, 1, 65535 },
    { "user", DLOCK_SETTING_STRING, 0, 0 },
    { "password", DLOCK_SETTING_STRING, 0, 0 },
    { "database", DLOCK_SETTING_STRING, 0, 0 },
    { "table", DLOCK_SETTING_STRING, 0, 0 },
    { "mode", DLOCK_SETTING_STRING, 0, 0 },
    { "create_table", DLOCK_SETTING_BOOL, 0, 0 },
    { "prefix", DLOCK_SETTING_STRING, 0, 0 },
    { "connect_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "command_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "pool_size", DLOCK_SETTING_INT, 1, PG_POOL_MAX },
    { NULL, 0, 0, 0 },
};


static int ensure_key(struct pg_instance *inst, struct dlock_provider_lock *lk)
{
    struct pg_lock *pl = lk->priv;
    if (pl->k.key)
        return DLOCK_OK;
    int rc = sql_lock_key_init(&pl->k, inst->head.prefix, lk->name, lk->name_len);
    if (rc == DLOCK_OK)
        snprintf(pl->advisory, sizeof pl->advisory, "%" PRId64, (int64_t)pl->k.digest);
    return rc;
}

/* ---- waiting: LISTEN on a connection of the lock's own ------------------------------- */

static void stop_listening(struct pg_instance *inst, struct pg_lock *pl)
{
    if (!pl->listener)
        return;
    int rc;
    PGresult *res = pg_exec(&inst->server, &pl->listener, "UNLISTEN *", 0, NULL, NULL, NULL, &rc);
    PQclear(res);
    /* Notifications that were already in flight must not wake the next
     * user of this connection. */
    if (pl->listener) {
        PQconsumeInput(pl->listener);
        PGnotify *n;
        while ((n = PQnotifies(pl->listener)))
            PQfreemem(n);
    }
    pg_pool_put(&inst->listeners, pl->listener);
    pl->listener = NULL;
}

static int start_listening(struct pg_instance *inst, struct pg_lock *pl)
{
    int rc = pg_pool_get(&inst->listeners, &pl->listener);
    if (rc != DLOCK_OK)
        return rc;
    char sql[48];
    snprintf(sql, sizeof sql, "LISTEN \"%s\"", pl->k.tag);
    PGresult *res = pg_exec(&inst->server, &pl->listener, sql, 0, NULL, NULL, NULL, &rc);
    if (res) {
        rc = pg_result_check(&inst->server, res, "LISTEN");
        PQclear(res);
    }
    if (rc != DLOCK_OK) {
        pg_pool_put(&inst->listeners, pl->listener);
        pl->listener = NULL;
    }
    return rc;
}

/* Forgets notifications received so far: they tell of releases before the
 * attempt that is about to be made. */
static void drain_notifications(struct pg_lock *pl)
{
    if (!pl->listener)
        return;
    if (!PQconsumeInput(pl->listener))
        return;
    PGnotify *n;
    while ((n = PQnotifies(pl->listener)))
        PQfreemem(n);
}

/* ---- the line's steps (line.h) ---------------------------------------------------------------- */

/* Exclusive and permit requests wait in the name's line; shared ones
 * listen themselves. */
static bool waits_in_line(const struct dlock_provider_lock *lk)
{
    return lk->mode != DLOCK_MODE_SHARED;
}

static struct line_place *place_of(struct dlock_provider_lock *lk)
{
    return &((struct pg_lock *)lk->priv)->line.place;
}

/* Notifications received so far tell of releases before this look. */
static int prepare_look(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_lock *pl = lk->priv;
    int rc = ensure_key(instance, lk);
    if (rc == DLOCK_OK) {
        drain_notifications(pl);
        pg_line_drain(&pl->line);
    }
    return rc;
}

/* Enters the line when out of it: at once at its head when nobody is in
 * it, else asked (pg_line_enter). */
static int fair_turn(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, bool *turn)
{
    (void)g;
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (pl->line.place.state == LINE_OUT &&
        pg_line_enter(&inst->listeners, &inst->pool, &pl->line, pl->k.digest, pl->k.tag) != DLOCK_OK)
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN, "%s: cannot enter the line (%s); this look is not "
                           "in turn", inst->server.label, dlock_errmsg());
    *turn = pl->line.place.state != LINE_ASKED;
    return DLOCK_OK;
}

/* A shared request answered busy listens, then looks again: a release in
 * between is then heard. */
static int listen_and_look(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, int rc)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (pl->listener)
        return rc;
    if (start_listening(inst, pl) == DLOCK_OK)
        return inst->head.mode->attempt(inst, lk, g);
    dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN, "%s: cannot LISTEN (%s); polling instead",
                       inst->server.label, dlock_errmsg());
    return rc;
}

/* An exclusive hold keeps the gate until it is released (pg_line.h).
 * Those queued for the gate behind it make no request its holder could
 * hear, so a hold of a name whose holds may be kept asks whether anyone
 * is (the first such hold asks when the name is first watched). */
static void granted(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (!waits_in_line(lk))
        return;
    if (g && pl->watched && lk->mode == DLOCK_MODE_EXCLUSIVE && pl->line.place.state != LINE_OUT &&
        pg_line_others_queued(&pl->line))
        g->others_waiting = 1;
    pg_line_granted(&inst->listeners, &pl->line, lk->mode == DLOCK_MODE_EXCLUSIVE);
}

static void leave_line(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    pg_line_leave(&inst->listeners, &((struct pg_lock *)lk->priv)->line);
}

static int join_line(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    return pg_line_join(&inst->listeners, &inst->pool, &pl->line, pl->k.digest, pl->k.tag);
}

static int wait_in_line(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    struct pg_instance *inst = instance;
    return pg_line_wait(&inst->listeners, &((struct pg_lock *)lk->priv)->line, timeout_ms, wake_fd,
                        inst->log_handle, inst->server.label);
}

/* The listener died: dropped, so that the core's next try listens anew on
 * a fresh connection. */
static void drop_listener(struct pg_instance *inst, struct pg_lock *pl)
{
    dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN, "%s: listener connection lost: %s", inst->server.label,
                       PQerrorMessage(pl->listener));
    PQfinish(pl->listener);
    pg_pool_put(&inst->listeners, NULL);
    pl->listener = NULL;
}

/* A shared request, or one that could not join: its own LISTEN. */
static int wait_listening(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    int64_t deadline = dlock_provider_now_ms() + timeout_ms;
    if (!pl->listener) /* no listener or line (it could not be set up): look again soon */
        return out_of_line_wait(wake_fd, timeout_ms);
    for (;;) {
        PGnotify *n = PQnotifies(pl->listener);
        if (n) {
            PQfreemem(n);
            return DLOCK_OK;
        }
        int rc, w = pg_await_input(pl->listener, wake_fd, deadline, &rc);
        if (w == 0)
            return rc;
        if (w < 0) {
            drop_listener(inst, pl);
            return DLOCK_OK;
        }
    }
}

/* A parked wait: in the line, the waiter's connection; outside it, the
 * request's own LISTEN connection, or a short timer without one. */
static int arm(void *instance, struct dlock_provider_lock *lk, bool in_line, int64_t *timeout_ms, int *fd)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (in_line)
        return pg_line_arm(&inst->listeners, &pl->line, timeout_ms, fd, inst->log_handle, inst->server.label);
    *fd = -1;
    if (!pl->listener) {
        if (*timeout_ms > OUT_OF_LINE_MS)
            *timeout_ms = OUT_OF_LINE_MS;
        return DLOCK_OK;
    }
    PGnotify *n = PQnotifies(pl->listener);
    if (n) {
        PQfreemem(n);
        *timeout_ms = 0;
        return DLOCK_OK;
    }
    *fd = PQsocket(pl->listener);
    if (*fd < 0)
        *timeout_ms = 0;
    return DLOCK_OK;
}

static int disarm(void *instance, struct dlock_provider_lock *lk, bool in_line, int fired)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (in_line)
        return pg_line_disarm(&inst->listeners, &pl->line, fired, inst->log_handle, inst->server.label);
    if (!fired || !pl->listener)
        return fired ? DLOCK_OK : DLOCK_ETIMEDOUT;
    if (!PQconsumeInput(pl->listener)) {
        drop_listener(inst, pl);
        return DLOCK_OK;
    }
    PGnotify *n;
    bool notified = false;
    while ((n = PQnotifies(pl->listener))) {
        PQfreemem(n);
        notified = true;
    }
    return notified ? DLOCK_OK : DLOCK_EBUSY; /* no NOTIFY yet: the wait goes on */
}

static const struct line_ops pg_line_ops = {
    .place = place_of,
    .in_line = waits_in_line,
    .prepare = prepare_look,
    .turn = fair_turn,
    .attempt = sql_mode_attempt,
    .attempt_late = sql_mode_attempt_late,
    .busy = listen_and_look,
    .granted = granted,
    .leave = leave_line,
    .join = join_line,
    .wait_in_line = wait_in_line,
    .wait_outside = wait_listening,
    .arm = arm,
    .disarm = disarm,
};

/* ---- the provider --------------------------------------------------------------------------- */

static int pg_release(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    int rc = sql_mode_release(inst, lk);
    /* After the release: the next waiter's look finds the lock free. Also
     * when the release failed (the hold was lost): the gate goes anyway. */
    pg_line_pass(&inst->listeners, &pl->line);
    return rc;
}

static void pg_abandon(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (pl->writer_registered) {
        /* Out of the way now, waking the readers held back for us. */
        const char *values[3] = { pl->k.key, lk->owner, pl->k.tag };
        int lengths[3] = { (int)pl->k.key_len, 0, 0 }, formats[3] = { 1, 0, 0 };
        int rc;
        PQclear(pg_pool_exec(&inst->pool, PG_UNREGISTER_WRITER, 3, values, lengths, formats, &rc));
        pl->writer_registered = false;
    }
    stop_listening(inst, pl);
    pg_line_leave(&inst->listeners, &pl->line);
}

static void pg_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_lock *pl = lk->priv;
    struct pg_instance *inst = instance;
    stop_listening(inst, pl);
    pg_line_leave(&inst->listeners, &pl->line);
    sql_lock_key_free(&pl->k);
    memset(pl, 0, sizeof *pl);
}

static void pg_close(void *instance)
{
    struct pg_instance *inst = instance;
    pg_wanted_free(inst->wanted);
    if (inst->holder)
        PQfinish(inst->holder); /* ends the session: the server frees its advisory locks */
    sql_instance_end(&inst->head);
    pg_pool_destroy(&inst->listeners);
    pg_pool_destroy(&inst->pool);
    pg_sql_free(&inst->sql);
    pg_server_free(&inst->server);
    free(inst);
}

_Static_assert(PG_STATEMENT_COUNT <= 32, "statement ids are bits of a uint32_t");

/* The statements that lease mode's attempts and releases send without a
 * thread (pg_native.c), as bits of their ids: prepared on each connection
 * of the pool before it is used, since such a statement cannot be prepared
 * on demand without a round trip of its own. */
static uint32_t native_statements(const struct pg_instance *inst)
{
    uint32_t ids = UINT32_C(1) << PG_TAKE | UINT32_C(1) << PG_ACQUIRE | UINT32_C(1) << PG_RELEASE;
    if (!inst->head.no_shared_columns)
        ids |= UINT32_C(1) << PG_REGISTER_WRITER | UINT32_C(1) << PG_SHARED_ACQUIRE | UINT32_C(1) << PG_SHARED_RELEASE;
    return ids;
}

static int pg_open(void **instance, const struct dlock_provider_env *env)
{
    struct pg_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory");
    struct sql_settings set;
    int rc = sql_instance_begin(&inst->head, env, "postgres", PG_TABLE_MAX, &pg_lease_mode, &pg_session_mode,
                                &pg_line_ops, &set);
    if (rc == DLOCK_OK)
        rc = pg_server_from_settings(&inst->server, env->settings);
    if (rc != DLOCK_OK) {
        sql_instance_end(&inst->head);
        free(inst);
        return rc;
    }
    inst->head.line.label = inst->server.label;
    inst->log_handle = env->log_handle;
    pg_pool_init(&inst->pool, &inst->server, (int)set.pool_size);
    pg_pool_init(&inst->listeners, &inst->server, PG_POOL_MAX);
    rc = pg_sql_init(&inst->sql, set.table);
    for (int i = 0; rc == DLOCK_OK && i < PG_STATEMENT_COUNT; i++)
        inst->server.statements[i] = inst->sql.text[i];
    /* Connect now, so a wrong address or password is reported at open, and
     * make sure the table exists. */
    if (rc == DLOCK_OK)
        rc = pg_prepare_schema(inst, set.create_table);
    /* A table without the columns of shared holds cannot take the
     * downgraded one: refused up front (DLOCK_ENOTSUP), the exclusive hold
     * is kept, where a failing statement would cost it. */
    if (inst->head.no_shared_columns)
        inst->head.capabilities_off |= DLOCK_CAP_DOWNGRADE;
    inst->tell_wanted = env->wanted;
    if (rc == DLOCK_OK)
        rc = pg_wanted_new(&inst->server, env->wanted, env->log_handle, &inst->wanted);
    if (rc != DLOCK_OK) {
        pg_close(inst);
        return rc;
    }
    if (inst->head.mode == &pg_lease_mode)
        pg_pool_prepare_at_connect(&inst->pool, native_statements(inst));
    dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "%s: ready, %s mode, table \"%s\"", inst->server.label,
                       inst->head.mode->name, set.table);
    *instance = inst;
    return DLOCK_OK;
}

/* A name whose holds may be kept (lease mode only: see pg_wanted.h). */
static int pg_watch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    char channel[32];
    pg_wanted_channel(lk, channel);
    int rc = pg_wanted_watch(inst->wanted, lk, channel);
    if (rc != DLOCK_OK)
        return rc;
    pl->watched = true;
    /* The hold that made the name watched came through the line: anyone
     * already queued behind it is told now (see granted). */
    if (pl->line.place.state == LINE_HEAD && pg_line_others_queued(&pl->line))
        inst->tell_wanted(lk);
    return DLOCK_OK;
}

static void pg_unwatch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    pg_wanted_unwatch(inst->wanted, lk);
    pl->watched = false;
}

static const struct dlock_provider pg_provider = {
    .version = DLOCK_PROVIDER_VERSION_8,
    .name = "postgres",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_NATIVE_WAIT | DLOCK_CAP_FAIR | DLOCK_CAP_SERVER_EXPIRY |
                    DLOCK_CAP_MULTI_HOST | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE |
                    DLOCK_CAP_ELECTION | DLOCK_CAP_CACHE,
    .lock_priv_size = sizeof(struct pg_lock),
    .settings = pg_settings,
    .open = pg_open,
    .close = pg_close,
    .acquire = line_acquire,
    .release = pg_release,
    .renew = sql_mode_renew,
    .fence = sql_mode_fence,
    .renew_batch = sql_mode_renew_batch,
    .wait = line_wait,
    .lock_fini = pg_lock_fini,
    .ctl = sql_mode_ctl,
    .abandon = pg_abandon,
    .list = sql_mode_list,
    .break_hold = sql_mode_break,
    .wait_arm = line_wait_arm,
    .wait_disarm = line_wait_disarm,
    .downgrade = sql_mode_downgrade,
    .value_put = sql_mode_value_put,
    .leader_get = sql_mode_leader_get,
    .watch_open = pg_watch_open,
    .watch_consume = pg_watch_consume,
    .watch_close = pg_watch_close,
    .acquire_send = pg_acquire_send,
    .acquire_recv = pg_acquire_recv,
    .acquire_drop = pg_acquire_drop,
    .release_send = pg_release_send,
    .release_recv = pg_release_recv,
    .release_drop = pg_release_drop,
    .watch_wanted = pg_watch_wanted,
    .unwatch_wanted = pg_unwatch_wanted,
};

DLOCK_MODULE(pg_provider)
