/* backends/mysql/my_lease.c - mysql lease mode (the default): a row per
 * name in a table (see my_sql.c), one statement per operation on pooled
 * connections. The hold is the row, not the connection: a dropped
 * connection loses nothing, the next statement reconnects and the lease
 * decides. The server's clock expires holds. A waiter at the head of the
 * line arms the row with its connection's id (the waker column) and sleeps
 * in the server; a release takes the waker out in its own UPDATE and ends
 * that sleep with KILL QUERY (my_wake_waker). */
#include "config.h"

#include "../common/lock_kind.h"
#include "my_backend.h"
#include "my_list.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void register_writer(struct my_instance *inst, struct dlock_provider_lock *lk);

/* A waker that is gone (it gave up) is no one to wake, and one that cannot
 * be woken still looks when its sleep runs out, at the holder's expiry. */
void my_wake_waker(struct my_instance *inst, uint64_t id)
{
    if (id == 0 || id >= MY_KIND_MARK)
        return;
    struct my_conn *c = NULL;
    if (my_pool_get(&inst->pool, &c) != DLOCK_OK || !c)
        return; /* none was had: nothing to put back */
    char sql[48];
    snprintf(sql, sizeof sql, "KILL QUERY %llu", (unsigned long long)id);
    if (mysql_query(c->db, sql) != 0) {
        unsigned e = mysql_errno(c->db);
        if (e == ER_KILL_DENIED_ERROR && !__atomic_exchange_n(&inst->kill_denied_told, true, __ATOMIC_RELAXED))
            dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                               "%s: KILL QUERY of a waiter's connection is refused (%s): waiters of other users "
                               "are woken only when the holder's lease would have run out; let every client of "
                               "the table use one user, or grant CONNECTION ADMIN",
                               inst->server.label, mysql_error(c->db));
        if (e >= 2000) { /* the client's own error: the connection is gone */
            my_conn_close(c);
            c = NULL;
        }
    }
    my_pool_put(&inst->pool, c);
}

void my_acquire_params(const struct dlock_provider_lock *lk, struct my_param p[3])
{
    const struct my_lock *ml = lk->priv;
    p[0] = my_bytes(ml->k.key, ml->k.key_len);
    p[1] = my_bytes(lk->owner, strlen(lk->owner));
    p[2] = my_integer(lk->lease_ms);
}

int my_answer_acquire(struct my_instance *inst, struct dlock_provider_lock *lk, const struct my_outcome *o,
                      struct dlock_grant *g)
{
    struct my_lock *ml = lk->priv;
    if (o->insert_id >= MY_BUSY_MARK) {
        g->retry_hint_ms = (int64_t)(o->insert_id - MY_BUSY_MARK);
        return DLOCK_EBUSY;
    }
    if (o->affected == 0 || o->insert_id == 0)
        return dlock_seterr(DLOCK_EPROTOCOL, "%s: acquire answered %llu rows, id %llu", inst->server.label,
                            (unsigned long long)o->affected, (unsigned long long)o->insert_id);
    g->fence = o->insert_id;
    g->has_fence = 1;
    ml->writer_registered = false; /* the grant raised the fence: that voids it */
    if (ml->watch)
        my_wanted_held(inst->wanted, ml->watch, true);
    return DLOCK_OK;
}

void my_writer_params(const struct dlock_provider_lock *lk, struct my_param p[4])
{
    const struct my_lock *ml = lk->priv;
    p[0] = my_bytes(lk->owner, strlen(lk->owner));
    p[1] = my_integer(lk->lease_ms);
    p[2] = my_bytes(ml->k.key, ml->k.key_len);
    p[3] = my_bytes(lk->owner, strlen(lk->owner));
}

/* One exclusive attempt: MY_ACQUIRE, or MY_ACQUIRE_LATE for a fair look
 * out of turn. */
static int exclusive_attempt(struct my_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g, int which)
{
    struct my_param p[3];
    my_acquire_params(lk, p);
    struct my_outcome o;
    int rc = my_pool_run(&inst->pool, which, p, 3, -1, &o);
    if (rc != DLOCK_OK)
        return rc;
    rc = my_answer_acquire(inst, lk, &o, g);
    if (rc == DLOCK_EBUSY)
        register_writer(inst, lk);
    return rc;
}

/* An exclusive request kept waiting says so in the row, so that shared
 * requests after it wait behind it instead of starving it: behind shared
 * holders, and behind an exclusive hold, which may be downgraded to a
 * shared one or released while this request waits. Best effort: if it
 * fails, the request still waits, only without that priority. */
