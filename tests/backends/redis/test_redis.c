/* tests/backends/redis/test_redis.c - the redis backend against a real redis-server
 * that this program starts on a private port (and stops by PID). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../conformance/conformance.h"
#include "../../support/redis_server.h"
#include "../../support/test_client.h"
#include "../../support/shared_kinds.h"
#include "../../support/test_time.h"

#include <dlock.h>
#include <dlock/fence.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct test_redis server;

/* A client of the test server; extra is appended inside the redis group. */
static dlock_client *open_redis(int lease_ms, int retry_cap_ms, const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"redis\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "redis = { port = %d; command_timeout_ms = 1000; connect_timeout_ms = 1000; %s };\n",
             lease_ms, retry_cap_ms, server.port, extra ? extra : "");
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("open: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return c;
}

static dlock_lock *lock_of(dlock_client *c, const char *name, int64_t lease_ms)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l), DLOCK_OK);
    return l;
}

static dlock_lock *fair_lock_of(dlock_client *c, const char *name)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l), DLOCK_OK);
    return l;
}

static long long redis_int(const char *fmt, const char *arg)
{
    redisReply *r = test_redis_cmd(&server, fmt, arg);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : r->type == REDIS_REPLY_STRING ? atoll(r->str) : -999;
    freeReplyObject(r);
    return v;
}

static void flush_all(void)
{
    redisReply *r = test_redis_cmd(&server, "FLUSHALL");
    if (r)
        freeReplyObject(r);
}

static int start_server(void **state)
{
    (void)state;
    return server.pid ? 0 : test_redis_start(&server); /* main started it for the conformance suite */
}

static int stop_server(void **state)
{
    (void)state;
    test_redis_stop(&server);
    return 0;
}

static int before_each(void **state)
{
    (void)state;
    if (!server.pid && test_redis_start(&server) != 0)
        return -1;
    flush_all();
    return 0;
}

/* ---- the shared semantics: what the conformance suite cannot see (the layout) ---- */

