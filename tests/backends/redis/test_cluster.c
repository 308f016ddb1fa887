/* tests/backends/redis/test_cluster.c - the redis backend on a real Redis Cluster of
 * 6 nodes (3 masters, 3 replicas) this program starts on private ports
 * through tests/support/redis_cluster.sh (and stops by PID): the slot
 * function against the server's, the conformance suite, locks spread over
 * every master and renewed in per-slot batches, a slot migrated while a
 * lock in it is held (ASK, TRYAGAIN, then MOVED), a manual failover and a killed
 * master while locks are held and waited for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../../backends/redis/redis_cluster.h"
#include "../../conformance/conformance.h"
#include "../../support/async_result.h"
#include "../../support/redis_server.h"
#include "../../support/service.h"
#include "../../support/test_time.h"
#include "../../support/test_client.h"

#include <dlock.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODES 6

static struct test_service cluster = { .script = "redis_cluster", .nodes = NODES };
static bool node_killed[NODES];

static int node_port(int i)
{
    return cluster.port + i;
}

/* ---- talking to nodes directly --------------------------------------------------- */

static redisContext *node_connect(int port)
{
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        c = NULL;
    }
    return c;
}

static long long node_int(int port, const char *fmt, const char *arg)
{
    redisReply *r = test_redis_cmd_at(port, fmt, arg);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return v;
}

/* The node's id (CLUSTER MYID) into id[41]. */
static void node_id(int port, char id[41])
{
    redisReply *r = test_redis_cmd_at(port, "CLUSTER MYID");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(id, 41, "%s", r->str);
    freeReplyObject(r);
}

static bool is_master(int port)
{
    redisReply *r = test_redis_cmd_at(port, "ROLE");
    bool yes = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && strcmp(r->element[0]->str, "master") == 0;
    if (r)
        freeReplyObject(r);
    return yes;
}

/* The port of the master serving slot, as the cluster says now (asked of
 * a live node), 0 if none. */
static int master_of_slot(unsigned slot)
{
    for (int i = 0; i < NODES; i++) {
        if (node_killed[i])
            continue;
        redisReply *r = test_redis_cmd_at(node_port(i), "CLUSTER SLOTS");
        int port = 0;
        for (size_t j = 0; r && r->type == REDIS_REPLY_ARRAY && j < r->elements; j++) {
            redisReply *range = r->element[j];
            if ((unsigned)range->element[0]->integer <= slot && slot <= (unsigned)range->element[1]->integer)
                port = (int)range->element[2]->element[1]->integer;
        }
        if (r)
            freeReplyObject(r);
        /* A node's view lags a switch by a moment: an answer naming a
         * node that is no longer a master is stale, and the next node is
         * asked. */
        if (port && is_master(port))
            return port;
    }
    return 0;
}

static unsigned server_slot(const char *key)
{
    long long v = node_int(node_port(0), "CLUSTER KEYSLOT %s", key);
    assert_true(v >= 0);
    return (unsigned)v;
}

static unsigned lock_slot(const char *name)
{
    char key[300];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    return server_slot(key);
}

/* Runs fmt on the master that serves key's slot now. */
static redisReply *key_cmd(const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = test_redis_vcmd_at(master_of_slot(server_slot(key)), fmt, ap);
    va_end(ap);
    return r;
}

static bool lock_exists(const char *name)
{
    char key[300];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    redisReply *r = key_cmd(key, "EXISTS %s", key);
    bool yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    return yes;
}

/* ---- the conformance target ------------------------------------------------------ */

