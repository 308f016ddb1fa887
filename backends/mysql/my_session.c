/* backends/mysql/my_session.c - mysql session mode: the server's named
 * locks (GET_LOCK on a digest of the name), all taken on one connection
 * per client; a hold lives exactly as long as that connection, and a
 * fence is raised in a counter row only when the holder asks for one. If
 * the connection breaks or is KILLed, every hold taken on it is lost, and
 * the next renewal (the watchdog's, at lease/3) reports it. */
#include "config.h"

#include "my_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs one statement on the holder connection (connecting it if needed). */
static int holder_run(struct my_instance *inst, int which, const struct my_param *p, int n,
                      struct my_outcome *o, uint64_t *generation)
{
    pthread_mutex_lock(&inst->head.holder_mu);
    int rc = DLOCK_OK;
    if (!inst->holder) {
        inst->holder = my_connect(&inst->server, &rc);
        if (inst->holder)
            inst->head.holder_generation++;
    }
    if (inst->holder) {
        *generation = inst->head.holder_generation;
        rc = my_run(&inst->server, inst->holder, which, p, n, -1, o);
        if (rc != DLOCK_OK)
            o->server_errno = inst->holder->last_errno;
        if (my_conn_broken(inst->holder)) {
            dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                               "%s: the connection holding this client's named locks ended: they are lost",
                               inst->server.label);
            my_conn_close(inst->holder);
            inst->holder = NULL;
        }
    }
    pthread_mutex_unlock(&inst->head.holder_mu);
    return rc;
}

static bool session_still_ours(struct my_instance *inst, const struct my_lock *ml)
{
    pthread_mutex_lock(&inst->head.holder_mu);
    bool ours = inst->holder && inst->head.holder_generation == ml->generation;
    pthread_mutex_unlock(&inst->head.holder_mu);
    return ours;
}

static int session_attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    struct my_param p[1] = { my_bytes(ml->k.tag, strlen(ml->k.tag)) };
    struct my_outcome o;
    uint64_t generation = 0;
    int rc = holder_run(inst, MY_SESSION_ACQUIRE, p, 1, &o, &generation);
    if (rc != DLOCK_OK)
        return rc;
    if (!o.has_row || o.nulls[0] || o.ints[0] != 1) {
        g->retry_hint_ms = -1;
        return DLOCK_EBUSY;
    }
    /* No fence yet: my_fence raises one when the holder asks. The server
     * ends an idle session after wait_timeout, and the lock with it. */
    ml->generation = generation;
    g->lease_ms = inst->server.wait_timeout_s * 1000;
    return DLOCK_OK;
}

static int session_fence(void *instance, struct dlock_provider_lock *lk, uint64_t *out)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (!session_still_ours(inst, ml))
        return dlock_seterr(DLOCK_ELOST, "%s: the connection that held lock '%s' ended", inst->server.label,
                            lk->name);
    struct my_param p[2] = { my_bytes(ml->k.key, ml->k.key_len), my_bytes(ml->k.tag, strlen(ml->k.tag)) };
    struct my_outcome o;
    uint64_t generation = 0;
    int rc = holder_run(inst, MY_SESSION_FENCE, p, 2, &o, &generation);
    if (rc != DLOCK_OK)
        return rc;
    if (generation != ml->generation || o.affected == 0 || o.insert_id == 0)
        return dlock_seterr(DLOCK_ELOST, "%s: this connection no longer holds lock '%s'", inst->server.label,
                            lk->name);
    *out = o.insert_id;
    return DLOCK_OK;
}

static int session_renew(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (!session_still_ours(inst, ml))
        return dlock_seterr(DLOCK_ELOST, "%s: the connection that held lock '%s' ended", inst->server.label,
                            lk->name);
    struct my_param p[1] = { my_bytes(ml->k.tag, strlen(ml->k.tag)) };
    struct my_outcome o;
    uint64_t generation = 0;
    int rc = holder_run(inst, MY_SESSION_CHECK, p, 1, &o, &generation);
    if (generation != ml->generation || !session_still_ours(inst, ml) ||
        (rc == DLOCK_OK && (!o.has_row || o.nulls[0] || o.ints[0] != 1)))
        return dlock_seterr(DLOCK_ELOST, "%s: the connection that held lock '%s' no longer holds it",
                            inst->server.label, lk->name);
    return rc;
}

