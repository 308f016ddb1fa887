/* tests/support/waiters.h - waiters on threads of their own, for the cases
 * that count when and how often a release lets them in. */
#ifndef DLOCK_TEST_WAITERS_H
#define DLOCK_TEST_WAITERS_H

#include "test_client.h"
#include "test_time.h"

#include <dlock.h>
#include <pthread.h>
#include <stdio.h>

/* A waiter's acquire on its own thread: when it was granted, or why not;
 * a grant is released at once (by the thread that holds it). */
struct waiter {
    dlock_lock *lock;
    int rc;
    int64_t granted_at;
};

static inline void *wait_for_it(void *arg)
{
    struct waiter *w = arg;
    w->rc = dlock_acquire(w->lock, 20000);
    w->granted_at = now_ms();
    if (w->rc == DLOCK_OK)
        w->rc = dlock_release(w->lock);
    return NULL;
}

/* Starts w on its own thread and returns once its client c counted a busy
 * answer (c's first) and the waiter had time to settle in its wait. */
static inline void start_waiter(struct waiter *w, pthread_t *t, dlock_client *c)
{
    w->rc = -1;
    long long busy = test_client_metric(c, "dlock_busy_total");
    assert_int_equal(pthread_create(t, NULL, wait_for_it, w), 0);
    int64_t t0 = now_ms();
    while (test_client_metric(c, "dlock_busy_total") <= busy && now_ms() - t0 < 5000)
        sleep_ms(5);
    sleep_ms(slack_ms(200));
}

/* More waiting locks in one client (config: a long lease, say 30 s) than
 * it has waiting connections (64): those left out of the line look again
 * soon, and every waiter is granted soon after its lock's release, not
 * when the holder's lease would have run out. (Each against its own
 * release: the 66 releases one after another take a while themselves on
 * a loaded machine.) */
static inline void more_waiters_than_waiting_connections(const char *config)
{
    enum { N = 66 };
    dlock_client *h = test_client_open(config), *w = test_client_open(config);
    static dlock_lock *held[N];
    static struct waiter waiters[N];
    static pthread_t t[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "many-waiters-%d", i);
        held[i] = test_lock_named(h, name);
        int rc = dlock_acquire(held[i], 0);
        if (rc != DLOCK_OK)
            fail_msg("holder %d of %d: %s: %s", i, N, dlock_errname(rc), dlock_errmsg());
        waiters[i] = (struct waiter){ test_lock_named(w, name), -1, 0 };
        assert_int_equal(pthread_create(&t[i], NULL, wait_for_it, &waiters[i]), 0);
    }
    int64_t t0 = now_ms();
    while (test_client_metric(w, "dlock_busy_total") < N && now_ms() - t0 < 10000)
        sleep_ms(20);
    sleep_ms(slack_ms(300));
    static int64_t released_at[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(dlock_release(held[i]), DLOCK_OK);
        released_at[i] = now_ms();
    }
    int64_t slowest = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(waiters[i].rc, DLOCK_OK);
        if (waiters[i].granted_at - released_at[i] > slowest)
            slowest = waiters[i].granted_at - released_at[i];
        dlock_lock_free(waiters[i].lock);
        dlock_lock_free(held[i]);
    }
    /* What is checked is "soon, not at the holder's lease end (30 s)":
     * 4 s is far from that, and leaves room for 66 releases in a row on
     * two cores shared with other servers' tests (2 s was missed by 9 ms
     * there). */
    if (slowest > slack_ms(4000))
        fail_msg("one of %d waiters was granted %lld ms after its lock's release", N, (long long)slowest);
    dlock_client_close(h);
    dlock_client_close(w);
}

/* A hold of name granted to caching client a while client c waits
 * behind it: h holds the name, a queues, then c behind a (c_queued, when
 * not NULL, returns once the server shows c waiting); h lets go. a is
 * granted and lets go at once: its hold must not be kept (c waits), and
 * its next hold, with nobody else asking, must be. Frees and closes the
 * three clients. */
static inline void test_grant_with_one_queued_behind(dlock_client *h, dlock_client *a, dlock_client *c,
                                                     const char *name, void (*c_queued)(void))
{
    dlock_lock *lh = test_lock_named(h, name);
    assert_int_equal(dlock_acquire(lh, 0), DLOCK_OK);
    struct waiter wa = { .lock = test_lock_named(a, name) };
    struct waiter wc = { .lock = test_lock_named(c, name) };
    pthread_t ta, tc;
    start_waiter(&wa, &ta, a); /* queued first */
    start_waiter(&wc, &tc, c); /* then behind it */
    if (c_queued)
        c_queued();
    assert_int_equal(dlock_release(lh), DLOCK_OK);
    pthread_join(ta, NULL); /* a is granted and releases at once */
    pthread_join(tc, NULL);
    test_queued_grant_case_end(h, lh, a, wa.lock, wa.rc, c, wc.lock, wc.rc);
}

#endif
