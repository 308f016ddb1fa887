/* backends/postgres/pg_lease.c - postgres lease mode (the default): a row
 * per name in a table (see pg_sql.c). One statement per operation, on
 * pooled connections; the hold is the row, not the connection, so a dropped
 * connection loses nothing: the next statement reconnects and the lease
 * decides. The server frees an unrenewed hold when its lease runs out (by
 * its own clock). */
#include "config.h"

#include "../common/lock_kind.h"
#include "pg_backend.h"
#include "pg_list.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A statement that names the columns of shared holds, with its answer
 * checked: NULL when it could not run (*rc set), else the result with
 * *rc DLOCK_OK, the SQL error, or the missing columns' DLOCK_ECONFIG. */
static PGresult *shared_exec(struct pg_instance *inst, int which, int n, const char *const *values,
                             const int *lengths, const int *formats, const char *what, int *rc)
{
    PGresult *res = pg_pool_exec(&inst->pool, which, n, values, lengths, formats, rc);
    if (!res)
        return NULL;
    *rc = pg_result_check(&inst->server, res, what);
    if (missing_shared_columns(res))
        *rc = shared_columns_error(inst);
    return res;
}

void pg_wanted_channel(const struct dlock_provider_lock *lk, char out[32])
{
    const struct pg_lock *pl = lk->priv;
    snprintf(out, 32, "%sw", pl->k.tag);
}

void pg_attempt_args(struct pg_attempt_args *a, const struct dlock_provider_lock *lk)
{
    const struct pg_lock *pl = lk->priv;
    unsigned limit = lk->mode == DLOCK_MODE_SEMAPHORE ? lk->permits : 0;
    snprintf(a->lease, sizeof a->lease, "%" PRId64, lk->lease_ms);
    if (limit)
        snprintf(a->kind, sizeof a->kind, "~p%u", limit);
    else
        snprintf(a->kind, sizeof a->kind, "~s");
    snprintf(a->permits, sizeof a->permits, "%u", limit);
    pg_wanted_channel(lk, a->wanted);
    bool shared = kind_is_shared(lk);
    const char *values[6] = { pl->k.key, lk->owner, a->lease, shared ? a->kind : a->wanted, a->permits, a->wanted };
    memcpy(a->values, values, sizeof values);
    for (int i = 0; i < 6; i++) {
        a->lengths[i] = i == 0 ? (int)pl->k.key_len : 0;
        a->formats[i] = i == 0;
    }
    a->n = shared ? 6 : 3;
    a->n_acquire = 4;
}

int pg_answer_take(struct pg_instance *inst, struct dlock_provider_lock *lk, const PGresult *res,
                   struct dlock_grant *g, bool *taken)
{
    (void)lk;
    int rc = pg_result_check(&inst->server, res, "acquire");
    *taken = rc == DLOCK_OK && PQntuples(res) == 1;
    if (*taken) {
        g->fence = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        g->has_fence = 1;
    }
    return rc;
}

int pg_answer_acquire(struct pg_instance *inst, struct dlock_provider_lock *lk, const PGresult *res,
                      struct dlock_grant *g)
{
    struct pg_lock *pl = lk->priv;
    int rc = pg_result_check(&inst->server, res, "acquire");
    if (rc == DLOCK_OK && (PQntuples(res) != 1 || PQnfields(res) != 3))
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
    return rc;
}

