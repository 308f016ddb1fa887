/* tests/backends/redis/test_checked_redis.c - the fault suite on the redis backend:
 * 4 worker processes contend for one lock and increment a fenced counter
 * under it (fault_worker), while this program injects one fault per case
 * into the holder, the server or the network (the project's TCP proxy sits
 * between the workers and redis-server). The checker then proves, from the
 * logs, no overlapping holds, fences that only grow, every stale write
 * refused and no lost increment; each case adds its own pass figure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../support/fault_proxy.h"
#include "../../support/redis_server.h"
#include "../../faults/fault_run.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_MS 1500
#define WORKERS 4
#define SHORT_HOLD_MS 40
/* Long enough that the holder is inside its hold, its watchdog renewing,
 * when the fault hits: the loss is then the library's to report. */
#define LONG_HOLD_MS (2 * LEASE_MS)

static struct test_redis server;
static struct fault_proxy *proxy;
static int proxy_port;

/* The workers' configuration: redis through the fault proxy. */
static void worker_config(char *config, size_t size)
{
    snprintf(config, size,
             "backend = \"redis\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "redis = { port = %d; command_timeout_ms = 1000; connect_timeout_ms = 500; };\n%s",
             LEASE_MS, proxy_port, fault_run_cache_group());
}

static void start(struct fault_run *run, int hold_ms)
{
    char config[512];
    worker_config(config, sizeof config);
    /* Kept holds: two workers, so that the name is often free of waiters
     * when a worker comes back for it (a hold granted while others are
     * queued is not kept). */
    fault_run_start(run, config, fault_run_caching() ? 2 : WORKERS, (hold_ms > 1000 ? 9000 : 5000) * fault_run_scale(),
                    hold_ms);
    fault_sleep_ms(1200); /* let them get going */
}

static void no_fault(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, SHORT_HOLD_MS);
    fault_run_finish(&run, "redis, no fault", &r);
    assert_true(r.grants >= 20);
    assert_int_equal(r.lost_notes + r.invalid_checks, 0);
}

/* The holder dies: its hold ends with its lease, and others go on. */
static void holder_killed(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, SHORT_HOLD_MS);
    pid_t holder = fault_run_holder(&run, 2000);
    assert_true(holder > 0);
    int64_t killed_at = fault_now_us();
    kill(holder, SIGKILL);
    int grants = -1;
    fault_sleep_ms(LEASE_MS + 1000);
    grants = history_grants_between(run.dir, run.nworkers, killed_at, fault_now_us());
    fault_run_finish(&run, "redis, holder SIGKILLed", &r);
    assert_true(grants >= 1); /* within the lease + 1 s */
}

/* Permits of a semaphore, one holder SIGKILLed (see fault_run.h). */
static void semaphore_holder_killed(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_semaphore_holder_killed("redis, semaphore of 2, a holder SIGKILLed", config, LEASE_MS);
}

/* Writers and readers of one name, a writer stopped mid-hold past its
 * lease (see fault_run.h). */
static void readers_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_rw_writer_paused("redis, 2 writers and 3 readers, a writer stopped past its lease", config, LEASE_MS);
}

/* One name asked for in three kinds at once, a writer stopped mid-hold past
 * its lease (see fault_run.h). */
static void mixed_kinds_and_a_writer_paused(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_mixed_kinds_writer_paused("redis, 2 writers, 2 readers and 2 permit holders of one name, a writer stopped past its lease",
                                        config, LEASE_MS);
}

/* Three candidates in an election: the leader stopped past its lease,
 * then the next one killed (see fault_run.h). */
static void election_leader_paused_then_killed(void **state)
{
    (void)state;
    char config[512];
    worker_config(config, sizeof config);
    fault_run_election_leader_paused_then_killed("redis, 3 candidates in an election, the leader stopped past its lease, then the next killed",
                                                 config, LEASE_MS);
}

/* A fault held for ms while a holder is inside its (long) hold: begin(),
 * wait, end(), then 2.5 s of service; r gets the checked run, *after the
 * grants made once the fault ended. */
enum fault_kind { HOLDER_STOPPED, SERVER_STOPPED, NETWORK_DELAY, NETWORK_PARTITION, REPLIES_PAST_THE_LEASE };

static void fault_begin(enum fault_kind kind, pid_t holder)
{
    switch (kind) {
    case HOLDER_STOPPED: break; /* stopped mid-hold by fault_run_pause_holder */
    case SERVER_STOPPED: kill(server.pid, SIGSTOP); break;
    case NETWORK_DELAY: fault_proxy_set(proxy, FAULT_DELAY, 100); break;
    case NETWORK_PARTITION: fault_proxy_set(proxy, FAULT_BLACKHOLE, 0); break;
    case REPLIES_PAST_THE_LEASE: fault_proxy_set(proxy, FAULT_DELAY, 2 * LEASE_MS); break;
    }
}

