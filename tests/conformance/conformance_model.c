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

enum { CLIENTS = 3, THREADS_PER_CLIENT = 2, WORKERS = CLIENTS * THREADS_PER_CLIENT, NAMES = 3 };

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
    int64_t acquire_called, granted, downgraded_at, release_called, release_returned, lost_at;
    int release_rc;
};

struct break_event {
    int name;
    int64_t called, returned;
};

/* The history, shared by the workers. */
static struct {
    pthread_mutex_t mu;
    struct hold *holds;
    int nholds, holds_cap;
    struct break_event *breaks;
    int nbreaks, breaks_cap;
    char bad_answers[2048];
    int answers, grants, busy, timeouts, refused_kind, cancelled, downgrades, breaks_done;
} history;

static dlock_client *clients[CLIENTS];
static unsigned caps;
static int lease_ms; /* the clients' lease: 3 s, widened by DLOCK_TEST_SLACK */
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

/* Appends one element of size bytes to a growing array; false when out of
 * memory (the run then fails: a history with a gap proves nothing). */
static bool append(void **array, int *n, int *cap, const void *item, size_t size)
{
    if (*n == *cap) {
        int grown = *cap ? 2 * *cap : 1024;
        void *bigger = realloc(*array, (size_t)grown * size);
        if (!bigger)
            return false;
        *array = bigger;
        *cap = grown;
    }
    memcpy((char *)*array + (size_t)*n * size, item, size);
    ++*n;
    return true;
}

