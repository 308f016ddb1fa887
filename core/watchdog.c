/* core/watchdog.c - one thread per client that renews watchdog holds at
 * lease/3 (Redisson's rule) and gives lost holds back to the backend, driven
 * by a timer heap. It calls the provider, so it can be slow; it never
 * decides a loss by time alone (core/expiry.c does, on a thread of its own).
 * Timers that fall due within a short window are handled together, so a
 * provider with renew_batch can renew them in one round trip. The thread
 * starts with the first hold, so clients that never lock cost no thread. */
#include "config.h"

#include "entry.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Timers due this close together are renewed in one batch; renewing a
 * little early is harmless, a round trip per lock is not. */
#define BATCH_WINDOW_MS 20

int64_t dlock__watchdog_renew_after(int64_t lease_ms)
{
    return lease_ms / 3;
}

int64_t dlock__watchdog_retry_after(int64_t valid_left_ms, int64_t lease_ms)
{
    int64_t retry = valid_left_ms / 3;
    if (retry > lease_ms / 6)
        retry = lease_ms / 6;
    return retry < 10 ? 10 : retry;
}

/* One round: gives back lost holds, and renews the watchdog holds that are
 * due, in one batch where the provider can. */
static void renewal_round(dlock_client *c, struct dlock__entry **due, size_t n)
{
    struct dlock__entry *renew[DLOCK__WATCHDOG_BATCH_MAX];
    int results[DLOCK__WATCHDOG_BATCH_MAX];
    size_t nrenew = 0;

    for (size_t i = 0; i < n; i++) {
        struct dlock__entry *e = due[i];
        pthread_mutex_lock(&e->mu);
        if (e->count == 0) {
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        if (e->lost) {
            /* Give a lost hold back, owner-checked: harmless where the
             * server already let it go, and it frees a backend without
             * server-side expiry (local) or a session that outlived the
             * client's decision (ZooKeeper, SQL session locks). */
            bool give_back = e->give_back_due;
            e->give_back_due = false;
            pthread_mutex_unlock(&e->mu);
            if (give_back)
                dlock__hold_give_back(c, e);
            continue;
        }
        if (dlock__boot_ms() >= e->valid_until_ms) {
            dlock__hold_expired(c, e); /* the expiry thread is about to; no renewal can save it */
            continue;
        }
        bool watchdog = e->renewed_by_watchdog;
        pthread_mutex_unlock(&e->mu);
        if (watchdog)
            renew[nrenew++] = e;
    }

    if (nrenew == 0)
        return;
    /* These entries are marked busy for the watchdog: release, dlock_renew
     * and dlock_fence wait for that mark to clear before they touch the
     * provider, so no other operation on them can overlap. */
    struct dlock__stamp t_send = dlock__stamp_now();
    int64_t t_send_us = dlock__now_us();
    dlock__p_renew_batch(c, renew, nrenew, results);
    __atomic_add_fetch(&c->metrics.renewal_round_us, (uint64_t)(dlock__now_us() - t_send_us), __ATOMIC_RELAXED);
    dlock__metric_inc(&c->metrics.renewal_rounds);
    for (size_t i = 0; i < nrenew; i++)
        dlock__hold_renewed(c, renew[i], results[i], t_send);
}

static void *watchdog_main(void *arg)
{
    dlock_client *c = arg;
    struct dlock__watchdog *w = &c->watchdog;
    struct dlock__entry *batch[DLOCK__WATCHDOG_BATCH_MAX];

    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        struct dlock__timer *top = dlock__timer_heap_peek(&w->heap);
        int64_t now = dlock__now_ms();
        if (!top) {
            w->sleeping_until = DLOCK__INFINITE;
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        if (top->due_ms > now) {
            struct timespec ts;
            w->sleeping_until = top->due_ms;
            dlock__abstime(top->due_ms, &ts);
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
            continue;
        }
        w->sleeping_until = 0; /* awake and working */
        size_t n = 0;
        while (n < DLOCK__WATCHDOG_BATCH_MAX && (top = dlock__timer_heap_peek(&w->heap)) &&
               top->due_ms <= now + BATCH_WINDOW_MS) {
            dlock__timer_heap_pop(&w->heap);
            batch[n++] = (struct dlock__entry *)((char *)top - offsetof(struct dlock__entry, timer));
        }
        for (size_t i = 0; i < n; i++)
            batch[i]->watchdog_busy = true;
        pthread_mutex_unlock(&w->mu);

        renewal_round(c, batch, n);

        pthread_mutex_lock(&w->mu);
        for (size_t i = 0; i < n; i++)
            batch[i]->watchdog_busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int start_locked(dlock_client *c)
{
    struct dlock__watchdog *w = &c->watchdog;
    sigset_t all, old;
    sigfillset(&all);
    /* The thread must not take the application's signals. */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, watchdog_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return dlock_seterr(DLOCK_EINTERNAL, "cannot start the watchdog thread: %s", strerror(rc));
    w->started = true;
    return DLOCK_OK;
}

int dlock__watchdog_schedule(dlock_client *c, struct dlock__entry *e, int64_t due_ms)
{
    struct dlock__watchdog *w = &c->watchdog;
    struct dlock__timer *t = &e->timer;
    int rc = DLOCK_OK;
    pthread_mutex_lock(&w->mu);
    if (!w->started && !w->stopping)
        rc = start_locked(c);
    if (rc == DLOCK_OK) {
        dlock__timer_heap_remove(&w->heap, t);
        t->due_ms = due_ms;
        rc = dlock__timer_heap_push(&w->heap, t);
        if (rc != DLOCK_OK)
            rc = dlock_seterr(rc, "out of memory for the watchdog's timers");
        else if (due_ms < w->sleeping_until)
            /* Only when it would otherwise look too late: waking it on every
             * grant costs a context switch per acquire. */
            pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int64_t dlock__watchdog_cancel(dlock_client *c, struct dlock__entry *e)
{
    struct dlock__watchdog *w = &c->watchdog;
    int64_t due = -1;
    pthread_mutex_lock(&w->mu);
    /* Wait until the thread is done with e, unless we are that thread (an
     * on_lost callback that releases). */
    bool on_watchdog = w->started && pthread_equal(pthread_self(), w->thread);
    while (!on_watchdog && e->watchdog_busy)
        pthread_cond_wait(&w->cv, &w->mu);
    struct dlock__timer *t = &e->timer;
    if (dlock__timer_in_heap(t)) {
        due = t->due_ms;
        dlock__timer_heap_remove(&w->heap, t);
    }
    pthread_mutex_unlock(&w->mu);
    return due;
}

void dlock__watchdog_init(dlock_client *c)
{
    struct dlock__watchdog *w = &c->watchdog;
    pthread_mutex_init(&w->mu, NULL);
    dlock__cond_init_monotonic(&w->cv);
    dlock__timer_heap_init(&w->heap);
    w->started = w->stopping = false;
    w->sleeping_until = 0; /* not started: the first schedule starts it anyway */
}

void dlock__watchdog_stop(dlock_client *c)
{
    struct dlock__watchdog *w = &c->watchdog;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    bool started = w->started;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (started)
        pthread_join(w->thread, NULL);
    dlock__timer_heap_free(&w->heap);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}