int pg_answer_shared(struct pg_instance *inst, struct dlock_provider_lock *lk, const struct pg_attempt_args *a,
                     const PGresult *res, struct dlock_grant *g)
{
    int rc = pg_result_check(&inst->server, res, "acquire");
    if (missing_shared_columns(res))
        rc = shared_columns_error(inst);
    if (rc == DLOCK_OK && (PQntuples(res) != 1 || PQnfields(res) != 4))
        rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: acquire returned %d rows", inst->server.label, PQntuples(res));
    if (rc == DLOCK_OK && !PQgetisnull(res, 0, 0)) {
        g->fence = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        g->has_fence = 1;
    } else if (rc == DLOCK_OK && !PQgetisnull(res, 0, 2) && strcmp(PQgetvalue(res, 0, 2), a->kind) != 0) {
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
    return rc;
}

void pg_answer_register_writer(struct pg_instance *inst, struct dlock_provider_lock *lk, const PGresult *res)
{
    struct pg_lock *pl = lk->priv;
    if (pg_result_check(&inst->server, res, "registering a waiting writer") == DLOCK_OK)
        pl->writer_registered = true;
}

/* One exclusive attempt; late: a fair look out of turn (see attempt_late in sql_mode.h),
 * which takes only a row free for PG_LATE_MS (PG_TAKE_LATE), else busy. */
static int take_row(struct pg_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g, bool late)
{
    struct pg_lock *pl = lk->priv;
    struct pg_attempt_args a;
    pg_attempt_args(&a, lk);
    int rc;
    PGresult *res;
    if (late) {
        if (!(res = pg_pool_exec(&inst->pool, PG_TAKE_LATE, a.n, a.values, a.lengths, a.formats, &rc)))
            return rc;
        bool taken;
        rc = pg_answer_take(inst, lk, res, g, &taken);
        if (taken) {
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
        res = pg_pool_exec(&inst->pool, PG_TAKE, a.n, a.values, a.lengths, a.formats, &rc);
        if (!res)
            return rc;
        bool taken;
        rc = pg_answer_take(inst, lk, res, g, &taken);
        PQclear(res);
        if (rc != DLOCK_OK || taken)
            return rc;
    }
    res = pg_pool_exec(&inst->pool, PG_ACQUIRE, a.n_acquire, a.values, a.lengths, a.formats, &rc);
    if (!res)
        return rc;
    rc = pg_answer_acquire(inst, lk, res, g);
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
    if (inst->head.no_shared_columns)
        return;
    struct pg_attempt_args a;
    pg_attempt_args(&a, lk);
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_REGISTER_WRITER, a.n, a.values, a.lengths, a.formats, &rc);
    if (res)
        pg_answer_register_writer(inst, lk, res);
    PQclear(res);
}

/* One attempt at a shared hold or a permit. */
static int shared_attempt(struct pg_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct pg_attempt_args a;
    pg_attempt_args(&a, lk);
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_SHARED_ACQUIRE, a.n, a.values, a.lengths, a.formats, &rc);
    if (!res)
        return rc;
    rc = pg_answer_shared(inst, lk, &a, res, g);
    PQclear(res);
    return rc;
}

/* An exclusive request kept waiting registers itself (see register_writer). */
static int exclusive_attempt(struct pg_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g,
                             bool late)
{
    int rc = take_row(inst, lk, g, late);
    if (rc == DLOCK_EBUSY)
        register_writer(inst, lk);
    return rc;
}

static int lease_attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct pg_instance *inst = instance;
    return kind_is_shared(lk) ? shared_attempt(inst, lk, g) : exclusive_attempt(inst, lk, g, false);
}

static int lease_attempt_late(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct pg_instance *inst = instance;
    return exclusive_attempt(inst, lk, g, true);
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
static int lease_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n,
                             int *results)
{
    struct pg_instance *inst = instance;
    return renew_by_kind(inst, renew_one_kind, locks, n, results);
}

static int lease_renew(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    int result;
    int rc = lease_renew_batch(inst, &lk, 1, &result);
    return rc == DLOCK_OK ? result : rc;
}

static int lease_release(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    const char *values[3] = { pl->k.key, lk->owner, pl->k.tag };
    int lengths[3] = { (int)pl->k.key_len, 0, 0 }, formats[3] = { 1, 0, 0 };
    int rc;
    bool sent_before = pl->release_sent_before;
    pl->release_sent_before = false;
    PGresult *res = pg_pool_exec(&inst->pool, kind_is_shared(lk) ? PG_SHARED_RELEASE : PG_RELEASE, 3, values,
                                 lengths, formats, &rc);
    if (!res)
        return rc;
    rc = pg_answer_release(inst, res, sent_before || pg_pool_last_resent());
    PQclear(res);
    return rc;
}

