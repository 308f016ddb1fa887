/* backends/postgres/postgres.c - the postgres backend module (dlock_postgres.so).
 *
 * Two modes, chosen by postgres.mode:
 *
 * lease (default): a row per name in a table (see pg_sql.c). One statement
 *   per operation, on pooled connections; the hold is the row, not the
 *   connection, so a dropped connection loses nothing: the next statement
 *   reconnects and the lease decides. The server frees an unrenewed hold
 *   when its lease runs out (by its own clock).
 *
 * session: PostgreSQL's own advisory locks (pg_try_advisory_lock on a 64-bit
 *   digest of the name), held by one connection per client that carries
 *   every hold of that client. A fence is drawn from a sequence only when
 *   the holder asks for one (dlock_fence), which keeps the lock itself as
 *   cheap as the bare advisory lock. The hold lives exactly as long as that
 *   session: if the connection breaks or the backend is terminated, every
 *   hold taken on it is lost, and the next renewal (the watchdog's, at
 *   lease/3) reports it.
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

#include "../common/lock_kind.h"
#include "../common/out_of_line.h"
#include "../common/sql_text.h"
#include "pg_conn.h"
#include "pg_line.h"
#include "pg_list.h"
#include "pg_sql.h"

#include <dlock/provider.h>
#include <endian.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(PG_STATEMENT_COUNT <= PG_MAX_STATEMENTS, "raise PG_MAX_STATEMENTS");

struct pg_instance {
    struct pg_server server;
    struct pg_sql sql;
    struct pg_pool pool;         /* lease-mode statements, status */
    struct pg_pool listeners;    /* connections that LISTEN while a lock is waited for */
    bool session_mode;
    bool no_shared_columns;      /* the table has none (create_table off): writers do not register, no downgrade */
    pthread_mutex_t holder_mu;   /* session mode: one connection carries the holds */
    PGconn *holder;
    uint64_t holder_generation;  /* bumped at each new holder connection */
    char prefix[65];
    void *log_handle;
};

struct pg_lock {
    struct sql_lock_key k;       /* the row's name; k.tag is the NOTIFY channel */
    char advisory[24];           /* the session-mode key (k.digest), as decimal text */
    PGconn *listener;            /* a shared request's, while LISTENing on channel */
    struct pg_line line;         /* an exclusive or permit request's place in the line */
    bool timer_look;             /* the last wait ran out: a fair request in the line may look */
    bool last_busy;              /* the last attempt found the lock held */
    bool writer_registered;      /* an exclusive request kept waiting said so in the row */
    uint64_t generation;         /* session mode: holder connection the hold was taken on */
};
/* sql_renew_batch_init reads the key at the start of each lock's state. */
_Static_assert(offsetof(struct pg_lock, k) == 0, "the sql_lock_key comes first");

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

/* ---- per-lock names ------------------------------------------------------------- */

static int ensure_key(struct pg_instance *inst, struct dlock_provider_lock *lk)
{
    struct pg_lock *pl = lk->priv;
    if (pl->k.key)
        return DLOCK_OK;
    int rc = sql_lock_key_init(&pl->k, inst->prefix, lk->name, lk->name_len);
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

/* ---- lease mode -------------------------------------------------------------------------- */

/* The statement named a column of shared holds that the table lacks. */
static bool missing_shared_columns(const PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return state && strcmp(state, "42703") == 0;
}

static int shared_columns_error(const struct pg_instance *inst)
{
    return dlock_seterr(DLOCK_ECONFIG,
                        "%s: table \"%s\" has no columns for shared holds and semaphores: add them with the "
                        "ALTER TABLE in dlock.conf(5), or let libdlock do it (postgres.create_table = true)",
                        inst->server.label, inst->sql.table);
}

/* One exclusive attempt; late: a fair look out of turn (see pg_acquire),
 * which takes only a row free for PG_LATE_MS (PG_TAKE_LATE), else busy. */
static int lease_try(struct pg_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g, bool late)
{
    struct pg_lock *pl = lk->priv;
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRId64, lk->lease_ms);
    const char *values[3] = { pl->k.key, lk->owner, lease };
    int lengths[3] = { (int)pl->k.key_len, 0, 0 }, formats[3] = { 1, 0, 0 };
    int rc;
    PGresult *res;
    if (late) {
        if (!(res = pg_pool_exec(&inst->pool, PG_TAKE_LATE, 3, values, lengths, formats, &rc)))
            return rc;
        rc = pg_result_check(&inst->server, res, "acquire");
        if (rc == DLOCK_OK && PQntuples(res) == 1) {
            g->fence = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
            g->has_fence = 1;
            pl->writer_registered = false;
        } else if (rc == DLOCK_OK) {
            g->retry_hint_ms = -1; /* held, or not free for long: a while in line again */
            rc = DLOCK_EBUSY;
        }
        PQclear(res);
        return rc;
    }
    if (!pl->last_busy) {
        /* Fast path: take the existing row. No row back means it is held
         * or does not exist yet; the upsert below tells which. */
        res = pg_pool_exec(&inst->pool, PG_TAKE, 3, values, lengths, formats, &rc);
        if (!res)
            return rc;
        rc = pg_result_check(&inst->server, res, "acquire");
        if (rc == DLOCK_OK && PQntuples(res) == 1) {
            g->fence = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
            g->has_fence = 1;
        }
        bool done = rc != DLOCK_OK || PQntuples(res) == 1;
        PQclear(res);
        if (done)
            return rc;
    }
    res = pg_pool_exec(&inst->pool, PG_ACQUIRE, 3, values, lengths, formats, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "acquire");
    if (rc == DLOCK_OK && (PQntuples(res) != 1 || PQnfields(res) != 2))
        rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: acquire returned %d rows", inst->server.label, PQntuples(res));
    if (rc == DLOCK_OK) {
        if (!PQgetisnull(res, 0, 0)) {
            g->fence = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
            g->has_fence = 1;
            pl->writer_registered = false; /* the grant raised the fence: that voids it */
        } else {
            g->retry_hint_ms = PQgetisnull(res, 0, 1) ? -1 : strtoll(PQgetvalue(res, 0, 1), NULL, 10);
            rc = DLOCK_EBUSY;
        }
    }
    /* While contended, go straight to the statement that reports the
     * holder's remaining lease. */
    pl->last_busy = rc == DLOCK_EBUSY;
    PQclear(res);
    return rc;
}

