/* contrib/bench/bench_cache.c - lock caching against no caching, in one
 * run: the same config file, its handles opened with DLOCK_LOCK_NOCACHE
 * ("off") and with DLOCK_LOCK_CACHE ("on"), one after the other in each
 * repeat. Every actor is a thread with a client of its own, so a hold kept
 * by one is another owner's to ask for, as between processes.
 *
 *   cache-handoff     the hold goes to another client: "queued" (its
 *                     acquire waits before the release) and "idle" (it
 *                     asks 5 ms after the release, while the hold sits in
 *                     the holder's cache); the redis PING p50 beside them
 *   cache-affinity    4 clients, holds of 0.2 ms; after each release the
 *                     holder picks the next actor: itself with probability
 *                     p, else another one (p = 0.9, 0.5, 0)
 *   cache-starvation  one client in a tight loop (holds of 0.2 ms), a
 *                     cold client asking every 10 ms: its waits */
#include "config.h"

#include "bench.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOLD_US 200
#define HANDOFF_HOLD_US 1000
#define IDLE_GAP_US 5000
#define COLD_EVERY_US 10000
#define AFFINITY_CLIENTS 4
#define MAX_COLD 4096

static const char *const variant_name[2] = { "off", "on" };

static dlock_lock *cache_lock(dlock_client *c, const char *name, bool on)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = on ? DLOCK_LOCK_CACHE : DLOCK_LOCK_NOCACHE;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    if (rc != DLOCK_OK)
        bench_die("dlock_lock_new", rc);
    return l;
}

static dlock_client *cache_client(const struct bench_config *cfg)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, cfg->path);
    if (rc != DLOCK_OK)
        bench_die("dlock_client_open", rc);
    return c;
}

/* Whether cfg's backend keeps holds; a note on stderr when not. */
static bool caching_offered(const struct bench_config *cfg, const char *scenario)
{
    dlock_client *c = cache_client(cfg);
    bool yes = (dlock_client_capabilities(c) & DLOCK_CAP_CACHE) != 0;
    dlock_client_close(c);
    if (!yes)
        fprintf(stderr, "dlock-bench: %s: %s cannot keep holds (no DLOCK_CAP_CACHE), skipped\n", cfg->label,
                scenario);
    return yes;
}

static void must(const char *what, int rc)
{
    if (rc != DLOCK_OK)
        bench_die(what, rc);
}

/* Holds for us microseconds on the CPU: a sleep that short would last
 * tens of microseconds longer than asked. */
static void hold_for(int64_t us)
{
    int64_t end = bench_now_us() + us;
    while (bench_now_us() < end)
        ;
}

static char scenario_name[64];

static const char *named(const char *what, bool on)
{
    snprintf(scenario_name, sizeof scenario_name, "cache-%s-%s", what, variant_name[on]);
    return scenario_name;
}

/* ---- hand-off ---------------------------------------------------------------- */

/* The holder (client A) and the taker (client B) step through a cycle
 * under one mutex: A holds, B asks (queued: before A releases; idle: 5 ms
 * after), B's grant is timed, both go round again. */
struct handoff {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const struct bench_config *cfg;
    bool on, idle;
    int stage;              /* 0 A to take it, 1 held, 2 B asking, 3 released, 4 B done */
    bool stop;
    int64_t released_us;    /* when A called its release */
    int64_t *samples;
    size_t n;
};

static void handoff_wait(struct handoff *h, int stage)
{
    while (h->stage != stage && !h->stop)
        pthread_cond_wait(&h->cv, &h->mu);
}

static void handoff_set(struct handoff *h, int stage)
{
    h->stage = stage;
    pthread_cond_broadcast(&h->cv);
}

