/* contrib/dlock-bench.c - measures libdlock against the plain client loop it
 * competes with, in one run, so the figures are ratios (these machines are
 * noisy; absolute numbers from different runs do not compare).
 *
 *   dlock-bench -c FILE [--scenario NAME]... [--duration S] [--repeat R]
 *               [--workers N] [--threads] [--hold-ms X] [--pause-ms Y]
 *               [--locks K] [--fair] [--csv FILE]
 *
 * Scenarios: uncontended, contended, many-locks, and for a redis config the
 * baselines redis-set-nx (SET NX PX + EVALSHA compare-and-delete on one
 * connection) and redis-renew-pipeline (K EVALSHA renewals in one pipeline).
 * Runs are interleaved (A B A B ...) and each figure is reported as the
 * median and [min-max] of the repeats. */
#include "config.h"

#include <dlock.h>

#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <libconfig.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 2000000
#define MAX_REPEAT 15

static struct {
    const char *config;
    double duration_s;
    int repeat;
    int workers;
    bool threads;
    int hold_ms, pause_ms;
    int locks;
    bool fair;
    const char *csv;
    const char *scenarios[8];
    int nscenarios;
} opt = { NULL, 3.0, 3, 8, false, 1, 5, 10000, false, NULL, { 0 }, 0 };

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(int64_t us)
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

static int64_t percentile(int64_t *v, size_t n, double p)
{
    if (n == 0)
        return -1;
    qsort(v, n, sizeof *v, cmp_i64);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "dlock-bench: %s: %s (%s)\n", what, dlock_strerror(rc), dlock_errmsg());
    exit(1);
}

/* ---- results ----------------------------------------------------------------------- */

struct figure {
    char scenario[32], metric[48], unit[16];
    double values[MAX_REPEAT];
    int n;
};
static struct figure figures[64];
static int nfigures;

static void record(const char *scenario, const char *metric, const char *unit, double value)
{
    struct figure *f = NULL;
    for (int i = 0; i < nfigures; i++)
        if (strcmp(figures[i].scenario, scenario) == 0 && strcmp(figures[i].metric, metric) == 0)
            f = &figures[i];
    if (!f) {
        f = &figures[nfigures++];
        snprintf(f->scenario, sizeof f->scenario, "%s", scenario);
        snprintf(f->metric, sizeof f->metric, "%s", metric);
        snprintf(f->unit, sizeof f->unit, "%s", unit);
    }
    if (f->n < MAX_REPEAT)
        f->values[f->n++] = value;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(struct figure *f)
{
    double v[MAX_REPEAT];
    memcpy(v, f->values, sizeof(double) * (size_t)f->n);
    qsort(v, (size_t)f->n, sizeof v[0], cmp_double);
    return f->n % 2 ? v[f->n / 2] : (v[f->n / 2 - 1] + v[f->n / 2]) / 2;
}

static struct figure *find_figure(const char *scenario, const char *metric)
{
    for (int i = 0; i < nfigures; i++)
        if (strcmp(figures[i].scenario, scenario) == 0 && strcmp(figures[i].metric, metric) == 0)
            return &figures[i];
    return NULL;
}

/* ---- redis helpers (baselines, server-side command counts) --------------------------- */

static redisContext *redis_from_config(void)
{
    config_t cfg;
    config_init(&cfg);
    if (!opt.config || config_read_file(&cfg, opt.config) != CONFIG_TRUE) {
        config_destroy(&cfg);
        return NULL;
    }
    const char *backend = "local", *host = "127.0.0.1", *socket = NULL, *password = NULL, *user = NULL;
    int port = 6379, db = 0;
    config_lookup_string(&cfg, "backend", &backend);
    redisContext *c = NULL;
    if (strcmp(backend, "redis") == 0) {
        config_lookup_string(&cfg, "redis.host", &host);
        config_lookup_int(&cfg, "redis.port", &port);
        config_lookup_string(&cfg, "redis.socket", &socket);
        config_lookup_string(&cfg, "redis.password", &password);
        config_lookup_string(&cfg, "redis.user", &user);
        config_lookup_int(&cfg, "redis.db", &db);
        struct timeval tv = { 2, 0 };
        c = socket ? redisConnectUnixWithTimeout(socket, tv) : redisConnectWithTimeout(host, port, tv);
        if (c && !c->err && password) {
            redisReply *r = user ? redisCommand(c, "AUTH %s %s", user, password) : redisCommand(c, "AUTH %s", password);
            if (r)
                freeReplyObject(r);
        }
        if (c && !c->err && db) {
            redisReply *r = redisCommand(c, "SELECT %d", db);
            if (r)
                freeReplyObject(r);
        }
        if (c && c->err) {
            redisFree(c);
            c = NULL;
        }
    }
    config_destroy(&cfg);
    return c;
}

/* Commands clients sent (not the redis.call()s inside scripts, which
 * INFO counts as well): the ones our scripts never call. */
static long long redis_total_commands(redisContext *c)
{
    static const char *const sent[] = { "evalsha", "eval", "subscribe", "unsubscribe", "ping", "script|load" };
    redisReply *r = redisCommand(c, "INFO commandstats");
    long long n = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        n = 0;
        for (size_t i = 0; i < sizeof sent / sizeof sent[0]; i++) {
            char needle[64];
            snprintf(needle, sizeof needle, "cmdstat_%s:calls=", sent[i]);
            const char *at = strstr(r->str, needle);
            if (at)
                n += atoll(at + strlen(needle));
        }
    }
    if (r)
        freeReplyObject(r);
    return n;
}

