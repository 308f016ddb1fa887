/* tests/backends/etcd/test_checked_etcd.c - the fault suite on the etcd
 * backend: 4 worker processes contend for one lock and increment the fenced
 * counter (fault_worker) with no fault, while the holder is paused past its
 * lease (the lease expires, its key goes), and while the server is paused
 * for half a lease. The checker proves no overlap, growing fences
 * (create_revision), stale writes refused and no lost increment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../faults/fault_run.h"
#include "../../support/service.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_MS 2000
#define WORKERS 4

static struct test_service server = { .script = "etcd" };

/* The workers' configuration. */
static void worker_config(char *config, size_t size)
{
    snprintf(config, size,
             "backend = \"etcd\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "etcd = { endpoints = ( \"http://127.0.0.1:%d\" ); prefix = \"dlock-faults:\"; "
             "command_timeout_ms = 500; };\n%s",
             LEASE_MS, server.port, fault_run_cache_group());
}

static void start(struct fault_run *run, int hold_ms)
{
    char config[512];
    worker_config(config, sizeof config);
    /* Kept holds: two workers, so that the name is often free of waiters
     * when a worker comes back for it (a hold granted while others are
     * queued is not kept). */
    fault_run_start(run, config, fault_run_caching() ? 2 : WORKERS, 6000 * fault_run_scale(), hold_ms);
    fault_sleep_ms(1000);
}

/* Workers that keep their released holds: some acquires take over the
 * hold their client kept, with its token (the key's create_revision), and
 * the checker proves each was one continuous hold (no other worker's
 * grant in between). */
static void kept_holds_no_fault(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run, 40);
    fault_run_finish_kept_holds(&run, "etcd, kept holds, no fault");
}

/* Whether the name's first key (the holder's) is still the one created
 * at the grant whose fence (create revision) this is. */
static bool etcd_still_kept(uint64_t fence)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "ETCDCTL_API=3 etcdctl --endpoints=http://127.0.0.1:%d get --prefix 'dlock-faults:fault-suite-lock/' "
             "--sort-by=CREATE --order=ASCEND --limit=1 -w fields 2>/dev/null | sed -n 's/^\"CreateRevision\" : //p'",
             server.port);
    return fault_shell_number(cmd) == fence;
}

/* A worker SIGKILLed just after its release, while its client keeps the
 * hold (its key still the name's first): nobody gives it back, so the
 * other worker is granted when the killed one's lease runs out and its
 * key goes; no violation. */
static void kept_holds_and_a_keeper_killed(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run, 40);
    fault_run_keep_going(&run, true); /* a kill late in the run still meets the other worker */
    int64_t granted_after_ms = fault_run_kill_a_keeper(&run, fault_run_keeper(&run, 5000, etcd_still_kept),
                                                       "etcd, kept holds, a keeper SIGKILLed", LEASE_MS);
    /* Its lease kept alive every third of the lease, the kept hold had at
     * least two thirds of it left when its keeper died: a grant sooner
     * would mean the kill found no kept hold. */
    assert_true(granted_after_ms >= LEASE_MS / 3);
}

/* A worker stopped just after its release while its client keeps the
 * hold, past the hold's lease: the other worker is granted once the
 * lease runs out, and the resumed keeper goes to the server for a greater
 * token instead of serving the hold it kept (see fault_run.h). */
static void kept_holds_and_a_keeper_paused(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run, 40);
    fault_run_keep_going(&run, true);
    int64_t granted_after_ms = fault_run_pause_a_keeper(&run, fault_run_keeper(&run, 5000, etcd_still_kept),
                                                        "etcd, kept holds, a keeper SIGSTOPped past its lease",
                                                        LEASE_MS);
    assert_true(granted_after_ms >= LEASE_MS / 3);
}

/* Permits of a semaphore, one holder SIGKILLed (see fault_run.h). */
static void semaphore_holder_killed(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_semaphore_holder_killed("etcd, semaphore of 2, a holder SIGKILLed", config, LEASE_MS + 500);
}

/* Writers and readers of one name, a writer stopped mid-hold past its
 * lease (see fault_run.h). */
static void readers_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_rw_writer_paused("etcd, 2 writers and 3 readers, a writer stopped past its lease", config,
                               LEASE_MS + 500);
}

/* One name asked for in three kinds at once, a writer stopped mid-hold past
 * its lease (see fault_run.h). */
static void mixed_kinds_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_mixed_kinds_writer_paused("etcd, 2 writers, 2 readers and 2 permit holders of one name, a writer stopped past its lease",
                                        config, LEASE_MS + 500);
}

/* Three candidates in an election: the leader stopped past its lease,
 * then the next one killed (see fault_run.h). */
static void election_leader_paused_then_killed(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_election_leader_paused_then_killed("etcd, 3 candidates in an election, the leader stopped past its lease, then the next killed",
                                                 config, LEASE_MS);
}

static void no_fault(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, 40);
    fault_run_finish(&run, "etcd, no fault", &r);
    assert_true(r.grants >= 20);
    assert_int_equal(r.lost_notes + r.invalid_checks, 0);
}

/* The holder paused for 1.5 leases: its lease expires and its key goes (up
 * to 0.5 s after the TTL), the next in line is granted; on resuming it
 * learns the loss and its late read or write is refused by the fence. */
static void holder_paused_past_its_lease(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, 40);
    pid_t holder = fault_run_pause_holder(&run, 3000);
    assert_true(holder > 0);
    int64_t stopped_at = fault_now_us();
    fault_sleep_ms(LEASE_MS * 3 / 2);
    int during = fault_run_await_grant(&run, stopped_at, LEASE_MS * 3 / 2);
    fault_sleep_ms(300); /* for its read with the newer token */
    kill(holder, SIGCONT);
    fault_run_finish(&run, "etcd, holder SIGSTOPped past its lease", &r);
    assert_true(during >= 1);
    assert_true(r.lost_notes + r.invalid_checks >= 1);
    assert_true(r.writes_refused + r.reads_refused >= 1);
}

/* The server paused for half a lease: slower, but nobody loses a hold. */
static void server_paused_half_a_lease(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, 2 * LEASE_MS);
    fault_run_await_grant(&run, fault_now_us(), 5000);
    test_service_signal(&server, SIGSTOP);
    fault_sleep_ms(LEASE_MS / 2);
    test_service_signal(&server, SIGCONT);
    fault_run_finish(&run, "etcd, server SIGSTOPped for 0.5 lease", &r);
    assert_int_equal(r.lost_notes + r.invalid_checks, 0);
}

int main(void)
{
    if (test_service_start(&server) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] etcd did not start\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_fault),
        cmocka_unit_test_setup_teardown(kept_holds_no_fault, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(kept_holds_and_a_keeper_killed, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(kept_holds_and_a_keeper_paused, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test(semaphore_holder_killed),
        cmocka_unit_test(readers_and_a_writer_paused),
        cmocka_unit_test(mixed_kinds_and_a_writer_paused),
        cmocka_unit_test(election_leader_paused_then_killed),
        cmocka_unit_test(holder_paused_past_its_lease),
        cmocka_unit_test(server_paused_half_a_lease),
    };
    int failed = cmocka_run_group_tests_name("checked faults (etcd)", tests, NULL, NULL);
    test_service_stop(&server);
    return failed ? 1 : 0;
}
