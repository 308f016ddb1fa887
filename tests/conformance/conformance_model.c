/* tests/conformance/conformance_model.c - a seeded, randomized test checked
 * against a sequential model of what a name may grant.
 *
 * Several clients, two threads each, run random sequences of operations on
 * a few names: acquire in every kind the backend has (exclusive, shared, a
 * semaphore of 1 or of 2 permits), trying once or waiting; hold a random
 * time, now and then longer than a lease (the watchdog must keep it);
 * downgrade; release. A controller thread meanwhile cancels waits and,
 * where the backend can, breaks holds (`dlock break`). Every result is
 * logged with CLOCK_MONOTONIC stamps, and the history is then checked:
 *
 *  - an answer is one the API documents for the call;
 *  - holds whose windows meet are of kinds that may hold together: no
 *    exclusive hold meets any other, no shared hold meets a permit, no
 *    permits of different N meet, and never more than N permits at once.
 *    A hold's window runs from the return of its grant to the call of its
 *    release, cut at a break of its name or at its loss; a downgraded
 *    hold is exclusive up to the call of its downgrade and shared after;
 *  - a hold that began after another ended (its acquire called after that
 *    release returned) has a greater fence, and no two holds share one;
 *  - no hold is lost but by a break.
 *
 * DLOCK_MODEL_SEED picks the seed (else one is drawn, and printed in every
 * run's summary and on failure); the same seed gives every thread the same
 * sequence of operations, though not the same interleaving with the
 * others. DLOCK_MODEL_MS is the run's length (default 3000: CI's bounded
 * run; give minutes for a long local run). Part of the conformance suite
 * (conformance.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "conformance.h"
#include "../support/test_time.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct conformance_target *target;

enum { CLIENTS = 3, THREADS_PER_CLIENT = 2, WORKERS = CLIENTS * THREADS_PER_CLIENT, NAMES = 3, MAX_HOLDS = 20000,
       MAX_BREAKS = 256, LEASE_MS = 3000 };

struct kind {
    const char *label;
    unsigned mode;
    unsigned permits;
};

static const struct kind kinds[] = {
    { "exclusive", DLOCK_MODE_EXCLUSIVE, 0 },
    { "shared", DLOCK_MODE_SHARED, 0 },
    { "semaphore(1)", DLOCK_MODE_SEMAPHORE, 1 },
    { "semaphore(2)", DLOCK_MODE_SEMAPHORE, 2 },
};

static const char *const names[NAMES] = { "model-a", "model-b", "model-c" };

/* One hold, as its worker saw it. */
struct hold {
    int worker, name, kind;
    uint64_t fence;
    int64_t acquire_called, granted, downgrade_called, release_called, release_returned, lost_at;
    int release_rc;
};

struct break_event {
    int name;
    int64_t called, returned;
};

/* The history, shared by the workers. */
static struct {
    pthread_mutex_t mu;
    struct hold holds[MAX_HOLDS];
    int nholds;
    struct break_event breaks[MAX_BREAKS];
    int nbreaks;
    char bad_answers[2048];
    int answers, grants, busy, timeouts, refused_kind, cancelled, downgrades, breaks_done;
} history;

static dlock_client *clients[CLIENTS];
static unsigned caps;
static volatile int stop_now;
static int64_t run_ms;

/* A small PRNG of our own: the same seed gives the same sequence on every
 * libc. */
static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int below(uint64_t *s, int n)
{
    return (int)(next_random(s) % (uint64_t)n);
}

static void bad_answer(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&history.mu);
    size_t used = strlen(history.bad_answers);
    if (used + strlen(line) + 2 < sizeof history.bad_answers)
        snprintf(history.bad_answers + used, sizeof history.bad_answers - used, "%s\n", line);
    pthread_mutex_unlock(&history.mu);
}

static void on_lost(dlock_lock *lock, void *arg)
{
    (void)lock;
    int64_t *lost_at = arg;
    __atomic_store_n(lost_at, now_us(), __ATOMIC_SEQ_CST);
}

/* Whether the backend has the kind. */
static bool kind_usable(const struct kind *k)
{
    if (k->mode == DLOCK_MODE_SHARED)
        return caps & DLOCK_CAP_SHARED;
    if (k->mode == DLOCK_MODE_SEMAPHORE)
        return caps & DLOCK_CAP_SEMAPHORE;
    return true;
}

/* A kind for name n: the first name is only ever a lock, the others mix
 * every kind, the third leaning to semaphores; so mixing is tried, and
 * locks are still granted where a name once asked for as a semaphore
 * stays one (local). */