static void record_hold(const struct hold *h)
{
    pthread_mutex_lock(&history.mu);
    bool ok = append((void **)&history.holds, &history.nholds, &history.holds_cap, h, sizeof *h);
    pthread_mutex_unlock(&history.mu);
    if (!ok)
        bad_answer("out of memory recording the history");
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
        int hold_ms = below(&s, 50) == 0 ? lease_ms + 200 : below(&s, 30); /* now and then past a lease */
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
                int64_t called = now_us();
                int drc = dlock_downgrade(l);
                if (drc == DLOCK_OK) {
                    h.downgraded_at = called; /* shared from the call on: readers may come in before it returns */
                    count(&history.downgrades);
                }
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
        } else if (rc == DLOCK_EINVAL && h.name != 0) {
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
            /* DLOCK_EUNAVAILABLE: the holders changed while it looked (it
             * says to run it again); it may have broken some, so it counts. */
            if (rc != DLOCK_OK && rc != DLOCK_EUNAVAILABLE)
                bad_answer("break of %s: %s: %s", names[n], dlock_strerror(rc), dlock_errmsg());
            pthread_mutex_lock(&history.mu);
            bool ok = append((void **)&history.breaks, &history.nbreaks, &history.breaks_cap, &b, sizeof b);
            pthread_mutex_unlock(&history.mu);
            if (!ok)
                bad_answer("out of memory recording the history");
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

/* Whether a break of the hold's name may have reached it: one that ended
 * after its acquire began (a grant made on the server before the acquire
 * returned can be broken) and began before its release returned. */
static bool break_reaches(const struct break_event *b, const struct hold *h)
{
    return b->name == h->name && b->called < h->release_returned && b->returned > h->acquire_called;
}

/* Where a break of the hold's name, or its loss, cuts its window. */
static int64_t window_end(const struct hold *h)
{
    int64_t end = h->release_called;
    if (h->lost_at && h->lost_at < end)
        end = h->lost_at;
    for (int i = 0; i < history.nbreaks; i++)
        if (break_reaches(&history.breaks[i], h)) {
            int64_t cut = history.breaks[i].called > h->granted ? history.breaks[i].called : h->granted;
            if (cut < end)
                end = cut;
        }
    return end;
}

static int windows_of(const struct hold *h, int index, struct window out[2])
{
    const struct kind *k = &kinds[h->kind];
    int64_t end = window_end(h);
    out[0] = (struct window){ index, h->name, k->mode, k->permits, h->granted, end };
    if (!h->downgraded_at || h->downgraded_at >= end)
        return 1;
    out[0].to = h->downgraded_at;
    out[1] = (struct window){ index, h->name, DLOCK_MODE_SHARED, 0, h->downgraded_at, end };
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

static int by_name_then_from(const void *a, const void *b)
{
    const struct window *x = a, *y = b;
    if (x->name != y->name)
        return x->name - y->name;
    return x->from < y->from ? -1 : x->from > y->from;
}

static int by_name_then_release(const void *a, const void *b)
{
    const struct hold *x = *(const struct hold *const *)a, *y = *(const struct hold *const *)b;
    if (x->name != y->name)
        return x->name - y->name;
    return x->release_returned < y->release_returned ? -1 : x->release_returned > y->release_returned;
}

static int by_name_then_fence(const void *a, const void *b)
{
    const struct hold *x = *(const struct hold *const *)a, *y = *(const struct hold *const *)b;
    if (x->name != y->name)
        return x->name - y->name;
    return x->fence < y->fence ? -1 : x->fence > y->fence;
}

#define VIOLATION(...)                                                                                                 \
    do {                                                                                                               \
        if (violations++ == 0)                                                                                         \
            snprintf(why, size, __VA_ARGS__);                                                                          \
    } while (0)

/* Windows that meet are of kinds that may hold together, and no more than
 * N permits are held at once. Windows sorted by name and start: each is
 * compared with those that start before it ends. */
static int check_windows(struct window *ws, int nw, char *why, size_t size)
{
    int violations = 0;
    char a[200], b[200];
    qsort(ws, (size_t)nw, sizeof *ws, by_name_then_from);
    int *at_start = calloc((size_t)nw + 1, sizeof *at_start); /* permits held when each window starts */
    for (int i = 0; i < nw; i++)
        for (int j = i + 1; j < nw && ws[j].name == ws[i].name && ws[j].from < ws[i].to; j++) {
            if (ws[j].hold == ws[i].hold || ws[j].to <= ws[j].from || ws[i].to <= ws[i].from)
                continue;
            if (!may_meet(&ws[i], &ws[j])) {
                describe(a, sizeof a, &ws[i]);
                describe(b, sizeof b, &ws[j]);
                VIOLATION("held twice: %s and %s", a, b);
            } else if (ws[i].mode == DLOCK_MODE_SEMAPHORE) {
                at_start[j]++;
            }
        }
    for (int j = 0; j < nw; j++)
        if (ws[j].mode == DLOCK_MODE_SEMAPHORE && at_start[j] + 1 > (int)ws[j].permits) {
            describe(a, sizeof a, &ws[j]);
            VIOLATION("%d permits at once of a semaphore of %u, at the start of %s", at_start[j] + 1, ws[j].permits, a);
        }
    free(at_start);
    return violations;
}

/* A hold that began after another of its name ended has a greater fence,
 * and no two holds share one. */
static int check_fences(char *why, size_t size)
{
    int violations = 0, n = 0;
    struct hold **hs = calloc((size_t)history.nholds + 1, sizeof *hs);
    for (int i = 0; i < history.nholds; i++)
        if (history.holds[i].fence)
            hs[n++] = &history.holds[i];
    qsort(hs, (size_t)n, sizeof *hs, by_name_then_fence);
    for (int i = 1; i < n; i++)
        if (hs[i]->name == hs[i - 1]->name && hs[i]->fence == hs[i - 1]->fence)
            VIOLATION("fence %llu of %s granted twice (workers %d and %d)", (unsigned long long)hs[i]->fence,
                      names[hs[i]->name], hs[i - 1]->worker, hs[i]->worker);
    /* By the end of their releases: the greatest fence of the holds that
     * ended before each acquire began must be below its own. */
    struct hold **ended = calloc((size_t)n + 1, sizeof *ended);
    memcpy(ended, hs, (size_t)n * sizeof *ended);
    qsort(ended, (size_t)n, sizeof *ended, by_name_then_release);
    uint64_t *highest = calloc((size_t)n + 1, sizeof *highest); /* the greatest fence of ended[0..i] of its name */
    for (int i = 0; i < n; i++) {
        uint64_t before = i > 0 && ended[i - 1]->name == ended[i]->name ? highest[i - 1] : 0;
        highest[i] = ended[i]->fence > before ? ended[i]->fence : before;
    }
    for (int k = 0; k < n; k++) {
        const struct hold *y = hs[k];
        int lo = 0, hi = n; /* the last ended hold of y's name released before y's acquire */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (ended[mid]->name < y->name ||
                (ended[mid]->name == y->name && ended[mid]->release_returned < y->acquire_called))
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo > 0 && ended[lo - 1]->name == y->name && highest[lo - 1] >= y->fence)
            VIOLATION("fences: worker %d's hold of %s (fence %llu) began after a hold with fence %llu had ended",
                      y->worker, names[y->name], (unsigned long long)y->fence, (unsigned long long)highest[lo - 1]);
    }
    free(highest);
    free(ended);
    free(hs);
    return violations;
}

/* Checks the history; the first violation in why. */
static int check_history(char *why, size_t size)
{
    why[0] = 0;
    int n = history.nholds, nw = 0, violations = 0;
    struct window *ws = calloc((size_t)n * 2 + 1, sizeof *ws);
    for (int i = 0; i < n; i++)
        nw += windows_of(&history.holds[i], i, ws + nw);
    violations += check_windows(ws, nw, why, size);
    free(ws);
    if (caps & DLOCK_CAP_FENCE) {
        char fences_why[400];
        int bad = check_fences(fences_why, sizeof fences_why);
        if (bad && !violations)
            snprintf(why, size, "%s", fences_why);
        violations += bad;
    }
    for (int i = 0; i < n; i++) {
        const struct hold *h = &history.holds[i];
        bool broken = false;
        for (int k = 0; k < history.nbreaks && !broken; k++)
            broken = break_reaches(&history.breaks[k], h);
        if ((h->lost_at || h->release_rc == DLOCK_ELOST) && !broken)
            VIOLATION("worker %d lost its %s hold of %s, and nobody broke it", h->worker, kinds[h->kind].label,
                      names[h->name]);
    }
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
    lease_ms = (int)slack_ms(3000);
    __atomic_store_n(&stop_now, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < CLIENTS; i++)
        clients[i] = conformance_open_client(lease_ms, 50);
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
    free(history.holds);
    free(history.breaks);
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