static void *handoff_holder(void *arg)
{
    struct handoff *h = arg;
    dlock_client *c = cache_client(h->cfg);
    dlock_lock *l = cache_lock(c, "bench-cache-handoff", h->on);
    pthread_mutex_lock(&h->mu);
    for (;;) {
        handoff_wait(h, 0);
        if (h->stop)
            break;
        pthread_mutex_unlock(&h->mu);
        must("dlock_acquire", dlock_acquire(l, -1));
        if (h->idle) {
            /* Used twice, the second time from the cache: half the kept
             * holds serve a hit, as for a name a client keeps using, so
             * the switch for names taken in turns stays off. */
            must("dlock_release", dlock_release(l));
            must("dlock_acquire", dlock_acquire(l, -1));
        }
        pthread_mutex_lock(&h->mu);
        handoff_set(h, 1);
        if (!h->idle)
            handoff_wait(h, 2);
        pthread_mutex_unlock(&h->mu);
        /* Queued: the taker's request reaches the server meanwhile. */
        hold_for(HANDOFF_HOLD_US);
        int64_t t = bench_now_us();
        must("dlock_release", dlock_release(l));
        pthread_mutex_lock(&h->mu);
        h->released_us = t;
        handoff_set(h, 3);
    }
    pthread_mutex_unlock(&h->mu);
    dlock_lock_free(l);
    dlock_client_close(c);
    return NULL;
}

static void *handoff_taker(void *arg)
{
    struct handoff *h = arg;
    dlock_client *c = cache_client(h->cfg);
    dlock_lock *l = cache_lock(c, "bench-cache-handoff", h->on);
    pthread_mutex_lock(&h->mu);
    for (;;) {
        handoff_wait(h, h->idle ? 3 : 1);
        if (h->stop)
            break;
        int64_t asked_us;
        if (h->idle) {
            int64_t at = h->released_us + IDLE_GAP_US;
            pthread_mutex_unlock(&h->mu);
            while (bench_now_us() < at)
                bench_sleep_us(at - bench_now_us());
            asked_us = bench_now_us();
        } else {
            handoff_set(h, 2);
            pthread_mutex_unlock(&h->mu);
            asked_us = 0;
        }
        must("dlock_acquire", dlock_acquire(l, -1));
        int64_t granted_us = bench_now_us();
        must("dlock_release", dlock_release(l));
        pthread_mutex_lock(&h->mu);
        if (!h->idle)
            handoff_wait(h, 3); /* the release's call time is set */
        if (h->n < MAX_SAMPLES)
            h->samples[h->n++] = granted_us - (h->idle ? asked_us : h->released_us);
        handoff_set(h, 0);
    }
    pthread_mutex_unlock(&h->mu);
    dlock_lock_free(l);
    dlock_client_close(c);
    return NULL;
}

static void handoff_run(const struct bench_config *cfg, bool on, bool idle, int64_t *samples)
{
    struct handoff h = { .cfg = cfg, .on = on, .idle = idle, .samples = samples };
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    pthread_t a, b;
    pthread_create(&a, NULL, handoff_holder, &h);
    pthread_create(&b, NULL, handoff_taker, &h);
    bench_sleep_us((int64_t)(opt.duration_s * 1e6));
    pthread_mutex_lock(&h.mu);
    h.stop = true;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    const char *scenario = named(idle ? "handoff-idle" : "handoff-queued", on);
    figure_add(cfg->label, scenario, "handoffs", "n", (double)h.n);
    figure_add(cfg->label, scenario, "handoff p50", "us", (double)bench_percentile(samples, h.n, 0.50));
    figure_add(cfg->label, scenario, "handoff p99", "us", (double)bench_percentile(samples, h.n, 0.99));
    pthread_cond_destroy(&h.cv);
    pthread_mutex_destroy(&h.mu);
}

/* The round trip to cfg's redis, as the p50 of 2,000 PINGs; -1 when cfg
 * is not a single redis server. */
static double ping_p50_us(const struct bench_config *cfg, int64_t *samples)
{
    redisContext *r = bench_redis_connect_for(cfg);
    if (!r)
        return -1;
    size_t n = 0;
    for (; n < 2000; n++) {
        int64_t t = bench_now_us();
        redisReply *rep = redisCommand(r, "PING");
        if (!rep)
            break;
        freeReplyObject(rep);
        samples[n] = bench_now_us() - t;
    }
    redisFree(r);
    return n ? (double)bench_percentile(samples, n, 0.50) : -1;
}

void run_cache_handoff(const struct bench_config *cfg, int64_t *samples)
{
    if (!caching_offered(cfg, "cache-handoff"))
        return;
    for (int idle = 0; idle < 2; idle++)
        for (int on = 0; on < 2; on++)
            handoff_run(cfg, on, idle, samples);
    double rtt = ping_p50_us(cfg, samples);
    if (rtt >= 0)
        figure_add(cfg->label, "cache-handoff", "PING p50", "us", rtt);
}

