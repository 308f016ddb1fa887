/* tests/backends/sql/test_checked_sql.c - the fault suite on the postgres and
 * mysql backends. In session mode (holds tied to a connection), 4 worker
 * processes contend for one lock and increment the fenced counter
 * (fault_worker) while an operator ends their sessions (pg_terminate_backend,
 * KILL). The holder must report the loss, and the checker proves growing
 * fences, stale writes refused and no lost increment; overlapping beliefs
 * are counted (the documented window of session mode). In lease mode: kept
 * holds (lock caching), semaphores, readers and writers, mixed kinds and
 * elections, each with a worker stopped or killed (fault_run.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../support/service.h"
#include "../../faults/fault_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#define LEASE_MS 1500
#define WORKERS 4

static struct test_service postgres = { .script = "postgres" };
static struct test_service mariadb = { .script = "mariadb" };

static int shell(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* Ends every session of the workers, as an operator or a failover would. */
static void terminate_postgres_sessions(void)
{
    assert_int_equal(shell("psql -q -h 127.0.0.1 -p %d -U postgres -d postgres -Atc \"SELECT "
                           "count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = "
                           "'libdlock'\" > /dev/null",
                           postgres.port),
                     0);
}

static void kill_mysql_sessions(void)
{
    assert_int_equal(shell("mariadb --no-defaults -h 127.0.0.1 -P %d -u root -N -e \"SELECT CONCAT('KILL ', id, ';') "
                           "FROM information_schema.processlist WHERE db = 'dl' AND id <> CONNECTION_ID()\" | "
                           "mariadb --no-defaults -h 127.0.0.1 -P %d -u root -f > /dev/null 2>&1; true",
                           mariadb.port, mariadb.port),
                     0);
}

static void run_with_sessions_ended(const char *scenario, const char *config, void (*end_sessions)(void))
{
    struct fault_run run;
    struct history_report r;
    /* Holds of 1.5-3 s: the holder is inside its hold, renewing, when its
     * session ends, so the loss is the library's to report. */
    fault_run_start(&run, config, WORKERS, 9000 * fault_run_scale(), 2 * LEASE_MS);
    fault_sleep_ms(1500);
    assert_true(fault_run_holder(&run, 2000) > 0);
    end_sessions();
    int64_t ended_at = fault_now_us();
    fault_sleep_ms(4000);
    int after = history_grants_between(run.dir, WORKERS, ended_at, fault_now_us());
    /* The server frees a session lock the moment the session ends, while
     * the holder believes in its validity until its next renewal tells it
     * (docs/correctness.md, session mode): the next holder may be granted
     * in between. Counted, not failed; the fence guard must still refuse
     * every stale write, and no increment may be lost. */
    fault_run_finish_overlap_documented(&run, scenario, &r);
    /* The holder was told: by on_lost, a validity check, or its release. */
    assert_true(r.lost_notes + r.invalid_checks + r.releases_refused >= 1);
    assert_true(after >= 1);                            /* and service went on */
}

