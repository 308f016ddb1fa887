/* backends/mysql/my_line.c - see my_line.h. */
#include "config.h"

#include "my_line.h"

#include "../common/sql_text.h"

#include <dlock/provider.h>
#include <errno.h>
#include <mysqld_error.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GET_LOCK's timeout in seconds for "as long as it takes": MariaDB
 * answers NULL at once to the negative timeout that MySQL takes for
 * infinite, so a year. */
#define FOREVER_S "31536000"

/* The gate: the lock's own name with ".q" after it (lock names are
 * "dlock_" and hex digits, so no lock is ever called that). */
static void gate_of(const struct my_line *l, char *out, size_t size)
{
    snprintf(out, size, "%s.q", l->name);
}

/* Ends l's connection. When a request is in flight the server is told to
 * end the session (KILL, from a connection of the pool) rather than left to
 * notice the closed socket when it next answers: the gate, or the place in
 * its queue, goes at once. */
static void drop(struct my_pool *pool, struct my_line *l, bool in_flight)
{
    if (!l->conn)
        return;
    struct my_conn *k = NULL;
    /* Put back only when one was had: a failed get took no place in the
     * pool's count. */
    if (in_flight && l->thread_id && l->ctl && my_pool_get(l->ctl, &k) == DLOCK_OK && k) {
        char sql[48];
        snprintf(sql, sizeof sql, "KILL %lu", l->thread_id);
        if (mysql_query(k->db, sql) != 0 && mysql_errno(k->db) >= 2000) {
            my_conn_close(k); /* the client's own error: the connection is gone */
            k = NULL;
        }
        my_pool_put(l->ctl, k);
    }
    my_conn_close(l->conn);
    my_pool_put(pool, NULL);
    memset(l, 0, sizeof *l);
}

static bool send_text(struct my_line *l, const char *sql)
{
    return mysql_send_query(l->conn->db, sql, (unsigned long)strlen(sql)) == 0;
}

/* A waiter's requests last as long as the wait: a statement time limit of
 * the server's (MariaDB's max_statement_time, MySQL's max_execution_time)
 * would cut them off and send the waiter to the back of the line. Once per
 * connection; false when the connection is found dead. */
static bool lift_statement_time(struct my_line *l)
{
    MYSQL *db = l->conn->db;
    if (l->conn->untimed)
        return true;
    if (mysql_query(db, "SET SESSION max_statement_time = 0") != 0 && mysql_errno(db) == ER_UNKNOWN_SYSTEM_VARIABLE)
        mysql_query(db, "SET SESSION max_execution_time = 0");
    if (mysql_errno(db) >= 2000) /* the client's own error: the connection is gone */
        return false;
    l->conn->untimed = true;
    return true;
}

static void ask_for_gate(struct my_line *l, char *sql, size_t size, const char *timeout)
{
    char gate[40];
    gate_of(l, gate, sizeof gate);
    snprintf(sql, size, "SELECT GET_LOCK('%s', %s)", gate, timeout);
}

/* A waiting connection for l, out of the line until now: DLOCK_EBUSY when
 * every one of pool is in use. */
static int take_conn(struct my_pool *pool, struct my_pool *ctl, struct my_line *l, const char *name)
{
    memset(l, 0, sizeof *l);
    int rc = my_pool_try_get(pool, &l->conn);
    if (rc != DLOCK_OK) {
        l->conn = NULL;
        return rc;
    }
    l->ctl = ctl;
    snprintf(l->name, sizeof l->name, "%s", name);
    l->thread_id = mysql_thread_id(l->conn->db);
    return DLOCK_OK;
}

int my_line_join(struct my_pool *pool, struct my_pool *ctl, struct my_line *l, const char *name)
{
    /* Twice: an idle connection of the pool may have been closed by the
     * server (wait_timeout) since it was last used. */
    for (int attempt = 0;; attempt++) {
        int rc = take_conn(pool, ctl, l, name);
        if (rc != DLOCK_OK)
            return rc;
        char sql[96];
        ask_for_gate(l, sql, sizeof sql, FOREVER_S);
        if (lift_statement_time(l) && send_text(l, sql)) {
            l->place.state = LINE_ASKED;
            return DLOCK_OK;
        }
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: cannot join the line of waiters: %s", pool->server->label,
                              mysql_error(l->conn->db));
        drop(pool, l, false);
        if (attempt == 1)
            return rc;
    }
}

