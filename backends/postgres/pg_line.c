/* backends/postgres/pg_line.c - see pg_line.h.
 *
 * The line's queries are sent as simple queries (several statements in one
 * string, one round trip) without waiting for the answer, on a connection
 * of the listeners' pool taken for the time the lock waits (and, for an
 * exclusive hold that came through the line, holds). The join turns the
 * session's statement_timeout off, since waiting for the gate is meant to
 * take as long as the line is long; passing the gate on sets it back
 * before the connection returns to the pool. A waiter in the line runs a
 * statement, and so holds a snapshot, for as long as it waits: VACUUM
 * keeps row versions that much longer, as with any query that runs that
 * long. */
#include "config.h"

#include "pg_line.h"

#include <dlock/provider.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

/* Writes out what libpq still buffers for l (its connections do not
 * block), within the command timeout. */
static bool flush(struct pg_pool *pool, struct pg_line *l)
{
    int64_t deadline = dlock_provider_now_ms() + pool->server->command_timeout_ms;
    for (;;) {
        int r = PQflush(l->conn);
        if (r == 0)
            return true;
        int64_t left = deadline - dlock_provider_now_ms();
        if (r < 0 || left <= 0)
            return false;
        struct pollfd p = { .fd = PQsocket(l->conn), .events = POLLOUT };
        if (poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left) < 0)
            return false;
    }
}

static bool send_text(struct pg_pool *pool, struct pg_line *l, const char *sql)
{
    return PQsendQuery(l->conn, sql) && flush(pool, l);
}

/* Asks the server, from a connection of the statement pool (bounded by
 * the command timeout, where libpq's own cancel request could wait on a
 * connect without end), to stop what l's session runs: a join still
 * queued for the gate. */
static void cancel_queued(struct pg_line *l)
{
    if (!l->ctl || !l->conn)
        return;
    char pid[16];
    snprintf(pid, sizeof pid, "%d", PQbackendPID(l->conn));
    const char *values[1] = { pid };
    PGconn *c = NULL;
    int rc;
    if (pg_pool_try_get(l->ctl, &c) != DLOCK_OK)
        return; /* closing the connection frees the place too, when the server next answers it */
    PQclear(pg_exec(l->ctl->server, &c, "SELECT pg_cancel_backend($1::int)", 1, values, NULL, NULL, &rc));
    pg_pool_put(l->ctl, c);
}

/* Closes l's connection (asking the server first to stop a join in
 * flight, when cancel is set) and gives its place in the pool back. The
 * server frees whatever advisory locks the session had. */
static void drop(struct pg_pool *pool, struct pg_line *l, bool cancel)
{
    if (!l->conn)
        return;
    if (cancel)
        cancel_queued(l);
    PQfinish(l->conn);
    pg_pool_put(pool, NULL);
    memset(l, 0, sizeof *l);
}

/* Gives up l's connection whatever state pg_exec left it in (it closes a
 * connection that failed, and leaves l->conn NULL). */
static void forget(struct pg_pool *pool, struct pg_line *l)
{
    if (l->conn) {
        drop(pool, l, false);
        return;
    }
    pg_pool_put(pool, NULL);
    memset(l, 0, sizeof *l);
}

/* Reads the rest of the answer to a query sent without waiting, within
 * the command timeout. False when the connection broke or did not answer
 * in time (it is then dropped). */
static bool settle(struct pg_pool *pool, struct pg_line *l)
{
    if (!l->conn || !l->answer_pending)
        return l->conn != NULL;
    int64_t deadline = dlock_provider_now_ms() + pool->server->command_timeout_ms;
    for (;;) {
        while (!PQisBusy(l->conn)) {
            PGresult *r = PQgetResult(l->conn);
            if (!r) {
                l->answer_pending = false;
                return true;
            }
            PQclear(r);
        }
        int64_t left = deadline - dlock_provider_now_ms();
        if (left <= 0 || pg_wait_socket(l->conn, -1, left) < 0 || !PQconsumeInput(l->conn)) {
            drop(pool, l, false);
            return false;
        }
    }
}

/* A connection for l, out of the line (which has none: every way out
 * gives it back): one of the pool's if one is free (a waiter that finds
 * none polls instead of waiting for one). */
static int take_conn(struct pg_pool *pool, struct pg_line *l)
{
    int rc = pg_pool_try_get(pool, &l->conn);
    if (rc != DLOCK_OK)
        l->conn = NULL;
    return rc;
}

/* One statement on l's connection, which must answer with status want;
 * otherwise the connection goes (and with it the session's gate) and the
 * failure is returned. */
static int exec_on_line(struct pg_pool *pool, struct pg_line *l, const char *sql, ExecStatusType want,
                        const char *what, PGresult **out)
{
    int rc = DLOCK_OK;
    PGresult *r = pg_exec(pool->server, &l->conn, sql, 0, NULL, NULL, NULL, &rc);
    if (r && PQresultStatus(r) == want) {
        *out = r;
        return DLOCK_OK;
    }
    if (r)
        rc = pg_result_check(pool->server, r, what);
    PQclear(r);
    forget(pool, l);
    return rc == DLOCK_OK ? DLOCK_EUNAVAILABLE : rc;
}

