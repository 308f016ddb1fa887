/* core/expiry.c - one thread per client that declares a hold lost the moment
 * its validity ends, measured on the boot clock. It never calls the
 * provider: the watchdog thread may be stuck in a slow renewal for as long
 * as a backend's command timeout, and a loss must not wait for that, since
 * the server hands the lock on at its own expiry whatever the client is
 * doing. The thread starts with the first hold.
 *
 * Condition variables cannot wait on CLOCK_BOOTTIME, so the thread waits on
 * CLOCK_MONOTONIC, at most SUSPEND_CHECK_MS at a time: after the host
 * resumes from a suspend, a validity that ended while it slept is noticed
 * within that bound. */
#include "config.h"

#include "entry.h"

#include <signal.h>
#include <stddef.h>
#include <string.h>

#define SUSPEND_CHECK_MS 1000

static struct dlock__entry *entry_of(struct dlock__timer *t)
{
    return (struct dlock__entry *)((char *)t - offsetof(struct dlock__entry, expiry));
}

static void *expiry_main(void *arg)
{
    dlock_client *c = arg;
    struct dlock__expiry *x = &c->expiry;
    struct dlock__entry *batch[64];

    pthread_mutex_lock(&x->mu);
    while (!x->stopping) {
        struct dlock__timer *top = dlock__timer_heap_peek(&x->heap);
        int64_t now = dlock__boot_ms();
        if (!top) {
            x->sleeping_until = DLOCK__INFINITE;
            pthread_cond_wait(&x->cv, &x->mu);
            continue;
        }
        if (top->due_ms > now) {
            int64_t nap = top->due_ms - now;
            if (nap > SUSPEND_CHECK_MS)
                nap = SUSPEND_CHECK_MS;
            struct timespec ts;
            x->sleeping_until = now + nap;
            dlock__abstime(dlock__now_ms() + nap, &ts);
            pthread_cond_timedwait(&x->cv, &x->mu, &ts);
            continue;
        }
        x->sleeping_until = 0;
        size_t n = 0;
        while (n < sizeof batch / sizeof batch[0] && (top = dlock__timer_heap_peek(&x->heap)) &&
               top->due_ms <= now) {
            dlock__timer_heap_pop(&x->heap);
            batch[n] = entry_of(top);
            batch[n++]->expiry_busy = true;
        }
        pthread_mutex_unlock(&x->mu);
        for (size_t i = 0; i < n; i++)
            dlock__entry_on_expiry(c, batch[i]);
        pthread_mutex_lock(&x->mu);
        for (size_t i = 0; i < n; i++)
            batch[i]->expiry_busy = false;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

static int start_locked(dlock_client *c)
{
    struct dlock__expiry *x = &c->expiry;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the application's signals are not ours */
    int rc = pthread_create(&x->thread, NULL, expiry_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return dlock_seterr(DLOCK_EINTERNAL, "cannot start the expiry thread: %s", strerror(rc));
    x->started = true;
    return DLOCK_OK;
}

int dlock__expiry_arm(dlock_client *c, struct dlock__entry *e, int64_t valid_until_boot_ms)
{
    struct dlock__expiry *x = &c->expiry;
    int rc = DLOCK_OK;
    pthread_mutex_lock(&x->mu);
    if (!x->started && !x->stopping)
        rc = start_locked(c);
    if (rc == DLOCK_OK) {
        dlock__timer_heap_remove(&x->heap, &e->expiry);
        e->expiry.due_ms = valid_until_boot_ms;
        rc = dlock__timer_heap_push(&x->heap, &e->expiry);
        if (rc != DLOCK_OK)
            rc = dlock_seterr(rc, "out of memory for the expiry timers");
        else if (valid_until_boot_ms < x->sleeping_until)
            pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return rc;
}

void dlock__expiry_disarm(dlock_client *c, struct dlock__entry *e)
{
    struct dlock__expiry *x = &c->expiry;
    pthread_mutex_lock(&x->mu);
    bool on_expiry_thread = x->started && pthread_equal(pthread_self(), x->thread);
    while (!on_expiry_thread && e->expiry_busy)
        pthread_cond_wait(&x->cv, &x->mu);
    dlock__timer_heap_remove(&x->heap, &e->expiry);
    pthread_mutex_unlock(&x->mu);
}

void dlock__expiry_init(dlock_client *c)
{
    struct dlock__expiry *x = &c->expiry;
    pthread_mutex_init(&x->mu, NULL);
    dlock__cond_init_monotonic(&x->cv);
    dlock__timer_heap_init(&x->heap);
    x->started = x->stopping = false;
    x->sleeping_until = 0;
}

void dlock__expiry_stop(dlock_client *c)
{
    struct dlock__expiry *x = &c->expiry;
    pthread_mutex_lock(&x->mu);
    x->stopping = true;
    bool started = x->started;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    if (started)
        pthread_join(x->thread, NULL);
    dlock__timer_heap_free(&x->heap);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
}
