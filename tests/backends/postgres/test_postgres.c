/* tests/backends/postgres/test_postgres.c - the postgres backend against a real PostgreSQL
 * that this program starts on a private port (and stops by PID): the
 * conformance suite in lease and in session mode, then what is particular
 * to PostgreSQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../conformance/conformance.h"
#include "../../support/service.h"
#include "../../support/fault_proxy.h"
#include "../../support/test_time.h"
#include "../../support/test_client.h"
#include "../../support/shared_kinds.h"
#include "../../support/fence_guard_case.h"
#include "../../support/downgrade_case.h"
#include "../../support/stopped_holder.h"
#include "../../support/waiters.h"
#include "../../support/async_result.h"
#include "../../support/native_cases.h"

#include <dlock.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unistd.h>

static struct test_service server = { .script = "postgres" };

/* Runs SQL as the superuser; returns the first value of the first row
 * (static, "" if none) and fails the test on an error. */
static const char *admin(const char *sql)
{
    static char value[256];
    char info[256];
    snprintf(info, sizeof info, "host=127.0.0.1 port=%d user=postgres dbname=postgres", server.port);
    PGconn *c = PQconnectdb(info);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("admin connection: %s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    snprintf(value, sizeof value, "%s", PQntuples(r) > 0 && PQnfields(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    PQfinish(c);
    return value;
}

/* The timeouts get the build's slack: with three suites sharing two
 * cores, a client's first statements on a loaded server have taken over a
 * second. */
static int64_t timeout_ms(void)
{
    return slack_ms(1000);
}

static void write_config(char *buf, size_t size, int lease_ms, int retry_cap_ms, const char *extra)
{
    snprintf(buf, size,
             "backend = \"postgres\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "postgres = { port = %d; user = \"postgres\"; database = \"postgres\";\n"
             "  connect_timeout_ms = %lld; command_timeout_ms = %lld; %s };\n",
             lease_ms, retry_cap_ms, server.port, (long long)timeout_ms(), (long long)timeout_ms(), extra);
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

/* An operator (or a second writer) takes the row over. */
static void steal_row(const char *name)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "UPDATE dlock_locks SET owner = 'someone-else:1' WHERE name = convert_to('dlock:%s', 'UTF8')", name);
    admin(sql);
}

/* The session that holds the advisory locks is terminated. */
static void terminate_holder_sessions(const char *name)
{
    (void)name;
    admin("SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted");
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
             "backend = \"postgres\";\npostgres = { port = %d; user = \"postgres\"; database = \"postgres\"; "
             "pool_size = 1; };\n", port);
    return test_client_open(text);
}

/* ---- particular to postgres ----------------------------------------------------------- */

