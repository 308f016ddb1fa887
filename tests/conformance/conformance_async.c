/* tests/conformance/conformance_async.c - the semantics again, through the
 * non-blocking API: try-once, a wait with a timeout, a wait forever ended
 * by a cancel, reentry refused, on_lost, fence order, one waiter woken per
 * release across many parked acquires with a bounded number of threads, a
 * hold released from another thread, the blocking and non-blocking calls
 * on one name, a callback that frees its own handle, and a close with
 * operations pending. The cases drive the clients with a poll() loop of
 * their own, as an event loop would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "conformance.h"
#include "../support/test_client.h"
#include "../support/async_result.h"
#include "../support/test_time.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct conformance_target *target;

/* Runs the clients' loop until *until says stop or ms pass; returns
 * whether it stopped because of *until. */
static bool loop_until(dlock_client **clients, int n, bool (*until)(void *), void *arg, int64_t ms)
{
    int64_t end = now_ms() + ms;
    while (!until(arg)) {
        int64_t left = end - now_ms();
        if (left <= 0)
            return false;
        struct pollfd p[8];
        for (int i = 0; i < n; i++) {
            p[i].fd = dlock_client_fd(clients[i]);
            p[i].events = POLLIN;
            assert_true(p[i].fd >= 0);
        }
        poll(p, (nfds_t)n, left > 100 ? 100 : (int)left);
        for (int i = 0; i < n; i++)
            assert_true(dlock_client_process(clients[i]) >= 0);
    }
    return true;
}

static bool called(void *arg)
{
    return ((struct async_result *)arg)->calls > 0;
}

/* Waits for r's callback on client c; fails the case after ms. */
static void await(dlock_client *c, struct async_result *r, int64_t ms)
{
    if (!loop_until(&c, 1, called, r, ms))
        fail_msg("%s: no callback within %lld ms", target->name, (long long)ms);
    assert_int_equal(r->calls, 1);
}

/* A handle for NAME with an explicit lease (0: the watchdog's) and on_lost. */
static dlock_lock *handle(dlock_client *c, const char *name, int64_t lease_ms, dlock_lost_fn on_lost, void *arg)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.on_lost = on_lost;
    o.on_lost_arg = arg;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("lock_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return l;
}

/* Two clients of the target, each with a handle of NAME: how most cases
 * start, and end. */
struct two {
    dlock_client *a, *b;
    dlock_lock *la, *lb;
};

static struct two two_open(const char *name)
{
    struct two t;
    t.a = conformance_open_client(30000, 100);
    t.b = conformance_open_client(30000, 100);
    t.la = handle(t.a, name, 0, NULL, NULL);
    t.lb = handle(t.b, name, 0, NULL, NULL);
    return t;
}

static void two_close(struct two *t)
{
    dlock_lock_free(t->la);
    dlock_lock_free(t->lb);
    dlock_client_close(t->a);
    dlock_client_close(t->b);
}

static int acquire_now(dlock_client *c, dlock_lock *l, int64_t wait_ms)
{
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(l, wait_ms, async_record, &r), DLOCK_OK);
    await(c, &r, wait_ms >= 0 ? wait_ms + slack_ms(5000) : slack_ms(10000));
    return r.rc;
}

static int release_now(dlock_client *c, dlock_lock *l)
{
    struct async_result r = { 0 };
    int rc = dlock_release_start(l, async_record, &r);
    if (rc != DLOCK_OK)
        return rc;
    await(c, &r, slack_ms(5000));
    return r.rc;
}

/* ---- the cases ------------------------------------------------------------------- */

static void async_try_once_and_release(void **state)
{
    (void)state;
    struct two two = two_open("async-once");
    dlock_client *a = two.a, *b = two.b;
    dlock_lock *la = two.la, *lb = two.lb;
    assert_int_equal(acquire_now(a, la, 0), DLOCK_OK);
    assert_int_equal(dlock_hold_count(la), 1);
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(lb, 0, async_record, &r), DLOCK_OK);
    await(b, &r, slack_ms(5000));
    assert_int_equal(r.rc, DLOCK_EBUSY);
    assert_true(strstr(r.detail, "async-once") != NULL); /* the detail travels with the result */
    assert_int_equal(release_now(a, la), DLOCK_OK);
    assert_int_equal(dlock_hold_count(la), 0);
    assert_int_equal(release_now(a, la), DLOCK_ENOTOWNER);
    assert_int_equal(acquire_now(b, lb, 0), DLOCK_OK);
    assert_int_equal(release_now(b, lb), DLOCK_OK);
    two_close(&two);
}