static void postgres_sessions_terminated(void **state)
{
    (void)state;
    char config[512];
    snprintf(config, sizeof config,
             "backend = \"postgres\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "postgres = { port = %d; user = \"postgres\"; database = \"postgres\"; mode = \"session\"; "
             "connect_timeout_ms = 1000; command_timeout_ms = 1000; };\n",
             LEASE_MS, postgres.port);
    run_with_sessions_ended("postgres session mode, pg_terminate_backend of every worker", config,
                            terminate_postgres_sessions);
}

static void mysql_sessions_killed(void **state)
{
    (void)state;
    char config[512];
    snprintf(config, sizeof config,
             "backend = \"mysql\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "mysql = { port = %d; user = \"root\"; database = \"dl\"; mode = \"session\"; "
             "connect_timeout_ms = 1000; command_timeout_ms = 1000; };\n",
             LEASE_MS, mariadb.port);
    run_with_sessions_ended("mysql session mode, KILL of every worker's connection", config, kill_mysql_sessions);
}

/* A worker's configuration for backend ("postgres" or "mysql") in lease
 * mode, on the server this program started. */
static void lease_mode_config(char *config, size_t size, const char *backend)
{
    bool pg = strcmp(backend, "postgres") == 0;
    snprintf(config, size,
             "backend = \"%s\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "%s = { port = %d; user = \"%s\"; database = \"%s\"; "
             "connect_timeout_ms = 1000; command_timeout_ms = 1000; };\n%s",
             backend, LEASE_MS, backend, pg ? postgres.port : mariadb.port, pg ? "postgres" : "root",
             pg ? "postgres" : "dl", fault_run_cache_group());
}

/* Kept holds in lease mode on backend: two workers, so that the name is
 * often free of waiters when a worker comes back for it (on postgres, a
 * hold granted through the line is not kept). */
static void kept_holds_start(struct fault_run *run, const char *backend)
{
    char config[512];
    lease_mode_config(config, sizeof config, backend);
    fault_run_start(run, config, 2, 6000 * fault_run_scale(), 40);
    fault_sleep_ms(1000);
}

/* Workers that keep their released holds: some acquires take over the
 * hold their client kept, with its token, and the checker proves each was
 * one continuous hold (no other worker's grant in between). */
static void postgres_kept_holds_no_fault(void **state)
{
    (void)state;
    struct fault_run run;
    kept_holds_start(&run, "postgres");
    fault_run_finish_kept_holds(&run, "postgres lease mode, kept holds, no fault");
}

/* Whether the name's row is still held, with the fence of that grant. */
static bool postgres_still_kept(uint64_t fence)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "psql -q -h 127.0.0.1 -p %d -U postgres -d postgres -Atc \"SELECT fence FROM dlock_locks WHERE "
             "name = convert_to('dlock:fault-suite-lock', 'UTF8') AND owner IS NOT NULL AND expires_at > now()\" "
             "2>/dev/null",
             postgres.port);
    return fault_shell_number(cmd) == fence;
}

/* A worker SIGKILLed just after its release, while its client keeps the
 * hold (the row still held with its grant's fence, as still_kept says):
 * nobody gives it back, so the other worker is granted when the row's
 * lease runs out; no violation. */
static void kept_holds_and_a_keeper_killed(const char *backend, bool (*still_kept)(uint64_t fence),
                                           const char *scenario)
{
    struct fault_run run;
    kept_holds_start(&run, backend);
    fault_run_keep_going(&run, true); /* a kill late in the run still meets the other worker */
    int64_t granted_after_ms = fault_run_kill_a_keeper(&run, fault_run_keeper(&run, 5000, still_kept), scenario,
                                                       LEASE_MS);
    /* Renewed every third of the lease, the kept row had at least two
     * thirds of it left when its keeper died: a grant sooner would mean
     * the kill found no kept hold. */
    assert_true(granted_after_ms >= LEASE_MS / 3);
}

static void postgres_kept_holds_and_a_keeper_killed(void **state)
{
    (void)state;
    kept_holds_and_a_keeper_killed("postgres", postgres_still_kept,
                                   "postgres lease mode, kept holds, a keeper SIGKILLed");
}

/* A worker stopped just after its release while its client keeps the
 * hold, past the row's lease: the other worker is granted once the lease
 * runs out, and the resumed keeper goes to the server for a greater token
 * instead of serving the hold it kept (see fault_run.h). */
static void kept_holds_and_a_keeper_paused(const char *backend, bool (*still_kept)(uint64_t fence),
                                           const char *scenario)
{
    struct fault_run run;
    kept_holds_start(&run, backend);
    fault_run_keep_going(&run, true);
    int64_t granted_after_ms = fault_run_pause_a_keeper(&run, fault_run_keeper(&run, 5000, still_kept), scenario,
                                                        LEASE_MS);
    assert_true(granted_after_ms >= LEASE_MS / 3);
}

static void postgres_kept_holds_and_a_keeper_paused(void **state)
{
    (void)state;
    kept_holds_and_a_keeper_paused("postgres", postgres_still_kept,
                                   "postgres lease mode, kept holds, a keeper SIGSTOPped past its lease");
}

/* As on postgres: a keeper's client polls its row for requests. */
static void mysql_kept_holds_no_fault(void **state)
{
    (void)state;
    struct fault_run run;
    kept_holds_start(&run, "mysql");
    fault_run_finish_kept_holds(&run, "mysql lease mode, kept holds, no fault");
}

static bool mysql_still_kept(uint64_t fence)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "mariadb --no-defaults -h 127.0.0.1 -P %d -u root -N dl -e \"SET time_zone = '+00:00'; "
             "SELECT fence FROM dlock_locks WHERE name = 'dlock:fault-suite-lock' AND owner IS NOT NULL "
             "AND expires_at >= UNIX_TIMESTAMP(NOW(3)) * 1000\" 2>/dev/null",
             mariadb.port);
    return fault_shell_number(cmd) == fence;
}

static void mysql_kept_holds_and_a_keeper_killed(void **state)
{
    (void)state;
    kept_holds_and_a_keeper_killed("mysql", mysql_still_kept, "mysql lease mode, kept holds, a keeper SIGKILLed");
}

static void mysql_kept_holds_and_a_keeper_paused(void **state)
{
    (void)state;
    kept_holds_and_a_keeper_paused("mysql", mysql_still_kept,
                                   "mysql lease mode, kept holds, a keeper SIGSTOPped past its lease");
}

/* Permits of a semaphore in lease mode, one holder SIGKILLed (see
 * fault_run.h). */
