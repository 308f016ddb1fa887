/* tests/unit/test_cache.c - holds kept for the client after their release
 * (the `cache` group), against the counting fake provider: what a release
 * and a later acquire send, the token a taken-over hold carries, and every
 * way a cached hold ends (idle, loss, other options, the last handle, close,
 * a non-blocking acquire). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fake_provider.h"
#include "../support/test_time.h"

#include <dlock.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dlock_client *open_caching(const char *backend, int lease_ms, int idle_ms)
{
    char text[256];
    snprintf(text, sizeof text, "backend = \"%s\"; lease_ms = %d; cache = { idle_ms = %d; };", backend, lease_ms,
             idle_ms);
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("open: %s (%s)", dlock_strerror(rc), dlock_errmsg());
    return c;
}

static dlock_lock *lock_with(dlock_client *c, const char *name, int64_t lease_ms, dlock_lost_fn on_lost, void *arg)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.on_lost = on_lost;
    o.on_lost_arg = arg;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l), DLOCK_OK);
    return l;
}

static uint64_t fence_of(dlock_lock *l)
{
    uint64_t f = 0;
    assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
    return f;
}

/* Waits up to ms (widened by the slack) for *counter to reach at least want. */
static bool counter_reaches(int *counter, int want, int64_t ms)
{
    int64_t end = now_ms() + slack_ms(ms);
    while (fake_get(counter) < want && now_ms() < end)
        sleep_ms(5);
    return fake_get(counter) >= want;
}

/* Takes l's name from the server and releases it into the cache; its token. */
static uint64_t hold_then_park(dlock_lock *l)
{
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t fence = fence_of(l);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    return fence;
}

/* An acquire that must have gone to the server (the acquires-th attempt
 * there) for a token above the cached one's, then its release. */
static void held_anew(dlock_lock *l, int acquires, uint64_t above)
{
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(fake_get(&fake.acquires), acquires);
    assert_true(fence_of(l) > above);
    assert_int_equal(dlock_release(l), DLOCK_OK);
}

static void done_with(dlock_client *c, dlock_lock *l)
{
    dlock_lock_free(l);
    dlock_client_close(c);
}

static int setup(void **state)
{
    (void)state;
    fake_reset();
    return 0;
}

static void a_released_hold_is_taken_again_without_a_round_trip(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 60000);
    dlock_lock *l = lock_with(c, "a", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t first = fence_of(l);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(dlock_release(l), DLOCK_OK);
        assert_int_equal(dlock_hold_count(l), 0);
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(fence_of(l), first); /* the server's hold never ended */
    }
    assert_int_equal(fake_get(&fake.acquires), 1);
    assert_int_equal(fake_get(&fake.releases), 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l); /* the last handle: the hold is given back */
    assert_int_equal(fake_get(&fake.releases), 1);
    char *text = NULL;
    assert_int_equal(dlock_client_metrics(c, &text), DLOCK_OK);
    assert_non_null(strstr(text, "dlock_cache_keeps_total{backend=\"fakecache\"} 101\n"));
    assert_non_null(strstr(text, "dlock_cache_hits_total{backend=\"fakecache\"} 100\n"));
    assert_non_null(strstr(text, "dlock_cache_givebacks_total{backend=\"fakecache\"} 1\n"));
    assert_non_null(strstr(text, "dlock_grants_total{backend=\"fakecache\"} 1\n"));
    assert_non_null(strstr(text, "dlock_releases_total{backend=\"fakecache\"} 1\n"));
    free(text);
    dlock_client_close(c);
}

struct taker {
    dlock_lock *lock;
    int rc;
    uint64_t fence;
};

static void *take_and_release(void *arg)
{
    struct taker *t = arg;
    t->rc = dlock_acquire(t->lock, 1000);
    if (t->rc == DLOCK_OK) {
        dlock_fence(t->lock, &t->fence);
        t->rc = dlock_release(t->lock);
    }
    return NULL;
}