static char *redis_load(redisContext *c, const char *script)
{
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", script);
    char *sha = r && r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    if (r)
        freeReplyObject(r);
    return sha;
}

/* ---- scenarios ---------------------------------------------------------------------- */

static dlock_client *open_client(void)
{
    dlock_client *c;
    int rc = dlock_client_open(&c, opt.config);
    if (rc != DLOCK_OK)
        die("open", rc);
    return c;
}

static dlock_lock *open_lock(dlock_client *c, const char *name)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = opt.fair ? DLOCK_LOCK_FAIR : 0;
    dlock_lock *l;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    if (rc != DLOCK_OK)
        die("lock", rc);
    return l;
}

static int64_t *samples;

static void scenario_uncontended(void)
{
    dlock_client *c = open_client();
    dlock_lock *l = open_lock(c, "bench-uncontended");
    size_t n = 0;
    int64_t end = now_us() + (int64_t)(opt.duration_s * 1e6), t0 = now_us();
    while (n < MAX_SAMPLES) {
        int64_t a = now_us();
        if (a >= end)
            break;
        int rc = dlock_acquire(l, 0);
        if (rc != DLOCK_OK)
            die("acquire", rc);
        if ((rc = dlock_release(l)) != DLOCK_OK)
            die("release", rc);
        samples[n++] = now_us() - a;
    }
    double secs = (double)(now_us() - t0) / 1e6;
    record("uncontended", "acquire+release/s", "ops/s", (double)n / secs);
    record("uncontended", "latency p50", "us", (double)percentile(samples, n, 0.50));
    record("uncontended", "latency p99", "us", (double)percentile(samples, n, 0.99));
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void scenario_redis_set_nx(void)
{
    redisContext *c = redis_from_config();
    if (!c) {
        fprintf(stderr, "dlock-bench: redis-set-nx needs a redis config\n");
        exit(1);
    }
    char *cad = redis_load(c, "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
                              "else return 0 end");
    size_t n = 0;
    int64_t end = now_us() + (int64_t)(opt.duration_s * 1e6), t0 = now_us();
    const char *token = "0123456789abcdef0123456789abcdef:1";
    while (n < MAX_SAMPLES) {
        int64_t a = now_us();
        if (a >= end)
            break;
        redisReply *r = redisCommand(c, "SET bench-baseline %s NX PX 30000", token);
        if (!r || r->type != REDIS_REPLY_STATUS) {
            fprintf(stderr, "dlock-bench: baseline SET failed\n");
            exit(1);
        }
        freeReplyObject(r);
        r = redisCommand(c, "EVALSHA %s 1 bench-baseline %s", cad, token);
        if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            fprintf(stderr, "dlock-bench: baseline EVALSHA failed\n");
            exit(1);
        }
        freeReplyObject(r);
        samples[n++] = now_us() - a;
    }
    double secs = (double)(now_us() - t0) / 1e6;
    record("redis-set-nx", "acquire+release/s", "ops/s", (double)n / secs);
    record("redis-set-nx", "latency p50", "us", (double)percentile(samples, n, 0.50));
    record("redis-set-nx", "latency p99", "us", (double)percentile(samples, n, 0.99));
    free(cad);
    redisFree(c);
}