/* An exclusive request kept waiting says so in the row, so that shared
 * requests after it wait behind it instead of starving it: behind shared
 * holders, and behind an exclusive hold, which may be downgraded to a
 * shared one or released while this request waits. Best effort: if it
 * fails, the request still waits, only without that priority. */
static void register_writer(struct pg_instance *inst, struct dlock_provider_lock *lk)
{
    struct pg_lock *pl = lk->priv;
    if (inst->no_shared_columns)
        return;
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRId64, lk->lease_ms);
    const char *values[3] = { pl->k.key, lk->owner, lease };
    int lengths[3] = { (int)pl->k.key_len, 0, 0 }, formats[3] = { 1, 0, 0 };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_REGISTER_WRITER, 3, values, lengths, formats, &rc);
    if (res && pg_result_check(&inst->server, res, "registering a waiting writer") == DLOCK_OK)
        pl->writer_registered = true;
    PQclear(res);
}

/* One attempt at a shared hold or a permit. */
static int shared_try(struct pg_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct pg_lock *pl = lk->priv;
    char lease[24], kind[16], permits[16];
    unsigned limit = lk->mode == DLOCK_MODE_SEMAPHORE ? lk->permits : 0;
    snprintf(lease, sizeof lease, "%" PRId64, lk->lease_ms);
    if (limit)
        snprintf(kind, sizeof kind, "~p%u", limit);
    else
        snprintf(kind, sizeof kind, "~s");
    snprintf(permits, sizeof permits, "%u", limit);
    const char *values[5] = { pl->k.key, lk->owner, lease, kind, permits };
    int lengths[5] = { (int)pl->k.key_len, 0, 0, 0, 0 }, formats[5] = { 1, 0, 0, 0, 0 };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_SHARED_ACQUIRE, 5, values, lengths, formats, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "acquire");
    if (missing_shared_columns(res))
        rc = shared_columns_error(inst);
    if (rc == DLOCK_OK && (PQntuples(res) != 1 || PQnfields(res) != 3))
        rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: acquire returned %d rows", inst->server.label, PQntuples(res));
    if (rc == DLOCK_OK && !PQgetisnull(res, 0, 0)) {
        g->fence = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        g->has_fence = 1;
    } else if (rc == DLOCK_OK && !PQgetisnull(res, 0, 2) && strcmp(PQgetvalue(res, 0, 2), kind) != 0) {
        /* The kind a name is held in ("~s", "~p<N>") is its own. */
        const char *held = PQgetvalue(res, 0, 2);
        rc = kind_mismatch(inst->server.label, lk, held[1] == 'p' ? strtoull(held + 2, NULL, 10) : 0);
    } else if (rc == DLOCK_OK) {
        g->retry_hint_ms = PQgetisnull(res, 0, 1) ? -1 : strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        /* Nothing left of a lease, yet busy: a waiting writer's turn, whose
         * end nobody knows. Wait for its release like any other, instead of
         * asking again at once. */
        if (g->retry_hint_ms == 0)
            g->retry_hint_ms = -1;
        rc = DLOCK_EBUSY;
    }
    PQclear(res);
    return rc;
}