int my_line_enter(struct my_pool *pool, struct my_pool *ctl, struct my_line *l, const char *name, bool *head)
{
    *head = false;
    /* Twice: an idle connection of the pool may have been closed by the
     * server (wait_timeout) since it was last used. */
    for (int attempt = 0;; attempt++) {
        int rc = take_conn(pool, ctl, l, name);
        if (rc != DLOCK_OK)
            return rc;
        char sql[96];
        ask_for_gate(l, sql, sizeof sql, "0");
        MYSQL_RES *res = NULL;
        if (lift_statement_time(l) && mysql_query(l->conn->db, sql) == 0 && (res = mysql_store_result(l->conn->db))) {
            MYSQL_ROW row = mysql_fetch_row(res);
            *head = row && row[0] && strcmp(row[0], "1") == 0;
            mysql_free_result(res);
            if (*head) {
                l->place.state = LINE_HEAD;
                return DLOCK_OK;
            }
            my_pool_put(pool, l->conn); /* others are in the line */
            memset(l, 0, sizeof *l);
            return DLOCK_OK;
        }
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: cannot enter the line of waiters: %s", pool->server->label,
                          mysql_error(l->conn->db));
        drop(pool, l, false);
        if (attempt == 1)
            return rc;
    }
}

/* Reads the answer to the request in flight, which has arrived: its first
 * column, or -1 for NULL or no row, or -2 when it failed (the detail in
 * *err when there is one). */
static long long read_answer(struct my_line *l, char *err, size_t size)
{
    MYSQL *db = l->conn->db;
    if (mysql_read_query_result(db) != 0) {
        snprintf(err, size, "%s", mysql_error(db));
        return -2;
    }
    MYSQL_RES *res = mysql_store_result(db);
    if (!res) {
        snprintf(err, size, "%s", mysql_errno(db) ? mysql_error(db) : "no result");
        return mysql_errno(db) ? -2 : -1;
    }
    MYSQL_ROW row = mysql_fetch_row(res);
    long long v = row && row[0] ? strtoll(row[0], NULL, 10) : -1;
    mysql_free_result(res);
    return v;
}

/* MySQL's ER_QUERY_TIMEOUT (max_execution_time), which MariaDB's headers
 * do not name. */
#define MY_ER_QUERY_TIMEOUT 3024

/* What sending the watch came to. */
enum watch_sent { WATCH_SENT, WATCH_LOOK, WATCH_FAILED };

/* At the head: waits in the server for the holder to let go (see my_line.h). */
static enum watch_sent send_watch(struct my_line *l, const struct my_line_watch *w, int64_t sleep_ms)
{
    char *sql;
    if (w) {
        int armed = w->arm(w->ctx, l->thread_id);
        if (armed <= 0)
            return armed == 0 ? WATCH_LOOK : WATCH_FAILED;
        l->armed = true;
        sql = w->sleep_sql(w->ctx, l->thread_id, sleep_ms);
    } else {
        /* Taken and let go in one statement: the lock is free again for our
         * holder connection the moment this answers. */
        sql = sql_format("SELECT GET_LOCK('%s', " FOREVER_S "), RELEASE_LOCK('%s')", l->name, l->name);
        if (!sql)
            dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory");
    }
    bool sent = sql && send_text(l, sql);
    if (sql && !sent)
        dlock_seterr(DLOCK_EUNAVAILABLE, "%s", mysql_error(l->conn->db));
    free(sql);
    if (!sent)
        return WATCH_FAILED;
    l->place.state = LINE_WATCHING;
    return WATCH_SENT;
}

/* How long past its timeout the answer to a lease-mode sleep is awaited:
 * the server ends the sleep itself, and a sleep still in flight when the
 * caller moves on costs the connection. */
#define SLEEP_GRACE_MS 100

/* At the head: sends the watch; false when the wait ends here (*rc). */
static bool watch_from_head(struct my_pool *pool, struct my_line *l, const struct my_line_watch *watch,
                            int64_t sleep_ms, void *log_handle, int *rc)
{
    *rc = DLOCK_OK;
    enum watch_sent sent = send_watch(l, watch, sleep_ms > 0 ? sleep_ms : 0);
    if (sent == WATCH_LOOK)
        return false;
    if (sent == WATCH_FAILED) {
        dlock_provider_log(log_handle, DLOCK_LOG_WARN, "%s: a waiter's request could not be sent (%s); the next "
                           "look joins the line again", pool->server->label, dlock_errmsg());
        drop(pool, l, false);
        return false;
    }
    return true;
}

/* Takes in the answer that has arrived on the waiter's connection: false
 * when the wait ends (*rc), true when it goes on (a request sent again, or
 * the watch sent after the gate came) until deadline. */
