/* tests/support/native_cases.c - see native_cases.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "native_cases.h"

#include <stdio.h>
#include <string.h>

#include "async_result.h"
#include "fault_proxy.h"
#include "test_client.h"
#include "test_time.h"

static int acquire_on_loop(dlock_client *c, dlock_lock *l)
{
    struct async_result r = { 0 };
    int rc = async_acquire_looping(c, l, 0, slack_ms(10000), &r);
    assert_int_equal(r.calls, 1);
    return rc;
}

static long long parked(dlock_client *c)
{
    return test_client_metric(c, "dlock_acquire_attempts_parked_total");
}

void native_case_answer_lost_holds_once(const struct native_target *t)
{
    int proxy_port;
    struct fault_proxy *proxy = fault_proxy_start(t->server_port, &proxy_port);
    assert_non_null(proxy);
    dlock_client *a = t->open_at(proxy_port), *b = t->open_direct();
    dlock_lock *la = test_lock_named(a, "native-resend"), *lb = test_lock_named(b, "native-resend");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* the statements prepared on a connection */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    long long before = parked(a);
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    assert_int_equal(acquire_on_loop(a, la), DLOCK_OK);
    assert_int_equal(parked(a), before + 1);
    uint64_t fence = 0, after = 0;
    assert_int_equal(dlock_fence(la, &fence), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK); /* freed by the one release */
    assert_int_equal(dlock_fence(lb, &after), DLOCK_OK);
    assert_true(after > fence);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
    fault_proxy_stop(proxy);
}

void native_case_no_answer_ends_at_its_deadline(const struct native_target *t)
{
    int proxy_port;
    struct fault_proxy *proxy = fault_proxy_start(t->server_port, &proxy_port);
    assert_non_null(proxy);
    dlock_client *a = t->open_at(proxy_port);
    dlock_lock *la = test_lock_named(a, "native-silent");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    long long before = parked(a);
    fault_proxy_set(proxy, FAULT_DROP, 0);
    int64_t t0 = now_ms();
    assert_int_equal(acquire_on_loop(a, la), DLOCK_EUNAVAILABLE);
    int64_t took = now_ms() - t0;
    assert_int_equal(parked(a), before + 1);
    assert_true(took >= t->deadline_ms - 100);
    assert_true(took < slack_ms(t->deadline_ms + 3000));
    fault_proxy_set(proxy, FAULT_PASS, 0);
    int rc = DLOCK_EUNAVAILABLE; /* the pool's backoff after the closed connection may refuse a few */
    for (int64_t end = now_ms() + slack_ms(5000); rc != DLOCK_OK && now_ms() < end; sleep_ms(50))
        rc = acquire_on_loop(a, la);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

void native_case_dead_idle_connection_is_sent_again(const struct native_target *t)
{
    int proxy_port;
    struct fault_proxy *proxy = fault_proxy_start(t->server_port, &proxy_port);
    assert_non_null(proxy);
    dlock_client *a = t->open_at(proxy_port);
    dlock_lock *la = test_lock_named(a, "native-dead");
    for (int round = 0; round < 5; round++) {
        assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* a connection made, and idle again */
        assert_int_equal(dlock_release(la), DLOCK_OK);
        fault_proxy_set(proxy, FAULT_RESET, 0);
        sleep_ms(100);
        fault_proxy_set(proxy, FAULT_PASS, 0);
        long long before = parked(a);
        int rc = acquire_on_loop(a, la);
        if (rc != DLOCK_OK)
            fail_msg("round %d: %s: %s", round, dlock_strerror(rc), dlock_errmsg());
        assert_true(parked(a) <= before + 1);
        assert_int_equal(dlock_release(la), DLOCK_OK);
    }
    dlock_lock_free(la);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

static long long releases_parked(dlock_client *c)
{
    return test_client_metric(c, "dlock_releases_parked_total");
}

/* The detail of the last release_on_loop's result. */
static char release_detail[256];

/* dlock_release_start, then the caller's loop until its callback. */
static int release_on_loop(dlock_client *c, dlock_lock *l)
{
    struct async_result r = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_OK);
    for (int64_t end = now_ms() + slack_ms(10000); r.calls == 0 && now_ms() < end;)
        async_loop_turn(c, 20);
    assert_int_equal(r.calls, 1);
    snprintf(release_detail, sizeof release_detail, "%s", r.detail);
    return r.rc;
}

/* Through a fresh proxy: client a holding `name`, after a first cycle
 * that loaded or prepared what the release needs on its connections. */
static dlock_client *holding_through_proxy(const struct native_target *t, const char *name,
                                           struct fault_proxy **proxy, dlock_lock **l)
{
    int proxy_port;
    *proxy = fault_proxy_start(t->server_port, &proxy_port);
    assert_non_null(*proxy);
    dlock_client *a = t->open_at(proxy_port);
    *l = test_lock_named(a, name);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(dlock_acquire(*l, 0), DLOCK_OK);
        assert_int_equal(release_on_loop(a, *l), DLOCK_OK);
    }
    assert_int_equal(dlock_acquire(*l, 0), DLOCK_OK);
    return a;
}