static void register_writer(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    if (inst->head.no_shared_columns)
        return;
    struct my_param p[4];
    my_writer_params(lk, p);
    struct my_outcome o;
    if (my_pool_run(&inst->pool, MY_REGISTER_WRITER, p, 4, -1, &o) == DLOCK_OK)
        ml->writer_registered = true;
}

/* A statement named a column of shared holds that the table lacks. */
static int shared_columns_error(const struct my_instance *inst)
{
    return dlock_seterr(DLOCK_ECONFIG,
                        "%s: table `%s` has no columns for shared holds and semaphores: add them with the "
                        "ALTER TABLE in dlock.conf(5), or let libdlock do it (mysql.create_table = true)",
                        inst->server.label, inst->sql.table);
}

unsigned my_kind_of(const struct dlock_provider_lock *lk, char *kind, size_t size)
{
    unsigned limit = lk->mode == DLOCK_MODE_SEMAPHORE ? lk->permits : 0;
    snprintf(kind, size, limit ? "~p%u" : "~s", limit);
    return limit;
}
/* One attempt at a shared hold or a permit: the row is made first if the
 * name has none yet. */
static int shared_attempt(struct my_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct my_lock *ml = lk->priv;
    char kind[16];
    unsigned limit = my_kind_of(lk, kind, sizeof kind);
    struct my_param k = my_bytes(kind, strlen(kind)), who = my_bytes(lk->owner, strlen(lk->owner));
    struct my_param n = my_integer(limit), lease = my_integer(lk->lease_ms), key = my_bytes(ml->k.key, ml->k.key_len);
    struct my_param p[15] = { k, k, who, n, n, n, who, k, k, who, lease, k, lease, k, key };
    struct my_outcome o = { .affected = 0 }; /* untouched when no connection could be had */
    int rc = DLOCK_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        rc = my_pool_run(&inst->pool, MY_SHARED_ACQUIRE, p, 15, -1, &o);
        if (rc != DLOCK_OK || o.affected != 0)
            break;
        struct my_outcome made;
        if ((rc = my_pool_run(&inst->pool, MY_ENSURE_ROW, &key, 1, -1, &made)) != DLOCK_OK)
            break;
    }
    if (rc == DLOCK_OK && o.server_errno == 0 && o.affected == 0)
        rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: the row of '%s' vanished while it was taken", inst->server.label,
                          lk->name);
    if (rc != DLOCK_OK)
        return o.server_errno == ER_BAD_FIELD_ERROR ? shared_columns_error(inst) : rc;
    if (o.insert_id >= MY_BUSY_MARK) {
        g->retry_hint_ms = (int64_t)(o.insert_id - MY_BUSY_MARK);
        /* Nothing left of a lease, yet busy: a waiting writer's turn, whose
         * end nobody knows. Back off as behind any holder, instead of asking
         * again at once. */
        ml->writers_turn = g->retry_hint_ms == 0;
        if (g->retry_hint_ms == 0)
            g->retry_hint_ms = -1;
        return DLOCK_EBUSY;
    }
    if (o.insert_id >= MY_KIND_MARK)
        return kind_mismatch(inst->server.label, lk, o.insert_id - MY_KIND_MARK);
    g->fence = o.insert_id;
    g->has_fence = 1;
    return DLOCK_OK;
}

static int lease_attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct my_instance *inst = instance;
    return kind_is_shared(lk) ? shared_attempt(inst, lk, g) : exclusive_attempt(inst, lk, g, MY_ACQUIRE);
}

static int lease_attempt_late(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct my_instance *inst = instance;
    int rc = exclusive_attempt(inst, lk, g, MY_ACQUIRE_LATE);
    if (rc == DLOCK_EBUSY)
        g->retry_hint_ms = -1; /* held, or free not for long yet: a while in line again, not the holder's lease */
    return rc;
}

/* A shared hold's renewal (MY_SHARED_RENEW) refreshes its own entry and
 * the row's lease; an exclusive one (MY_RENEW) the row it owns. */
static int lease_renew(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    struct my_param who = my_bytes(lk->owner, strlen(lk->owner)), lease = my_integer(lk->lease_ms);
    struct my_param key = my_bytes(ml->k.key, ml->k.key_len);
    bool shared = kind_is_shared(lk);
    struct my_param shared_p[5] = { who, lease, lease, key, who }, exclusive_p[3] = { lease, key, who };
    struct my_outcome o;
    int rc = shared ? my_pool_run(&inst->pool, MY_SHARED_RENEW, shared_p, 5, -1, &o)
                    : my_pool_run(&inst->pool, MY_RENEW, exclusive_p, 3, -1, &o);
    if (rc == DLOCK_OK && o.affected != 1)
        rc = dlock_seterr(DLOCK_ELOST, shared ? "%s: the hold of '%s' is no longer in its row (expired or taken)"
                                              : "%s: the row of lock '%s' is no longer ours (expired or taken)",
                          inst->server.label, lk->name);
    return rc;
}