/* Every hold of one kind due together in one statement (PG_RENEW_BATCH or
 * PG_SHARED_RENEW_BATCH): the holds still ours come back by position, the
 * others expired or were taken (DLOCK_ELOST). */
static int renew_statement(struct pg_instance *inst, int which, struct dlock_provider_lock *const *locks, size_t n,
                           int *results)
{
    struct sql_renew_batch b;
    char *arrays[3] = { NULL, NULL, NULL };
    int rc = sql_renew_batch_init(&b, locks, n);
    if (rc != DLOCK_OK)
        return rc;
    rc = pg_sql_renew_batch_arrays(&b, arrays);
    sql_renew_batch_free(&b);
    PGresult *res = NULL;
    if (rc == DLOCK_OK)
        res = pg_pool_exec(&inst->pool, which, 3, (const char *const *)arrays, NULL, NULL, &rc);
    if (res) {
        rc = pg_result_check(&inst->server, res, "renew");
        for (size_t i = 0; rc == DLOCK_OK && i < n; i++)
            results[i] = DLOCK_ELOST;
        for (int r = 0; rc == DLOCK_OK && r < PQntuples(res); r++) {
            long long at = strtoll(PQgetvalue(res, r, 0), NULL, 10);
            if (at >= 1 && (size_t)at <= n)
                results[at - 1] = DLOCK_OK;
        }
        PQclear(res);
    }
    for (int j = 0; j < 3; j++)
        free(arrays[j]);
    for (size_t i = 0; rc != DLOCK_OK && i < n; i++)
        results[i] = rc;
    return rc;
}

static int renew_one_kind(void *ctx, bool shared, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    return renew_statement(ctx, shared ? PG_SHARED_RENEW_BATCH : PG_RENEW_BATCH, locks, n, results);
}

/* Exclusive holds in one statement, shared holds and permits (if any) in
 * a second. */
static int lease_renew_batch(struct pg_instance *inst, struct dlock_provider_lock *const *locks, size_t n,
                             int *results)
{
    return renew_by_kind(inst, renew_one_kind, locks, n, results);
}

static int lease_renew(struct pg_instance *inst, struct dlock_provider_lock *lk)
{
    int result;
    int rc = lease_renew_batch(inst, &lk, 1, &result);
    return rc == DLOCK_OK ? result : rc;
}

static int lease_release(struct pg_instance *inst, struct dlock_provider_lock *lk)
{
    struct pg_lock *pl = lk->priv;
    const char *values[3] = { pl->k.key, lk->owner, pl->k.tag };
    int lengths[3] = { (int)pl->k.key_len, 0, 0 }, formats[3] = { 1, 0, 0 };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, kind_is_shared(lk) ? PG_SHARED_RELEASE : PG_RELEASE, 3, values,
                                 lengths, formats, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "release");
    /* Sent twice because the connection died under the first: a hold
     * already freed is the first one's work, not a loss (only our own row
     * is ever freed). */
    if (rc == DLOCK_OK && PQntuples(res) != 1)
        rc = pg_pool_last_resent() ? DLOCK_OK : DLOCK_ENOTOWNER;
    PQclear(res);
    return rc;
}

/* Our exclusive row made shared in one statement (PG_DOWNGRADE), which
 * also wakes the listeners: waiting readers may come in now. */
static int lease_downgrade(struct pg_instance *inst, struct dlock_provider_lock *lk)
{
    struct pg_lock *pl = lk->priv;
    const char *values[3] = { pl->k.key, lk->owner, pl->k.tag };
    int lengths[3] = { (int)pl->k.key_len, 0, 0 }, formats[3] = { 1, 0, 0 };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_DOWNGRADE, 3, values, lengths, formats, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "downgrade");
    if (missing_shared_columns(res))
        rc = shared_columns_error(inst);
    if (rc == DLOCK_OK && PQntuples(res) != 1) {
        rc = dlock_seterr(DLOCK_ELOST, "%s: the lock is no longer held by this owner (its lease ran out or it was "
                          "taken), so it was not downgraded", inst->server.label);
    }
    PQclear(res);
    return rc;
}

/* ---- session mode ------------------------------------------------------------------------ */

/* Runs one statement on the holder connection (connecting it if needed),
 * under holder_mu. *generation gets the connection's generation. */
