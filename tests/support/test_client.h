/* tests/support/test_client.h - opening clients and lock handles in cmocka
 * cases: a failure fails the case with the library's own message. Include
 * after <cmocka.h>. */
#ifndef TEST_CLIENT_H
#define TEST_CLIENT_H

#include "test_time.h"

#include <dlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A client for config_text; fails the case if it cannot be opened. */
static inline dlock_client *test_client_open(const char *config_text)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, config_text);
    if (rc != DLOCK_OK)
        fail_msg("open: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return c;
}

/* A handle for the lock NAME (a C string) with default options. */
static inline dlock_lock *test_lock_named(dlock_client *c, const char *name)
{
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), NULL, &l), DLOCK_OK);
    return l;
}

/* A handle for NAME in mode (DLOCK_MODE_*; permits for a semaphore). */
static inline dlock_lock *test_lock_of_kind(dlock_client *c, const char *name, unsigned mode, unsigned permits)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = mode;
    o.permits = permits;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("lock_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return l;
}

/* A handle for NAME with options.flags = flags (DLOCK_LOCK_*). */
static inline dlock_lock *test_lock_with_flags(dlock_client *c, const char *name, unsigned flags)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = flags;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("lock_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return l;
}

/* The fencing token of l's hold (the case fails if it has none). */
static inline uint64_t test_fence(dlock_lock *l)
{
    uint64_t f = 0;
    assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
    return f;
}

/* on_lost that counts its calls in the int at arg (atomically). */
static inline void test_count_loss(dlock_lock *l, void *arg)
{
    (void)l;
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

/* Takes n locks "<stem>-<i>" on c (one try each; a refusal fails the case),
 * each with an on_lost that counts into lost[i]. */
static inline void test_hold_many(dlock_client *c, const char *stem, int n, dlock_lock **locks, int *lost)
{
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s-%d", stem, i);
        dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
        o.on_lost = test_count_loss;
        o.on_lost_arg = &lost[i];
        assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &locks[i]), DLOCK_OK);
        assert_int_equal(dlock_acquire(locks[i], 0), DLOCK_OK);
    }
}

/* Checks that of the n holds only hold `gone` (-1: none) is lost, reported
 * once, and every other one is still valid and never reported lost. */
static inline void test_only_this_hold_lost(dlock_lock **locks, const int *lost, int n, int gone)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(__atomic_load_n(&lost[i], __ATOMIC_SEQ_CST), i == gone);
        if (i == gone)
            assert_int_equal(dlock_validity_ms(locks[i]), DLOCK_ELOST);
        else
            assert_true(dlock_validity_ms(locks[i]) > 0);
    }
}

/* Releases and frees the n holds: DLOCK_ELOST expected for hold `gone`
 * (-1: none), DLOCK_OK for the others. */
static inline void test_release_many(dlock_lock **locks, int n, int gone)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(dlock_release(locks[i]), i == gone ? DLOCK_ELOST : DLOCK_OK);
        dlock_lock_free(locks[i]);
    }
}

/* Checks that each of the n holds was reported lost exactly once, then
 * releases (DLOCK_ELOST each) and frees them. */
static inline void test_every_hold_lost(dlock_lock **locks, const int *lost, int n)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(__atomic_load_n(&lost[i], __ATOMIC_SEQ_CST), 1);
        assert_int_equal(dlock_release(locks[i]), DLOCK_ELOST);
        dlock_lock_free(locks[i]);
    }
}

/* The value of the client's metric NAME (e.g. "dlock_renewals_total") from
 * dlock_client_metrics(), -1 if it is not there. */
static inline long long test_client_metric(dlock_client *c, const char *name)
{
    char *text = NULL;
    assert_int_equal(dlock_client_metrics(c, &text), DLOCK_OK);
    char needle[128];
    snprintf(needle, sizeof needle, "\n%s{", name);
    const char *at = strstr(text, needle);
    const char *value = at ? strstr(at, "} ") : NULL;
    long long v = value ? atoll(value + 2) : -1;
    free(text);
    return v;
}

/* One acquire (try once) and release of l by caching client c, after
 * which c has kept keeps holds in all (dlock_cache_keeps_total). */
static inline void test_cycle_keeps(dlock_client *c, dlock_lock *l, long long keeps)
{
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(test_client_metric(c, "dlock_cache_keeps_total"), keeps);
}

/* Until caching client c has given one kept hold back, at most wait_ms
 * times the build's slack; fails the case when it has not. */
static inline void test_await_give_back(dlock_client *c, int64_t wait_ms)
{
    int64_t t0 = now_ms();
    while (test_client_metric(c, "dlock_cache_givebacks_total") < 1 && now_ms() - t0 < slack_ms(wait_ms))
        sleep_ms(10);
    assert_int_equal(test_client_metric(c, "dlock_cache_givebacks_total"), 1);
}

/* Until caching client c has given its one kept hold back, far sooner
 * than any idle limit (a few seconds at most, times the build's slack),
 * with no hit of it. */
static inline void test_gives_back_soon(dlock_client *c)
{
    test_await_give_back(c, 5000);
    assert_int_equal(test_client_metric(c, "dlock_cache_hits_total"), 0);
}

/* The end of a case where a caching client a was granted its name (la)
 * while a request of client c (lc) waited behind it, after a holder h
 * (lh) let go: both waiters were granted (rc_a, rc_c), a's hold was not
 * kept, and a's next one, with nobody else asking, is. Frees and closes
 * them all. */
static inline void test_queued_grant_case_end(dlock_client *h, dlock_lock *lh, dlock_client *a, dlock_lock *la,
                                              int rc_a, dlock_client *c, dlock_lock *lc, int rc_c)
{
    assert_int_equal(rc_a, DLOCK_OK);
    assert_int_equal(rc_c, DLOCK_OK);
    assert_int_equal(test_client_metric(a, "dlock_cache_keeps_total"), 0);
    test_cycle_keeps(a, la, 1);
    dlock_lock_free(la);
    dlock_lock_free(lc);
    dlock_lock_free(lh);
    dlock_client_close(a);
    dlock_client_close(c);
    dlock_client_close(h);
}

/* Lists every page of the names starting with prefix (a C string), limit
 * entries a page, through fn; fails the case on an error or a cursor that
 * does not end within 100 pages. Returns the number of pages. */
static inline int test_list_pages(dlock_client *c, const char *prefix, size_t limit, dlock_list_fn fn, void *arg)
{
    char *cursor = NULL;
    int pages = 0;
    do {
        char *next = NULL;
        int rc = dlock_list(c, prefix, strlen(prefix), cursor, limit, fn, arg, &next);
        if (rc != DLOCK_OK)
            fail_msg("dlock_list: %s: %s", dlock_strerror(rc), dlock_errmsg());
        free(cursor);
        cursor = next;
        assert_true(++pages < 100);
    } while (cursor);
    return pages;
}

#endif