static void async_wait_times_out_no_sooner(void **state)
{
    (void)state;
    struct two two = two_open("async-timeout");
    dlock_client *b = two.b;
    dlock_lock *la = two.la, *lb = two.lb;
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct async_result r = { 0 };
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire_start(lb, 300, async_record, &r), DLOCK_OK);
    await(b, &r, slack_ms(5000));
    assert_int_equal(r.rc, DLOCK_ETIMEDOUT);
    if (r.at_ms - t0 < 300)
        fail_msg("a 300 ms wait ended after %lld ms", (long long)(r.at_ms - t0));
    assert_int_equal(dlock_release(la), DLOCK_OK);
    two_close(&two);
}

static void async_wait_forever_ends_with_cancel_or_release(void **state)
{
    (void)state;
    struct two two = two_open("async-forever");
    dlock_client *b = two.b;
    dlock_lock *la = two.la, *lb = two.lb;
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(lb, -1, async_record, &r), DLOCK_OK);
    assert_false(loop_until(&b, 1, called, &r, 300)); /* still waiting */
    assert_int_equal(dlock_cancel(lb), DLOCK_OK);
    await(b, &r, slack_ms(2000));
    assert_int_equal(r.rc, DLOCK_ECANCELLED);
    /* A new wait forever ends with the release. */
    struct async_result r2 = { 0 };
    assert_int_equal(dlock_acquire_start(lb, -1, async_record, &r2), DLOCK_OK);
    assert_false(loop_until(&b, 1, called, &r2, 200));
    assert_int_equal(dlock_release(la), DLOCK_OK);
    await(b, &r2, slack_ms(5000));
    assert_int_equal(r2.rc, DLOCK_OK);
    assert_int_equal(release_now(b, lb), DLOCK_OK);
    two_close(&two);
}

