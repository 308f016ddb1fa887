/* tests/backends/redlock/test_redlock.c - the redlock backend against five real,
 * independent redis-servers this program starts on private ports (and
 * stops by PID): the conformance suite, then masters killed, stopped and
 * brought back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../conformance/conformance.h"
#include "../../support/fault_proxy.h"
#include "../../support/redis_server.h"
#include "../../support/test_time.h"
#include "../../support/test_client.h"

#include <dlock.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MASTERS 5

static struct test_redis masters[MASTERS];

/* How long a master's answer may take in the configs below: 100 ms,
 * widened as the suite's other bounds are (DLOCK_TEST_SLACK). With
 * several test programs and five masters on two cores, a whole round
 * could find its client thread waiting for a core past 100 ms. */
static int server_timeout_ms(void)
{
    return (int)slack_ms(100);
}

static void write_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    int n = snprintf(buf, size,
                     "backend = \"redlock\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
                     "redlock = { server_timeout_ms = %d; connect_timeout_ms = %d; servers = (",
                     lease_ms, retry_cap_ms, server_timeout_ms(), server_timeout_ms());
    for (int i = 0; i < MASTERS; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s\"127.0.0.1:%d\"", i ? ", " : "", masters[i].port);
    snprintf(buf + n, size - (size_t)n, "); };\n");
}

/* The lock's hash vanishes from every master (an operator, or expiry). */
static void delete_everywhere(const char *name)
{
    char key[256];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    for (int i = 0; i < MASTERS; i++) {
        redisReply *r = test_redis_cmd(&masters[i], "DEL %s", key);
        if (r)
            freeReplyObject(r);
    }
}

static void flush_everywhere(void)
{
    for (int i = 0; i < MASTERS; i++)
        if (masters[i].pid) {
            redisReply *r = test_redis_cmd(&masters[i], "FLUSHALL");
            if (r)
                freeReplyObject(r);
        }
}

static dlock_client *open_ok(int lease_ms)
{
    char text[1024];
    write_config(text, sizeof text, lease_ms, 50);
    return test_client_open(text);
}

static int holders_of(const char *name)
{
    char key[256];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    int n = 0;
    for (int i = 0; i < MASTERS; i++) {
        if (!masters[i].pid)
            continue;
        redisReply *r = test_redis_cmd(&masters[i], "EXISTS %s", key);
        n += r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        if (r)
            freeReplyObject(r);
    }
    return n;
}

static void restart(int i)
{
    if (!masters[i].pid && test_redis_start(&masters[i]) != 0)
        fail_msg("master %d did not come back", i);
}

/* ---- faults ------------------------------------------------------------------------------ */

static void granted_on_every_master_and_released_everywhere(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000);
    dlock_lock *l = test_lock_named(a, "everywhere");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(holders_of("everywhere"), MASTERS);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(holders_of("everywhere"), 0);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void two_masters_down_still_grant_and_exclude(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000), *b = open_ok(30000);
    dlock_lock *la = test_lock_named(a, "two-down"), *lb = test_lock_named(b, "two-down");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t before;
    assert_int_equal(dlock_fence(la, &before), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    test_redis_kill(&masters[0], 1);
    test_redis_kill(&masters[1], 1);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(holders_of("two-down"), 3);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_renew(la), DLOCK_OK);
    uint64_t during;
    assert_int_equal(dlock_fence(la, &during), DLOCK_OK);
    assert_true(during > before);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    restart(0);
    restart(1);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* ---- waiting ------------------------------------------------------------------------------ */

struct waiter {
    dlock_lock *lock;
    int rc;
    int64_t granted_at;
    int64_t released_at;
};

