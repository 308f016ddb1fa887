/* contrib/bench/bench.h - dlock-bench's shared pieces: options, the backend
 * setups under test, figures, timing. */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <dlock.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_CONFIGS 12
#define MAX_REPEAT 15
#define MAX_WORKER_COUNTS 8
#define MAX_SAMPLES 2000000

struct bench_options {
    double duration_s;
    int repeat;
    int worker_counts[MAX_WORKER_COUNTS];   /* --workers 2,4,8 */
    int nworker_counts;
    bool threads;
    int hold_ms, pause_ms;
    int locks;
    bool fair;
    const char *csv;
    const char *plot_dir;
    int pending;          /* --pending: acquires pending at once (0: 10,000 on redis, 1,000 elsewhere) */
};
extern struct bench_options opt;

/* One backend setup: a config file. */
struct bench_config {
    const char *path;
    char label[64];       /* the file's base name without .conf */
    char backend[32];     /* from the client */
};

/* Figures: one per (config, scenario, metric), with a value per repeat. */
void figure_add(const char *label, const char *scenario, const char *metric, const char *unit, double value);
/* Median of a figure, NAN if absent. */
double figure_median(const char *label, const char *scenario, const char *metric);

/* Scenarios over libdlock (bench_scenarios.c). Each adds figures. */
void run_uncontended(const struct bench_config *cfg, int64_t *samples);
void run_contended(const struct bench_config *cfg, int workers, int64_t *samples);
void run_many_locks(const struct bench_config *cfg);
/* Shared holds and semaphores (bench_shared.c): worker processes, 90 %
 * shared and 10 % exclusive holds on one name ("rw-Nw"), or holds of a
 * semaphore of N/2 permits ("semaphore-Nw"); skipped (with a note) where
 * the backend has none. */
void run_rw(const struct bench_config *cfg, int workers, int64_t *samples);
void run_semaphore(const struct bench_config *cfg, int workers, int64_t *samples);

/* The non-blocking API (bench_pending.c): n acquires pending on one name
 * from one loop thread, then drained ("pending-N"). */
void run_pending(const struct bench_config *cfg, int n, int64_t *samples);

/* Lock caching against no caching, the same config's handles opened with
 * DLOCK_LOCK_NOCACHE and DLOCK_LOCK_CACHE in turn (bench_cache.c):
 * hand-off to another client, 4 clients passing the name with affinity p,
 * a cold client beside a tight loop; skipped where the backend cannot keep
 * holds. bench_cache_compare adds their ratios once all repeats ran. */
void run_cache_handoff(const struct bench_config *cfg, int64_t *samples);
void run_cache_affinity(const struct bench_config *cfg);
void run_cache_starvation(const struct bench_config *cfg, int64_t *samples);
void bench_cache_compare(const struct bench_config *cfg);

/* The plain client loop of each backend (bench_baselines.c): the limit the
 * library is compared with. They return false when the backend has none. */
bool run_baseline_uncontended(const struct bench_config *cfg, int64_t *samples);
bool run_baseline_many_locks(const struct bench_config *cfg);
/* The SQL backends' plain loops (bench_sql_baselines.c); false for other
 * backends or when this dlock-bench was built without that client. */
bool run_sql_baseline_uncontended(const struct bench_config *cfg, int64_t *samples);
/* The ZooKeeper loop (bench_zk_baseline.c), likewise. */
bool run_zk_baseline_uncontended(const struct bench_config *cfg, int64_t *samples);
/* The etcd loop over the JSON gateway (bench_etcd_baseline.c), likewise;
 * false also for an https endpoint. */
bool run_etcd_baseline_uncontended(const struct bench_config *cfg, int64_t *samples);
/* Compacts cfg's etcd (plain http only) at its current revision, dropping
 * what earlier runs left: etcd's ranges step over every deleted key of a
 * prefix until a compaction, so without it each run is slower than the one
 * before, whichever API it measures. Nothing when cfg is not etcd. */
void bench_etcd_compact(const struct bench_config *cfg);
/* A hiredis connection to "host:port" (2 s timeouts, no AUTH), or NULL. */
struct redisContext;
struct redisContext *bench_redis_connect_to(const char *host_port);
/* A hiredis connection to cfg's single redis server (AUTH and SELECT as
 * configured), or NULL for other backends and a cluster. */
struct redisContext *bench_redis_connect_for(const struct bench_config *cfg);
/* The plain Redlock loop over the same masters (bench_redlock_baseline.c):
 * SET NX PX and compare-and-delete sent to all masters at once, a majority
 * counted; false for other backends. */
bool run_redlock_baseline_uncontended(const struct bench_config *cfg, int64_t *samples);
/* Commands the Redis server of cfg has been sent so far, -1 if not Redis. */
long long redis_commands_sent(const struct bench_config *cfg);

/* Output (bench_report.c). */
void report_table(const struct bench_config *configs, int nconfigs);
int report_csv(const char *path);
int report_plots(const char *dir, const struct bench_config *configs, int nconfigs);
/* Latency samples of the last uncontended run of a config, for the plots. */
void report_keep_latencies(const char *label, const int64_t *samples, size_t n);

/* Runs one_cycle(arg) back to back for opt.duration_s (or MAX_SAMPLES
 * cycles), storing each cycle's duration in samples; returns the count and
 * the elapsed seconds. one_cycle exits the program on failure. */
size_t bench_timed_cycles(void (*one_cycle)(void *arg), void *arg, int64_t *samples, double *secs);
/* Records throughput and latency p50/p99 of a timed loop as figures. */
void bench_record_cycles(const char *label, const char *scenario, int64_t *samples, size_t n, double secs);

/* Helpers. */
int64_t bench_now_us(void);
void bench_sleep_us(int64_t us);
int64_t bench_percentile(int64_t *v, size_t n, double p);
void bench_die(const char *what, int rc);

#endif