static void another_thread_of_the_client_takes_the_cached_hold(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 60000);
    dlock_lock *l = lock_with(c, "b", 0, NULL, NULL);
    uint64_t first = hold_then_park(l);
    struct taker t = { .lock = l };
    pthread_t th;
    pthread_create(&th, NULL, take_and_release, &t);
    pthread_join(th, NULL);
    assert_int_equal(t.rc, DLOCK_OK);
    assert_int_equal(t.fence, first);
    assert_int_equal(fake_get(&fake.acquires), 1);
    /* Parked again by that thread's release: this one takes it back. */
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(fence_of(l), first);
    assert_int_equal(fake_get(&fake.acquires), 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    done_with(c, l);
}

static void a_reentered_hold_is_kept_only_at_its_outermost_release(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 60000);
    dlock_lock *l = lock_with(c, "r", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_hold_count(l), 1); /* still this thread's */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_hold_count(l), 0);
    assert_int_equal(fake_get(&fake.releases), 0);
    dlock_lock_free(l);
    assert_int_equal(fake_get(&fake.releases), 1);
    dlock_client_close(c);
}

static void an_idle_cached_hold_is_given_back(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 100);
    dlock_lock *l = lock_with(c, "i", 0, NULL, NULL);
    int64_t released_at = now_ms();
    uint64_t first = hold_then_park(l);
    assert_true(counter_reaches(&fake.releases, 1, 2000));
    assert_true(now_ms() - released_at >= 100);
    held_anew(l, 2, first); /* a new server hold, and a greater token */
    done_with(c, l);
}

static int lost_calls;
static void count_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static void a_cached_hold_the_server_lost_is_not_served_and_calls_no_on_lost(void **state)
{
    (void)state;
    __atomic_store_n(&lost_calls, 0, __ATOMIC_SEQ_CST);
    /* Renewed every 100 ms; kept idle for a minute. */
    dlock_client *c = open_caching("fakecache", 300, 60000);
    dlock_lock *l = lock_with(c, "l", 0, count_lost, NULL);
    uint64_t first = hold_then_park(l);
    int renews = fake_get(&fake.renews);
    fake_expire("l");
    /* The next renewal finds it gone, and the cached hold is over: given
     * back (owner-checked), nobody told, since nobody held it. */
    assert_true(counter_reaches(&fake.renews, renews + 1, 2000));
    assert_true(counter_reaches(&fake.releases, 1, 2000));
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
    held_anew(l, 2, first);
    done_with(c, l);
}

static void a_handle_with_other_options_gets_a_new_hold(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 60000);
    dlock_lock *kept = lock_with(c, "o", 0, NULL, NULL);
    dlock_lock *fixed = lock_with(c, "o", 2000, NULL, NULL); /* a fixed lease: another request */
    uint64_t first = hold_then_park(kept);
    /* The cached hold is given back first, then asked for anew. */
    assert_int_equal(dlock_acquire(fixed, 2000), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_int_equal(fake_get(&fake.acquires), 2);
    assert_true(fence_of(fixed) > first);
    /* A hold with a fixed lease is not kept. */
    assert_int_equal(dlock_release(fixed), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 2);
    dlock_lock_free(fixed);
    dlock_lock_free(kept);
    dlock_client_close(c);
}

static void closing_the_client_gives_cached_holds_back(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 60000);
    dlock_lock *a = lock_with(c, "c1", 0, NULL, NULL);
    dlock_lock *b = lock_with(c, "c2", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(b, 0), DLOCK_OK);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    assert_int_equal(dlock_release(b), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 0);
    dlock_client_close(c);
    assert_int_equal(fake_get(&fake.releases), 2);
}

static int async_rc = 1;
static void async_done(dlock_lock *l, int rc, void *arg)
{
    (void)l;
    (void)arg;
    async_rc = rc;
}

/* Runs c's loop until the operation started last completes (at most 3 s). */
static int async_result(dlock_client *c)
{
    int64_t end = now_ms() + slack_ms(3000);
    while (async_rc == 1 && now_ms() < end) {
        dlock_client_process(c);
        sleep_ms(2);
    }
    return async_rc;
}

static void a_non_blocking_acquire_has_the_cached_hold_given_back_first(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 60000);
    dlock_lock *l = lock_with(c, "n", 0, NULL, NULL);
    uint64_t first = hold_then_park(l);
    async_rc = 1;
    assert_int_equal(dlock_acquire_start(l, 2000, async_done, NULL), DLOCK_OK);
    assert_int_equal(async_result(c), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_int_equal(fake_get(&fake.acquires), 2);
    assert_true(fence_of(l) > first);
    async_rc = 1;
    assert_int_equal(dlock_release_start(l, async_done, NULL), DLOCK_OK);
    assert_int_equal(async_result(c), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 2); /* a non-blocking release is not kept */
    done_with(c, l);
}

