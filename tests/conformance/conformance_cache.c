/* tests/conformance/conformance_cache.c - lock caching as every backend
 * that claims DLOCK_CAP_CACHE must keep it, through the public API only: a
 * kept hold is taken again with no round trip and the same fencing token,
 * its lease goes on being renewed, another owner's request has it given
 * back (a try or a wait gets it within a hand-off), and a
 * kept hold the server no longer has, whose keeper died, went idle or was
 * closed, comes free within the bound any hold has. A backend without the
 * capability must refuse the `cache` group and DLOCK_LOCK_CACHE with
 * DLOCK_ENOTSUP. Part of the conformance suite (conformance.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "conformance.h"
#include "../support/test_client.h"
#include "../support/test_time.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const struct conformance_target *target;

/* Leases long enough that no case waits on one, except where it says. */
enum { LEASE_MS = 30000, RETRY_CAP_MS = 100, IDLE_MS = 60000 };

/* A configuration whose released holds are kept for idle_ms unused. The
 * adaptive switch is off (cooldown_ms = 0): the cases ask for their names
 * in turns on purpose. */
static void caching_config(char *text, size_t size, int lease_ms, int idle_ms)
{
    target->config(text, size - 96, lease_ms, RETRY_CAP_MS);
    size_t used = strlen(text);
    snprintf(text + used, size - used, "\ncache = { idle_ms = %d; cooldown_ms = 0; };\n", idle_ms);
}

static dlock_client *open_caching(int lease_ms, int idle_ms)
{
    char text[2400];
    caching_config(text, sizeof text, lease_ms, idle_ms);
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("%s: open with a cache group: %s: %s", target->name, dlock_strerror(rc), dlock_errmsg());
    return c;
}

/* Takes l's name and releases it with nobody asking, so that the hold is
 * kept; returns its fencing token. */
static uint64_t keep(dlock_lock *l)
{
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t f = test_fence(l);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    return f;
}

static long long metric(dlock_client *c, const char *name)
{
    long long v = test_client_metric(c, name);
    if (v < 0)
        fail_msg("the client reports no %s", name);
    return v;
}

/* Until c has given a kept hold back (at most a few seconds). */
static void await_give_back(dlock_client *c)
{
    test_await_give_back(c, 3000);
}

/* ---- where the backend keeps holds ---------------------------------------------------- */

