/* tests/unit/test_core.c - the core (acquire loop, backoff, deadlines,
 * cancellation, reentrancy, watchdog cadence and batching, the lost path,
 * error codes) against the counting fake provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fake_provider.h"
#include "../support/test_time.h"

#include <dlock.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static dlock_client *open_fake(const char *backend, int lease_ms)
{
    char text[256];
    snprintf(text, sizeof text,
             "backend = \"%s\"; lease_ms = %d; retry_base_ms = 5; retry_cap_ms = 20;", backend, lease_ms);
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("open: %s (%s)", dlock_strerror(rc), dlock_errmsg());
    return c;
}

static dlock_lock *new_lock(dlock_client *c, const char *name, int64_t lease_ms)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l), DLOCK_OK);
    return l;
}

static int setup(void **state)
{
    (void)state;
    fake_reset();
    return 0;
}

/* ---- the loop ------------------------------------------------------------------- */

static void try_once_busy_makes_one_attempt(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "a", 0);
    fake_hold_externally("a", true);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    assert_int_equal(fake_get(&fake.acquires), 1);
    assert_non_null(strstr(dlock_errmsg(), "held by another owner"));
    assert_int_equal(dlock_hold_count(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void wait_budget_is_honoured_with_backoff(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "a", 0);
    fake_hold_externally("a", true);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 300), DLOCK_ETIMEDOUT);
    int64_t took = now_ms() - t0;
    assert_true(took >= 300);
    assert_true(took < 300 + slack_ms(50));
    /* Backoff between 5 and 20 ms with full jitter: mean pause <= 10 ms once
     * capped, so at least a few retries, and never a busy loop. */
    int attempts = fake_get(&fake.acquires);
    assert_true(attempts >= 10);
    assert_true(attempts <= 300);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void retry_hint_shortens_the_pause(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "a", 0);
    fake_hold_externally("a", true);
    /* The same wait without a hint and with "the holder's lease ends now"
     * (retry at once, +1 ms): against the backoff's pauses of up to 20 ms,
     * at least twice the attempts, however slow each attempt is here. */
    int64_t wait = slack_ms(100);
    assert_int_equal(dlock_acquire(l, wait), DLOCK_ETIMEDOUT);
    int backing_off = fake_get(&fake.acquires);
    FAKE_SET(busy_hint_ms, 0);
    assert_int_equal(dlock_acquire(l, wait), DLOCK_ETIMEDOUT);
    int hinted = fake_get(&fake.acquires) - backing_off;
    if (hinted < 2 * backing_off || hinted < 10)
        fail_msg("%d attempts with the hint against %d without, in %lld ms", hinted, backing_off, (long long)wait);
    dlock_lock_free(l);
    dlock_client_close(c);
}

struct releaser {
    const char *name;
    int64_t after_ms;
    int64_t released_at;   /* set by the releaser: when it let go */
};

static void *release_later(void *arg)
{
    struct releaser *r = arg;
    sleep_ms(r->after_ms);
    r->released_at = now_ms();
    fake_hold_externally(r->name, false);
    return NULL;
}