static bool take_answer(struct my_pool *pool, struct my_line *l, const struct my_line_watch *watch, int64_t deadline,
                        void *log_handle, int *rc)
{
    *rc = DLOCK_OK;
    char err[256] = "no answer";
    long long v = read_answer(l, err, sizeof err);
    unsigned e = v == -2 ? mysql_errno(l->conn->db) : 0;
    /* KILL QUERY: in lease mode the release's way of ending our sleep.
     * One that comes late, after we moved on, may end the request for
     * the gate instead (GET_LOCK then answers NULL, or the error), as
     * may a statement time limit we could not lift: the gate is then
     * asked for again, a few times in a row at most. */
    bool cut_off = e == ER_QUERY_INTERRUPTED || e == ER_STATEMENT_TIMEOUT || e == MY_ER_QUERY_TIMEOUT;
    if ((cut_off || v == -1) && l->place.state == LINE_ASKED && l->reasks < 3) {
        char sql[96];
        ask_for_gate(l, sql, sizeof sql, FOREVER_S);
        l->reasks++;
        if (send_text(l, sql))
            return true;
    }
    if (cut_off && l->place.state == LINE_WATCHING) {
        /* Woken by the release, which took the waker; or by a late KILL
         * meant for an earlier use of this connection, or a time limit,
         * which did not: disarming stays due (it checks the id). */
        l->place.state = LINE_HEAD;
        return false;
    }
    if (v < 0) { /* an error, or NULL: GET_LOCK's own error */
        dlock_provider_log(log_handle, DLOCK_LOG_WARN, "%s: a waiter's request failed (%s); the next look "
                           "joins the line again", pool->server->label, err);
        drop(pool, l, false);
        return false;
    }
    if (l->place.state == LINE_ASKED) {
        l->place.state = LINE_HEAD; /* the gate is ours: watch the holder */
        l->reasks = 0;
        return watch_from_head(pool, l, watch, deadline - dlock_provider_now_ms(), log_handle, rc);
    }
    l->place.state = LINE_HEAD; /* the holder let go, or the sleep ran out: look */
    l->armed = watch && v == 2; /* slept out: the waker may still be ours */
    return false;
}

int my_line_wait(struct my_pool *pool, struct my_line *l, const struct my_line_watch *watch, int64_t timeout_ms,
                 int wake_fd, void *log_handle)
{
    int64_t deadline = dlock_provider_now_ms() + timeout_ms;
    int rc;
    if (l->place.state == LINE_HEAD && !watch_from_head(pool, l, watch, timeout_ms, log_handle, &rc))
        return rc;
    for (;;) {
        int64_t now = dlock_provider_now_ms(), left = deadline - now;
        if (watch && l->place.state == LINE_WATCHING)
            left += SLEEP_GRACE_MS;
        struct pollfd p[2] = { { .fd = (int)mysql_get_socket(l->conn->db), .events = POLLIN },
                               { .fd = wake_fd, .events = POLLIN } };
        int n = poll(p, wake_fd >= 0 ? 2 : 1, left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno != EINTR)
            return dlock_seterr(DLOCK_EUNAVAILABLE, "mysql: poll failed: %s", strerror(errno));
        if (n == 0)
            return DLOCK_ETIMEDOUT;
        if (n < 0 || (wake_fd >= 0 && (p[1].revents & POLLIN)))
            return DLOCK_OK;
        if (!take_answer(pool, l, watch, deadline, log_handle, &rc))
            return rc;
    }
}

int my_line_arm(struct my_pool *pool, struct my_line *l, const struct my_line_watch *watch, int64_t *timeout_ms,
                int *fd, void *log_handle)
{
    int rc;
    *fd = -1;
    l->park_deadline = dlock_provider_now_ms() + *timeout_ms;
    if (l->place.state == LINE_HEAD && !watch_from_head(pool, l, watch, *timeout_ms, log_handle, &rc)) {
        *timeout_ms = 0; /* over already: look at once */
        return rc;
    }
    *fd = (int)mysql_get_socket(l->conn->db);
    if (*fd < 0)
        *timeout_ms = 0;
    return DLOCK_OK;
}

int my_line_disarm(struct my_pool *pool, struct my_line *l, const struct my_line_watch *watch, int fired,
                   void *log_handle)
{
    if (!fired)
        return DLOCK_ETIMEDOUT; /* a sleep in flight is read by the next wait */
    if (!l->conn)
        return DLOCK_OK;
    int rc;
    return take_answer(pool, l, watch, l->park_deadline, log_handle, &rc) ? DLOCK_EBUSY : rc;
}

void my_line_leave(struct my_pool *pool, struct my_line *l)
{
    if (!l->conn)
        return;
    if (l->place.state == LINE_ASKED || l->place.state == LINE_WATCHING) {
        drop(pool, l, true);
        return;
    }
    if (l->place.state == LINE_HEAD) {
        char gate[40], sql[80];
        gate_of(l, gate, sizeof gate);
        snprintf(sql, sizeof sql, "DO RELEASE_LOCK('%s')", gate);
        if (mysql_query(l->conn->db, sql) != 0) {
            drop(pool, l, false); /* closing the session frees the gate as well */
            return;
        }
    }
    my_pool_put(pool, l->conn);
    memset(l, 0, sizeof *l);
}