static int pick_kind(uint64_t *s, int n)
{
    static const int leaning[NAMES][4] = { { 50, 50, 0, 0 }, { 25, 25, 25, 25 }, { 10, 10, 40, 40 } };
    for (;;) {
        int r = below(s, 100), k = 0;
        while (r >= leaning[n][k]) {
            r -= leaning[n][k];
            k++;
        }
        if (kind_usable(&kinds[k]))
            return k;
    }
}

struct worker {
    int index;
    uint64_t seed;
};

static void record_hold(const struct hold *h)
{
    pthread_mutex_lock(&history.mu);
    if (history.nholds < MAX_HOLDS)
        history.holds[history.nholds++] = *h;
    pthread_mutex_unlock(&history.mu);
}

static void count(int *field)
{
    __atomic_add_fetch(field, 1, __ATOMIC_RELAXED);
}

static void *work(void *arg)
{
    struct worker *w = arg;
    uint64_t s = w->seed;
    dlock_client *c = clients[w->index / THREADS_PER_CLIENT];
    int64_t end = now_ms() + run_ms;
    while (!__atomic_load_n(&stop_now, __ATOMIC_RELAXED) && now_ms() < end) {
        struct hold h = { .worker = w->index, .name = below(&s, NAMES) };
        h.kind = pick_kind(&s, h.name);
        const struct kind *k = &kinds[h.kind];
        int64_t wait_ms = below(&s, 2) ? 0 : 20 + below(&s, 300);
        int hold_ms = below(&s, 50) == 0 ? LEASE_MS + 200 : below(&s, 30); /* now and then past a lease */
        bool downgrade = k->mode == DLOCK_MODE_EXCLUSIVE && (caps & DLOCK_CAP_DOWNGRADE) && below(&s, 4) == 0;
        dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
        o.mode = k->mode;
        o.permits = k->permits;
        o.on_lost = on_lost;
        o.on_lost_arg = &h.lost_at;
        dlock_lock *l = NULL;
        int rc = dlock_lock_new(c, names[h.name], strlen(names[h.name]), &o, &l);
        if (rc != DLOCK_OK) {
            bad_answer("worker %d: lock_new(%s, %s): %s: %s", w->index, names[h.name], k->label, dlock_strerror(rc),
                       dlock_errmsg());
            break;
        }
        h.acquire_called = now_us();
        rc = dlock_acquire(l, wait_ms);
        h.granted = now_us();
        count(&history.answers);
        if (rc == DLOCK_OK) {
            count(&history.grants);
            if ((caps & DLOCK_CAP_FENCE) && dlock_fence(l, &h.fence) != DLOCK_OK)
                h.fence = 0;
            sleep_ms(hold_ms);
            if (downgrade) {
                h.downgrade_called = now_us();
                int drc = dlock_downgrade(l);
                if (drc == DLOCK_OK)
                    count(&history.downgrades);
                else if (drc != DLOCK_ELOST && drc != DLOCK_ENOTSUP)
                    bad_answer("worker %d: downgrade of %s: %s: %s", w->index, names[h.name], dlock_strerror(drc),
                               dlock_errmsg());
                sleep_ms(below(&s, 20));
            }
            h.release_called = now_us();
            h.release_rc = dlock_release(l);
            h.release_returned = now_us();
            if (h.release_rc != DLOCK_OK && h.release_rc != DLOCK_ELOST)
                bad_answer("worker %d: release of %s (%s): %s: %s", w->index, names[h.name], k->label,
                           dlock_strerror(h.release_rc), dlock_errmsg());
            h.lost_at = __atomic_load_n(&h.lost_at, __ATOMIC_SEQ_CST);
            record_hold(&h);
        } else if (rc == DLOCK_EBUSY && wait_ms == 0) {
            count(&history.busy);
        } else if (rc == DLOCK_ETIMEDOUT && wait_ms != 0) {
            count(&history.timeouts);
        } else if (rc == DLOCK_EINVAL) {
            count(&history.refused_kind); /* a name in use in another kind, or with another N */
        } else if (rc == DLOCK_ECANCELLED && wait_ms != 0) {
            count(&history.cancelled);
        } else {
            bad_answer("worker %d: acquire(%s, %s, wait %lld): %s: %s", w->index, names[h.name], k->label,
                       (long long)wait_ms, dlock_strerror(rc), dlock_errmsg());
        }
        dlock_lock_free(l);
    }
    return NULL;
}