static void granted_when_released_during_wait(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "a", 0);
    fake_hold_externally("a", true);
    pthread_t t;
    struct releaser r = { "a", 100, 0 };
    /* The clock starts before the releaser does: it may sleep out its
     * delay before this thread runs again. */
    int64_t t0 = now_ms();
    pthread_create(&t, NULL, release_later, &r);
    assert_int_equal(dlock_acquire(l, -1), DLOCK_OK);
    int64_t granted = now_ms(), took = granted - t0;
    pthread_join(t, NULL);
    /* Granted within one capped backoff pause (20 ms) of the release (as
     * late as the releaser woke, which a loaded machine may delay), not
     * at some later timeout: this wait has none. Under a sanitizer, with
     * the three suites side by side, a thread can wait a quarter of a
     * second for a core. */
    assert_true(took >= 100 && granted - r.released_at < 20 + slack_ms(200));
    uint64_t fence;
    assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
    assert_true(fence >= 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void native_wait_is_used_and_woken(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fakewait", 3000);
    dlock_lock *l = new_lock(c, "w", 0);
    fake_hold_externally("w", true);
    pthread_t t;
    struct releaser r = { "w", 150, 0 };
    /* The clock starts before the releaser does: it may sleep out its
     * delay before this thread runs again. */
    int64_t t0 = now_ms();
    pthread_create(&t, NULL, release_later, &r);
    assert_int_equal(dlock_acquire(l, 5000), DLOCK_OK);
    int64_t granted = now_ms(), took = granted - t0;
    pthread_join(t, NULL);
    assert_true(took >= 150 && granted - r.released_at < slack_ms(100));
    /* Woken by the release, not by polling: a handful of attempts only. */
    assert_true(fake_get(&fake.waits) >= 1);
    assert_true(fake_get(&fake.acquires) <= (r.released_at - t0) / 20 + 3); /* one per 20 ms wait at most */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void backend_error_is_returned_at_once(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "a", 0);
    FAKE_SET(acquire_rc, DLOCK_EUNAVAILABLE);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 1000), DLOCK_EUNAVAILABLE);
    assert_true(now_ms() - t0 < slack_ms(50));
    assert_int_equal(fake_get(&fake.acquires), 1);
    assert_non_null(strstr(dlock_errmsg(), "fake: acquire failing"));
    FAKE_SET(acquire_rc, 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* A failure the provider calls passing (a retry hint on DLOCK_EUNAVAILABLE)
 * is retried by the core within the wait budget, never by the provider. */
static void passing_failure_is_retried_within_the_budget(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "passing", 0);
    FAKE_SET(passing_failures, 1);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EUNAVAILABLE); /* one attempt: the failure as is */
    assert_non_null(strstr(dlock_errmsg(), "between two states"));
    FAKE_SET(passing_failures, 3);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 1000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    assert_true(took >= 3 * 20 && took < 3 * 20 + slack_ms(100));
    assert_int_equal(dlock_release(l), DLOCK_OK);
    FAKE_SET(passing_failures, 1000);
    t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 200), DLOCK_EUNAVAILABLE); /* the budget bounds it */
    took = now_ms() - t0;
    assert_true(took >= 150 && took < 200 + slack_ms(50));
    FAKE_SET(passing_failures, 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- cancellation ------------------------------------------------------------------ */

struct acquirer {
    dlock_lock *lock;
    int64_t wait_ms;
    int rc;
    int64_t finished_at;
};

static void *acquire_thread(void *arg)
{
    struct acquirer *a = arg;
    a->rc = dlock_acquire(a->lock, a->wait_ms);
    a->finished_at = now_ms();
    if (a->rc == DLOCK_OK)
        dlock_release(a->lock);
    return NULL;
}

static void cancel_interrupts_backend_wait(void **state)
{
    (void)state;
    const char *backends[] = { "fake", "fakewait" };
    for (int i = 0; i < 2; i++) {
        fake_reset();
        dlock_client *c = open_fake(backends[i], 3000);
        dlock_lock *l = new_lock(c, "a", 0);
        fake_hold_externally("a", true);
        struct acquirer a = { l, -1, 99, 0 };
        pthread_t t;
        pthread_create(&t, NULL, acquire_thread, &a);
        sleep_ms(100);
        int64_t cancelled_at = now_ms();
        assert_int_equal(dlock_cancel(l), DLOCK_OK);
        pthread_join(t, NULL);
        assert_int_equal(a.rc, DLOCK_ECANCELLED);
        assert_true(a.finished_at - cancelled_at < slack_ms(50));
        /* Not sticky: the next acquire is unaffected. */
        fake_hold_externally("a", false);
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        dlock_lock_free(l);
        dlock_client_close(c);
    }
}

static void cancel_interrupts_local_queue(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "q", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* this thread holds it */
    struct acquirer a = { l, -1, 99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, acquire_thread, &a);
    sleep_ms(50);
    int64_t cancelled_at = now_ms();
    dlock_cancel(l);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, DLOCK_ECANCELLED);
    assert_true(a.finished_at - cancelled_at < slack_ms(50));
    assert_int_equal(fake_get(&fake.acquires), 1); /* the queued thread never asked the backend */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- reentrancy and threads ----------------------------------------------------------- */

static void reentry_counts_without_backend_calls(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "r", 0);
    dlock_lock *same = new_lock(c, "r", 0); /* another handle, same name: same hold */
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(same, 0), DLOCK_OK);
    assert_int_equal(dlock_hold_count(l), 3);
    assert_int_equal(dlock_hold_count(same), 3);
    assert_int_equal(fake_get(&fake.acquires), 1);
    assert_int_equal(dlock_release(same), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_int_equal(dlock_release(l), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_hold_count(l), 0);
    dlock_lock_free(same);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void *other_thread_tries(void *arg)
{
    struct acquirer *a = arg;
    a->rc = dlock_acquire(a->lock, a->wait_ms);
    int count = dlock_hold_count(a->lock);
    if (a->rc == DLOCK_OK)
        dlock_release(a->lock);
    else if (count != 0)
        a->rc = -100; /* another thread's hold must not count as ours */
    int rel = dlock_release(a->lock);
    if (a->rc != DLOCK_OK && rel != DLOCK_ENOTOWNER)
        a->rc = -101;
    return NULL;
}

static void other_thread_of_client_is_excluded(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "t", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    struct acquirer a = { l, 0, 99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, other_thread_tries, &a);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, DLOCK_EBUSY);
    a.wait_ms = 100;
    pthread_create(&t, NULL, other_thread_tries, &a);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, DLOCK_ETIMEDOUT);
    assert_int_equal(fake_get(&fake.acquires), 1);
    /* Released here: the other thread gets it. */
    a.wait_ms = 2000;
    pthread_create(&t, NULL, acquire_thread, &a);
    sleep_ms(50);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

struct counter_worker {
    dlock_lock *lock;
    long *counter;
    int rounds;
    int failures;
};