/* Waits, holds 300 ms, releases. */
static void *hold_for_a_while(void *arg)
{
    struct waiter *w = arg;
    int rc = dlock_acquire(w->lock, 20000);
    __atomic_store_n(&w->granted_at, now_ms(), __ATOMIC_SEQ_CST);
    if (rc == DLOCK_OK) {
        sleep_ms(300);
        __atomic_store_n(&w->released_at, now_ms(), __ATOMIC_SEQ_CST);
        dlock_release(w->lock);
    }
    __atomic_store_n(&w->rc, rc, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *wait_for_it(void *arg)
{
    struct waiter *w = arg;
    int rc = dlock_acquire(w->lock, 20000);
    w->granted_at = now_ms();
    if (rc == DLOCK_OK)
        dlock_release(w->lock);
    __atomic_store_n(&w->rc, rc, __ATOMIC_SEQ_CST);
    return NULL;
}

/* A on client *a holds name (lease 30 s); B on client *b waits for it on
 * thread *t (retry cap 10 s), settled in its wait after 300 ms. */
struct held_and_waited {
    dlock_client *a, *b;
    dlock_lock *la;
    struct waiter w;
    pthread_t t;
};

static void hold_and_wait(struct held_and_waited *h, const char *name)
{
    char text[1024];
    write_config(text, sizeof text, 30000, 10000);
    h->a = test_client_open(text);
    h->b = test_client_open(text);
    h->la = test_lock_named(h->a, name);
    assert_int_equal(dlock_acquire(h->la, 0), DLOCK_OK);
    h->w = (struct waiter){ test_lock_named(h->b, name), 99, 0, 0 };
    pthread_create(&h->t, NULL, wait_for_it, &h->w);
    sleep_ms(300);
}

static void hold_and_wait_end(struct held_and_waited *h)
{
    dlock_lock_free(h->la);
    dlock_lock_free(h->w.lock);
    dlock_client_close(h->a);
    dlock_client_close(h->b);
}

/* A 10 s retry cap and a 30 s lease: only a release message explains a
 * hand-off within 50 ms, with `down` masters killed first (their wake-ups
 * are lost, the others' are not). */
static void release_wakes_the_waiter(int down)
{
    for (int i = 0; i < down; i++)
        test_redis_kill(&masters[i], 1);
    static struct held_and_waited h;
    hold_and_wait(&h, "wake");
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(h.la), DLOCK_OK);
    pthread_join(h.t, NULL);
    assert_int_equal(h.w.rc, DLOCK_OK);
    if (h.w.granted_at - released_at > slack_ms(50))
        fail_msg("granted %lld ms after the release", (long long)(h.w.granted_at - released_at));
    /* busy, busy again after subscribing, granted after the message */
    assert_true(test_client_metric(h.b, "dlock_acquire_attempts_total") <= 3);
    hold_and_wait_end(&h);
    for (int i = 0; i < down; i++)
        restart(i);
}

static void a_release_wakes_the_waiter_at_once(void **state)
{
    (void)state;
    release_wakes_the_waiter(0);
}

static void a_release_wakes_the_waiter_with_two_masters_down(void **state)
{
    (void)state;
    release_wakes_the_waiter(2);
}

/* A waiter gathers the masters' release messages until a majority's have
 * come, but one master's message alone still makes it try, soon: its other
 * masters may have other waiters first in their queues. Here one master
 * publishes to the waiter while the lock stays held: the waiter tries
 * again within a few ms, not at its retry hint (2.5 s). */
static void one_masters_message_alone_still_makes_the_waiter_try(void **state)
{
    (void)state;
    static struct held_and_waited h;
    hold_and_wait(&h, "one-message");
    long long before = test_client_metric(h.b, "dlock_acquire_attempts_total");
    /* The waiter's own channel, once the subscriptions of the cases
     * before, whose clients are closed, are gone from the server too (a
     * loaded machine tears their connections down late). */
    redisReply *ch = NULL;
    int64_t t_wait = now_ms();
    for (;;) {
        ch = test_redis_cmd(&masters[0], "PUBSUB CHANNELS *");
        assert_int_equal(ch->type, REDIS_REPLY_ARRAY);
        if (ch->elements <= 1 || now_ms() - t_wait > slack_ms(2000))
            break;
        freeReplyObject(ch);
        sleep_ms(10);
    }
    assert_int_equal(ch->elements, 1);
    freeReplyObject(test_redis_cmd(&masters[0], "PUBLISH %s released", ch->element[0]->str));
    freeReplyObject(ch);
    int64_t t0 = now_ms();
    while (test_client_metric(h.b, "dlock_acquire_attempts_total") == before && now_ms() - t0 < 2000)
        sleep_ms(1);
    int64_t took = now_ms() - t0;
    assert_int_equal(dlock_release(h.la), DLOCK_OK);
    pthread_join(h.t, NULL);
    assert_int_equal(h.w.rc, DLOCK_OK);
    if (took > slack_ms(500))
        fail_msg("the waiter tried %lld ms after one master's message", (long long)took);
    hold_and_wait_end(&h);
}

/* A waiter that was granted leaves the masters' queues: otherwise it stays
 * first in them, its own release wakes only itself, and the next waiter
 * sleeps until its retry hint (2.5 s here). A holds, B waits and is
 * granted at A's release, C waits, and B's release must wake C at once. */
static void a_granted_waiter_leaves_the_queues(void **state)
{
    (void)state;
    char text[1024];
    write_config(text, sizeof text, 30000, 10000);
    dlock_client *a = test_client_open(text), *b = test_client_open(text), *c = test_client_open(text);
    dlock_lock *la = test_lock_named(a, "relay"), *lb = test_lock_named(b, "relay"), *lc = test_lock_named(c, "relay");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    static struct waiter wb, wc;
    wb = (struct waiter){ lb, 99, 0, 0 };
    wc = (struct waiter){ lc, 99, 0, 0 };
    pthread_t tb, tc;
    pthread_create(&tb, NULL, hold_for_a_while, &wb);
    sleep_ms(200);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    while (__atomic_load_n(&wb.rc, __ATOMIC_SEQ_CST) == 99 && __atomic_load_n(&wb.granted_at, __ATOMIC_SEQ_CST) == 0)
        sleep_ms(1);
    /* B holds for 300 ms; C comes in behind it. */
    pthread_create(&tc, NULL, wait_for_it, &wc);
    pthread_join(tb, NULL);
    int64_t released_at = __atomic_load_n(&wb.released_at, __ATOMIC_SEQ_CST);
    pthread_join(tc, NULL);
    assert_int_equal(wb.rc, DLOCK_OK);
    assert_int_equal(wc.rc, DLOCK_OK);
    if (wc.granted_at - released_at > slack_ms(50))
        fail_msg("C was granted %lld ms after B's release", (long long)(wc.granted_at - released_at));
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_lock_free(lc);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

static void three_masters_down_is_no_quorum_quickly_then_recovery(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000);
    dlock_lock *l = test_lock_named(a, "three-down");
    for (int i = 0; i < 3; i++)
        test_redis_kill(&masters[i], 1);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 0), DLOCK_ENOQUORUM);
    int64_t took = now_ms() - t0;
    assert_true(took < 500);
    assert_non_null(strstr(dlock_errmsg(), "only 2 of 5 masters answered, 3 needed"));
    assert_int_equal(holders_of("three-down"), 0); /* the two that granted were undone */
    /* A wait does not turn "no quorum" into a long hang either. */
    t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 2000), DLOCK_ENOQUORUM);
    assert_true(now_ms() - t0 < 500);
    for (int i = 0; i < 3; i++)
        restart(i);
    /* Back: the pools reconnect within their backoff (at most 2 s). */
    t0 = now_ms();
    int rc;
    while ((rc = dlock_acquire(l, 0)) != DLOCK_OK && now_ms() - t0 < 5000)
        sleep_ms(100);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void fences_survive_a_minority_losing_its_counters(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000);
    dlock_lock *l = test_lock_named(a, "counters");
    uint64_t last = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 5; i++) {
            assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
            uint64_t f;
            assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
            if (f <= last)
                fail_msg("round %d: fence %llu after %llu", round, (unsigned long long)f, (unsigned long long)last);
            last = f;
            assert_int_equal(dlock_release(l), DLOCK_OK);
        }
        /* Two masters restart without persistence: their counters are 0. */
        int x = round % MASTERS, y = (round + 2) % MASTERS;
        test_redis_kill(&masters[x], 1);
        test_redis_kill(&masters[y], 1);
        restart(x);
        restart(y);
    }
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* The calls of one command in an INFO commandstats reply (0 if none). */
static long long calls_of(const char *stats, const char *command)
{
    char field[64];
    snprintf(field, sizeof field, "cmdstat_%s:calls=", command);
    const char *at = strstr(stats, field);
    return at ? strtoll(at + strlen(field), NULL, 10) : 0;
}

