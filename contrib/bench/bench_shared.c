/* contrib/bench/bench_shared.c - the scenarios of shared holds and
 * semaphores: "rw" (worker processes on one name, 90 % of their holds
 * shared, 10 % exclusive) and "semaphore" (worker processes on a semaphore
 * of half as many permits as workers). */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

struct hold_rec {
    int64_t asked_us, granted_us, released_us;
    int exclusive;
};

struct holds {
    int64_t start_us, end_us;
    size_t n;
    struct hold_rec rec[200000];
};

#define MAX_HOLDS (sizeof ((struct holds *)0)->rec / sizeof ((struct holds *)0)->rec[0])

static dlock_lock *handle(dlock_client *c, const char *name, unsigned mode, unsigned permits)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = mode;
    o.permits = permits;
    dlock_lock *l;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    if (rc != DLOCK_OK)
        bench_die("lock", rc);
    return l;
}

/* One worker process: holds name in a loop until the end, recording each
 * hold. permits > 0: a semaphore; else shared with exclusive_pct % of the
 * holds exclusive. */
static void worker(const struct bench_config *cfg, struct holds *h, const char *name, unsigned permits,
                   int exclusive_pct, unsigned seed)
{
    dlock_client *c;
    int rc = dlock_client_open(&c, cfg->path);
    if (rc != DLOCK_OK)
        bench_die(cfg->path, rc);
    dlock_lock *shared = handle(c, name, permits ? DLOCK_MODE_SEMAPHORE : DLOCK_MODE_SHARED, permits);
    dlock_lock *exclusive = permits ? NULL : handle(c, name, DLOCK_MODE_EXCLUSIVE, 0);
    srand(seed);
    while (bench_now_us() < h->start_us)
        bench_sleep_us(100);
    while (bench_now_us() < h->end_us) {
        bool x = exclusive && rand() % 100 < exclusive_pct;
        dlock_lock *l = x ? exclusive : shared;
        int64_t asked = bench_now_us();
        rc = dlock_acquire(l, 5000);
        if (rc == DLOCK_ETIMEDOUT)
            continue;
        if (rc != DLOCK_OK)
            bench_die("acquire", rc);
        int64_t granted = bench_now_us();
        bench_sleep_us(opt.hold_ms * 1000);
        int64_t released = bench_now_us();
        if ((rc = dlock_release(l)) != DLOCK_OK)
            bench_die("release", rc);
        size_t i = __atomic_fetch_add(&h->n, 1, __ATOMIC_SEQ_CST);
        if (i < MAX_HOLDS)
            h->rec[i] = (struct hold_rec){ asked, granted, released, x };
        bench_sleep_us(opt.pause_ms * 1000);
    }
    dlock_lock_free(shared);
    if (exclusive)
        dlock_lock_free(exclusive);
    dlock_client_close(c);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The most holds whose [granted, released) overlap at one moment. */
static int most_at_once(const struct holds *h, size_t n)
{
    int64_t *ev = malloc(2 * n * sizeof *ev);
    if (!ev)
        return -1;
    /* Starts as 2t+1, ends as 2t: an end at t comes before a start at t. */
    for (size_t i = 0; i < n; i++) {
        ev[2 * i] = 2 * h->rec[i].granted_us + 1;
        ev[2 * i + 1] = 2 * h->rec[i].released_us;
    }
    qsort(ev, 2 * n, sizeof *ev, cmp_i64);
    int now = 0, most = 0;
    for (size_t i = 0; i < 2 * n; i++) {
        now += (ev[i] & 1) ? 1 : -1;
        most = now > most ? now : most;
    }
    free(ev);
    return most;
}

/* Runs workers on name and records the figures of the scenario. */
static void run_holds(const struct bench_config *cfg, int workers, const char *scenario_base, unsigned permits,
                      int exclusive_pct, int64_t *samples)
{
    struct holds *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (h == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (workers > 64)
        workers = 64;
    char name[64];
    snprintf(name, sizeof name, "bench-%s-%u", scenario_base, permits);
    h->n = 0;
    h->start_us = bench_now_us() + 300000;
    h->end_us = h->start_us + (int64_t)(opt.duration_s * 1e6);
    pid_t pids[64];
    for (int i = 0; i < workers; i++)
        if ((pids[i] = fork()) == 0) {
            worker(cfg, h, name, permits, exclusive_pct, (unsigned)(i + 1) * 7919u);
            _exit(0);
        }
    for (int i = 0; i < workers; i++)
        waitpid(pids[i], NULL, 0);

    size_t n = h->n < MAX_HOLDS ? h->n : MAX_HOLDS, nx = 0, ns = 0;
    int64_t *xwait = malloc((n + 1) * sizeof *xwait);
    size_t shared_grants = 0;
    for (size_t i = 0; i < n; i++) {
        if (h->rec[i].exclusive)
            xwait[nx++] = h->rec[i].granted_us - h->rec[i].asked_us;
        else {
            samples[ns++] = h->rec[i].granted_us - h->rec[i].asked_us;
            shared_grants++;
        }
    }
    char scenario[48];
    snprintf(scenario, sizeof scenario, "%s-%dw", scenario_base, workers);
    double secs = (double)(h->end_us - h->start_us) / 1e6;
    figure_add(cfg->label, scenario, "grants/s", "ops/s", (double)n / secs);
    if (permits) {
        figure_add(cfg->label, scenario, "wait p99", "us", (double)bench_percentile(samples, ns, 0.99));
        figure_add(cfg->label, scenario, "holders at once, most", "holders", most_at_once(h, n));
        figure_add(cfg->label, scenario, "permits", "permits", permits);
    } else {
        figure_add(cfg->label, scenario, "shared grants/s", "ops/s", (double)shared_grants / secs);
        figure_add(cfg->label, scenario, "shared wait p99", "us", (double)bench_percentile(samples, ns, 0.99));
        figure_add(cfg->label, scenario, "exclusive wait p50", "us", (double)bench_percentile(xwait, nx, 0.50));
        figure_add(cfg->label, scenario, "exclusive wait p99", "us", (double)bench_percentile(xwait, nx, 0.99));
        figure_add(cfg->label, scenario, "exclusive grants", "grants", (double)nx);
    }
    free(xwait);
    munmap(h, sizeof *h);
}

/* Whether cfg's backend has cap (and says so once when it has not). */
static bool has(const struct bench_config *cfg, unsigned cap, const char *what)
{
    dlock_client *c;
    int rc = dlock_client_open(&c, cfg->path);
    if (rc != DLOCK_OK)
        bench_die(cfg->path, rc);
    bool yes = (dlock_client_capabilities(c) & cap) != 0;
    dlock_client_close(c);
    if (!yes)
        fprintf(stderr, "dlock-bench: %s: the %s backend has no %s; skipped\n", cfg->label, cfg->backend, what);
    return yes;
}

void run_rw(const struct bench_config *cfg, int workers, int64_t *samples)
{
    if (has(cfg, DLOCK_CAP_SHARED, "shared holds"))
        run_holds(cfg, workers, "rw", 0, 10, samples);
}

void run_semaphore(const struct bench_config *cfg, int workers, int64_t *samples)
{
    if (has(cfg, DLOCK_CAP_SEMAPHORE, "semaphores"))
        run_holds(cfg, workers, "semaphore", (unsigned)(workers / 2 > 1 ? workers / 2 : 1), 0, samples);
}
