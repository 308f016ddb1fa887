/* backends/mysql/mysql.c - the mysql backend module (dlock_mysql.so), for
 * MySQL and MariaDB over libmariadb.
 *
 * Two modes, chosen by mysql.mode, each a table of its own (my_backend.h):
 * lease (default, my_lease.c), a row per name whose lease the server's
 * clock ends; session (my_session.c), the server's named locks held by one
 * connection per client. This file is the provider's table, the dispatch
 * to the mode, and what both modes share.
 *
 * Waiting: a waiter blocks in the server, in a line of named "gate" locks
 * (my_line.h), so a release wakes one waiter. In session mode the head
 * waits in GET_LOCK for the holder to let go. In lease mode the head arms
 * the row (its connection's id in the waker column, while the row is busy
 * for it) and sleeps in the server until the holder's lease would run out;
 * a release takes the waker out of the row in its own UPDATE and ends that
 * sleep with KILL QUERY (wake_waker), and a holder that died is outlived by
 * the sleep's end. A lease-mode table without the waker column (an earlier
 * version's, with create_table off) has waiters retry with the core's
 * backoff instead, and the instance does not claim native waiting.
 *
 * Fair mode: a request enters the line before its first look, taking the
 * gate at once with GET_LOCK(gate, 0) when nobody is in the line, and
 * looks only at the head, so requests made in fair mode are granted in the
 * order the server queued them for the gate. Out of turn only when the
 * head seems to hang: in lease mode, an exclusive request whose wait ran
 * out may take a row that has been free for MY_LATE_MS.
 *
 * Lock caching (lease mode): a keeper polls its held names' rows for the
 * mark a request leaves in the waker column (my_wanted.h). */
#include "config.h"

#include "../common/line.h"
#include "../common/lock_kind.h"
#include "../common/out_of_line.h"
#include "my_backend.h"

#include <dlock/provider.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct dlock_setting_spec my_settings[] = {
    { "host", DLOCK_SETTING_STRING, 0, 0 },
    { "port", DLOCK_SETTING_INT, 1, 65535 },
    { "socket", DLOCK_SETTING_STRING, 0, 0 },
    { "user", DLOCK_SETTING_STRING, 0, 0 },
    { "password", DLOCK_SETTING_STRING, 0, 0 },
    { "database", DLOCK_SETTING_STRING, 0, 0 },
    { "table", DLOCK_SETTING_STRING, 0, 0 },
    { "mode", DLOCK_SETTING_STRING, 0, 0 },
    { "create_table", DLOCK_SETTING_BOOL, 0, 0 },
    { "prefix", DLOCK_SETTING_STRING, 0, 0 },
    { "connect_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "command_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "pool_size", DLOCK_SETTING_INT, 1, MY_POOL_MAX },
    { "cache_poll_ms", DLOCK_SETTING_INT, 1, 60000 },
    { NULL, 0, 0, 0 },
};

static int ensure_key(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    return ml->k.key ? DLOCK_OK : sql_lock_key_init(&ml->k, inst->head.prefix, lk->name, lk->name_len);
}

/* ---- the provider ----------------------------------------------------------------------- */

/* Out of the line (see my_line_leave): a lease-mode head that may still
 * be armed first takes its id out of the row. */
static void leave_line(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (ml->line.armed && inst->head.mode->lease_rows) {
        struct my_param p[2] = { my_bytes(ml->k.key, ml->k.key_len), my_integer((long long)ml->line.thread_id) };
        struct my_outcome o;
        my_pool_run(&inst->pool, MY_DISARM, p, 2, -1, &o);
        ml->line.armed = false;
    }
    my_line_leave(&inst->waiters, &ml->line);
}

static struct line_place *place_of(struct dlock_provider_lock *lk)
{
    return &((struct my_lock *)lk->priv)->line.place;
}

static int prepare_look(void *instance, struct dlock_provider_lock *lk)
{
    ((struct my_lock *)lk->priv)->writers_turn = false;
    return ensure_key(instance, lk);
}

/* Enters the line when out of it, taking the gate at once when nobody is
 * in it; with others in it, the wait joins it (my_line_enter). */