bool my_batch_refused(struct my_instance *inst, const struct my_outcome *o)
{
    if (o->server_errno != ER_PARSE_ERROR && o->server_errno != ER_NOT_SUPPORTED_YET)
        return false;
    __atomic_store_n(&inst->no_batch, true, __ATOMIC_RELAXED);
    dlock_provider_log(inst->log_handle, DLOCK_LOG_INFO,
                       "%s: the server cannot batch renewals (%s); renewing one lock per statement",
                       inst->server.label, dlock_errmsg());
    return true;
}

/* Every hold due together in one statement. The statement counts the
 * rows still ours; when that is all of them (the usual case) every hold is
 * renewed, otherwise each is renewed on its own to learn which were lost
 * (renewing a hold twice is harmless). */
static int exclusive_renew_batch(struct my_instance *inst, struct dlock_provider_lock *const *locks, size_t n,
                                 int *results)
{
    struct sql_renew_batch b;
    char *json = NULL;
    int rc = sql_renew_batch_init(&b, locks, n);
    if (rc != DLOCK_OK)
        return rc;
    if (!(json = my_sql_renew_batch_json(&b)))
        rc = DLOCK_ENOMEM;
    sql_renew_batch_free(&b);
    bool one_by_one = true;
    if (rc == DLOCK_OK) {
        struct my_param p[1] = { my_bytes(json, strlen(json)) };
        struct my_outcome o = { .affected = 0 }; /* untouched when no connection could be had */
        rc = my_pool_run(&inst->pool, MY_RENEW_BATCH, p, 1, -1, &o);
        if (rc == DLOCK_OK && o.affected == n) {
            for (size_t i = 0; i < n; i++)
                results[i] = DLOCK_OK;
            one_by_one = false;
        } else if (rc != DLOCK_OK && !my_batch_refused(inst, &o)) {
            one_by_one = false; /* the server is not answering: that goes for all */
        }
    }
    if (rc != DLOCK_ENOMEM && one_by_one) {
        rc = DLOCK_OK;
        for (size_t i = 0; i < n; i++)
            results[i] = lease_renew(inst, locks[i]);
    }
    free(json);
    return rc;
}

/* Exclusive holds in one statement; shared holds and permits one
 * statement each (a multi-table UPDATE meets a row once, and holders of
 * one name share a row). */
static int renew_one_kind(void *ctx, bool shared, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    struct my_instance *inst = ctx;
    if (!shared)
        return exclusive_renew_batch(inst, locks, n, results);
    for (size_t i = 0; i < n; i++)
        results[i] = lease_renew(inst, locks[i]);
    return DLOCK_OK;
}

static int lease_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n,
                             int *results)
{
    struct my_instance *inst = instance;
    return renew_by_kind(inst, renew_one_kind, locks, n, results);
}

static int lease_release(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    struct my_param p[3] = { my_bytes(ml->k.key, ml->k.key_len), my_bytes(lk->owner, strlen(lk->owner)) };
    struct my_outcome o;
    int rc;
    if (kind_is_shared(lk)) {
        struct my_param sp[3] = { my_bytes(lk->owner, strlen(lk->owner)), my_bytes(ml->k.key, ml->k.key_len),
                                  my_bytes(lk->owner, strlen(lk->owner)) };
        rc = my_pool_run(&inst->pool, MY_SHARED_RELEASE, sp, 3, -1, &o);
    } else {
        rc = my_pool_run(&inst->pool, MY_RELEASE, p, 2, -1, &o);
    }
    /* Freed, or not ours any more: nothing left to poll for (a hold
     * downgraded since its grant ends here too, as a shared one). */
    if (ml->watch)
        my_wanted_held(inst->wanted, ml->watch, false);
    /* Sent twice because the connection died under the first: a hold
     * already freed is the first one's work, not a loss. */
    if (rc == DLOCK_OK && o.affected != 1)
        rc = my_pool_last_resent() ? DLOCK_OK : DLOCK_ENOTOWNER;
    else if (rc == DLOCK_OK)
        my_wake_waker(inst, o.insert_id);
    return rc;
}

/* Our exclusive row made shared in one statement (MY_DOWNGRADE), which
 * also takes out the waker, as a release does. */
