/* tests/unit/test_basics.c - error list, backoff bounds, deadlines, the
 * timer heap, "did you mean" suggestions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../core/internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

/* The headers' version (generated from configure.ac) is the library's. */
static void the_version_macros_are_the_librarys_version(void **state)
{
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH);
    assert_string_equal(dlock_version(), want);
    assert_int_equal(DLOCK_VERSION_NUMBER, DLOCK_VERSION_MAJOR * 10000 + DLOCK_VERSION_MINOR * 100 +
                                               DLOCK_VERSION_PATCH);
}

static void every_error_has_a_name_and_text(void **state)
{
    (void)state;
    int codes[] = {
#define CODE(name, value, text) value,
        DLOCK_ERROR_LIST(CODE)
#undef CODE
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        assert_string_not_equal(dlock_strerror(codes[i]), "unknown error");
        assert_string_not_equal(dlock_errname(codes[i]), "DLOCK_UNKNOWN");
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(codes[i], codes[j]);
        assert_true(codes[i] <= 0);
    }
    assert_string_equal(dlock_errname(DLOCK_EBUSY), "DLOCK_EBUSY");
    assert_string_equal(dlock_strerror(12345), "unknown error");
    assert_int_equal(dlock_seterr(DLOCK_EBUSY, "detail %d", 7), DLOCK_EBUSY);
    assert_string_equal(dlock_errmsg(), "detail 7");
}

static void backoff_stays_within_full_jitter_bounds(void **state)
{
    (void)state;
    for (unsigned attempt = 0; attempt < 40; attempt++) {
        int64_t ceiling = dlock__backoff_ceiling_ms(attempt, 10, 1000);
        int64_t expect = 10;
        for (unsigned i = 0; i < attempt && expect < 1000; i++)
            expect *= 2;
        if (expect > 1000)
            expect = 1000;
        assert_int_equal(ceiling, expect);
        int64_t max_seen = 0, sum = 0;
        for (int i = 0; i < 2000; i++) {
            int64_t d = dlock__backoff_ms(attempt, 10, 1000);
            assert_true(d >= 0 && d <= ceiling);
            if (d > max_seen)
                max_seen = d;
            sum += d;
        }
        /* Uniform: the mean is near half the ceiling, the top is reached. */
        double mean = (double)sum / 2000.0;
        assert_true(mean > ceiling * 0.4 && mean < ceiling * 0.6);
        assert_true(max_seen >= ceiling * 0.9);
    }
    assert_int_equal(dlock__backoff_ms(3, 0, 100), 0);
    assert_int_equal(dlock__backoff_ceiling_ms(100, 5, 20), 20);
}

static void deadlines_saturate(void **state)
{
    (void)state;
    assert_int_equal(dlock__deadline_after(100, -1), DLOCK__INFINITE);
    assert_int_equal(dlock__deadline_after(100, INT64_MAX - 10), DLOCK__INFINITE);
    assert_int_equal(dlock__deadline_after(100, 50), 150);
    int64_t a = dlock__now_ms(), b = dlock__now_ms();
    assert_true(b >= a);
    assert_int_equal(dlock__drift_ms(30000), 302);
}

static void timer_heap_orders_and_removes(void **state)
{
    (void)state;
    enum { N = 500 };
    struct dlock__timer t[N];
    struct dlock__timer_heap h;
    dlock__timer_heap_init(&h);
    srand(7);
    for (int i = 0; i < N; i++) {
        t[i].due_ms = rand() % 1000;
        t[i].heap_index = SIZE_MAX;
        assert_int_equal(dlock__timer_heap_push(&h, &t[i]), DLOCK_OK);
    }
    for (int i = 0; i < N; i += 3) {
        dlock__timer_heap_remove(&h, &t[i]);
        assert_false(dlock__timer_in_heap(&t[i]));
        dlock__timer_heap_remove(&h, &t[i]); /* twice is harmless */
    }
    int64_t last = -1;
    size_t popped = 0;
    struct dlock__timer *x;
    while ((x = dlock__timer_heap_pop(&h))) {
        assert_true(x->due_ms >= last);
        last = x->due_ms;
        popped++;
    }
    assert_int_equal(popped, N - (N + 2) / 3);
    dlock__timer_heap_free(&h);
}

/* A stand-in for an entry: a timer thread only touches its timer and busy
 * flag, at the offsets its spec gives. */
struct timed_thing {
    struct dlock__timer timer;
    bool busy;
};

static void count_runs(dlock_client *client, struct dlock__entry **due, size_t n)
{
    (void)client;
    (void)due;
    (void)n;
}

static void spin_us(int64_t us)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000 + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

/* A loop of short holds schedules a timer at each grant and takes it away at
 * each release. The thread must not be woken for each: it lingers for the
 * lead of the last timer once the heap empties, and the next grant's timer,
 * due later than that, leaves it asleep. */
static void a_loop_of_short_holds_does_not_wake_the_timer_thread(void **state)
{
    (void)state;
    static const struct dlock__timer_thread_spec spec = { "test timer", dlock__now_ms, 0, DLOCK__INFINITE,
        offsetof(struct timed_thing, timer), offsetof(struct timed_thing, busy), count_runs };
    struct dlock__timer_thread t;
    dlock__timer_thread_init(&t, &spec, NULL);
    struct timed_thing thing = { .timer = { .heap_index = SIZE_MAX } };
    struct dlock__entry *e = (struct dlock__entry *)&thing;
    for (int i = 0; i < 1000; i++) {
        /* A hold shorter than the thread takes to wake, so that it finds
         * the heap empty, then a pause before the next acquire. */
        assert_int_equal(dlock__timer_thread_schedule(&t, e, dlock__now_ms() + 60000, 0), DLOCK_OK);
        dlock__timer_thread_cancel(&t, e);
        spin_us(50);
    }
    pthread_mutex_lock(&t.mu);
    uint64_t wakeups = t.wakeups;
    pthread_mutex_unlock(&t.mu);
    /* The first timer starts the thread, which may find the heap empty
     * once and linger; nothing else wakes it within the minute's lead. */
    assert_true(wakeups <= 2);
    dlock__timer_thread_join(&t);
    dlock__timer_thread_destroy(&t);
}

