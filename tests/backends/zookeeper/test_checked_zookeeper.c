/* tests/backends/zookeeper/test_checked_zookeeper.c - the fault suite on the zookeeper
 * backend: 4 worker processes contend for one lock and increment the fenced
 * counter (fault_worker) while the holder is paused past its session (the
 * session expires) or, in a 3-node ensemble, the leader is killed. The
 * checker proves no overlap, growing fences (czxid), stale writes refused
 * and no lost increment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../support/service.h"
#include "../../faults/fault_run.h"

#define THREADED 1
#include <zookeeper/zookeeper.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_MS 1500
#define WORKERS 4

static struct test_service ensemble = { .script = "zookeeper", .nodes = 3 };

/* The workers' configuration. */
static void worker_config(char *config, size_t size)
{
    snprintf(config, size,
             "backend = \"zookeeper\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "zookeeper = { hosts = \"127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d\"; root = \"/dlock-faults\"; "
             "connect_timeout_ms = 3000; };\n%s",
             LEASE_MS, ensemble.port, ensemble.port + 1, ensemble.port + 2,
             fault_run_cache_group());
}

static void start(struct fault_run *run)
{
    char config[512];
    worker_config(config, sizeof config);
    /* Kept holds: two workers, so that the name is often free of waiters
     * when a worker comes back for it (a hold granted while others are
     * queued is not kept). */
    fault_run_start(run, config, fault_run_caching() ? 2 : WORKERS, 6000 * fault_run_scale(), 40);
    fault_sleep_ms(2000); /* sessions set up */
}

/* Workers that keep their released holds: some acquires take over the
 * hold their client kept, with its token, and the checker proves each was
 * one continuous hold (no other worker's grant in between). */
static void kept_holds_no_fault(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run);
    fault_run_finish_kept_holds(&run, "zookeeper, kept holds, no fault");
}

static void quiet(const char *message)
{
    (void)message;
}

/* Whether a node of the lock still has the czxid of the last grant, the
 * fence: the hold's node, alive with its session (the stopped keeper's
 * session lasts its timeout past the last ping). Read on a session of
 * the test's own. */
static bool still_kept(uint64_t fence)
{
    char hosts[128];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", ensemble.port, ensemble.port + 1,
             ensemble.port + 2);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zhandle_t *zh = zookeeper_init2(hosts, NULL, 4000, NULL, NULL, 0, quiet);
    for (int i = 0; zh && zoo_state(zh) != ZOO_CONNECTED_STATE && i < 300; i++)
        fault_sleep_ms(10);
    bool kept = false;
    struct String_vector children = { 0, NULL };
    const char *parent = "/dlock-faults/fault-suite-lock";
    if (zh && zoo_state(zh) == ZOO_CONNECTED_STATE && zoo_get_children(zh, parent, 0, &children) == ZOK) {
        for (int i = 0; i < children.count && !kept; i++) {
            char path[512];
            struct Stat st;
            snprintf(path, sizeof path, "%s/%s", parent, children.data[i]);
            kept = zoo_exists(zh, path, 0, &st) == ZOK && (uint64_t)st.czxid == fence;
        }
        deallocate_String_vector(&children);
    }
    if (zh)
        zookeeper_close(zh);
    return kept;
}

/* A worker SIGKILLed just after its release, while its client keeps the
 * hold (its node still there with the grant's czxid): nobody gives it
 * back, so the other worker is granted when the killed one's session
 * ends; no violation. */
static void kept_holds_and_a_keeper_killed(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run);
    fault_run_keep_going(&run, true); /* a kill late in the run still meets the other worker */
    int64_t granted_after_ms = fault_run_kill_a_keeper(&run, fault_run_keeper(&run, 5000, still_kept),
                                                       "zookeeper, kept holds, a keeper SIGKILLed", LEASE_MS);
    /* Pinged every third of its timeout, the killed keeper's session had
     * at least two thirds of it left: a grant sooner would mean the kill
     * found no kept hold. */
    assert_true(granted_after_ms >= LEASE_MS / 3);
}

/* A worker stopped just after its release while its client keeps the
 * hold, past its session: the other worker is granted once the session
 * expires, and the resumed keeper goes to the server for a greater token
 * instead of serving the hold it kept (see fault_run.h). */
static void kept_holds_and_a_keeper_paused(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run);
    fault_run_keep_going(&run, true);
    int64_t granted_after_ms = fault_run_pause_a_keeper(&run, fault_run_keeper(&run, 5000, still_kept),
                                                        "zookeeper, kept holds, a keeper SIGSTOPped past its session",
                                                        LEASE_MS);
    assert_true(granted_after_ms >= LEASE_MS / 3);
}

