/* tests/backends/redlock/test_checked_redlock.c - the fault suite on the redlock
 * backend over 5 independent redis-servers: 4 worker processes contend for
 * one lock and increment the fenced counter (fault_worker) while 2, then 3
 * masters are killed; the checker proves no overlap, growing fences, stale
 * writes refused and no lost increment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../support/redis_server.h"
#include "../../faults/fault_run.h"

#include <stdio.h>
#include <string.h>

#define MASTERS 5
#define LEASE_MS 1500
#define WORKERS 4

static struct test_redis masters[MASTERS];

static void start(struct fault_run *run)
{
    char config[1024];
    int n = snprintf(config, sizeof config,
                     "backend = \"redlock\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
                     "redlock = { server_timeout_ms = 100; connect_timeout_ms = 100; servers = (",
                     LEASE_MS);
    for (int i = 0; i < MASTERS; i++)
        n += snprintf(config + n, sizeof config - (size_t)n, "%s\"127.0.0.1:%d\"", i ? ", " : "", masters[i].port);
    snprintf(config + n, sizeof config - (size_t)n, "); };\n");
    fault_run_start(run, config, WORKERS, 5000 * fault_run_scale(), 40);
    fault_sleep_ms(1200);
}

static void restart_all(void)
{
    for (int i = 0; i < MASTERS; i++)
        if (!masters[i].pid && test_redis_start(&masters[i]) != 0)
            fail_msg("master %d did not come back", i);
}

/* A minority down: grants go on, exclusive, with growing fences. */
static void two_masters_killed(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run);
    test_redis_kill(&masters[0], 1);
    test_redis_kill(&masters[3], 1);
    int64_t killed_at = fault_now_us();
    fault_sleep_ms(2000);
    int grants = history_grants_between(run.dir, WORKERS, killed_at, fault_now_us());
    fault_run_finish(&run, "redlock, 2 of 5 masters killed", &r);
    restart_all();
    assert_true(grants >= 5);
}

/* A majority down: no grant at all while they are down (no quorum), then
 * service again once they are back. */
static void three_masters_killed_then_back(void **state)
{
    (void)state;
    struct fault_run run;
    struct history_report r;
    start(&run);
    for (int i = 0; i < 3; i++)
        test_redis_kill(&masters[i], 1);
    /* A grant in flight when they went may still be logged just after. */
    int64_t from = fault_now_us() + 300 * 1000;
    fault_sleep_ms(1500);
    int64_t back = fault_now_us();
    int during = history_grants_between(run.dir, WORKERS, from, back);
    restart_all();
    fault_sleep_ms(2000);
    int after = history_grants_between(run.dir, WORKERS, back, fault_now_us());
    fault_run_finish(&run, "redlock, 3 of 5 masters killed, then back", &r);
    assert_int_equal(during, 0);
    assert_true(after >= 1);
    assert_true(r.failed_acquires >= 1);
}

int main(void)
{
    for (int i = 0; i < MASTERS; i++)
        if (test_redis_start(&masters[i]) != 0) {
            printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] redis-server %d did not start\n", i);
            return 1;
        }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_masters_killed),
        cmocka_unit_test(three_masters_killed_then_back),
    };
    int failed = cmocka_run_group_tests_name("checked faults (redlock, 5 masters)", tests, NULL, NULL);
    for (int i = 0; i < MASTERS; i++)
        test_redis_stop(&masters[i]);
    return failed ? 1 : 0;
}