static void *count_under_lock(void *arg)
{
    struct counter_worker *w = arg;
    for (int i = 0; i < w->rounds; i++) {
        if (dlock_acquire(w->lock, -1) != DLOCK_OK) {
            w->failures++;
            continue;
        }
        long v = *w->counter;
        sched_yield();
        *w->counter = v + 1;
        if (dlock_release(w->lock) != DLOCK_OK)
            w->failures++;
    }
    return NULL;
}

static void threads_of_one_client_serialise(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "counter", 0);
    long counter = 0;
    pthread_t t[4];
    struct counter_worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct counter_worker){ l, &counter, 500, 0 };
        pthread_create(&t[i], NULL, count_under_lock, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(counter, 2000);
    assert_int_equal(fake_get(&fake.acquires), 2000);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- watchdog, validity, lost path ------------------------------------------------------ */

static void watchdog_renews_at_a_third_of_the_lease(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 300);
    dlock_lock *l = new_lock(c, "wd", 0);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    int64_t v = dlock_validity_ms(l);
    assert_true(v > 300 - 3 - 2 - slack_ms(15) && v <= 300 - 3 - 2 + 1); /* lease - (lease/100 + 2) */
    sleep_ms(1000);
    int renews = fake_get(&fake.renews);
    /* One every 100 ms: about 10 in a second. */
    assert_true(renews >= 10 - slack_ms(2) && renews <= 11);
    pthread_mutex_lock(&fake.mu);
    int64_t first = fake.renew_at[0] - t0;
    int64_t gap = fake.renew_at[1] - fake.renew_at[0];
    pthread_mutex_unlock(&fake.mu);
    assert_true(first >= 100 - 20 && first <= 100 + slack_ms(20));
    assert_true(gap >= 100 - slack_ms(20) && gap <= 100 + slack_ms(20));
    /* Still held past 3 leases (how much is left depends on when the last
     * renewal ran, which a loaded machine may delay). */
    assert_true(dlock_validity_ms(l) > 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    int after = fake_get(&fake.renews);
    sleep_ms(250);
    assert_int_equal(fake_get(&fake.renews), after); /* no renewals after release */
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void watchdog_batches_due_renewals(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 600);
    dlock_lock *l[5];
    char name[8];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "b%d", i);
        l[i] = new_lock(c, name, 0);
        assert_int_equal(dlock_acquire(l[i], 0), DLOCK_OK);
    }
    /* Two rounds at 200 ms, or later on a loaded machine: until then,
     * one look at all three counters at a time (the watchdog keeps going
     * meanwhile). */
    int64_t t0 = now_ms();
    int batches, items, renews;
    do {
        sleep_ms(20);
        pthread_mutex_lock(&fake.mu);
        batches = fake.batches, items = fake.batch_items, renews = fake.renews;
        pthread_mutex_unlock(&fake.mu);
    } while (batches < 2 && now_ms() - t0 < 450 + slack_ms(2000));
    assert_true(batches >= 2);
    assert_true(items >= 2 * 5 - 1);
    /* The holds due together went in one request: more than one each on
     * average (one request a hold would make batches equal to items). */
    assert_true(items >= 2 * batches);
    assert_int_equal(renews, items); /* every renewal went in a batch */
    for (int i = 0; i < 5; i++) {
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
        dlock_lock_free(l[i]);
    }
    dlock_client_close(c);
}

static int lost_calls;
static dlock_lock *lost_lock_seen;

static void count_lost(dlock_lock *lock, void *arg)
{
    (void)arg;
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&lost_lock_seen, lock, __ATOMIC_SEQ_CST);
}