static void set_gate(struct pg_line *l, uint64_t digest, struct pg_pool *ctl)
{
    snprintf(l->gate[0], sizeof l->gate[0], "%" PRId32, (int32_t)(uint32_t)(digest >> 32));
    snprintf(l->gate[1], sizeof l->gate[1], "%" PRId32, (int32_t)(uint32_t)digest);
    l->ctl = ctl;
}

int pg_line_join(struct pg_pool *pool, struct pg_pool *ctl, struct pg_line *l, uint64_t digest, const char *channel)
{
    int rc = l->conn ? DLOCK_OK : take_conn(pool, l); /* pg_line_enter's, when it found others in the line */
    if (rc != DLOCK_OK)
        return rc;
    set_gate(l, digest, ctl);
    char sql[160];
    snprintf(sql, sizeof sql, "SET statement_timeout = 0; SELECT pg_advisory_lock(%s, %s); LISTEN \"%s\"",
             l->gate[0], l->gate[1], channel);
    if (!send_text(pool, l, sql)) {
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: cannot join the line of waiters: %s", pool->server->label,
                          PQerrorMessage(l->conn));
        drop(pool, l, false);
        return rc;
    }
    l->place.state = LINE_ASKED;
    l->answer_pending = true;
    l->failed = false;
    return DLOCK_OK;
}

int pg_line_enter(struct pg_pool *pool, struct pg_pool *ctl, struct pg_line *l, uint64_t digest, const char *channel)
{
    int rc = take_conn(pool, l);
    if (rc != DLOCK_OK)
        return rc;
    set_gate(l, digest, ctl);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_try_advisory_lock(%s, %s)", l->gate[0], l->gate[1]);
    PGresult *r;
    if ((rc = exec_on_line(pool, l, sql, PGRES_TUPLES_OK, "pg_try_advisory_lock", &r)) != DLOCK_OK)
        return rc;
    bool head = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    if (!head)
        return pg_line_join(pool, ctl, l, digest, channel); /* on this connection */
    snprintf(sql, sizeof sql, "LISTEN \"%s\"", channel);
    if ((rc = exec_on_line(pool, l, sql, PGRES_COMMAND_OK, "LISTEN", &r)) != DLOCK_OK)
        return rc; /* the session, and the gate with it, are gone */
    PQclear(r);
    l->place.state = LINE_HEAD;
    return DLOCK_OK;
}

/* Takes in what has come on the waiter's connection, without waiting:
 * true when the wait is over (*rc is its answer), false when more input is
 * needed. */
static bool line_moved(struct pg_pool *pool, struct pg_line *l, void *log_handle, const char *label, int *rc)
{
    *rc = DLOCK_OK;
    if (l->place.state == LINE_HEAD) {
        PGnotify *n = PQnotifies(l->conn);
        if (n) {
            PQfreemem(n);
            return true;
        }
    }
    while (l->place.state == LINE_ASKED && !PQisBusy(l->conn)) {
        PGresult *r = PQgetResult(l->conn);
        if (r) {
            ExecStatusType st = PQresultStatus(r);
            if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
                l->failed = true;
                dlock_provider_log(log_handle, DLOCK_LOG_WARN, "%s: joining the line of waiters failed (%s); "
                                   "polling instead", label, PQresultErrorMessage(r));
            }
            PQclear(r);
            continue;
        }
        l->answer_pending = false;
        if (l->failed) {
            drop(pool, l, false);
            return true;
        }
        l->place.state = LINE_HEAD; /* at the head: the caller looks at the lock */
        return true;
    }
    return false;
}

static void broke(struct pg_pool *pool, struct pg_line *l, void *log_handle, const char *label)
{
    dlock_provider_log(log_handle, DLOCK_LOG_WARN, "%s: the connection of a waiter broke (%s); the next "
                       "look joins the line again", label, PQerrorMessage(l->conn));
    drop(pool, l, false);
}

int pg_line_wait(struct pg_pool *pool, struct pg_line *l, int64_t timeout_ms, int wake_fd, void *log_handle,
                 const char *label)
{
    int64_t deadline = dlock_provider_now_ms() + timeout_ms;
    for (;;) {
        int rc;
        if (line_moved(pool, l, log_handle, label, &rc))
            return rc;
        int w = pg_await_input(l->conn, wake_fd, deadline, &rc);
        if (w == 0)
            return rc;
        if (w < 0) {
            broke(pool, l, log_handle, label);
            return DLOCK_OK;
        }
    }
}

int pg_line_arm(struct pg_pool *pool, struct pg_line *l, int64_t *timeout_ms, int *fd, void *log_handle,
                const char *label)
{
    int rc;
    *fd = -1;
    if (line_moved(pool, l, log_handle, label, &rc) || PQsocket(l->conn) < 0)
        *timeout_ms = 0; /* over already: look at once */
    else
        *fd = PQsocket(l->conn);
    return DLOCK_OK;
}