/* One grant in the contended scenario, written by workers into shared memory. */
struct grant_rec {
    int64_t asked_us, granted_us, released_us, release_returned_us;
    int worker;
};

struct shared {
    int64_t start_us, end_us;
    size_t n;
    struct grant_rec rec[200000];
};

static void contended_worker(struct shared *sh, int worker, dlock_client *shared_client)
{
    dlock_client *c = shared_client ? shared_client : open_client();
    dlock_lock *l = open_lock(c, "bench-contended");
    while (now_us() < sh->start_us)
        sleep_us(100);
    while (now_us() < sh->end_us) {
        int64_t asked = now_us();
        int rc = dlock_acquire(l, 5000);
        if (rc == DLOCK_ETIMEDOUT)
            continue;
        if (rc != DLOCK_OK)
            die("acquire", rc);
        int64_t granted = now_us();
        sleep_us(opt.hold_ms * 1000);
        int64_t released = now_us();
        if ((rc = dlock_release(l)) != DLOCK_OK)
            die("release", rc);
        int64_t returned = now_us();
        size_t i = __atomic_fetch_add(&sh->n, 1, __ATOMIC_SEQ_CST);
        if (i < sizeof sh->rec / sizeof sh->rec[0])
            sh->rec[i] = (struct grant_rec){ asked, granted, released, returned, worker };
        sleep_us(opt.pause_ms * 1000);
    }
    dlock_lock_free(l);
    if (!shared_client)
        dlock_client_close(c);
}

struct thread_arg {
    struct shared *sh;
    int worker;
    dlock_client *client;
};

static void *contended_thread(void *arg)
{
    struct thread_arg *a = arg;
    contended_worker(a->sh, a->worker, a->client);
    return NULL;
}

static int cmp_grant(const void *a, const void *b)
{
    const struct grant_rec *x = a, *y = b;
    return x->granted_us < y->granted_us ? -1 : x->granted_us > y->granted_us;
}