static void the_row_holds_owner_fence_and_server_expiry(void **state)
{
    (void)state;
    dlock_client *a = open_ok("");
    dlock_lock *l = test_lock_named(a, "layout");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_string_equal(admin("SELECT count(*) FROM dlock_locks WHERE name = convert_to('dlock:layout', 'UTF8')"
                              " AND owner LIKE '%:%' AND fence = 1"
                              " AND expires_at BETWEEN now() + interval '29 s' AND now() + interval '30 s'"),
                        "1");
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* Freed, not deleted: the row keeps the fence for the next holder. */
    assert_string_equal(admin("SELECT count(*) FROM dlock_locks WHERE name = convert_to('dlock:layout', 'UTF8')"
                              " AND owner IS NULL AND fence = 1"), "1");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t f;
    assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
    assert_int_equal(f, 2);
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(a, "layout", 6, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_int_equal(st.fence, 2);
    assert_true(st.ttl_ms > 29000 && st.ttl_ms <= 30000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void lease_hold_survives_a_terminated_connection(void **state)
{
    (void)state;
    dlock_client *a = open_ok(""), *b = open_ok("");
    dlock_lock *la = test_lock_named(a, "survivor"), *lb = test_lock_named(b, "survivor");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    /* Every connection of libdlock is cut; in lease mode the hold is the
     * row, so the next statement reconnects and the hold is still ours. */
    admin("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'libdlock'");
    assert_int_equal(dlock_renew(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void session_hold_is_lost_with_its_session(void **state)
{
    (void)state;
    dlock_client *a = open_ok("mode = \"session\";"), *b = open_ok("mode = \"session\";");
    dlock_lock *la = test_lock_named(a, "sess"), *lb = test_lock_named(b, "sess");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(b, "sess", 4, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    terminate_holder_sessions("sess");
    assert_int_equal(dlock_renew(la), DLOCK_ELOST);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
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
#define ODD_NAME "odd \xff\"{,}\\'\x01"

/* BATCH_HOLDS watchdog holds "batch-<i>" on one client of the given mode;
 * lost[i] counts the on_lost calls of hold i. */
static dlock_client *hold_many(const char *extra, dlock_lock **locks, int *lost)
{
    char text[2048];
    write_config(text, sizeof text, batch_lease_ms(), 100, extra);
    dlock_client *c = test_client_open(text);
    test_hold_many(c, "batch", BATCH_HOLDS, locks, lost);
    return c;
}

/* Through 3 leases every hold stays valid and is renewed about 9 times
 * (lease/3); returns how many renewals the client made. */
static long long all_renewed(dlock_client *c, dlock_lock **locks, const int *lost)
{
    usleep(3 * batch_lease_ms() * 1000);
    test_only_this_hold_lost(locks, lost, BATCH_HOLDS, -1);
    long long renewals = test_client_metric(c, "dlock_renewals_total");
    assert_true(renewals >= BATCH_HOLDS * 6);
    return renewals;
}

/* A statement-level trigger counts the UPDATE statements on the lock table
 * from now on: the server's own count of round trips that renew. */
static void count_update_statements(void)
{
    admin("CREATE TABLE IF NOT EXISTS update_statements (n bigint NOT NULL);"
          "TRUNCATE update_statements; INSERT INTO update_statements VALUES (0);"
          "CREATE OR REPLACE FUNCTION count_update_statement() RETURNS trigger LANGUAGE plpgsql AS"
          "  $$BEGIN UPDATE update_statements SET n = n + 1; RETURN NULL; END$$;"
          "CREATE OR REPLACE TRIGGER count_updates AFTER UPDATE ON dlock_locks"
          "  FOR EACH STATEMENT EXECUTE FUNCTION count_update_statement()");
}

static long long update_statements_counted(void)
{
    long long n = atoll(admin("SELECT n FROM update_statements"));
    admin("DROP TRIGGER count_updates ON dlock_locks; DROP TABLE update_statements;"
          "DROP FUNCTION count_update_statement()");
    return n;
}

/* Lease mode: the holds due together are renewed by one statement; a row
 * taken over is reported lost for that hold alone, and the batch goes on
 * renewing the others. */
static void lease_holds_renew_in_batches(void **state)
{
    (void)state;
    dlock_lock *locks[BATCH_HOLDS];
    static int lost[BATCH_HOLDS]; /* on_lost writes here until the client closes, even after a failed check */
    memset(lost, 0, sizeof lost);
    dlock_client *c = hold_many("", locks, lost);
    /* A name with every byte an array literal or bytea treats specially
     * rides in the same batches (keys go as hex). */
    dlock_lock *odd = test_lock_named(c, ODD_NAME);
    assert_int_equal(dlock_acquire(odd, 0), DLOCK_OK);
    count_update_statements();
    long long renewals = all_renewed(c, locks, lost);
    assert_true(dlock_validity_ms(odd) > 0);
    assert_int_equal(dlock_release(odd), DLOCK_OK);
    dlock_lock_free(odd);
    long long statements = update_statements_counted();
    print_message("# %lld renewals in %lld UPDATE statements\n", renewals, statements);
    /* One statement per hold would be 1:1. Holds fall due in 20 ms windows,
     * so even acquires spread over the whole tick (300 ms, 600 ms with a
     * widened lease) make at most 30 statements a tick: >= 3 renewals each. */
    assert_true(statements >= 1 && renewals >= 3 * statements);
    steal_row("batch-7");
    usleep(batch_lease_ms() * 1000);
    test_only_this_hold_lost(locks, lost, BATCH_HOLDS, 7);
    test_release_many(locks, BATCH_HOLDS, 7);
    /* Every other row freed; the stolen one left to its new owner. */
    assert_string_equal(admin("SELECT count(*) FROM dlock_locks"
                              " WHERE position(convert_to('dlock:batch-', 'UTF8') in name) = 1"
                              " AND owner IS NOT NULL AND owner <> 'someone-else:1'"),
                        "0");
    assert_string_equal(admin("SELECT count(*) FROM dlock_locks"
                              " WHERE position(convert_to('dlock:batch-', 'UTF8') in name) = 1"
                              " AND owner IS NULL"),
                        "99");
    dlock_client_close(c);
}

/* Session mode: one check per round proves the session for every hold;
 * when the session is terminated, every hold is lost, each reported once. */
static void session_holds_renew_in_batches(void **state)
{
    (void)state;
    dlock_lock *locks[BATCH_HOLDS];
    static int lost[BATCH_HOLDS]; /* on_lost writes here until the client closes, even after a failed check */
    memset(lost, 0, sizeof lost);
    dlock_client *c = hold_many("mode = \"session\";", locks, lost);
    all_renewed(c, locks, lost);
    terminate_holder_sessions(NULL);
    usleep(batch_lease_ms() * 1000);
    test_every_hold_lost(locks, lost, BATCH_HOLDS);
    dlock_client_close(c);
}

/* ---- shared holds and semaphores -------------------------------------------------------- */

/* Shared holders share the name's row: owner is the kind, holders their
 * expiries; status counts them; another kind is refused with a message
 * that says which; the last one out frees the row and keeps its fence.
 * Session mode has neither (one session carries all of a client's holds). */
static void shared_holds_live_in_the_row(void **state)
{
    (void)state;
    dlock_client *a = open_ok(""), *b = open_ok("");
    dlock_lock *held[3];
    test_shared_kinds_hold(a, b, held);
    dlock_lock *s1 = held[0], *s2 = held[1], *p = held[2];
    assert_string_equal(admin("SELECT owner || ' ' || (SELECT count(*) FROM jsonb_each(holders)) || ' ' || fence"
                              " FROM dlock_locks WHERE name = convert_to('dlock:rw', 'UTF8')"
                              " AND expires_at BETWEEN now() + interval '29 s' AND now() + interval '30 s'"),
                        "~s 2 2");
    assert_int_equal(dlock_release(s1), DLOCK_OK);
    assert_int_equal(dlock_release(s2), DLOCK_OK);
    assert_int_equal(dlock_release(p), DLOCK_OK);
    assert_string_equal(admin("SELECT count(*) FROM dlock_locks WHERE name = convert_to('dlock:rw', 'UTF8')"
                              " AND owner IS NULL AND fence = 2"), "1");
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
    static const char *const old_ddl[2] = {
        "CREATE TABLE old_locks (name bytea PRIMARY KEY, owner text, fence bigint NOT NULL,"
        " expires_at timestamptz NOT NULL)",
        "CREATE TABLE older_locks (name bytea PRIMARY KEY, owner text, fence bigint NOT NULL,"
        " expires_at timestamptz NOT NULL)",
    };
    admin("DROP TABLE IF EXISTS old_locks, older_locks");
    admin(old_ddl[0]);
    admin(old_ddl[1]);
    admin("CREATE SEQUENCE IF NOT EXISTS older_locks_fence AS bigint CACHE 1 NO CYCLE");
    dlock_client *c = open_ok("table = \"old_locks\";");
    dlock_lock *s = test_lock_of_kind(c, "old", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(s, 0), DLOCK_OK);
    assert_int_equal(dlock_release(s), DLOCK_OK);
    dlock_lock_free(s);
    dlock_client_close(c);
    c = open_ok("table = \"older_locks\"; create_table = false;");
    dlock_lock *x = test_lock_named(c, "older");
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    /* Nowhere to keep a downgraded hold: refused up front, the hold kept. */
    assert_int_equal(dlock_client_capabilities(c) & DLOCK_CAP_DOWNGRADE, 0);
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
    admin("DROP SEQUENCE IF EXISTS old_locks_fence, older_locks_fence");
}

/* A waiter keeps its place in the line for longer than the command
 * timeout (1 s here), which the session's statement_timeout would
 * otherwise cut short: the second waiter makes no attempt while the hold
 * lasts 2.5 s (a cancelled join would make it look again and queue anew
 * at the tail), and they are granted in the order they came. */
struct line_turn {
    dlock_lock *lock;
    int *turns;
    int turn;
};

static void *take_line_turn(void *arg)
{
    struct line_turn *w = arg;
    if (dlock_acquire(w->lock, 20000) == DLOCK_OK) {
        w->turn = __atomic_fetch_add(w->turns, 1, __ATOMIC_SEQ_CST);
        dlock_release(w->lock);
    }
    return NULL;
}

static void a_waiter_keeps_its_place_past_the_command_timeout(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 10000, "");
    dlock_client *a = test_client_open(text), *c[2];
    dlock_lock *la = NULL;
    assert_int_equal(dlock_lock_new(a, "long-line", 9, NULL, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    int turns = 0;
    struct line_turn w[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        c[i] = test_client_open(text);
        w[i] = (struct line_turn){ NULL, &turns, -1 };
        assert_int_equal(dlock_lock_new(c[i], "long-line", 9, NULL, &w[i].lock), DLOCK_OK);
        assert_int_equal(pthread_create(&t[i], NULL, take_line_turn, &w[i]), 0);
        int64_t t0 = now_ms();
        while (test_client_metric(c[i], "dlock_busy_total") < 1 && now_ms() - t0 < 5000)
            sleep_ms(5);
        sleep_ms(100); /* in the line */
    }
    sleep_ms(2500);
    /* The first: its busy answer, and the look on reaching the head (an
     * empty line); the second: its busy answer only, queued since. */
    assert_int_equal(test_client_metric(c[0], "dlock_acquire_attempts_total"), 2);
    assert_int_equal(test_client_metric(c[1], "dlock_acquire_attempts_total"), 1);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(w[0].turn, 0);
    assert_int_equal(w[1].turn, 1);
    for (int i = 0; i < 2; i++) {
        dlock_lock_free(w[i].lock);
        dlock_client_close(c[i]);
    }
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* See more_waiters_than_waiting_connections. */
static void waiters_beyond_the_waiting_connections_still_come_in_soon(void **state)
{
    (void)state;
    char text[2048];
    write_config(text, sizeof text, 30000, 4000, "pool_size = 4;");
    more_waiters_than_waiting_connections(text);
}

/* Fair mode: a head of the line that hangs while it holds (SIGSTOP: its
 * lease runs out on the server, its session and gate stay) does not stop
 * the line for good: the fair waiter behind it looks when its wait runs
 * out (retry cap 300 ms) and takes the row once it has been expired for
 * 2 s (a live head would have looked at the expiry itself). */
static void a_fair_waiter_behind_a_hung_holder_gets_the_expired_lock(void **state)
{
    (void)state;
    char holder[2048];
    write_config(holder, sizeof holder, 1000, 300, "");
    /* holds the row (1 s lease) and the gate, and renews no more */
    pid_t pid = stopped_holder_start(holder, "fair-hung", DLOCK_LOCK_FAIR);
    char text[2048];
    write_config(text, sizeof text, 30000, 300, "");
    dlock_client *w = test_client_open(text);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    dlock_lock *lw = NULL;
    assert_int_equal(dlock_lock_new(w, "fair-hung", 9, &o, &lw), DLOCK_OK);
    int64_t t0 = now_ms();
    int rc = dlock_acquire(lw, 10000);
    int64_t took = now_ms() - t0;
    stopped_holder_end(pid);
    assert_int_equal(rc, DLOCK_OK);
    if (took < 2500 || took > slack_ms(4500))
        fail_msg("granted %lld ms after the hung holder's lease of 1 s", (long long)took);
    assert_int_equal(dlock_release(lw), DLOCK_OK);
    dlock_lock_free(lw);
    dlock_client_close(w);
}

/* Fair mode: a try-once acquire of a free lock is granted (the request
 * takes the head of an empty line at once), one of a lock held through the
 * line is busy, and a shared request in fair mode is refused. */
static void fair_mode_is_for_exclusive_holds_and_permits(void **state)
{
    (void)state;
    dlock_client *a = open_ok(""), *b = open_ok("");
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    dlock_lock *la, *lb, *ls;
    assert_int_equal(dlock_lock_new(a, "fair-try", 8, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(b, "fair-try", 8, &o, &lb), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    o.mode = DLOCK_MODE_SHARED;
    assert_int_equal(dlock_lock_new(a, "fair-shared", 11, &o, &ls), DLOCK_OK);
    assert_int_equal(dlock_acquire(ls, 0), DLOCK_ENOTSUP);
    assert_non_null(strstr(dlock_errmsg(), "fair mode"));
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_lock_free(ls);
    dlock_client_close(a);
    dlock_client_close(b);
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

static void a_least_privilege_role_is_enough(void **state)
{
    (void)state;
    admin("DROP ROLE IF EXISTS dlock_app");
    admin("CREATE ROLE dlock_app LOGIN PASSWORD 'app-secret'");
    admin("GRANT SELECT, INSERT, UPDATE ON dlock_locks TO dlock_app");
    admin("GRANT USAGE ON SEQUENCE dlock_locks_fence TO dlock_app");
    int rc;
    char extra[256];
    snprintf(extra, sizeof extra, "conninfo = \"host=127.0.0.1 port=%d dbname=postgres user=dlock_app password=app-secret\";"
             " create_table = false;", server.port);
    /* write_config adds user/database; conninfo must stand alone. */
    char text[1024];
    snprintf(text, sizeof text, "backend = \"postgres\";\npostgres = { %s };\n", extra);
    dlock_client *c = NULL;
    rc = dlock_client_open_string(&c, text);
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
    /* The role cannot create the table: with create_table on and the table
     * absent, the error says so. */
    snprintf(text, sizeof text,
             "backend = \"postgres\";\npostgres = { conninfo = \"host=127.0.0.1 port=%d dbname=postgres "
             "user=dlock_app password=app-secret\"; table = \"other\"; };\n",
             server.port);
    rc = dlock_client_open_string(&c, text);
    assert_int_equal(rc, DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "permission denied"));
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
static dlock_client *open_native_at(int port)
{
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"postgres\";\npostgres = { port = %d; user = \"postgres\"; database = \"postgres\"; "
             "pool_size = 2; command_timeout_ms = 300; };\n", port);
    return test_client_open(text);
}

static dlock_client *open_direct(void)
{
    return open_ok("");
}

/* Lost and missing answers (tests/support/native_cases.c); the deadline
 * is three command timeouts, for up to three statements. */
NATIVE_CASES(open_native_at, open_direct, server.port, 900)
/* A release is one statement: its deadline is one command timeout. */
NATIVE_RELEASE_CASES(open_native_at, open_direct, server.port, 300)

/* A client of the server through the fault proxy at proxy_port, with
 * these settings of the postgres group. */
static dlock_client *open_through(int proxy_port, const char *settings)
{
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"postgres\";\npostgres = { port = %d; user = \"postgres\"; database = \"postgres\"; %s };\n",
             proxy_port, settings);
    return test_client_open(text);
}

/* dlock_client_process never blocks, even for a permit waiter at the head
 * of the name's line, whose grant passes the line's gate on (a statement
 * and its answer on the line's connection). With every answer held 400 ms
 * on the way (the fault proxy), no step of the caller's loop may wait for
 * one: the attempts at the head go through a worker. */
static void the_loop_never_waits_for_the_lines_steps(void **state)
{
    (void)state;
    int proxy_port;
    struct fault_proxy *proxy = fault_proxy_start(server.port, &proxy_port);
    assert_non_null(proxy);
    dlock_client *a = open_through(proxy_port, "pool_size = 2; command_timeout_ms = 5000;"), *b = open_direct();
    dlock_lock *la = test_lock_of_kind(a, "native-line", DLOCK_MODE_SEMAPHORE, 1);
    dlock_lock *lb = test_lock_of_kind(b, "native-line", DLOCK_MODE_SEMAPHORE, 1);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* the statements prepared on a connection */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_DELAY, 400);
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(la, slack_ms(20000), async_record, &r), DLOCK_OK);
    int64_t longest = 0, released_at = now_ms() + 2500, end = now_ms() + slack_ms(20000);
    bool released = false;
    while (r.calls == 0 && now_ms() < end) {
        if (!released && now_ms() >= released_at) {
            assert_int_equal(dlock_release(lb), DLOCK_OK); /* the waiter, at the head by now, is woken */
            released = true;
        }
        struct pollfd p = { .fd = dlock_client_fd(a), .events = POLLIN };
        poll(&p, 1, 20);
        int64_t t0 = now_ms();
        assert_true(dlock_client_process(a) >= 0);
        if (now_ms() - t0 > longest)
            longest = now_ms() - t0;
    }
    fault_proxy_set(proxy, FAULT_PASS, 0);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_OK);
    if (longest >= 300)
        fail_msg("a step of the caller's loop took %lld ms: it waited for an answer", (long long)longest);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
    fault_proxy_stop(proxy);
}

/* Turns c's loop for ms, or until r's callback came. */
static void turn_for(dlock_client *c, int64_t ms, const struct async_result *r)
{
    for (int64_t end = now_ms() + ms; r->calls == 0 && now_ms() < end;)
        async_loop_turn(c, 20);
}

/* A client's first attempt and release through the non-blocking API are
 * one round trip per statement, on the connection the client opened with:
 * the statements they send are prepared on every connection of the pool
 * before it is used, so none of them is refused as unprepared and made
 * again (prepared, then sent) on a worker. */
static void first_native_statements_are_already_prepared(void **state)
{
    (void)state;
    int proxy_port;
    struct fault_proxy *proxy = fault_proxy_start(server.port, &proxy_port);
    assert_non_null(proxy);
    dlock_client *a = open_through(proxy_port, "pool_size = 1;");
    dlock_lock *la = test_lock_named(a, "native-first-statements");
    uint64_t before = fault_proxy_client_reads(proxy);
    struct async_result granted = { 0 }, released = { 0 };
    assert_int_equal(async_acquire_looping(a, la, 0, slack_ms(5000), &granted), DLOCK_OK);
    /* The fast path finds no row for a new name, then the upsert grants. */
    assert_int_equal(fault_proxy_client_reads(proxy) - before, 2);
    assert_int_equal(dlock_release_start(la, async_record, &released), DLOCK_OK);
    turn_for(a, slack_ms(5000), &released);
    assert_int_equal(released.calls, 1);
    assert_int_equal(released.rc, DLOCK_OK);
    assert_int_equal(fault_proxy_client_reads(proxy) - before, 3);
    assert_int_equal(test_client_metric(a, "dlock_acquire_attempts_parked_total"), 1);
    assert_int_equal(test_client_metric(a, "dlock_releases_parked_total"), 1);
    dlock_lock_free(la);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

/* An exclusive request at the head of the name's line looks without a
 * thread, and its hold keeps the line's gate; its release made without a
 * thread frees the row, then passes the gate on (a second statement, on
 * the line's connection), so the next waiter in the line is let in. */
static void a_native_release_passes_the_lines_gate_on(void **state)
{
    (void)state;
    dlock_client *a = open_ok("pool_size = 4;"), *b = open_direct(), *c = open_direct();
    dlock_lock *la = test_lock_named(a, "native-gate"), *lb = test_lock_named(b, "native-gate"),
               *lc = test_lock_named(c, "native-gate");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* the statements prepared */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    struct async_result ra = { 0 }, rc = { 0 }, released = { 0 };
    assert_int_equal(dlock_acquire_start(la, slack_ms(10000), async_record, &ra), DLOCK_OK);
    turn_for(a, 300, &ra); /* a waits in the line, at its head */
    assert_int_equal(ra.calls, 0);
    long long attempts = test_client_metric(a, "dlock_acquire_attempts_parked_total");
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    turn_for(a, slack_ms(5000), &ra);
    assert_int_equal(ra.calls, 1);
    assert_int_equal(ra.rc, DLOCK_OK); /* through the line: a keeps its gate */
    /* The look the release woke, at the line's head, went without a thread too. */
    assert_true(test_client_metric(a, "dlock_acquire_attempts_parked_total") > attempts);
    assert_int_equal(dlock_acquire_start(lc, slack_ms(10000), async_record, &rc), DLOCK_OK);
    turn_for(c, 300, &rc); /* c queued behind the gate */
    assert_int_equal(rc.calls, 0);
    long long parked = test_client_metric(a, "dlock_releases_parked_total");
    assert_int_equal(dlock_release_start(la, async_record, &released), DLOCK_OK);
    turn_for(a, slack_ms(5000), &released);
    assert_int_equal(released.calls, 1);
    assert_int_equal(released.rc, DLOCK_OK);
    assert_int_equal(test_client_metric(a, "dlock_releases_parked_total"), parked + 1);
    turn_for(c, slack_ms(5000), &rc);
    assert_int_equal(rc.calls, 1);
    assert_int_equal(rc.rc, DLOCK_OK);
    assert_int_equal(dlock_release(lc), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_lock_free(lc);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

/* The upsert after the fast path, then the waiting writer's registration,
 * both sent from the answer's step (tests/support/native_cases.c). */
static dlock_client *open_pool_of_two(void)
{
    return open_ok("pool_size = 2;");
}

static void native_busy_attempt_registers_the_writer_and_waits(void **state)
{
    (void)state;
    native_case_busy_registers_the_writer(open_pool_of_two, open_direct, admin,
                                          "SELECT coalesce(writer, '') FROM dlock_locks WHERE name = "
                                          "convert_to('dlock:native-busy', 'UTF8')");
}

static void bad_settings_are_config_errors(void **state)
{
    (void)state;
    const char *bad[] = { "table = \"x; DROP TABLE y\";", "mode = \"exclusive\";", "table = \"\";",
                          "conninfo = \"host=127.0.0.1\";" /* together with host/port from write_config */ };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        dlock_client *c = open_with(bad[i], &rc);
        assert_null(c);
        if (rc != DLOCK_ECONFIG)
            fail_msg("%s: %s (%s)", bad[i], dlock_strerror(rc), dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(), "postgres."));
    }
    /* A malformed conninfo is refused without quoting any of it: libpq's
     * own reason would repeat the words around the fault, a password's. */
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"postgres\";\npostgres = { conninfo = \"host=127.0.0.1 port=%d user=app "
             "password=Sup3r Secr3t dbname=app\"; };\n", server.port);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "postgres.conninfo"));
    if (strstr(dlock_errmsg(), "Secr3t") || strstr(dlock_errmsg(), "Sup3r"))
        fail_msg("the error repeats the password: %s", dlock_errmsg());
}

static void unreachable_server_is_a_clear_error(void **state)
{
    (void)state;
    char text[512];
    snprintf(text, sizeof text, "backend = \"postgres\";\npostgres = { port = %d; connect_timeout_ms = 500; };\n",
             server.port + 1);
    dlock_client *c = NULL;
    int64_t t0 = now_ms();
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_EUNAVAILABLE);
    assert_true(now_ms() - t0 < 1500);
    assert_non_null(strstr(dlock_errmsg(), "postgres 127.0.0.1:"));
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
        admin, open_lease, "INSERT INTO accounts VALUES (1, '', 0) ON CONFLICT (id) DO UPDATE SET owner = '', fence = 0"
    };
    sql_fence_guard_case(&target);
}

#define DG_ROW "FROM dlock_locks WHERE name = convert_to('dlock:dg', 'UTF8')"

/* tests/support/downgrade_case.c: the row after a downgrade, a waiting
 * writer's place, status, listing, a hold taken over, a resent downgrade
 * (server_port is set in main). */
static struct sql_downgrade_target downgrade = {
    .admin = admin,
    .open = open_lease,
    .open_at = open_lease_at,
    .writer_registered_sql = "SELECT count(*) " DG_ROW " AND writer IS NOT NULL AND writer_fence = fence",
    .row_sql = "SELECT owner || ' ' || (SELECT count(*) FROM jsonb_each(holders) AS e(k, v) WHERE k NOT LIKE '%/%'"
               " AND v::bigint = (extract(epoch FROM expires_at) * 1000)::bigint)"
               " || ' ' || (writer IS NOT NULL AND writer_fence = fence)::int " DG_ROW,
    .idle_writer_sql = "UPDATE dlock_locks SET writer = 'someone-waiting:1',"
                       " writer_until = now() + interval '1 minute', writer_fence = fence"
                       " WHERE name = convert_to('dlock:dg', 'UTF8')",
    .steal_sql = "UPDATE dlock_locks SET owner = 'someone-else:1' WHERE name = convert_to('dlock:dg', 'UTF8')",
    .owner_sql = "SELECT owner " DG_ROW,
    .delete_sql = "DELETE FROM dlock_locks WHERE name = convert_to('dlock:dg', 'UTF8')",
};

static void stopped_server_times_out_then_recovers(void **state)
{
    (void)state;
    dlock_client *a = open_ok("");
    dlock_lock *l = test_lock_named(a, "frozen");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* The postmaster and every backend: an idle pooled connection is served
     * by a backend process of its own. */
    test_service_signal(&server, SIGSTOP);
    int64_t t0 = now_ms();
    int rc = dlock_acquire(l, 0);
    int64_t took = now_ms() - t0;
    test_service_signal(&server, SIGCONT);
    assert_int_equal(rc, DLOCK_EUNAVAILABLE);
    /* command_timeout_ms bounds the wait, not libpq's blocking read. */
    if (took < timeout_ms() - 100 || took > timeout_ms() + 500)
        fail_msg("a stopped server answered after %lld ms", (long long)took);
    int64_t t1 = now_ms();
    while ((rc = dlock_acquire(l, 0)) == DLOCK_EUNAVAILABLE && now_ms() - t1 < 5000)
        sleep_ms(50);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* ---- lock caching ------------------------------------------------------------------------ */

/* A lease-mode client whose released holds are kept for a minute unused. */
static dlock_client *open_caching(void)
{
    char text[2048];
    write_config(text, sizeof text, 30000, 100, "");
    size_t used = strlen(text);
    snprintf(text + used, sizeof text - used, "cache = { idle_ms = 60000; cooldown_ms = 0; };\n");
    return test_client_open(text);
}

/* Until a session waits for an advisory lock (the second waiter, for
 * the line's gate, which the first holds), at most a few seconds. */
static void second_waiter_queued_for_the_gate(void)
{
    int64_t t0 = now_ms();
    while (atoi(admin("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")) < 1 &&
           now_ms() - t0 < slack_ms(5000))
        sleep_ms(10);
    assert_true(atoi(admin("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")) >= 1);
}

/* A hold granted through the name's line is not kept: those queued behind
 * it wait for the line's head, which its holder keeps, and make no request
 * it could hear. The request behind is granted at its release. */
static void a_hold_granted_through_the_line_is_not_kept(void **state)
{
    (void)state;
    dlock_client *h = open_ok(""), *c = open_ok(""), *a = open_caching();
    test_grant_with_one_queued_behind(h, a, c, "pg-queued-grant", second_waiter_queued_for_the_gate);
}

/* A shared request that finds the name kept asks for it, as an exclusive
 * one does: the keeper gives the hold back. */
static void a_shared_request_asks_for_a_kept_hold(void **state)
{
    (void)state;
    dlock_client *a = open_caching(), *b = open_ok("");
    dlock_lock *la = test_lock_named(a, "pg-kept-shared");
    test_cycle_keeps(a, la, 1);
    dlock_lock *lb = test_lock_of_kind(b, "pg-kept-shared", DLOCK_MODE_SHARED, 0);
    /* The try's busy answer asks; its second look (a shared request looks
     * again once it listens for releases) may find the hold given back. */
    int rc = dlock_acquire(lb, 0);
    if (rc == DLOCK_EBUSY)
        rc = dlock_acquire(lb, slack_ms(5000));
    assert_int_equal(rc, DLOCK_OK);
    /* Granted after the keeper's give-back, well before the idle limit. */
    assert_int_equal(test_client_metric(a, "dlock_cache_givebacks_total"), 1);
    assert_int_equal(test_client_metric(a, "dlock_cache_hits_total"), 0);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(b);
    dlock_client_close(a);
}

/* The keeper's listening session terminated: a request could have been
 * notified while nothing listened, so the kept hold is given back though
 * nobody asked. */
static void a_lost_listener_gives_a_kept_hold_back(void **state)
{
    (void)state;
    dlock_client *a = open_caching();
    dlock_lock *l = test_lock_named(a, "pg-kept-cut");
    test_cycle_keeps(a, l, 1);
    assert_int_equal(test_client_metric(a, "dlock_cache_givebacks_total"), 0);
    /* Ours, and perhaps a closed client's whose session has not ended
     * yet: the last statement of a listening session is its LISTEN. */
    assert_true(atoi(admin("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE query LIKE 'LISTEN \"dlock\\_%w\"'")) >= 1);
    test_gives_back_soon(a);
    dlock_lock_free(l);
    dlock_client_close(a);
}

int main(void)
{
    if (getenv("CMOCKA_FILTER")) /* one case by name, for checking it against older code */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    if (test_service_start(&server) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] postgres did not start\n");
        return 1;
    }
    static const struct conformance_target lease = { "postgres lease mode", lease_config, steal_row, NULL, 0,
                                                     CONFORMANCE_LISTS | CONFORMANCE_LISTS_NO_WAITERS, 0,
                                                     CONFORMANCE_NATIVE_ATTEMPTS | CONFORMANCE_NATIVE_RELEASES };
    static const struct conformance_target session = { "postgres session mode", session_config,
                                                       terminate_holder_sessions, NULL, 0, 0, 0, 0 };
    downgrade.server_port = server.port;
    int failed = conformance_run(&lease);
    failed += conformance_run(&session);
    const struct CMUnitTest particular[] = {
        cmocka_unit_test(the_row_holds_owner_fence_and_server_expiry),
        cmocka_unit_test(native_attempt_whose_answer_is_lost_holds_once),
        cmocka_unit_test(native_attempt_without_an_answer_ends_at_its_deadline),
        cmocka_unit_test(native_attempt_on_a_dead_idle_connection_is_sent_again),
        cmocka_unit_test(native_release_whose_answer_is_lost_is_ok),
        cmocka_unit_test(native_release_without_an_answer_ends_at_its_deadline),
        cmocka_unit_test(native_release_on_a_dead_idle_connection_is_sent_again),
        cmocka_unit_test(a_native_release_passes_the_lines_gate_on),
        cmocka_unit_test(first_native_statements_are_already_prepared),
        cmocka_unit_test(the_loop_never_waits_for_the_lines_steps),
        cmocka_unit_test(native_busy_attempt_registers_the_writer_and_waits),
        cmocka_unit_test(fair_mode_is_for_exclusive_holds_and_permits),
        cmocka_unit_test(a_waiter_keeps_its_place_past_the_command_timeout),
        cmocka_unit_test(a_fair_waiter_behind_a_hung_holder_gets_the_expired_lock),
        cmocka_unit_test(waiters_beyond_the_waiting_connections_still_come_in_soon),
        cmocka_unit_test(lease_hold_survives_a_terminated_connection),
        cmocka_unit_test(session_hold_is_lost_with_its_session),
        cmocka_unit_test(lease_holds_renew_in_batches),
        cmocka_unit_test(session_holds_renew_in_batches),
        cmocka_unit_test(missing_table_without_create_is_a_config_error),
        cmocka_unit_test(shared_holds_live_in_the_row),
        cmocka_unit_test(a_table_from_before_shared_holds),
        cmocka_unit_test(a_least_privilege_role_is_enough),
        cmocka_unit_test(a_hold_granted_through_the_line_is_not_kept),
        cmocka_unit_test(a_shared_request_asks_for_a_kept_hold),
        cmocka_unit_test(a_lost_listener_gives_a_kept_hold_back),
        cmocka_unit_test(bad_settings_are_config_errors),
        cmocka_unit_test(release_resent_after_a_lost_answer_is_ok),
        cmocka_unit_test_prestate(a_downgrade_makes_the_row_shared_in_place, &downgrade),
        cmocka_unit_test_prestate(downgrade_resent_after_a_lost_answer_is_ok, &downgrade),
        cmocka_unit_test_prestate(a_reader_behind_a_registered_writer_does_not_spin, &downgrade),
        cmocka_unit_test(unreachable_server_is_a_clear_error),
        cmocka_unit_test(sql_fence_guard_refuses_the_stale_holder),
        cmocka_unit_test(stopped_server_times_out_then_recovers),
    };
    failed += cmocka_run_group_tests_name("postgres", particular, NULL, NULL);
    test_service_stop(&server);
    return failed ? 1 : 0;
}
