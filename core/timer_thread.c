/* core/timer_thread.c - a thread that runs work for entries when their
 * timers fall due, driven by a timer heap; the watchdog (renewals,
 * give-backs) and the expiry thread (loss at the validity end) are two of
 * them. The thread starts with the first timer, so a client that never
 * locks costs no thread, and it takes none of the application's signals.
 *
 * Timers due within `window_ms` of each other are handled in one call, so
 * that renewals can go to the backend in one batch; a timer that may run
 * early (early_ms) joins a batch that far ahead of its due time. An entry being worked
 * on is marked busy; cancelling its timer waits until the thread is done
 * with it, so after a cancel the thread never touches the entry again.
 *
 * Condition variables wait on CLOCK_MONOTONIC; a thread whose timers are on
 * another clock (the boot clock, which counts a host's suspend) naps at most
 * `max_nap_ms` at a time and reads its clock again. */
#include "config.h"

#include "entry.h"

#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static struct dlock__timer *timer_of(const struct dlock__timer_thread *t, struct dlock__entry *e)
{
    return (struct dlock__timer *)((char *)e + t->timer_offset);
}

static bool *busy_of(const struct dlock__timer_thread *t, struct dlock__entry *e)
{
    return (bool *)((char *)e + t->busy_offset);
}

static struct dlock__entry *entry_of(const struct dlock__timer_thread *t, struct dlock__timer *timer)
{
    return (struct dlock__entry *)((char *)timer - t->timer_offset);
}

/* Makes room for four times as many, up to DLOCK__WATCHDOG_BATCH_MAX;
 * false when there can be no more. */
static bool grow_batch(struct dlock__entry ***batch, size_t *max, struct dlock__entry **small_batch)
{
    if (*max >= DLOCK__WATCHDOG_BATCH_MAX)
        return false;
    size_t bigger = *max * 4 < DLOCK__WATCHDOG_BATCH_MAX ? *max * 4 : DLOCK__WATCHDOG_BATCH_MAX;
    struct dlock__entry **p = malloc(bigger * sizeof *p);
    if (!p)
        return false;
    memcpy(p, *batch, *max * sizeof *p);
    if (*batch != small_batch)
        free(*batch);
    *batch = p;
    *max = bigger;
    return true;
}

static void *thread_main(void *arg)
{
    struct dlock__timer_thread *t = arg;
    /* Room for a batch: on the stack, grown on the heap only when more
     * timers fall due together (up to DLOCK__WATCHDOG_BATCH_MAX), so a
     * client with a few holds costs no more memory than before. Short of
     * memory, batches stay smaller. */
    enum { SMALL = 64 };
    struct dlock__entry *small_batch[SMALL];
    struct dlock__entry **batch = small_batch;
    size_t batch_max = SMALL;

    uint64_t lingered_after = 0; /* t->scheduled when it last lingered */

    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        struct dlock__timer *top = dlock__timer_heap_peek(&t->heap);
        int64_t now = t->now();
        int64_t nap = DLOCK__INFINITE;
        if (!top && t->scheduled != lingered_after && t->last_lead_ms > 0) {
            /* The heap emptied since the last timer came: in a loop of
             * short holds, a release takes its timer away, and the next
             * grant brings one with the same lead. Waiting that lead first,
             * not for ever, lets that grant's schedule leave this thread
             * asleep; waiting for ever, every grant would have to wake it
             * (a context switch per acquire). An idle client lingers once,
             * then waits for ever. */
            lingered_after = t->scheduled;
            nap = t->last_lead_ms;
        } else if (!top) {
            t->sleeping_until = DLOCK__INFINITE;
            pthread_cond_wait(&t->cv, &t->mu);
            t->wakeups++;
            continue;
        } else if (top->due_ms > now) {
            nap = top->due_ms - now;
        }
        if (nap != DLOCK__INFINITE) {
            if (nap > t->max_nap_ms)
                nap = t->max_nap_ms;
            struct timespec ts;
            t->sleeping_until = now + nap;
            dlock__abstime(dlock__now_ms() + nap, &ts);
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            t->wakeups++;
            continue;
        }
        t->sleeping_until = 0; /* awake and working */
        size_t n = 0;
        while ((top = dlock__timer_heap_peek(&t->heap)) &&
               top->due_ms <= now + (top->early_ms > t->window_ms ? top->early_ms : t->window_ms)) {
            if (n == batch_max && !grow_batch(&batch, &batch_max, small_batch))
                break;
            dlock__timer_heap_pop(&t->heap);
            batch[n] = entry_of(t, top);
            *busy_of(t, batch[n++]) = true;
        }
        pthread_mutex_unlock(&t->mu);

        dlock__loss_defer_begin();
        t->run(t->client, batch, n);

        pthread_mutex_lock(&t->mu);
        for (size_t i = 0; i < n; i++)
            *busy_of(t, batch[i]) = false;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        /* on_lost with no busy mark held (each call pins its handle). */
        dlock__loss_defer_flush();
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    if (batch != small_batch)
        free(batch);
    return NULL;
}

