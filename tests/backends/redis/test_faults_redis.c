/* tests/backends/redis/test_faults_redis.c - the redis backend through the project's
 * own TCP fault proxy (tests/support/fault_proxy.c): latency, a partition
 * longer than the lease, and cut connections, each checked for what the
 * docs promise: no loss below the renewal interval; after a partition the
 * holder is told no later than the next holder is granted, and the fence
 * guard refuses the stale holder's writes; clear errors, then recovery. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../support/async_result.h"
#include "../../support/campaigner.h"
#include "../../support/fault_proxy.h"
#include "../../support/native_cases.h"
#include "../../support/redis_server.h"
#include "../../support/test_client.h"
#include "../../support/test_time.h"

#include <dlock.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct test_redis server;
static struct fault_proxy *proxy;
static int proxy_port;

static dlock_client *open_at(int port, int lease_ms)
{
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"redis\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 50;\n"
             "redis = { port = %d; command_timeout_ms = 200; connect_timeout_ms = 200; };\n",
             lease_ms, port);
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("open: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return c;
}

static int64_t lost_at;

static void note_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    __atomic_store_n(&lost_at, now_ms(), __ATOMIC_SEQ_CST);
}

static dlock_lock *watched(dlock_client *c, const char *name)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = note_lost;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l), DLOCK_OK);
    return l;
}

static void latency_below_the_renewal_interval_loses_nothing(void **state)
{
    (void)state;
    __atomic_store_n(&lost_at, 0, __ATOMIC_SEQ_CST);
    dlock_client *a = open_at(proxy_port, 900);
    dlock_lock *l = watched(a, "slow");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_DELAY, 50);
    sleep_ms(2000); /* six renewals, each 100 ms slower */
    fault_proxy_set(proxy, FAULT_PASS, 0);
    assert_int_equal(__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST), 0);
    assert_true(dlock_validity_ms(l) > 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void partition_longer_than_the_lease(void **state)
{
    (void)state;
    __atomic_store_n(&lost_at, 0, __ATOMIC_SEQ_CST);
    dlock_client *a = open_at(proxy_port, 900), *b = open_at(server.port, 900);
    dlock_lock *la = watched(a, "partitioned"), *lb = NULL;
    assert_int_equal(dlock_lock_new(b, "partitioned", 11, NULL, &lb), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t fa, fb, highest = 0;
    assert_int_equal(dlock_fence(la, &fa), DLOCK_OK);
    assert_int_equal(dlock_fence_admit(&highest, fa), DLOCK_OK); /* A writes while it holds */
    fault_proxy_set(proxy, FAULT_BLACKHOLE, 0);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(lb, 5000), DLOCK_OK); /* B, not partitioned, after the TTL */
    int64_t granted_at = now_ms();
    int64_t a_valid = dlock_validity_ms(la);
    assert_true(granted_at - t0 < 900 + 300);
    /* A's validity had ended when B was granted: it is measured from before
     * each renewal was sent, so it ends before the server's TTL. */
    assert_true(a_valid == 0 || a_valid == DLOCK_ELOST);
    /* And A was told then, by the expiry thread: allow for that thread's
     * wake-up on a loaded machine, not for any I/O. */
    while (__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) == 0 && now_ms() - granted_at < 1000)
        sleep_ms(5);
    int64_t told = __atomic_load_n(&lost_at, __ATOMIC_SEQ_CST);
    if (told == 0 || told > granted_at + 100)
        fail_msg("the partitioned holder was told %lld ms after the next grant",
                 told ? (long long)(told - granted_at) : -1LL);
    assert_int_equal(dlock_fence(lb, &fb), DLOCK_OK);
    assert_true(fb > fa);
    assert_int_equal(dlock_fence_admit(&highest, fb), DLOCK_OK);
    /* A's write arriving late (it did not look at on_lost) is refused. */
    assert_int_equal(dlock_fence_admit(&highest, fa), DLOCK_ESTALE);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static int leadership_lost_calls;

static void note_leadership_lost(dlock_election *e, void *arg)
{
    (void)e;
    (void)arg;
    __atomic_add_fetch(&leadership_lost_calls, 1, __ATOMIC_SEQ_CST);
}

/* The leader's connections cut twice in quick succession (each time every
 * connection closed, and new ones refused for 100 ms): its renewals fail
 * for a moment and get through after the reconnect, so it keeps leading,
 * with the same term; the standby is not elected meanwhile, and readers
 * see the same leader throughout. Then a resignation elects the standby. */
static void the_leaders_connections_cut_twice_keep_one_leader(void **state)
{
    (void)state;
    __atomic_store_n(&leadership_lost_calls, 0, __ATOMIC_SEQ_CST);
    dlock_client *a = open_at(proxy_port, 1500), *b = open_at(server.port, 1500);
    dlock_election *ea = NULL, *eb = NULL;
    assert_int_equal(dlock_election_new(a, "reconnects", 10, "a", 1, &ea), DLOCK_OK);
    assert_int_equal(dlock_election_new(b, "reconnects", 10, "b", 1, &eb), DLOCK_OK);
    assert_int_equal(dlock_election_on_lost(ea, note_leadership_lost, NULL), DLOCK_OK);
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    uint64_t ta = 0, now_term = 0;
    assert_int_equal(dlock_election_term(ea, &ta), DLOCK_OK);
    struct campaigner cb = { eb, 10000, -99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, campaigner_run, &cb);
    for (int i = 0; i < 2; i++) {
        fault_proxy_set(proxy, FAULT_RESET, 0);
        sleep_ms(100);
        fault_proxy_set(proxy, FAULT_PASS, 0);
        sleep_ms(200);
    }
    sleep_ms(1500); /* a lease past the cuts: renewals went on */
    int standby = __atomic_load_n(&cb.rc, __ATOMIC_ACQUIRE);
    int lost = __atomic_load_n(&leadership_lost_calls, __ATOMIC_SEQ_CST);
    int term_rc = dlock_election_term(ea, &now_term);
    char value[8];
    size_t len = 0;
    uint64_t read_term = 0;
    int read_rc = dlock_leader(b, "reconnects", 10, value, sizeof value, &len, &read_term);
    int resigned = dlock_resign(ea);
    pthread_join(t, NULL);
    assert_int_equal(standby, -99);
    assert_int_equal(lost, 0);
    assert_int_equal(term_rc, DLOCK_OK);
    assert_true(now_term == ta);
    assert_int_equal(read_rc, DLOCK_OK);
    assert_true(read_term == ta && len == 1 && value[0] == 'a');
    assert_int_equal(resigned, DLOCK_OK);
    assert_int_equal(cb.rc, DLOCK_OK);
    uint64_t tb = 0;
    assert_int_equal(dlock_election_term(eb, &tb), DLOCK_OK);
    assert_true(tb > ta);
    dlock_election_free(ea);
    dlock_election_free(eb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void cut_connections_give_clear_errors_then_recovery(void **state)
{
    (void)state;
    dlock_client *a = open_at(proxy_port, 5000);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(a, "cut", 3, NULL, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_RESET, 0);
    sleep_ms(150);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EUNAVAILABLE);
    assert_true(now_ms() - t0 < 500);
    assert_non_null(strstr(dlock_errmsg(), "redis 127.0.0.1:"));
    fault_proxy_set(proxy, FAULT_PASS, 0);
    t0 = now_ms();
    int rc;
    while ((rc = dlock_acquire(l, 0)) != DLOCK_OK && now_ms() - t0 < 3000)
        sleep_ms(50);
    assert_int_equal(rc, DLOCK_OK); /* within the reconnect backoff (at most 2 s) */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* The acquire script runs, its answer is lost with the connection, and the
 * client sends it again on a new one: one hold, count 1, so one release
 * frees the name for everyone at once. */
static void acquire_resent_after_a_lost_answer_holds_once(void **state)
{
    (void)state;
    dlock_client *a = open_at(proxy_port, 30000);
    dlock_client *b = open_at(server.port, 30000);
    dlock_lock *la = NULL, *lb = NULL;
    assert_int_equal(dlock_lock_new(a, "resend-acq", 10, NULL, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(b, "resend-acq", 10, NULL, &lb), DLOCK_OK);
    /* Once through, so the scripts are loaded: the answer dropped is the
     * script's, not SCRIPT LOAD's. */
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK); /* not held for a lease by a count of 2 */
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* The release runs, its answer is lost, and the resent release finds the
 * hold gone: that is the first one's doing, not a loss. */
static void release_resent_after_a_lost_answer_is_ok(void **state)
{
    (void)state;
    dlock_client *a = open_at(proxy_port, 30000);
    dlock_lock *la = NULL;
    assert_int_equal(dlock_lock_new(a, "resend-rel", 10, NULL, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* loads the scripts */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* Renewals time out until the client declares the hold lost, while the
 * server still has the key. Acquiring again must be a new hold with a new,
 * higher fence, and releasing it must free the name on the server. */
static void reacquire_after_a_declared_loss_is_a_new_hold(void **state)
{
    (void)state;
    __atomic_store_n(&lost_at, 0, __ATOMIC_SEQ_CST);
    dlock_client *a = open_at(proxy_port, 900);
    dlock_client *b = open_at(server.port, 900);
    dlock_lock *la = watched(a, "revive");
    dlock_lock *lb = NULL;
    assert_int_equal(dlock_lock_new(b, "revive", 6, NULL, &lb), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t f1 = 0, f2 = 0;
    assert_int_equal(dlock_fence(la, &f1), DLOCK_OK);
    /* Answers come 250 ms late (command timeout 200): renewals time out, but
     * they reach the server and keep the key alive. */
    fault_proxy_set(proxy, FAULT_DELAY, 250);
    int64_t t0 = now_ms();
    while (__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 5000)
        sleep_ms(10);
    assert_true(__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) != 0);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    sleep_ms(300);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    assert_int_equal(dlock_acquire(la, 2000), DLOCK_OK);
    assert_int_equal(dlock_fence(la, &f2), DLOCK_OK);
    assert_true(f2 > f1);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK); /* freed on the server */
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* ---- the non-blocking API's attempts, sent without a thread --------------------- */

/* dlock_acquire_start, then the caller's loop until its callback. */
static int acquire_async(dlock_client *c, dlock_lock *l, int64_t wait_ms)
{
    struct async_result r = { 0 };
    int rc = async_acquire_looping(c, l, wait_ms, slack_ms(10000), &r);
    assert_int_equal(r.calls, 1);
    return rc;
}

/* The attempt sent without a thread runs on the server, and its answer is
 * lost with the connection: it is sent again on a new one, as a blocking
 * attempt is, and holds once. */
static void native_attempt_whose_answer_is_lost_holds_once(void **state)
{
    (void)state;
    dlock_client *a = open_at(proxy_port, 30000);
    dlock_client *b = open_at(server.port, 30000);
    dlock_lock *la = NULL, *lb = NULL;
    assert_int_equal(dlock_lock_new(a, "native-resend", 13, NULL, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(b, "native-resend", 13, NULL, &lb), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* loads the scripts */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    long long parked = test_client_metric(a, "dlock_acquire_attempts_parked_total");
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    assert_int_equal(acquire_async(a, la, 0), DLOCK_OK);
    assert_int_equal(test_client_metric(a, "dlock_acquire_attempts_parked_total"), parked + 1);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK); /* not held on by a count of 2 */
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* Requests lost on the way (the answer never comes): the attempt ends at
 * the command timeout with DLOCK_EUNAVAILABLE, its connection closed, and
 * the next one goes through once the way is open again. */
static void native_attempt_without_an_answer_ends_at_the_command_timeout(void **state)
{
    (void)state;
    dlock_client *a = open_at(proxy_port, 30000);
    dlock_lock *la = NULL;
    assert_int_equal(dlock_lock_new(a, "native-silent", 13, NULL, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_DROP, 0);
    int64_t t0 = now_ms();
    assert_int_equal(acquire_async(a, la, 0), DLOCK_EUNAVAILABLE);
    int64_t took = now_ms() - t0;
    assert_true(took >= 200);            /* command_timeout_ms */
    assert_true(took < slack_ms(1500));
    fault_proxy_set(proxy, FAULT_PASS, 0);
    int64_t end = now_ms() + 3000;
    int rc;
    while ((rc = acquire_async(a, la, 0)) != DLOCK_OK && now_ms() < end)
        sleep_ms(50);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* Idle connections cut (a server restart, as TCP sees it): the attempt
 * written on one finds it dead and is sent again on a fresh one. */
static void native_attempt_on_a_dead_idle_connection_is_sent_again(void **state)
{
    (void)state;
    dlock_client *a = open_at(proxy_port, 30000);
    dlock_lock *la = NULL;
    assert_int_equal(dlock_lock_new(a, "native-dead", 11, NULL, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_RESET, 0);
    sleep_ms(100);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    assert_int_equal(acquire_async(a, la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* The release cases of every native backend (tests/support/native_cases.c),
 * each through a proxy of its own. */
static dlock_client *open_native_at(int port)
{
    return open_at(port, 30000);
}

static dlock_client *open_native_direct(void)
{
    return open_at(server.port, 30000);
}

NATIVE_RELEASE_CASES(open_native_at, open_native_direct, server.port, 200)

/* Every case starts with the proxy passing: one that failed half-way must
 * not leave the next one behind a black hole. */
static int proxy_passes(void **state)
{
    (void)state;
    fault_proxy_set(proxy, FAULT_PASS, 0);
    return 0;
}

int main(void)
{
    if (test_redis_start(&server) != 0 || !(proxy = fault_proxy_start(server.port, &proxy_port))) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] redis or the fault proxy did not start\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(latency_below_the_renewal_interval_loses_nothing, proxy_passes),
        cmocka_unit_test_setup(partition_longer_than_the_lease, proxy_passes),
        cmocka_unit_test_setup(cut_connections_give_clear_errors_then_recovery, proxy_passes),
        cmocka_unit_test_setup(the_leaders_connections_cut_twice_keep_one_leader, proxy_passes),
        cmocka_unit_test_setup(acquire_resent_after_a_lost_answer_holds_once, proxy_passes),
        cmocka_unit_test_setup(release_resent_after_a_lost_answer_is_ok, proxy_passes),
        cmocka_unit_test_setup(reacquire_after_a_declared_loss_is_a_new_hold, proxy_passes),
        cmocka_unit_test_setup(native_attempt_whose_answer_is_lost_holds_once, proxy_passes),
        cmocka_unit_test_setup(native_attempt_without_an_answer_ends_at_the_command_timeout, proxy_passes),
        cmocka_unit_test_setup(native_attempt_on_a_dead_idle_connection_is_sent_again, proxy_passes),
        cmocka_unit_test_setup(native_release_whose_answer_is_lost_is_ok, proxy_passes),
        cmocka_unit_test_setup(native_release_without_an_answer_ends_at_its_deadline, proxy_passes),
        cmocka_unit_test_setup(native_release_on_a_dead_idle_connection_is_sent_again, proxy_passes),
    };
    int failed = cmocka_run_group_tests_name("faults through the proxy (redis)", tests, NULL, NULL);
    fault_proxy_stop(proxy);
    test_redis_stop(&server);
    return failed ? 1 : 0;
}