/* Cancels waits and breaks holds at random moments. */
static void *control(void *arg)
{
    uint64_t s = *(uint64_t *)arg;
    bool can_break = true;
    while (!__atomic_load_n(&stop_now, __ATOMIC_RELAXED)) {
        sleep_ms(20 + below(&s, 60));
        int n = below(&s, NAMES);
        dlock_client *c = clients[below(&s, CLIENTS)];
        if (below(&s, 3) == 0) {
            dlock_lock *l = NULL;
            if (dlock_lock_new(c, names[n], strlen(names[n]), NULL, &l) == DLOCK_OK) {
                dlock_cancel(l);
                dlock_lock_free(l);
            }
        } else if (can_break && below(&s, 25) == 0) {
            struct break_event b = { .name = n, .called = now_us() };
            int broken = 0;
            int rc = dlock_break(c, names[n], strlen(names[n]), &broken, NULL);
            b.returned = now_us();
            if (rc == DLOCK_ENOTSUP) {
                can_break = false;
                continue;
            }
            if (rc != DLOCK_OK)
                bad_answer("break of %s: %s: %s", names[n], dlock_strerror(rc), dlock_errmsg());
            pthread_mutex_lock(&history.mu);
            if (history.nbreaks < MAX_BREAKS)
                history.breaks[history.nbreaks++] = b;
            pthread_mutex_unlock(&history.mu);
            count(&history.breaks_done);
        }
    }
    return NULL;
}

/* ---- the model ------------------------------------------------------------------------ */

/* A hold's window, or its exclusive or shared part when it was downgraded. */
struct window {
    int hold, name;
    unsigned mode, permits;
    int64_t from, to;
};

/* Where a break of the hold's name, or its loss, cuts its window. */
static int64_t window_end(const struct hold *h)
{
    int64_t end = h->release_called;
    if (h->lost_at && h->lost_at < end)
        end = h->lost_at;
    for (int i = 0; i < history.nbreaks; i++) {
        const struct break_event *b = &history.breaks[i];
        if (b->name == h->name && b->called < end && b->returned > h->granted)
            end = b->called > h->granted ? b->called : h->granted;
    }
    return end;
}

static int windows_of(const struct hold *h, int index, struct window out[2])
{
    const struct kind *k = &kinds[h->kind];
    int64_t end = window_end(h);
    out[0] = (struct window){ index, h->name, k->mode, k->permits, h->granted, end };
    if (!h->downgrade_called || h->downgrade_called >= end)
        return 1;
    out[0].to = h->downgrade_called;
    out[1] = (struct window){ index, h->name, DLOCK_MODE_SHARED, 0, h->downgrade_called, end };
    return 2;
}

static bool may_meet(const struct window *a, const struct window *b)
{
    if (a->mode != b->mode || a->mode == DLOCK_MODE_EXCLUSIVE)
        return false;
    return a->mode == DLOCK_MODE_SHARED || a->permits == b->permits;
}

static void describe(char *out, size_t size, const struct window *w)
{
    const struct hold *h = &history.holds[w->hold];
    snprintf(out, size, "worker %d's %s hold of %s, fence %llu, %.3f..%.3f s", h->worker,
             w->mode == DLOCK_MODE_EXCLUSIVE ? "exclusive" : w->mode == DLOCK_MODE_SHARED ? "shared" : "permit",
             names[h->name], (unsigned long long)h->fence, (double)(w->from % 100000000) / 1e6,
             (double)(w->to % 100000000) / 1e6);
}

/* Checks the history; the first violation in why. */
static int check_history(char *why, size_t size)
{
    int violations = 0;
    why[0] = 0;
    int n = history.nholds;
    struct window *ws = calloc((size_t)n * 2 + 1, sizeof *ws);
    int nw = 0;
    for (int i = 0; i < n; i++)
        nw += windows_of(&history.holds[i], i, ws + nw);
    char a[200], b[200];
    for (int i = 0; i < nw; i++) {
        int together = 1; /* permits meeting this one's start, itself included */
        for (int j = 0; j < nw; j++) {
            if (j == i || ws[j].name != ws[i].name || ws[j].hold == ws[i].hold)
                continue;
            bool meet = ws[i].from < ws[j].to && ws[j].from < ws[i].to;
            if (!meet)
                continue;
            if (!may_meet(&ws[i], &ws[j])) {
                if (j > i && violations++ == 0) {
                    describe(a, sizeof a, &ws[i]);
                    describe(b, sizeof b, &ws[j]);
                    snprintf(why, size, "held twice: %s and %s", a, b);
                }
                continue;
            }
            if (ws[i].mode == DLOCK_MODE_SEMAPHORE && ws[j].from <= ws[i].from)
                together++;
        }
        if (ws[i].mode == DLOCK_MODE_SEMAPHORE && together > (int)ws[i].permits && violations++ == 0) {
            describe(a, sizeof a, &ws[i]);
            snprintf(why, size, "%d permits at once of a semaphore of %u, at the start of %s", together,
                     ws[i].permits, a);
        }
    }
    for (int i = 0; (caps & DLOCK_CAP_FENCE) && i < n; i++) {
        const struct hold *x = &history.holds[i];
        for (int j = 0; j < n; j++) {
            const struct hold *y = &history.holds[j];
            if (i == j || x->name != y->name || !x->fence || !y->fence)
                continue;
            if ((x->fence == y->fence && i < j) || (x->release_returned < y->acquire_called && y->fence <= x->fence)) {
                if (violations++ == 0)
                    snprintf(why, size, "fences: worker %d's hold of %s (fence %llu) came after worker %d's (fence %llu)",
                             y->worker, names[y->name], (unsigned long long)y->fence, x->worker,
                             (unsigned long long)x->fence);
            }
        }
    }
    for (int i = 0; i < n; i++) {
        const struct hold *h = &history.holds[i];
        bool broken = false;
        for (int k = 0; k < history.nbreaks; k++)
            if (history.breaks[k].name == h->name && history.breaks[k].called < h->release_returned &&
                history.breaks[k].returned > h->granted)
                broken = true;
        if ((h->lost_at || h->release_rc == DLOCK_ELOST) && !broken && violations++ == 0)
            snprintf(why, size, "worker %d lost its %s hold of %s, and nobody broke it", h->worker,
                     kinds[h->kind].label, names[h->name]);
    }
    free(ws);
    return violations;
}