static int fair_turn(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, bool *turn)
{
    (void)g;
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (ml->line.place.state == LINE_OUT) {
        bool head = false;
        int rc = my_line_enter(&inst->waiters, &inst->pool, &ml->line, ml->k.tag, &head);
        if (rc == DLOCK_OK && !head) {
            *turn = false;
            return DLOCK_OK;
        }
        if (rc != DLOCK_OK) /* out of the line (every waiting connection in use): a look out of turn */
            dlock_provider_log(inst->log_handle, rc == DLOCK_EBUSY ? DLOCK_LOG_DEBUG : DLOCK_LOG_WARN,
                               "%s: cannot enter the line (%s); this look is not in turn", inst->server.label,
                               dlock_errmsg());
    }
    *turn = ml->line.place.state != LINE_ASKED;
    return DLOCK_OK;
}

static int join_line(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    return my_line_join(&inst->waiters, &inst->pool, &ml->line, ml->k.tag);
}

/* A shared head held back only for a writer that waits behind it in the
 * line lets the writer by, and queues again behind it. */
static void before_wait(void *instance, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    if (ml->writers_turn && ml->line.place.state == LINE_HEAD)
        leave_line(instance, lk);
    ml->writers_turn = false;
}

/* The lease-mode head's watch: see my_line.h. */
struct lease_watch {
    struct my_instance *inst;
    struct dlock_provider_lock *lk;
};

static int lease_arm(void *ctx, unsigned long thread_id)
{
    struct lease_watch *w = ctx;
    struct my_instance *inst = w->inst;
    struct dlock_provider_lock *lk = w->lk;
    struct my_lock *ml = lk->priv;
    struct my_param id = my_integer((long long)thread_id), key = my_bytes(ml->k.key, ml->k.key_len);
    struct my_param who = my_bytes(lk->owner, strlen(lk->owner));
    struct my_outcome o = { .affected = 0 };
    int rc;
    if (kind_is_shared(lk)) {
        char kind[16];
        unsigned limit = my_kind_of(lk, kind, sizeof kind);
        struct my_param k = my_bytes(kind, strlen(kind)), n = my_integer(limit);
        struct my_param p[9] = { id, key, k, k, who, n, n, n, who };
        rc = my_pool_run(&inst->pool, MY_SHARED_ARM, p, 9, -1, &o);
    } else {
        struct my_param p[3] = { id, key, who };
        rc = my_pool_run(&inst->pool, MY_ARM, p, 3, -1, &o);
    }
    if (rc != DLOCK_OK)
        return -1;
    return o.affected == 1 ? 1 : 0;
}

static char *lease_sleep_sql(void *ctx, unsigned long thread_id, int64_t sleep_ms)
{
    struct lease_watch *w = ctx;
    const struct my_lock *ml = w->lk->priv;
    /* The key as a hex literal: it is binary, and this goes as text. */
    char *hex = malloc(2 * ml->k.key_len + 1), *sql = NULL;
    if (hex) {
        *sql_hex(hex, ml->k.key, ml->k.key_len) = '\0';
        /* 2 when it slept out (the waker still ours), 1 when the row no
         * longer names us, 0 when there is no row. */
        sql = sql_format("SELECT COALESCE((SELECT IF(waker = %lu, SLEEP(%lld / 1000) + 2, 1) FROM `%s` WHERE name = X'%s'), 0)",
                         thread_id, (long long)sleep_ms, w->inst->sql.table, hex);
        free(hex);
    }
    if (!sql)
        dlock_seterr(DLOCK_ENOMEM, "%s: out of memory", w->inst->server.label);
    return sql;
}

static int wait_in_line(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    struct my_instance *inst = instance;
    struct lease_watch lw = { inst, lk };
    const struct my_line_watch watch = { lease_arm, lease_sleep_sql, &lw };
    return my_line_wait(&inst->waiters, &((struct my_lock *)lk->priv)->line,
                        inst->head.mode->lease_rows ? &watch : NULL, timeout_ms, wake_fd, inst->log_handle);
}

/* The same wait, parked on the waiter's connection. The watch (lease mode)
 * is used only during each call, as in wait_in_line. */
static int arm(void *instance, struct dlock_provider_lock *lk, bool in_line, int64_t *timeout_ms, int *fd)
{
    struct my_instance *inst = instance;
    if (!in_line) { /* out of the line: the core's next look joins it again, soon */
        *fd = -1;
        if (*timeout_ms > OUT_OF_LINE_MS)
            *timeout_ms = OUT_OF_LINE_MS;
        return DLOCK_OK;
    }
    struct lease_watch lw = { inst, lk };
    const struct my_line_watch watch = { lease_arm, lease_sleep_sql, &lw };
    return my_line_arm(&inst->waiters, &((struct my_lock *)lk->priv)->line,
                       inst->head.mode->lease_rows ? &watch : NULL, timeout_ms, fd, inst->log_handle);
}

