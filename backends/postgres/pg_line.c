/* backends/postgres/pg_line.c - see pg_line.h. */
#include "config.h"

#include "pg_line.h"

#include <dlock/provider.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Closes l's connection, first asking the server to stop the query it
 * runs (a join still queued for the gate) when cancel is set, and gives
 * its place in the pool back. The server frees whatever advisory locks
 * the session had. */
static void drop(struct pg_pool *pool, struct pg_line *l, bool cancel)
{
    if (!l->conn)
        return;
    if (cancel) {
        PGcancel *c = PQgetCancel(l->conn);
        if (c) {
            char err[256];
            (void)PQcancel(c, err, sizeof err); /* best effort: closing frees the gate anyway */
            PQfreeCancel(c);
        }
    }
    PQfinish(l->conn);
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
            drop(pool, l, true);
            return false;
        }
    }
}

int pg_line_join(struct pg_pool *pool, struct pg_line *l, uint64_t digest, const char *channel)
{
    if (l->conn && !settle(pool, l))
        l->conn = NULL;
    if (!l->conn) {
        int rc = pg_pool_get(pool, &l->conn);
        if (rc != DLOCK_OK) {
            l->conn = NULL;
            return rc;
        }
    }
    snprintf(l->gate[0], sizeof l->gate[0], "%" PRId32, (int32_t)(uint32_t)(digest >> 32));
    snprintf(l->gate[1], sizeof l->gate[1], "%" PRId32, (int32_t)(uint32_t)digest);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%s, %s); LISTEN \"%s\"", l->gate[0], l->gate[1], channel);
    if (!PQsendQuery(l->conn, sql)) {
        int rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: cannot join the line of waiters: %s", pool->server->label,
                              PQerrorMessage(l->conn));
        drop(pool, l, false);
        return rc;
    }
    l->state = PG_LINE_ASKED;
    l->answer_pending = true;
    l->failed = false;
    return DLOCK_OK;
}

int pg_line_enter(struct pg_pool *pool, struct pg_line *l, uint64_t digest, const char *channel)
{
    if (l->conn && !settle(pool, l))
        l->conn = NULL;
    if (!l->conn) {
        int rc = pg_pool_get(pool, &l->conn);
        if (rc != DLOCK_OK) {
            l->conn = NULL;
            return rc;
        }
    }
    snprintf(l->gate[0], sizeof l->gate[0], "%" PRId32, (int32_t)(uint32_t)(digest >> 32));
    snprintf(l->gate[1], sizeof l->gate[1], "%" PRId32, (int32_t)(uint32_t)digest);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_try_advisory_lock(%s, %s)", l->gate[0], l->gate[1]);
    PGresult *r = PQexec(l->conn, sql);
    bool head = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    bool answered = PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    if (!answered) {
        int rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: cannot look at the line of waiters: %s", pool->server->label,
                              PQerrorMessage(l->conn));
        drop(pool, l, false);
        return rc;
    }
    if (!head)
        return pg_line_join(pool, l, digest, channel);
    snprintf(sql, sizeof sql, "LISTEN \"%s\"", channel);
    r = PQexec(l->conn, sql);
    bool listening = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!listening) {
        int rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: cannot LISTEN at the head of the line: %s",
                              pool->server->label, PQerrorMessage(l->conn));
        drop(pool, l, false); /* frees the gate with the session */
        return rc;
    }
    l->state = PG_LINE_HEAD;
    return DLOCK_OK;
}

int pg_line_wait(struct pg_pool *pool, struct pg_line *l, int64_t timeout_ms, int wake_fd, void *log_handle,
                 const char *label)
{
    int64_t deadline = dlock_provider_now_ms() + timeout_ms;
    for (;;) {
        if (l->state == PG_LINE_HEAD) {
            PGnotify *n = PQnotifies(l->conn);
            if (n) {
                PQfreemem(n);
                return DLOCK_OK;
            }
        }
        while (l->state == PG_LINE_ASKED && !PQisBusy(l->conn)) {
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
                return DLOCK_OK;
            }
            l->state = PG_LINE_HEAD; /* at the head: the caller looks at the lock */
            return DLOCK_OK;
        }
        int w = pg_wait_socket(l->conn, wake_fd, deadline - dlock_provider_now_ms());
        if (w == 0)
            return dlock_provider_now_ms() >= deadline ? DLOCK_ETIMEDOUT : DLOCK_OK;
        if (w == 2)
            return DLOCK_OK;
        if (w < 0 || !PQconsumeInput(l->conn)) {
            dlock_provider_log(log_handle, DLOCK_LOG_WARN, "%s: the connection of a waiter broke (%s); the next "
                               "look joins the line again", label, PQerrorMessage(l->conn));
            drop(pool, l, false);
            return DLOCK_OK;
        }
    }
}

void pg_line_drain(struct pg_line *l)
{
    if (!l->conn || !PQconsumeInput(l->conn))
        return;
    PGnotify *n;
    while ((n = PQnotifies(l->conn)))
        PQfreemem(n);
}

/* Sends the gate's release and the UNLISTEN without waiting for them. */
static void pass_on(struct pg_pool *pool, struct pg_line *l)
{
    if (l->state != PG_LINE_HEAD)
        return;
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%s, %s); UNLISTEN *", l->gate[0], l->gate[1]);
    l->state = PG_LINE_OUT;
    if (!PQsendQuery(l->conn, sql)) {
        drop(pool, l, false); /* closing the session frees the gate as well */
        return;
    }
    l->answer_pending = true;
}

void pg_line_granted(struct pg_pool *pool, struct pg_line *l, bool keep_gate)
{
    if (l->state == PG_LINE_ASKED)
        drop(pool, l, true);
    else if (!keep_gate)
        pass_on(pool, l);
}

void pg_line_pass(struct pg_pool *pool, struct pg_line *l)
{
    pass_on(pool, l);
}

void pg_line_leave(struct pg_pool *pool, struct pg_line *l)
{
    if (!l->conn)
        return;
    if (l->state == PG_LINE_ASKED) {
        drop(pool, l, true);
        return;
    }
    pass_on(pool, l);
    if (!settle(pool, l))
        return;
    pg_line_drain(l); /* none may wake the next user of the connection */
    pg_pool_put(pool, l->conn);
    memset(l, 0, sizeof *l);
}