static void fault_end(enum fault_kind kind, pid_t holder)
{
    switch (kind) {
    case HOLDER_STOPPED: kill(holder, SIGCONT); break;
    case SERVER_STOPPED: kill(server.pid, SIGCONT); break;
    case NETWORK_DELAY:
    case NETWORK_PARTITION:
    case REPLIES_PAST_THE_LEASE: fault_proxy_set(proxy, FAULT_PASS, 0); break;
    }
}

static void run_with_fault(const char *scenario, enum fault_kind kind, int ms, struct history_report *r, int *after)
{
    struct fault_run run;
    start(&run, LONG_HOLD_MS);
    /* Other faults begin right after a grant: the holder is then inside its
     * hold for at least half of LONG_HOLD_MS, one lease, which outlasts the
     * validity it had at the fault (it checks it before writing). Begun
     * late in a hold, the holder could release within its validity, and
     * rightly report no loss. */
    if (kind != HOLDER_STOPPED)
        fault_run_await_grant(&run, fault_now_us(), 5000);
    pid_t holder = kind == HOLDER_STOPPED ? fault_run_pause_holder(&run, 2000) : fault_run_holder(&run, 2000);
    assert_true(holder > 0);
    int64_t began = fault_now_us();
    fault_begin(kind, holder);
    fault_sleep_ms(ms);
    if (kind == HOLDER_STOPPED) { /* resumed after the next holder's grant and read */
        fault_run_await_grant(&run, began, ms);
        fault_sleep_ms(300);
    }
    fault_end(kind, holder);
    int64_t healed = fault_now_us();
    fault_sleep_ms(2500);
    *after = history_grants_between(run.dir, WORKERS, healed, fault_now_us());
    fault_run_finish(&run, scenario, r);
}

/* The holder is paused for 1.5 leases: the others take the lock after its
 * lease; when it resumes, it learns the loss and its late write is refused. */
static void holder_paused_past_its_lease(void **state)
{
    (void)state;
    struct history_report r;
    int after;
    run_with_fault("redis, holder SIGSTOPped for 1.5 leases", HOLDER_STOPPED, LEASE_MS * 3 / 2, &r, &after);
    assert_true(r.writes_refused + r.reads_refused >= 1); /* its late read or write */
    assert_true(r.lost_notes + r.invalid_checks >= 1);
}

/* The server pauses for half a lease: slower, but nobody loses a hold. */
static void server_paused_half_a_lease(void **state)
{
    (void)state;
    struct history_report r;
    int after;
    run_with_fault("redis, server SIGSTOPped for 0.5 lease", SERVER_STOPPED, LEASE_MS / 2, &r, &after);
    assert_int_equal(r.lost_notes + r.invalid_checks, 0);
}

/* The server pauses for 1.5 leases: the holder reports the loss when its
 * validity ends, and no one else is granted before that. */
static void server_paused_past_the_lease(void **state)
{
    (void)state;
    struct history_report r;
    int after;
    run_with_fault("redis, server SIGSTOPped for 1.5 leases", SERVER_STOPPED, LEASE_MS * 3 / 2, &r, &after);
    assert_true(r.lost_notes + r.invalid_checks >= 1);
    assert_true(after >= 1);
}

/* 100 ms each way on every connection for 2 s: below the renewal
 * interval, so no loss. */
static void network_delay(void **state)
{
    (void)state;
    struct history_report r;
    int after;
    run_with_fault("redis, 100 ms delay for 2 s", NETWORK_DELAY, 2000, &r, &after);
    assert_int_equal(r.lost_notes + r.invalid_checks, 0);
}

/* Every connection silent for 1.5 leases (a partition): the holder reports
 * the loss; service resumes after. */
static void network_partition(void **state)
{
    (void)state;
    struct history_report r;
    int after;
    run_with_fault("redis, partition for 1.5 leases", NETWORK_PARTITION, LEASE_MS * 3 / 2, &r, &after);
    assert_true(r.lost_notes + r.invalid_checks >= 1);
    assert_true(after >= 1);
}

/* Every byte arrives two leases late: the holder's renewals reach the
 * server late or not at all, and their answers come after its validity.
 * The loss must be reported at the validity end, not when a slow call
 * returns, so no one is granted while the holder still believes in its hold
 * (the checker finds no overlap). */
static void replies_later_than_the_lease(void **state)
{
    (void)state;
    struct history_report r;
    int after;
    run_with_fault("redis, every byte 2 leases late", REPLIES_PAST_THE_LEASE, LEASE_MS * 3 / 2, &r, &after);
    assert_true(r.lost_notes + r.invalid_checks >= 1);
}

/* ---- kept holds (lock caching) ------------------------------------------------- */