static void async_reentry_is_refused(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100);
    dlock_lock *l = handle(a, "async-reentry", 0, NULL, NULL);
    assert_int_equal(acquire_now(a, l, 0), DLOCK_OK);
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(l, 0, async_record, &r), DLOCK_EDEADLK);
    assert_int_equal(dlock_acquire_start(l, -1, async_record, &r), DLOCK_EDEADLK);
    assert_false(loop_until(&a, 1, called, &r, 50)); /* a refused start has no callback */
    /* A blocking hold of the calling thread is not re-entered either. */
    assert_int_equal(release_now(a, l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire_start(l, 0, async_record, &r), DLOCK_EDEADLK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static pthread_t lost_thread;
static void note_lost_thread(dlock_lock *l, void *arg)
{
    (void)l;
    lost_thread = pthread_self();
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static bool counted(void *arg)
{
    return __atomic_load_n((int *)arg, __ATOMIC_SEQ_CST) > 0;
}

static void async_hold_reports_its_loss(void **state)
{
    (void)state;
    int lost = 0;
    dlock_client *a = conformance_open_client(target->break_hold ? 600 : 30000, 100);
    /* Without a way to take the hold from outside (local), an explicit
     * lease runs out. */
    dlock_lock *l = handle(a, "async-lost", target->break_hold ? 0 : 200, note_lost_thread, &lost);
    assert_int_equal(acquire_now(a, l, 0), DLOCK_OK);
    if (target->break_hold)
        target->break_hold("async-lost");
    if (!loop_until(&a, 1, counted, &lost, slack_ms(3000)))
        fail_msg("on_lost never came for a hold taken with dlock_acquire_start");
    /* On the client's own thread, not inside dlock_client_process(). */
    assert_false(pthread_equal(lost_thread, pthread_self()));
    assert_int_equal(dlock_validity_ms(l), DLOCK_ELOST);
    assert_int_equal(release_now(a, l), DLOCK_ELOST);
    assert_int_equal(__atomic_load_n(&lost, __ATOMIC_SEQ_CST), 1);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void async_fences_increase(void **state)
{
    (void)state;
    struct two two = two_open("async-fence");
    dlock_client *a = two.a, *b = two.b;
    dlock_lock *la = two.la, *lb = two.lb;
    bool fences = dlock_client_capabilities(a) & DLOCK_CAP_FENCE;
    uint64_t last = 0;
    for (int i = 0; i < 6; i++) {
        dlock_client *c = i % 2 ? b : a;
        dlock_lock *l = i % 2 ? lb : la;
        assert_int_equal(acquire_now(c, l, 1000), DLOCK_OK);
        uint64_t f = 0;
        int rc = dlock_fence(l, &f);
        if (!fences) {
            assert_int_equal(rc, DLOCK_ENOTSUP);
        } else {
            assert_int_equal(rc, DLOCK_OK);
            if (f <= last)
                fail_msg("fence %llu after %llu", (unsigned long long)f, (unsigned long long)last);
            last = f;
        }
        assert_int_equal(release_now(c, l), DLOCK_OK);
    }
    two_close(&two);
}

/* ---- many waiters on one loop ------------------------------------------------------- */

#define CHAIN 40

struct chain {
    dlock_lock *locks[CHAIN];
    int granted[CHAIN];
    int holding;          /* holders now: never more than one */
    int most_holding;
    int done, failed;
    int last_rc;
};

static void chain_released(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    struct chain *ch = arg;
    if (rc != DLOCK_OK) {
        ch->failed++;
        ch->last_rc = rc;
    }
    ch->done++;
}

static void chain_granted(dlock_lock *lock, int rc, void *arg)
{
    struct chain *ch = arg;
    if (rc != DLOCK_OK) {
        ch->failed++;
        ch->last_rc = rc;
        ch->done++;
        return;
    }
    ch->holding++;
    if (ch->holding > ch->most_holding)
        ch->most_holding = ch->holding;
    for (int i = 0; i < CHAIN; i++)
        if (ch->locks[i] == lock)
            ch->granted[i]++;
    /* Let go at once, from inside the callback: the next waiter's turn. */
    ch->holding--;
    if (dlock_release_start(lock, chain_released, ch) != DLOCK_OK) {
        ch->failed++;
        ch->done++;
    }
}

static bool chain_over(void *arg)
{
    struct chain *ch = arg;
    return ch->done == CHAIN;
}

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static void async_many_waiters_one_loop(void **state)
{
    (void)state;
    /* Waiters on two clients (the second's are behind each other in the
     * client, the first's at the backend) and one holder on a third. */
    dlock_client *h = conformance_open_client(30000, 100);
    dlock_client *w[2] = { conformance_open_client(30000, 100), conformance_open_client(30000, 100) };
    dlock_lock *lh = handle(h, "async-chain", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(lh, 0), DLOCK_OK);
    struct chain ch = { 0 };
    struct async_result first = { 0 };
    /* One pending acquire starts the engine's threads; the rest must not
     * add any. */
    ch.locks[0] = handle(w[0], "async-chain", 0, NULL, NULL);
    assert_int_equal(dlock_acquire_start(ch.locks[0], -1, async_record, &first), DLOCK_OK);
    dlock_lock *other = handle(w[1], "async-chain", 0, NULL, NULL);
    struct async_result second = { 0 };
    assert_int_equal(dlock_acquire_start(other, -1, async_record, &second), DLOCK_OK);
    /* Time for the engine's threads to come up (a loaded machine under a
     * sanitizer starts them late), so that they are counted here. */
    sleep_ms(slack_ms(100));
    int threads = count_threads();
    dlock_cancel(ch.locks[0]);
    dlock_cancel(other);
    await(w[0], &first, slack_ms(2000));
    await(w[1], &second, slack_ms(2000));
    assert_int_equal(first.rc, DLOCK_ECANCELLED);
    assert_int_equal(second.rc, DLOCK_ECANCELLED);
    dlock_lock_free(other);
    for (int i = 1; i < CHAIN; i++)
        ch.locks[i] = handle(w[i % 2], "async-chain", 0, NULL, NULL);
    for (int i = 0; i < CHAIN; i++)
        assert_int_equal(dlock_acquire_start(ch.locks[i], -1, chain_granted, &ch), DLOCK_OK);
    sleep_ms(200);
    int threads_then = count_threads();
    if (threads_then > threads)
        fail_msg("%d pending acquires took %d threads more than 2 did", CHAIN, threads_then - threads);
    assert_int_equal(ch.done, 0);
    assert_int_equal(dlock_release(lh), DLOCK_OK);
    if (!loop_until(w, 2, chain_over, &ch, slack_ms(60000)))
        fail_msg("%d of %d waiters done after 60 s", ch.done, CHAIN);
    if (ch.failed)
        fail_msg("%d waiters failed, the last with %s", ch.failed, dlock_errname(ch.last_rc));
    assert_int_equal(ch.most_holding, 1);
    for (int i = 0; i < CHAIN; i++)
        assert_int_equal(ch.granted[i], 1);
    for (int i = 0; i < CHAIN; i++)
        dlock_lock_free(ch.locks[i]);
    dlock_lock_free(lh);
    dlock_client_close(w[0]);
    dlock_client_close(w[1]);
    dlock_client_close(h);
}

/* ---- ownership and mixing ---------------------------------------------------------- */

struct releaser {
    dlock_lock *lock;
    int rc;
};

static void *release_elsewhere(void *arg)
{
    struct releaser *r = arg;
    r->rc = dlock_release(r->lock);
    return NULL;
}

static void async_hold_is_the_handles(void **state)
{
    (void)state;
    struct two two = two_open("async-owner");
    dlock_client *a = two.a;
    dlock_lock *l = two.la, *lb = two.lb;
    assert_int_equal(acquire_now(a, l, 0), DLOCK_OK);
    struct releaser r = { l, -100 };
    pthread_t t;
    pthread_create(&t, NULL, release_elsewhere, &r);
    pthread_join(t, NULL);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    two_close(&two);
}

struct thread_hold {
    dlock_lock *lock;
    int64_t wait_ms, hold_ms;
    int acquired, released;        /* read while the thread runs: atomically */
    int holding;
};

static void *thread_hold(void *arg)
{
    struct thread_hold *t = arg;
    int rc = dlock_acquire(t->lock, t->wait_ms);
    __atomic_store_n(&t->acquired, rc, __ATOMIC_SEQ_CST);
    if (rc != DLOCK_OK)
        return NULL;
    __atomic_store_n(&t->holding, 1, __ATOMIC_SEQ_CST);
    sleep_ms(t->hold_ms);
    __atomic_store_n(&t->holding, 0, __ATOMIC_SEQ_CST);
    t->released = dlock_release(t->lock);
    return NULL;
}

static void async_and_blocking_share_a_name(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100);
    dlock_lock *blocking = handle(a, "async-mixed", 0, NULL, NULL);
    dlock_lock *async = handle(a, "async-mixed", 0, NULL, NULL);
    /* Another thread's blocking hold: the handle's acquire waits behind it
     * in the client and is granted when that thread lets go. */
    struct thread_hold th = { blocking, 0, 300, -100, -100, 0 };
    pthread_t t;
    pthread_create(&t, NULL, thread_hold, &th);
    while (!__atomic_load_n(&th.holding, __ATOMIC_SEQ_CST) && __atomic_load_n(&th.acquired, __ATOMIC_SEQ_CST) == -100)
        sleep_ms(5);
    assert_int_equal(th.acquired, DLOCK_OK);
    struct async_result r = { 0 }, r2 = { 0 };
    assert_int_equal(dlock_acquire_start(async, 0, async_record, &r), DLOCK_OK);
    await(a, &r, slack_ms(5000));
    assert_int_equal(r.rc, DLOCK_EBUSY);
    assert_int_equal(dlock_acquire_start(async, slack_ms(5000), async_record, &r2), DLOCK_OK);
    await(a, &r2, slack_ms(6000));
    assert_int_equal(r2.rc, DLOCK_OK);
    assert_false(__atomic_load_n(&th.holding, __ATOMIC_SEQ_CST));
    pthread_join(t, NULL);
    assert_int_equal(th.released, DLOCK_OK);
    /* The other way: a thread waits, blocking, for the handle's hold. */
    struct thread_hold th2 = { blocking, slack_ms(5000), 0, -100, -100, 0 };
    pthread_create(&t, NULL, thread_hold, &th2);
    sleep_ms(100);
    assert_int_equal(__atomic_load_n(&th2.acquired, __ATOMIC_SEQ_CST), -100);
    assert_int_equal(release_now(a, async), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(th2.acquired, DLOCK_OK);
    assert_int_equal(th2.released, DLOCK_OK);
    /* The calling thread's own blocking hold is not entered again. */
    assert_int_equal(dlock_acquire(blocking, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire_start(async, 0, async_record, &r), DLOCK_EDEADLK);
    assert_int_equal(dlock_release(blocking), DLOCK_OK);
    dlock_lock_free(blocking);
    dlock_lock_free(async);
    dlock_client_close(a);
}

static struct async_result release_in_free;

static void free_in_callback(dlock_lock *lock, int rc, void *arg)
{
    struct async_result *r = arg;
    r->calls++;
    r->rc = rc;
    /* Releases, then frees at once: the free waits for the release and
     * calls its callback here, before the handle is gone. */
    assert_int_equal(dlock_release_start(lock, async_record, &release_in_free), DLOCK_OK);
    dlock_lock_free(lock);
    assert_int_equal(release_in_free.calls, 1);
}

static void async_callback_frees_its_handle(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100), *b = conformance_open_client(30000, 100);
    dlock_lock *l = handle(a, "async-free", 0, NULL, NULL), *lb = handle(b, "async-free", 0, NULL, NULL);
    struct async_result r = { 0 };
    memset(&release_in_free, 0, sizeof release_in_free);
    assert_int_equal(dlock_acquire_start(l, 0, free_in_callback, &r), DLOCK_OK);
    await(a, &r, slack_ms(5000));
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(release_in_free.rc, DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK); /* released before the free */
    /* A plain free of a handle that holds releases it too. */
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock *l3 = handle(a, "async-free", 0, NULL, NULL);
    assert_int_equal(acquire_now(a, l3, 0), DLOCK_OK);
    dlock_lock_free(l3);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    /* A handle freed with an acquire pending: its callback comes from
     * dlock_lock_free, cancelled. */
    dlock_lock *l2 = handle(a, "async-free", 0, NULL, NULL);
    struct async_result r2 = { 0 };
    assert_int_equal(dlock_acquire_start(l2, -1, async_record, &r2), DLOCK_OK);
    sleep_ms(50);
    dlock_lock_free(l2);
    assert_int_equal(r2.calls, 1);
    assert_int_equal(r2.rc, DLOCK_ECANCELLED);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void async_close_completes_everything(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100), *b = conformance_open_client(30000, 100);
    dlock_lock *held = handle(a, "async-close", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
    enum { N = 8 };
    dlock_lock *l[N];
    struct async_result r[N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "async-close%s", i < N - 1 ? "" : "-free");
        l[i] = handle(b, name, 0, NULL, NULL);
        assert_int_equal(dlock_acquire_start(l[i], -1, async_record, &r[i]), DLOCK_OK);
    }
    sleep_ms(200); /* the last one, on a free name, is granted by now */
    dlock_client_close(b); /* without a dlock_client_process() */
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].calls, 1);
        assert_int_equal(r[i].rc, DLOCK_ECANCELLED);
    }
    /* The grant nobody saw went with the client. */
    dlock_lock *free_one = handle(a, "async-close-free", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(free_one, 0), DLOCK_OK);
    assert_int_equal(dlock_release(free_one), DLOCK_OK);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    dlock_lock_free(free_one);
    dlock_lock_free(held);
    dlock_client_close(a);
}

/* ---- callbacks that dlock_lock_free runs ------------------------------------------- */

struct nested {
    int calls, rc, retried;
};

/* Frees its handle when the acquire failed (a common pattern): called by
 * that handle's own free, it must do nothing. */
static void free_on_failure(dlock_lock *lock, int rc, void *arg)
{
    struct nested *n = arg;
    n->calls++;
    n->rc = rc;
    if (rc != DLOCK_OK)
        dlock_lock_free(lock);
}

/* Tries again on failure: refused on a handle being freed. */
static void retry_on_failure(dlock_lock *lock, int rc, void *arg)
{
    struct nested *n = arg;
    n->calls++;
    n->rc = rc;
    struct async_result never = { 0 };
    n->retried = dlock_acquire_start(lock, -1, async_record, &never);
}

static void async_free_runs_callbacks_safely(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100), *b = conformance_open_client(30000, 100);
    dlock_lock *la = handle(a, "async-nested", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    dlock_lock *l1 = handle(b, "async-nested", 0, NULL, NULL), *l2 = handle(b, "async-nested", 0, NULL, NULL);
    struct nested n1 = { 0 }, n2 = { 0 };
    assert_int_equal(dlock_acquire_start(l1, -1, free_on_failure, &n1), DLOCK_OK);
    assert_int_equal(dlock_acquire_start(l2, -1, retry_on_failure, &n2), DLOCK_OK);
    sleep_ms(50);
    dlock_lock_free(l1); /* its callback frees it again: no double free */
    assert_int_equal(n1.calls, 1);
    assert_int_equal(n1.rc, DLOCK_ECANCELLED);
    dlock_lock_free(l2); /* its callback starts again: refused, nothing outlives it */
    assert_int_equal(n2.calls, 1);
    assert_int_equal(n2.rc, DLOCK_ECANCELLED);
    assert_int_equal(n2.retried, DLOCK_EINVAL);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A release started, then the same thread acquires again at once: that
 * is a new hold after the release, never a reentry the release ends. */
static void async_release_then_acquire_is_a_new_hold(void **state)
{
    (void)state;
    struct two two = two_open("async-again");
    dlock_client *a = two.a;
    dlock_lock *l = two.la, *lb = two.lb;
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    struct async_result r = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 5000), DLOCK_OK);
    await(a, &r, slack_ms(5000));
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(dlock_hold_count(l), 1);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY); /* still ours */
    /* The same through the non-blocking calls: the start queues behind the
     * release instead of being refused as a reentry. */
    struct async_result r2 = { 0 }, r3 = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &r2), DLOCK_OK);
    assert_int_equal(dlock_acquire_start(l, 5000, async_record, &r3), DLOCK_OK);
    await(a, &r2, slack_ms(5000));
    await(a, &r3, slack_ms(5000));
    assert_int_equal(r2.rc, DLOCK_OK);
    assert_int_equal(r3.rc, DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(release_now(a, l), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    two_close(&two);
}

/* ---- one release, one waiter woken --------------------------------------------------- */

#define WAKE_WAITERS 5

struct waker {
    dlock_lock *lock;
    int granted;
};

static void wake_granted(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    struct waker *w = arg;
    if (rc == DLOCK_OK)
        w->granted = 1;
}

static int wakers_granted(struct waker *w)
{
    int n = 0;
    for (int i = 0; i < WAKE_WAITERS; i++)
        n += w[i].granted;
    return n;
}

static bool one_granted(void *arg)
{
    return wakers_granted(arg) > 0;
}

static void async_release_wakes_one_waiter(void **state)
{
    (void)state;
    dlock_client *holder = conformance_open_client(30000, 100);
    bool fair = dlock_client_capabilities(holder) & DLOCK_CAP_FAIR;
    /* Without native waiting the waiters poll: the release is seen by
     * whoever looks next, and only the grant is checked. */
    bool native = dlock_client_capabilities(holder) & DLOCK_CAP_NATIVE_WAIT;
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = fair ? DLOCK_LOCK_FAIR : 0;
    dlock_lock *lh = NULL;
    assert_int_equal(dlock_lock_new(holder, "async-wake-one", 14, &o, &lh), DLOCK_OK);
    assert_int_equal(dlock_acquire(lh, 0), DLOCK_OK);
    /* Waiters whose backoff is long: an attempt after the release is a
     * wake-up, not a timer. */
    dlock_client *c[WAKE_WAITERS];
    struct waker w[WAKE_WAITERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < WAKE_WAITERS; i++) {
        c[i] = conformance_open_client(30000, native ? 10000 : 100);
        assert_int_equal(dlock_lock_new(c[i], "async-wake-one", 14, &o, &w[i].lock), DLOCK_OK);
        assert_int_equal(dlock_acquire_start(w[i].lock, -1, wake_granted, &w[i]), DLOCK_OK);
    }
    /* Settled: every waiter has looked and parked (no attempt for 200 ms;
     * on a loaded machine the first looks come late). */
    long long before[WAKE_WAITERS] = { 0 };
    int64_t settle_end = now_ms() + slack_ms(5000);
    for (; native;) {
        long long seen[WAKE_WAITERS];
        bool all_looked = true;
        for (int i = 0; i < WAKE_WAITERS; i++) {
            seen[i] = test_client_metric(c[i], "dlock_acquire_attempts_total");
            all_looked = all_looked && seen[i] >= 1;
        }
        assert_false(loop_until(c, WAKE_WAITERS, one_granted, w, 200));
        bool still = all_looked;
        for (int i = 0; i < WAKE_WAITERS; i++) {
            before[i] = test_client_metric(c[i], "dlock_acquire_attempts_total");
            still = still && before[i] == seen[i];
        }
        if (still)
            break;
        if (now_ms() > settle_end)
            fail_msg("the waiters kept looking while the name was held");
    }
    assert_int_equal(dlock_release(lh), DLOCK_OK);
    if (!loop_until(c, WAKE_WAITERS, one_granted, w, slack_ms(5000)))
        fail_msg("no waiter was granted within 5 s of the release");
    loop_until(c, WAKE_WAITERS, one_granted, w, 0);
    sleep_ms(slack_ms(50));
    int woken = 0;
    for (int i = 0; i < WAKE_WAITERS; i++)
        if (!w[i].granted && test_client_metric(c[i], "dlock_acquire_attempts_total") > before[i])
            woken++;
    assert_int_equal(wakers_granted(w), 1);
    if (native && woken > 1)
        fail_msg("one release woke %d waiters besides the one granted", woken);
    for (int i = 0; i < WAKE_WAITERS; i++) {
        dlock_lock_free(w[i].lock); /* cancels the waiting ones, releases the granted one */
        dlock_client_close(c[i]);
    }
    dlock_lock_free(lh);
    dlock_client_close(holder);
}

/* ---- bad input ------------------------------------------------------------------------ */

static void start_while_closing(dlock_lock *lock, int rc, void *arg)
{
    struct async_result *r = arg;
    r->calls++;
    r->rc = rc;
    /* Called inside dlock_client_close: nothing new may start. */
    struct async_result never = { 0 };
    int again = dlock_acquire_start(lock, 0, async_record, &never);
    r->at_ms = again;
    snprintf(r->detail, sizeof r->detail, "%s", dlock_errmsg());
}

static void async_bad_input_is_refused(void **state)
{
    (void)state;
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(NULL, 0, async_record, &r), DLOCK_EINVAL);
    assert_int_equal(dlock_release_start(NULL, async_record, &r), DLOCK_EINVAL);
    assert_int_equal(dlock_client_fd(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_client_process(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_client_timeout_ms(NULL), DLOCK_EINVAL);
    dlock_client *a = conformance_open_client(30000, 100);
    dlock_lock *l = handle(a, "async-bad", 0, NULL, NULL);
    assert_int_equal(dlock_acquire_start(l, 0, NULL, NULL), DLOCK_EINVAL);
    assert_true(strstr(dlock_errmsg(), "done is NULL") != NULL);
    assert_int_equal(dlock_release_start(l, NULL, NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_ENOTOWNER); /* nothing held */
    assert_int_equal(dlock_client_timeout_ms(a), -1);
    assert_int_equal(dlock_client_process(a), 0);
    int fd = dlock_client_fd(a);
    assert_true(fd >= 0);
    assert_int_equal(dlock_client_fd(a), fd); /* the same for the client's life */
    /* A release already under way is not sent twice. */
    assert_int_equal(acquire_now(a, l, 0), DLOCK_OK);
    struct async_result r2 = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &r2), DLOCK_OK);
    assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_release(l), DLOCK_ENOTOWNER);
    await(a, &r2, slack_ms(5000));
    assert_int_equal(r2.rc, DLOCK_OK);
    /* Started while the client closes (from a callback close calls). */
    dlock_client *b = conformance_open_client(30000, 100);
    dlock_lock *held = handle(b, "async-bad", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
    struct async_result closing = { 0 };
    assert_int_equal(dlock_acquire_start(l, -1, start_while_closing, &closing), DLOCK_OK);
    dlock_client_close(a);
    assert_int_equal(closing.calls, 1);
    assert_int_equal(closing.rc, DLOCK_ECANCELLED);
    assert_int_equal((int)closing.at_ms, DLOCK_EINVAL);
    assert_true(strstr(closing.detail, "closing") != NULL);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    dlock_lock_free(held);
    dlock_client_close(b);
}

/* One round: N acquires started together on N names, all granted, then
 * released; returns how many went out without a thread (counted as
 * parked), and in *released how many of the releases did. */
static long long native_round(dlock_client *c, dlock_lock **l, int n, long long *released)
{
    long long before = test_client_metric(c, "dlock_acquire_attempts_parked_total");
    long long releases_before = test_client_metric(c, "dlock_releases_parked_total");
    struct async_result r[8];
    assert_true(n <= 8);
    memset(r, 0, sizeof r);
    for (int i = 0; i < n; i++)
        assert_int_equal(dlock_acquire_start(l[i], 0, async_record, &r[i]), DLOCK_OK);
    for (int i = 0; i < n; i++) {
        await(c, &r[i], slack_ms(5000));
        if (r[i].rc != DLOCK_OK)
            fail_msg("%s: native-%d: %s: %s", target->name, i, dlock_strerror(r[i].rc), r[i].detail);
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(release_now(c, l[i]), DLOCK_OK);
    *released = test_client_metric(c, "dlock_releases_parked_total") - releases_before;
    return test_client_metric(c, "dlock_acquire_attempts_parked_total") - before;
}

/* Attempts started together on several names go out together: where the
 * backend sends them natively each is counted as parked (no thread held
 * for its round trip), elsewhere none is. A native send takes an idle
 * connection only (it never connects), so the first rounds may make some
 * attempts on a thread, which leaves their connections idle for the next:
 * within a few rounds every attempt of a round goes out natively. */
static void async_attempts_go_out_natively_where_the_backend_can(void **state)
{
    (void)state;
    /* 4: redis sends at most half its pool (8) natively at once. */
    enum { N = 4, ROUNDS = 5 };
    dlock_client *c = conformance_open_client(30000, 100);
    dlock_lock *l[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "native-%d", i);
        l[i] = handle(c, name, 0, NULL, NULL);
    }
    bool attempts = target->native_round_trips & CONFORMANCE_NATIVE_ATTEMPTS;
    bool releases = target->native_round_trips & CONFORMANCE_NATIVE_RELEASES;
    long long most = 0, most_released = 0;
    for (int round = 0; round < ROUNDS && (most < N || (releases && most_released < N)); round++) {
        long long released;
        long long parked = native_round(c, l, N, &released);
        if (!attempts)
            assert_int_equal(parked, 0);
        if (!releases)
            assert_int_equal(released, 0);
        if (parked > most)
            most = parked;
        if (released > most_released)
            most_released = released;
    }
    assert_int_equal(most, attempts ? N : 0);
    assert_int_equal(most_released, releases ? N : 0);
    for (int i = 0; i < N; i++)
        dlock_lock_free(l[i]);
    dlock_client_close(c);
}

/* How many times c's descriptor woke a loop until r's callback came. */
static int wakes_until_called(dlock_client *c, struct async_result *r)
{
    int wakes = 0;
    int64_t t0 = now_ms();
    while (r->calls == 0 && now_ms() - t0 < slack_ms(5000)) {
        struct pollfd p = { .fd = dlock_client_fd(c), .events = POLLIN };
        if (poll(&p, 1, 100) == 1) {
            wakes++;
            dlock_client_process(c);
        }
    }
    assert_int_equal(r->calls, 1);
    return wakes;
}

/* An uncontended acquire and its release wake the caller's loop once
 * each, for their results, however their round trips are made: a round
 * trip without a thread is sent by the start itself and read when its
 * answer comes, with no wake-up for anything else in between (a backend's
 * timer, a socket being writable, a step the loop only passes on to a
 * worker); one on a pool thread is delivered through the done eventfd.
 * (An attempt of two round trips one after the other wakes it for each
 * answer, or once for both: the call that reads the first answer and sends
 * the second looks at the loop's set again before it returns, and finds
 * the second answer there when it came back that fast.) Counted over a
 * few cycles after the first (which may connect). */
static void async_round_trips_wake_the_loop_once(void **state)
{
    (void)state;
    dlock_client *c = conformance_open_client(30000, 100);
    dlock_lock *l = handle(c, "one-wake", 0, NULL, NULL);
    assert_int_equal(acquire_now(c, l, 0), DLOCK_OK);
    assert_int_equal(release_now(c, l), DLOCK_OK);
    for (int i = 0; i < 5; i++) {
        struct async_result r = { 0 };
        assert_int_equal(dlock_acquire_start(l, 0, async_record, &r), DLOCK_OK);
        int wakes = wakes_until_called(c, &r);
        int most_wakes = target->native_round_trips & CONFORMANCE_FIRST_ATTEMPT_TWO_TRIPS ? 2 : 1;
        if (r.rc != DLOCK_OK || wakes < 1 || wakes > most_wakes)
            fail_msg("%s: acquire %d: %s after %d wake-ups", target->name, i, dlock_strerror(r.rc), wakes);
        memset(&r, 0, sizeof r);
        assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_OK);
        wakes = wakes_until_called(c, &r);
        if (r.rc != DLOCK_OK || wakes != 1)
            fail_msg("%s: release %d: %s after %d wake-ups", target->name, i, dlock_strerror(r.rc), wakes);
    }
    dlock_lock_free(l);
    dlock_client_close(c);
}

