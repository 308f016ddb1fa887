/* backends/postgres/pg_session.c - postgres session mode: PostgreSQL's own
 * advisory locks (pg_try_advisory_lock on a 64-bit digest of the name),
 * held by one connection per client that carries every hold of that
 * client. A fence is drawn from a sequence only when the holder asks for
 * one (dlock_fence), which keeps the lock itself as cheap as the bare
 * advisory lock. The hold lives exactly as long as that session: if the
 * connection breaks or the backend is terminated, every hold taken on it is
 * lost, and the next renewal (the watchdog's, at lease/3) reports it. */
#include "config.h"

#include "pg_backend.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs one statement on the holder connection (connecting it if needed),
 * under holder_mu. *generation gets the connection's generation. */
static PGresult *holder_exec(struct pg_instance *inst, int which, int n, const char *const *values,
                             uint64_t *generation, int *rc)
{
    pthread_mutex_lock(&inst->head.holder_mu);
    if (!inst->holder) {
        inst->holder = pg_connect(&inst->server, rc);
        if (!inst->holder) {
            pthread_mutex_unlock(&inst->head.holder_mu);
            return NULL;
        }
        inst->head.holder_generation++;
    }
    *generation = inst->head.holder_generation;
    PGresult *res = pg_exec_prepared(&inst->server, &inst->holder, which, n, values, NULL, NULL, rc);
    if (!inst->holder)
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                           "%s: the session holding this client's advisory locks ended: they are lost",
                           inst->server.label);
    pthread_mutex_unlock(&inst->head.holder_mu);
    return res;
}

static bool session_still_ours(struct pg_instance *inst, const struct pg_lock *pl);

static int session_attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct pg_instance *inst = instance;
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
static int session_fence(void *instance, struct dlock_provider_lock *lk, uint64_t *out)
{
    struct pg_instance *inst = instance;
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
    pthread_mutex_lock(&inst->head.holder_mu);
    bool ours = inst->holder && inst->head.holder_generation == pl->generation;
    pthread_mutex_unlock(&inst->head.holder_mu);
    return ours;
}

/* One round trip proves the session alive for every hold taken on it. */
static int session_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n,
                               int *results)
{
    struct pg_instance *inst = instance;
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

static int session_renew(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
    int result;
    session_renew_batch(inst, &lk, 1, &result);
    if (result == DLOCK_ELOST)
        return dlock_seterr(DLOCK_ELOST, "%s: the session that held lock '%s' ended", inst->server.label, lk->name);
    return result;
}

static int session_release(void *instance, struct dlock_provider_lock *lk)
{
    struct pg_instance *inst = instance;
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

/* Which server backend holds the advisory lock, if one does. */
static int session_status(void *instance, const struct sql_lock_key *k, dlock_status_info *out)
{
    struct pg_instance *inst = instance;
    int rc;
    char advisory[24];
    snprintf(advisory, sizeof advisory, "%" PRId64, (int64_t)k->digest);
    const char *values[1] = { advisory };
    PGresult *res = pg_pool_exec(&inst->pool, PG_SESSION_STATUS, 1, values, NULL, NULL, &rc);
    if (res && (rc = pg_result_check(&inst->server, res, "status")) == DLOCK_OK && PQntuples(res) > 0) {
        out->held = 1;
        snprintf(out->holder, sizeof out->holder, "server backend pid %s", PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return rc;
}

/* One session carries every hold of a client, and PostgreSQL never lets a
 * session conflict with itself: a shared advisory lock of one handle would
 * not keep out an exclusive one of another. With no shared holds there is
 * nothing to downgrade to. */
const struct sql_mode pg_session_mode = {
    .name = "session",
    /* No kept holds: a hold is the session's lock, whose fence is drawn
     * when asked for, and nothing here tells the holder of a request. */
    .capabilities_off = DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE | DLOCK_CAP_ELECTION |
                        DLOCK_CAP_CACHE,
    .lease_rows = false,
    .attempt = session_attempt,
    .attempt_late = NULL,
    .release = session_release,
    .renew = session_renew,
    .renew_batch = session_renew_batch,
    .downgrade = NULL,
    .fence = session_fence,
    .status = session_status,
    .break_hold = NULL,
    .list = NULL,
    .why_no_break = "it is the holder's own session's (end that session with pg_terminate_backend instead)",
    .why_no_list = "an advisory lock carries a digest of the name, not the name (lease mode can)",
};