static void a_kept_hold_is_taken_again_with_no_round_trip(void **state)
{
    (void)state;
    dlock_client *c = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock *l = test_lock_with_flags(c, "conf-cache-again", 0);
    uint64_t first = keep(l);
    long long attempts = metric(c, "dlock_acquire_attempts_total");
    for (int i = 0; i < 100; i++) {
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(test_fence(l), first); /* the server's hold never ended */
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    assert_int_equal(metric(c, "dlock_acquire_attempts_total"), attempts);
    assert_true(metric(c, "dlock_cache_hits_total") >= 100);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void a_kept_hold_goes_on_being_renewed(void **state)
{
    (void)state;
    /* A short lease, widened with the build's slack: a timer thread kept
     * off a core for two thirds of a lease would lose the hold. */
    int lease_ms = (int)slack_ms(900);
    dlock_client *c = open_caching(lease_ms, IDLE_MS);
    dlock_lock *l = test_lock_with_flags(c, "conf-cache-renewed", 0);
    uint64_t first = keep(l);
    long long attempts = metric(c, "dlock_acquire_attempts_total");
    sleep_ms(3 * lease_ms);
    /* About nine renewals (a third of the lease each) kept it... */
    assert_true(metric(c, "dlock_renewals_total") >= 6);
    dlock_client *other = conformance_open_client(LEASE_MS, RETRY_CAP_MS);
    dlock_status_info info = DLOCK_STATUS_INFO_INIT;
    int rc = dlock_status(other, "conf-cache-renewed", 18, &info);
    if (rc != DLOCK_ENOTSUP) { /* ...on the server, where the backend can tell */
        assert_int_equal(rc, DLOCK_OK);
        assert_int_equal(info.held, 1);
        if (info.fence)
            assert_int_equal(info.fence, first);
    }
    dlock_client_close(other);
    /* ...so that it is taken again with no round trip and its token. */
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(test_fence(l), first);
    assert_int_equal(metric(c, "dlock_acquire_attempts_total"), attempts);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void a_try_while_kept_is_busy_and_has_it_given_back(void **state)
{
    (void)state;
    dlock_client *a = open_caching(LEASE_MS, IDLE_MS), *b = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock *la = test_lock_with_flags(a, "conf-cache-try", 0), *lb = test_lock_with_flags(b, "conf-cache-try", 0);
    uint64_t kept = keep(la);
    /* The try is answered busy, and tells the keeper, whose give-back is
     * a hand-off away: a later try gets the name. (Where a backend's try
     * looks twice, the second look may already find it given back.) */
    int64_t t0 = now_ms();
    int rc;
    while ((rc = dlock_acquire(lb, 0)) == DLOCK_EBUSY && now_ms() - t0 < slack_ms(1000))
        sleep_ms(5);
    assert_int_equal(rc, DLOCK_OK);
    assert_true(test_fence(lb) > kept);
    /* The keeper's next acquire goes to the server, where b holds. */
    assert_int_equal(dlock_acquire(la, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void a_waiter_gets_a_kept_hold_within_a_hand_off(void **state)
{
    (void)state;
    dlock_client *a = open_caching(LEASE_MS, IDLE_MS), *b = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock *la = test_lock_with_flags(a, "conf-cache-wait", 0), *lb = test_lock_with_flags(b, "conf-cache-wait", 0);
    uint64_t kept = keep(la);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(lb, 10000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    if (took > slack_ms(500))
        fail_msg("the waiter got the kept hold after %lld ms", (long long)took);
    uint64_t taken = test_fence(lb);
    assert_true(taken > kept);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    /* b keeps it now; a's acquire has it given back in turn. */
    assert_int_equal(dlock_acquire(la, 10000), DLOCK_OK);
    assert_true(test_fence(la) > taken);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    /* A give-back is counted when the server's answer to it is read, which
     * may come after the other client was granted: wait for the count. */
    await_give_back(a);
    await_give_back(b);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void a_kept_hold_broken_on_the_server_is_not_served(void **state)
{
    (void)state;
    if (!target->break_hold)
        return; /* nothing outside the client can take its hold (local) */
    dlock_client *c = open_caching(900, IDLE_MS);
    dlock_lock *l = test_lock_with_flags(c, "conf-cache-broken", 0);
    uint64_t kept = keep(l);
    target->break_hold("conf-cache-broken");
    /* The next renewal round (a third of the lease) finds it gone, and
     * it is given back. */
    await_give_back(c);
    assert_int_equal(dlock_acquire(l, 5000), DLOCK_OK);
    assert_true(test_fence(l) > kept);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* In a child: its own client (lease 1 s, cache on) takes the name and
 * releases it, so that the hold is kept. */
static int keep_in_child(const void *arg)
{
    const char *name = arg;
    char text[2400];
    caching_config(text, sizeof text, 1000, IDLE_MS);
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    if (dlock_client_open_string(&c, text) != DLOCK_OK || dlock_lock_new(c, name, strlen(name), &o, &l) != DLOCK_OK ||
        dlock_acquire(l, 2000) != DLOCK_OK || dlock_release(l) != DLOCK_OK)
        return 3;
    return 0;
}

static void a_killed_keepers_hold_comes_free_within_its_lease(void **state)
{
    (void)state;
    pid_t pid = conformance_child_ready(keep_in_child, "conf-cache-killed");
    dlock_client *b = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock *l = test_lock_with_flags(b, "conf-cache-killed", 0);
    conformance_child_kill(pid);
    conformance_acquire_within_a_dead_lease(l, "the killed keeper's"); /* as any holder's */
    dlock_lock_free(l);
    dlock_client_close(b);
}

static void an_idle_kept_hold_is_given_back(void **state)
{
    (void)state;
    dlock_client *a = open_caching(900, 200);
    dlock_lock *la = test_lock_with_flags(a, "conf-cache-idle", 0);
    keep(la);
    /* Asked for by nobody: the watchdog gives it back at the idle limit. */
    int64_t t0 = now_ms();
    await_give_back(a);
    assert_true(now_ms() - t0 >= 150);
    dlock_client *b = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock *lb = test_lock_with_flags(b, "conf-cache-idle", DLOCK_LOCK_NOCACHE);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    assert_int_equal(metric(a, "dlock_cache_givebacks_total"), 1);
    assert_int_equal(metric(a, "dlock_cache_hits_total"), 0);
    dlock_lock_free(lb);
    dlock_client_close(b);
    dlock_lock_free(la);
    dlock_client_close(a);
}

static void closing_the_client_gives_kept_holds_back(void **state)
{
    (void)state;
    dlock_client *a = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock *la = test_lock_with_flags(a, "conf-cache-closed", 0);
    keep(la);
    dlock_lock_free(la);
    dlock_client_close(a);
    dlock_client *b = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock *lb = test_lock_with_flags(b, "conf-cache-closed", DLOCK_LOCK_NOCACHE);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_client_close(b);
}

static void what_is_never_kept_is_refused(void **state)
{
    (void)state;
    dlock_client *c = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    dlock_lock *l = NULL;
    if (dlock_client_capabilities(c) & DLOCK_CAP_FAIR) { /* else fair mode itself is refused */
        o.flags = DLOCK_LOCK_CACHE | DLOCK_LOCK_FAIR;
        assert_int_equal(dlock_lock_new(c, "conf-cache-refused", 18, &o, &l), DLOCK_EINVAL);
    }
    o.flags = DLOCK_LOCK_CACHE;
    o.lease_ms = 5000;
    assert_int_equal(dlock_lock_new(c, "conf-cache-refused", 18, &o, &l), DLOCK_EINVAL);
    o.lease_ms = 0;
    o.flags = DLOCK_LOCK_CACHE | DLOCK_LOCK_NOCACHE;
    assert_int_equal(dlock_lock_new(c, "conf-cache-refused", 18, &o, &l), DLOCK_EINVAL);
    assert_null(l);
    /* A fixed lease is never kept, even with the group on: its release
     * frees the name. */
    o.flags = 0;
    o.lease_ms = 5000;
    assert_int_equal(dlock_lock_new(c, "conf-cache-refused", 18, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client *b = open_caching(LEASE_MS, IDLE_MS);
    dlock_lock *lb = test_lock_with_flags(b, "conf-cache-refused", DLOCK_LOCK_NOCACHE);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    assert_int_equal(metric(c, "dlock_cache_keeps_total"), 0);
    dlock_lock_free(lb);
    dlock_client_close(b);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- where it does not ------------------------------------------------------------------ */

static void caching_is_refused_with_enotsup(void **state)
{
    (void)state;
    char text[2400];
    caching_config(text, sizeof text, LEASE_MS, 1000);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ENOTSUP);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), "cache"));
    c = conformance_open_client(LEASE_MS, RETRY_CAP_MS);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_CACHE;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, "conf-cache-refused", 18, &o, &l), DLOCK_ENOTSUP);
    assert_null(l);
    dlock_client_close(c);
}

int conformance_run_cache(const struct conformance_target *t)
{
    target = t;
    dlock_client *c = conformance_open_client(LEASE_MS, RETRY_CAP_MS);
    bool keeps = (dlock_client_capabilities(c) & DLOCK_CAP_CACHE) != 0;
    dlock_client_close(c);
    char group[128];
    snprintf(group, sizeof group, "%s: lock caching", t->name);
    if (!keeps) {
        const struct CMUnitTest refused[] = {
            cmocka_unit_test_setup(caching_is_refused_with_enotsup, conformance_before_each),
        };
        return _cmocka_run_group_tests(group, refused, 1, NULL, conformance_group_teardown);
    }
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup(a_kept_hold_is_taken_again_with_no_round_trip, conformance_before_each),
        cmocka_unit_test_setup(a_kept_hold_goes_on_being_renewed, conformance_before_each),
        cmocka_unit_test_setup(a_try_while_kept_is_busy_and_has_it_given_back, conformance_before_each),
        cmocka_unit_test_setup(a_waiter_gets_a_kept_hold_within_a_hand_off, conformance_before_each),
        cmocka_unit_test_setup(a_kept_hold_broken_on_the_server_is_not_served, conformance_before_each),
        cmocka_unit_test_setup(a_killed_keepers_hold_comes_free_within_its_lease, conformance_before_each),
        cmocka_unit_test_setup(an_idle_kept_hold_is_given_back, conformance_before_each),
        cmocka_unit_test_setup(closing_the_client_gives_kept_holds_back, conformance_before_each),
        cmocka_unit_test_setup(what_is_never_kept_is_refused, conformance_before_each),
    };
    return _cmocka_run_group_tests(group, cases, sizeof cases / sizeof cases[0], NULL, conformance_group_teardown);
}