/* Workers that keep their released holds and pause between holds: some
 * acquires take over the hold their client kept, with its token, and the
 * checker proves each was one continuous hold (no other worker's grant in
 * between), besides the usual rules. */
static void kept_holds_no_fault(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run, SHORT_HOLD_MS);
    fault_sleep_ms(2000);
    fault_run_finish_kept_holds(&run, "redis, kept holds, no fault");
}

/* The subscriber connections (which carry the requests to kept holds)
 * cut three times: a kept hold whose watch may have missed a request is
 * given back, waiters subscribe again; no violation, and grants go on. */
static void kept_holds_and_pubsub_cut(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, SHORT_HOLD_MS);
    int64_t cut_at = 0;
    for (int i = 0; i < 3; i++) {
        redisReply *k = test_redis_cmd(&server, "CLIENT KILL TYPE pubsub");
        if (k)
            freeReplyObject(k);
        cut_at = fault_now_us();
        fault_sleep_ms(700);
    }
    int after = fault_run_await_grant(&run, cut_at, 5000);
    fault_run_finish(&run, "redis, kept holds, Pub/Sub connections cut 3 times", &r);
    assert_true(after >= 1);
    assert_true(r.kept_grants >= 1);
}

/* A holder stopped mid-hold past its lease, in a run of kept holds: its
 * kept token is not taken over after the others held (stale grant), and
 * its late write is refused. */
static void kept_holds_and_a_holder_paused(void **state)
{
    (void)state;
    struct history_report r;
    int after;
    run_with_fault("redis, kept holds, holder SIGSTOPped for 1.5 leases", HOLDER_STOPPED, LEASE_MS * 3 / 2, &r,
                   &after);
    assert_true(r.writes_refused + r.reads_refused >= 1);
    assert_true(after >= 1);
}

static bool redis_exists(const char *key)
{
    redisReply *r = test_redis_cmd(&server, "EXISTS %s", key);
    bool yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    return yes;
}

/* Whether the name's fence counter is still at fence: nobody was granted
 * the name since the grant that got it. */
static bool fence_still(uint64_t fence)
{
    redisReply *r = test_redis_cmd(&server, "GET dlock:{fault-suite-lock}:fence");
    bool yes = r && r->type == REDIS_REPLY_STRING && strtoull(r->str, NULL, 10) == fence;
    if (r)
        freeReplyObject(r);
    return yes;
}

/* Whether the server still has the hold of the grant whose fence this
 * is: the key there, and the fence counter still at that grant. */
static bool redis_still_kept(uint64_t fence)
{
    return redis_exists("dlock:{fault-suite-lock}") && fence_still(fence);
}

/* A worker SIGKILLed while its client keeps the hold: nobody can give it
 * back, so the other worker is granted when its lease runs out, with a
 * greater token; no violation. */
static void kept_holds_and_a_keeper_killed(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run, SHORT_HOLD_MS);
    fault_run_keep_going(&run, true); /* a kill late in the run still meets the other worker */
    int64_t granted_after_ms =
        fault_run_kill_a_keeper(&run, fault_run_keeper(&run, 5000, redis_still_kept),
                                "redis, kept holds, a keeper SIGKILLed", LEASE_MS);
    /* Renewed every third of the lease, the kept hold had at least two
     * thirds of it left when its keeper stopped: less than a third would
     * mean the kill found no kept hold, and the case proved nothing. */
    assert_true(granted_after_ms >= LEASE_MS / 3);
}

/* The server killed and restarted empty while holds are kept: a kept hold
 * the server no longer has is not taken over (the renewal finds it gone,
 * the reconnect makes the watch give it back), tokens keep growing, and
 * grants go on; the overlap any redis hold has at such a restart is the
 * documented one. */
static void kept_holds_and_the_server_restarted(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, SHORT_HOLD_MS);
    fault_run_keep_going(&run, true);
    assert_true(fault_run_keeper(&run, 5000, redis_still_kept) > 0);
    test_redis_kill(&server, 1);
    assert_int_equal(test_redis_start(&server), 0); /* same port, empty */
    int64_t restarted_at = fault_now_us();
    int after = fault_run_await_grant(&run, restarted_at, LEASE_MS + 5000);
    fault_sleep_ms(1000);
    fault_run_keep_going(&run, false);
    fault_run_finish_overlap_documented(&run, "redis, kept holds, server killed and restarted empty", &r);
    assert_true(after >= 1);
}

/* Killed and restarted empty (no persistence): the holder learns at its
 * next renewal, but another worker may be granted before that (the
 * documented overlap). The fence counter is re-seeded from the server's
 * clock, so tokens keep growing and the guard still refuses stale writes. */