static int disarm(void *instance, struct dlock_provider_lock *lk, bool in_line, int fired)
{
    struct my_instance *inst = instance;
    if (!in_line)
        return fired ? DLOCK_OK : DLOCK_ETIMEDOUT;
    struct lease_watch lw = { inst, lk };
    const struct my_line_watch watch = { lease_arm, lease_sleep_sql, &lw };
    return my_line_disarm(&inst->waiters, &((struct my_lock *)lk->priv)->line,
                          inst->head.mode->lease_rows ? &watch : NULL, fired, inst->log_handle);
}

static void granted(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    (void)g;
    leave_line(instance, lk);
}

/* Every kind waits in the line; out of it, the core's next look joins it
 * again. Granted or failed, the gate goes to the next waiter. */
static const struct line_ops my_line_ops = {
    .place = place_of,
    .prepare = prepare_look,
    .turn = fair_turn,
    .attempt = sql_mode_attempt,
    .attempt_late = sql_mode_attempt_late,
    .granted = granted,
    .leave = leave_line,
    .join = join_line,
    .before_wait = before_wait,
    .wait_in_line = wait_in_line,
    .arm = arm,
    .disarm = disarm,
};

static int my_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    struct my_instance *inst = instance;
    if (__atomic_load_n(&inst->no_batch, __ATOMIC_RELAXED))
        return DLOCK_ENOTSUP; /* the core renews them one by one */
    return inst->head.mode->renew_batch(inst, locks, n, results);
}

static void my_abandon(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (ml->writer_registered) {
        /* Out of the way now: the readers held back for us may come in.
         * Before leaving the line, while the waker it may take out of the
         * row, if it is ours, still names our own waiting connection. */
        struct my_param p[2] = { my_bytes(ml->k.key, ml->k.key_len), my_bytes(lk->owner, strlen(lk->owner)) };
        struct my_outcome o;
        if (my_pool_run(&inst->pool, MY_UNREGISTER_WRITER, p, 2, -1, &o) == DLOCK_OK && o.affected == 1) {
            if (ml->line.conn && o.insert_id == ml->line.thread_id)
                ml->line.armed = false; /* taken out already */
            else
                my_wake_waker(inst, o.insert_id);
        }
        ml->writer_registered = false;
    }
    leave_line(inst, lk);
}

static void my_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    leave_line(inst, lk);
    my_native_forget(ml);
    sql_lock_key_free(&ml->k);
    memset(ml, 0, sizeof *ml);
}

static void my_close(void *instance)
{
    struct my_instance *inst = instance;
    my_wanted_free(inst->wanted);
    my_conn_close(inst->holder); /* ends the session: the server frees its named locks */
    sql_instance_end(&inst->head);
    my_pool_destroy(&inst->pool);
    my_pool_destroy(&inst->waiters);
    my_sql_free(&inst->sql);
    free(inst);
}