/* The name is free: another client takes it at once. */
static void free_for_another(const struct native_target *t, const char *name)
{
    dlock_client *b = t->open_direct();
    dlock_lock *lb = test_lock_named(b, name);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_client_close(b);
}

void native_case_release_answer_lost_is_ok(const struct native_target *t)
{
    struct fault_proxy *proxy;
    dlock_lock *la;
    dlock_client *a = holding_through_proxy(t, "native-rel-lost", &proxy, &la);
    long long before = releases_parked(a);
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    int rc = release_on_loop(a, la);
    if (rc != DLOCK_OK)
        fail_msg("release: %s: %s", dlock_strerror(rc), release_detail);
    assert_int_equal(releases_parked(a), before + 1);
    assert_int_equal(test_client_metric(a, "dlock_release_failures_total"), 0);
    free_for_another(t, "native-rel-lost");
    dlock_lock_free(la);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

void native_case_release_without_an_answer_ends_at_its_deadline(const struct native_target *t)
{
    struct fault_proxy *proxy;
    dlock_lock *la;
    dlock_client *a = holding_through_proxy(t, "native-rel-silent", &proxy, &la);
    long long before = releases_parked(a);
    fault_proxy_set(proxy, FAULT_DROP, 0);
    int64_t t0 = now_ms();
    assert_int_equal(release_on_loop(a, la), DLOCK_EUNAVAILABLE);
    int64_t took = now_ms() - t0;
    assert_int_equal(releases_parked(a), before + 1);
    assert_true(took >= t->deadline_ms - 100);
    assert_true(took < slack_ms(t->deadline_ms + 3000));
    assert_int_equal(dlock_hold_count(la), 0);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    dlock_lock_free(la);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

void native_case_release_on_a_dead_idle_connection_is_sent_again(const struct native_target *t)
{
    struct fault_proxy *proxy;
    dlock_lock *la;
    dlock_client *a = holding_through_proxy(t, "native-rel-dead", &proxy, &la);
    fault_proxy_set(proxy, FAULT_RESET, 0);
    sleep_ms(100);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    int rc = release_on_loop(a, la);
    if (rc != DLOCK_OK)
        fail_msg("release: %s: %s", dlock_strerror(rc), release_detail);
    free_for_another(t, "native-rel-dead");
    dlock_lock_free(la);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

void native_case_busy_registers_the_writer(dlock_client *(*open_client)(void), dlock_client *(*open_direct)(void),
                                           const char *(*admin)(const char *sql), const char *writer_sql)
{
    dlock_client *a = open_client(), *b = open_direct();
    dlock_lock *la = test_lock_named(a, "native-busy"), *lb = test_lock_named(b, "native-busy");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* prepares the acquire on a's connection */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    /* Busy once without waiting: prepares the registration there too (and
     * takes it back as the request gives up). */
    assert_int_equal(dlock_acquire(la, 0), DLOCK_EBUSY);
    assert_string_equal(admin(writer_sql), "");
    long long before = parked(a);
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(la, slack_ms(10000), async_record, &r), DLOCK_OK);
    for (int64_t end = now_ms() + slack_ms(5000); now_ms() < end && strcmp(admin(writer_sql), "") == 0;)
        assert_true(async_loop_turn(a, 20) >= 0);
    assert_int_equal(r.calls, 0);
    assert_true(parked(a) > before);
    assert_string_not_equal(admin(writer_sql), "");
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    for (int64_t end = now_ms() + slack_ms(5000); r.calls == 0 && now_ms() < end;)
        assert_true(async_loop_turn(a, 20) >= 0);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}