/* ---- affinity ------------------------------------------------------------------ */

struct affinity {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const struct bench_config *cfg;
    bool on;
    double p;               /* the holder picks itself next with this probability */
    int next;               /* the client that acts next */
    bool stop;
    long long ops;
    unsigned seed;
};

struct affinity_arg {
    struct affinity *a;
    int me;
};

static void *affinity_client(void *arg)
{
    struct affinity_arg *aa = arg;
    struct affinity *a = aa->a;
    dlock_client *c = cache_client(a->cfg);
    dlock_lock *l = cache_lock(c, "bench-cache-affinity", a->on);
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->next != aa->me && !a->stop)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->stop)
            break;
        pthread_mutex_unlock(&a->mu);
        must("dlock_acquire", dlock_acquire(l, -1));
        hold_for(HOLD_US);
        must("dlock_release", dlock_release(l));
        pthread_mutex_lock(&a->mu);
        a->ops++;
        double draw = (double)rand_r(&a->seed) / ((double)RAND_MAX + 1);
        if (draw >= a->p) {
            int other = (int)(rand_r(&a->seed) % (AFFINITY_CLIENTS - 1));
            a->next = other >= aa->me ? other + 1 : other;
            pthread_cond_broadcast(&a->cv);
        }
    }
    pthread_mutex_unlock(&a->mu);
    dlock_lock_free(l);
    dlock_client_close(c);
    return NULL;
}

static void affinity_run(const struct bench_config *cfg, bool on, double p)
{
    struct affinity a = { .cfg = cfg, .on = on, .p = p, .next = -1, .seed = 12345 };
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    pthread_t th[AFFINITY_CLIENTS];
    struct affinity_arg args[AFFINITY_CLIENTS];
    for (int i = 0; i < AFFINITY_CLIENTS; i++) {
        args[i] = (struct affinity_arg){ &a, i };
        pthread_create(&th[i], NULL, affinity_client, &args[i]);
    }
    bench_sleep_us(200000); /* every client connected */
    long long commands_before = redis_commands_sent(cfg);
    int64_t t0 = bench_now_us();
    pthread_mutex_lock(&a.mu);
    a.next = 0;
    pthread_cond_broadcast(&a.cv);
    pthread_mutex_unlock(&a.mu);
    bench_sleep_us((int64_t)(opt.duration_s * 1e6));
    pthread_mutex_lock(&a.mu);
    a.stop = true;
    long long ops = a.ops;
    double secs = (double)(bench_now_us() - t0) / 1e6;
    pthread_cond_broadcast(&a.cv);
    pthread_mutex_unlock(&a.mu);
    long long commands = commands_before >= 0 ? redis_commands_sent(cfg) - commands_before : -1;
    for (int i = 0; i < AFFINITY_CLIENTS; i++)
        pthread_join(th[i], NULL);
    char what[32];
    snprintf(what, sizeof what, "affinity-p%g", p);
    const char *scenario = named(what, on);
    figure_add(cfg->label, scenario, "ops/s", "ops/s", (double)ops / secs);
    if (commands >= 0 && ops > 0)
        figure_add(cfg->label, scenario, "server commands/op", "cmds", (double)commands / (double)ops);
    pthread_cond_destroy(&a.cv);
    pthread_mutex_destroy(&a.mu);
}

void run_cache_affinity(const struct bench_config *cfg)
{
    if (!caching_offered(cfg, "cache-affinity"))
        return;
    static const double ps[] = { 0.9, 0.5, 0 };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        for (int on = 0; on < 2; on++)
            affinity_run(cfg, on, ps[i]);
}

/* ---- starvation ---------------------------------------------------------------- */

struct starvation {
    const struct bench_config *cfg;
    bool on;
    volatile int stop;
    long long hot_ops;
};

static void *hot_client(void *arg)
{
    struct starvation *s = arg;
    dlock_client *c = cache_client(s->cfg);
    dlock_lock *l = cache_lock(c, "bench-cache-starve", s->on);
    long long ops = 0;
    while (!__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
        must("dlock_acquire", dlock_acquire(l, -1));
        hold_for(HOLD_US);
        must("dlock_release", dlock_release(l));
        ops++;
    }
    s->hot_ops = ops;
    dlock_lock_free(l);
    dlock_client_close(c);
    return NULL;
}