void dlock__timer_thread_init(struct dlock__timer_thread *t, const struct dlock__timer_thread_spec *spec,
                              dlock_client *client)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    dlock__cond_init_monotonic(&t->cv);
    dlock__timer_heap_init(&t->heap);
    t->what = spec->what;
    t->now = spec->now;
    t->window_ms = spec->window_ms;
    t->max_nap_ms = spec->max_nap_ms;
    t->timer_offset = spec->timer_offset;
    t->busy_offset = spec->busy_offset;
    t->run = spec->run;
    t->client = client;
    t->sleeping_until = 0; /* not started: the first timer starts it anyway */
}

static int start_locked(struct dlock__timer_thread *t)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the application's signals are not ours */
    int rc = pthread_create(&t->thread, NULL, thread_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return dlock_seterr(DLOCK_EINTERNAL, "cannot start the %s thread: %s", t->what, strerror(rc));
    t->started = true;
    return DLOCK_OK;
}

static int schedule(struct dlock__timer_thread *t, struct dlock__entry *e, int64_t due_ms, int64_t early_ms,
                    bool only_earlier)
{
    struct dlock__timer *timer = timer_of(t, e);
    int rc = DLOCK_OK;
    pthread_mutex_lock(&t->mu);
    if (!t->started && !t->stopping)
        rc = start_locked(t);
    if (rc == DLOCK_OK && only_earlier && dlock__timer_in_heap(timer) && timer->due_ms <= due_ms) {
        pthread_mutex_unlock(&t->mu);
        return DLOCK_OK;
    }
    if (rc == DLOCK_OK) {
        dlock__timer_heap_remove(&t->heap, timer);
        timer->due_ms = due_ms;
        timer->early_ms = early_ms;
        int64_t lead = due_ms - t->now();
        if (lead > 0)
            t->last_lead_ms = lead;
        t->scheduled++;
        rc = dlock__timer_heap_push(&t->heap, timer);
        if (rc != DLOCK_OK)
            rc = dlock_seterr(rc, "out of memory for the %s's timers", t->what);
        else if (due_ms < t->sleeping_until)
            /* Only when it would otherwise look too late: waking it on every
             * grant costs a context switch per acquire. */
            pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int dlock__timer_thread_schedule(struct dlock__timer_thread *t, struct dlock__entry *e, int64_t due_ms,
                                 int64_t early_ms)
{
    return schedule(t, e, due_ms, early_ms, false);
}

int dlock__timer_thread_schedule_earlier(struct dlock__timer_thread *t, struct dlock__entry *e, int64_t due_ms)
{
    return schedule(t, e, due_ms, 0, true);
}

bool dlock__timer_thread_try_cancel(struct dlock__timer_thread *t, struct dlock__entry *e)
{
    struct dlock__timer *timer = timer_of(t, e);
    pthread_mutex_lock(&t->mu);
    bool on_thread = t->started && pthread_equal(pthread_self(), t->thread);
    bool busy = !on_thread && *busy_of(t, e);
    if (!busy && dlock__timer_in_heap(timer))
        dlock__timer_heap_remove(&t->heap, timer);
    pthread_mutex_unlock(&t->mu);
    return !busy;
}

int64_t dlock__timer_thread_cancel(struct dlock__timer_thread *t, struct dlock__entry *e)
{
    struct dlock__timer *timer = timer_of(t, e);
    int64_t due = -1;
    pthread_mutex_lock(&t->mu);
    /* Wait until the thread is done with e, unless we are that thread (an
     * on_lost callback that releases). */
    bool on_thread = t->started && pthread_equal(pthread_self(), t->thread);
    while (!on_thread && *busy_of(t, e))
        pthread_cond_wait(&t->cv, &t->mu);
    if (dlock__timer_in_heap(timer)) {
        due = timer->due_ms;
        dlock__timer_heap_remove(&t->heap, timer);
    }
    pthread_mutex_unlock(&t->mu);
    return due;
}

void dlock__timer_thread_join(struct dlock__timer_thread *t)
{
    pthread_mutex_lock(&t->mu);
    t->stopping = true;
    bool started = t->started;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (started && !pthread_equal(pthread_self(), t->thread))
        pthread_join(t->thread, NULL);
    pthread_mutex_lock(&t->mu);
    t->started = false; /* joined: schedule and cancel no longer wait for it */
    pthread_mutex_unlock(&t->mu);
}

void dlock__timer_thread_destroy(struct dlock__timer_thread *t)
{
    dlock__timer_heap_free(&t->heap);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}