/* A non-blocking acquire's hold is its handle's and never kept: its grant
 * (which may run on an event loop) makes no watch, which could wait for
 * the server; a blocking acquire's grant does. */
static void a_non_blocking_grant_makes_no_watch(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 60000);
    dlock_lock *l = lock_with(c, "nw", 0, NULL, NULL);
    async_rc = 1;
    assert_int_equal(dlock_acquire_start(l, 2000, async_done, NULL), DLOCK_OK);
    assert_int_equal(async_result(c), DLOCK_OK);
    assert_int_equal(fake_get(&fake.watches), 0);
    async_rc = 1;
    assert_int_equal(dlock_release_start(l, async_done, NULL), DLOCK_OK);
    assert_int_equal(async_result(c), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(fake_get(&fake.watches), 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    done_with(c, l);
}

static dlock_client *open_plain(void)
{
    dlock_client *c = NULL;
    if (dlock_client_open_string(&c, "backend = \"fake\"; retry_base_ms = 5; retry_cap_ms = 20;") != DLOCK_OK)
        fail_msg("open: %s", dlock_errmsg());
    return c;
}

/* Client a (caching, opened by the caller) and a plain client b, each
 * with a handle of one name. */
struct two_clients {
    dlock_client *a, *b;
    dlock_lock *la, *lb;
};

static struct two_clients two_clients(dlock_client *a, const char *name)
{
    struct two_clients t = { .a = a, .b = open_plain() };
    t.la = lock_with(t.a, name, 0, NULL, NULL);
    t.lb = lock_with(t.b, name, 0, NULL, NULL);
    return t;
}

static void two_clients_done(struct two_clients *t)
{
    dlock_lock_free(t->lb);
    dlock_client_close(t->b);
    done_with(t->a, t->la);
}

static void another_owner_asking_has_the_cached_hold_given_back_at_once(void **state)
{
    (void)state;
    struct two_clients t = two_clients(open_caching("fakecache", 3000, 60000), "w");
    uint64_t first = hold_then_park(t.la);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(t.lb, 5000), DLOCK_OK);
    /* Far sooner than the minute it would stay idle: the busy answer told
     * the holder, whose watchdog gave it back. */
    assert_true(now_ms() - t0 < slack_ms(1000));
    assert_true(fake_get(&fake.wanted_calls) >= 1);
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_true(fence_of(t.lb) > first);
    assert_int_equal(dlock_release(t.lb), DLOCK_OK);
    held_anew(t.la, fake_get(&fake.acquires) + 1, first); /* back to the server for a new hold */
    two_clients_done(&t);
}