static void server_restarted_empty(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, LONG_HOLD_MS);
    assert_true(fault_run_holder(&run, 2000) > 0);
    test_redis_kill(&server, 1);
    /* A loss can be reported from the moment the new server answers,
     * which is before test_redis_start() returns: counted from the kill
     * (a server that is down makes renewals fail, not holds lost). */
    int64_t killed_at = fault_now_us();
    assert_int_equal(test_redis_start(&server), 0); /* same port, empty */
    int64_t restarted_at = fault_now_us();
    fault_sleep_ms(LEASE_MS);
    long long told = history_first_loss_after(run.dir, WORKERS, killed_at);
    fault_run_finish_overlap_documented(&run, "redis, server killed and restarted empty", &r);
    assert_true(told > 0);
    printf("# restart -> loss reported after %lld ms (renewal interval %d ms)\n", (told - restarted_at) / 1000,
           LEASE_MS / 3);
    assert_true(told - restarted_at <= (LEASE_MS / 3 + 300) * 1000LL);
}

/* A snapshot is taken, the workers go on granting, and the server is
 * killed and restarted from that older snapshot: its fence counter comes
 * back behind tokens already handed out. Tokens must still grow, or the
 * fence guard, which has seen higher ones, refuses every later holder. */
static void server_restarted_from_an_older_snapshot(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, SHORT_HOLD_MS);
    redisReply *saved = test_redis_cmd(&server, "SAVE");
    assert_non_null(saved);
    freeReplyObject(saved);
    fault_sleep_ms(1500); /* more grants after the snapshot */
    test_redis_kill(&server, 1);
    assert_int_equal(test_redis_start(&server), 0); /* same port and dir: loads the snapshot */
    fault_sleep_ms(LEASE_MS + 1000);
    fault_run_finish_overlap_documented(&run, "redis, restarted from an older snapshot", &r);
    assert_true(r.grants >= 10);
    /* Tokens that went back would be refused by the guard, which has seen
     * higher ones: every worker would be locked out of the resource (with
     * the counter seeded only when missing, 37 of 174 reads were). The
     * one refusal that is right: the holder at the kill, whose hold the
     * older snapshot does not have, writing once more before it learns
     * that (its release then says so), after a later grant's token. Token
     * order itself is checked as a violation (fence_disorder). */
    if (r.writes_refused + r.reads_refused > r.releases_refused + r.lost_notes)
        fail_msg("%d writes and %d reads refused, by %d holders told of a loss", r.writes_refused, r.reads_refused,
                 r.releases_refused + r.lost_notes);
}

/* Every connection half-closed (the client reads end-of-file) for 300 ms,
 * then every connection cut, the waiters' Pub/Sub one included: clear
 * errors, and service again within the reconnect backoff. */
static void connections_half_closed_then_cut(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run, SHORT_HOLD_MS);
    fault_proxy_set(proxy, FAULT_HALF_CLOSE, 0);
    fault_sleep_ms(300);
    fault_proxy_set(proxy, FAULT_RESET, 0);
    fault_sleep_ms(100);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    int64_t healed = fault_now_us();
    fault_sleep_ms(2500);
    int after = history_grants_between(run.dir, WORKERS, healed, fault_now_us());
    fault_run_finish(&run, "redis, connections half-closed then cut", &r);
    assert_true(after >= 1);
}

int main(void)
{
    if (getenv("CMOCKA_FILTER")) /* one case by name */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    if (test_redis_start(&server) != 0 || !(proxy = fault_proxy_start(server.port, &proxy_port))) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] redis or the fault proxy did not start\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_fault),
        cmocka_unit_test(holder_killed),
        cmocka_unit_test(semaphore_holder_killed),
        cmocka_unit_test(readers_and_a_writer_paused),
        cmocka_unit_test(mixed_kinds_and_a_writer_paused),
        cmocka_unit_test(election_leader_paused_then_killed),
        cmocka_unit_test(holder_paused_past_its_lease),
        cmocka_unit_test(server_paused_half_a_lease),
        cmocka_unit_test(server_paused_past_the_lease),
        cmocka_unit_test(network_delay),
        cmocka_unit_test(network_partition),
        cmocka_unit_test(replies_later_than_the_lease),
        cmocka_unit_test(connections_half_closed_then_cut),
        cmocka_unit_test_setup_teardown(kept_holds_no_fault, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(kept_holds_and_pubsub_cut, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(kept_holds_and_a_holder_paused, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(kept_holds_and_a_keeper_killed, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test(server_restarted_from_an_older_snapshot),
        cmocka_unit_test_setup_teardown(kept_holds_and_the_server_restarted, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test(server_restarted_empty), /* last: fences restart */
    };
    int failed = cmocka_run_group_tests_name("checked faults (redis)", tests, NULL, NULL);
    fault_proxy_stop(proxy);
    test_redis_stop(&server);
    return failed ? 1 : 0;
}