static void scenario_contended(void)
{
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    sh->n = 0;
    sh->start_us = now_us() + 300000; /* every worker connected first */
    sh->end_us = sh->start_us + (int64_t)(opt.duration_s * 1e6);
    redisContext *rc = redis_from_config();
    pid_t pids[64];
    pthread_t threads[64];
    struct thread_arg targs[64];
    dlock_client *shared_client = NULL;
    int workers = opt.workers > 64 ? 64 : opt.workers;
    if (opt.threads) {
        shared_client = open_client();
        for (int i = 0; i < workers; i++) {
            targs[i] = (struct thread_arg){ sh, i, shared_client };
            pthread_create(&threads[i], NULL, contended_thread, &targs[i]);
        }
    } else {
        for (int i = 0; i < workers; i++) {
            pids[i] = fork();
            if (pids[i] == 0) {
                contended_worker(sh, i, NULL);
                _exit(0);
            }
        }
    }
    while (now_us() < sh->start_us)
        sleep_us(1000);
    long long commands_before = rc ? redis_total_commands(rc) : -1;
    for (int i = 0; i < workers; i++) {
        if (opt.threads)
            pthread_join(threads[i], NULL);
        else
            waitpid(pids[i], NULL, 0);
    }
    long long commands = rc ? redis_total_commands(rc) - commands_before : -1;
    if (shared_client)
        dlock_client_close(shared_client);

    size_t n = sh->n < sizeof sh->rec / sizeof sh->rec[0] ? sh->n : sizeof sh->rec / sizeof sh->rec[0];
    qsort(sh->rec, n, sizeof sh->rec[0], cmp_grant);
    size_t nh = 0, nw = 0, nc = 0;
    int64_t *waits = malloc(n * sizeof *waits);
    int64_t *from_call = malloc(n * sizeof *from_call);
    int per_worker[64] = { 0 };
    for (size_t i = 0; i < n; i++) {
        per_worker[sh->rec[i].worker]++;
        waits[nw++] = sh->rec[i].granted_us - sh->rec[i].asked_us;
        /* A hand-off: the next holder was already waiting when the lock was
         * let go. Measured from the return of the release (the releaser
         * knows it is free), and, more conservatively, from the start of
         * the release call (adds the release's own round trip). */
        if (i > 0 && sh->rec[i].asked_us < sh->rec[i - 1].released_us) {
            int64_t h = sh->rec[i].granted_us - sh->rec[i - 1].release_returned_us;
            samples[nh++] = h > 0 ? h : 0;
            from_call[nc++] = sh->rec[i].granted_us - sh->rec[i - 1].released_us;
        }
    }
    int min_w = per_worker[0], max_w = per_worker[0];
    for (int i = 1; i < workers; i++) {
        min_w = per_worker[i] < min_w ? per_worker[i] : min_w;
        max_w = per_worker[i] > max_w ? per_worker[i] : max_w;
    }
    double secs = (double)(sh->end_us - sh->start_us) / 1e6;
    const char *name = opt.fair ? (opt.threads ? "contended-fair-threads" : "contended-fair")
                                : (opt.threads ? "contended-threads" : "contended");
    record(name, "grants/s", "ops/s", (double)n / secs);
    record(name, "handoff p50", "us", (double)percentile(samples, nh, 0.50));
    record(name, "handoff p99", "us", (double)percentile(samples, nh, 0.99));
    record(name, "handoff from release call p50", "us", (double)percentile(from_call, nc, 0.50));
    record(name, "handoff from release call p99", "us", (double)percentile(from_call, nc, 0.99));
    record(name, "wait p50", "us", (double)percentile(waits, nw, 0.50));
    record(name, "wait p99", "us", (double)percentile(waits, nw, 0.99));
    record(name, "busiest/least busy worker", "ratio", min_w ? (double)max_w / min_w : 0);
    if (commands >= 0 && n > 0)
        record(name, "redis commands/grant", "cmds", (double)commands / (double)n);
    free(waits);
    free(from_call);
    if (rc)
        redisFree(rc);
    munmap(sh, sizeof *sh);
}

static double metric_value(const char *text, const char *name)
{
    const char *at = strstr(text, name);
    if (!at)
        return -1;
    at = strchr(at, '}');
    return at ? atof(at + 1) : -1;
}