static PGresult *holder_exec(struct pg_instance *inst, int which, int n, const char *const *values,
                             uint64_t *generation, int *rc)
{
    pthread_mutex_lock(&inst->holder_mu);
    if (!inst->holder) {
        inst->holder = pg_connect(&inst->server, rc);
        if (!inst->holder) {
            pthread_mutex_unlock(&inst->holder_mu);
            return NULL;
        }
        inst->holder_generation++;
    }
    *generation = inst->holder_generation;
    PGresult *res = pg_exec_prepared(&inst->server, &inst->holder, which, n, values, NULL, NULL, rc);
    if (!inst->holder)
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                           "%s: the session holding this client's advisory locks ended: they are lost",
                           inst->server.label);
    pthread_mutex_unlock(&inst->holder_mu);
    return res;
}

static bool session_still_ours(struct pg_instance *inst, const struct pg_lock *pl);

static int session_try(struct pg_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct pg_lock *pl = lk->priv;
    const char *values[1] = { pl->advisory };
    uint64_t generation;
    int rc;
    PGresult *res = holder_exec(inst, PG_SESSION_ACQUIRE, 1, values, &generation, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "pg_try_advisory_lock");
    if (rc == DLOCK_OK && PQntuples(res) != 1)
        rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: pg_try_advisory_lock returned %d rows", inst->server.label,
                          PQntuples(res));
    if (rc == DLOCK_OK) {
        if (strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
            g->retry_hint_ms = -1;
            rc = DLOCK_EBUSY;
        } else {
            /* No fence yet: pg_fence draws one when the holder asks. */
            pl->generation = generation;
        }
    }
    PQclear(res);
    return rc;
}

/* Draws the hold's fencing token from the sequence, in one statement that
 * also checks this session still holds the lock. */
static int session_fence(struct pg_instance *inst, struct dlock_provider_lock *lk, uint64_t *out)
{
    struct pg_lock *pl = lk->priv;
    if (!session_still_ours(inst, pl))
        return dlock_seterr(DLOCK_ELOST, "%s: the session that held lock '%s' ended", inst->server.label, lk->name);
    const char *values[1] = { pl->advisory };
    uint64_t generation;
    int rc;
    PGresult *res = holder_exec(inst, PG_SESSION_FENCE, 1, values, &generation, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "drawing a fence");
    if (rc == DLOCK_OK && (generation != pl->generation || PQntuples(res) != 1 || PQgetisnull(res, 0, 0)))
        rc = dlock_seterr(DLOCK_ELOST, "%s: the session no longer holds lock '%s'", inst->server.label, lk->name);
    if (rc == DLOCK_OK)
        *out = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return rc;
}

/* The hold is on the current holder connection, or it is gone. */
static bool session_still_ours(struct pg_instance *inst, const struct pg_lock *pl)
{
    pthread_mutex_lock(&inst->holder_mu);
    bool ours = inst->holder && inst->holder_generation == pl->generation;
    pthread_mutex_unlock(&inst->holder_mu);
    return ours;
}

/* One round trip proves the session alive for every hold taken on it. */
static int session_renew_batch(struct pg_instance *inst, struct dlock_provider_lock *const *locks, size_t n,
                               int *results)
{
    bool any_ours = false;
    for (size_t i = 0; i < n && !any_ours; i++)
        any_ours = session_still_ours(inst, locks[i]->priv);
    /* A round trip proves the session alive; an advisory lock cannot be
     * taken from a live session by anyone else. */
    uint64_t generation = 0;
    int rc = DLOCK_ELOST;
    PGresult *res = any_ours ? holder_exec(inst, PG_SESSION_CHECK, 0, NULL, &generation, &rc) : NULL;
    if (res) {
        rc = pg_result_check(&inst->server, res, "session check");
        PQclear(res);
    }
    /* A hold on an earlier session is lost whatever the check said; on the
     * current one it shares the check's fate. */
    for (size_t i = 0; i < n; i++) {
        const struct pg_lock *pl = locks[i]->priv;
        results[i] = !session_still_ours(inst, pl) || (res && generation != pl->generation) ? DLOCK_ELOST : rc;
    }
    return DLOCK_OK;
}

static int session_renew(struct pg_instance *inst, struct dlock_provider_lock *lk)
{
    int result;
    session_renew_batch(inst, &lk, 1, &result);
    if (result == DLOCK_ELOST)
        return dlock_seterr(DLOCK_ELOST, "%s: the session that held lock '%s' ended", inst->server.label, lk->name);
    return result;
}