static uint64_t seed_of_run(void)
{
    const char *env = getenv("DLOCK_MODEL_SEED");
    if (env && *env)
        return strtoull(env, NULL, 0);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return ((uint64_t)t.tv_sec * 1000003u) ^ (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 32);
}

static void random_operations_keep_the_model(void **state)
{
    (void)state;
    const char *env = getenv("DLOCK_MODEL_MS");
    run_ms = env && *env ? atoll(env) : 3000;
    uint64_t seed = seed_of_run();
    if (!seed)
        seed = 1;
    memset(&history, 0, sizeof history);
    pthread_mutex_init(&history.mu, NULL);
    __atomic_store_n(&stop_now, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < CLIENTS; i++)
        clients[i] = conformance_open_client(LEASE_MS, 50);
    caps = dlock_client_capabilities(clients[0]);
    struct worker ws[WORKERS];
    pthread_t threads[WORKERS], controller;
    for (int i = 0; i < WORKERS; i++) {
        ws[i] = (struct worker){ i, seed * 0x9E3779B97F4A7C15ull + (uint64_t)i + 1 };
        assert_int_equal(pthread_create(&threads[i], NULL, work, &ws[i]), 0);
    }
    uint64_t control_seed = seed ^ 0xD1B54A32D192ED03ull;
    assert_int_equal(pthread_create(&controller, NULL, control, &control_seed), 0);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(threads[i], NULL);
    __atomic_store_n(&stop_now, 1, __ATOMIC_RELAXED);
    pthread_join(controller, NULL);
    for (int i = 0; i < CLIENTS; i++)
        dlock_client_close(clients[i]);
    char why[600];
    int violations = check_history(why, sizeof why);
    print_message("model (seed %llu, %lld ms): %d answers, %d grants (%d downgraded), %d busy, %d timed out, "
                  "%d refused for their kind, %d cancelled, %d breaks; %d violations\n",
                  (unsigned long long)seed, (long long)run_ms, history.answers, history.grants, history.downgrades,
                  history.busy, history.timeouts, history.refused_kind, history.cancelled, history.breaks_done,
                  violations);
    if (history.bad_answers[0])
        fail_msg("%s: seed %llu (DLOCK_MODEL_SEED=%llu replays its operations): answers the API does not document:\n%s",
                 target->name, (unsigned long long)seed, (unsigned long long)seed, history.bad_answers);
    if (violations)
        fail_msg("%s: seed %llu (DLOCK_MODEL_SEED=%llu replays its operations): %d violations; the first: %s",
                 target->name, (unsigned long long)seed, (unsigned long long)seed, violations, why);
    if (history.grants == 0)
        fail_msg("%s: seed %llu: no grant at all in %lld ms", target->name, (unsigned long long)seed,
                 (long long)run_ms);
    pthread_mutex_destroy(&history.mu);
}

int conformance_run_model(const struct conformance_target *t)
{
    target = t;
    char group[128];
    snprintf(group, sizeof group, "%s: random operations against the model", t->name);
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup(random_operations_keep_the_model, conformance_before_each),
    };
    return _cmocka_run_group_tests(group, cases, sizeof cases / sizeof cases[0], NULL, conformance_group_teardown);
}