static void write_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    snprintf(buf, size,
             "backend = \"redis\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "redis = { cluster = ( \"127.0.0.1:%d\", \"127.0.0.1:%d\" ); command_timeout_ms = 1000; "
             "connect_timeout_ms = 500; };\n",
             lease_ms, retry_cap_ms, node_port(0), node_port(1));
}

static void break_hold(const char *name)
{
    char key[300];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    redisReply *r = key_cmd(key, "DEL %s", key);
    if (r)
        freeReplyObject(r);
}

static void flush_masters(void)
{
    for (int i = 0; i < NODES; i++)
        if (!node_killed[i] && is_master(node_port(i))) {
            redisReply *r = test_redis_cmd_at(node_port(i), "FLUSHALL");
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

/* A lock name whose keys fall in slot (searched with the server's own
 * CLUSTER KEYSLOT). */
static void name_in_slot(unsigned slot, const char *stem, char out[64])
{
    redisContext *c = node_connect(node_port(0));
    assert_non_null(c);
    for (int i = 0; i < 200000; i++) {
        snprintf(out, 64, "%s%d", stem, i);
        redisReply *r = redisCommand(c, "CLUSTER KEYSLOT dlock:{%s}", out);
        bool hit = r && r->type == REDIS_REPLY_INTEGER && (unsigned)r->integer == slot;
        if (r)
            freeReplyObject(r);
        if (hit) {
            redisFree(c);
            return;
        }
    }
    redisFree(c);
    fail_msg("no name found in slot %u", slot);
}

/* ---- cases -------------------------------------------------------------------------- */

static void slot_function_matches_the_server(void **state)
{
    (void)state;
    static const char *const keys[] = { "", "a", "dlock:{x}", "{}", "{}x", "x{}y", "{a", "a}", "{a}{b}", "x{a}y{b}",
                                        "{{a}}", "dlock:{%7Bname%7D}:fence", "123456789", "\xff\xfe{\x01}" };
    redisContext *c = node_connect(node_port(0));
    assert_non_null(c);
    char random_key[40];
    for (size_t i = 0; i < 2000 + sizeof keys / sizeof keys[0]; i++) {
        const char *key = random_key;
        size_t len;
        if (i < sizeof keys / sizeof keys[0]) {
            key = keys[i];
            len = strlen(key);
        } else {
            len = (size_t)(rand() % (int)sizeof random_key);
            for (size_t j = 0; j < len; j++)
                random_key[j] = (char)(j % 5 == 2 ? "{}"[rand() % 2] : rand() % 256);
        }
        redisReply *r = redisCommand(c, "CLUSTER KEYSLOT %b", key, len);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        assert_int_equal(redis_cluster_slot(key, len), (unsigned)r->integer);
        freeReplyObject(r);
    }
    redisFree(c);
    assert_int_equal(redis_cluster_slot("123456789", 9), 0x31C3 % 16384); /* the CRC16 check value */
}

/* 300 names land on all three masters; with a 600 ms lease the watchdog
 * keeps every one through 3 leases (per-slot renewal batches), and the
 * client's own subscriptions work on whichever node a name lives on. */
static void names_spread_over_every_master_and_renew(void **state)
{
    (void)state;
    enum { N = 300 };
    dlock_client *c = open_ok(600);
    dlock_lock *locks[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "spread-%d", i);
        locks[i] = test_lock_named(c, name);
        assert_int_equal(dlock_acquire(locks[i], 0), DLOCK_OK);
    }
    int masters_with_keys = 0;
    for (int i = 0; i < NODES; i++)
        if (is_master(node_port(i)))
            masters_with_keys += node_int(node_port(i), "DBSIZE", NULL) > 0;
    assert_int_equal(masters_with_keys, 3);
    usleep(3 * 600 * 1000);
    for (int i = 0; i < N; i++) {
        assert_true(dlock_validity_ms(locks[i]) > 0);
        assert_int_equal(dlock_release(locks[i]), DLOCK_OK);
        dlock_lock_free(locks[i]);
    }
    assert_false(lock_exists("spread-7"));
    dlock_client_close(c);
}

struct waiter {
    dlock_client *client;
    const char *name;
    int64_t wait_ms;
    int rc;
    uint64_t fence;
};

static void *wait_for_lock(void *arg)
{
    struct waiter *w = arg;
    dlock_lock *l = test_lock_named(w->client, w->name);
    w->rc = dlock_acquire(l, w->wait_ms);
    if (w->rc == DLOCK_OK) {
        dlock_fence(l, &w->fence);
        dlock_release(l);
    }
    dlock_lock_free(l);
    return NULL;
}

static void set_slot_everywhere(unsigned slot, const char *node)
{
    for (int i = 0; i < NODES; i++) {
        if (node_killed[i] || !is_master(node_port(i)))
            continue;
        redisReply *r = test_redis_cmd_at(node_port(i), "CLUSTER SETSLOT %u NODE %s", slot, node);
        if (r)
            freeReplyObject(r);
    }
}

/* Moves every key of slot from src to dst (MIGRATE, a hundred at a time). */
static void migrate_keys(unsigned slot, int src, int dst)
{
    for (;;) {
        redisReply *r = test_redis_cmd_at(src, "CLUSTER GETKEYSINSLOT %u 100", slot);
        assert_non_null(r);
        size_t n = r->elements;
        for (size_t i = 0; i < n; i++) {
            redisReply *m = test_redis_cmd_at(src, "MIGRATE 127.0.0.1 %d %s 0 5000", dst, r->element[i]->str);
            assert_non_null(m);
            if (m->type == REDIS_REPLY_ERROR)
                fail_msg("MIGRATE %s: %s", r->element[i]->str, m->str);
            freeReplyObject(m);
        }
        freeReplyObject(r);
        if (n == 0)
            break;
    }
}

/* Marks slot as moving from src to dst, on both. */
static void start_migration(unsigned slot, int src, int dst)
{
    char src_id[41], dst_id[41];
    node_id(src, src_id);
    node_id(dst, dst_id);
    redisReply *r = test_redis_cmd_at(dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, src_id);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = test_redis_cmd_at(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, dst_id);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* Moves the rest of the slot's keys, then hands the slot to dst. */
static void finish_migration(unsigned slot, int src, int dst)
{
    char dst_id[41];
    node_id(dst, dst_id);
    migrate_keys(slot, src, dst);
    set_slot_everywhere(slot, dst_id);
    assert_int_equal(master_of_slot(slot), dst);
}

/* Another master than port. */
static int other_master(int port)
{
    for (int i = 0; i < NODES; i++)
        if (!node_killed[i] && node_port(i) != port && is_master(node_port(i)))
            return node_port(i);
    return 0;
}

/* Moves slot, with its keys, to another master at once (as a resharding
 * does it: importing, migrating, the keys, then the new owner everywhere);
 * returns that master's port. */
static int move_slot(unsigned slot)
{
    int src = master_of_slot(slot), dst = other_master(src);
    assert_true(src && dst);
    start_migration(slot, src, dst);
    finish_migration(slot, src, dst);
    return dst;
}

/* A lock is held while its slot moves to another master: reads of a new
 * lock in the half-migrated slot follow ASK, its acquire is refused with
 * TRYAGAIN until the slot has moved, the held one keeps renewing, and once
 * migrated its renewals and release follow the MOVED answers. */
static void a_held_lock_follows_its_slot_to_another_master(void **state)
{
    (void)state;
    dlock_client *c = open_ok(900);
    dlock_lock *held = test_lock_named(c, "migrating");
    assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
    uint64_t fence_before;
    assert_int_equal(dlock_fence(held, &fence_before), DLOCK_OK);
    unsigned slot = lock_slot("migrating");
    int src = master_of_slot(slot), dst = other_master(src);
    assert_true(src && dst);
    start_migration(slot, src, dst);

    /* A lock of the same slot that has no keys yet: one-key reads are sent
     * on to the target (ASK, then ASKING there); the acquire script, which
     * names several keys none of which exist yet, is refused with TRYAGAIN
     * until the migration ends: a clear "unavailable", in bounded time. */
    char other[64];
    name_in_slot(slot, "neighbour-", other);
    dlock_status_info info = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(c, other, strlen(other), &info), DLOCK_OK);
    assert_false(info.held);
    dlock_lock *fresh = test_lock_named(c, other);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(fresh, 0), DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), "TRYAGAIN"));
    assert_true(now_ms() - t0 < 1000); /* one attempt, no pause inside the backend */
    /* With a wait budget the core tries again (cancellably) until it runs
     * out, and no longer than it. */
    t0 = now_ms();
    assert_int_equal(dlock_acquire(fresh, 400), DLOCK_EUNAVAILABLE);
    int64_t took = now_ms() - t0;
    if (took < 300 || took > 1500)
        fail_msg("an acquire with 400 ms to wait on a slot between two states took %lld ms", (long long)took);
    /* The held lock's keys are all still on the source: it renews there. */
    assert_int_equal(dlock_renew(held), DLOCK_OK);

    /* Move the rest of the slot, then hand it over. */
    finish_migration(slot, src, dst);

    /* Two leases later the migrated hold is still ours (renewals followed
     * MOVED), and both locks release on the new master. */
    usleep(2 * 900 * 1000);
    assert_true(dlock_validity_ms(held) > 0);
    assert_int_equal(dlock_renew(held), DLOCK_OK);
    assert_true(lock_exists("migrating"));
    assert_int_equal(dlock_release(held), DLOCK_OK);
    assert_false(lock_exists("migrating"));
    assert_int_equal(dlock_acquire(fresh, 0), DLOCK_OK);
    assert_true(lock_exists(other));
    assert_int_equal(dlock_release(fresh), DLOCK_OK);
    /* The fence counter moved with the slot: the next grant is higher. */
    assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
    uint64_t fence_after;
    assert_int_equal(dlock_fence(held, &fence_after), DLOCK_OK);
    assert_true(fence_after > fence_before);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    dlock_lock_free(held);
    dlock_lock_free(fresh);
    dlock_client_close(c);
}