static int session_release(struct pg_instance *inst, struct dlock_provider_lock *lk)
{
    struct pg_lock *pl = lk->priv;
    if (!session_still_ours(inst, pl))
        return DLOCK_ENOTOWNER;
    const char *values[2] = { pl->advisory, pl->k.tag };
    uint64_t generation;
    int rc;
    PGresult *res = holder_exec(inst, PG_SESSION_RELEASE, 2, values, &generation, &rc);
    if (!res)
        return rc == DLOCK_EUNAVAILABLE ? DLOCK_ENOTOWNER : rc; /* the session, and the lock, are gone */
    rc = pg_result_check(&inst->server, res, "pg_advisory_unlock");
    if (rc == DLOCK_OK && (generation != pl->generation || PQntuples(res) != 1 ||
                           strcmp(PQgetvalue(res, 0, 0), "t") != 0))
        rc = DLOCK_ENOTOWNER;
    PQclear(res);
    return rc;
}

/* ---- the provider --------------------------------------------------------------------------- */

static int try_once(struct pg_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    if (inst->session_mode)
        return session_try(inst, lk, g);
    return kind_is_shared(lk) ? shared_try(inst, lk, g) : lease_try(inst, lk, g, false);
}

/* Exclusive and permit requests wait in the name's line; shared ones
 * listen themselves. */
static bool waits_in_line(const struct dlock_provider_lock *lk)
{
    return lk->mode != DLOCK_MODE_SHARED;
}

static int pg_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    int rc = ensure_key(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    drain_notifications(pl);
    pg_line_drain(&pl->line);
    bool fair = (lk->flags & DLOCK_LOCK_FAIR) != 0, timer_look = pl->timer_look;
    pl->timer_look = false;
    if (fair && !waits_in_line(lk))
        return dlock_seterr(DLOCK_ENOTSUP, "%s: fair mode is for exclusive holds and permits; shared holds are "
                            "granted together", inst->server.label);
    if (fair && pl->line.state == PG_LINE_OUT &&
        pg_line_enter(&inst->listeners, &inst->pool, &pl->line, pl->k.digest, pl->k.tag) != DLOCK_OK)
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN, "%s: cannot enter the line (%s); this look is not "
                           "in turn", inst->server.label, dlock_errmsg());
    if (fair && pl->line.state == PG_LINE_ASKED) {
        /* Others are in the line before us: not our turn to look. A head
         * that hangs (a holder stopped with the gate, its lease gone) would
         * hold the line for good, so a lease-mode exclusive request whose
         * wait ran out looks out of turn, but may take only a row free for
         * PG_LATE_MS: at a holder's expiry, the live head looks first. */
        if (!timer_look || inst->session_mode || lk->mode != DLOCK_MODE_EXCLUSIVE) {
            g->retry_hint_ms = -1;
            return DLOCK_EBUSY;
        }
        rc = lease_try(inst, lk, g, true);
    } else {
        rc = try_once(inst, lk, g);
    }
    if (waits_in_line(lk)) {
        /* The line is joined in wait, which a try-once never reaches. */
        if (rc == DLOCK_OK)
            pg_line_granted(&inst->listeners, &pl->line, lk->mode == DLOCK_MODE_EXCLUSIVE);
        else if (rc != DLOCK_EBUSY)
            pg_line_leave(&inst->listeners, &pl->line); /* no abandon follows a failure */
    } else if (rc == DLOCK_EBUSY && !pl->listener) {
        /* Listen, then look again: a release in between is then heard. */
        if (start_listening(inst, pl) == DLOCK_OK)
            rc = try_once(inst, lk, g);
        else
            dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN, "%s: cannot LISTEN (%s); polling instead",
                               inst->server.label, dlock_errmsg());
    }
    if (rc == DLOCK_EBUSY && !inst->session_mode && !kind_is_shared(lk))
        register_writer(inst, lk);
    return rc;
}

static int pg_release(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    int rc = inst->session_mode ? session_release(inst, lk) : lease_release(inst, lk);
    /* After the release: the next waiter's look finds the lock free. Also
     * when the release failed (the hold was lost): the gate goes anyway. */
    pg_line_pass(&inst->listeners, &pl->line);
    return rc;
}

static int pg_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    struct pg_instance *inst = instance;
    return inst->session_mode ? session_renew_batch(inst, locks, n, results)
                              : lease_renew_batch(inst, locks, n, results);
}

static int pg_renew(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    return inst->session_mode ? session_renew(inst, lk) : lease_renew(inst, lk);
}

static int pg_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    if (inst->session_mode) /* the instance does not claim it: not called */
        return dlock_seterr(DLOCK_ENOTSUP, "%s: session mode has no shared holds to downgrade to",
                            inst->server.label);
    return lease_downgrade(inst, lk);
}