static void reentry_counts_and_server_layout(void **state)
{
    (void)state;
    dlock_client *a = open_redis(30000, 1000, NULL);
    dlock_lock *l = lock_of(a, "re", 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_hold_count(l), 3);
    /* Redisson's layout: one field, the owner, in the hash <prefix>{name}. */
    assert_int_equal(redis_int("HLEN %s", "dlock:{re}"), 1);
    long long ttl = redis_int("PTTL %s", "dlock:{re}");
    assert_true(ttl > 29000 && ttl <= 30000);
    uint64_t fence;
    assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
    assert_int_equal(redis_int("GET %s", "dlock:{re}:fence"), (long long)fence); /* one grant, not three */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{re}"), 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{re}"), 0);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{re}:fence"), 1); /* the fence never expires */
    assert_int_equal(dlock_release(l), DLOCK_ENOTOWNER);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void release_by_a_non_owner_changes_nothing(void **state)
{
    (void)state;
    dlock_client *a = open_redis(30000, 1000, NULL), *b = open_redis(30000, 1000, NULL);
    dlock_lock *la = lock_of(a, "mine", 0), *lb = lock_of(b, "mine", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_ENOTOWNER);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{mine}"), 1);
    /* Someone else took over on the server: A's release must not delete it. */
    redisReply *r = test_redis_cmd(&server, "DEL %s", "dlock:{mine}");
    freeReplyObject(r);
    r = test_redis_cmd(&server, "HSET %s %s 1", "dlock:{mine}", "someone-else:1");
    freeReplyObject(r);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    r = test_redis_cmd(&server, "HGET %s %s", "dlock:{mine}", "someone-else:1");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void explicit_lease_expires(void **state)
{
    (void)state;
    dlock_client *a = open_redis(30000, 1000, NULL), *b = open_redis(30000, 1000, NULL);
    dlock_lock *la = lock_of(a, "short", 200), *lb = lock_of(b, "short", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    long long ttl = redis_int("PTTL %s", "dlock:{short}");
    assert_true(ttl > 100 && ttl <= 200);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(lb, 2000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    assert_true(took >= 100 && took < 400); /* after the PTTL hint, not a backoff */
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void watchdog_keeps_a_hold_past_three_leases(void **state)
{
    (void)state;
    dlock_client *a = open_redis(300, 1000, NULL), *b = open_redis(300, 1000, NULL);
    dlock_lock *la = lock_of(a, "kept", 0), *lb = lock_of(b, "kept", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    sleep_ms(1000);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    /* Still held after three leases (how much is left depends on when the
     * last renewal ran, which a loaded machine may delay). */
    assert_true(redis_int("PTTL %s", "dlock:{kept}") > 0);
    assert_true(dlock_validity_ms(la) > 0);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static int lost_calls;
static void count_lost(dlock_lock *lock, void *arg)
{
    (void)lock;
    (void)arg;
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static void deleting_the_hash_fires_on_lost_within_a_renewal(void **state)
{
    (void)state;
    lost_calls = 0;
    dlock_client *a = open_redis(600, 1000, NULL);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = count_lost;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(a, "gone", 4, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    redisReply *r = test_redis_cmd(&server, "DEL %s", "dlock:{gone}");
    freeReplyObject(r);
    int64_t t0 = now_ms();
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 1000)
        sleep_ms(5);
    /* One renewal interval is lease/3 = 200 ms. */
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    assert_true(now_ms() - t0 <= 200 + 50);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_ELOST);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* ---- waiting ---------------------------------------------------------------------- */

struct waiter {
    dlock_lock *lock;
    int rc;
    int64_t granted_at;
};

static void *wait_forever(void *arg)
{
    struct waiter *w = arg;
    w->rc = dlock_acquire(w->lock, -1);
    w->granted_at = now_ms();
    if (w->rc == DLOCK_OK)
        dlock_release(w->lock);
    return NULL;
}

static void release_wakes_the_waiter_at_once(void **state)
{
    (void)state;
    /* A 10 s retry cap and a 30 s TTL: only the Pub/Sub message can explain
     * a quick hand-off. */
    dlock_client *a = open_redis(30000, 10000, NULL), *b = open_redis(30000, 10000, NULL);
    dlock_lock *la = lock_of(a, "pubsub", 0), *lb = lock_of(b, "pubsub", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct waiter w = { lb, 99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, wait_forever, &w);
    sleep_ms(150);
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.granted_at - released_at < slack_ms(50));
    /* busy, busy again after subscribing, granted after the message */
    assert_true(test_client_metric(b, "dlock_acquire_attempts_total") <= 3);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void waiter_survives_losing_its_subscriber_connection(void **state)
{
    (void)state;
    dlock_client *a = open_redis(1000, 10000, NULL), *b = open_redis(1000, 10000, NULL);
    dlock_lock *la = lock_of(a, "sub", 800), *lb = lock_of(b, "sub", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct waiter w = { lb, 99, 0 };
    pthread_t t;
    int64_t t0 = now_ms();
    pthread_create(&t, NULL, wait_forever, &w);
    sleep_ms(100);
    redisReply *r = test_redis_cmd(&server, "CLIENT KILL TYPE pubsub");
    freeReplyObject(r);
    /* A never releases: its 800 ms lease runs out on the server, and B,
     * whatever happened to its subscription, retries after the holder's TTL. */
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.granted_at - t0 < 800 + 300);
    dlock_release(la);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}


/* The subscriber's connection dies and the holder releases before it is back:
 * the release notice reached nobody. The waiter is woken when its
 * subscription is confirmed again, not left until its retry hint (here
 * 10 s: half a 20 s waiter timeout, under the holder's 30 s lease). */
static void release_while_the_subscriber_reconnects_is_not_missed(void **state)
{
    (void)state;
    dlock_client *a = open_redis(30000, 30000, NULL);
    dlock_client *b = open_redis(30000, 30000, "waiter_timeout_ms = 20000;");
    dlock_lock *la = lock_of(a, "gap", 0), *lb = lock_of(b, "gap", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct waiter w = { lb, 99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, wait_forever, &w);
    sleep_ms(200); /* b is subscribed and waiting */
    redisReply *r = test_redis_cmd(&server, "CLIENT KILL TYPE pubsub");
    freeReplyObject(r);
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.granted_at - released_at < 2000);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* ---- names, status, configuration ---------------------------------------------------- */

static void names_keep_one_hash_tag(void **state)
{
    (void)state;
    dlock_client *a = open_redis(30000, 1000, NULL);
    const char *name = "a{b}c%d";
    dlock_lock *l = lock_of(a, name, 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{a%7Bb%7Dc%25d}"), 1);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{a%7Bb%7Dc%25d}:fence"), 1);
    dlock_status_info info = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(a, name, strlen(name), &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    uint64_t fence;
    assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
    assert_int_equal(info.fence, fence);
    assert_true(info.ttl_ms > 0);
    assert_non_null(strchr(info.holder, ':'));
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_status(a, name, strlen(name), &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void prefix_and_db_and_unix_socket(void **state)
{
    (void)state;
    char extra[400];
    snprintf(extra, sizeof extra, "socket = \"%s\"; db = 3; prefix = \"app:\";", server.socket);
    dlock_client *a = open_redis(30000, 1000, extra);
    dlock_lock *l = lock_of(a, "x", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    redisReply *r = test_redis_cmd(&server, "SELECT 3");
    freeReplyObject(r);
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", server.port, tv);
    r = redisCommand(c, "SELECT 3");
    freeReplyObject(r);
    r = redisCommand(c, "EXISTS app:{x}");
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    redisFree(c);
    assert_int_equal(redis_int("EXISTS %s", "app:{x}"), 0); /* not in db 0 */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void authentication(void **state)
{
    (void)state;
    redisReply *r = test_redis_cmd(&server, "ACL SETUSER locker on >s3cret ~* &* +@all");
    freeReplyObject(r);
    r = test_redis_cmd(&server, "CONFIG SET requirepass topsecret");
    freeReplyObject(r);
    dlock_client *c;
    char text[512];
    snprintf(text, sizeof text, "backend = \"redis\"; redis = { port = %d; password = \"wrong\"; };", server.port);
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "AUTH refused"));
    snprintf(text, sizeof text, "backend = \"redis\"; redis = { port = %d; };", server.port);
    assert_int_not_equal(dlock_client_open_string(&c, text), DLOCK_OK); /* NOAUTH at the first command */
    snprintf(text, sizeof text, "backend = \"redis\"; redis = { port = %d; password = \"topsecret\"; };", server.port);
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_OK);
    dlock_lock *l = lock_of(c, "auth", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
    snprintf(text, sizeof text,
             "backend = \"redis\"; redis = { port = %d; user = \"locker\"; password = \"s3cret\"; };", server.port);
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_OK);
    l = lock_of(c, "acl", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
    /* Restore: no password for the other tests. */
    test_redis_kill(&server, 1);
}

/* The least a lock user needs (docs/security.md): its key pattern, its
 * channel pattern, and the commands the client sends and the scripts call. */
#define LOCKER_ACL                                                                                    \
    "ACL SETUSER locker reset on >s3cret ~dlock:* &dlock:* +ping +evalsha +script|load +subscribe " \
    "+unsubscribe +exists +hset +hget +hexists +hincrby +hgetall +pexpire +pttl +incr +get +set +del "   \
    "+publish +time +lindex +lpop +rpush +lrem +zscore +zadd +zrem +zcard +zrange +zremrangebyscore +lrange"

static void least_privilege_acl_user_is_enough(void **state)
{
    (void)state;
    redisReply *r = test_redis_cmd(&server, LOCKER_ACL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"redis\"; lease_ms = 600; redis = { port = %d; user = \"locker\"; password = \"s3cret\"; };",
             server.port);
    dlock_client *a, *b;
    assert_int_equal(dlock_client_open_string(&a, text), DLOCK_OK);
    assert_int_equal(dlock_client_open_string(&b, text), DLOCK_OK);
    /* Everything a lock does: grant, fence, busy + queue + subscribe, the
     * release waking the waiter, watchdog renewals, status, fair mode. */
    dlock_lock *la = lock_of(a, "acl", 0), *lb = lock_of(b, "acl", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct waiter w = { lb, 99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, wait_forever, &w);
    sleep_ms(450); /* two renewals at 200 ms */
    dlock_status_info info = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(a, "acl", 3, &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    dlock_lock *fa = fair_lock_of(a, "acl-fair");
    assert_int_equal(dlock_acquire(fa, 0), DLOCK_OK);
    assert_int_equal(dlock_release(fa), DLOCK_OK);
    dlock_lock_free(fa);
    /* Shared holds and permits: grant, busy + queue, renewal, release. */
    dlock_lock_options so = DLOCK_LOCK_OPTIONS_INIT, po = DLOCK_LOCK_OPTIONS_INIT;
    so.mode = DLOCK_MODE_SHARED;
    po.mode = DLOCK_MODE_SEMAPHORE;
    po.permits = 1;
    dlock_lock *sa, *sb, *pa, *pb;
    assert_int_equal(dlock_lock_new(a, "acl-s", 5, &so, &sa), DLOCK_OK);
    assert_int_equal(dlock_lock_new(b, "acl-s", 5, &so, &sb), DLOCK_OK);
    assert_int_equal(dlock_lock_new(a, "acl-p", 5, &po, &pa), DLOCK_OK);
    assert_int_equal(dlock_lock_new(b, "acl-p", 5, &po, &pb), DLOCK_OK);
    assert_int_equal(dlock_acquire(sa, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(sb, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(pa, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(pb, 0), DLOCK_EBUSY);
    sleep_ms(450);
    assert_true(dlock_validity_ms(sa) > 0 && dlock_validity_ms(pa) > 0);
    assert_int_equal(dlock_status(a, "acl-p", 5, &info), DLOCK_OK);
    assert_int_equal(dlock_release(sa), DLOCK_OK);
    assert_int_equal(dlock_release(sb), DLOCK_OK);
    assert_int_equal(dlock_release(pa), DLOCK_OK);
    dlock_lock_free(sa);
    dlock_lock_free(sb);
    dlock_lock_free(pa);
    dlock_lock_free(pb);
    /* And nothing else: other keys are out of reach. */
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", server.port, tv);
    r = redisCommand(c, "AUTH locker s3cret");
    freeReplyObject(r);
    r = redisCommand(c, "GET other:key");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = redisCommand(c, "FLUSHALL");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisFree(c);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* ---- shared holds and semaphores ------------------------------------------------ */

/* The value of the hash key's field "" (which no owner id can be). */
static char *kind_field(const char *key)
{
    redisReply *r = test_redis_cmd(&server, "HGET %s %b", key, "", (size_t)0);
    assert_non_null(r);
    char *v = strdup(r->type == REDIS_REPLY_STRING ? r->str : "(none)");
    freeReplyObject(r);
    return v;
}

/* The layout: the hash's field "" names the kind, each holder is a member of
 * <name>:holders scored by its expiry; status counts them; a name held in
 * one kind is refused in another with a message that says which. */
static void shared_layout_status_and_kinds(void **state)
{
    (void)state;
    dlock_client *a = open_redis(30000, 100, NULL), *b = open_redis(30000, 100, NULL);
    dlock_lock *held[3];
    test_shared_kinds_hold(a, b, held);
    dlock_lock *s1 = held[0], *s2 = held[1], *p = held[2];
    char *kind = kind_field("dlock:{rw}");
    assert_string_equal(kind, "s");
    free(kind);
    assert_int_equal(redis_int("ZCARD %s", "dlock:{rw}:holders"), 2);
    long long ttl = redis_int("PTTL %s", "dlock:{rw}");
    assert_true(ttl > 29000 && ttl <= 30000);

    /* The last holder out leaves nothing behind but the fence. */
    assert_int_equal(dlock_release(s1), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{rw}"), 1);
    assert_int_equal(dlock_release(s2), DLOCK_OK);
    assert_int_equal(dlock_release(p), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{rw}"), 0);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{rw}:holders"), 0);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{sem}"), 0);
    assert_int_equal(dlock_release(s1), DLOCK_ENOTOWNER);
    dlock_lock_free(s1);
    dlock_lock_free(s2);
    dlock_lock_free(p);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void unreachable_server_is_a_clear_error(void **state)
{
    (void)state;
    dlock_client *c;
    char text[256];
    snprintf(text, sizeof text, "backend = \"redis\"; redis = { port = 1; connect_timeout_ms = 500; };");
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), "redis 127.0.0.1:1: cannot connect"));
    assert_int_equal(dlock_client_open_string(&c, "backend = \"redis\"; redis = { port = 99999; };"), DLOCK_ECONFIG);
    assert_int_equal(dlock_client_open_string(&c, "backend = \"redis\"; redis = { user = \"u\"; };"), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "redis.user needs redis.password"));
    assert_int_equal(dlock_client_open_string(&c, "backend = \"redis\"; redis = { prefix = \"a{b\"; };"),
                     DLOCK_ECONFIG);
}

/* ---- faults --------------------------------------------------------------------------- */

static void script_flush_mid_run(void **state)
{
    (void)state;
    dlock_client *a = open_redis(300, 1000, NULL), *b = open_redis(30000, 1000, NULL);
    dlock_lock *la = lock_of(a, "flush", 0), *lb = lock_of(b, "flush", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    redisReply *r = test_redis_cmd(&server, "SCRIPT FLUSH");
    freeReplyObject(r);
    sleep_ms(250); /* a renewal runs with the cache empty */
    assert_int_equal(dlock_validity_ms(la) > 0, 1);
    r = test_redis_cmd(&server, "SCRIPT FLUSH");
    freeReplyObject(r);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    r = test_redis_cmd(&server, "SCRIPT FLUSH");
    freeReplyObject(r);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void server_restart_mid_run(void **state)
{
    (void)state;
    dlock_client *a = open_redis(30000, 1000, NULL);
    dlock_lock *l = lock_of(a, "restart", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    test_redis_kill(&server, 1);
    char where[64];
    snprintf(where, sizeof where, "redis 127.0.0.1:%d", server.port);
    assert_int_equal(dlock_release(l), DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), where));
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), where));
    assert_int_equal(test_redis_start(&server), 0); /* same port, no data */
    int64_t t0 = now_ms();
    int rc;
    while ((rc = dlock_acquire(l, 0)) != DLOCK_OK && now_ms() - t0 < 5000)
        sleep_ms(50);
    if (rc != DLOCK_OK)
        fail_msg("after restart: %s: %s", dlock_strerror(rc), dlock_errmsg());
    assert_true(now_ms() - t0 < 2500); /* reconnect backoff is capped at 2 s */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}


/* The fence counter comes back older than tokens already handed out (a
 * restart from an RDB snapshot taken before the last grants, as Debian's
 * default save lines would do): the next token must still be above every
 * token issued before. */
static void fences_keep_growing_after_a_restart_from_an_older_snapshot(void **state)
{
    (void)state;
    dlock_client *a = open_redis(30000, 1000, NULL);
    dlock_lock *l = lock_of(a, "snap", 0);
    uint64_t fence = 0, highest = 0;
    for (int i = 0; i < 6; i++) {
        if (i == 3) {
            redisReply *r = test_redis_cmd(&server, "SAVE");
            assert_non_null(r);
            assert_int_equal(r->type, REDIS_REPLY_STATUS);
            freeReplyObject(r);
        }
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
        assert_true(fence > highest);
        highest = fence;
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    test_redis_kill(&server, 1);
    assert_int_equal(test_redis_start(&server), 0); /* loads the snapshot */
    int64_t t0 = now_ms();
    int rc;
    while ((rc = dlock_acquire(l, 0)) != DLOCK_OK && now_ms() - t0 < 5000)
        sleep_ms(50);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
    if (fence <= highest)
        fail_msg("token %llu after the restart, %llu was issued before it",
                 (unsigned long long)fence, (unsigned long long)highest);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}


/* A server that may evict keys with a TTL (the lock's hash has one) is
 * refused at open, with what to do; the operator can accept it. */
static void eviction_policy_that_can_drop_locks_is_refused(void **state)
{
    (void)state;
    struct test_redis evicting = { 0 };
    evicting.extra[0] = "--maxmemory";
    evicting.extra[1] = "64mb";
    evicting.extra[2] = "--maxmemory-policy";
    evicting.extra[3] = "volatile-ttl";
    assert_int_equal(test_redis_start(&evicting), 0);
    char text[512];
    snprintf(text, sizeof text, "backend = \"redis\";\nredis = { port = %d; };\n", evicting.port);
    dlock_client *c = (dlock_client *)1;
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), "volatile-ttl"));
    assert_non_null(strstr(dlock_errmsg(), "noeviction"));
    snprintf(text, sizeof text, "backend = \"redis\";\nredis = { port = %d; allow_eviction = true; };\n",
             evicting.port);
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_OK);
    dlock_client_close(c);
    test_redis_stop(&evicting);
}

static void many_locks_are_renewed_in_batches(void **state)
{
    (void)state;
    dlock_client *a = open_redis(600, 1000, NULL);
    enum { N = 200 };
    dlock_lock *l[N];
    char name[16];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "many-%d", i);
        l[i] = lock_of(a, name, 0);
        assert_int_equal(dlock_acquire(l[i], 0), DLOCK_OK);
    }
    redisReply *r = test_redis_cmd(&server, "CONFIG RESETSTAT");
    freeReplyObject(r);
    sleep_ms(500); /* two renewal rounds at 200 ms */
    r = test_redis_cmd(&server, "INFO commandstats");
    const char *at = strstr(r->str, "cmdstat_evalsha:calls=");
    long long calls = at ? atoll(at + strlen("cmdstat_evalsha:calls=")) : -1;
    freeReplyObject(r);
    /* 400 renewals, sent in batches: a handful of calls, not 400. */
    assert_true(calls > 0 && calls <= 10);
    for (int i = 0; i < N; i++) {
        assert_true(dlock_validity_ms(l[i]) > 0);
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
        dlock_lock_free(l[i]);
    }
    dlock_client_close(a);
}

/* ---- fence guard ---------------------------------------------------------------------- */

static long long guarded_set(dlock_lock *l, const char *value)
{
    uint64_t fence;
    if (dlock_fence(l, &fence) != DLOCK_OK)
        return -1;
    char token[24];
    snprintf(token, sizeof token, "%llu", (unsigned long long)fence);
    redisReply *r = test_redis_cmd(&server, "EVAL %s 2 %s %s %s %s", DLOCK_FENCE_REDIS_SET_SCRIPT, "{acct}",
                                   "{acct}:fence", token, value);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
    if (r)
        freeReplyObject(r);
    return v;
}

static void fence_guard_refuses_the_stale_holder(void **state)
{
    (void)state;
    /* A holds with a 150 ms lease and "pauses" past it; B takes over and
     * writes; A wakes up still believing it holds, and writes: refused. */
    dlock_client *a = open_redis(30000, 1000, NULL), *b = open_redis(30000, 1000, NULL);
    dlock_lock *la = lock_of(a, "acct", 150), *lb = lock_of(b, "acct", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(guarded_set(la, "from-a-1"), 1);
    uint64_t fa;
    assert_int_equal(dlock_fence(la, &fa), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 2000), DLOCK_OK); /* after A's lease ran out */
    assert_int_equal(guarded_set(lb, "from-b"), 1);
    /* A's own view: its client has marked the hold lost by now, but a
     * paused process would not have noticed; write with the token it had. */
    char token[24];
    snprintf(token, sizeof token, "%llu", (unsigned long long)fa);
    redisReply *r = test_redis_cmd(&server, "EVAL %s 2 %s %s %s %s", DLOCK_FENCE_REDIS_SET_SCRIPT, "{acct}",
                                   "{acct}:fence", token, "from-a-2");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    r = test_redis_cmd(&server, "GET {acct}");
    assert_string_equal(r->str, "from-b");
    freeReplyObject(r);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_release(la);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* ---- fair mode ------------------------------------------------------------------------ */

static int grant_counter;

struct fair_waiter {
    dlock_lock *lock;
    int64_t wait_ms;
    int rc;
    int order;
    int64_t granted_at;
};

static void *fair_wait(void *arg)
{
    struct fair_waiter *w = arg;
    w->rc = dlock_acquire(w->lock, w->wait_ms);
    if (w->rc == DLOCK_OK) {
        w->granted_at = now_ms();
        w->order = __atomic_fetch_add(&grant_counter, 1, __ATOMIC_SEQ_CST);
        sleep_ms(20);
        dlock_release(w->lock);
    }
    return NULL;
}

static void fair_mode_grants_in_arrival_order(void **state)
{
    (void)state;
    enum { N = 6 };
    grant_counter = 0;
    dlock_client *holder = open_redis(30000, 10000, NULL);
    dlock_lock *hl = fair_lock_of(holder, "queue");
    assert_int_equal(dlock_acquire(hl, 0), DLOCK_OK);
    dlock_client *c[N];
    struct fair_waiter w[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        c[i] = open_redis(30000, 10000, NULL);
        w[i] = (struct fair_waiter){ fair_lock_of(c[i], "queue"), -1, 99, -1, 0 };
        pthread_create(&t[i], NULL, fair_wait, &w[i]);
        sleep_ms(60); /* arrive one after the other */
    }
    assert_int_equal(redis_int("LLEN %s", "dlock:{queue}:queue"), N);
    assert_int_equal(dlock_release(hl), DLOCK_OK);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].rc, DLOCK_OK);
        assert_int_equal(w[i].order, i); /* first come, first served */
        if (i > 0) /* each release woke the next at once (20 ms hold) */
            assert_true(w[i].granted_at - w[i - 1].granted_at < 20 + slack_ms(40));
        dlock_lock_free(w[i].lock);
        dlock_client_close(c[i]);
    }
    assert_int_equal(redis_int("EXISTS %s", "dlock:{queue}:queue"), 0);
    dlock_lock_free(hl);
    dlock_client_close(holder);
}

static void fair_waiter_that_gives_up_leaves_the_queue(void **state)
{
    (void)state;
    grant_counter = 0;
    dlock_client *a = open_redis(30000, 10000, NULL), *b = open_redis(30000, 10000, NULL),
                 *c = open_redis(30000, 10000, NULL);
    dlock_lock *la = fair_lock_of(a, "give-up"), *lb = fair_lock_of(b, "give-up"), *lc = fair_lock_of(c, "give-up");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 100), DLOCK_ETIMEDOUT); /* B queued, then gave up */
    assert_int_equal(redis_int("LLEN %s", "dlock:{give-up}:queue"), 0);
    struct fair_waiter w = { lc, -1, 99, -1, 0 };
    pthread_t t;
    pthread_create(&t, NULL, fair_wait, &w);
    sleep_ms(50);
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.granted_at - released_at < slack_ms(50)); /* not held up by B's deadline */
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_lock_free(lc);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

static void killed_fair_waiter_drops_out(void **state)
{
    (void)state;
    grant_counter = 0;
    const char *extra = "waiter_timeout_ms = 500;";
    /* The child is forked first, while this process has no threads of ours
     * (a multi-threaded parent's child may only exec or call
     * async-signal-safe functions), and starts waiting when told to. */
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(go[1]);
        char ch;
        if (read(go[0], &ch, 1) != 1)
            _exit(2);
        dlock_client *c = open_redis(30000, 10000, extra);
        dlock_lock *l = fair_lock_of(c, "dead");
        dlock_acquire(l, -1);
        _exit(0);
    }
    close(go[0]);
    dlock_client *a = open_redis(30000, 10000, extra);
    dlock_lock *la = fair_lock_of(a, "dead");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(write(go[1], "G", 1), 1);
    close(go[1]);
    int64_t t0 = now_ms();
    while (redis_int("LLEN %s", "dlock:{dead}:queue") < 1 && now_ms() - t0 < 3000)
        sleep_ms(10);
    assert_int_equal(redis_int("LLEN %s", "dlock:{dead}:queue"), 1); /* the child is first in the queue */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dlock_client *b = open_redis(30000, 10000, extra);
    struct fair_waiter w = { fair_lock_of(b, "dead"), -1, 99, -1, 0 };
    pthread_t t;
    pthread_create(&t, NULL, fair_wait, &w);
    sleep_ms(50);
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    /* The dead waiter's deadline (500 ms after its last try) passes, and B
     * tries at least every 250 ms. */
    assert_true(w.granted_at - released_at < 500 + 250 + 100);
    dlock_lock_free(w.lock);
    dlock_lock_free(la);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void conformance_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    snprintf(buf, size,
             "backend = \"redis\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "redis = { port = %d; command_timeout_ms = 1000; connect_timeout_ms = 1000; };\n",
             lease_ms, retry_cap_ms, server.port);
}

/* ---- lock caching ---------------------------------------------------------------- */

/* A client that keeps released holds; cache_more goes into its cache group. */
static dlock_client *open_redis_caching_with(int idle_ms, const char *cache_more)
{
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"redis\";\nlease_ms = 3000;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "cache = { idle_ms = %d; %s };\nredis = { port = %d; };\n", idle_ms, cache_more, server.port);
    dlock_client *c = NULL;
    if (dlock_client_open_string(&c, text) != DLOCK_OK)
        fail_msg("open: %s", dlock_errmsg());
    return c;
}

static dlock_client *open_redis_caching(int idle_ms)
{
    return open_redis_caching_with(idle_ms, "");
}

static long long script_calls(void)
{
    redisReply *r = test_redis_cmd(&server, "INFO commandstats");
    assert_non_null(r);
    const char *at = r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_evalsha:calls=") : NULL;
    long long n = at ? atoll(at + strlen("cmdstat_evalsha:calls=")) : 0;
    freeReplyObject(r);
    return n;
}

/* Until the caching client's watch of name is confirmed by the server (a
 * request made before would go unheard until the waiter's next look). */
static void wait_for_the_watch(const char *name)
{
    char pattern[128];
    snprintf(pattern, sizeof pattern, "dlock:{%s}:cw:*", name);
    int64_t end = now_ms() + slack_ms(2000);
    for (;;) {
        redisReply *r = test_redis_cmd(&server, "PUBSUB CHANNELS %s", pattern);
        bool active = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1;
        if (r)
            freeReplyObject(r);
        if (active)
            return;
        if (now_ms() > end)
            fail_msg("the watch of %s was not subscribed", pattern);
        sleep_ms(5);
    }
}

static uint64_t fence_now(dlock_lock *l)
{
    uint64_t f = 0;
    assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
    return f;
}

static void a_kept_hold_is_taken_again_with_no_command(void **state)
{
    (void)state;
    dlock_client *c = open_redis_caching(60000);
    dlock_lock *l = lock_of(c, "kept", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t fence = fence_now(l);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{kept}"), 1); /* still held for this client */
    long long before = script_calls();
    for (int i = 0; i < 50; i++) {
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(fence_now(l), fence);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    assert_int_equal(script_calls() - before, 0);
    dlock_lock_free(l); /* the last handle gives it back */
    assert_int_equal(redis_int("EXISTS %s", "dlock:{kept}"), 0);
    dlock_client_close(c);
}

static void another_client_asking_gets_the_kept_hold_at_once(void **state)
{
    (void)state;
    dlock_client *a = open_redis_caching(60000);
    dlock_client *b = open_redis(3000, 100, NULL);
    dlock_lock *la = lock_of(a, "asked", 0);
    dlock_lock *lb = lock_of(b, "asked", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t fence = fence_now(la);
    wait_for_the_watch("asked");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(lb, 10000), DLOCK_OK);
    /* The busy answer told the holder, which gave the hold back, and its
     * release woke the waiter: far sooner than the minute it stays idle. */
    assert_true(now_ms() - t0 < slack_ms(1000));
    assert_true(fence_now(lb) > fence);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_client_close(b);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* Two clients that keep their holds take one name in turns, each asking
 * right after the other's release: every request is heard (the watch of
 * the name stays subscribed from one hold to the next, and the first was
 * confirmed before the hold could be kept), so no turn waits for the
 * minute a kept hold may stay idle, nor for a waiter's next look. */
static void two_caching_clients_take_turns_at_once(void **state)
{
    (void)state;
    /* cooldown_ms = 0: kept every time, though taken in turns. */
    dlock_client *a = open_redis_caching_with(60000, "cooldown_ms = 0;");
    dlock_client *b = open_redis_caching_with(60000, "cooldown_ms = 0;");
    dlock_lock *la = lock_of(a, "turns", 0);
    dlock_lock *lb = lock_of(b, "turns", 0);
    int64_t slowest = 0;
    for (int i = 0; i < 20; i++) {
        dlock_lock *next = i % 2 ? lb : la;
        int64_t t0 = now_ms();
        assert_int_equal(dlock_acquire(next, 10000), DLOCK_OK);
        slowest = now_ms() - t0 > slowest ? now_ms() - t0 : slowest;
        assert_int_equal(dlock_release(next), DLOCK_OK);
        assert_int_equal(redis_int("EXISTS %s", "dlock:{turns}"), 1); /* kept */
    }
    if (slowest > slack_ms(1000))
        fail_msg("a turn took %lld ms", (long long)slowest);
    dlock_lock_free(lb);
    dlock_client_close(b);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* A grant made while others are queued for the name (a waiter of another
 * client, put in the queue here by hand, its deadline a minute away) is
 * not kept: the waiter's request may have been answered before the grant,
 * and a kept hold would let this client take the name again and again
 * while the waiter waits for a release. */
static void a_hold_granted_while_others_wait_is_not_kept(void **state)
{
    (void)state;
    dlock_client *a = open_redis_caching(60000);
    dlock_lock *la = lock_of(a, "queued-grant", 0);
    redisReply *r = test_redis_cmd(&server, "RPUSH %s %s", "dlock:{queued-grant}:queue", "ffff:1");
    assert_non_null(r);
    freeReplyObject(r);
    r = test_redis_cmd(&server, "TIME");
    assert_non_null(r);
    long long now_us = atoll(r->element[0]->str) * 1000000LL + atoll(r->element[1]->str);
    freeReplyObject(r);
    char deadline[32];
    snprintf(deadline, sizeof deadline, "%lld", now_us / 1000 + 60000);
    r = test_redis_cmd(&server, "ZADD %s %s %s", "dlock:{queued-grant}:timeouts", deadline, "ffff:1");
    if (r)
        freeReplyObject(r);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{queued-grant}"), 0); /* released for real */
    /* Nobody queued any more: the next hold is kept. */
    assert_int_equal(redis_int("DEL %s", "dlock:{queued-grant}:queue"), 1);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{queued-grant}"), 1);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* A fair handle's hold is never kept, even on a name whose holds the
 * client watches because a plain handle's hold of it was kept: its turn
 * comes in arrival order. */
static void a_fair_hold_of_a_watched_name_is_not_kept(void **state)
{
    (void)state;
    dlock_client *a = open_redis_caching(60000);
    dlock_lock *plain = lock_of(a, "fair-after", 0);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    dlock_lock *fair = NULL;
    assert_int_equal(dlock_lock_new(a, "fair-after", strlen("fair-after"), &o, &fair), DLOCK_OK);
    assert_int_equal(dlock_acquire(plain, 0), DLOCK_OK);
    assert_int_equal(dlock_release(plain), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{fair-after}"), 1); /* kept */
    assert_int_equal(dlock_acquire(fair, 5000), DLOCK_OK); /* the kept hold given back first */
    assert_int_equal(dlock_release(fair), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{fair-after}"), 0); /* released for real */
    dlock_lock_free(fair);
    dlock_lock_free(plain);
    dlock_client_close(a);
}

/* An operator breaks a name whose hold a client kept: the break tells the
 * client, as a busy answer would, so its next acquire goes to the server
 * for a token past the break's, not at the next renewal (up to a second
 * here). */
static void a_broken_kept_hold_is_not_taken_over(void **state)
{
    (void)state;
    dlock_client *a = open_redis_caching(60000);
    dlock_client *op = open_redis(3000, 100, NULL);
    dlock_lock *la = lock_of(a, "broken-kept", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t kept = fence_now(la);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    int broken = 0;
    uint64_t past = 0;
    assert_int_equal(dlock_break(op, "broken-kept", strlen("broken-kept"), &broken, &past), DLOCK_OK);
    assert_int_equal(broken, 1);
    int64_t t0 = now_ms();
    uint64_t fence = kept;
    while (fence == kept && now_ms() - t0 < slack_ms(300)) {
        /* A try while the kept hold is being given back would be busy. */
        assert_int_equal(dlock_acquire(la, 1000), DLOCK_OK);
        fence = fence_now(la);
        assert_int_equal(dlock_release(la), DLOCK_OK);
        sleep_ms(5);
    }
    if (fence <= past)
        fail_msg("still taking over the broken hold (token %llu, the break's %llu) after %lld ms",
                 (unsigned long long)fence, (unsigned long long)past, (long long)(now_ms() - t0));
    dlock_client_close(op);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* A reader of another client is refused while the name is kept: its busy
 * answer asks the holder as an exclusive request's does. */
static void a_shared_request_gets_the_kept_hold_at_once(void **state)
{
    (void)state;
    dlock_client *a = open_redis_caching(60000);
    dlock_client *b = open_redis(3000, 100, NULL);
    dlock_lock *la = lock_of(a, "read-asked", 0);
    dlock_lock *reader = test_lock_of_kind(b, "read-asked", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    wait_for_the_watch("read-asked");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(reader, 10000), DLOCK_OK);
    assert_true(now_ms() - t0 < slack_ms(1000));
    assert_int_equal(dlock_release(reader), DLOCK_OK);
    dlock_lock_free(reader);
    dlock_client_close(b);
    dlock_lock_free(la);
    dlock_client_close(a);
}

static void a_try_during_the_hold_makes_its_release_a_real_one(void **state)
{
    (void)state;
    dlock_client *a = open_redis_caching(60000);
    dlock_client *b = open_redis(3000, 100, NULL);
    dlock_lock *la = lock_of(a, "tried", 0);
    dlock_lock *lb = lock_of(b, "tried", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    wait_for_the_watch("tried");
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    /* The message comes on the subscriber's connection: wait for it to be
     * read before releasing. */
    int64_t end = now_ms() + slack_ms(2000);
    bool real = false;
    while (!real && now_ms() < end) {
        sleep_ms(10);
        /* Taken again and released: kept only if nobody asked. */
        assert_int_equal(dlock_release(la), DLOCK_OK);
        real = redis_int("EXISTS %s", "dlock:{tried}") == 0;
        if (!real)
            assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    }
    assert_true(real);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_client_close(b);
    dlock_lock_free(la);
    dlock_client_close(a);
}

static void a_kept_hold_is_given_back_when_its_watch_may_have_missed_a_request(void **state)
{
    (void)state;
    dlock_client *a = open_redis_caching(60000);
    dlock_lock *la = lock_of(a, "cut", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    wait_for_the_watch("cut");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{cut}"), 1);
    /* A request published while the subscriber's connection is down
     * reaches nobody: made again on a new connection, the watch counts as
     * told, and the hold goes back. */
    redisReply *r = test_redis_cmd(&server, "CLIENT KILL TYPE pubsub");
    if (r)
        freeReplyObject(r);
    int64_t end = now_ms() + slack_ms(3000);
    while (redis_int("EXISTS %s", "dlock:{cut}") == 1 && now_ms() < end)
        sleep_ms(10);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{cut}"), 0);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* An operator deletes the lock's hash. */
static void delete_the_hash(const char *name)
{
    char key[256];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    redisReply *r = test_redis_cmd(&server, "DEL %s", key);
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        fail_msg("DEL %s did not delete it", key);
    freeReplyObject(r);
}

int main(void)
{
    if (getenv("CMOCKA_FILTER")) /* one case by name */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    /* The conformance suite first, on the same server. */
    if (test_redis_start(&server) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] redis-server did not start\n");
        return 1;
    }
    static const struct conformance_target target = { "redis conformance", conformance_config, delete_the_hash,
                                                      flush_all, 0, 1, REDIS_WAITER_TIMEOUT_MS,
                                                      CONFORMANCE_NATIVE_ATTEMPTS | CONFORMANCE_NATIVE_RELEASES };
    int failed = conformance_run(&target);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(reentry_counts_and_server_layout, before_each),
        cmocka_unit_test_setup(release_by_a_non_owner_changes_nothing, before_each),
        cmocka_unit_test_setup(explicit_lease_expires, before_each),
        cmocka_unit_test_setup(watchdog_keeps_a_hold_past_three_leases, before_each),
        cmocka_unit_test_setup(deleting_the_hash_fires_on_lost_within_a_renewal, before_each),
        cmocka_unit_test_setup(release_wakes_the_waiter_at_once, before_each),
        cmocka_unit_test_setup(waiter_survives_losing_its_subscriber_connection, before_each),
        cmocka_unit_test_setup(release_while_the_subscriber_reconnects_is_not_missed, before_each),
        cmocka_unit_test_setup(names_keep_one_hash_tag, before_each),
        cmocka_unit_test_setup(prefix_and_db_and_unix_socket, before_each),
        cmocka_unit_test_setup(least_privilege_acl_user_is_enough, before_each),
        cmocka_unit_test_setup(unreachable_server_is_a_clear_error, before_each),
        cmocka_unit_test_setup(script_flush_mid_run, before_each),
        cmocka_unit_test_setup(many_locks_are_renewed_in_batches, before_each),
        cmocka_unit_test_setup(fence_guard_refuses_the_stale_holder, before_each),
        cmocka_unit_test_setup(fair_mode_grants_in_arrival_order, before_each),
        cmocka_unit_test_setup(fair_waiter_that_gives_up_leaves_the_queue, before_each),
        cmocka_unit_test_setup(killed_fair_waiter_drops_out, before_each),
        cmocka_unit_test_setup(shared_layout_status_and_kinds, before_each),
        cmocka_unit_test_setup(authentication, before_each),
        cmocka_unit_test_setup(server_restart_mid_run, before_each),
        cmocka_unit_test_setup(fences_keep_growing_after_a_restart_from_an_older_snapshot, before_each),
        cmocka_unit_test_setup(eviction_policy_that_can_drop_locks_is_refused, before_each),
        cmocka_unit_test_setup(a_kept_hold_is_taken_again_with_no_command, before_each),
        cmocka_unit_test_setup(another_client_asking_gets_the_kept_hold_at_once, before_each),
        cmocka_unit_test_setup(two_caching_clients_take_turns_at_once, before_each),
        cmocka_unit_test_setup(a_broken_kept_hold_is_not_taken_over, before_each),
        cmocka_unit_test_setup(a_fair_hold_of_a_watched_name_is_not_kept, before_each),
        cmocka_unit_test_setup(a_hold_granted_while_others_wait_is_not_kept, before_each),
        cmocka_unit_test_setup(a_try_during_the_hold_makes_its_release_a_real_one, before_each),
        cmocka_unit_test_setup(a_shared_request_gets_the_kept_hold_at_once, before_each),
        cmocka_unit_test_setup(a_kept_hold_is_given_back_when_its_watch_may_have_missed_a_request, before_each),
    };
    failed += cmocka_run_group_tests_name("redis", tests, start_server, stop_server);
    return failed ? 1 : 0;
}