static void postgres_semaphore_holder_killed(void **state)
{
    (void)state;
    char config[512];
    lease_mode_config(config, sizeof config, "postgres");
    fault_run_semaphore_holder_killed("postgres lease mode, semaphore of 2, a holder SIGKILLed", config, LEASE_MS);
}

static void mysql_semaphore_holder_killed(void **state)
{
    (void)state;
    char config[512];
    lease_mode_config(config, sizeof config, "mysql");
    fault_run_semaphore_holder_killed("mysql lease mode, semaphore of 2, a holder SIGKILLed", config, LEASE_MS);
}

/* Writers and readers of one name in lease mode, a writer stopped mid-hold
 * past its lease (see fault_run.h). */
static void postgres_readers_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    lease_mode_config(config, sizeof config, "postgres");
    fault_run_rw_writer_paused("postgres lease mode, 2 writers and 3 readers, a writer stopped past its lease",
                               config, LEASE_MS);
}

static void mysql_readers_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    lease_mode_config(config, sizeof config, "mysql");
    fault_run_rw_writer_paused("mysql lease mode, 2 writers and 3 readers, a writer stopped past its lease",
                               config, LEASE_MS);
}

/* One name asked for in three kinds at once, a writer stopped mid-hold past
 * its lease (see fault_run.h). */
static void postgres_mixed_kinds_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    lease_mode_config(config, sizeof config, "postgres");
    fault_run_mixed_kinds_writer_paused("postgres lease mode, 2 writers, 2 readers and 2 permit holders of one name, a writer stopped past its lease",
                                        config, LEASE_MS);
}

/* One name asked for in three kinds at once, a writer stopped mid-hold past
 * its lease (see fault_run.h). */
static void mysql_mixed_kinds_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    lease_mode_config(config, sizeof config, "mysql");
    fault_run_mixed_kinds_writer_paused("mysql lease mode, 2 writers, 2 readers and 2 permit holders of one name, a writer stopped past its lease",
                                        config, LEASE_MS);
}

/* Three candidates in an election: the leader stopped past its lease,
 * then the next one killed (see fault_run.h). */
static void postgres_election_leader_paused_then_killed(void **state)
{
    (void)state;
    char config[512];
    lease_mode_config(config, sizeof config, "postgres");
    fault_run_election_leader_paused_then_killed("postgres lease mode, 3 candidates in an election, the leader stopped past its lease, then the next killed",
                                                 config, LEASE_MS);
}

static void mysql_election_leader_paused_then_killed(void **state)
{
    (void)state;
    char config[512];
    lease_mode_config(config, sizeof config, "mysql");
    fault_run_election_leader_paused_then_killed("mysql lease mode, 3 candidates in an election, the leader stopped past its lease, then the next killed",
                                                 config, LEASE_MS);
}

int main(void)
{
    if (test_service_start(&postgres) != 0 || test_service_start(&mariadb) != 0 ||
        shell("mariadb --no-defaults -h 127.0.0.1 -P %d -u root -e 'CREATE DATABASE IF NOT EXISTS dl'",
              mariadb.port) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] PostgreSQL or MariaDB did not start\n");
        test_service_stop(&postgres);
        test_service_stop(&mariadb);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(postgres_sessions_terminated),
        cmocka_unit_test(mysql_sessions_killed),
        cmocka_unit_test_setup_teardown(postgres_kept_holds_no_fault, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(postgres_kept_holds_and_a_keeper_killed, fault_run_caching_on,
                                        fault_run_caching_off),
        cmocka_unit_test_setup_teardown(postgres_kept_holds_and_a_keeper_paused, fault_run_caching_on,
                                        fault_run_caching_off),
        cmocka_unit_test_setup_teardown(mysql_kept_holds_no_fault, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(mysql_kept_holds_and_a_keeper_killed, fault_run_caching_on,
                                        fault_run_caching_off),
        cmocka_unit_test_setup_teardown(mysql_kept_holds_and_a_keeper_paused, fault_run_caching_on,
                                        fault_run_caching_off),
        cmocka_unit_test(postgres_semaphore_holder_killed),
        cmocka_unit_test(mysql_semaphore_holder_killed),
        cmocka_unit_test(postgres_readers_and_a_writer_paused),
        cmocka_unit_test(mysql_readers_and_a_writer_paused),
        cmocka_unit_test(postgres_mixed_kinds_and_a_writer_paused),
        cmocka_unit_test(mysql_mixed_kinds_and_a_writer_paused),
        cmocka_unit_test(postgres_election_leader_paused_then_killed),
        cmocka_unit_test(mysql_election_leader_paused_then_killed),
    };
    int failed = cmocka_run_group_tests_name("checked faults (postgres, mysql)", tests, NULL, NULL);
    test_service_stop(&postgres);
    test_service_stop(&mariadb);
    return failed ? 1 : 0;
}