int pg_line_disarm(struct pg_pool *pool, struct pg_line *l, int fired, void *log_handle, const char *label)
{
    if (!fired)
        return DLOCK_ETIMEDOUT;
    if (!l->conn)
        return DLOCK_OK;
    if (!PQconsumeInput(l->conn)) {
        broke(pool, l, log_handle, label);
        return DLOCK_OK;
    }
    int rc;
    if (line_moved(pool, l, log_handle, label, &rc))
        return rc;
    return DLOCK_EBUSY; /* a part of a message: the wait goes on */
}

void pg_line_drain(struct pg_line *l)
{
    if (!l->conn || !PQconsumeInput(l->conn))
        return;
    PGnotify *n;
    while ((n = PQnotifies(l->conn)))
        PQfreemem(n);
}

/* Gives the gate to the next waiter (the server does at once what it was
 * sent), puts statement_timeout back, and returns the connection to the
 * pool once the answer is read. */
/* What gives the gate up: its unlock, and the connection made ordinary again. */
static void pass_text(const struct pg_pool *pool, const struct pg_line *l, char *sql, size_t size)
{
    snprintf(sql, size, "SELECT pg_advisory_unlock(%s, %s); UNLISTEN *; SET statement_timeout = %lld",
             l->gate[0], l->gate[1], (long long)pool->server->command_timeout_ms);
}

/* The gate's answer read: l's connection goes back to the pool. */
static void passed(struct pg_pool *pool, struct pg_line *l)
{
    pg_line_drain(l); /* none may wake the next user of the connection */
    pg_pool_put(pool, l->conn);
    memset(l, 0, sizeof *l);
}

void pg_line_pass(struct pg_pool *pool, struct pg_line *l)
{
    if (l->place.state != LINE_HEAD)
        return;
    char sql[160];
    pass_text(pool, l, sql, sizeof sql);
    l->place.state = LINE_OUT;
    if (!send_text(pool, l, sql)) {
        drop(pool, l, false); /* closing the session frees the gate as well */
        return;
    }
    l->answer_pending = true;
    if (settle(pool, l))
        passed(pool, l);
}

bool pg_line_pass_send(struct pg_pool *pool, struct pg_line *l)
{
    if (l->place.state != LINE_HEAD || !l->conn || l->answer_pending)
        return false;
    char sql[160];
    pass_text(pool, l, sql, sizeof sql);
    l->place.state = LINE_OUT;
    /* Sent only if it goes out whole at once: the caller must not block. */
    if (!PQsendQuery(l->conn, sql) || PQflush(l->conn) != 0) {
        drop(pool, l, false); /* closing the session frees the gate as well */
        return false;
    }
    l->answer_pending = true;
    return true;
}

int pg_line_pass_recv(struct pg_pool *pool, struct pg_line *l)
{
    if (!PQconsumeInput(l->conn)) {
        drop(pool, l, false);
        return -1;
    }
    while (!PQisBusy(l->conn)) {
        PGresult *r = PQgetResult(l->conn);
        if (!r) {
            l->answer_pending = false;
            passed(pool, l);
            return 0;
        }
        PQclear(r);
    }
    return 1;
}

void pg_line_pass_drop(struct pg_pool *pool, struct pg_line *l)
{
    drop(pool, l, false);
}

bool pg_line_others_queued(const struct pg_line *l)
{
    if (l->place.state != LINE_HEAD || !l->conn || !l->ctl)
        return l->place.state == LINE_ASKED; /* a place given back at a grant: others may be behind it */
    char pid[16];
    snprintf(pid, sizeof pid, "%d", PQbackendPID(l->conn));
    const char *values[3] = { l->gate[0], l->gate[1], pid };
    PGconn *c = NULL;
    int rc;
    if (pg_pool_get(l->ctl, &c) != DLOCK_OK)
        return true;
    PGresult *r = pg_exec(l->ctl->server, &c,
                          "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2\n"
                          "  AND classid = $1::int4::oid AND objid = $2::int4::oid AND pid <> $3::int)",
                          3, values, NULL, NULL, &rc);
    bool others = !r || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
                  strcmp(PQgetvalue(r, 0, 0), "f") != 0;
    PQclear(r);
    pg_pool_put(l->ctl, c);
    return others;
}

void pg_line_granted(struct pg_pool *pool, struct pg_line *l, bool keep_gate)
{
    if (l->place.state == LINE_ASKED)
        drop(pool, l, true);
    else if (!keep_gate)
        pg_line_pass(pool, l);
}

void pg_line_leave(struct pg_pool *pool, struct pg_line *l)
{
    if (l->place.state == LINE_ASKED)
        drop(pool, l, true);
    else
        pg_line_pass(pool, l); /* out of the line already: nothing */
}