static void renewal_that_finds_the_hold_gone_marks_it_lost(void **state)
{
    (void)state;
    lost_calls = 0;
    dlock_client *c = open_fake("fake", 300);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = count_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "lost", 4, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    fake_expire("lost");         /* the server forgets it */
    fake_hold_externally("lost", true); /* and someone else takes it */
    sleep_ms(350);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    assert_ptr_equal(__atomic_load_n(&lost_lock_seen, __ATOMIC_SEQ_CST), l);
    sleep_ms(200);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1); /* once */
    uint64_t fence;
    assert_int_equal(dlock_acquire(l, 0), DLOCK_ELOST);
    assert_int_equal(dlock_fence(l, &fence), DLOCK_ELOST);
    assert_int_equal(dlock_validity_ms(l), DLOCK_ELOST);
    assert_int_equal(dlock_hold_count(l), DLOCK_ELOST);
    assert_int_equal(dlock_renew(l), DLOCK_ELOST);
    int releases = fake_get(&fake.releases);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    assert_int_equal(fake_get(&fake.releases), releases); /* nothing deleted */
    assert_int_equal(dlock_hold_count(l), 0);
    /* Cleared: once the other owner lets go, it can be had again. */
    fake_hold_externally("lost", false);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    char *metrics;
    assert_int_equal(dlock_client_metrics(c, &metrics), DLOCK_OK);
    assert_non_null(strstr(metrics, "dlock_losses_total{backend=\"fake\"} 1\n"));
    free(metrics);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void explicit_lease_expires_and_is_given_back(void **state)
{
    (void)state;
    lost_calls = 0;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = 100;
    o.on_lost = count_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "lease", 5, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    int64_t v = dlock_validity_ms(l);
    assert_true(v > 97 - slack_ms(7) && v <= 97);
    sleep_ms(60);
    assert_int_equal(fake_get(&fake.renews), 0); /* a fixed lease is not renewed */
    assert_int_equal(dlock_renew(l), DLOCK_OK);   /* but can be, explicitly */
    int64_t t0 = now_ms();
    assert_true(dlock_validity_ms(l) > 90);
    /* The renewed lease ends about 100 ms from now: on_lost, then the
     * give-back (waited for, not slept out: a loaded machine is late). */
    while ((__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 || fake_get(&fake.releases) == 0) &&
           now_ms() - t0 < slack_ms(2000))
        sleep_ms(5);
    assert_true(now_ms() - t0 >= 80);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    assert_int_equal(fake_get(&fake.releases), 1); /* the expiry gave it back */
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void transient_renewal_failure_is_not_a_loss(void **state)
{
    (void)state;
    lost_calls = 0;
    dlock_client *c = open_fake("fake", 600);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = count_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "flaky", 5, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    FAKE_SET(renew_rc, DLOCK_EUNAVAILABLE);
    sleep_ms(300); /* a failed renewal at 200, retried sooner */
    FAKE_SET(renew_rc, 0);
    sleep_ms(300);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
    assert_true(fake_get(&fake.renews) >= 3);
    assert_true(dlock_validity_ms(l) > 300);
    /* Unreachable until validity runs out: lost. */
    FAKE_SET(renew_rc, DLOCK_EUNAVAILABLE);
    sleep_ms(800);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    assert_int_equal(dlock_validity_ms(l), DLOCK_ELOST);
    FAKE_SET(renew_rc, 0);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void release_finding_hold_gone_reports_lost(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "gone", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    fake_expire("gone");
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    assert_non_null(strstr(dlock_errmsg(), "no longer had this hold"));
    dlock_lock_free(l);
    dlock_client_close(c);
}


/* ---- the lost path under slow I/O, handle lifetime, cancellation of queued threads ---- */

static int freed_flag;          /* set once dlock_lock_free() returned */
static int late_callbacks;      /* on_lost calls that ran on a freed handle */
static int64_t lost_at_ms;

static void slow_lost_reading_the_handle(dlock_lock *lock, void *arg)
{
    (void)arg;
    __atomic_store_n(&lost_at_ms, now_ms(), __ATOMIC_SEQ_CST);
    sleep_ms(200); /* still running when the owner frees the handle */
    size_t len = 0;
    const char *name = dlock_lock_name(lock, &len); /* allowed in on_lost */
    if (__atomic_load_n(&freed_flag, __ATOMIC_SEQ_CST) || !name || len != 4)
        __atomic_add_fetch(&late_callbacks, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

/* dlock_lock_free() while on_lost is in flight must wait for it: the
 * callback may use its handle until it returns. The courtesy release of the
 * expired lease is slow too, as on a server that answers late. */
static void free_waits_for_on_lost_in_flight(void **state)
{
    (void)state;
    lost_calls = late_callbacks = freed_flag = 0;
    dlock_client *c = open_fake("fake", 3000);
    FAKE_SET(release_delay_ms, 300);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = 100;
    o.on_lost = slow_lost_reading_the_handle;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "free", 4, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    sleep_ms(150); /* the lease ran out at ~98 ms: loss handling under way */
    dlock_lock_free(l);
    __atomic_store_n(&freed_flag, 1, __ATOMIC_SEQ_CST);
    sleep_ms(500);
    assert_int_equal(__atomic_load_n(&late_callbacks, __ATOMIC_SEQ_CST), 0);
    assert_true(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) <= 1);
    FAKE_SET(release_delay_ms, 0);
    dlock_client_close(c);
}

/* The loss is signalled at the validity end even while the watchdog's
 * renewal is stuck in a slow server call (here 1.5 s, past the 300 ms lease). */
static void on_lost_fires_at_validity_end_while_renewal_blocks(void **state)
{
    (void)state;
    lost_calls = 0;
    lost_at_ms = 0;
    dlock_client *c = open_fake("fake", 300);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = count_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "slow", 4, &o, &l), DLOCK_OK);
    FAKE_SET(renew_delay_ms, 1500);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 3000)
        sleep_ms(5);
    int64_t took = now_ms() - t0;
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    /* validity = 300 - (300/100 + 2) = 295 ms from before the grant */
    assert_true(took >= 290);
    assert_true(took <= 295 + slack_ms(40));
    assert_int_equal(dlock_validity_ms(l), DLOCK_ELOST);
    FAKE_SET(renew_delay_ms, 0);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static int releases_when_lost;

static void note_releases_when_lost(dlock_lock *lock, void *arg)
{
    __atomic_store_n(&releases_when_lost, fake_get(&fake.releases), __ATOMIC_SEQ_CST);
    count_lost(lock, arg);
}

/* A fixed lease whose courtesy release is slow: on_lost comes first. */
static void fixed_lease_on_lost_before_the_slow_give_back(void **state)
{
    (void)state;
    lost_calls = 0;
    releases_when_lost = -1;
    dlock_client *c = open_fake("fake", 3000);
    FAKE_SET(release_delay_ms, 400);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = 100;
    o.on_lost = note_releases_when_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "give", 4, &o, &l), DLOCK_OK);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 2000)
        sleep_ms(5);
    assert_true(now_ms() - t0 <= 97 + slack_ms(40));
    /* The give-back, 400 ms long, ends after on_lost, which did not wait
     * for it. */
    while (fake_get(&fake.releases) == 0 && now_ms() - t0 < 5000)
        sleep_ms(5);
    FAKE_SET(release_delay_ms, 0);
    assert_int_equal(__atomic_load_n(&releases_when_lost, __ATOMIC_SEQ_CST), 0);
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* The grant rides on a server lease refreshed earlier, with 600 ms of its
 * 3 s left: the hold is valid for those 600 ms only, is renewed within
 * them, and has its whole lease again after that renewal. */