static int lease_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    struct my_param who = my_bytes(lk->owner, strlen(lk->owner));
    struct my_param p[5] = { who, who, my_bytes(ml->k.key, ml->k.key_len), who, who };
    struct my_outcome o = { .affected = 0 }; /* untouched when no connection could be had */
    int rc = my_pool_run(&inst->pool, MY_DOWNGRADE, p, 5, -1, &o);
    if (rc != DLOCK_OK)
        return o.server_errno == ER_BAD_FIELD_ERROR ? shared_columns_error(inst) : rc;
    /* Found rows, not changed ones (CLIENT_FOUND_ROWS): a resent downgrade
     * finds the row it made shared. */
    if (o.affected != 1)
        return dlock_seterr(DLOCK_ELOST, "%s: the lock is no longer held by this owner (its lease ran out or it was "
                            "taken), so it was not downgraded", inst->server.label);
    my_wake_waker(inst, o.insert_id); /* a reader at the head may come in now */
    return DLOCK_OK;
}

/* out->holder is a kind marker ("~s", "~p<N>"): says how many hold it. */
static int shared_status(struct my_instance *inst, const struct sql_lock_key *k, dlock_status_info *out)
{
    struct my_param p[1] = { my_bytes(k->key, k->key_len) };
    struct my_outcome o;
    int rc = my_pool_run(&inst->pool, MY_SHARED_STATUS, p, 1, -1, &o);
    if (rc == DLOCK_OK && o.has_row) {
        long long n = o.ints[0];
        kind_holders_text(out->holder, sizeof out->holder, n,
                          out->holder[1] == 'p' ? strtoul(out->holder + 2, NULL, 10) : 0);
    }
    return rc;
}

/* The row's holder, fence and remaining lease. */
static int lease_status(void *instance, const struct sql_lock_key *k, dlock_status_info *out)
{
    struct my_instance *inst = instance;
    struct my_outcome o;
    struct my_param p[1] = { my_bytes(k->key, k->key_len) };
    int rc = my_pool_run(&inst->pool, MY_STATUS, p, 1, 0, &o);
    if (rc == DLOCK_OK && o.has_row) {
        out->fence = (uint64_t)o.ints[1];
        if (o.ints[3] == 1) {
            out->held = 1;
            out->ttl_ms = o.ints[2];
            snprintf(out->holder, sizeof out->holder, "%s", o.text);
            if (out->holder[0] == '~')
                rc = shared_status(inst, k, out);
        }
    }
    return rc;
}

/* MY_BREAK, then the waker it took out, read on the same connection (its
 * session's variable: the fence has LAST_INSERT_ID). Twice when the
 * connection turns out dead, as my_pool_run does. */
static int break_row(struct my_instance *inst, const struct sql_lock_key *k, int *broken, uint64_t *fence,
                     uint64_t *waker)
{
    struct my_param p[1] = { my_bytes(k->key, k->key_len) };
    int rc = DLOCK_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        struct my_conn *c = NULL;
        struct my_outcome o, w = { .has_row = false };
        if ((rc = my_pool_get(&inst->pool, &c)) != DLOCK_OK)
            return rc;
        rc = my_run(&inst->server, c, MY_BREAK, p, 1, -1, &o);
        if (rc == DLOCK_OK) {
            *broken = o.affected == 1;
            *fence = *broken ? o.insert_id : 0;
            /* Broken all the same if this fails: the waiter then looks
             * when its sleep runs out. */
            if (*broken && !inst->no_waker && my_run(&inst->server, c, MY_BREAK_WAKER, NULL, 0, -1, &w) == DLOCK_OK &&
                w.has_row && w.ints[0] > 0)
                *waker = (uint64_t)w.ints[0];
        }
        bool dead = my_conn_broken(c);
        if (dead)
            my_conn_close(c);
        my_pool_put(&inst->pool, dead ? NULL : c);
        /* Dead before the break ran: once more on a new connection. */
        if (!(dead && rc != DLOCK_OK))
            break;
    }
    return rc;
}

static int lease_break(void *instance, const struct sql_lock_key *k, int *broken, uint64_t *fence)
{
    struct my_instance *inst = instance;
    uint64_t waker = 0;
    int rc = break_row(inst, k, broken, fence, &waker);
    if (rc == DLOCK_OK && *broken)
        my_wake_waker(inst, waker);
    return rc;
}

static int lease_list(void *instance, struct dlock_provider_list *req)
{
    struct my_instance *inst = instance;
    return my_list_page(&inst->pool, &inst->server, inst->sql.table, inst->head.prefix, req);
}

const struct sql_mode my_lease_mode = {
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
    .value_put = my_lease_value_put,
    .leader_get = my_lease_leader_get,
};
