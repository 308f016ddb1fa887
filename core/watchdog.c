/* core/watchdog.c - one timer thread per client (core/timer_thread.c) that
 * renews watchdog holds at lease/3 (Redisson's rule) and gives lost holds
 * back to the backend. It calls the provider, so it can be slow; it never
 * decides a loss by time alone (core/expiry.c does, on a thread of its own).
 * Timers that fall due within a short window are handled together, so a
 * provider with renew_batch can renew them in one round trip. The thread
 * starts with the first hold, so clients that never lock cost no thread. */
#include "config.h"

#include "entry.h"

#include <stddef.h>
#include <stdlib.h>
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
    /* Room for the whole round; short of memory, renewals go in rounds of
     * what fits on the stack. */
    enum { SMALL = 64 };
    struct dlock__entry *small_renew[SMALL];
    int small_results[SMALL];
    struct dlock__entry **renew = n > SMALL ? malloc(n * sizeof *renew) : NULL;
    int *results = renew ? malloc(n * sizeof *results) : NULL;
    if (!results) {
        free(renew);
        for (size_t from = 0; n > SMALL && from < n; from += SMALL)
            renewal_round(c, due + from, n - from < SMALL ? n - from : SMALL);
        if (n > SMALL)
            return;
        renew = small_renew;
        results = small_results;
    }
    size_t nrenew = 0;

    for (size_t i = 0; i < n; i++) {
        struct dlock__entry *e = due[i];
        pthread_mutex_lock(&e->mu);
        if (e->count == 0) {
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        if (e->cached) {
            if (dlock__cache_round(c, e))
                continue; /* given back, or not due for a renewal yet */
            pthread_mutex_lock(&e->mu);
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
        goto out;
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
out:
    if (renew != small_renew) {
        free(renew);
        free(results);
    }
}

void dlock__watchdog_init(dlock_client *c)
{
    /* In batches, on the monotonic clock, waking only when a timer is due. */
    static const struct dlock__timer_thread_spec spec = { "watchdog", dlock__now_ms, BATCH_WINDOW_MS,
        DLOCK__INFINITE, offsetof(struct dlock__entry, timer), offsetof(struct dlock__entry, watchdog_busy),
        renewal_round };
    dlock__timer_thread_init(&c->watchdog, &spec, c);
}

int dlock__watchdog_schedule(dlock_client *c, struct dlock__entry *e, int64_t due_ms)
{
    return dlock__timer_thread_schedule(&c->watchdog, e, due_ms, 0);
}

int dlock__watchdog_schedule_earlier(dlock_client *c, struct dlock__entry *e, int64_t due_ms)
{
    return dlock__timer_thread_schedule_earlier(&c->watchdog, e, due_ms);
}

int dlock__watchdog_schedule_renewal(dlock_client *c, struct dlock__entry *e, int64_t sent_mono_ms, int64_t valid_ms)
{
    int64_t after = dlock__watchdog_renew_after(valid_ms);
    __atomic_store_n(&e->renew_due_ms, sent_mono_ms + after, __ATOMIC_RELAXED);
    return dlock__timer_thread_schedule(&c->watchdog, e, sent_mono_ms + after, after / 2);
}

int64_t dlock__watchdog_cancel(dlock_client *c, struct dlock__entry *e)
{
    return dlock__timer_thread_cancel(&c->watchdog, e);
}

bool dlock__watchdog_try_cancel(dlock_client *c, struct dlock__entry *e)
{
    return dlock__timer_thread_try_cancel(&c->watchdog, e);
}