/* An instance that lacks a capability of its module (a mode chosen in the
 * configuration) says so at open; the client then neither claims nor uses
 * it: here no renewals, so the hold runs out with its lease. */
static void an_instance_may_lack_capabilities_of_its_module(void **state)
{
    (void)state;
    FAKE_SET(caps_lacking, DLOCK_CAP_RENEW);
    dlock_client *c = open_fake("fake", 300);
    FAKE_SET(caps_lacking, 0);
    assert_int_equal(dlock_client_capabilities(c), DLOCK_CAP_FENCE);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "a", 1, NULL, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    sleep_ms(450);
    assert_int_equal(fake_get(&fake.renews), 0);
    assert_true(dlock_validity_ms(l) <= 0);
    dlock_release(l);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void validity_of_a_grant_follows_what_is_left_of_the_lease(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    FAKE_SET(granted_valid_ms, 600);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "left", 4, NULL, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    int64_t v = dlock_validity_ms(l);
    assert_true(v <= 600 && v > 400);
    assert_int_equal(fake_get(&fake.renews), 0);
    int64_t t0 = now_ms();
    while (fake_get(&fake.renews) == 0 && now_ms() - t0 < 2000)
        sleep_ms(5);
    assert_true(fake_get(&fake.renews) >= 1);
    assert_true(now_ms() - t0 < 600);
    assert_true(dlock_validity_ms(l) > 2000);
    FAKE_SET(granted_valid_ms, -1);
    dlock_release(l);
    /* Nothing left: valid until now, so reported lost at once. */
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_true(dlock_validity_ms(l) <= 0);
    FAKE_SET(granted_valid_ms, 0);
    dlock_release(l);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* Holds granted at different times come to be renewed in one round: one
 * due at a third of its lease takes in another due within a sixth. */
static void holds_granted_apart_are_renewed_together(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *a, *b;
    assert_int_equal(dlock_lock_new(c, "apart-a", 7, NULL, &a), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "apart-b", 7, NULL, &b), DLOCK_OK);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_OK);
    sleep_ms(200);
    assert_int_equal(dlock_acquire(b, 0), DLOCK_OK);
    int64_t t0 = now_ms();
    while (fake_get(&fake.renews) == 0 && now_ms() - t0 < 3000)
        sleep_ms(5);
    sleep_ms(50);
    assert_int_equal(fake_get(&fake.batches), 1); /* one round, not a renew each */
    assert_int_equal(fake_get(&fake.batch_items), 2);
    dlock_release(a);
    dlock_release(b);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

/* The server grants a shorter lease than asked: validity follows it. */
static void validity_never_exceeds_the_granted_lease(void **state)
{
    (void)state;
    lost_calls = 0;
    dlock_client *c = open_fake("fake", 3000);
    FAKE_SET(granted_lease_ms, 300);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = count_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "short", 5, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    int64_t v = dlock_validity_ms(l);
    assert_true(v <= 300 - 5 && v > 200);
    /* Renewed at a third of what was granted, not of the 3 s asked for. */
    sleep_ms(250);
    assert_true(fake_get(&fake.renews) >= 1);
    assert_true(dlock_validity_ms(l) <= 295);
    FAKE_SET(renew_rc, DLOCK_EUNAVAILABLE);
    int64_t t0 = now_ms();
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 2000)
        sleep_ms(5);
    assert_true(now_ms() - t0 <= 300 + slack_ms(40));
    FAKE_SET(renew_rc, 0);
    FAKE_SET(granted_lease_ms, 0);
    dlock_release(l);
    dlock_lock_free(l);
    dlock_client_close(c);
}


/* Internal (libdlock_core): runs the core's boot clock ahead, as a suspend. */
void dlock__clock_test_suspend(int64_t ms);

/* The host sleeps through the lease: CLOCK_MONOTONIC stops, the server's
 * clock does not. After the resume the hold has no validity left and is
 * declared lost within the expiry thread's 1 s suspend check. */
