/* tests/backends/mysql/test_mysql.c - the mysql backend against a real MariaDB that this
 * program starts on a private port (and stops by PID): the conformance suite
 * in lease and in session mode, then what is particular to MySQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../../backends/common/name_digest.h"
#include "../../conformance/conformance.h"
#include "../../support/service.h"
#include "../../support/fault_proxy.h"
#include "../../support/async_result.h"
#include "../../support/native_cases.h"
#include "../../support/test_time.h"
#include "../../support/test_client.h"
#include "../../support/shared_kinds.h"
#include "../../support/fence_guard_case.h"
#include "../../support/downgrade_case.h"
#include "../../support/stopped_holder.h"
#include "../../support/waiters.h"

#include <dlock.h>
#include <mysql.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_service server = { .script = "mariadb" };

/* Runs SQL as root in the test database; returns the first value of the
 * first row (static, "" if none) and fails the test on an error. */
static const char *admin(const char *sql)
{
    static char value[256];
    MYSQL *db = mysql_init(NULL);
    if (!mysql_real_connect(db, "127.0.0.1", "root", "", NULL, (unsigned)server.port, NULL, 0))
        fail_msg("admin connection: %s", mysql_error(db));
    if (mysql_query(db, "CREATE DATABASE IF NOT EXISTS dl") != 0 || mysql_select_db(db, "dl") != 0 ||
        mysql_query(db, sql) != 0)
        fail_msg("%s: %s", sql, mysql_error(db));
    value[0] = '\0';
    MYSQL_RES *res = mysql_store_result(db);
    if (res) {
        MYSQL_ROW row = mysql_fetch_row(res);
        if (row && row[0])
            snprintf(value, sizeof value, "%s", row[0]);
        mysql_free_result(res);
    }
    mysql_close(db);
    return value;
}

/* The connect timeout gets the build's slack: with three suites sharing
 * two cores, the server's handshake alone has taken over a second. */
static void write_config(char *buf, size_t size, int lease_ms, int retry_cap_ms, const char *extra)
{
    snprintf(buf, size,
             "backend = \"mysql\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "mysql = { port = %d; user = \"root\"; database = \"dl\";\n"
             "  connect_timeout_ms = %lld; command_timeout_ms = 1000; %s };\n",
             lease_ms, retry_cap_ms, server.port, (long long)slack_ms(1000), extra);
}

/* A pool of 8: attempts without a thread take at most half of it, and the
 * non-blocking pass sends 4 at once. */
static void lease_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    write_config(buf, size, lease_ms, retry_cap_ms, "pool_size = 8;");
}

static void session_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    write_config(buf, size, lease_ms, retry_cap_ms, "mode = \"session\";");
}

static void steal_row(const char *name)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE dlock_locks SET owner = 'someone-else:1' WHERE name = 'dlock:%s'", name);
    admin(sql);
}

/* KILLs the connection that holds NAME's named lock. */
static void kill_holder_connection(const char *name)
{
    char key[600], hex[17], sql[256];
    snprintf(key, sizeof key, "dlock:%s", name);
    name_digest_hex(name_digest(key, strlen(key), NULL, 0), hex);
    snprintf(sql, sizeof sql, "SELECT IS_USED_LOCK('dlock_%s')", hex);
    const char *id = admin(sql);
    if (!id[0])
        fail_msg("nobody holds %s", name);
    snprintf(sql, sizeof sql, "KILL %s", id);
    admin(sql);
}

static dlock_client *open_with(const char *extra, int *rc)
{
    char text[2048];
    write_config(text, sizeof text, 30000, 100, extra);
    dlock_client *c = NULL;
    *rc = dlock_client_open_string(&c, text);
    return c;
}

static dlock_client *open_ok(const char *extra)
{
    int rc;
    dlock_client *c = open_with(extra, &rc);
    if (rc != DLOCK_OK)
        fail_msg("open: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return c;
}

/* Lease mode through the fault proxy at port, on one pooled connection. */
static dlock_client *open_lease_at(int port)
{
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"mysql\";\nmysql = { host = \"127.0.0.1\"; port = %d; user = \"root\"; "
             "database = \"dl\"; pool_size = 1; };\n", port);
    return test_client_open(text);
}

/* ---- particular to mysql ---------------------------------------------------------------- */