/* Permits of a semaphore, one holder SIGKILLed (see fault_run.h). */
static void semaphore_holder_killed(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_semaphore_holder_killed("zookeeper, semaphore of 2, a holder SIGKILLed", config, LEASE_MS);
}

/* Writers and readers of one name, a writer stopped mid-hold past its
 * session (see fault_run.h). */
static void readers_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_rw_writer_paused("zookeeper, 2 writers and 3 readers, a writer stopped past its session", config,
                               LEASE_MS);
}

/* One name asked for in three kinds at once, a writer stopped mid-hold past
 * its lease (see fault_run.h). */
static void mixed_kinds_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_mixed_kinds_writer_paused("zookeeper, 2 writers, 2 readers and 2 permit holders of one name, a writer stopped past its session",
                                        config, LEASE_MS);
}

/* Three candidates in an election: the leader stopped past its lease,
 * then the next one killed (see fault_run.h). */
static void election_leader_paused_then_killed(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_election_leader_paused_then_killed("zookeeper, 3 candidates in an election, the leader stopped past its lease, then the next killed",
                                                 config, LEASE_MS);
}

/* The holder paused for 1.5 sessions: its session expires, its node goes,
 * the next in line is granted; on resuming it learns the loss and its late
 * write is refused. */
static void holder_paused_past_its_session(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run);
    pid_t holder = fault_run_pause_holder(&run, 3000);
    assert_true(holder > 0);
    int64_t stopped_at = fault_now_us();
    fault_sleep_ms(LEASE_MS * 3 / 2);
    /* The session expires 1-1.7 s into the pause; the next in line is
     * granted soon after, but on a slow machine that may be late. */
    int during = fault_run_await_grant(&run, stopped_at, LEASE_MS * 3 / 2);
    fault_sleep_ms(300); /* for its read with the newer token */
    kill(holder, SIGCONT);
    fault_run_finish(&run, "zookeeper, holder SIGSTOPped past its session", &r);
    assert_true(during >= 1); /* the expiry freed it for the next in line */
    assert_true(r.lost_notes + r.invalid_checks >= 1);
    /* Paused before its read, its read is refused (and it does not write);
     * paused after it, its write is. */
    assert_true(r.writes_refused + r.reads_refused >= 1);
}

static int leader_index(void)
{
    for (int i = 0; i < 3; i++) {
        char cmd[512], out[32] = "";
        snprintf(cmd, sizeof cmd, "bash '%s/support/zookeeper.sh' mode %d",
                 getenv("DLOCK_TEST_SRCDIR") ? getenv("DLOCK_TEST_SRCDIR") : "tests", ensemble.port + i);
        FILE *p = popen(cmd, "r");
        if (p) {
            if (!fgets(out, sizeof out, p))
                out[0] = 0;
            pclose(p);
        }
        if (strncmp(out, "leader", 6) == 0)
            return i;
    }
    return -1;
}

/* The leader SIGKILLed: an election, then service again; sessions (1.5 s)
 * may expire meanwhile, which the checker then sees as reported losses. */
static void leader_killed(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run);
    int leader = leader_index();
    assert_true(leader >= 0);
    char pidfile[300];
    snprintf(pidfile, sizeof pidfile, "%s/%d/pid", ensemble.data, leader + 1);
    FILE *f = fopen(pidfile, "r");
    long pid = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld", &pid), 1);
    fclose(f);
    kill((pid_t)pid, SIGKILL);
    int64_t killed_at = fault_now_us();
    fault_sleep_ms(3500);
    int after = history_grants_between(run.dir, WORKERS, killed_at, fault_now_us());
    fault_run_finish(&run, "zookeeper, leader SIGKILLed (3-node ensemble)", &r);
    assert_true(after >= 1);
}

int main(void)
{
    if (test_service_start(&ensemble) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] the ZooKeeper ensemble did not start\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(holder_paused_past_its_session),
        cmocka_unit_test(semaphore_holder_killed),
        cmocka_unit_test(readers_and_a_writer_paused),
        cmocka_unit_test(mixed_kinds_and_a_writer_paused),
        cmocka_unit_test(election_leader_paused_then_killed),
        cmocka_unit_test_setup_teardown(kept_holds_no_fault, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(kept_holds_and_a_keeper_killed, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(kept_holds_and_a_keeper_paused, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test(leader_killed), /* last: leaves two nodes */
    };
    int failed = cmocka_run_group_tests_name("checked faults (zookeeper, 3 nodes)", tests, NULL, NULL);
    test_service_stop(&ensemble);
    return failed ? 1 : 0;
}
