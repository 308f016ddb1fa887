/* backends/mysql/mysql.c - the mysql backend module (dlock_mysql.so), for
 * MySQL and MariaDB over libmariadb.
 *
 * Two modes, chosen by mysql.mode:
 *
 * lease (default): a row per name in a table (see my_sql.c), one statement
 *   per operation on pooled connections. The hold is the row, not the
 *   connection: a dropped connection loses nothing, the next statement
 *   reconnects and the lease decides. The server's clock expires holds.
 *
 * session: the server's named locks (GET_LOCK on a digest of the name),
 *   all taken on one connection per client; a hold lives exactly as long
 *   as that connection; a fence is raised in a counter row only when the
 *   holder asks for one. If the connection breaks or is KILLed, every hold taken on it
 *   is lost, and the next renewal (the watchdog's, at lease/3) reports it.
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
 * out may take a row that has been free for MY_LATE_MS. */
#include "config.h"

#include "../common/lock_kind.h"
#include "../common/out_of_line.h"
#include "../common/sql_text.h"
#include "my_conn.h"
#include "my_line.h"
#include "my_list.h"
#include "my_sql.h"

#include <dlock/provider.h>
#include <mysqld_error.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(MY_STATEMENT_COUNT <= MY_MAX_STATEMENTS, "raise MY_MAX_STATEMENTS");

struct my_instance {
    struct my_server server;
    struct my_sql sql;
    struct my_pool pool;
    struct my_pool waiters;      /* session mode: connections that wait in the server's line */
    bool session_mode;
    pthread_mutex_t holder_mu;   /* session mode: one connection carries the holds */
    struct my_conn *holder;
    uint64_t holder_generation;  /* bumped at each new holder connection */
    char prefix[65];
    void *log_handle;
    bool no_batch;               /* the server cannot run MY_RENEW_BATCH (no JSON_TABLE) */
    bool no_shared_columns;      /* the table has none (create_table off): writers do not register, no downgrade */
    bool no_waker;               /* lease mode, the table has no waker column (create_table off): waiters back off */
    bool kill_denied_told;       /* the warning that KILL QUERY is refused was logged */
};

struct my_lock {
    struct sql_lock_key k;       /* the row's name; k.tag the session-mode GET_LOCK name */
    uint64_t generation;         /* session mode: holder connection of the hold */
    bool writer_registered;      /* an exclusive request kept waiting said so in the row */
    struct my_line line;         /* the place in the name's line while waiting */
    bool timer_look;             /* the last wait ran out: a fair request in the line may look */
    bool writers_turn;           /* a shared request's last look was busy only for a waiting writer */
};
/* sql_renew_batch_init reads the key at the start of each lock's state. */
_Static_assert(offsetof(struct my_lock, k) == 0, "the sql_lock_key comes first");

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
    { NULL, 0, 0, 0 },
};

static int ensure_key(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    return ml->k.key ? DLOCK_OK : sql_lock_key_init(&ml->k, inst->prefix, lk->name, lk->name_len);
}

static struct my_param bytes(const void *p, size_t len)
{
    return (struct my_param){ .bytes = p, .len = (unsigned long)len };
}

static struct my_param integer(long long v)
{
    return (struct my_param){ .value = v };
}

/* ---- lease mode ---------------------------------------------------------------------- */

static void register_writer(struct my_instance *inst, struct dlock_provider_lock *lk);

/* A statement took a waiter's connection id out of the row (id; 0: none):
 * ends its sleep in the server. Best effort: a waker that is gone (it gave
 * up) is no one to wake, and one that cannot be woken still looks when its
 * sleep runs out, at the holder's expiry. */
static void wake_waker(struct my_instance *inst, uint64_t id)
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

/* One exclusive attempt: MY_ACQUIRE, or MY_ACQUIRE_LATE for a fair look
 * out of turn. */