/* An acquire and a release of the non-blocking API go to the master of
 * the lock's slot without a thread (the caller's loop waits on the
 * connection). After the slot has moved, the attempt sent there on the
 * client's old map is answered MOVED without running: it is made again by
 * the blocking path, which follows the redirection, and the grant comes
 * with a higher fence; the release then goes to the new master. */
static void non_blocking_round_trips_go_to_the_slots_master(void **state)
{
    (void)state;
    dlock_client *c = open_ok(3000);
    dlock_lock *l = test_lock_named(c, "native-slot");
    /* The first use connects to the slot's master and loads the scripts
     * there: blocking calls, which a round trip without a thread does not make. */
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    long long parked = test_client_metric(c, "dlock_acquire_attempts_parked_total");
    long long parked_releases = test_client_metric(c, "dlock_releases_parked_total");
    struct async_result granted = { 0 }, released = { 0 };
    assert_int_equal(async_acquire_looping(c, l, 0, slack_ms(5000), &granted), DLOCK_OK);
    uint64_t fence_before;
    assert_int_equal(dlock_fence(l, &fence_before), DLOCK_OK);
    assert_int_equal(dlock_release_start(l, async_record, &released), DLOCK_OK);
    for (int64_t end = now_ms() + slack_ms(5000); released.calls == 0 && now_ms() < end;)
        async_loop_turn(c, 20);
    assert_int_equal(released.calls, 1);
    assert_int_equal(released.rc, DLOCK_OK);
    assert_int_equal(test_client_metric(c, "dlock_acquire_attempts_parked_total"), parked + 1);
    assert_int_equal(test_client_metric(c, "dlock_releases_parked_total"), parked_releases + 1);

    move_slot(lock_slot("native-slot"));
    memset(&granted, 0, sizeof granted);
    memset(&released, 0, sizeof released);
    assert_int_equal(async_acquire_looping(c, l, 0, slack_ms(5000), &granted), DLOCK_OK);
    uint64_t fence_after;
    assert_int_equal(dlock_fence(l, &fence_after), DLOCK_OK);
    assert_true(fence_after > fence_before);
    assert_true(lock_exists("native-slot"));
    assert_int_equal(dlock_release_start(l, async_record, &released), DLOCK_OK);
    for (int64_t end = now_ms() + slack_ms(5000); released.calls == 0 && now_ms() < end;)
        async_loop_turn(c, 20);
    assert_int_equal(released.calls, 1);
    assert_int_equal(released.rc, DLOCK_OK);
    assert_false(lock_exists("native-slot"));
    /* Sent to the old master and answered MOVED, then to the new one. */
    assert_int_equal(test_client_metric(c, "dlock_acquire_attempts_parked_total"), parked + 2);
    assert_int_equal(test_client_metric(c, "dlock_releases_parked_total"), parked_releases + 2);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* The replica of the master that serves slot, 0 if none. */
static int replica_of(int master_port)
{
    char id[41];
    node_id(master_port, id);
    for (int i = 0; i < NODES; i++) {
        if (node_killed[i] || node_port(i) == master_port)
            continue;
        redisReply *r = test_redis_cmd_at(node_port(i), "INFO replication");
        char want[64];
        snprintf(want, sizeof want, "master_port:%d\r", master_port);
        bool yes = r && r->type == REDIS_REPLY_STRING && strstr(r->str, want) != NULL;
        if (r)
            freeReplyObject(r);
        if (yes)
            return node_port(i);
    }
    return 0;
}

static int wait_until_master(int port, int64_t within_ms)
{
    int64_t end = now_ms() + within_ms;
    while (now_ms() < end) {
        if (is_master(port))
            return 1;
        usleep(50 * 1000);
    }
    return 0;
}

/* 1 once the cluster's view (as master_of_slot reads it) puts slot on
 * port, 0 if not within within_ms. */
static int wait_until_slot_served_by(unsigned slot, int port, int64_t within_ms)
{
    int64_t end = now_ms() + within_ms;
    while (now_ms() < end) {
        if (master_of_slot(slot) == port)
            return 1;
        usleep(50 * 1000);
    }
    return 0;
}

/* CLUSTER FAILOVER on the replica of a held lock's master, with a waiter
 * queued: the hold keeps renewing on the promoted replica (the grant was
 * replicated before the switch), the waiter gets the lock after the
 * release, and new locks in the slot are served. */
static void a_manual_failover_keeps_holds_and_waiters(void **state)
{
    (void)state;
    dlock_client *a = open_ok(900), *b = open_ok(900);
    dlock_lock *held = test_lock_named(a, "failover");
    assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
    int master = master_of_slot(lock_slot("failover"));
    int replica = replica_of(master);
    assert_true(replica > 0);
    /* WAIT: the grant is on the replica before the switch. */
    char key[64] = "dlock:{failover}";
    redisReply *r = key_cmd(key, "WAIT 1 1000");
    freeReplyObject(r);
    struct waiter w = { b, "failover", 20000, -1, 0 };
    pthread_t t;
    pthread_create(&t, NULL, wait_for_lock, &w);
    /* Nothing is asserted while the waiter runs: a failed assertion here
     * would leave its thread behind and hide what went wrong behind a
     * leaked-thread report. The first broken step is kept instead, and
     * the hold is released (so the waiter ends) before it is reported. */
    const char *broken = NULL;
    usleep(200 * 1000);
    r = test_redis_cmd_at(replica, "CLUSTER FAILOVER");
    if (r == NULL || r->type != REDIS_REPLY_STATUS)
        broken = "CLUSTER FAILOVER was refused";
    if (r)
        freeReplyObject(r);
    if (!broken && !wait_until_master(replica, slack_ms(10000)))
        broken = "the replica was not promoted";
    /* The first node asked may learn of the switch a moment later. */
    if (!broken && !wait_until_slot_served_by(lock_slot("failover"), replica, slack_ms(5000)))
        broken = "the slot is not served by the promoted replica";
    if (!broken)
        usleep(2 * 900 * 1000);
    if (!broken && dlock_validity_ms(held) <= 0)
        broken = "the hold lapsed across the failover";
    if (!broken && dlock_renew(held) != DLOCK_OK)
        broken = "the hold does not renew on the promoted replica";
    uint64_t fence = 0;
    if (!broken && dlock_fence(held, &fence) != DLOCK_OK)
        broken = "the hold has no fence";
    int64_t released_at = now_ms();
    int released = dlock_release(held);
    pthread_join(t, NULL);
    if (broken)
        fail_msg("%s", broken);
    assert_int_equal(released, DLOCK_OK);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.fence > fence);
    /* The waiter is woken through the new master or, if its subscription
     * was on the demoted one, after at most the holder's lease. */
    assert_true(now_ms() - released_at < 900 + slack_ms(500));
    dlock_lock_free(held);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A master SIGKILLed: its slots answer "unavailable" until its replica
 * is promoted (node timeout 1 s), then locks there are granted again;
 * holds on the other masters keep renewing throughout. */
static void a_killed_master_is_replaced_and_its_slots_serve_again(void **state)
{
    (void)state;
    int master = master_of_slot(lock_slot("victim"));
    int replica = replica_of(master);
    assert_true(replica > 0);
    long long pid = -1;
    redisReply *r = test_redis_cmd_at(master, "INFO server");
    const char *p = r ? strstr(r->str, "process_id:") : NULL;
    if (p)
        pid = atoll(p + 11);
    freeReplyObject(r);
    assert_true(pid > 0);
    dlock_client *c = open_ok(2000);
    dlock_lock *l = test_lock_named(c, "victim");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* Holds on every master, renewed by the watchdog in per-slot batches:
     * those on the other masters must not suffer from the dead one. */
    enum { BYSTANDERS = 60 };
    dlock_lock *held[BYSTANDERS];
    bool elsewhere[BYSTANDERS];
    int n_elsewhere = 0;
    for (int i = 0; i < BYSTANDERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "bystander-%d", i);
        held[i] = test_lock_named(c, name);
        assert_int_equal(dlock_acquire(held[i], 0), DLOCK_OK);
        elsewhere[i] = master_of_slot(lock_slot(name)) != master;
        n_elsewhere += elsewhere[i];
    }
    assert_true(n_elsewhere > 0 && n_elsewhere < BYSTANDERS);
    kill((pid_t)pid, SIGKILL);
    node_killed[master - cluster.port] = true;
    int64_t t0 = now_ms();
    int rc = dlock_acquire(l, 0);
    while (rc != DLOCK_OK && now_ms() - t0 < 15000) {
        /* Until the promotion: clear "unavailable", never a wrong grant. */
        assert_int_equal(rc, DLOCK_EUNAVAILABLE);
        assert_non_null(strstr(dlock_errmsg(), "redis cluster"));
        usleep(100 * 1000);
        rc = dlock_acquire(l, 0);
    }
    assert_int_equal(rc, DLOCK_OK);
    int64_t recovered_ms = now_ms() - t0;
    printf("# killed master: slot served again by the promoted replica after %lld ms\n", (long long)recovered_ms);
    assert_true(is_master(replica));
    assert_int_equal(dlock_release(l), DLOCK_OK);
    usleep(2000 * 1000); /* one more lease for every bystander */
    for (int i = 0; i < BYSTANDERS; i++) {
        if (elsewhere[i]) {
            assert_true(dlock_validity_ms(held[i]) > 0);
            assert_int_equal(dlock_release(held[i]), DLOCK_OK);
        } else {
            dlock_release(held[i]); /* kept or lost, depending on replication */
        }
        dlock_lock_free(held[i]);
    }
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void bad_settings_are_config_errors(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "backend = \"redis\"; redis = { cluster = ( \"nope\" ); };",
        "backend = \"redis\"; redis = { cluster = ( \"127.0.0.1:1\" ); db = 2; };",
        "backend = \"redis\"; redis = { cluster = ( \"127.0.0.1:1\" ); socket = \"/tmp/x\"; };",
        "backend = \"redis\"; redis = { cluster = ( \"127.0.0.1:1\" ); sentinels = ( \"127.0.0.1:2\" ); "
        "master = \"m\"; };",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlock_client *c = NULL;
        assert_int_equal(dlock_client_open_string(&c, bad[i]), DLOCK_ECONFIG);
        assert_non_null(strstr(dlock_errmsg(), "redis."));
    }
    /* Nothing listening: unavailable, and the message says what was asked. */
    dlock_client *c = NULL;
    assert_int_equal(
        dlock_client_open_string(&c, "backend = \"redis\"; redis = { cluster = ( \"127.0.0.1:1\" ); "
                                     "connect_timeout_ms = 200; };"),
        DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), "CLUSTER SLOTS"));
}