static void the_row_holds_owner_fence_and_server_expiry(void **state)
{
    (void)state;
    dlock_client *a = open_ok("");
    dlock_lock *l = test_lock_named(a, "layout");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_string_equal(admin("SELECT count(*) FROM dlock_locks WHERE name = 'dlock:layout' AND owner LIKE '%:%'"
                              " AND fence = 1 AND expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
                              " BETWEEN 29000 AND 30000"),
                        "1");
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_string_equal(
        admin("SELECT count(*) FROM dlock_locks WHERE name = 'dlock:layout' AND owner IS NULL AND fence = 1"), "1");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t f;
    assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
    assert_int_equal(f, 2);
    /* A renewal in the same millisecond changes no value and is still ours. */
    assert_int_equal(dlock_renew(l), DLOCK_OK);
    assert_int_equal(dlock_renew(l), DLOCK_OK);
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(a, "layout", 6, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_int_equal(st.fence, 2);
    assert_true(st.ttl_ms > 29000 && st.ttl_ms <= 30000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void busy_answer_carries_the_holders_remaining_lease(void **state)
{
    (void)state;
    dlock_client *a = open_ok(""), *b = open_ok("");
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = 400;
    dlock_lock *la = NULL, *lb = test_lock_named(b, "hint");
    assert_int_equal(dlock_lock_new(a, "hint", 4, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    /* B is told when the lease ends instead of backing off past it. */
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(lb, 5000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    if (took < 300 || took > 400 + 120)
        fail_msg("granted after %lld ms", (long long)took);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* The row's waker as text, with null_as for NULL. */
static const char *waker_as(const char *name, const char *null_as)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT IFNULL(waker, '%s') FROM dlock_locks WHERE name = 'dlock:%s'", null_as, name);
    return admin(sql);
}

static const char *waker_of(const char *name)
{
    return waker_as(name, "0");
}

/* Lease mode waits in the server: while the holder holds (1.5 s, where the
 * backoff up to a retry cap of 4 s would ask about ten times), the waiter
 * asks once and its connection's id is in the row; the release takes it
 * out and ends the waiter's sleep, and the second attempt is the grant. */
static void lease_mode_waiters_wait_in_the_server(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    dlock_client *a = test_client_open(text), *b = test_client_open(text);
    assert_true(dlock_client_capabilities(b) & DLOCK_CAP_NATIVE_WAIT);
    dlock_lock *la = test_lock_named(a, "armed");
    struct waiter w = { test_lock_named(b, "armed"), -1, 0 };
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    pthread_t t;
    start_waiter(&w, &t, b);
    sleep_ms(1500);
    assert_int_equal(test_client_metric(b, "dlock_acquire_attempts_total"), 1);
    assert_string_not_equal(waker_of("armed"), "0");
    int64_t t0 = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    if (w.granted_at - t0 > slack_ms(500))
        fail_msg("granted %lld ms after the release", (long long)(w.granted_at - t0));
    assert_int_equal(test_client_metric(b, "dlock_acquire_attempts_total"), 2);
    assert_string_equal(waker_of("armed"), "0");
    dlock_lock_free(w.lock);
    dlock_lock_free(la);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* An operator's break frees the row as a release does, and wakes the
 * waiter the same way (its sleep would last the holder's 30 s lease). */
static void a_break_wakes_the_waiter(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    dlock_client *a = test_client_open(text), *b = test_client_open(text), *op = test_client_open(text);
    dlock_lock *la = test_lock_named(a, "broken-line");
    struct waiter w = { test_lock_named(b, "broken-line"), -1, 0 };
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    pthread_t t;
    start_waiter(&w, &t, b);
    int broken = 0;
    uint64_t fence = 0;
    int64_t t0 = now_ms();
    assert_int_equal(dlock_break(op, "broken-line", 11, &broken, &fence), DLOCK_OK);
    assert_int_equal(broken, 1);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    if (w.granted_at - t0 > slack_ms(500))
        fail_msg("granted %lld ms after the break", (long long)(w.granted_at - t0));
    assert_int_equal(test_client_metric(b, "dlock_acquire_attempts_total"), 2);
    assert_int_not_equal(dlock_release(la), DLOCK_OK); /* broken */
    dlock_lock_free(w.lock);
    dlock_lock_free(la);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(op);
}

/* Shared kinds wait the same way: a reader behind an exclusive hold is
 * woken when that hold is downgraded, and a permit request behind the one
 * permit of a semaphore when its holder lets go. */
static void readers_and_permits_are_woken_by_what_frees_them(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    dlock_client *a = test_client_open(text), *b = test_client_open(text);
    dlock_lock *x = test_lock_named(a, "woken-reader");
    struct waiter r = { test_lock_of_kind(b, "woken-reader", DLOCK_MODE_SHARED, 0), -1, 0 };
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    pthread_t t;
    start_waiter(&r, &t, b);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(r.rc, DLOCK_OK);
    if (r.granted_at - t0 > slack_ms(500))
        fail_msg("the reader was granted %lld ms after the downgrade", (long long)(r.granted_at - t0));
    assert_int_equal(test_client_metric(b, "dlock_acquire_attempts_total"), 2);
    assert_int_equal(dlock_release(x), DLOCK_OK);

    dlock_lock *p = test_lock_of_kind(a, "woken-permit", DLOCK_MODE_SEMAPHORE, 1);
    struct waiter q = { test_lock_of_kind(b, "woken-permit", DLOCK_MODE_SEMAPHORE, 1), -1, 0 };
    assert_int_equal(dlock_acquire(p, 0), DLOCK_OK);
    start_waiter(&q, &t, b);
    t0 = now_ms();
    assert_int_equal(dlock_release(p), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(q.rc, DLOCK_OK);
    if (q.granted_at - t0 > slack_ms(500))
        fail_msg("the permit was granted %lld ms after the release", (long long)(q.granted_at - t0));
    assert_int_equal(test_client_metric(b, "dlock_acquire_attempts_total"), 4);
    dlock_lock_free(q.lock);
    dlock_lock_free(p);
    dlock_lock_free(r.lock);
    dlock_lock_free(x);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A holder that stops (SIGSTOP: lease 1 s, no more renewals) never lets
 * go: the waiter's sleep in the server ends when that lease would run out,
 * and it takes the expired row. */
static void a_waiter_outlives_a_holder_that_stopped(void **state)
{
    (void)state;
    char holder[2048];
    write_config(holder, sizeof holder, 1000, 4000, "");
    pid_t pid = stopped_holder_start(holder, "stopped-holder", 0);
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    dlock_client *w = test_client_open(text);
    dlock_lock *lw = test_lock_named(w, "stopped-holder");
    int64_t t0 = now_ms();
    int rc = dlock_acquire(lw, 10000);
    int64_t took = now_ms() - t0;
    stopped_holder_end(pid);
    assert_int_equal(rc, DLOCK_OK);
    if (took > slack_ms(2000))
        fail_msg("granted %lld ms after a holder with a 1 s lease stopped", (long long)took);
    assert_int_equal(dlock_release(lw), DLOCK_OK);
    dlock_lock_free(lw);
    dlock_client_close(w);
}

/* Fair mode: a request that comes while the lock is free between two
 * holds does not take it ahead of the waiter at the head of the line. The
 * waiter is stopped (SIGSTOP) once it is armed in the row, so the lock is
 * still free after the release when the newcomer tries. */
static void fair_mode_keeps_a_newcomer_behind_the_line(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    int go[2], done[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    /* Forked before this process has clients (and their threads). */
    pid_t pid = fork();
    if (pid == 0) {
        close(go[1]);
        close(done[0]);
        char ch;
        if (read(go[0], &ch, 1) != 1)
            _exit(2);
        dlock_client *c = NULL;
        dlock_lock *l = NULL;
        if (dlock_client_open_string(&c, text) != DLOCK_OK || dlock_lock_new(c, "fair-line", 9, &o, &l) != DLOCK_OK ||
            dlock_acquire(l, 20000) != DLOCK_OK)
            _exit(3);
        if (write(done[1], "D", 1) != 1)
            _exit(4);
        dlock_release(l);
        _exit(0);
    }
    close(go[0]);
    close(done[1]);
    dlock_client *a = test_client_open(text), *n = test_client_open(text);
    dlock_lock *la = NULL, *ln = NULL;
    assert_int_equal(dlock_lock_new(a, "fair-line", 9, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(n, "fair-line", 9, &o, &ln), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(write(go[1], "G", 1), 1);
    close(go[1]);
    int64_t t0 = now_ms();
    while (strcmp(waker_of("fair-line"), "0") == 0 && now_ms() - t0 < 5000)
        sleep_ms(10);
    assert_string_not_equal(waker_of("fair-line"), "0"); /* at the head, armed */
    kill(pid, SIGSTOP);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    int rc = dlock_acquire(ln, 0); /* free now, but not the newcomer's turn */
    kill(pid, SIGCONT);
    char ch;
    ssize_t got = read(done[0], &ch, 1);
    close(done[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_int_equal(rc, DLOCK_EBUSY);
    assert_int_equal(got, 1);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    dlock_lock_free(ln);
    dlock_lock_free(la);
    dlock_client_close(n);
    dlock_client_close(a);
}

/* Holders that stop (SIGSTOP, lease 1 s) beside live ones with long
 * leases (20 s): a permit request is told the earliest holder's expiry and
 * gets the stopped holder's permit when that runs out; a writer armed
 * against two readers is woken when the live one lets go, and learns that
 * the row now expires when the stopped one's hold does. Both within about
 * a second, not at the live holders' 20 s. */
static void waiters_behind_stopped_and_live_holders_come_in_at_the_earliest_expiry(void **state)
{
    (void)state;
    char stopped_config[2048], text[2048];
    write_config(stopped_config, sizeof stopped_config, 1000, 4000, "");
    write_config(text, sizeof text, 20000, 4000, "");
    dlock_lock_options permit = DLOCK_LOCK_OPTIONS_INIT, reader = DLOCK_LOCK_OPTIONS_INIT;
    permit.mode = DLOCK_MODE_SEMAPHORE;
    permit.permits = 2;
    reader.mode = DLOCK_MODE_SHARED;
    pid_t p1 = stopped_holder_start_with(stopped_config, "earliest-permit", &permit);
    pid_t p2 = stopped_holder_start_with(stopped_config, "earliest-reader", &reader);
    dlock_client *h = test_client_open(text), *w = test_client_open(text);
    dlock_lock *hp = test_lock_of_kind(h, "earliest-permit", DLOCK_MODE_SEMAPHORE, 2);
    dlock_lock *hr = test_lock_of_kind(h, "earliest-reader", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(hp, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(hr, 0), DLOCK_OK);
    int64_t t0 = now_ms();
    struct waiter wp = { test_lock_of_kind(w, "earliest-permit", DLOCK_MODE_SEMAPHORE, 2), -1, 0 };
    struct waiter wx = { test_lock_named(w, "earliest-reader"), -1, 0 };
    pthread_t tp, tx;
    start_waiter(&wp, &tp, w);
    start_waiter(&wx, &tx, w);
    assert_int_equal(dlock_release(hr), DLOCK_OK);
    pthread_join(tp, NULL);
    pthread_join(tx, NULL);
    stopped_holder_end(p1);
    stopped_holder_end(p2);
    assert_int_equal(wp.rc, DLOCK_OK);
    assert_int_equal(wx.rc, DLOCK_OK);
    if (wp.granted_at - t0 > slack_ms(3000) || wx.granted_at - t0 > slack_ms(3000))
        fail_msg("the permit was granted after %lld ms, the writer after %lld ms", (long long)(wp.granted_at - t0),
                 (long long)(wx.granted_at - t0));
    assert_int_equal(dlock_release(hp), DLOCK_OK);
    dlock_lock_free(wp.lock);
    dlock_lock_free(wx.lock);
    dlock_lock_free(hp);
    dlock_lock_free(hr);
    dlock_client_close(h);
    dlock_client_close(w);
}

/* Kills every connection to the test database but the caller's own. */
static void kill_other_connections(void)
{
    char ids[512], sql[64];
    snprintf(ids, sizeof ids, "%s", admin("SELECT GROUP_CONCAT(id) FROM information_schema.processlist "
                                          "WHERE db = 'dl' AND id <> CONNECTION_ID()"));
    for (char *id = strtok(ids, ","); id; id = strtok(NULL, ",")) {
        snprintf(sql, sizeof sql, "KILL %s", id);
        admin(sql);
    }
}

/* A fair try-once: on a free lock whose pooled waiting connection the
 * server has closed, it is granted (the connection is replaced); on a lock
 * with a line, it is busy and makes no connection (20 tries, no new
 * server connections but a few). */
static void fair_try_once_is_granted_or_busy_without_new_connections(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    dlock_client *a = test_client_open(text), *b = test_client_open(text);
    dlock_lock *la = NULL, *lb = NULL;
    assert_int_equal(dlock_lock_new(a, "fair-once", 9, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(b, "fair-once", 9, &o, &lb), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* a waiting connection taken, and put back */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    kill_other_connections();
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct waiter w = { lb, -1, 0 };
    pthread_t t;
    start_waiter(&w, &t, b); /* b at the head of the line */
    dlock_client *c = test_client_open(text);
    dlock_lock *lc = NULL;
    assert_int_equal(dlock_lock_new(c, "fair-once", 9, &o, &lc), DLOCK_OK);
    assert_int_equal(dlock_acquire(lc, 0), DLOCK_EBUSY); /* c's connections made */
    char value[64];
    snprintf(value, sizeof value, "%s", admin("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                                              "WHERE VARIABLE_NAME = 'CONNECTIONS'"));
    long long before = strtoll(value, NULL, 10);
    for (int i = 0; i < 20; i++)
        assert_int_equal(dlock_acquire(lc, 0), DLOCK_EBUSY);
    snprintf(value, sizeof value, "%s", admin("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                                              "WHERE VARIABLE_NAME = 'CONNECTIONS'"));
    long long made = strtoll(value, NULL, 10) - before;
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    /* The admin queries above connect once each. */
    if (made > 4)
        fail_msg("20 fair try-onces made %lld new server connections", made);
    dlock_lock_free(lc);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(c);
    dlock_client_close(b);
    dlock_client_close(a);
}

/* Fair mode: a head of the line that hangs (stopped while it waits, its
 * sessions open, its gate held) does not hold the line for good: the fair
 * waiter behind it looks out of turn when its wait runs out (retry cap
 * 300 ms) and takes the row once it has been free for 2 s. */
static void a_fair_line_outlives_a_head_that_hangs(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 300, "");
    int go[2];
    assert_int_equal(pipe(go), 0);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    pid_t pid = fork(); /* before this process has clients */
    if (pid == 0) {
        close(go[1]);
        char ch;
        dlock_client *c = NULL;
        dlock_lock *l = NULL;
        if (read(go[0], &ch, 1) != 1 || dlock_client_open_string(&c, text) != DLOCK_OK ||
            dlock_lock_new(c, "hung-head", 9, &o, &l) != DLOCK_OK)
            _exit(2);
        dlock_acquire(l, 20000);
        _exit(0);
    }
    close(go[0]);
    dlock_client *a = test_client_open(text), *x = test_client_open(text);
    dlock_lock *la = NULL, *lx = NULL;
    assert_int_equal(dlock_lock_new(a, "hung-head", 9, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(x, "hung-head", 9, &o, &lx), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(write(go[1], "G", 1), 1);
    close(go[1]);
    int64_t t0 = now_ms();
    while (strcmp(waker_of("hung-head"), "0") == 0 && now_ms() - t0 < 5000)
        sleep_ms(10);
    assert_string_not_equal(waker_of("hung-head"), "0"); /* at the head, armed */
    kill(pid, SIGSTOP);
    struct waiter w = { lx, -1, 0 };
    pthread_t t;
    start_waiter(&w, &t, x); /* behind the hung head */
    t0 = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    stopped_holder_end(pid);
    assert_int_equal(w.rc, DLOCK_OK);
    if (w.granted_at - t0 < 1900 || w.granted_at - t0 > slack_ms(4000))
        fail_msg("granted %lld ms after the release, past a head that hangs", (long long)(w.granted_at - t0));
    dlock_lock_free(lx);
    dlock_lock_free(la);
    dlock_client_close(x);
    dlock_client_close(a);
}

/* A reader at the head of the line that is refused only because a writer
 * registered (the writer waits behind it in the line) lets the writer by:
 * at the holder's release the writer is granted, then the reader, both at
 * once, not when the holder's 30 s lease would have run out. */
static void a_reader_at_the_head_lets_a_waiting_writer_by(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    dlock_client *e = test_client_open(text), *r = test_client_open(text), *x = test_client_open(text);
    dlock_lock *le = test_lock_named(e, "writer-by");
    struct waiter wr = { test_lock_of_kind(r, "writer-by", DLOCK_MODE_SHARED, 0), -1, 0 };
    struct waiter wx = { test_lock_named(x, "writer-by"), -1, 0 };
    assert_int_equal(dlock_acquire(le, 0), DLOCK_OK);
    pthread_t tr, tx;
    start_waiter(&wr, &tr, r); /* the head */
    start_waiter(&wx, &tx, x); /* registered as a writer, behind the reader */
    int64_t t0 = now_ms();
    assert_int_equal(dlock_release(le), DLOCK_OK);
    pthread_join(tx, NULL);
    pthread_join(tr, NULL);
    assert_int_equal(wx.rc, DLOCK_OK);
    assert_int_equal(wr.rc, DLOCK_OK);
    if (wx.granted_at - t0 > slack_ms(1000) || wr.granted_at - t0 > slack_ms(1500))
        fail_msg("writer granted after %lld ms, reader after %lld ms", (long long)(wx.granted_at - t0),
                 (long long)(wr.granted_at - t0));
    assert_true(wx.granted_at <= wr.granted_at);
    dlock_lock_free(wx.lock);
    dlock_lock_free(wr.lock);
    dlock_lock_free(le);
    dlock_client_close(e);
    dlock_client_close(r);
    dlock_client_close(x);
}

/* See more_waiters_than_waiting_connections. */
static void waiters_beyond_the_waiting_connections_still_come_in_soon(void **state)
{
    (void)state;
    /* The holders take their names while up to 64 waiters already wait
     * in the server: with other servers' tests on the same two cores, a
     * statement may take longer than the usual 1 s limit. */
    char text[2048];
    snprintf(text, sizeof text,
             "backend = \"mysql\";\nlease_ms = 30000;\nretry_base_ms = 5;\nretry_cap_ms = 4000;\n"
             "mysql = { port = %d; user = \"root\"; database = \"dl\";\n"
             "  connect_timeout_ms = 5000; command_timeout_ms = 5000; pool_size = 4; };\n",
             server.port);
    more_waiters_than_waiting_connections(text);
}

/* A head that gives up while armed takes its connection's id out of the
 * row: left there, a later release would KILL QUERY whatever that pooled
 * connection runs next. */
static void a_waiter_that_gives_up_leaves_no_waker(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    dlock_client *a = test_client_open(text), *b = test_client_open(text);
    dlock_lock *la = test_lock_named(a, "gave-up");
    dlock_lock *lb = test_lock_of_kind(b, "gave-up", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 500), DLOCK_ETIMEDOUT);
    assert_string_equal(waker_of("gave-up"), "0");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A server-wide statement time limit (MariaDB's max_statement_time, 1 s
 * here) does not cut the waits short: the waiter's connections lift it, so
 * a 2.5 s wait is one busy answer and one grant. */
static void a_statement_time_limit_does_not_cut_waits_short(void **state)
{
    (void)state;
    admin("SET GLOBAL max_statement_time = 1");
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "");
    dlock_client *a = test_client_open(text), *b = test_client_open(text);
    dlock_lock *la = test_lock_named(a, "time-limit");
    struct waiter w = { test_lock_named(b, "time-limit"), -1, 0 };
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    pthread_t t;
    start_waiter(&w, &t, b);
    sleep_ms(2500);
    long long during = test_client_metric(b, "dlock_acquire_attempts_total");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    admin("SET GLOBAL max_statement_time = 0");
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(during, 1);
    assert_int_equal(test_client_metric(b, "dlock_acquire_attempts_total"), 2);
    dlock_lock_free(w.lock);
    dlock_lock_free(la);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void lease_hold_survives_a_killed_connection(void **state)
{
    (void)state;
    dlock_client *a = open_ok(""), *b = open_ok("");
    dlock_lock *la = test_lock_named(a, "survivor"), *lb = test_lock_named(b, "survivor");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    /* Kill every other connection: the hold is the row, not the session. */
    char sql[128];
    const char *ids = admin("SELECT GROUP_CONCAT(id) FROM information_schema.processlist "
                            "WHERE db = 'dl' AND id <> CONNECTION_ID()");
    char copy[256];
    snprintf(copy, sizeof copy, "%s", ids);
    for (char *id = strtok(copy, ","); id; id = strtok(NULL, ",")) {
        snprintf(sql, sizeof sql, "KILL %s", id);
        admin(sql);
    }
    assert_int_equal(dlock_renew(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void session_hold_is_lost_with_its_connection(void **state)
{
    (void)state;
    dlock_client *a = open_ok("mode = \"session\";"), *b = open_ok("mode = \"session\";");
    dlock_lock *la = test_lock_named(a, "sess"), *lb = test_lock_named(b, "sess");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(b, "sess", 4, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    kill_holder_connection("sess");
    assert_int_equal(dlock_renew(la), DLOCK_ELOST);
    assert_int_equal(dlock_acquire(lb, 1000), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* Session mode: the holder's session has a wait_timeout of three leases
 * (here 3 s), so that a vanished client's named locks do not outlive it by
 * hours; a fixed lease longer than that is told the truth: its validity is
 * capped at it, and the hold is lost there, as the server drops the idle
 * session and frees the lock for others. */
static void session_wait_timeout_bounds_an_idle_hold(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 1000, 100, "mode = \"session\";");
    dlock_client *a = test_client_open(text);
    dlock_client *b = open_ok("mode = \"session\";");
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = 20000;
    dlock_lock *la = NULL, *lb = test_lock_named(b, "idle");
    assert_int_equal(dlock_lock_new(a, "idle", 4, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    int64_t v = dlock_validity_ms(la);
    if (v > 3000)
        fail_msg("validity %lld ms, beyond the 3 s the idle session lives", (long long)v);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(lb, 8000), DLOCK_OK); /* the server closed the idle session */
    assert_true(now_ms() - t0 >= 2000);
    assert_int_equal(dlock_validity_ms(la), DLOCK_ELOST);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* The release runs, its answer is lost with the connection, and the pool
 * sends it again on a new one, which finds the row already freed: the
 * first release's doing, so DLOCK_OK, not a false DLOCK_ELOST. */
static void release_resent_after_a_lost_answer_is_ok(void **state)
{
    (void)state;
    int proxy_port;
    struct fault_proxy *proxy = fault_proxy_start(server.port, &proxy_port);
    assert_non_null(proxy);
    dlock_client *c = open_lease_at(proxy_port);
    dlock_lock *l = test_lock_named(c, "resent");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* statements prepared on the one connection */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    int rc = dlock_release(l);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_errmsg());
    fault_proxy_set(proxy, FAULT_PASS, 0);
    dlock_lock_free(l);
    dlock_client_close(c);
    fault_proxy_stop(proxy);
    if (rc != DLOCK_OK)
        fail_msg("release: %s: %s", dlock_strerror(rc), why);
}

/* ---- the non-blocking API's attempts, sent without a thread --------------------- */

/* Lease mode through the fault proxy at port, on a pool of two: one
 * connection may carry an attempt sent without a thread. */
/* Timeouts of whole seconds with room: libmariadb bounds the server's
 * greeting by them, and a connection made through the proxy while three
 * suites run side by side once waited more than 1 s for it. */
static dlock_client *open_native_at(int port)
{
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"mysql\";\nmysql = { host = \"127.0.0.1\"; port = %d; user = \"root\"; "
             "database = \"dl\"; pool_size = 2; command_timeout_ms = 3000; connect_timeout_ms = 5000; };\n",
             port);
    return test_client_open(text);
}

static dlock_client *open_direct(void)
{
    return open_ok("");
}

/* Lost, missing and dead-connection answers (tests/support/native_cases.c);
 * the deadline is two command timeouts, for up to two statements. */
NATIVE_CASES(open_native_at, open_direct, server.port, 6000)

/* The waiting writer's registration sent from the answer's step
 * (tests/support/native_cases.c). */
static dlock_client *open_pool_of_two(void)
{
    return open_ok("pool_size = 2;");
}

static void native_busy_attempt_registers_the_writer_and_waits(void **state)
{
    (void)state;
    native_case_busy_registers_the_writer(open_pool_of_two, open_direct, admin,
                                          "SELECT COALESCE(writer, '') FROM dlock_locks WHERE name = "
                                          "'dlock:native-busy'");
}

/* ---- batched renewals ------------------------------------------------------------------ */

enum { BATCH_HOLDS = 100 };

/* The batch holds' lease. A renewal round may come two thirds of a lease
 * late before its holds are lost; on a loaded machine a sanitizer build's
 * timer thread was kept off a core for longer than a 900 ms lease allows,
 * so the lease gets the build's slack, up to twice: the renewal tick is a
 * third of it, and the batching bound below holds for ticks up to 600 ms. */
static int batch_lease_ms(void)
{
    int64_t ms = slack_ms(900);
    return ms > 1800 ? 1800 : (int)ms;
}

static long long global_status(const char *name)
{
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '%s'", name);
    return atoll(admin(sql));
}

/* BATCH_HOLDS watchdog holds "<stem>-<i>" on one client configured with
 * extra; lost[i] counts the on_lost calls of hold i. */
static dlock_client *hold_many(const char *extra, const char *stem, dlock_lock **locks, int *lost)
{
    char text[2048];
    write_config(text, sizeof text, batch_lease_ms(), 100, extra);
    dlock_client *c = test_client_open(text);
    test_hold_many(c, stem, BATCH_HOLDS, locks, lost);
    return c;
}

/* Lease mode: the holds due together are renewed by one multi-table UPDATE
 * (the server's own statement counters say so); a row taken over is
 * reported lost for that hold alone, and the others go on being renewed. */
static void lease_holds_renew_in_batches(void **state)
{
    (void)state;
    dlock_lock *locks[BATCH_HOLDS];
    static int lost[BATCH_HOLDS]; /* on_lost writes here until the client closes, even after a failed check */
    memset(lost, 0, sizeof lost);
    dlock_client *c = hold_many("", "batch", locks, lost);
    /* A name with bytes JSON treats specially rides in the same batches
     * (keys go as hex). */
    dlock_lock *odd = test_lock_named(c, "odd \xff\"[,]\\'\x01");
    assert_int_equal(dlock_acquire(odd, 0), DLOCK_OK);
    long long multi0 = global_status("COM_UPDATE_MULTI"), single0 = global_status("COM_UPDATE");
    usleep(3 * batch_lease_ms() * 1000);
    long long multi = global_status("COM_UPDATE_MULTI") - multi0, single = global_status("COM_UPDATE") - single0;
    test_only_this_hold_lost(locks, lost, BATCH_HOLDS, -1);
    assert_true(dlock_validity_ms(odd) > 0);
    assert_int_equal(dlock_release(odd), DLOCK_OK);
    dlock_lock_free(odd);
    long long renewals = test_client_metric(c, "dlock_renewals_total");
    print_message("# %lld renewals in %lld batch statements and %lld single updates\n", renewals, multi, single);
    assert_true(renewals >= BATCH_HOLDS * 6);
    /* One statement per hold would be 1:1. Holds fall due in 20 ms windows,
     * so even acquires spread over the whole tick (300 ms, 600 ms with a
     * widened lease) make at most 30 statements a tick; a hold alone in
     * its window is renewed by the single statement. */
    assert_true(multi >= 1 && renewals >= 3 * (multi + single));
    steal_row("batch-7");
    usleep(batch_lease_ms() * 1000);
    test_only_this_hold_lost(locks, lost, BATCH_HOLDS, 7);
    test_release_many(locks, BATCH_HOLDS, 7);
    dlock_client_close(c);
}

/* Session mode: one query per round counts the named locks the holder
 * connection holds (the server's SELECT counter says one per round, not
 * one per hold); when that connection is killed every hold is lost, each
 * reported once. */
static void session_holds_renew_in_batches(void **state)
{
    (void)state;
    dlock_lock *locks[BATCH_HOLDS];
    static int lost[BATCH_HOLDS]; /* on_lost writes here until the client closes, even after a failed check */
    memset(lost, 0, sizeof lost);
    dlock_client *c = hold_many("mode = \"session\";", "sbatch", locks, lost);
    long long selects0 = global_status("COM_SELECT");
    usleep(3 * batch_lease_ms() * 1000);
    long long selects = global_status("COM_SELECT") - selects0;
    test_only_this_hold_lost(locks, lost, BATCH_HOLDS, -1);
    long long renewals = test_client_metric(c, "dlock_renewals_total");
    print_message("# %lld renewals in %lld SELECTs\n", renewals, selects);
    assert_true(renewals >= BATCH_HOLDS * 6);
    assert_true(selects >= 1 && renewals >= 3 * selects); /* one per hold would be 1:1 */
    kill_holder_connection("sbatch-0");
    usleep(batch_lease_ms() * 1000);
    test_every_hold_lost(locks, lost, BATCH_HOLDS);
    dlock_client_close(c);
}

/* ---- shared holds and semaphores -------------------------------------------------------- */

/* Shared holders share the name's row: owner is the kind, holders their
 * expiries; status counts them; another kind is refused with a message
 * that says which; the last one out frees the row and keeps its fence.
 * Session mode has neither (GET_LOCK has no shared kind). */
static void shared_holds_live_in_the_row(void **state)
{
    (void)state;
    dlock_client *a = open_ok(""), *b = open_ok("");
    dlock_lock *held[3];
    test_shared_kinds_hold(a, b, held);
    dlock_lock *s1 = held[0], *s2 = held[1], *p = held[2];
    assert_string_equal(admin("SELECT CONCAT(owner, ' ', JSON_LENGTH(holders), ' ', fence) FROM dlock_locks"
                              " WHERE name = 'dlock:rw' AND expires_at - UNIX_TIMESTAMP(NOW(3)) * 1000"
                              " BETWEEN 29000 AND 30000"),
                        "~s 2 2");
    assert_int_equal(dlock_release(s1), DLOCK_OK);
    assert_int_equal(dlock_release(s2), DLOCK_OK);
    assert_int_equal(dlock_release(p), DLOCK_OK);
    assert_string_equal(admin("SELECT COUNT(*) FROM dlock_locks WHERE name = 'dlock:rw' AND owner IS NULL"
                              " AND fence = 2"), "1");
    assert_int_equal(dlock_release(s1), DLOCK_ENOTOWNER);
    dlock_lock_free(s1);
    dlock_lock_free(s2);
    dlock_lock_free(p);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client *c = open_ok("mode = \"session\";");
    assert_int_equal(dlock_client_capabilities(c) & (DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE), 0);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = DLOCK_MODE_SHARED;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, "rw", 2, &o, &l), DLOCK_ENOTSUP);
    dlock_client_close(c);
}

/* A table made before shared holds existed: opened with create_table (the
 * default) it gets their columns; without, exclusive locks work and a
 * shared request says what to run. */
static void a_table_from_before_shared_holds(void **state)
{
    (void)state;
    admin("DROP TABLE IF EXISTS old_locks, older_locks");
    admin("CREATE TABLE old_locks (name VARBINARY(600) NOT NULL PRIMARY KEY, owner VARCHAR(100) NULL,"
          " fence BIGINT UNSIGNED NOT NULL, expires_at BIGINT NOT NULL) ENGINE=InnoDB");
    admin("CREATE TABLE older_locks LIKE old_locks");
    dlock_client *c = open_ok("table = \"old_locks\";");
    assert_true(dlock_client_capabilities(c) & DLOCK_CAP_NATIVE_WAIT); /* the waker column was added */
    dlock_lock *s = test_lock_of_kind(c, "old", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(s, 0), DLOCK_OK);
    assert_int_equal(dlock_release(s), DLOCK_OK);
    dlock_lock_free(s);
    dlock_client_close(c);
    c = open_ok("table = \"older_locks\"; create_table = false;");
    dlock_lock *x = test_lock_named(c, "older");
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    /* Nowhere to keep a downgraded hold: refused up front, the hold kept;
     * nowhere to arm a waiter: waiters back off. */
    assert_int_equal(dlock_client_capabilities(c) & DLOCK_CAP_DOWNGRADE, 0);
    assert_int_equal(dlock_client_capabilities(c) & DLOCK_CAP_NATIVE_WAIT, 0);
    /* nor to mark a request for a kept hold: caching is refused. */
    assert_int_equal(dlock_client_capabilities(c) & DLOCK_CAP_CACHE, 0);
    assert_int_equal(dlock_downgrade(x), DLOCK_ENOTSUP);
    assert_true(dlock_validity_ms(x) > 0);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    s = test_lock_of_kind(c, "older", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(s, 0), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "ALTER TABLE"));
    dlock_lock_free(s);
    dlock_lock_free(x);
    dlock_client_close(c);
    admin("DROP TABLE old_locks, older_locks");
}

/* ---- lock caching ------------------------------------------------------------------------ */

/* The row's waker as text: "none" for NULL, so that a mark (0) shows. */
static const char *mark_of(const char *name)
{
    return waker_as(name, "none");
}

/* What a keeper polls for: every request that finds the name held leaves
 * a mark in the row (a try's busy answer, a shared request's, a head that
 * armed and then gave up), and what frees the row or grants it anew
 * clears it. */
static void a_request_for_a_held_name_leaves_a_mark_in_the_row(void **state)
{
    (void)state;
    dlock_client *a = open_ok(""), *b = open_ok("");
    dlock_lock *la = test_lock_named(a, "marked"), *lb = test_lock_named(b, "marked");
    dlock_lock *ls = test_lock_of_kind(b, "marked", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_string_equal(mark_of("marked"), "none");
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_string_equal(mark_of("marked"), "0");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_string_equal(mark_of("marked"), "none");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(ls, 0), DLOCK_EBUSY);
    assert_string_equal(mark_of("marked"), "0");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    /* Waiters that armed the row with their id, then gave up: the id goes
     * and the mark stays (a reader's own, a writer's with its place). */
    assert_int_equal(dlock_acquire(ls, 300), DLOCK_ETIMEDOUT);
    assert_string_equal(mark_of("marked"), "0");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 300), DLOCK_ETIMEDOUT);
    assert_string_equal(mark_of("marked"), "0");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(ls);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(b);
    dlock_client_close(a);
}

/* A lease-mode client configured with extra whose released holds are
 * kept for a minute unused. */
static dlock_client *open_caching(const char *extra)
{
    char text[2048];
    write_config(text, sizeof text, 30000, 100, extra);
    size_t used = strlen(text);
    snprintf(text + used, sizeof text - used, "cache = { idle_ms = 60000; cooldown_ms = 0; };\n");
    return test_client_open(text);
}

/* SELECT statements the server has run so far (this one included). */
static long long selects_so_far(void)
{
    return atoll(admin("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                       "WHERE VARIABLE_NAME = 'COM_SELECT'"));
}

/* A keeper polls its names while it holds one, and not once its holds are
 * given back: an idle client that once kept a hold asks nothing. */
static void a_keeper_polls_only_while_it_holds(void **state)
{
    (void)state;
    dlock_client *a = open_caching("cache_poll_ms = 20;"), *b = open_ok("");
    dlock_lock *la = test_lock_named(a, "polled"), *lb = test_lock_named(b, "polled");
    test_cycle_keeps(a, la, 1);
    long long before = selects_so_far();
    sleep_ms(500);
    long long while_kept = selects_so_far() - before;
    if (while_kept < 5)
        fail_msg("%lld selects in 500 ms of a kept hold, polled every 20 ms", while_kept);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    test_gives_back_soon(a);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    sleep_ms(50); /* a poll under way when the hold went */
    before = selects_so_far();
    sleep_ms(500);
    long long after = selects_so_far() - before;
    if (after > 1) /* the second count itself */
        fail_msg("%lld selects in 500 ms with no hold", after);
    /* Nor after a hold downgraded since its grant was released. */
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_downgrade(la), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    sleep_ms(50);
    before = selects_so_far();
    sleep_ms(500);
    after = selects_so_far() - before;
    if (after > 1)
        fail_msg("%lld selects in 500 ms after a downgraded hold's release", after);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(b);
    dlock_client_close(a);
}

/* A keeper whose polls fail cannot read requests for its holds, so it
 * gives them back rather than keep them unread until the idle limit. Its
 * user may open two connections: the pool's and the poll's, so the hold
 * is kept; then only one, and the poll's is ended: its reconnect is
 * refused while the pool's still works. (Refused from the start, the
 * first poll fails at the grant, and the release is a real one or a
 * give-back, depending on which comes first.) */
static void a_keeper_that_cannot_poll_gives_its_holds_back(void **state)
{
    (void)state;
    admin("DROP USER IF EXISTS 'dlock_one'@'127.0.0.1'");
    admin("CREATE USER 'dlock_one'@'127.0.0.1' IDENTIFIED BY 'one-secret' WITH MAX_USER_CONNECTIONS 2");
    admin("GRANT SELECT, INSERT, UPDATE ON dl.dlock_locks TO 'dlock_one'@'127.0.0.1'");
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"mysql\";\nmysql = { port = %d; user = \"dlock_one\"; password = \"one-secret\";"
             " database = \"dl\"; create_table = false; pool_size = 1; };\n"
             "cache = { idle_ms = 60000; cooldown_ms = 0; };\n",
             server.port);
    dlock_client *a = test_client_open(text);
    dlock_lock *l = test_lock_named(a, "unpolled");
    test_cycle_keeps(a, l, 1);
    /* The poll's connection is the user's second: the pool's was opened
     * with the client. */
    int64_t t0 = now_ms();
    while (atoi(admin("SELECT COUNT(*) FROM information_schema.processlist WHERE user = 'dlock_one'")) < 2 &&
           now_ms() - t0 < slack_ms(5000))
        sleep_ms(10);
    admin("ALTER USER 'dlock_one'@'127.0.0.1' WITH MAX_USER_CONNECTIONS 1");
    char sql[64];
    snprintf(sql, sizeof sql, "KILL %s",
             admin("SELECT MAX(id) FROM information_schema.processlist WHERE user = 'dlock_one'"));
    admin(sql);
    test_gives_back_soon(a);
    dlock_lock_free(l);
    dlock_client_close(a);
    admin("DROP USER 'dlock_one'@'127.0.0.1'");
}

/* A request waits for the keeper's poll before the keeper hears it (half
 * of a second, on average, here): that counts in what keeping the name
 * costs. Nine hits between requests save a few milliseconds, far less
 * than a request's wait, so the name stops being kept after the second
 * request; weighed on the give-back alone (a millisecond or so), keeping
 * it would seem to pay. */
static void a_late_heard_request_weighs_against_keeping(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 100, "cache_poll_ms = 1000;");
    size_t used = strlen(text);
    snprintf(text + used, sizeof text - used, "cache = { idle_ms = 60000; cooldown_ms = 60000; };\n");
    dlock_client *a = test_client_open(text), *b = open_ok("");
    dlock_lock *la = test_lock_named(a, "weighed"), *lb = test_lock_named(b, "weighed");
    for (int round = 1; round <= 2; round++) {
        for (int i = 0; i < 10; i++) {
            assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
            assert_int_equal(dlock_release(la), DLOCK_OK);
        }
        assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
        int64_t t0 = now_ms();
        while (test_client_metric(a, "dlock_cache_givebacks_total") < round && now_ms() - t0 < slack_ms(5000))
            sleep_ms(5);
        assert_int_equal(test_client_metric(a, "dlock_cache_givebacks_total"), round);
        assert_int_equal(dlock_acquire(lb, slack_ms(5000)), DLOCK_OK);
        assert_int_equal(dlock_release(lb), DLOCK_OK);
    }
    assert_int_equal(test_client_metric(a, "dlock_cache_hits_total"), 18);
    assert_int_equal(test_client_metric(a, "dlock_cache_pauses_total"), 1);
    /* Paused: released for real, not kept. */
    long long keeps = test_client_metric(a, "dlock_cache_keeps_total");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(test_client_metric(a, "dlock_cache_keeps_total"), keeps);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(b);
    dlock_client_close(a);
}

static void missing_table_without_create_is_a_config_error(void **state)
{
    (void)state;
    int rc;
    dlock_client *c = open_with("table = \"absent\"; create_table = false;", &rc);
    assert_null(c);
    assert_int_equal(rc, DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "create_table"));
}

static void a_least_privilege_user_is_enough(void **state)
{
    (void)state;
    admin("DROP USER IF EXISTS 'dlock_app'@'127.0.0.1'");
    admin("CREATE USER 'dlock_app'@'127.0.0.1' IDENTIFIED BY 'app-secret'");
    admin("GRANT SELECT, INSERT, UPDATE ON dl.dlock_locks TO 'dlock_app'@'127.0.0.1'");
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"mysql\";\nmysql = { port = %d; user = \"dlock_app\"; password = \"app-secret\";"
             " database = \"dl\"; create_table = false; };\n",
             server.port);
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("open as dlock_app: %s", dlock_errmsg());
    dlock_lock *l = test_lock_named(c, "least");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_renew(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    /* Shared holds and permits need no more than that. */
    l = test_lock_of_kind(c, "least-shared", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_renew(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
    snprintf(text, sizeof text,
             "backend = \"mysql\";\nmysql = { port = %d; user = \"dlock_app\"; password = \"app-secret\";"
             " database = \"dl\"; table = \"other\"; };\n",
             server.port);
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "denied"));
    snprintf(text, sizeof text,
             "backend = \"mysql\";\nmysql = { port = %d; user = \"dlock_app\"; password = \"wrong\"; database = \"dl\"; };\n",
             server.port);
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "Access denied"));
}

static void bad_settings_are_config_errors(void **state)
{
    (void)state;
    const char *bad[] = { "table = \"x`; DROP TABLE y\";", "mode = \"exclusive\";", "table = \"\";",
                          "cache_poll_ms = 0;" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        dlock_client *c = open_with(bad[i], &rc);
        assert_null(c);
        if (rc != DLOCK_ECONFIG)
            fail_msg("%s: %s (%s)", bad[i], dlock_strerror(rc), dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(), "mysql."));
    }
    char text[256];
    snprintf(text, sizeof text, "backend = \"mysql\";\nmysql = { port = %d; };\n", server.port);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "mysql.database"));
}

static void unreachable_server_is_a_clear_error(void **state)
{
    (void)state;
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"mysql\";\nmysql = { port = %d; database = \"dl\"; connect_timeout_ms = 500; };\n",
             server.port + 1);
    dlock_client *c = NULL;
    int64_t t0 = now_ms();
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_EUNAVAILABLE);
    assert_true(now_ms() - t0 < 1500);
    assert_non_null(strstr(dlock_errmsg(), "mysql 127.0.0.1:"));
}

static dlock_client *open_lease(void)
{
    return open_ok("");
}

/* The SQL fence guard of libdlock(3), FENCING (tests/support/fence_guard_case.c). */
static void sql_fence_guard_refuses_the_stale_holder(void **state)
{
    (void)state;
    static const struct sql_fence_guard_target target = {
        admin, open_lease, "INSERT INTO accounts VALUES (1, '', 0) ON DUPLICATE KEY UPDATE owner = '', fence = 0"
    };
    sql_fence_guard_case(&target);
}

/* tests/support/downgrade_case.c: the row after a downgrade, a waiting
 * writer's place, status, listing, a hold taken over, a resent downgrade
 * (server_port is set in main). */
static struct sql_downgrade_target downgrade = {
    .admin = admin,
    .open = open_lease,
    .open_at = open_lease_at,
    .writer_registered_sql = "SELECT COUNT(*) FROM dlock_locks WHERE name = 'dlock:dg' AND writer IS NOT NULL"
                             " AND writer_fence = fence",
    .row_sql = "SELECT CONCAT(MIN(t.owner), ' ', SUM(j.k NOT LIKE '%/%'"
               " AND CAST(JSON_EXTRACT(t.holders, CONCAT('$.\"', j.k, '\"')) AS SIGNED) = t.expires_at), ' ',"
               " MIN(t.writer IS NOT NULL AND t.writer_fence = t.fence))"
               " FROM dlock_locks AS t, JSON_TABLE(JSON_KEYS(t.holders), '$[*]' COLUMNS (k VARCHAR(100) PATH '$'))"
               " AS j WHERE t.name = 'dlock:dg'",
    .idle_writer_sql = "UPDATE dlock_locks SET writer = 'someone-waiting:1',"
                       " writer_until = UNIX_TIMESTAMP(NOW(3)) * 1000 + 60000, writer_fence = fence"
                       " WHERE name = 'dlock:dg'",
    .steal_sql = "UPDATE dlock_locks SET owner = 'someone-else:1' WHERE name = 'dlock:dg'",
    .owner_sql = "SELECT owner FROM dlock_locks WHERE name = 'dlock:dg'",
    .delete_sql = "DELETE FROM dlock_locks WHERE name = 'dlock:dg'",
};

static void stopped_server_times_out_then_recovers(void **state)
{
    (void)state;
    dlock_client *a = open_ok("");
    dlock_lock *l = test_lock_named(a, "frozen");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    test_service_signal(&server, SIGSTOP);
    int64_t t0 = now_ms();
    int rc = dlock_acquire(l, 0);
    int64_t took = now_ms() - t0;
    test_service_signal(&server, SIGCONT);
    assert_int_equal(rc, DLOCK_EUNAVAILABLE);
    /* command_timeout_ms = 1000 (libmariadb counts whole seconds). */
    if (took < 900 || took > 2500)
        fail_msg("a stopped server answered after %lld ms", (long long)took);
    int64_t t1 = now_ms();
    while ((rc = dlock_acquire(l, 0)) == DLOCK_EUNAVAILABLE && now_ms() - t1 < 5000)
        sleep_ms(50);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

int main(void)
{
    if (getenv("CMOCKA_FILTER")) /* one case by name, for checking it against older code */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    if (test_service_start(&server) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] mariadb did not start\n");
        return 1;
    }
    admin("CREATE DATABASE IF NOT EXISTS dl");
    static const struct conformance_target lease = { "mysql lease mode", lease_config, steal_row, NULL, 0,
                                                     CONFORMANCE_LISTS | CONFORMANCE_LISTS_NO_WAITERS, 0, CONFORMANCE_NATIVE_ATTEMPTS };
    static const struct conformance_target session = { "mysql session mode", session_config,
                                                       kill_holder_connection, NULL, 0, 0, 0, 0 };
    downgrade.server_port = server.port;
    int failed = conformance_run(&lease);
    failed += conformance_run(&session);
    const struct CMUnitTest particular[] = {
        cmocka_unit_test(the_row_holds_owner_fence_and_server_expiry),
        cmocka_unit_test(native_attempt_whose_answer_is_lost_holds_once),
        cmocka_unit_test(native_attempt_without_an_answer_ends_at_its_deadline),
        cmocka_unit_test(native_attempt_on_a_dead_idle_connection_is_sent_again),
        cmocka_unit_test(native_busy_attempt_registers_the_writer_and_waits),
        cmocka_unit_test(busy_answer_carries_the_holders_remaining_lease),
        cmocka_unit_test(lease_mode_waiters_wait_in_the_server),
        cmocka_unit_test(a_break_wakes_the_waiter),
        cmocka_unit_test(readers_and_permits_are_woken_by_what_frees_them),
        cmocka_unit_test(a_waiter_outlives_a_holder_that_stopped),
        cmocka_unit_test(fair_mode_keeps_a_newcomer_behind_the_line),
        cmocka_unit_test(a_fair_line_outlives_a_head_that_hangs),
        cmocka_unit_test(fair_try_once_is_granted_or_busy_without_new_connections),
        cmocka_unit_test(waiters_behind_stopped_and_live_holders_come_in_at_the_earliest_expiry),
        cmocka_unit_test(a_reader_at_the_head_lets_a_waiting_writer_by),
        cmocka_unit_test(waiters_beyond_the_waiting_connections_still_come_in_soon),
        cmocka_unit_test(a_waiter_that_gives_up_leaves_no_waker),
        cmocka_unit_test(a_statement_time_limit_does_not_cut_waits_short),
        cmocka_unit_test(lease_hold_survives_a_killed_connection),
        cmocka_unit_test(session_hold_is_lost_with_its_connection),
        cmocka_unit_test(session_wait_timeout_bounds_an_idle_hold),
        cmocka_unit_test(release_resent_after_a_lost_answer_is_ok),
        cmocka_unit_test_prestate(a_downgrade_makes_the_row_shared_in_place, &downgrade),
        cmocka_unit_test_prestate(downgrade_resent_after_a_lost_answer_is_ok, &downgrade),
        cmocka_unit_test_prestate(a_reader_behind_a_registered_writer_does_not_spin, &downgrade),
        cmocka_unit_test(lease_holds_renew_in_batches),
        cmocka_unit_test(session_holds_renew_in_batches),
        cmocka_unit_test(missing_table_without_create_is_a_config_error),
        cmocka_unit_test(shared_holds_live_in_the_row),
        cmocka_unit_test(a_table_from_before_shared_holds),
        cmocka_unit_test(a_least_privilege_user_is_enough),
        cmocka_unit_test(a_request_for_a_held_name_leaves_a_mark_in_the_row),
        cmocka_unit_test(a_keeper_polls_only_while_it_holds),
        cmocka_unit_test(a_late_heard_request_weighs_against_keeping),
        cmocka_unit_test(a_keeper_that_cannot_poll_gives_its_holds_back),
        cmocka_unit_test(bad_settings_are_config_errors),
        cmocka_unit_test(unreachable_server_is_a_clear_error),
        cmocka_unit_test(sql_fence_guard_refuses_the_stale_holder),
        cmocka_unit_test(stopped_server_times_out_then_recovers),
    };
    failed += cmocka_run_group_tests_name("mysql", particular, NULL, NULL);
    test_service_stop(&server);
    return failed ? 1 : 0;
}
