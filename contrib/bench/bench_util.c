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

size_t bench_timed_cycles(void (*one_cycle)(void *arg), void *arg, int64_t *samples, double *secs)
{
    size_t n = 0;
    int64_t t0 = bench_now_us(), end = t0 + (int64_t)(opt.duration_s * 1e6);
    while (n < MAX_SAMPLES) {
        int64_t a = bench_now_us();
        if (a >= end)
            break;
        one_cycle(arg);
        samples[n++] = bench_now_us() - a;
    }
    *secs = (double)(bench_now_us() - t0) / 1e6;
    return n;
}

void bench_record_cycles(const char *label, const char *scenario, int64_t *samples, size_t n, double secs)
{
    figure_add(label, scenario, "acquire+release/s", "ops/s", (double)n / secs);
    figure_add(label, scenario, "latency p50", "us", (double)bench_percentile(samples, n, 0.50));
    figure_add(label, scenario, "latency p99", "us", (double)bench_percentile(samples, n, 0.99));
}