static void starvation_run(const struct bench_config *cfg, bool on, int64_t *samples)
{
    struct starvation s = { .cfg = cfg, .on = on };
    dlock_client *c = cache_client(cfg);
    dlock_lock *l = cache_lock(c, "bench-cache-starve", on);
    pthread_t hot;
    pthread_create(&hot, NULL, hot_client, &s);
    bench_sleep_us(200000);
    int64_t t0 = bench_now_us(), end = t0 + (int64_t)(opt.duration_s * 1e6);
    size_t n = 0;
    while (bench_now_us() < end && n < MAX_COLD) {
        bench_sleep_us(COLD_EVERY_US);
        int64_t asked = bench_now_us();
        must("dlock_acquire", dlock_acquire(l, -1));
        samples[n++] = bench_now_us() - asked;
        must("dlock_release", dlock_release(l));
    }
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELAXED);
    double secs = (double)(bench_now_us() - t0) / 1e6;
    pthread_join(hot, NULL);
    dlock_lock_free(l);
    dlock_client_close(c);
    const char *scenario = named("starvation", on);
    figure_add(cfg->label, scenario, "cold waits", "n", (double)n);
    figure_add(cfg->label, scenario, "cold wait p50", "us", (double)bench_percentile(samples, n, 0.50));
    figure_add(cfg->label, scenario, "cold wait p99", "us", (double)bench_percentile(samples, n, 0.99));
    figure_add(cfg->label, scenario, "cold wait max", "us", (double)bench_percentile(samples, n, 1.0));
    figure_add(cfg->label, scenario, "hot loop ops/s", "ops/s", (double)s.hot_ops / secs);
}

void run_cache_starvation(const struct bench_config *cfg, int64_t *samples)
{
    if (!caching_offered(cfg, "cache-starvation"))
        return;
    for (int on = 0; on < 2; on++)
        starvation_run(cfg, on, samples);
    double rtt = ping_p50_us(cfg, samples);
    if (rtt >= 0)
        figure_add(cfg->label, "cache-starvation", "PING p50", "us", rtt);
}

/* ---- the figures against each other -------------------------------------------- */

static double median(const struct bench_config *cfg, const char *what, bool on, const char *metric)
{
    return figure_median(cfg->label, named(what, on), metric);
}

static bool taken(double v)
{
    return v == v && v >= 0; /* not NAN, not a missing percentile */
}

void bench_cache_compare(const struct bench_config *cfg)
{
    double rtt = figure_median(cfg->label, "cache-handoff", "PING p50");
    double off = median(cfg, "handoff-queued", false, "handoff p50"), on = median(cfg, "handoff-queued", true, "handoff p50");
    if (taken(off) && taken(on) && off > 0)
        figure_add(cfg->label, "cache-handoff", "queued p50 on / off", "ratio", on / off);
    off = median(cfg, "handoff-idle", false, "handoff p50");
    on = median(cfg, "handoff-idle", true, "handoff p50");
    if (taken(off) && taken(on)) {
        figure_add(cfg->label, "cache-handoff", "idle p50 on - off", "us", on - off);
        if (taken(rtt) && rtt > 0)
            figure_add(cfg->label, "cache-handoff", "idle p50 on - off, in PINGs", "RTT", (on - off) / rtt);
    }
    static const char *const ps[] = { "affinity-p0.9", "affinity-p0.5", "affinity-p0" };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        off = median(cfg, ps[i], false, "ops/s");
        on = median(cfg, ps[i], true, "ops/s");
        if (taken(off) && taken(on) && off > 0) {
            char scenario[48];
            snprintf(scenario, sizeof scenario, "cache-%s", ps[i]);
            figure_add(cfg->label, scenario, "ops/s on / off", "ratio", on / off);
        }
    }
    rtt = figure_median(cfg->label, "cache-starvation", "PING p50");
    on = median(cfg, "starvation", true, "cold wait max");
    if (taken(on) && taken(rtt))
        /* The goal: one hold, three round trips and 5 ms of scheduling. */
        figure_add(cfg->label, "cache-starvation", "on: cold wait max / (hold + 3 RTT + 5 ms)", "ratio",
                   on / (HOLD_US + 3 * rtt + 5000));
}
