/* tests/support/test_time.h - monotonic time helpers shared by the tests. */
#ifndef TEST_TIME_H
#define TEST_TIME_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline void sleep_ms(int64_t ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A timing tolerance, widened by $DLOCK_TEST_SLACK (a factor, default 1):
 * tests/valgrind.sh sets it, because under valgrind every step takes tens
 * of times longer and what is checked there is memory, not latency. */
static inline int64_t slack_ms(int64_t ms)
{
    const char *f = getenv("DLOCK_TEST_SLACK");
    int factor = f ? atoi(f) : 1;
    return ms * (factor > 1 ? factor : 1);
}

#endif