/* How many scripts master i has run (EVALSHA, and EVAL to load one). */
static long long scripts_run(int i)
{
    redisReply *r = test_redis_cmd(&masters[i], "INFO commandstats");
    long long total = calls_of(r->str, "evalsha") + calls_of(r->str, "eval");
    freeReplyObject(r);
    return total;
}

/* The masters' counters agree, so a grant is one round to each master: no
 * second round to raise a majority's counters to the token. Fifty cycles
 * cost each master about a hundred scripts (an acquire and a release
 * each); a raise round at every grant, as when tokens read the masters'
 * clocks to the microsecond, made it a hundred and fifty. A raise is
 * still due when a grant falls on two sides of a 10 ms mark. */
static void a_grant_is_one_round_when_the_counters_agree(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000);
    dlock_lock *l = test_lock_named(a, "one-round");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* scripts loaded, counters made */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    long long before[MASTERS];
    for (int i = 0; i < MASTERS; i++)
        before[i] = scripts_run(i);
    uint64_t last = 0;
    for (int n = 0; n < 50; n++) {
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        uint64_t f;
        assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
        assert_true(f > last);
        last = f;
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    for (int i = 0; i < MASTERS; i++) {
        long long ran = scripts_run(i) - before[i];
        if (ran > 115)
            fail_msg("master %d ran %lld scripts for 50 grants and releases", i, ran);
    }
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void a_stopped_master_costs_one_timeout_not_the_lock(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000);
    dlock_lock *l = test_lock_named(a, "stopped");
    kill(masters[4].pid, SIGSTOP);
    int64_t t0 = now_ms();
    int rc = dlock_acquire(l, 0);
    int64_t took = now_ms() - t0;
    kill(masters[4].pid, SIGCONT);
    assert_int_equal(rc, DLOCK_OK);
    /* The four live masters answer at once; the stopped one costs its
     * server_timeout_ms once, and the grant is not refused for it. The
     * margin gets the build's slack: a sanitizer on a loaded machine
     * took more than 150 ms beyond the timeout. */
    assert_true(took < server_timeout_ms() + slack_ms(150));
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static int count_listed(const dlock_list_entry *e, void *arg)
{
    if (e->name_len == 5 && memcmp(e->name, "stray", 5) == 0)
        ++*(int *)arg;
    return DLOCK_OK;
}

/* Lists the whole backend; how many times "stray" came out. */
static int times_listed(dlock_client *c)
{
    int seen = 0;
    char *cursor = NULL;
    do {
        char *next = NULL;
        assert_int_equal(dlock_list(c, NULL, 0, cursor, 10, count_listed, &seen, &next), DLOCK_OK);
        free(cursor);
        cursor = next;
    } while (cursor);
    return seen;
}

/* A name is listed when a majority holds it for one owner, once, whichever
 * masters those are: a hash left on two of five (a grant that failed and
 * could not be undone) is not a lock. */
static void listing_is_a_majoritys_view(void **state)
{
    (void)state;
    flush_everywhere();
    dlock_client *c = open_ok(30000);
    /* Every grant leaves the name's fence counter, which the listing scans. */
    for (int i = 0; i < 5; i++)
        freeReplyObject(test_redis_cmd(&masters[i], "SET dlock:{stray}:fence 5"));
    for (int i = 3; i < 5; i++)
        freeReplyObject(test_redis_cmd(&masters[i], "HSET dlock:{stray} someone:1 1"));
    assert_int_equal(times_listed(c), 0);
    freeReplyObject(test_redis_cmd(&masters[2], "HSET dlock:{stray} someone:1 1"));
    assert_int_equal(times_listed(c), 1);
    freeReplyObject(test_redis_cmd(&masters[1], "HSET dlock:{stray} other:1 1")); /* another owner: no vote */
    assert_int_equal(times_listed(c), 1);
    flush_everywhere();
    dlock_client_close(c);
}

static void bad_settings_are_config_errors(void **state)
{
    (void)state;
    const char *bad[] = {
        "backend = \"redlock\";\nredlock = { servers = (\"127.0.0.1:1\", \"127.0.0.1:2\"); };\n",
        "backend = \"redlock\";\nredlock = { servers = (\"127.0.0.1:1\", \"127.0.0.1:2\", \"localhost\"); };\n",
        "backend = \"redlock\";\nredlock = { servers = (\"127.0.0.1:1\", \"127.0.0.1:2\", \"h:99999\"); };\n",
        "backend = \"redlock\";\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlock_client *c = NULL;
        int rc = dlock_client_open_string(&c, bad[i]);
        if (rc != DLOCK_ECONFIG)
            fail_msg("case %zu: %s (%s)", i, dlock_strerror(rc), dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(), "redlock.servers"));
    }
    /* Too few masters reachable at open: no quorum, said so. */
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, "backend = \"redlock\";\nredlock = { servers = (\"127.0.0.1:1\", "
                                                  "\"127.0.0.1:2\", \"127.0.0.1:3\"); };\n"),
                     DLOCK_ENOQUORUM);
    assert_non_null(strstr(dlock_errmsg(), "only 0 of 3 masters answered"));
}