static int pg_fence(void *instance, struct dlock_provider_lock *lk, uint64_t *out)
{
    struct pg_instance *inst = instance;
    if (!inst->session_mode) /* lease mode: acquire always returns the row's fence */
        return dlock_seterr(DLOCK_EINTERNAL, "postgres: a lease-mode hold without a fence");
    return session_fence(inst, lk, out);
}

static int pg_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    int64_t deadline = dlock_provider_now_ms() + timeout_ms; /* the join's connect counts */
    if (waits_in_line(lk) && pl->line.state == PG_LINE_OUT) {
        /* Joined here, after a busy answer: the answer to the join comes
         * when we are at the head, and the look made then sees a release
         * that came before our LISTEN. */
        int rc = pg_line_join(&inst->listeners, &inst->pool, &pl->line, pl->k.digest, pl->k.tag);
        if (rc != DLOCK_OK)
            dlock_provider_log(inst->log_handle, rc == DLOCK_EBUSY ? DLOCK_LOG_DEBUG : DLOCK_LOG_WARN,
                               "%s: cannot wait in line (%s); polling instead", inst->server.label, dlock_errmsg());
    }
    timeout_ms = deadline - dlock_provider_now_ms();
    if (timeout_ms < 0)
        timeout_ms = 0;
    if (pl->line.state != PG_LINE_OUT) {
        int rc = pg_line_wait(&inst->listeners, &pl->line, timeout_ms, wake_fd, inst->log_handle, inst->server.label);
        pl->timer_look = rc == DLOCK_ETIMEDOUT;
        if (rc != DLOCK_OK || pl->line.state != PG_LINE_OUT || !waits_in_line(lk))
            return rc;
        /* The request failed and took us out of the line (logged): not at
         * once again, which would spin while the failure lasts. */
        return out_of_line_wait(wake_fd, deadline - dlock_provider_now_ms());
    }
    if (!pl->listener) /* no listener or line (it could not be set up): look again soon */
        return out_of_line_wait(wake_fd, timeout_ms);
    for (;;) {
        PGnotify *n = PQnotifies(pl->listener);
        if (n) {
            PQfreemem(n);
            return DLOCK_OK;
        }
        int w = pg_wait_socket(pl->listener, wake_fd, deadline - dlock_provider_now_ms());
        if (w == 0)
            return dlock_provider_now_ms() >= deadline ? DLOCK_ETIMEDOUT : DLOCK_OK;
        if (w == 2)
            return DLOCK_OK;
        if (w < 0 || !PQconsumeInput(pl->listener)) {
            /* The listener died: drop it and let the core try again, which
             * listens anew on a fresh connection. */
            dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN, "%s: listener connection lost: %s",
                               inst->server.label, PQerrorMessage(pl->listener));
            PQfinish(pl->listener);
            pg_pool_put(&inst->listeners, NULL);
            pl->listener = NULL;
            return DLOCK_OK;
        }
    }
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

/* out->holder is a kind marker ("~s", "~p<N>"): says how many hold it. */
static int shared_status(struct pg_instance *inst, const struct pg_lock *pl, dlock_status_info *out)
{
    const char *values[1] = { pl->k.key };
    int lengths[1] = { (int)pl->k.key_len }, formats[1] = { 1 };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_SHARED_STATUS, 1, values, lengths, formats, &rc);
    if (res && (rc = pg_result_check(&inst->server, res, "status")) == DLOCK_OK && PQntuples(res) == 1) {
        long long n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        kind_holders_text(out->holder, sizeof out->holder, n,
                          out->holder[1] == 'p' ? strtoul(out->holder + 2, NULL, 10) : 0);
    }
    PQclear(res);
    return rc;
}

static int pg_status(struct pg_instance *inst, struct dlock_ctl_status *arg)
{
    struct dlock_provider_lock lk = { .name = arg->name, .name_len = arg->name_len };
    struct pg_lock pl = { 0 };
    lk.priv = &pl;
    int rc = ensure_key(inst, &lk);
    if (rc != DLOCK_OK)
        return rc;
    dlock_status_info *out = arg->out;
    out->held = 0;
    out->fence = 0;
    out->holder_pid = -1;
    out->ttl_ms = -1;
    out->holder[0] = '\0';
    PGresult *res;
    if (inst->session_mode) {
        const char *values[1] = { pl.advisory };
        res = pg_pool_exec(&inst->pool, PG_SESSION_STATUS, 1, values, NULL, NULL, &rc);
        if (res && (rc = pg_result_check(&inst->server, res, "status")) == DLOCK_OK && PQntuples(res) > 0) {
            out->held = 1;
            snprintf(out->holder, sizeof out->holder, "server backend pid %s", PQgetvalue(res, 0, 0));
        }
    } else {
        const char *values[1] = { pl.k.key };
        int lengths[1] = { (int)pl.k.key_len }, formats[1] = { 1 };
        res = pg_pool_exec(&inst->pool, PG_STATUS, 1, values, lengths, formats, &rc);
        if (res && (rc = pg_result_check(&inst->server, res, "status")) == DLOCK_OK && PQntuples(res) > 0) {
            out->fence = strtoull(PQgetvalue(res, 0, 1), NULL, 10);
            if (strcmp(PQgetvalue(res, 0, 3), "t") == 0) {
                out->held = 1;
                out->ttl_ms = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
                snprintf(out->holder, sizeof out->holder, "%s", PQgetvalue(res, 0, 0));
                if (out->holder[0] == '~')
                    rc = shared_status(inst, &pl, out);
            }
        }
    }
    PQclear(res);
    sql_lock_key_free(&pl.k);
    return rc;
}

