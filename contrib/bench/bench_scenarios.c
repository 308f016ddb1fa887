/* contrib/bench/bench_scenarios.c - the scenarios, through libdlock. */
#include "bench.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static dlock_client *open_client(const struct bench_config *cfg)
{
    dlock_client *c;
    int rc = dlock_client_open(&c, cfg->path);
    if (rc != DLOCK_OK)
        bench_die(cfg->path, rc);
    return c;
}

static dlock_lock *open_lock(dlock_client *c, const char *name)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = opt.fair ? DLOCK_LOCK_FAIR : 0;
    dlock_lock *l;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    if (rc != DLOCK_OK)
        bench_die("lock", rc);
    return l;
}

static void lock_cycle(void *arg)
{
    dlock_lock *l = arg;
    int rc = dlock_acquire(l, 0);
    if (rc != DLOCK_OK)
        bench_die("acquire", rc);
    if ((rc = dlock_release(l)) != DLOCK_OK)
        bench_die("release", rc);
}

void run_uncontended(const struct bench_config *cfg, int64_t *samples)
{
    dlock_client *c = open_client(cfg);
    dlock_lock *l = open_lock(c, "bench-uncontended");
    double secs;
    size_t n = bench_timed_cycles(lock_cycle, l, samples, &secs);
    bench_record_cycles(cfg->label, "uncontended", samples, n, secs);
    report_keep_latencies(cfg->label, samples, n);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- contended --------------------------------------------------------------------- */

struct grant_rec {
    int64_t asked_us, granted_us, released_us, release_returned_us;
    int worker;
};

struct shared {
    int64_t start_us, end_us;
    long long attempts, grants; /* the clients' own counts, added up at their end */
    size_t n;
    struct grant_rec rec[200000];
};

#define MAX_RECS (sizeof ((struct shared *)0)->rec / sizeof ((struct shared *)0)->rec[0])

static double metric_value(const char *text, const char *name);

/* Adds c's acquire attempts and grants to the run's totals: how many tries
 * at the backend a grant costs under contention (1 when every waiter is
 * woken exactly when its turn comes; more when waiters poll or a release
 * wakes several). */
static void count_attempts(dlock_client *c, struct shared *sh)
{
    char *text = NULL;
    if (dlock_client_metrics(c, &text) != DLOCK_OK)
        return;
    double attempts = metric_value(text, "dlock_acquire_attempts_total"), grants = metric_value(text, "dlock_grants_total");
    if (attempts >= 0 && grants >= 0) {
        __atomic_fetch_add(&sh->attempts, (long long)attempts, __ATOMIC_SEQ_CST);
        __atomic_fetch_add(&sh->grants, (long long)grants, __ATOMIC_SEQ_CST);
    }
    free(text);
}

static void worker_loop(const struct bench_config *cfg, struct shared *sh, int worker, dlock_client *shared_client)
{
    dlock_client *c = shared_client ? shared_client : open_client(cfg);
    dlock_lock *l = open_lock(c, "bench-contended");
    while (bench_now_us() < sh->start_us)
        bench_sleep_us(100);
    while (bench_now_us() < sh->end_us) {
        int64_t asked = bench_now_us();
        int rc = dlock_acquire(l, 5000);
        if (rc == DLOCK_ETIMEDOUT)
            continue;
        if (rc != DLOCK_OK)
            bench_die("acquire", rc);
        int64_t granted = bench_now_us();
        bench_sleep_us(opt.hold_ms * 1000);
        int64_t released = bench_now_us();
        if ((rc = dlock_release(l)) != DLOCK_OK)
            bench_die("release", rc);
        int64_t returned = bench_now_us();
        size_t i = __atomic_fetch_add(&sh->n, 1, __ATOMIC_SEQ_CST);
        if (i < MAX_RECS)
            sh->rec[i] = (struct grant_rec){ asked, granted, released, returned, worker };
        bench_sleep_us(opt.pause_ms * 1000);
    }
    dlock_lock_free(l);
    if (!shared_client) {
        count_attempts(c, sh);
        dlock_client_close(c);
    }
}

struct thread_arg {
    const struct bench_config *cfg;
    struct shared *sh;
    int worker;
    dlock_client *client;
};

static void *worker_thread(void *arg)
{
    struct thread_arg *a = arg;
    worker_loop(a->cfg, a->sh, a->worker, a->client);
    return NULL;
}

static int cmp_grant(const void *a, const void *b)
{
    const struct grant_rec *x = a, *y = b;
    return x->granted_us < y->granted_us ? -1 : x->granted_us > y->granted_us;
}

void run_contended(const struct bench_config *cfg, int workers, int64_t *samples)
{
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (workers > 64)
        workers = 64;
    sh->n = 0;
    sh->attempts = sh->grants = 0;
    sh->start_us = bench_now_us() + 300000; /* every worker connected first */
    sh->end_us = sh->start_us + (int64_t)(opt.duration_s * 1e6);
    pid_t pids[64];
    pthread_t threads[64];
    struct thread_arg targs[64];
    dlock_client *shared_client = opt.threads ? open_client(cfg) : NULL;
    for (int i = 0; i < workers; i++) {
        if (opt.threads) {
            targs[i] = (struct thread_arg){ cfg, sh, i, shared_client };
            pthread_create(&threads[i], NULL, worker_thread, &targs[i]);
        } else if ((pids[i] = fork()) == 0) {
            worker_loop(cfg, sh, i, NULL);
            _exit(0);
        }
    }
    while (bench_now_us() < sh->start_us)
        bench_sleep_us(1000);
    long long commands_before = redis_commands_sent(cfg);
    for (int i = 0; i < workers; i++) {
        if (opt.threads)
            pthread_join(threads[i], NULL);
        else
            waitpid(pids[i], NULL, 0);
    }
    long long commands = commands_before >= 0 ? redis_commands_sent(cfg) - commands_before : -1;
    if (shared_client) {
        count_attempts(shared_client, sh);
        dlock_client_close(shared_client);
    }

    size_t n = sh->n < MAX_RECS ? sh->n : MAX_RECS;
    qsort(sh->rec, n, sizeof sh->rec[0], cmp_grant);
    size_t nh = 0, nw = 0, nc = 0;
    int64_t *waits = malloc((n + 1) * sizeof *waits);
    int64_t *from_call = malloc((n + 1) * sizeof *from_call);
    int per_worker[64] = { 0 };
    for (size_t i = 0; i < n; i++) {
        per_worker[sh->rec[i].worker]++;
        waits[nw++] = sh->rec[i].granted_us - sh->rec[i].asked_us;
        /* A hand-off: the next holder was already waiting when the lock was
         * let go; measured from the return of the release. */
        if (i > 0 && sh->rec[i].asked_us < sh->rec[i - 1].released_us) {
            int64_t h = sh->rec[i].granted_us - sh->rec[i - 1].release_returned_us;
            samples[nh++] = h > 0 ? h : 0;
            /* From the release's call instead: the non-blocking API cannot
             * see a release's return before the next grant, so its
             * hand-off ("pending") is measured this way. */
            h = sh->rec[i].granted_us - sh->rec[i - 1].released_us;
            from_call[nc++] = h > 0 ? h : 0;
        }
    }
    int min_w = per_worker[0], max_w = per_worker[0];
    for (int i = 1; i < workers; i++) {
        min_w = per_worker[i] < min_w ? per_worker[i] : min_w;
        max_w = per_worker[i] > max_w ? per_worker[i] : max_w;
    }
    char scenario[40];
    snprintf(scenario, sizeof scenario, "contended-%dw", workers);
    double secs = (double)(sh->end_us - sh->start_us) / 1e6;
    figure_add(cfg->label, scenario, "grants/s", "ops/s", (double)n / secs);
    figure_add(cfg->label, scenario, "handoff p50", "us", (double)bench_percentile(samples, nh, 0.50));
    figure_add(cfg->label, scenario, "handoff p99", "us", (double)bench_percentile(samples, nh, 0.99));
    figure_add(cfg->label, scenario, "handoff from release call p50", "us", (double)bench_percentile(from_call, nc, 0.50));
    figure_add(cfg->label, scenario, "handoff from release call p99", "us", (double)bench_percentile(from_call, nc, 0.99));
    figure_add(cfg->label, scenario, "wait p50", "us", (double)bench_percentile(waits, nw, 0.50));
    figure_add(cfg->label, scenario, "wait p99", "us", (double)bench_percentile(waits, nw, 0.99));
    figure_add(cfg->label, scenario, "wait max", "us", nw ? (double)waits[nw - 1] : -1);
    figure_add(cfg->label, scenario, "grants, least busy worker", "grants", min_w);
    figure_add(cfg->label, scenario, "grants, busiest worker", "grants", max_w);
    if (commands >= 0 && n > 0)
        figure_add(cfg->label, scenario, "server commands/grant", "cmds", (double)commands / (double)n);
    if (sh->grants > 0)
        figure_add(cfg->label, scenario, "acquire attempts/grant", "tries", (double)sh->attempts / (double)sh->grants);
    free(waits);
    free(from_call);
    munmap(sh, sizeof *sh);
}

/* ---- many locks ------------------------------------------------------------------- */

static double metric_value(const char *text, const char *name)
{
    const char *at = strstr(text, name);
    if (!at)
        return -1;
    at = strchr(at, '}');
    return at ? atof(at + 1) : -1;
}

/* Heap bytes in use: exact where RSS is page-grained and reuses freed pages. */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

void run_many_locks(const struct bench_config *cfg)
{
    dlock_client *c = open_client(cfg);
    dlock_lock **locks = malloc((size_t)opt.locks * sizeof *locks);
    char name[32];
    size_t heap_before = heap_in_use();
    for (int i = 0; i < opt.locks; i++) {
        snprintf(name, sizeof name, "bench-many-%d", i);
        locks[i] = open_lock(c, name);
        int rc = dlock_acquire(locks[i], 0);
        if (rc != DLOCK_OK)
            bench_die("acquire", rc);
    }
    size_t heap_after = heap_in_use();
    char *before, *after;
    dlock_client_metrics(c, &before);
    bench_sleep_us((int64_t)(opt.duration_s * 1e6));
    dlock_client_metrics(c, &after);
    double secs = metric_value(after, "dlock_renewal_round_seconds_sum") -
                  metric_value(before, "dlock_renewal_round_seconds_sum");
    double renewals = metric_value(after, "dlock_renewals_total") - metric_value(before, "dlock_renewals_total");
    if (renewals > 0) {
        figure_add(cfg->label, "many-locks", "renewal per lock-tick", "us", secs * 1e6 / renewals);
        figure_add(cfg->label, "many-locks", "renewal of all locks", "ms", secs * 1e3 * opt.locks / renewals);
    }
    figure_add(cfg->label, "many-locks", "client heap per held lock", "bytes",
               heap_after > heap_before ? (double)(heap_after - heap_before) / opt.locks : 0);
    free(before);
    free(after);
    for (int i = 0; i < opt.locks; i++) {
        dlock_release(locks[i]);
        dlock_lock_free(locks[i]);
    }
    free(locks);
    dlock_client_close(c);
}