static void a_request_during_the_hold_makes_its_release_a_real_one(void **state)
{
    (void)state;
    struct two_clients t = two_clients(open_caching("fakecache", 3000, 60000), "h");
    assert_int_equal(dlock_acquire(t.la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(t.lb, 0), DLOCK_EBUSY); /* a try asks too */
    assert_int_equal(fake_get(&fake.wanted_calls), 1);
    assert_int_equal(dlock_release(t.la), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1); /* not kept */
    assert_int_equal(dlock_acquire(t.lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(t.lb), DLOCK_OK);
    two_clients_done(&t);
}

struct racer {
    dlock_lock *lock;
    int64_t until;
    int *inside;
    int cycles, failures, overlaps;
    uint64_t last_fence;
    int fence_went_back;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    while (now_ms() < r->until) {
        if (dlock_acquire(r->lock, 5000) != DLOCK_OK) {
            r->failures++;
            continue;
        }
        if (__atomic_add_fetch(r->inside, 1, __ATOMIC_SEQ_CST) != 1)
            r->overlaps++;
        uint64_t f = 0;
        dlock_fence(r->lock, &f);
        if (f < r->last_fence)
            r->fence_went_back++;
        r->last_fence = f;
        __atomic_sub_fetch(r->inside, 1, __ATOMIC_SEQ_CST);
        if (dlock_release(r->lock) != DLOCK_OK)
            r->failures++;
        r->cycles++;
    }
    return NULL;
}

struct churner {
    dlock_client *client;
    int64_t until;
    int *inside;
    int cycles, failures, overlaps;
};

/* A handle made, held, released and freed each cycle: its free is the
 * last of the name's handles as often as not, which gives the kept hold
 * back from the freeing thread while other threads take the name anew. */
static void *churn(void *arg)
{
    struct churner *t = arg;
    while (now_ms() < t->until) {
        dlock_lock *l = lock_with(t->client, "churn", 0, NULL, NULL);
        if (dlock_acquire(l, 5000) == DLOCK_OK) {
            if (__atomic_add_fetch(t->inside, 1, __ATOMIC_SEQ_CST) != 1)
                t->overlaps++;
            sleep_ms(1);
            __atomic_sub_fetch(t->inside, 1, __ATOMIC_SEQ_CST);
            if (dlock_release(l) != DLOCK_OK)
                t->failures++;
            t->cycles++;
        } else {
            t->failures++;
        }
        dlock_lock_free(l);
    }
    return NULL;
}

/* Another client trying the name now and then: each busy answer asks the
 * caching client to give its kept hold back. */
static void *try_now_and_then(void *arg)
{
    struct churner *t = arg;
    dlock_lock *l = lock_with(t->client, "churn", 0, NULL, NULL);
    while (now_ms() < t->until) {
        if (dlock_acquire(l, 0) == DLOCK_OK) {
            if (__atomic_add_fetch(t->inside, 1, __ATOMIC_SEQ_CST) != 1)
                t->overlaps++;
            __atomic_sub_fetch(t->inside, 1, __ATOMIC_SEQ_CST);
            dlock_release(l);
            t->cycles++;
        }
        sleep_ms(1);
    }
    dlock_lock_free(l);
    return NULL;
}

/* Frees of the last handle, requests from another client and new holds by
 * other threads, all at once: one give-back per kept hold, never one that
 * releases the next holder's hold (the checker: nobody is inside twice, no
 * release fails). */
static void last_handle_frees_race_requests_and_new_holds(void **state)
{
    (void)state;
    dlock_client *a = open_caching("fakecache", 3000, 60000);
    dlock_client *b = open_plain();
    int inside = 0;
    int64_t until = now_ms() + 600;
    struct churner t[3] = { { a, until, &inside, 0, 0, 0 }, { a, until, &inside, 0, 0, 0 },
                            { b, until, &inside, 0, 0, 0 } };
    pthread_t th[3];
    pthread_create(&th[0], NULL, churn, &t[0]);
    pthread_create(&th[1], NULL, churn, &t[1]);
    pthread_create(&th[2], NULL, try_now_and_then, &t[2]);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(t[i].overlaps, 0);
        assert_int_equal(t[i].failures, 0);
    }
    assert_true(t[0].cycles > 0 && t[1].cycles > 0);
    dlock_client_close(b);
    dlock_client_close(a);
    /* Every grant on the server was released once, by its own holder. */
    assert_int_equal(fake_get(&fake.releases), fake_get(&fake.grants_made));
    assert_int_equal(fake_get(&fake.foreign_releases), 0);
}

/* Takeovers by two threads race the watchdog giving the cached hold back
 * (idle after 1 ms): every acquire is granted, once at a time, and no
 * thread sees its token go back. */
static void takeovers_race_the_give_back(void **state)
{
    (void)state;
    dlock_client *c = open_caching("fakecache", 3000, 1);
    dlock_lock *l = lock_with(c, "race", 0, NULL, NULL);
    int inside = 0;
    struct racer r[2] = { { .lock = l, .until = now_ms() + 400, .inside = &inside },
                          { .lock = l, .until = now_ms() + 400, .inside = &inside } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, race, &r[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        assert_true(r[i].cycles > 0);
        assert_int_equal(r[i].failures, 0);
        assert_int_equal(r[i].overlaps, 0);
        assert_int_equal(r[i].fence_went_back, 0);
    }
    /* Some went to the server and some did not. */
    int acquires = fake_get(&fake.acquires);
    assert_true(acquires >= 1 && acquires < r[0].cycles + r[1].cycles);
    dlock_lock_free(l);
    dlock_client_close(c);
    assert_int_equal(fake_get(&fake.releases), acquires);
}

static void caching_is_refused_where_the_backend_cannot_keep_holds(void **state)
{
    (void)state;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, "backend = \"fake\"; cache = { idle_ms = 100; };"), DLOCK_ENOTSUP);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), "cache.idle_ms"));
    assert_int_equal(dlock_client_open_string(&c, "backend = \"fakecache\"; cache = { idle_ms = -1; };"),
                     DLOCK_ECONFIG);
    assert_int_equal(dlock_client_open_string(&c, "backend = \"fakecache\"; cache = { idle = 100; };"),
                     DLOCK_ECONFIG);
    assert_int_equal(dlock_client_open_string(&c, "backend = \"fakecache\"; cache = 100;"), DLOCK_ECONFIG);
    /* idle_ms = 0, or no group: off, on any backend. */
    assert_int_equal(dlock_client_open_string(&c, "backend = \"fake\"; cache = { idle_ms = 0; };"), DLOCK_OK);
    dlock_lock *l = lock_with(c, "z", 0, NULL, NULL);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1);
    done_with(c, l);
}