static void validity_counts_time_the_host_was_suspended(void **state)
{
    (void)state;
    lost_calls = 0;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = count_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "zzz", 3, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_true(dlock_validity_ms(l) > 2900);
    dlock__clock_test_suspend(5000);
    int64_t v = dlock_validity_ms(l);
    assert_true(v == 0 || v == DLOCK_ELOST);
    int64_t t0 = now_ms();
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 3000)
        sleep_ms(5);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    assert_true(now_ms() - t0 <= 1000 + slack_ms(100));
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* Handles of one name made and freed from several threads at once, while
 * holds come and go: a free that is still releasing must not have the
 * entry destroyed under it by another thread's new-and-free. */
struct churn {
    dlock_client *client;
    int rounds;
    int failures;
};

static void *churn_handles(void *arg)
{
    struct churn *ch = arg;
    for (int i = 0; i < ch->rounds; i++) {
        dlock_lock *l = NULL;
        if (dlock_lock_new(ch->client, "churn", 5, NULL, &l) != DLOCK_OK) {
            ch->failures++;
            continue;
        }
        if (i % 2 == 0 && dlock_acquire(l, 0) == DLOCK_OK)
            dlock_release(l);
        dlock_lock_free(l); /* frees with the hold still there on odd rounds of other threads */
    }
    return NULL;
}

static void handles_of_one_name_churn_from_many_threads(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    FAKE_SET(release_delay_ms, 1); /* a slow release widens the window */
    enum { N = 4 };
    pthread_t t[N];
    struct churn ch[N];
    for (int i = 0; i < N; i++) {
        ch[i] = (struct churn){ c, 300, 0 };
        pthread_create(&t[i], NULL, churn_handles, &ch[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(ch[i].failures, 0);
    }
    FAKE_SET(release_delay_ms, 0);
    dlock_client_close(c);
}

/* on_lost of one hold waits for an application mutex that a thread holds
 * while it releases another hold lost in the same watchdog round: that
 * release must not wait for the first callback (the library holds nothing
 * of its own while on_lost runs). */
static pthread_mutex_t app_mu = PTHREAD_MUTEX_INITIALIZER;
static int app_callback_started;

static void lost_waits_for_the_application(dlock_lock *lock, void *arg)
{
    (void)lock;
    (void)arg;
    __atomic_store_n(&app_callback_started, 1, __ATOMIC_SEQ_CST);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 3;
    if (pthread_mutex_timedlock(&app_mu, &until) == 0)
        pthread_mutex_unlock(&app_mu);
}

static void on_lost_holds_no_library_lock_over_other_holds(void **state)
{
    (void)state;
    __atomic_store_n(&app_callback_started, 0, __ATOMIC_SEQ_CST);
    dlock_client *c = open_fake("fake", 300);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = lost_waits_for_the_application;
    dlock_lock *a = NULL, *b = NULL;
    assert_int_equal(dlock_lock_new(c, "app-a", 5, &o, &a), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "app-b", 5, NULL, &b), DLOCK_OK);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(b, 0), DLOCK_OK);
    pthread_mutex_lock(&app_mu);
    FAKE_SET(renew_rc, DLOCK_ELOST); /* the first renewal round loses both, together */
    int64_t t0 = now_ms();
    while (!__atomic_load_n(&app_callback_started, __ATOMIC_SEQ_CST) && now_ms() - t0 < 2000)
        sleep_ms(2);
    assert_true(__atomic_load_n(&app_callback_started, __ATOMIC_SEQ_CST));
    int64_t t1 = now_ms();
    assert_int_equal(dlock_release(b), DLOCK_ELOST);
    int64_t took = now_ms() - t1;
    pthread_mutex_unlock(&app_mu);
    FAKE_SET(renew_rc, 0);
    if (took > 1000)
        fail_msg("releasing another lost hold waited %lld ms for an on_lost callback", (long long)took);
    dlock_release(a);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_close(c);
}

/* Six threads of one client wait for a name another owner holds; one talks
 * to the backend, five queue inside the client. A cancel reaches every one
 * at once, and none is granted after it even when the name frees then. */
static void cancel_reaches_threads_queued_in_the_client(void **state)
{
    (void)state;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, "backend = \"fake\"; lease_ms = 3000; "
                                                  "retry_base_ms = 1000; retry_cap_ms = 1000;"),
                     DLOCK_OK);
    fake_hold_externally("six", true);
    enum { N = 6 };
    dlock_lock *l[N];
    struct acquirer a[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        l[i] = new_lock(c, "six", 0);
        a[i] = (struct acquirer){ l[i], -1, 99, 0 };
        pthread_create(&t[i], NULL, acquire_thread, &a[i]);
    }
    sleep_ms(1100); /* past the contender's first 1 s pause */
    int64_t cancelled_at = now_ms();
    for (int i = 0; i < N; i++)
        dlock_cancel(l[i]);
    fake_hold_externally("six", false);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].rc, DLOCK_ECANCELLED);
        assert_true(a[i].finished_at - cancelled_at < slack_ms(100));
    }
    for (int i = 0; i < N; i++)
        dlock_lock_free(l[i]);
    dlock_client_close(c);
}

