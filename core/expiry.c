/* core/expiry.c - one timer thread per client (core/timer_thread.c) that
 * declares a hold lost the moment its validity ends, on the boot clock. It never calls the
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

#include <stddef.h>

#define SUSPEND_CHECK_MS 1000

static void run_expiries(dlock_client *c, struct dlock__entry **due, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dlock__entry_on_expiry(c, due[i]);
}

void dlock__expiry_init(dlock_client *c)
{
    /* One at a time, on the boot clock, looking at it every second. */
    static const struct dlock__timer_thread_spec spec = { "expiry", dlock__boot_ms, 0, SUSPEND_CHECK_MS,
        offsetof(struct dlock__entry, expiry), offsetof(struct dlock__entry, expiry_busy), run_expiries };
    dlock__timer_thread_init(&c->expiry, &spec, c);
}

int dlock__expiry_arm(dlock_client *c, struct dlock__entry *e, int64_t valid_until_boot_ms)
{
    return dlock__timer_thread_schedule(&c->expiry, e, valid_until_boot_ms, 0); /* never early */
}

void dlock__expiry_disarm(dlock_client *c, struct dlock__entry *e)
{
    dlock__timer_thread_cancel(&c->expiry, e);
}



bool dlock__expiry_try_disarm(dlock_client *c, struct dlock__entry *e)
{
    return dlock__timer_thread_try_cancel(&c->expiry, e);
}