static void scenario_many_locks(void)
{
    dlock_client *c = open_client();
    dlock_lock **locks = malloc((size_t)opt.locks * sizeof *locks);
    char name[32];
    for (int i = 0; i < opt.locks; i++) {
        snprintf(name, sizeof name, "bench-many-%d", i);
        locks[i] = open_lock(c, name);
        int rc = dlock_acquire(locks[i], 0);
        if (rc != DLOCK_OK)
            die("acquire", rc);
    }
    char *before, *after;
    dlock_client_metrics(c, &before);
    sleep_us((int64_t)(opt.duration_s * 1e6));
    dlock_client_metrics(c, &after);
    double rounds = metric_value(after, "dlock_renewal_round_seconds_count") -
                    metric_value(before, "dlock_renewal_round_seconds_count");
    double secs = metric_value(after, "dlock_renewal_round_seconds_sum") -
                  metric_value(before, "dlock_renewal_round_seconds_sum");
    double renewals = metric_value(after, "dlock_renewals_total") - metric_value(before, "dlock_renewals_total");
    if (rounds > 0) {
        record("many-locks", "renewal per lock-tick", "us", secs * 1e6 / (renewals > 0 ? renewals : 1));
        record("many-locks", "renewal of all locks", "ms", secs * 1e3 * opt.locks / (renewals > 0 ? renewals : 1));
    }
    free(before);
    free(after);
    for (int i = 0; i < opt.locks; i++) {
        dlock_release(locks[i]);
        dlock_lock_free(locks[i]);
    }
    free(locks);
    dlock_client_close(c);
}

static void scenario_redis_renew_pipeline(void)
{
    redisContext *c = redis_from_config();
    if (!c) {
        fprintf(stderr, "dlock-bench: redis-renew-pipeline needs a redis config\n");
        exit(1);
    }
    /* The same single-lock renewal a naive client would send per lock. */
    char *renew = redis_load(c, "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then "
                                "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end");
    char key[48];
    for (int i = 0; i < opt.locks; i++) {
        snprintf(key, sizeof key, "bench-pipe-%d", i);
        redisAppendCommand(c, "HSET %s owner:1 1", key);
    }
    for (int i = 0; i < opt.locks; i++) {
        void *r;
        redisGetReply(c, &r);
        freeReplyObject(r);
    }
    int64_t t0 = now_us();
    for (int i = 0; i < opt.locks; i++) {
        snprintf(key, sizeof key, "bench-pipe-%d", i);
        redisAppendCommand(c, "EVALSHA %s 1 %s owner:1 30000", renew, key);
    }
    for (int i = 0; i < opt.locks; i++) {
        void *r;
        if (redisGetReply(c, &r) != REDIS_OK) {
            fprintf(stderr, "dlock-bench: pipeline failed\n");
            exit(1);
        }
        freeReplyObject(r);
    }
    double ms = (double)(now_us() - t0) / 1e3;
    record("redis-renew-pipeline", "renewal of all locks", "ms", ms);
    record("redis-renew-pipeline", "renewal per lock-tick", "us", ms * 1e3 / opt.locks);
    for (int i = 0; i < opt.locks; i++) {
        snprintf(key, sizeof key, "bench-pipe-%d", i);
        redisAppendCommand(c, "DEL %s", key);
    }
    for (int i = 0; i < opt.locks; i++) {
        void *r;
        redisGetReply(c, &r);
        freeReplyObject(r);
    }
    free(renew);
    redisFree(c);
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    { "uncontended", scenario_uncontended },
    { "redis-set-nx", scenario_redis_set_nx },
    { "contended", scenario_contended },
    { "many-locks", scenario_many_locks },
    { "redis-renew-pipeline", scenario_redis_renew_pipeline },
};