int pg_answer_release(struct pg_instance *inst, const PGresult *res, bool sent_before)
{
    int rc = pg_result_check(&inst->server, res, "release");
    /* Sent twice because the connection died under the first: a hold
     * already freed is the first one's work, not a loss (only our own row
     * is ever freed). */
    if (rc == DLOCK_OK && PQntuples(res) != 1)
        rc = sent_before ? DLOCK_OK : DLOCK_ENOTOWNER;
    return rc;
}

/* Our exclusive row made shared in one statement (PG_DOWNGRADE), which
 * also wakes the listeners: waiting readers may come in now. */
static int lease_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    const char *values[3] = { pl->k.key, lk->owner, pl->k.tag };
    int lengths[3] = { (int)pl->k.key_len, 0, 0 }, formats[3] = { 1, 0, 0 };
    int rc;
    PGresult *res = shared_exec(inst, PG_DOWNGRADE, 3, values, lengths, formats, "downgrade", &rc);
    if (!res)
        return rc;
    if (rc == DLOCK_OK && PQntuples(res) != 1) {
        rc = dlock_seterr(DLOCK_ELOST, "%s: the lock is no longer held by this owner (its lease ran out or it was "
                          "taken), so it was not downgraded", inst->server.label);
    }
    PQclear(res);
    return rc;
}

/* out->holder is a kind marker ("~s", "~p<N>"): says how many hold it. */
static int shared_status(struct pg_instance *inst, const struct sql_lock_key *k, dlock_status_info *out)
{
    const char *values[1] = { k->key };
    int lengths[1] = { (int)k->key_len }, formats[1] = { 1 };
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

/* The row's holder, fence and remaining lease. */
static int lease_status(void *instance, const struct sql_lock_key *k, dlock_status_info *out)
{
    struct pg_instance *inst = instance;
    int rc;
    const char *values[1] = { k->key };
    int lengths[1] = { (int)k->key_len }, formats[1] = { 1 };
    PGresult *res = pg_pool_exec(&inst->pool, PG_STATUS, 1, values, lengths, formats, &rc);
    if (res && (rc = pg_result_check(&inst->server, res, "status")) == DLOCK_OK && PQntuples(res) > 0) {
        out->fence = strtoull(PQgetvalue(res, 0, 1), NULL, 10);
        if (strcmp(PQgetvalue(res, 0, 3), "t") == 0) {
            out->held = 1;
            out->ttl_ms = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
            snprintf(out->holder, sizeof out->holder, "%s", PQgetvalue(res, 0, 0));
            if (out->holder[0] == '~')
                rc = shared_status(inst, k, out);
        }
    }
    PQclear(res);
    return rc;
}

static int lease_break(void *instance, const struct sql_lock_key *k, int *broken, uint64_t *fence)
{
    struct pg_instance *inst = instance;
    int rc;
    const char *values[2] = { k->key, k->tag };
    int lengths[2] = { (int)k->key_len, 0 }, formats[2] = { 1, 0 };
    PGresult *res = pg_pool_exec(&inst->pool, PG_BREAK, 2, values, lengths, formats, &rc);
    if (res && (rc = pg_result_check(&inst->server, res, "breaking a hold")) == DLOCK_OK) {
        *broken = PQntuples(res) == 1;
        *fence = *broken ? strtoull(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    }
    PQclear(res);
    return rc;
}

static int lease_list(void *instance, struct dlock_provider_list *req)
{
    struct pg_instance *inst = instance;
    return pg_list_page(&inst->pool, &inst->server, inst->head.prefix, req);
}

const struct sql_mode pg_lease_mode = {
    .name = "lease",
    .capabilities_off = 0,
    .lease_rows = true,
    .attempt = lease_attempt,
    .attempt_late = lease_attempt_late,
    .release = lease_release,
    .renew = lease_renew,
    .renew_batch = lease_renew_batch,
    .downgrade = lease_downgrade,
    .fence = NULL, /* every grant carries the row's fence */
    .status = lease_status,
    .break_hold = lease_break,
    .list = lease_list,
    .value_put = pg_lease_value_put,
    .leader_get = pg_lease_leader_get,
};
