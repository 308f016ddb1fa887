/* contrib/bench/bench_util.c - timing, percentiles, figures. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void bench_sleep_us(int64_t us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int64_t bench_percentile(int64_t *v, size_t n, double p)
{
    if (n == 0)
        return -1;
    qsort(v, n, sizeof *v, cmp_i64);
    return v[(size_t)(p * (double)(n - 1) + 0.5)];
}

void bench_die(const char *what, int rc)
{
    fprintf(stderr, "dlock-bench: %s: %s (%s)\n", what, dlock_strerror(rc), dlock_errmsg());
    exit(1);
}