/* ---- misuse, errors, lifecycle ----------------------------------------------------------- */

static void bad_arguments_are_errors_not_crashes(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = NULL;
    char big[DLOCK_NAME_MAX + 2];
    memset(big, 'x', sizeof big);
    assert_int_equal(dlock_lock_new(c, big, DLOCK_NAME_MAX + 1, NULL, &l), DLOCK_EINVAL);
    assert_null(l);
    assert_int_equal(dlock_lock_new(c, big, DLOCK_NAME_MAX, NULL, &l), DLOCK_OK);
    dlock_lock_free(l);
    assert_int_equal(dlock_lock_new(c, "a\0b", 3, NULL, &l), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "NUL"));
    assert_int_equal(dlock_lock_new(c, "", 0, NULL, &l), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_new(c, NULL, 3, NULL, &l), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_new(NULL, "a", 1, NULL, &l), DLOCK_EINVAL);
    dlock_lock_options o = { 0 };
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_EINVAL); /* not initialised */
    o = (dlock_lock_options)DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = -5;
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_EINVAL);
    o.lease_ms = 0;
    o.flags = 0x80;
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_EINVAL);
    o.flags = DLOCK_LOCK_FAIR; /* the fake provider has no fair mode */
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_ENOTSUP);
    assert_non_null(strstr(dlock_errmsg(), "no fair mode"));
    o.flags = 0;
    o.mode = 7;
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_EINVAL);
    o.mode = DLOCK_MODE_SEMAPHORE;
    o.permits = 0;
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_EINVAL);
    o.permits = 70000;
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_EINVAL);
    o.permits = 2; /* the fake provider is version 1: no semaphores, no shared holds */
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_ENOTSUP);
    assert_non_null(strstr(dlock_errmsg(), "no semaphores"));
    o.mode = DLOCK_MODE_SHARED;
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_EINVAL); /* permits with a shared lock */
    o.permits = 0;
    assert_int_equal(dlock_lock_new(c, "a", 1, &o, &l), DLOCK_ENOTSUP);
    o.mode = DLOCK_MODE_EXCLUSIVE;
    /* A caller built against the version 1 header passes the shorter
     * struct: what lies after it is not read. */
    struct {
        unsigned version;
        int64_t lease_ms;
        dlock_lost_fn on_lost;
        void *on_lost_arg;
        unsigned flags;
    } v1 = { 1, 0, NULL, NULL, 0 };
    unsigned char *after = malloc(sizeof v1); /* the heap checkers see a read past it */
    memcpy(after, &v1, sizeof v1);
    assert_int_equal(dlock_lock_new(c, "a", 1, (const dlock_lock_options *)(void *)after, &l), DLOCK_OK);
    free(after);
    dlock_lock_free(l);
    assert_int_equal(dlock_acquire(NULL, 0), DLOCK_EINVAL);
    assert_int_equal(dlock_release(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_renew(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_cancel(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_fence(NULL, NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_validity_ms(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_hold_count(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_client_metrics(NULL, NULL), DLOCK_EINVAL);
    dlock_lock_free(NULL);
    dlock_client_close(NULL);
    l = new_lock(c, "n", 0);
    assert_int_equal(dlock_release(l), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_renew(l), DLOCK_ENOTOWNER);
    uint64_t fence;
    assert_int_equal(dlock_fence(l, &fence), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_validity_ms(l), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_fence(l, NULL), DLOCK_EINVAL);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void client_close_releases_forgotten_holds(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *a = new_lock(c, "x", 0);
    dlock_lock *b = new_lock(c, "y", 0);
    (void)b;
    assert_int_equal(dlock_acquire(a, 0), DLOCK_OK);
    dlock_client_close(c); /* handles not freed, hold not released */
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_int_equal(fake_get(&fake.closes), 1);
    assert_int_equal(fake_get(&fake.finis), 1); /* only "x" talked to the backend */
}

static void freeing_the_last_handle_releases(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *a = new_lock(c, "x", 0);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_OK);
    dlock_lock_free(a);
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_int_equal(fake_get(&fake.finis), 1);
    dlock_client_close(c);
}

static void fork_child_gets_einval(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "f", 0);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = dlock_acquire(l, 0);
        _exit(rc == DLOCK_EINVAL && strstr(dlock_errmsg(), "fork") ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void provider_open_failure_is_reported(void **state)
{
    (void)state;
    dlock_client *c = (dlock_client *)1;
    int rc = dlock_client_open_string(&c, "backend = \"fake\";\nfake = { label = \"refuse\"; };\n");
    assert_int_equal(rc, DLOCK_EUNAVAILABLE);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), "<string>:2"));
}

static void metrics_count_what_happened(void **state)
{
    (void)state;
    dlock_client *c = open_fake("fake", 3000);
    dlock_lock *l = new_lock(c, "m", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    dlock_release(l);
    dlock_release(l);
    fake_hold_externally("m", true);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_acquire(l, 30), DLOCK_ETIMEDOUT);
    char *text;
    assert_int_equal(dlock_client_metrics(c, &text), DLOCK_OK);
    assert_non_null(strstr(text, "dlock_grants_total{backend=\"fake\"} 1\n"));
    assert_non_null(strstr(text, "dlock_reentries_total{backend=\"fake\"} 1\n"));
    assert_non_null(strstr(text, "dlock_releases_total{backend=\"fake\"} 1\n"));
    assert_non_null(strstr(text, "dlock_timeouts_total{backend=\"fake\"} 1\n"));
    assert_non_null(strstr(text, "dlock_wait_seconds_count{backend=\"fake\"} 1\n"));
    assert_non_null(strstr(text, "dlock_hold_seconds_bucket{backend=\"fake\",le=\"+Inf\"} 1\n"));
    free(text);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static int log_lines;
static void count_log(int level, const char *msg, void *arg)
{
    (void)level;
    (void)msg;
    (void)arg;
    __atomic_add_fetch(&log_lines, 1, __ATOMIC_SEQ_CST);
}

static void log_sink_receives_warnings(void **state)
{
    (void)state;
    log_lines = 0;
    dlock_client *c = open_fake("fake", 3000);
    dlock_client_set_log(c, count_log, NULL, DLOCK_LOG_WARN);
    dlock_lock *l = new_lock(c, "g", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    fake_expire("g");
    assert_int_equal(dlock_renew(l), DLOCK_ELOST); /* logs "lost" at warn */
    assert_true(__atomic_load_n(&log_lines, __ATOMIC_SEQ_CST) >= 1);
    dlock_release(l);
    dlock_lock_free(l);
    dlock_client_close(c);
}

int main(void)
{
    if (dlock_provider_register(&fake_provider) != DLOCK_OK ||
        dlock_provider_register(&fake_wait_provider) != DLOCK_OK) {
        fprintf(stderr, "cannot register the fake providers: %s\n", dlock_errmsg());
        return 1;
    }
    /* CMOCKA_FILTER=name runs one case (for checking a test against old code). */
    if (getenv("CMOCKA_FILTER"))
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(try_once_busy_makes_one_attempt, setup),
        cmocka_unit_test_setup(wait_budget_is_honoured_with_backoff, setup),
        cmocka_unit_test_setup(retry_hint_shortens_the_pause, setup),
        cmocka_unit_test_setup(granted_when_released_during_wait, setup),
        cmocka_unit_test_setup(native_wait_is_used_and_woken, setup),
        cmocka_unit_test_setup(backend_error_is_returned_at_once, setup),
        cmocka_unit_test_setup(passing_failure_is_retried_within_the_budget, setup),
        cmocka_unit_test_setup(cancel_interrupts_backend_wait, setup),
        cmocka_unit_test_setup(cancel_interrupts_local_queue, setup),
        cmocka_unit_test_setup(reentry_counts_without_backend_calls, setup),
        cmocka_unit_test_setup(other_thread_of_client_is_excluded, setup),
        cmocka_unit_test_setup(threads_of_one_client_serialise, setup),
        cmocka_unit_test_setup(watchdog_renews_at_a_third_of_the_lease, setup),
        cmocka_unit_test_setup(watchdog_batches_due_renewals, setup),
        cmocka_unit_test_setup(renewal_that_finds_the_hold_gone_marks_it_lost, setup),
        cmocka_unit_test_setup(explicit_lease_expires_and_is_given_back, setup),
        cmocka_unit_test_setup(transient_renewal_failure_is_not_a_loss, setup),
        cmocka_unit_test_setup(release_finding_hold_gone_reports_lost, setup),
        cmocka_unit_test_setup(free_waits_for_on_lost_in_flight, setup),
        cmocka_unit_test_setup(on_lost_fires_at_validity_end_while_renewal_blocks, setup),
        cmocka_unit_test_setup(fixed_lease_on_lost_before_the_slow_give_back, setup),
        cmocka_unit_test_setup(validity_never_exceeds_the_granted_lease, setup),
        cmocka_unit_test_setup(an_instance_may_lack_capabilities_of_its_module, setup),
cmocka_unit_test_setup(validity_of_a_grant_follows_what_is_left_of_the_lease, setup),
        cmocka_unit_test_setup(holds_granted_apart_are_renewed_together, setup),
        cmocka_unit_test_setup(cancel_reaches_threads_queued_in_the_client, setup),
        cmocka_unit_test_setup(validity_counts_time_the_host_was_suspended, setup),
        cmocka_unit_test_setup(handles_of_one_name_churn_from_many_threads, setup),
        cmocka_unit_test_setup(on_lost_holds_no_library_lock_over_other_holds, setup),
        cmocka_unit_test_setup(bad_arguments_are_errors_not_crashes, setup),
        cmocka_unit_test_setup(client_close_releases_forgotten_holds, setup),
        cmocka_unit_test_setup(freeing_the_last_handle_releases, setup),
        cmocka_unit_test_setup(fork_child_gets_einval, setup),
        cmocka_unit_test_setup(provider_open_failure_is_reported, setup),
        cmocka_unit_test_setup(metrics_count_what_happened, setup),
        cmocka_unit_test_setup(log_sink_receives_warnings, setup),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