static int lease_try(struct my_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g, int which)
{
    struct my_lock *ml = lk->priv;
    struct my_param p[3] = { bytes(ml->k.key, ml->k.key_len), bytes(lk->owner, strlen(lk->owner)),
                             integer(lk->lease_ms) };
    struct my_outcome o;
    int rc = my_pool_run(&inst->pool, which, p, 3, -1, &o);
    if (rc != DLOCK_OK)
        return rc;
    if (o.insert_id >= MY_BUSY_MARK) {
        g->retry_hint_ms = (int64_t)(o.insert_id - MY_BUSY_MARK);
        register_writer(inst, lk);
        return DLOCK_EBUSY;
    }
    if (o.affected == 0 || o.insert_id == 0)
        return dlock_seterr(DLOCK_EPROTOCOL, "%s: acquire answered %llu rows, id %llu", inst->server.label,
                            (unsigned long long)o.affected, (unsigned long long)o.insert_id);
    g->fence = o.insert_id;
    g->has_fence = 1;
    ml->writer_registered = false; /* the grant raised the fence: that voids it */
    return DLOCK_OK;
}

/* An exclusive request kept waiting says so in the row, so that shared
 * requests after it wait behind it instead of starving it: behind shared
 * holders, and behind an exclusive hold, which may be downgraded to a
 * shared one or released while this request waits. Best effort: if it
 * fails, the request still waits, only without that priority. */