static dlock_client *open_text(const char *text)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("open: %s (%s)", dlock_strerror(rc), dlock_errmsg());
    return c;
}

static dlock_lock *lock_flagged(dlock_client *c, const char *name, unsigned flags)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = flags;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l), DLOCK_OK);
    return l;
}

/* Whether l's release was kept: no release reached the server. */
static bool release_kept(dlock_lock *l)
{
    int before = fake_get(&fake.releases);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    return fake_get(&fake.releases) == before;
}

/* Client a keeps its hold; client b asks, and a gives it back: n turns. */
static void turns_asked_for(dlock_lock *la, dlock_lock *lb, int n)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
        assert_true(release_kept(la));
        assert_int_equal(dlock_acquire(lb, 5000), DLOCK_OK);
        assert_int_equal(dlock_release(lb), DLOCK_OK);
    }
}

static void a_name_taken_in_turns_stops_being_kept_for_a_while(void **state)
{
    (void)state;
    struct two_clients t = two_clients(open_text("backend = \"fakecache\"; lease_ms = 3000; "
                                                 "cache = { idle_ms = 60000; cooldown_ms = 300; };"),
                                       "turns");
    /* Two of its kept holds asked for, none taken over here: clients
     * take the name in turns, and keeping it only slows the next one. */
    turns_asked_for(t.la, t.lb, 2);
    assert_int_equal(dlock_acquire(t.la, 0), DLOCK_OK);
    assert_false(release_kept(t.la));
    char *text = NULL;
    assert_int_equal(dlock_client_metrics(t.a, &text), DLOCK_OK);
    assert_non_null(strstr(text, "dlock_cache_pauses_total{backend=\"fakecache\"} 1\n"));
    free(text);
    /* After the pause it is kept again. */
    sleep_ms(350);
    assert_int_equal(dlock_acquire(t.la, 0), DLOCK_OK);
    assert_true(release_kept(t.la));
    assert_int_equal(dlock_acquire(t.la, 0), DLOCK_OK); /* a hit */
    assert_true(release_kept(t.la));
    assert_int_equal(dlock_acquire(t.lb, 5000), DLOCK_OK);
    assert_int_equal(dlock_release(t.lb), DLOCK_OK);
    two_clients_done(&t);
}

/* Another owner asks right after the server granted this client's next
 * hold, and the provider hears it before the grant's answer is read
 * (while the name is not yet held here): that request is for this hold,
 * whose release is then a real one. */
static void a_request_heard_before_the_grant_is_read_counts(void **state)
{
    (void)state;
    struct two_clients t = two_clients(open_caching("fakecache", 3000, 60000), "early");
    /* Watched from the first hold on; given back when b asks. */
    assert_int_equal(dlock_acquire(t.la, 0), DLOCK_OK);
    assert_true(release_kept(t.la));
    assert_int_equal(dlock_acquire(t.lb, 5000), DLOCK_OK);
    assert_int_equal(dlock_release(t.lb), DLOCK_OK);
    FAKE_SET(asked_at_grant, 1);
    assert_int_equal(dlock_acquire(t.la, 0), DLOCK_OK);
    FAKE_SET(asked_at_grant, 0);
    assert_false(release_kept(t.la));
    two_clients_done(&t);
}