static int pg_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    struct pg_instance *inst = instance;
    if (inst->session_mode)
        return dlock_seterr(DLOCK_ENOTSUP, "%s: session mode cannot break a hold: it is the holder's own session's "
                            "(end that session with pg_terminate_backend instead)", inst->server.label);
    struct sql_lock_key k;
    int rc = sql_lock_key_init(&k, inst->prefix, name, name_len);
    if (rc != DLOCK_OK)
        return rc;
    const char *values[2] = { k.key, k.tag };
    int lengths[2] = { (int)k.key_len, 0 }, formats[2] = { 1, 0 };
    PGresult *res = pg_pool_exec(&inst->pool, PG_BREAK, 2, values, lengths, formats, &rc);
    if (res && (rc = pg_result_check(&inst->server, res, "breaking a hold")) == DLOCK_OK) {
        *broken = PQntuples(res) == 1;
        *fence = *broken ? strtoull(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    }
    PQclear(res);
    sql_lock_key_free(&k);
    return rc;
}

static int pg_list(void *instance, struct dlock_provider_list *req)
{
    struct pg_instance *inst = instance;
    if (inst->session_mode)
        return dlock_seterr(DLOCK_ENOTSUP, "%s: session mode cannot list its locks: an advisory lock carries a "
                            "digest of the name, not the name (lease mode can)", inst->server.label);
    return pg_list_page(&inst->pool, &inst->server, inst->prefix, req);
}

static int pg_ctl(void *instance, int op, void *arg)
{
    struct pg_instance *inst = instance;
    if (op == DLOCK_CTL_STATUS)
        return pg_status(inst, arg);
    if (op == DLOCK_CTL_CAPABILITIES) {
        /* One session carries every hold of a client, and PostgreSQL never
         * lets a session conflict with itself: a shared advisory lock of
         * one handle would not keep out an exclusive one of another. With
         * no shared holds there is nothing to downgrade to. */
        if (inst->session_mode)
            *(unsigned *)arg &= ~(unsigned)(DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE);
        /* A table without the columns of shared holds cannot take the
         * downgraded one: refused up front (DLOCK_ENOTSUP), the exclusive
         * hold is kept, where a failing statement would cost it. */
        if (inst->no_shared_columns)
            *(unsigned *)arg &= ~(unsigned)DLOCK_CAP_DOWNGRADE;
        return DLOCK_OK;
    }
    return DLOCK_ENOTSUP;
}

/* A table made before shared holds existed: give it their columns, or say
 * how (exclusive locks work without them; shared and permit requests fail
 * until then). */
static int add_shared_columns(struct pg_instance *inst, bool create)
{
    if (!create) {
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                           "%s: table \"%s\" has no columns for shared holds and semaphores; they will fail "
                           "until it has them (ALTER TABLE in dlock.conf(5))",
                           inst->server.label, inst->sql.table);
        return DLOCK_OK;
    }
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_ADD_SHARED_COLUMNS, 0, NULL, NULL, NULL, &rc);
    if (res) {
        rc = pg_result_check(&inst->server, res, "ALTER TABLE (the columns of shared holds)");
        PQclear(res);
    }
    return rc;
}