static void print_ratio(const char *what, const char *s1, const char *m1, const char *s2, const char *m2)
{
    struct figure *a = find_figure(s1, m1), *b = find_figure(s2, m2);
    static bool heading;
    if (!a || !b || median_of(b) == 0)
        return;
    if (!heading)
        printf("\nratios (medians):\n");
    heading = true;
    printf("  %-58s %.2f\n", what, median_of(a) / median_of(b));
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' }, { "scenario", required_argument, NULL, 's' },
        { "duration", required_argument, NULL, 'd' }, { "repeat", required_argument, NULL, 'r' },
        { "workers", required_argument, NULL, 'w' }, { "threads", no_argument, NULL, 't' },
        { "hold-ms", required_argument, NULL, 'H' }, { "pause-ms", required_argument, NULL, 'P' },
        { "locks", required_argument, NULL, 'k' }, { "fair", no_argument, NULL, 'f' },
        { "csv", required_argument, NULL, 'o' }, { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "c:s:d:r:w:tH:P:k:fo:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c': opt.config = optarg; break;
        case 's':
            if (opt.nscenarios < 8)
                opt.scenarios[opt.nscenarios++] = optarg;
            break;
        case 'd': opt.duration_s = atof(optarg); break;
        case 'r': opt.repeat = atoi(optarg) < 1 ? 1 : atoi(optarg) > MAX_REPEAT ? MAX_REPEAT : atoi(optarg); break;
        case 'w': opt.workers = atoi(optarg); break;
        case 't': opt.threads = true; break;
        case 'H': opt.hold_ms = atoi(optarg); break;
        case 'P': opt.pause_ms = atoi(optarg); break;
        case 'k': opt.locks = atoi(optarg); break;
        case 'f': opt.fair = true; break;
        case 'o': opt.csv = optarg; break;
        default:
            fprintf(ch == 'h' ? stdout : stderr,
                    "usage: dlock-bench -c FILE [--scenario NAME]... [--duration S] [--repeat R]\n"
                    "       [--workers N] [--threads] [--hold-ms X] [--pause-ms Y] [--locks K] [--fair] [--csv FILE]\n"
                    "scenarios: uncontended contended many-locks redis-set-nx redis-renew-pipeline\n");
            return ch == 'h' ? 0 : 64;
        }
    }
    if (opt.nscenarios == 0) {
        opt.scenarios[opt.nscenarios++] = "uncontended";
        opt.scenarios[opt.nscenarios++] = "contended";
    }
    samples = malloc(MAX_SAMPLES * sizeof *samples);
    signal(SIGPIPE, SIG_IGN);
    bool progress = isatty(STDERR_FILENO);
    for (int r = 0; r < opt.repeat; r++) {
        for (int s = 0; s < opt.nscenarios; s++) {
            bool found = false;
            for (size_t k = 0; k < sizeof scenarios / sizeof scenarios[0]; k++)
                if (strcmp(scenarios[k].name, opt.scenarios[s]) == 0) {
                    if (progress)
                        fprintf(stderr, "\r[%d/%d] %-24s", r + 1, opt.repeat, opt.scenarios[s]);
                    scenarios[k].run();
                    found = true;
                }
            if (!found) {
                fprintf(stderr, "dlock-bench: unknown scenario '%s'\n", opt.scenarios[s]);
                return 64;
            }
        }
    }
    if (progress)
        fprintf(stderr, "\r%40s\r", "");
    printf("%-24s %-28s %14s  %-26s %s\n", "scenario", "metric", "median", "[min - max]", "unit");
    FILE *csv = opt.csv ? fopen(opt.csv, "w") : NULL;
    if (csv)
        fprintf(csv, "backend,scenario,metric,median,min,max,unit\n");
    for (int i = 0; i < nfigures; i++) {
        struct figure *f = &figures[i];
        double lo = f->values[0], hi = f->values[0];
        for (int k = 1; k < f->n; k++) {
            lo = f->values[k] < lo ? f->values[k] : lo;
            hi = f->values[k] > hi ? f->values[k] : hi;
        }
        char range[64];
        snprintf(range, sizeof range, "[%.1f - %.1f]", lo, hi);
        printf("%-24s %-28s %14.1f  %-26s %s\n", f->scenario, f->metric, median_of(f), range, f->unit);
        if (csv)
            fprintf(csv, "%s,%s,%s,%.3f,%.3f,%.3f,%s\n", opt.config ? opt.config : "default", f->scenario,
                    f->metric, median_of(f), lo, hi, f->unit);
    }
    if (csv)
        fclose(csv);
    print_ratio("uncontended throughput / plain SET NX PX + EVALSHA", "uncontended", "acquire+release/s",
                "redis-set-nx", "acquire+release/s");
    print_ratio("renewing all locks / one pipeline of single-lock EVALSHA", "many-locks", "renewal of all locks",
                "redis-renew-pipeline", "renewal of all locks");
    free(samples);
    return 0;
}