/* Three of five masters answer 300 ms late (server_timeout_ms is 100):
 * they run the acquire script, but their grants come too late to count, so
 * the attempt fails for want of a quorum. Nothing may stay taken on them:
 * the failed attempt is undone on every master that did not answer in
 * time, not only on those that answered "granted". */
static void failed_attempt_leaves_no_stray_hold_on_late_masters(void **state)
{
    (void)state;
    struct fault_proxy *proxies[3];
    int ports[MASTERS];
    for (int i = 0; i < MASTERS; i++)
        ports[i] = masters[i].port;
    for (int i = 0; i < 3; i++) {
        proxies[i] = fault_proxy_start(masters[i].port, &ports[i]);
        assert_non_null(proxies[i]);
    }
    char text[1024];
    int n = snprintf(text, sizeof text,
                     "backend = \"redlock\";\nlease_ms = 30000;\n"
                     "redlock = { server_timeout_ms = 100; connect_timeout_ms = 100; servers = (");
    for (int i = 0; i < MASTERS; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "%s\"127.0.0.1:%d\"", i ? ", " : "", ports[i]);
    snprintf(text + n, sizeof text - (size_t)n, "); };\n");
    dlock_client *a = test_client_open(text);
    dlock_lock *l = test_lock_named(a, "stray");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* once through: scripts loaded */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    for (int i = 0; i < 3; i++)
        fault_proxy_set(proxies[i], FAULT_DELAY, 300);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_ENOQUORUM);
    /* Every late script and every undo arrives within a few delays; a
     * stray hold would stay for the whole 30 s lease. */
    int64_t t0 = now_ms();
    while (holders_of("stray") != 0 && now_ms() - t0 < 5000)
        sleep_ms(50);
    assert_int_equal(holders_of("stray"), 0);
    dlock_client *b = open_ok(30000);
    dlock_lock *lb = test_lock_named(b, "stray");
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_client_close(b);
    dlock_lock_free(l);
    dlock_client_close(a);
    for (int i = 0; i < 3; i++)
        fault_proxy_stop(proxies[i]);
}