/* The holds on the holder connection checked by one query that counts the
 * named locks this connection holds; when that is all of them every hold is
 * renewed, otherwise each is checked on its own to learn which were lost. */
static int session_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n,
                               int *results)
{
    struct my_instance *inst = instance;
    const char **tags = malloc(n * sizeof *tags);
    size_t *which = malloc(n * sizeof *which), m = 0;
    char *json = NULL;
    int rc = DLOCK_OK;
    if (!tags || !which)
        rc = dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory for a renewal batch of %zu", n);
    for (size_t i = 0; rc == DLOCK_OK && i < n; i++) {
        const struct my_lock *ml = locks[i]->priv;
        results[i] = DLOCK_ELOST; /* unless checked below */
        if (session_still_ours(inst, ml)) {
            which[m] = i;
            tags[m++] = ml->k.tag;
        }
    }
    if (rc == DLOCK_OK && m > 0 && !(json = my_sql_tags_json(tags, m)))
        rc = DLOCK_ENOMEM;
    if (json) {
        struct my_param p[1] = { my_bytes(json, strlen(json)) };
        struct my_outcome o = { .affected = 0 }; /* untouched when no connection could be had */
        uint64_t generation = 0;
        rc = holder_run(inst, MY_SESSION_CHECK_BATCH, p, 1, &o, &generation);
        bool all = rc == DLOCK_OK && o.has_row && !o.nulls[0] && o.ints[0] == (long long)m;
        for (size_t j = 0; all && j < m; j++)
            all = ((const struct my_lock *)locks[which[j]]->priv)->generation == generation;
        if (all) {
            for (size_t j = 0; j < m; j++)
                results[which[j]] = DLOCK_OK;
        } else if (rc != DLOCK_OK && !my_batch_refused(inst, &o)) {
            /* The connection failed: if it is gone, every hold on it went
             * with it; if it is still there (a timeout), the failure goes
             * for all of them alike. */
            for (size_t j = 0; j < m; j++)
                results[which[j]] = session_still_ours(inst, locks[which[j]]->priv) ? rc : DLOCK_ELOST;
        } else {
            for (size_t j = 0; j < m; j++)
                results[which[j]] = session_renew(inst, locks[which[j]]);
        }
        rc = DLOCK_OK;
    }
    free(json);
    free(tags);
    free(which);
    return rc;
}

static int session_release(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (!session_still_ours(inst, ml))
        return DLOCK_ENOTOWNER;
    struct my_param p[1] = { my_bytes(ml->k.tag, strlen(ml->k.tag)) };
    struct my_outcome o;
    uint64_t generation = 0;
    int rc = holder_run(inst, MY_SESSION_RELEASE, p, 1, &o, &generation);
    if (rc == DLOCK_EUNAVAILABLE && !session_still_ours(inst, ml))
        return DLOCK_ENOTOWNER; /* the connection, and the lock with it, are gone */
    if (rc == DLOCK_OK && (generation != ml->generation || !o.has_row || o.nulls[0] || o.ints[0] != 1))
        rc = DLOCK_ENOTOWNER;
    return rc;
}

/* Which server connection holds the named lock, if one does. */
static int session_status(void *instance, const struct sql_lock_key *k, dlock_status_info *out)
{
    struct my_instance *inst = instance;
    struct my_outcome o;
    struct my_param p[1] = { my_bytes(k->tag, strlen(k->tag)) };
    int rc = my_pool_run(&inst->pool, MY_SESSION_STATUS, p, 1, -1, &o);
    if (rc == DLOCK_OK && o.has_row && !o.nulls[0]) {
        out->held = 1;
        snprintf(out->holder, sizeof out->holder, "server connection %lld", o.ints[0]);
    }
    return rc;
}

/* GET_LOCK has no shared kind, and one connection carries every hold of a
 * client; with no shared holds there is nothing to downgrade to. A named
 * lock's busy answer leaves no mark anyone could read, so no hold is kept
 * after its release. */
const struct sql_mode my_session_mode = {
    .name = "session",
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
    .why_no_break = "it is the holder's own connection's (end that connection with KILL instead)",
    .why_no_list = "a named lock carries a digest of the name, not the name (lease mode can)",
};