static void register_writer(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    if (inst->no_shared_columns)
        return;
    struct my_param p[4] = { bytes(lk->owner, strlen(lk->owner)), integer(lk->lease_ms),
                             bytes(ml->k.key, ml->k.key_len), bytes(lk->owner, strlen(lk->owner)) };
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

/* The row's owner for a shared or permit request ("~s", "~p<N>"), into
 * kind; returns the permits (0 for shared). */
static unsigned kind_of(const struct dlock_provider_lock *lk, char *kind, size_t size)
{
    unsigned limit = lk->mode == DLOCK_MODE_SEMAPHORE ? lk->permits : 0;
    snprintf(kind, size, limit ? "~p%u" : "~s", limit);
    return limit;
}

/* One attempt at a shared hold or a permit: the row is made first if the
 * name has none yet. */
static int shared_try(struct my_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct my_lock *ml = lk->priv;
    char kind[16];
    unsigned limit = kind_of(lk, kind, sizeof kind);
    struct my_param k = bytes(kind, strlen(kind)), who = bytes(lk->owner, strlen(lk->owner));
    struct my_param n = integer(limit), lease = integer(lk->lease_ms), key = bytes(ml->k.key, ml->k.key_len);
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

static int shared_renew(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    struct my_param p[5] = { bytes(lk->owner, strlen(lk->owner)), integer(lk->lease_ms), integer(lk->lease_ms),
                             bytes(ml->k.key, ml->k.key_len), bytes(lk->owner, strlen(lk->owner)) };
    struct my_outcome o;
    int rc = my_pool_run(&inst->pool, MY_SHARED_RENEW, p, 5, -1, &o);
    if (rc == DLOCK_OK && o.affected != 1)
        rc = dlock_seterr(DLOCK_ELOST, "%s: the hold of '%s' is no longer in its row (expired or taken)",
                          inst->server.label, lk->name);
    return rc;
}

static int lease_renew(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    if (kind_is_shared(lk))
        return shared_renew(inst, lk);
    struct my_lock *ml = lk->priv;
    struct my_param p[3] = { integer(lk->lease_ms), bytes(ml->k.key, ml->k.key_len),
                             bytes(lk->owner, strlen(lk->owner)) };
    struct my_outcome o;
    int rc = my_pool_run(&inst->pool, MY_RENEW, p, 3, -1, &o);
    if (rc == DLOCK_OK && o.affected != 1)
        rc = dlock_seterr(DLOCK_ELOST, "%s: the row of lock '%s' is no longer ours (expired or taken)",
                          inst->server.label, lk->name);
    return rc;
}

/* True when a batch statement failed because the server lacks JSON_TABLE
 * (before MariaDB 10.6 / MySQL 8.0.4): renewals go one by one from now on. */
static bool batch_refused(struct my_instance *inst, const struct my_outcome *o)
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
        struct my_param p[1] = { bytes(json, strlen(json)) };
        struct my_outcome o = { .affected = 0 }; /* untouched when no connection could be had */
        rc = my_pool_run(&inst->pool, MY_RENEW_BATCH, p, 1, -1, &o);
        if (rc == DLOCK_OK && o.affected == n) {
            for (size_t i = 0; i < n; i++)
                results[i] = DLOCK_OK;
            one_by_one = false;
        } else if (rc != DLOCK_OK && !batch_refused(inst, &o)) {
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
        results[i] = shared_renew(inst, locks[i]);
    return DLOCK_OK;
}

static int lease_renew_batch(struct my_instance *inst, struct dlock_provider_lock *const *locks, size_t n,
                             int *results)
{
    return renew_by_kind(inst, renew_one_kind, locks, n, results);
}

static int lease_release(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    struct my_param p[3] = { bytes(ml->k.key, ml->k.key_len), bytes(lk->owner, strlen(lk->owner)) };
    struct my_outcome o;
    int rc;
    if (kind_is_shared(lk)) {
        struct my_param sp[3] = { bytes(lk->owner, strlen(lk->owner)), bytes(ml->k.key, ml->k.key_len),
                                  bytes(lk->owner, strlen(lk->owner)) };
        rc = my_pool_run(&inst->pool, MY_SHARED_RELEASE, sp, 3, -1, &o);
    } else {
        rc = my_pool_run(&inst->pool, MY_RELEASE, p, 2, -1, &o);
    }
    /* Sent twice because the connection died under the first: a hold
     * already freed is the first one's work, not a loss. */
    if (rc == DLOCK_OK && o.affected != 1)
        rc = my_pool_last_resent() ? DLOCK_OK : DLOCK_ENOTOWNER;
    else if (rc == DLOCK_OK)
        wake_waker(inst, o.insert_id);
    return rc;
}

/* Our exclusive row made shared in one statement (MY_DOWNGRADE), which
 * also takes out the waker, as a release does. */
static int lease_downgrade(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    struct my_param who = bytes(lk->owner, strlen(lk->owner));
    struct my_param p[5] = { who, who, bytes(ml->k.key, ml->k.key_len), who, who };
    struct my_outcome o = { .affected = 0 }; /* untouched when no connection could be had */
    int rc = my_pool_run(&inst->pool, MY_DOWNGRADE, p, 5, -1, &o);
    if (rc != DLOCK_OK)
        return o.server_errno == ER_BAD_FIELD_ERROR ? shared_columns_error(inst) : rc;
    /* Found rows, not changed ones (CLIENT_FOUND_ROWS): a resent downgrade
     * finds the row it made shared. */
    if (o.affected != 1)
        return dlock_seterr(DLOCK_ELOST, "%s: the lock is no longer held by this owner (its lease ran out or it was "
                            "taken), so it was not downgraded", inst->server.label);
    wake_waker(inst, o.insert_id); /* a reader at the head may come in now */
    return DLOCK_OK;
}

/* ---- session mode ---------------------------------------------------------------------- */

/* Runs one statement on the holder connection (connecting it if needed). */
static int holder_run(struct my_instance *inst, int which, const struct my_param *p, int n,
                      struct my_outcome *o, uint64_t *generation)
{
    pthread_mutex_lock(&inst->holder_mu);
    int rc = DLOCK_OK;
    if (!inst->holder) {
        inst->holder = my_connect(&inst->server, &rc);
        if (inst->holder)
            inst->holder_generation++;
    }
    if (inst->holder) {
        *generation = inst->holder_generation;
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
    pthread_mutex_unlock(&inst->holder_mu);
    return rc;
}

static bool session_still_ours(struct my_instance *inst, const struct my_lock *ml)
{
    pthread_mutex_lock(&inst->holder_mu);
    bool ours = inst->holder && inst->holder_generation == ml->generation;
    pthread_mutex_unlock(&inst->holder_mu);
    return ours;
}

static int session_try(struct my_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct my_lock *ml = lk->priv;
    struct my_param p[1] = { bytes(ml->k.tag, strlen(ml->k.tag)) };
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

static int session_fence(struct my_instance *inst, struct dlock_provider_lock *lk, uint64_t *out)
{
    struct my_lock *ml = lk->priv;
    if (!session_still_ours(inst, ml))
        return dlock_seterr(DLOCK_ELOST, "%s: the connection that held lock '%s' ended", inst->server.label,
                            lk->name);
    struct my_param p[2] = { bytes(ml->k.key, ml->k.key_len), bytes(ml->k.tag, strlen(ml->k.tag)) };
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

static int session_renew(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    if (!session_still_ours(inst, ml))
        return dlock_seterr(DLOCK_ELOST, "%s: the connection that held lock '%s' ended", inst->server.label,
                            lk->name);
    struct my_param p[1] = { bytes(ml->k.tag, strlen(ml->k.tag)) };
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
static int session_renew_batch(struct my_instance *inst, struct dlock_provider_lock *const *locks, size_t n,
                               int *results)
{
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
        struct my_param p[1] = { bytes(json, strlen(json)) };
        struct my_outcome o = { .affected = 0 }; /* untouched when no connection could be had */
        uint64_t generation = 0;
        rc = holder_run(inst, MY_SESSION_CHECK_BATCH, p, 1, &o, &generation);
        bool all = rc == DLOCK_OK && o.has_row && !o.nulls[0] && o.ints[0] == (long long)m;
        for (size_t j = 0; all && j < m; j++)
            all = ((const struct my_lock *)locks[which[j]]->priv)->generation == generation;
        if (all) {
            for (size_t j = 0; j < m; j++)
                results[which[j]] = DLOCK_OK;
        } else if (rc != DLOCK_OK && !batch_refused(inst, &o)) {
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

static int session_release(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    if (!session_still_ours(inst, ml))
        return DLOCK_ENOTOWNER;
    struct my_param p[1] = { bytes(ml->k.tag, strlen(ml->k.tag)) };
    struct my_outcome o;
    uint64_t generation = 0;
    int rc = holder_run(inst, MY_SESSION_RELEASE, p, 1, &o, &generation);
    if (rc == DLOCK_EUNAVAILABLE && !session_still_ours(inst, ml))
        return DLOCK_ENOTOWNER; /* the connection, and the lock with it, are gone */
    if (rc == DLOCK_OK && (generation != ml->generation || !o.has_row || o.nulls[0] || o.ints[0] != 1))
        rc = DLOCK_ENOTOWNER;
    return rc;
}

/* ---- the provider ----------------------------------------------------------------------- */

/* Out of the line (see my_line_leave): a lease-mode head that may still
 * be armed first takes its id out of the row. */
static void leave_line(struct my_instance *inst, struct dlock_provider_lock *lk)
{
    struct my_lock *ml = lk->priv;
    if (ml->line.armed && !inst->session_mode) {
        struct my_param p[2] = { bytes(ml->k.key, ml->k.key_len), integer((long long)ml->line.thread_id) };
        struct my_outcome o;
        my_pool_run(&inst->pool, MY_DISARM, p, 2, -1, &o);
        ml->line.armed = false;
    }
    my_line_leave(&inst->waiters, &ml->line);
}

static int my_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct my_instance *inst = instance;
    int rc = ensure_key(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    struct my_lock *ml = lk->priv;
    bool fair = (lk->flags & DLOCK_LOCK_FAIR) != 0, timer_look = ml->timer_look;
    ml->timer_look = false;
    ml->writers_turn = false;
    int acquire = MY_ACQUIRE;
    if (fair && ml->line.state == MY_LINE_OUT) {
        bool head = false;
        rc = my_line_enter(&inst->waiters, &inst->pool, &ml->line, ml->k.tag, &head);
        if (rc == DLOCK_OK && !head) {
            /* Others are in the line before us: not our turn to look. The
             * wait joins the line. */
            g->retry_hint_ms = -1;
            return DLOCK_EBUSY;
        }
        if (rc != DLOCK_OK) /* out of the line (every waiting connection in use): a look out of turn */
            dlock_provider_log(inst->log_handle, rc == DLOCK_EBUSY ? DLOCK_LOG_DEBUG : DLOCK_LOG_WARN,
                               "%s: cannot enter the line (%s); this look is not in turn", inst->server.label,
                               dlock_errmsg());
    }
    if (fair && ml->line.state == MY_LINE_ASKED) {
        /* In the line, not at its head: not our turn to look. A head that
         * hangs (stopped, its session open) would hold the line for good,
         * so a lease-mode exclusive request whose wait ran out looks out
         * of turn, but may take only a row free for MY_LATE_MS, which a
         * live head would have taken long before. */
        if (!timer_look || inst->session_mode || kind_is_shared(lk)) {
            g->retry_hint_ms = -1;
            return DLOCK_EBUSY;
        }
        acquire = MY_ACQUIRE_LATE;
    }
    if (!inst->session_mode)
        rc = kind_is_shared(lk) ? shared_try(inst, lk, g) : lease_try(inst, lk, g, acquire);
    else
        rc = session_try(inst, lk, g);
    /* Granted: the gate goes to the next waiter; failed: no abandon follows. */
    if (rc != DLOCK_EBUSY)
        leave_line(inst, lk);
    else if (acquire == MY_ACQUIRE_LATE)
        g->retry_hint_ms = -1; /* held, or free not for long yet: a while in line again, not the holder's lease */
    return rc;
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
    struct my_param id = integer((long long)thread_id), key = bytes(ml->k.key, ml->k.key_len);
    struct my_param who = bytes(lk->owner, strlen(lk->owner));
    struct my_outcome o = { .affected = 0 };
    int rc;
    if (kind_is_shared(lk)) {
        char kind[16];
        unsigned limit = kind_of(lk, kind, sizeof kind);
        struct my_param k = bytes(kind, strlen(kind)), n = integer(limit);
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

static int my_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    int64_t deadline = dlock_provider_now_ms() + timeout_ms; /* the join's connect counts */
    if (ml->writers_turn && ml->line.state == MY_LINE_HEAD) {
        /* A shared head held back only for a writer that waits behind it
         * in the line: let the writer by, and queue again behind it. */
        leave_line(inst, lk);
    }
    ml->writers_turn = false;
    if (ml->line.state == MY_LINE_OUT) {
        /* Joined here, after a busy answer (a try-once never gets here):
         * the line answers once we are at its head and the holder has let
         * go, also when that happened before we joined. */
        int rc = my_line_join(&inst->waiters, &inst->pool, &ml->line, ml->k.tag);
        if (rc != DLOCK_OK)
            dlock_provider_log(inst->log_handle, rc == DLOCK_EBUSY ? DLOCK_LOG_DEBUG : DLOCK_LOG_WARN,
                               "%s: cannot wait in line (%s); polling instead", inst->server.label, dlock_errmsg());
    }
    timeout_ms = deadline - dlock_provider_now_ms();
    if (timeout_ms < 0)
        timeout_ms = 0;
    struct lease_watch lw = { inst, lk };
    const struct my_line_watch watch = { lease_arm, lease_sleep_sql, &lw };
    if (ml->line.state != MY_LINE_OUT) {
        int rc = my_line_wait(&inst->waiters, &ml->line, inst->session_mode ? NULL : &watch, timeout_ms, wake_fd,
                              inst->log_handle);
        ml->timer_look = rc == DLOCK_ETIMEDOUT;
        if (rc != DLOCK_OK || ml->line.state != MY_LINE_OUT)
            return rc;
        /* The request failed and took us out of the line (logged). */
        timeout_ms = deadline - dlock_provider_now_ms();
    }
    return out_of_line_wait(wake_fd, timeout_ms); /* then look, and join again */
}

static int my_release(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    return inst->session_mode ? session_release(inst, lk) : lease_release(inst, lk);
}

static int my_renew(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    return inst->session_mode ? session_renew(inst, lk) : lease_renew(inst, lk);
}

static int my_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    struct my_instance *inst = instance;
    if (__atomic_load_n(&inst->no_batch, __ATOMIC_RELAXED))
        return DLOCK_ENOTSUP; /* the core renews them one by one */
    return inst->session_mode ? session_renew_batch(inst, locks, n, results)
                              : lease_renew_batch(inst, locks, n, results);
}

static int my_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    if (inst->session_mode) /* the instance does not claim it: not called */
        return dlock_seterr(DLOCK_ENOTSUP, "%s: session mode has no shared holds to downgrade to",
                            inst->server.label);
    return lease_downgrade(inst, lk);
}

static int my_fence(void *instance, struct dlock_provider_lock *lk, uint64_t *out)
{
    struct my_instance *inst = instance;
    if (!inst->session_mode) /* lease mode: acquire always returns the row's fence */
        return dlock_seterr(DLOCK_EINTERNAL, "mysql: a lease-mode hold without a fence");
    return session_fence(inst, lk, out);
}

static void my_abandon(void *instance, struct dlock_provider_lock *lk)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (ml->writer_registered) {
        /* Out of the way now: the readers held back for us may come in.
         * Before leaving the line, while the waker it may take out of the
         * row, if it is ours, still names our own waiting connection. */
        struct my_param p[2] = { bytes(ml->k.key, ml->k.key_len), bytes(lk->owner, strlen(lk->owner)) };
        struct my_outcome o;
        if (my_pool_run(&inst->pool, MY_UNREGISTER_WRITER, p, 2, -1, &o) == DLOCK_OK && o.affected == 1) {
            if (ml->line.conn && o.insert_id == ml->line.thread_id)
                ml->line.armed = false; /* taken out already */
            else
                wake_waker(inst, o.insert_id);
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
    sql_lock_key_free(&ml->k);
    memset(ml, 0, sizeof *ml);
}

/* out->holder is a kind marker ("~s", "~p<N>"): says how many hold it. */
static int shared_status(struct my_instance *inst, const struct my_lock *ml, dlock_status_info *out)
{
    struct my_param p[1] = { bytes(ml->k.key, ml->k.key_len) };
    struct my_outcome o;
    int rc = my_pool_run(&inst->pool, MY_SHARED_STATUS, p, 1, -1, &o);
    if (rc == DLOCK_OK && o.has_row) {
        long long n = o.ints[0];
        kind_holders_text(out->holder, sizeof out->holder, n,
                          out->holder[1] == 'p' ? strtoul(out->holder + 2, NULL, 10) : 0);
    }
    return rc;
}

static int my_status(struct my_instance *inst, struct dlock_ctl_status *arg)
{
    struct my_lock ml = { 0 };
    struct dlock_provider_lock lk = { .name = arg->name, .name_len = arg->name_len, .priv = &ml };
    int rc = ensure_key(inst, &lk);
    if (rc != DLOCK_OK)
        return rc;
    dlock_status_info *out = arg->out;
    out->held = 0;
    out->fence = 0;
    out->holder_pid = -1;
    out->ttl_ms = -1;
    out->holder[0] = '\0';
    struct my_outcome o;
    if (inst->session_mode) {
        struct my_param p[1] = { bytes(ml.k.tag, strlen(ml.k.tag)) };
        rc = my_pool_run(&inst->pool, MY_SESSION_STATUS, p, 1, -1, &o);
        if (rc == DLOCK_OK && o.has_row && !o.nulls[0]) {
            out->held = 1;
            snprintf(out->holder, sizeof out->holder, "server connection %lld", o.ints[0]);
        }
    } else {
        struct my_param p[1] = { bytes(ml.k.key, ml.k.key_len) };
        rc = my_pool_run(&inst->pool, MY_STATUS, p, 1, 0, &o);
        if (rc == DLOCK_OK && o.has_row) {
            out->fence = (uint64_t)o.ints[1];
            if (o.ints[3] == 1) {
                out->held = 1;
                out->ttl_ms = o.ints[2];
                snprintf(out->holder, sizeof out->holder, "%s", o.text);
                if (out->holder[0] == '~')
                    rc = shared_status(inst, &ml, out);
            }
        }
    }
    sql_lock_key_free(&ml.k);
    return rc;
}

/* MY_BREAK, then the waker it took out, read on the same connection (its
 * session's variable: the fence has LAST_INSERT_ID). Twice when the
 * connection turns out dead, as my_pool_run does. */
static int break_row(struct my_instance *inst, const struct sql_lock_key *k, int *broken, uint64_t *fence,
                     uint64_t *waker)
{
    struct my_param p[1] = { bytes(k->key, k->key_len) };
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

static int my_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    struct my_instance *inst = instance;
    if (inst->session_mode)
        return dlock_seterr(DLOCK_ENOTSUP, "%s: session mode cannot break a hold: it is the holder's own "
                            "connection's (end that connection with KILL instead)", inst->server.label);
    struct sql_lock_key k;
    int rc = sql_lock_key_init(&k, inst->prefix, name, name_len);
    if (rc != DLOCK_OK)
        return rc;
    uint64_t waker = 0;
    rc = break_row(inst, &k, broken, fence, &waker);
    if (rc == DLOCK_OK && *broken)
        wake_waker(inst, waker);
    sql_lock_key_free(&k);
    return rc;
}

static int my_list(void *instance, struct dlock_provider_list *req)
{
    struct my_instance *inst = instance;
    if (inst->session_mode)
        return dlock_seterr(DLOCK_ENOTSUP, "%s: session mode cannot list its locks: a named lock carries a digest "
                            "of the name, not the name (lease mode can)", inst->server.label);
    return my_list_page(&inst->pool, &inst->server, inst->sql.table, inst->prefix, req);
}

static int my_ctl(void *instance, int op, void *arg)
{
    struct my_instance *inst = instance;
    if (op == DLOCK_CTL_STATUS)
        return my_status(inst, arg);
    if (op == DLOCK_CTL_CAPABILITIES) {
        /* GET_LOCK has no shared kind, and one connection carries every
         * hold of a client; with no shared holds there is nothing to
         * downgrade to. */
        if (inst->session_mode)
            *(unsigned *)arg &= ~(unsigned)(DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE);
        /* A lease row without the waker column cannot be armed: its
         * waiters back off. */
        if (inst->no_waker)
            *(unsigned *)arg &= ~(unsigned)(DLOCK_CAP_NATIVE_WAIT | DLOCK_CAP_FAIR);
        /* A table without the columns of shared holds cannot take the
         * downgraded one: refused up front (DLOCK_ENOTSUP), the exclusive
         * hold is kept, where a failing statement would cost it. */
        if (inst->no_shared_columns)
            *(unsigned *)arg &= ~(unsigned)DLOCK_CAP_DOWNGRADE;
        return DLOCK_OK;
    }
    return DLOCK_ENOTSUP;
}

/* Columns a table of an earlier version lacks: has_columns counts them
 * (MY_HAS_*), alter adds them. With create, they are added; without, the
 * instance goes on without them (*missing) and the warning says what then
 * fails or is slower, and that dlock.conf(5) has the ALTER TABLE. */
static int add_columns(struct my_instance *inst, struct my_conn *c, bool create, int has_columns, const char *alter,
                       const char *what, const char *without, bool *missing)
{
    struct my_outcome o;
    struct my_param p[1] = { bytes(inst->sql.table, strlen(inst->sql.table)) };
    int rc = my_run(&inst->server, c, has_columns, p, 1, -1, &o);
    if (rc != DLOCK_OK || (o.has_row && o.ints[0] > 0))
        return rc;
    if (!create) {
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                           "%s: table `%s` has no %s; %s until it has (ALTER TABLE in dlock.conf(5))",
                           inst->server.label, inst->sql.table, what, without);
        *missing = true;
        return DLOCK_OK;
    }
    if (mysql_query(c->db, alter) != 0 && mysql_errno(c->db) != ER_DUP_FIELDNAME)
        return dlock_seterr(mysql_errno(c->db) == 1142 ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE,
                            "%s: ALTER TABLE `%s` (the %s) failed: %s", inst->server.label, inst->sql.table, what,
                            mysql_error(c->db));
    return DLOCK_OK;
}

static int prepare_schema(struct my_instance *inst, bool create)
{
    struct my_conn *c;
    int rc = my_pool_get(&inst->pool, &c);
    if (rc != DLOCK_OK)
        return rc;
    /* Preparing a statement that names the table is the cheapest check
     * that it exists and that we may use it. */
    struct my_outcome o;
    struct my_param p[1] = { bytes("", 0) };
    rc = my_run(&inst->server, c, MY_STATUS, p, 1, 0, &o);
    if (rc == DLOCK_ECONFIG && create && c->last_errno == 1146 /* ER_NO_SUCH_TABLE */) {
        if (mysql_query(c->db, inst->sql.create_table) != 0)
            rc = dlock_seterr(mysql_errno(c->db) == 1142 ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE,
                              "%s: CREATE TABLE `%s` failed: %s", inst->server.label, inst->sql.table,
                              mysql_error(c->db));
        else
            rc = DLOCK_OK;
    } else if (rc == DLOCK_ECONFIG && !create) {
        rc = dlock_seterr(DLOCK_ECONFIG, "%s (mysql.create_table is false: create it with the DDL in dlock.conf(5))",
                          dlock_errmsg());
    }
    /* Shared holds and permits fail without their columns; exclusive locks
     * work. Lease-mode waiters without the waker column back off. */
    if (rc == DLOCK_OK)
        rc = add_columns(inst, c, create, MY_HAS_SHARED_COLUMNS, inst->sql.add_shared_columns,
                         "columns for shared holds and semaphores", "they will fail", &inst->no_shared_columns);
    if (rc == DLOCK_OK && !inst->session_mode)
        rc = add_columns(inst, c, create, MY_HAS_WAKER, inst->sql.add_waker_column, "waker column",
                         "waiters poll with backoff instead of waiting in the server", &inst->no_waker);
    my_pool_put(&inst->pool, c);
    return rc;
}

static void my_close(void *instance)
{
    struct my_instance *inst = instance;
    my_conn_close(inst->holder); /* ends the session: the server frees its named locks */
    pthread_mutex_destroy(&inst->holder_mu);
    my_pool_destroy(&inst->pool);
    my_pool_destroy(&inst->waiters);
    my_sql_free(&inst->sql);
    free(inst);
}

static int my_open(void **instance, const struct dlock_provider_env *env)
{
    const dlock_settings *s = env->settings;
    struct my_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory");
    pthread_mutex_init(&inst->holder_mu, NULL);
    struct sql_settings set;
    int rc = sql_settings_read(s, "mysql", env->prefix, MY_TABLE_MAX, sizeof inst->prefix - 1, &set);
    if (rc == DLOCK_OK)
        rc = my_server_from_settings(&inst->server, s);
    if (rc != DLOCK_OK) {
        pthread_mutex_destroy(&inst->holder_mu);
        free(inst);
        return rc;
    }
    inst->session_mode = set.session_mode;
    if (inst->session_mode) {
        /* A client that vanished leaves a half-open connection whose named
         * locks the server keeps until it closes the session: by default
         * after 8 hours idle. Three leases: renewals (every lease/3) keep a
         * live holder's session busy, and a hold without renewals is told
         * that it lives no longer than this (session_try). */
        int64_t s3 = (3 * env->default_lease_ms + 999) / 1000;
        inst->server.wait_timeout_s = s3 < 2 ? 2 : s3;
    }
    snprintf(inst->prefix, sizeof inst->prefix, "%s", set.prefix);
    inst->log_handle = env->log_handle;
    my_pool_init(&inst->pool, &inst->server, (int)set.pool_size);
    my_pool_init(&inst->waiters, &inst->server, MY_POOL_MAX);
    rc = my_sql_init(&inst->sql, set.table, true);
    for (int i = 0; rc == DLOCK_OK && i < MY_STATEMENT_COUNT; i++)
        inst->server.statements[i] = inst->sql.text[i];
    /* Connect now, so a wrong address or password is reported at open. */
    if (rc == DLOCK_OK)
        rc = prepare_schema(inst, set.create_table);
    /* No waker column: statements that do not name it. The connection the
     * schema was looked at with prepared none of those that change. */
    if (rc == DLOCK_OK && inst->no_waker) {
        my_sql_free(&inst->sql);
        rc = my_sql_init(&inst->sql, set.table, false);
        for (int i = 0; rc == DLOCK_OK && i < MY_STATEMENT_COUNT; i++)
            inst->server.statements[i] = inst->sql.text[i];
    }
    if (rc != DLOCK_OK) {
        my_close(inst);
        return rc;
    }
    dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "%s: ready, %s mode, table `%s`", inst->server.label,
                       set.session_mode ? "session" : "lease", set.table);
    *instance = inst;
    return DLOCK_OK;
}

static const struct dlock_provider my_provider = {
    .version = DLOCK_PROVIDER_VERSION_4,
    .name = "mysql",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_SERVER_EXPIRY | DLOCK_CAP_MULTI_HOST |
                    DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE | DLOCK_CAP_NATIVE_WAIT |
                    DLOCK_CAP_FAIR,
    .lock_priv_size = sizeof(struct my_lock),
    .settings = my_settings,
    .open = my_open,
    .close = my_close,
    .acquire = my_acquire,
    .release = my_release,
    .renew = my_renew,
    .renew_batch = my_renew_batch,
    .fence = my_fence,
    .lock_fini = my_lock_fini,
    .ctl = my_ctl,
    .abandon = my_abandon,
    .wait = my_wait,
    .list = my_list,
    .break_hold = my_break,
    .downgrade = my_downgrade,
};

DLOCK_MODULE(my_provider)