/* n rounds of: hits kept holds of client a taken over, then b asks and
 * a gives the name back. Whether each of a's releases was kept. */
static void rounds_of_hits_then_a_request(struct two_clients *t, int n, int hits, bool kept)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(dlock_acquire(t->la, 0), DLOCK_OK);
        assert_true(release_kept(t->la) == kept);
        for (int j = 0; j < hits; j++) {
            assert_int_equal(dlock_acquire(t->la, 0), DLOCK_OK);
            assert_true(release_kept(t->la) == kept);
        }
        assert_int_equal(dlock_acquire(t->lb, 5000), DLOCK_OK);
        assert_int_equal(dlock_release(t->lb), DLOCK_OK);
    }
}

static void hits_that_save_more_than_the_requests_cost_keep_the_name_kept(void **state)
{
    (void)state;
    struct two_clients t = two_clients(open_caching("fakecache", 3000, 60000), "mostly-mine");
    /* A server 60 ms away: a hit saves such an attempt, and a give-back
     * (a thread hop and a release that does not wait) costs far less. One
     * hit between two requests pays. */
    FAKE_SET(acquire_delay_ms, 60);
    rounds_of_hits_then_a_request(&t, 6, 1, true);
    FAKE_SET(acquire_delay_ms, 0);
    two_clients_done(&t);
}

static void hits_that_save_less_than_the_requests_cost_stop_the_keeping(void **state)
{
    (void)state;
    struct two_clients t = two_clients(open_text("backend = \"fakecache\"; lease_ms = 3000; "
                                                 "cache = { idle_ms = 60000; cooldown_ms = 60000; };"),
                                       "cheap-cycle");
    /* Attempts and releases answered at once, in this process: a hit
     * saves two calls that take a few microseconds, and a give-back costs
     * a thread wake-up at least (the watchdog's). One hit between two
     * requests does not pay (the local backend, whose cycle is two system
     * calls beside its wake-ups); the second request stops the keeping. */
    rounds_of_hits_then_a_request(&t, 2, 1, true);
    rounds_of_hits_then_a_request(&t, 1, 1, false);
    two_clients_done(&t);
}

static void cooldown_0_keeps_a_name_taken_in_turns(void **state)
{
    (void)state;
    struct two_clients t = two_clients(open_text("backend = \"fakecache\"; lease_ms = 3000; "
                                                 "cache = { idle_ms = 60000; cooldown_ms = 0; };"),
                                       "turns0");
    turns_asked_for(t.la, t.lb, 12);
    two_clients_done(&t);
}

static void a_handle_asks_for_caching_or_refuses_it(void **state)
{
    (void)state;
    /* No cache group: only the handle that asks keeps its holds, for
     * 1000 ms unused by default. */
    dlock_client *c = open_text("backend = \"fakecache\"; lease_ms = 3000;");
    dlock_lock *asks = lock_flagged(c, "h-asks", DLOCK_LOCK_CACHE);
    dlock_lock *plain = lock_flagged(c, "h-plain", 0);
    assert_int_equal(dlock_acquire(plain, 0), DLOCK_OK);
    assert_false(release_kept(plain));
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(asks, 0), DLOCK_OK);
    assert_true(release_kept(asks));
    int releases = fake_get(&fake.releases);
    assert_true(counter_reaches(&fake.releases, releases + 1, 3000));
    assert_true(now_ms() - t0 >= 1000);
    dlock_lock_free(asks);
    dlock_lock_free(plain);
    dlock_client_close(c);
    /* A cache group: a handle may refuse it. */
    c = open_caching("fakecache", 3000, 60000);
    dlock_lock *refuses = lock_flagged(c, "h-refuses", DLOCK_LOCK_NOCACHE);
    assert_int_equal(dlock_acquire(refuses, 0), DLOCK_OK);
    assert_false(release_kept(refuses));
    done_with(c, refuses);
}