int conformance_run_async(const struct conformance_target *t)
{
    target = t;
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup(async_try_once_and_release, conformance_before_each),
        cmocka_unit_test_setup(async_wait_times_out_no_sooner, conformance_before_each),
        cmocka_unit_test_setup(async_wait_forever_ends_with_cancel_or_release, conformance_before_each),
        cmocka_unit_test_setup(async_reentry_is_refused, conformance_before_each),
        cmocka_unit_test_setup(async_hold_reports_its_loss, conformance_before_each),
        cmocka_unit_test_setup(async_fences_increase, conformance_before_each),
        cmocka_unit_test_setup(async_many_waiters_one_loop, conformance_before_each),
        cmocka_unit_test_setup(async_hold_is_the_handles, conformance_before_each),
        cmocka_unit_test_setup(async_and_blocking_share_a_name, conformance_before_each),
        cmocka_unit_test_setup(async_callback_frees_its_handle, conformance_before_each),
        cmocka_unit_test_setup(async_close_completes_everything, conformance_before_each),
        cmocka_unit_test_setup(async_release_wakes_one_waiter, conformance_before_each),
        cmocka_unit_test_setup(async_bad_input_is_refused, conformance_before_each),
        cmocka_unit_test_setup(async_release_then_acquire_is_a_new_hold, conformance_before_each),
        cmocka_unit_test_setup(async_free_runs_callbacks_safely, conformance_before_each),
        cmocka_unit_test_setup(async_attempts_go_out_natively_where_the_backend_can, conformance_before_each),
        cmocka_unit_test_setup(async_round_trips_wake_the_loop_once, conformance_before_each),
    };
    char group[128];
    snprintf(group, sizeof group, "%s: non-blocking", t->name);
    return _cmocka_run_group_tests(group, cases, sizeof cases / sizeof cases[0], NULL, conformance_group_teardown);
}
