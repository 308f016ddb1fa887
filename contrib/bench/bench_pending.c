/* contrib/bench/bench_pending.c - the "pending" scenario: many acquires
 * pending at once through the non-blocking API, from one loop thread, on
 * one name. Eight clients (as the blocking "contended" scenario has eight
 * workers) share the handles; a ninth holds the name until all of them are
 * pending. It reports the process's threads with eight pending and with
 * all pending (the engine's pool must not grow), the client heap per
 * pending acquire, and, as they drain (each holds for --hold-ms, then
 * releases from its callback), grants/s and the hand-off p50/p99 beside
 * the blocking API's at 8 workers of the same run. A hand-off is measured
 * from the holder's dlock_release_start() to the next grant's callback,
 * and compared with the blocking one from the dlock_release() call: the
 * release's return is not seen here before the next grant. */
#include "config.h"

#include "bench.h"

#include <dirent.h>
#include <malloc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLIENTS 8

struct pending_run {
    dlock_client *clients[CLIENTS];
    int nclients;
    size_t granted, released, failed;
    int64_t holding_until_us;       /* the current hold's end, 0 when none */
    dlock_lock *holding;
    int64_t last_release_us;        /* when the last holder asked to release */
    int64_t *handoffs;
    size_t nhandoffs;
    int last_rc;
};

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *de; (de = readdir(d));)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static size_t heap_now(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void released(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    struct pending_run *run = arg;
    run->released++;
    if (rc != DLOCK_OK) {
        run->failed++;
        run->last_rc = rc;
    }
}

static void granted(dlock_lock *lock, int rc, void *arg)
{
    struct pending_run *run = arg;
    if (rc != DLOCK_OK) {
        run->failed++;
        run->released++;
        run->last_rc = rc;
        return;
    }
    int64_t now = bench_now_us();
    run->granted++;
    if (run->last_release_us)
        run->handoffs[run->nhandoffs++] = now - run->last_release_us;
    run->holding = lock;
    run->holding_until_us = now + opt.hold_ms * 1000;
}

/* Lets the current holder go once its hold is over. */
static void end_hold_if_due(struct pending_run *run)
{
    if (!run->holding || bench_now_us() < run->holding_until_us)
        return;
    dlock_lock *l = run->holding;
    run->holding = NULL;
    run->last_release_us = bench_now_us();
    int rc = dlock_release_start(l, released, run);
    if (rc != DLOCK_OK)
        bench_die("release_start", rc);
}

/* One turn of the loop: the clients' descriptors, or the hold's end. */
static void loop_once(struct pending_run *run)
{
    struct pollfd p[CLIENTS];
    for (int i = 0; i < run->nclients; i++)
        p[i] = (struct pollfd){ .fd = dlock_client_fd(run->clients[i]), .events = POLLIN };
    /* To the microsecond (ppoll): a hold rounded up to whole ms would
     * make this loop slower than the blocking one it is compared with. */
    int64_t timeout_us = 100000;
    if (run->holding) {
        int64_t left = run->holding_until_us - bench_now_us();
        timeout_us = left < 0 ? 0 : left < timeout_us ? left : timeout_us;
    }
    struct timespec ts = { (time_t)(timeout_us / 1000000), (long)(timeout_us % 1000000) * 1000 };
    ppoll(p, (nfds_t)run->nclients, &ts, NULL);
    for (int i = 0; i < run->nclients; i++)
        if (p[i].revents & POLLIN)
            dlock_client_process(run->clients[i]);
    end_hold_if_due(run);
}

void run_pending(const struct bench_config *cfg, int n, int64_t *samples)
{
    struct pending_run run = { .nclients = CLIENTS, .handoffs = samples };
    dlock_client *holder_client;
    int rc = dlock_client_open(&holder_client, cfg->path);
    if (rc != DLOCK_OK)
        bench_die(cfg->path, rc);
    for (int i = 0; i < CLIENTS; i++)
        if ((rc = dlock_client_open(&run.clients[i], cfg->path)) != DLOCK_OK)
            bench_die(cfg->path, rc);
    dlock_lock *hold;
    if ((rc = dlock_lock_new(holder_client, "bench-pending", 13, NULL, &hold)) != DLOCK_OK ||
        (rc = dlock_acquire(hold, 0)) != DLOCK_OK)
        bench_die("holder", rc);
    dlock_lock **locks = calloc((size_t)n, sizeof *locks);
    if (!locks)
        bench_die("calloc", DLOCK_ENOMEM);

    /* One pending acquire per client starts each client's engine. */
    for (int i = 0; i < CLIENTS && i < n; i++) {
        if ((rc = dlock_lock_new(run.clients[i], "bench-pending", 13, NULL, &locks[i])) != DLOCK_OK ||
            (rc = dlock_acquire_start(locks[i], -1, granted, &run)) != DLOCK_OK)
            bench_die("acquire_start", rc);
    }
    bench_sleep_us(300000);
    int threads_few = threads_now();
    size_t heap_before = heap_now();
    for (int i = CLIENTS; i < n; i++) {
        if ((rc = dlock_lock_new(run.clients[i % CLIENTS], "bench-pending", 13, NULL, &locks[i])) != DLOCK_OK ||
            (rc = dlock_acquire_start(locks[i], -1, granted, &run)) != DLOCK_OK)
            bench_die("acquire_start", rc);
    }
    bench_sleep_us(1000000); /* every one has made its first attempt and parked */
    size_t heap_after = heap_now();
    int threads_all = threads_now();

    int64_t start = bench_now_us();
    if ((rc = dlock_release(hold)) != DLOCK_OK)
        bench_die("holder release", rc);
    run.last_release_us = start;
    while (run.released < (size_t)n && bench_now_us() - start < 600 * 1000000LL)
        loop_once(&run);
    double secs = (double)(bench_now_us() - start) / 1e6;
    if (run.failed)
        fprintf(stderr, "dlock-bench: pending: %zu of %d acquires failed, the last with %s\n", run.failed, n,
                dlock_errname(run.last_rc));

    char scenario[40];
    snprintf(scenario, sizeof scenario, "pending-%d", n);
    figure_add(cfg->label, scenario, "threads, 8 pending", "threads", threads_few);
    figure_add(cfg->label, scenario, "threads, all pending", "threads", threads_all);
    figure_add(cfg->label, scenario, "client heap per pending acquire", "bytes",
               heap_after > heap_before ? (double)(heap_after - heap_before) / (n - CLIENTS) : 0);
    figure_add(cfg->label, scenario, "grants/s", "ops/s", (double)run.granted / secs);
    figure_add(cfg->label, scenario, "handoff p50", "us", (double)bench_percentile(samples, run.nhandoffs, 0.50));
    figure_add(cfg->label, scenario, "handoff p99", "us", (double)bench_percentile(samples, run.nhandoffs, 0.99));
    figure_add(cfg->label, scenario, "failed acquires", "ops", (double)run.failed);

    for (int i = 0; i < n; i++)
        dlock_lock_free(locks[i]);
    free(locks);
    dlock_lock_free(hold);
    for (int i = 0; i < CLIENTS; i++)
        dlock_client_close(run.clients[i]);
    dlock_client_close(holder_client);
}