static int before_each(void **state)
{
    (void)state;
    flush_masters();
    return 0;
}

int main(void)
{
    if (test_service_start(&cluster) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] the Redis Cluster did not start\n");
        return 1;
    }
    srand(7);
    const struct CMUnitTest first[] = {
        cmocka_unit_test(slot_function_matches_the_server),
    };
    int failed = cmocka_run_group_tests_name("redis cluster slots", first, NULL, NULL);
    static const struct conformance_target target = { "redis cluster conformance (3 masters + 3 replicas)",
                                                      write_config, break_hold, flush_masters, 0, CONFORMANCE_LISTS,
                                                      REDIS_WAITER_TIMEOUT_MS,
                                                      CONFORMANCE_NATIVE_ATTEMPTS | CONFORMANCE_NATIVE_RELEASES };
    failed += conformance_run(&target);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(names_spread_over_every_master_and_renew, before_each),
        cmocka_unit_test_setup(a_held_lock_follows_its_slot_to_another_master, before_each),
        cmocka_unit_test_setup(non_blocking_round_trips_go_to_the_slots_master, before_each),
        cmocka_unit_test_setup(a_manual_failover_keeps_holds_and_waiters, before_each),
        cmocka_unit_test_setup(bad_settings_are_config_errors, before_each),
        /* last: it leaves one master without a replica */
        cmocka_unit_test_setup(a_killed_master_is_replaced_and_its_slots_serve_again, before_each),
    };
    failed += cmocka_run_group_tests_name("redis cluster", tests, NULL, NULL);
    test_service_stop(&cluster);
    return failed ? 1 : 0;
}
