/* tests/support/test_time.h - monotonic time helpers shared by the tests. */
#ifndef TEST_TIME_H
#define TEST_TIME_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

static inline int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(int64_t ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

#endif