static int my_open(void **instance, const struct dlock_provider_env *env)
{
    struct my_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory");
    struct sql_settings set;
    int rc = sql_instance_begin(&inst->head, env, "mysql", MY_TABLE_MAX, &my_lease_mode, &my_session_mode,
                                &my_line_ops, &set);
    if (rc == DLOCK_OK)
        rc = my_server_from_settings(&inst->server, env->settings);
    if (rc != DLOCK_OK) {
        sql_instance_end(&inst->head);
        free(inst);
        return rc;
    }
    inst->head.line.label = inst->server.label;
    if (!inst->head.mode->lease_rows) {
        /* A client that vanished leaves a half-open connection whose named
         * locks the server keeps until it closes the session: by default
         * after 8 hours idle. Three leases: renewals (every lease/3) keep a
         * live holder's session busy, and a hold without renewals is told
         * that it lives no longer than this (session_attempt). */
        int64_t s3 = (3 * env->default_lease_ms + 999) / 1000;
        inst->server.wait_timeout_s = s3 < 2 ? 2 : s3;
    }
    inst->log_handle = env->log_handle;
    my_pool_init(&inst->pool, &inst->server, (int)set.pool_size);
    my_pool_init(&inst->waiters, &inst->server, MY_POOL_MAX);
    rc = my_sql_init(&inst->sql, set.table, true);
    for (int i = 0; rc == DLOCK_OK && i < MY_STATEMENT_COUNT; i++)
        inst->server.statements[i] = inst->sql.text[i];
    /* Connect now, so a wrong address or password is reported at open. */
    if (rc == DLOCK_OK)
        rc = my_prepare_schema(inst, set.create_table);
    /* A lease row without the waker column cannot be armed: its waiters
     * back off. A table without the columns of shared holds cannot take
     * the downgraded one: refused up front (DLOCK_ENOTSUP), the exclusive
     * hold is kept, where a failing statement would cost it. */
    if (inst->no_waker)
        inst->head.capabilities_off |= DLOCK_CAP_NATIVE_WAIT | DLOCK_CAP_FAIR | DLOCK_CAP_CACHE;
    if (inst->head.no_shared_columns)
        inst->head.capabilities_off |= DLOCK_CAP_DOWNGRADE;
    /* No waker column: statements that do not name it. The connection the
     * schema was looked at with prepared none of those that change. */
    if (rc == DLOCK_OK && inst->no_waker) {
        my_sql_free(&inst->sql);
        rc = my_sql_init(&inst->sql, set.table, false);
        for (int i = 0; rc == DLOCK_OK && i < MY_STATEMENT_COUNT; i++)
            inst->server.statements[i] = inst->sql.text[i];
    }
    /* A keeper asks for its names this often (see my_wanted.h). */
    int64_t poll_ms = MY_CACHE_POLL_MS;
    dlock_settings_int(env->settings, "cache_poll_ms", &poll_ms);
    if (rc == DLOCK_OK && inst->head.mode->lease_rows && !inst->no_waker) {
        rc = my_wanted_new(&inst->server, inst->sql.wanted_poll, poll_ms, env->wanted, env->log_handle,
                           &inst->wanted);
        /* A request waits half an interval, on average, for the poll that
         * reads it: the core weighs that in what keeping a name costs. */
        inst->head.hearing_delay_us = poll_ms * 1000 / 2;
    }
    if (rc != DLOCK_OK) {
        my_close(inst);
        return rc;
    }
    dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "%s: ready, %s mode, table `%s`", inst->server.label,
                       inst->head.mode->name, set.table);
    *instance = inst;
    return DLOCK_OK;
}

/* A name whose holds may be kept (lease mode with the waker column only:
 * see my_wanted.h). */
static int my_watch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    return my_wanted_watch(inst->wanted, lk, ml->k.key, ml->k.key_len, &ml->watch);
}

static void my_unwatch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (ml->watch)
        my_wanted_unwatch(inst->wanted, ml->watch);
    ml->watch = NULL;
}

static const struct dlock_provider my_provider = {
    .version = DLOCK_PROVIDER_VERSION_8,
    .name = "mysql",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_SERVER_EXPIRY | DLOCK_CAP_MULTI_HOST |
                    DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE | DLOCK_CAP_NATIVE_WAIT |
                    DLOCK_CAP_FAIR | DLOCK_CAP_ELECTION | DLOCK_CAP_CACHE,
    .lock_priv_size = sizeof(struct my_lock),
    .settings = my_settings,
    .open = my_open,
    .close = my_close,
    .acquire = line_acquire,
    .release = sql_mode_release,
    .renew = sql_mode_renew,
    .renew_batch = my_renew_batch,
    .fence = sql_mode_fence,
    .lock_fini = my_lock_fini,
    .ctl = sql_mode_ctl,
    .abandon = my_abandon,
    .wait = line_wait,
    .wait_arm = line_wait_arm,
    .wait_disarm = line_wait_disarm,
    .list = sql_mode_list,
    .break_hold = sql_mode_break,
    .downgrade = sql_mode_downgrade,
    .value_put = sql_mode_value_put,
    .leader_get = sql_mode_leader_get,
    .acquire_send = my_acquire_send,
    .acquire_recv = my_acquire_recv,
    .acquire_drop = my_acquire_drop,
    .watch_wanted = my_watch_wanted,
    .unwatch_wanted = my_unwatch_wanted,
};

DLOCK_MODULE(my_provider)