static void caching_a_hold_that_is_never_kept_is_refused(void **state)
{
    (void)state;
    dlock_client *c = open_text("backend = \"fakecache\";");
    dlock_lock *l = NULL;
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_CACHE | DLOCK_LOCK_NOCACHE;
    assert_int_equal(dlock_lock_new(c, "x", 1, &o, &l), DLOCK_EINVAL);
    o.flags = DLOCK_LOCK_CACHE;
    o.lease_ms = 1000;
    assert_int_equal(dlock_lock_new(c, "x", 1, &o, &l), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "fixed lease"));
    o.lease_ms = 0;
    o.mode = DLOCK_MODE_SHARED;
    assert_int_equal(dlock_lock_new(c, "x", 1, &o, &l), DLOCK_EINVAL);
    o.mode = DLOCK_MODE_SEMAPHORE;
    o.permits = 2;
    assert_int_equal(dlock_lock_new(c, "x", 1, &o, &l), DLOCK_EINVAL);
    assert_null(l);
    dlock_client_close(c);
    c = open_text("backend = \"fakecache\"; watchdog = false;");
    o = (dlock_lock_options)DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_CACHE;
    assert_int_equal(dlock_lock_new(c, "x", 1, &o, &l), DLOCK_EINVAL);
    dlock_client_close(c);
    /* A backend that cannot keep holds. */
    c = open_text("backend = \"fake\";");
    assert_int_equal(dlock_lock_new(c, "x", 1, &o, &l), DLOCK_ENOTSUP);
    assert_non_null(strstr(dlock_errmsg(), "DLOCK_LOCK_CACHE"));
    /* Refusing caching is fine anywhere. */
    o.flags = DLOCK_LOCK_NOCACHE;
    assert_int_equal(dlock_lock_new(c, "x", 1, &o, &l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

int main(void)
{
    if (dlock_provider_register(&fake_provider) != DLOCK_OK ||
        dlock_provider_register(&fake_cache_provider) != DLOCK_OK) {
        fprintf(stderr, "cannot register the fake providers: %s\n", dlock_errmsg());
        return 1;
    }
    if (getenv("CMOCKA_FILTER"))
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(a_released_hold_is_taken_again_without_a_round_trip, setup),
        cmocka_unit_test_setup(another_thread_of_the_client_takes_the_cached_hold, setup),
        cmocka_unit_test_setup(a_reentered_hold_is_kept_only_at_its_outermost_release, setup),
        cmocka_unit_test_setup(an_idle_cached_hold_is_given_back, setup),
        cmocka_unit_test_setup(a_cached_hold_the_server_lost_is_not_served_and_calls_no_on_lost, setup),
        cmocka_unit_test_setup(a_handle_with_other_options_gets_a_new_hold, setup),
        cmocka_unit_test_setup(closing_the_client_gives_cached_holds_back, setup),
        cmocka_unit_test_setup(a_non_blocking_acquire_has_the_cached_hold_given_back_first, setup),
        cmocka_unit_test_setup(another_owner_asking_has_the_cached_hold_given_back_at_once, setup),
        cmocka_unit_test_setup(a_request_during_the_hold_makes_its_release_a_real_one, setup),
        cmocka_unit_test_setup(takeovers_race_the_give_back, setup),
        cmocka_unit_test_setup(last_handle_frees_race_requests_and_new_holds, setup),
        cmocka_unit_test_setup(caching_is_refused_where_the_backend_cannot_keep_holds, setup),
        cmocka_unit_test_setup(a_name_taken_in_turns_stops_being_kept_for_a_while, setup),
        cmocka_unit_test_setup(hits_that_save_more_than_the_requests_cost_keep_the_name_kept, setup),
        cmocka_unit_test_setup(hits_that_save_less_than_the_requests_cost_stop_the_keeping, setup),
        cmocka_unit_test_setup(a_non_blocking_grant_makes_no_watch, setup),
        cmocka_unit_test_setup(a_request_heard_before_the_grant_is_read_counts, setup),
        cmocka_unit_test_setup(cooldown_0_keeps_a_name_taken_in_turns, setup),
        cmocka_unit_test_setup(a_handle_asks_for_caching_or_refuses_it, setup),
        cmocka_unit_test_setup(caching_a_hold_that_is_never_kept_is_refused, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