static void suggestions_find_near_names(void **state)
{
    (void)state;
    const char *names[] = { "lease_ms", "watchdog", "retry_base_ms", "dir" };
    assert_string_equal(dlock__suggest("lease", names, 4), "lease_ms");
    assert_string_equal(dlock__suggest("watchdgo", names, 4), "watchdog");
    assert_string_equal(dlock__suggest("dri", names, 4), "dir");
    assert_null(dlock__suggest("completely_else", names, 4));
}

static void random_bytes_are_not_constant(void **state)
{
    (void)state;
    unsigned char a[16], b[16];
    assert_int_equal(dlock__random_bytes(a, sizeof a), DLOCK_OK);
    assert_int_equal(dlock__random_bytes(b, sizeof b), DLOCK_OK);
    assert_memory_not_equal(a, b, sizeof a);
}

static int cmp16(const void *a, const void *b)
{
    return memcmp(a, b, 16);
}

/* Owner identities are 128 random bits from getrandom(), one call per
 * client as in dlock_client_open: a million of them must all differ. */
static void a_million_owner_tokens_are_unique(void **state)
{
    (void)state;
    enum { N = 1000000 };
    unsigned char *ids = malloc((size_t)N * 16);
    assert_non_null(ids);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(dlock__random_bytes(ids + 16 * i, 16), DLOCK_OK);
    qsort(ids, N, 16, cmp16);
    for (size_t i = 1; i < N; i++)
        assert_memory_not_equal(ids + 16 * (i - 1), ids + 16 * i, 16);
    free(ids);
}

static void fence_guard_admits_only_the_newest(void **state)
{
    (void)state;
    uint64_t high = 0;
    assert_int_equal(dlock_fence_admit(&high, 3), DLOCK_OK);
    assert_int_equal(dlock_fence_admit(&high, 3), DLOCK_OK); /* same holder, again */
    assert_int_equal(dlock_fence_admit(&high, 5), DLOCK_OK);
    assert_int_equal(dlock_fence_admit(&high, 4), DLOCK_ESTALE);
    assert_non_null(strstr(dlock_errmsg(), "fencing token 4 is older than 5"));
    assert_int_equal(high, 5);
    assert_int_equal(dlock_fence_admit(NULL, 1), DLOCK_EINVAL);
}

struct admitter {
    uint64_t *high;
    uint64_t base;
    int admitted, refused;
};

static void *admit_many(void *arg)
{
    struct admitter *a = arg;
    for (uint64_t t = 1; t <= 20000; t++) {
        if (dlock_fence_admit(a->high, t * 4 + a->base) == DLOCK_OK)
            a->admitted++;
        else
            a->refused++;
    }
    return NULL;
}

static void fence_guard_is_atomic_across_threads(void **state)
{
    (void)state;
    uint64_t high = 0;
    pthread_t t[4];
    struct admitter a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct admitter){ &high, (uint64_t)i, 0, 0 };
        pthread_create(&t[i], NULL, admit_many, &a[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(high, 20000 * 4 + 3); /* the highest token of all won */
    int admitted = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(a[i].admitted + a[i].refused, 20000);
        admitted += a[i].admitted;
    }
    /* A thread that runs after the others may be refused throughout; at
     * least the first sequence to run is admitted. */
    assert_true(admitted >= 1);
}

/* A detail saved before a cleanup that sets its own comes back with the
 * caller's code; one saved when the thread had none reads as dlock_errmsg()
 * would, never as an empty quote. */
static void a_saved_error_comes_back_after_a_cleanup(void **state)
{
    (void)state;
    struct dlock_saved_error saved;
    dlock_seterr(DLOCK_EUNAVAILABLE, "redis 127.0.0.1:6379: connection refused");
    dlock_error_save(&saved);
    dlock_seterr(DLOCK_EPROTOCOL, "the cleanup's own complaint");
    assert_int_equal(dlock_error_restore(&saved, DLOCK_EUNAVAILABLE), DLOCK_EUNAVAILABLE);
    assert_string_equal(dlock_errmsg(), "redis 127.0.0.1:6379: connection refused");
    assert_string_equal(saved.text, "redis 127.0.0.1:6379: connection refused");

    dlock_seterr(DLOCK_OK, "%s", "");
    dlock_error_save(&saved);
    assert_string_equal(saved.text, dlock_errmsg());
    assert_string_equal(saved.text, "no detail recorded");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_version_macros_are_the_librarys_version),
        cmocka_unit_test(every_error_has_a_name_and_text),
        cmocka_unit_test(a_saved_error_comes_back_after_a_cleanup),
        cmocka_unit_test(backoff_stays_within_full_jitter_bounds),
        cmocka_unit_test(deadlines_saturate),
        cmocka_unit_test(timer_heap_orders_and_removes),
        cmocka_unit_test(a_loop_of_short_holds_does_not_wake_the_timer_thread),
        cmocka_unit_test(suggestions_find_near_names),
        cmocka_unit_test(random_bytes_are_not_constant),
        cmocka_unit_test(a_million_owner_tokens_are_unique),
        cmocka_unit_test(fence_guard_admits_only_the_newest),
        cmocka_unit_test(fence_guard_is_atomic_across_threads),
    };
    return cmocka_run_group_tests_name("basics", tests, NULL, NULL);
}