static int before_each(void **state)
{
    (void)state;
    for (int i = 0; i < MASTERS; i++)
        restart(i);
    flush_everywhere();
    return 0;
}

int main(void)
{
    if (getenv("CMOCKA_FILTER")) /* one case by name, for checking it against older code */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    for (int i = 0; i < MASTERS; i++)
        if (test_redis_start(&masters[i]) != 0) {
            printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] redis-server %d did not start\n", i);
            return 1;
        }
    static const struct conformance_target target = { "redlock conformance (5 masters)", write_config,
                                                      delete_everywhere, flush_everywhere, 0, CONFORMANCE_LISTS,
                                                      REDIS_WAITER_TIMEOUT_MS, 0 /* the pool's round trips */ };
    int failed = conformance_run(&target);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(granted_on_every_master_and_released_everywhere, before_each),
        cmocka_unit_test_setup(two_masters_down_still_grant_and_exclude, before_each),
        cmocka_unit_test_setup(three_masters_down_is_no_quorum_quickly_then_recovery, before_each),
        cmocka_unit_test_setup(fences_survive_a_minority_losing_its_counters, before_each),
        cmocka_unit_test_setup(a_grant_is_one_round_when_the_counters_agree, before_each),
        cmocka_unit_test_setup(a_stopped_master_costs_one_timeout_not_the_lock, before_each),
        cmocka_unit_test_setup(listing_is_a_majoritys_view, before_each),
        cmocka_unit_test_setup(bad_settings_are_config_errors, before_each),
        cmocka_unit_test_setup(failed_attempt_leaves_no_stray_hold_on_late_masters, before_each),
        cmocka_unit_test_setup(a_release_wakes_the_waiter_at_once, before_each),
        cmocka_unit_test_setup(a_release_wakes_the_waiter_with_two_masters_down, before_each),
        cmocka_unit_test_setup(a_granted_waiter_leaves_the_queues, before_each),
        cmocka_unit_test_setup(one_masters_message_alone_still_makes_the_waiter_try, before_each),
    };
    failed += cmocka_run_group_tests_name("redlock", tests, NULL, NULL);
    for (int i = 0; i < MASTERS; i++)
        test_redis_stop(&masters[i]);
    return failed ? 1 : 0;
}