/* Creates the table and sequence when missing (and allowed to). */
static int prepare_schema(struct pg_instance *inst, bool create)
{
    char table[PG_TABLE_MAX + 3], sequence[PG_TABLE_MAX + 9];
    snprintf(table, sizeof table, "\"%s\"", inst->sql.table);
    snprintf(sequence, sizeof sequence, "\"%s_fence\"", inst->sql.table);
    const char *values[2] = { table, sequence };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_EXISTS, 2, values, NULL, NULL, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "looking for the lock table");
    bool have_table = rc == DLOCK_OK && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    bool have_sequence = rc == DLOCK_OK && strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    bool have_columns = rc == DLOCK_OK && strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    PQclear(res);
    if (rc == DLOCK_OK && have_table && !have_columns)
        rc = add_shared_columns(inst, create);
    inst->no_shared_columns = have_table && !have_columns && !create;
    if (rc != DLOCK_OK || (have_table && have_sequence))
        return rc;
    if (!create)
        return dlock_seterr(DLOCK_ECONFIG,
                            "%s: table \"%s\" or sequence \"%s_fence\" is missing and postgres.create_table is false: "
                            "create them with the DDL in dlock.conf(5)",
                            inst->server.label, inst->sql.table, inst->sql.table);
    const int ddl[2] = { have_table ? -1 : PG_CREATE_TABLE, have_sequence ? -1 : PG_CREATE_SEQUENCE };
    for (int i = 0; i < 2 && rc == DLOCK_OK; i++) {
        if (ddl[i] < 0)
            continue;
        res = pg_pool_exec(&inst->pool, ddl[i], 0, NULL, NULL, NULL, &rc);
        if (!res)
            break;
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        /* Two processes creating it at once: the loser sees a duplicate
         * (of the row in pg_type, of the relation, or of the type). */
        bool raced = state && (strcmp(state, "23505") == 0 || strcmp(state, "42P07") == 0 ||
                               strcmp(state, "42710") == 0);
        if (!raced)
            rc = pg_result_check(&inst->server, res, i == 0 ? "CREATE TABLE" : "CREATE SEQUENCE");
        PQclear(res);
    }
    return rc;
}

static void pg_close(void *instance)
{
    struct pg_instance *inst = instance;
    if (inst->holder)
        PQfinish(inst->holder); /* ends the session: the server frees its advisory locks */
    pthread_mutex_destroy(&inst->holder_mu);
    pg_pool_destroy(&inst->listeners);
    pg_pool_destroy(&inst->pool);
    pg_sql_free(&inst->sql);
    pg_server_free(&inst->server);
    free(inst);
}

static int pg_open(void **instance, const struct dlock_provider_env *env)
{
    const dlock_settings *s = env->settings;
    struct pg_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory");
    pthread_mutex_init(&inst->holder_mu, NULL);
    struct sql_settings set;
    int rc = sql_settings_read(s, "postgres", env->prefix, PG_TABLE_MAX, sizeof inst->prefix - 1, &set);
    if (rc == DLOCK_OK)
        rc = pg_server_from_settings(&inst->server, s);
    if (rc != DLOCK_OK) {
        pthread_mutex_destroy(&inst->holder_mu);
        free(inst);
        return rc;
    }
    inst->session_mode = set.session_mode;
    snprintf(inst->prefix, sizeof inst->prefix, "%s", set.prefix);
    inst->log_handle = env->log_handle;
    pg_pool_init(&inst->pool, &inst->server, (int)set.pool_size);
    pg_pool_init(&inst->listeners, &inst->server, PG_POOL_MAX);
    rc = pg_sql_init(&inst->sql, set.table);
    for (int i = 0; rc == DLOCK_OK && i < PG_STATEMENT_COUNT; i++)
        inst->server.statements[i] = inst->sql.text[i];
    /* Connect now, so a wrong address or password is reported at open, and
     * make sure the table exists. */
    if (rc == DLOCK_OK)
        rc = prepare_schema(inst, set.create_table);
    if (rc != DLOCK_OK) {
        pg_close(inst);
        return rc;
    }
    dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "%s: ready, %s mode, table \"%s\"", inst->server.label,
                       set.session_mode ? "session" : "lease", set.table);
    *instance = inst;
    return DLOCK_OK;
}

static const struct dlock_provider pg_provider = {
    .version = DLOCK_PROVIDER_VERSION_4,
    .name = "postgres",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_NATIVE_WAIT | DLOCK_CAP_FAIR | DLOCK_CAP_SERVER_EXPIRY |
                    DLOCK_CAP_MULTI_HOST | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE,
    .lock_priv_size = sizeof(struct pg_lock),
    .settings = pg_settings,
    .open = pg_open,
    .close = pg_close,
    .acquire = pg_acquire,
    .release = pg_release,
    .renew = pg_renew,
    .fence = pg_fence,
    .renew_batch = pg_renew_batch,
    .wait = pg_wait,
    .lock_fini = pg_lock_fini,
    .ctl = pg_ctl,
    .abandon = pg_abandon,
    .list = pg_list,
    .break_hold = pg_break,
    .downgrade = pg_downgrade,
};

DLOCK_MODULE(pg_provider)
