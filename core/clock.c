/* core/clock.c - the core's two clocks, neither of them the wall clock, so
 * steps (NTP, an admin's date -s) cannot stretch or shrink a lease:
 * CLOCK_MONOTONIC for wait deadlines and timers (condition variables can
 * wait on it), CLOCK_BOOTTIME for validity, because it keeps counting while
 * the host is suspended, as the servers' expiry clocks do. */
#include "config.h"

#include "internal.h"

#include <time.h>

int64_t dlock__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dlock__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t dlock_provider_now_ms(void)
{
    return dlock__now_ms();
}

static int64_t boot_offset_ms; /* added by dlock__clock_test_suspend() */

int64_t dlock__boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 +
           __atomic_load_n(&boot_offset_ms, __ATOMIC_RELAXED);
}

int64_t dlock_provider_stamp_ms(void)
{
    return dlock__boot_ms();
}

void dlock__clock_test_suspend(int64_t ms)
{
    __atomic_add_fetch(&boot_offset_ms, ms, __ATOMIC_RELAXED);
}

int64_t dlock__deadline_after(int64_t now_ms, int64_t wait_ms)
{
    if (wait_ms < 0 || wait_ms >= DLOCK__INFINITE - now_ms)
        return DLOCK__INFINITE;
    return now_ms + wait_ms;
}

void dlock__abstime(int64_t at_ms, struct timespec *ts)
{
    ts->tv_sec = (time_t)(at_ms / 1000);
    ts->tv_nsec = (long)(at_ms % 1000) * 1000000L;
}

int dlock__cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}
