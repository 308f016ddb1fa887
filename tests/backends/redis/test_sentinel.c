/* tests/backends/redis/test_sentinel.c - the redis backend through Redis Sentinel: a
 * master, a replica and a sentinel this program starts on private ports
 * (and stops by PID): the conformance suite through the sentinel, then
 * locks held and waited for across a forced failover. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../conformance/conformance.h"
#include "../../support/redis_server.h"
#include "../../support/test_time.h"
#include "../../support/test_client.h"

#include <dlock.h>
#include <stdbool.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_redis master, replica;
static pid_t sentinel_pid;
static int sentinel_port;
static char sentinel_dir[128];

/* The port of the master the sentinel names now, 0 if none. */
static int current_master_port(void)
{
    redisReply *r = test_redis_cmd_at(sentinel_port, "SENTINEL get-master-addr-by-name mymaster");
    int port = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? atoi(r->element[1]->str) : 0;
    if (r)
        freeReplyObject(r);
    return port;
}

/* Starts redis-sentinel on a free port, watching master; a port taken in
 * the meantime (or a slow start) is retried. 0, or -1 with its log shown. */
static int start_sentinel(void)
{
    snprintf(sentinel_dir, sizeof sentinel_dir, "/tmp/dlock-test-sentinel-XXXXXX");
    if (!mkdtemp(sentinel_dir))
        return -1;
    char conf[256], log[256];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", sentinel_dir);
    snprintf(log, sizeof log, "%s/sentinel.log", sentinel_dir);
    for (int attempt = 0; attempt < 3; attempt++) {
        sentinel_port = test_free_port();
        FILE *f = fopen(conf, "w");
        if (!f)
            return -1;
        fprintf(f,
                "port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"
                "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                "sentinel down-after-milliseconds mymaster 1000\n"
                "sentinel failover-timeout mymaster 5000\n",
                sentinel_port, sentinel_dir, log, master.port);
        fclose(f);
        sentinel_pid = fork();
        if (sentinel_pid == 0) {
            execlp("redis-sentinel", "redis-sentinel", conf, (char *)NULL);
            fprintf(stderr, "cannot run redis-sentinel: %s (install redis-sentinel)\n", strerror(errno));
            _exit(127);
        }
        for (int i = 0; i < 200; i++) {
            if (current_master_port() == master.port)
                return 0;
            if (waitpid(sentinel_pid, NULL, WNOHANG) == sentinel_pid)
                break; /* exited: the port was taken, most likely */
            sleep_ms(50);
        }
        kill(sentinel_pid, SIGKILL);
        waitpid(sentinel_pid, NULL, 0);
        sentinel_pid = 0;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "tail -20 '%s' >&2", log);
    if (system(cmd) != 0)
        fprintf(stderr, "no sentinel log\n");
    return -1;
}

static void stop_sentinel(void)
{
    if (sentinel_pid > 0) {
        kill(sentinel_pid, SIGTERM);
        waitpid(sentinel_pid, NULL, 0);
        sentinel_pid = 0;
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sentinel_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", sentinel_dir);
}

/* Runs a command on whichever server the sentinel names as master now. */
static void on_master(const char *fmt, const char *arg)
{
    redisReply *r = test_redis_cmd_at(current_master_port(), fmt, arg);
    if (r)
        freeReplyObject(r);
}

static void conformance_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    snprintf(buf, size,
             "backend = \"redis\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "redis = { sentinels = (\"127.0.0.1:%d\"); master = \"mymaster\"; command_timeout_ms = 1000;"
             " connect_timeout_ms = 1000; };\n",
             lease_ms, retry_cap_ms, sentinel_port);
}

static void break_hold(const char *name)
{
    char key[300];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    on_master("DEL %s", key);
}

static void flush_master(void)
{
    on_master("FLUSHALL", NULL);
}

static dlock_client *open_sentinel(const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"redis\";\nlease_ms = 3000;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "redis = { sentinels = (\"127.0.0.1:%d\"); master = \"mymaster\"; command_timeout_ms = 1000;"
             " connect_timeout_ms = 1000; %s };\n",
             sentinel_port, extra ? extra : "");
    return test_client_open(text);
}

/* Runs one command on the sentinel, authenticating first when password is
 * given; true when it answered OK. */
static bool sentinel_admin(const char *password, const char *cmd)
{
    redisContext *c = redisConnect("127.0.0.1", sentinel_port);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return false;
    }
    bool ok = true;
    if (password) {
        redisReply *r = redisCommand(c, "AUTH %s", password);
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
    }
    redisReply *r = ok ? redisCommand(c, cmd) : NULL;
    ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* A sentinel that requires a password is asked with redis.sentinel_password;
 * without it, the error says what to set. */
static void a_password_protected_sentinel_is_usable(void **state)
{
    (void)state;
    assert_true(sentinel_admin(NULL, "ACL SETUSER default on resetpass >sentinel-secret"));
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"redis\";\nredis = { sentinels = (\"127.0.0.1:%d\"); master = \"mymaster\"; "
             "connect_timeout_ms = 1000; };\n", sentinel_port);
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_errmsg());
    if (rc == DLOCK_OK)
        dlock_client_close(c);
    snprintf(text, sizeof text,
             "backend = \"redis\";\nredis = { sentinels = (\"127.0.0.1:%d\"); master = \"mymaster\"; "
             "connect_timeout_ms = 1000; sentinel_password = \"sentinel-secret\"; };\n", sentinel_port);
    dlock_client *d = NULL;
    int rc2 = dlock_client_open_string(&d, text);
    dlock_lock *l = NULL;
    int acquired = -1;
    if (rc2 == DLOCK_OK) {
        l = test_lock_named(d, "sentinel-auth");
        acquired = dlock_acquire(l, 0);
        dlock_release(l);
        dlock_lock_free(l);
        dlock_client_close(d);
    }
    bool restored = sentinel_admin("sentinel-secret", "ACL SETUSER default on nopass");
    assert_true(restored);
    assert_int_equal(rc, DLOCK_EUNAVAILABLE);
    if (!strstr(why, "sentinel_password"))
        fail_msg("the error does not say what to set: %s", why);
    assert_int_equal(rc2, DLOCK_OK);
    assert_int_equal(acquired, DLOCK_OK);
}

static void locks_through_the_sentinels_master(void **state)
{
    (void)state;
    dlock_client *a = open_sentinel(NULL), *b = open_sentinel(NULL);
    dlock_lock *la = test_lock_named(a, "via-sentinel"), *lb = test_lock_named(b, "via-sentinel");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    redisReply *r = test_redis_cmd(&master, "EXISTS %s", "dlock:{via-sentinel}");
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void wait_replicas_confirms_grants_and_refuses_without_replicas(void **state)
{
    (void)state;
    dlock_client *a = open_sentinel("wait_replicas = 1; wait_timeout_ms = 500;");
    dlock_lock *l = test_lock_named(a, "replicated");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
    /* Two replicas asked for, one exists: refused, and given back. */
    a = open_sentinel("wait_replicas = 2; wait_timeout_ms = 200;");
    l = test_lock_named(a, "replicated");
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EUNAVAILABLE);
    assert_true(now_ms() - t0 < 200 + 300);
    assert_non_null(strstr(dlock_errmsg(), "only 1 of the 2 replicas"));
    redisReply *r = test_redis_cmd(&master, "EXISTS %s", "dlock:{replicated}");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    dlock_lock_free(l);
    dlock_client_close(a);
}

struct waiter {
    dlock_lock *lock;
    int rc;
};

static void *wait_for_it(void *arg)
{
    struct waiter *w = arg;
    int rc = dlock_acquire(w->lock, 15000);
    /* Service during the failover may be refused for a moment: clear
     * errors, then the lock. */
    int64_t t0 = now_ms();
    while (rc == DLOCK_EUNAVAILABLE && now_ms() - t0 < 10000) {
        sleep_ms(100);
        rc = dlock_acquire(w->lock, 15000);
    }
    if (rc == DLOCK_OK)
        dlock_release(w->lock);
    __atomic_store_n(&w->rc, rc, __ATOMIC_SEQ_CST);
    return NULL;
}

static void a_forced_failover_gives_clear_errors_then_service(void **state)
{
    (void)state;
    dlock_client *a = open_sentinel("wait_replicas = 1; wait_timeout_ms = 1000;"), *b = open_sentinel(NULL);
    dlock_lock *la = test_lock_named(a, "failover"), *lb = test_lock_named(b, "failover"), *fresh = test_lock_named(b, "after-failover");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* confirmed by the replica: survives the failover */
    struct waiter w = { lb, 99 };
    pthread_t t;
    pthread_create(&t, NULL, wait_for_it, &w);
    sleep_ms(200);
    int old = current_master_port();
    redisReply *r = test_redis_cmd_at(sentinel_port, "SENTINEL failover mymaster");
    assert_non_null(r);
    freeReplyObject(r);
    int64_t t0 = now_ms();
    while (current_master_port() == old && now_ms() - t0 < 10000)
        sleep_ms(50);
    assert_int_not_equal(current_master_port(), old);
    /* The holder keeps its hold on the promoted replica (it was replicated
     * before the grant was answered): renewals come back within seconds. */
    int rc;
    t0 = now_ms();
    while ((rc = dlock_renew(la)) != DLOCK_OK && now_ms() - t0 < 10000) {
        assert_true(rc == DLOCK_EUNAVAILABLE); /* refused for a moment, never lost */
        sleep_ms(100);
    }
    assert_int_equal(rc, DLOCK_OK);
    /* New locks are served by the new master. */
    t0 = now_ms();
    while ((rc = dlock_acquire(fresh, 0)) != DLOCK_OK && now_ms() - t0 < 10000) {
        assert_true(rc == DLOCK_EUNAVAILABLE);
        sleep_ms(100);
    }
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(fresh), DLOCK_OK);
    assert_int_equal(__atomic_load_n(&w.rc, __ATOMIC_SEQ_CST), 99); /* still waiting for la */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_lock_free(fresh);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void bad_sentinel_settings_are_config_errors(void **state)
{
    (void)state;
    const char *bad[] = {
        "backend = \"redis\";\nredis = { sentinels = (\"127.0.0.1:1\"); };\n",
        "backend = \"redis\";\nredis = { master = \"mymaster\"; };\n",
        "backend = \"redis\";\nredis = { sentinels = (\"nohostport\"); master = \"m\"; };\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlock_client *c = NULL;
        int rc = dlock_client_open_string(&c, bad[i]);
        if (rc != DLOCK_ECONFIG)
            fail_msg("case %zu: %s (%s)", i, dlock_strerror(rc), dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(), "redis."));
    }
    char text[256];
    snprintf(text, sizeof text, "backend = \"redis\";\nredis = { sentinels = (\"127.0.0.1:%d\"); master = \"nosuch\"; };\n",
             sentinel_port);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), "does not know a master named 'nosuch'"));
}

int main(void)
{
    if (test_redis_start(&master) != 0)
        return 1;
    static char replicaof[32];
    snprintf(replicaof, sizeof replicaof, "%d", master.port);
    replica.extra[0] = "--replicaof";
    replica.extra[1] = "127.0.0.1";
    replica.extra[2] = replicaof;
    int replica_rc = test_redis_start(&replica), sentinel_rc = replica_rc == 0 ? start_sentinel() : -1;
    if (replica_rc != 0 || sentinel_rc != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] the %s did not start\n",
               replica_rc != 0 ? "replica" : "sentinel");
        test_redis_stop(&master);
        test_redis_stop(&replica);
        stop_sentinel();
        return 1;
    }
    /* The replica must be in sync before the tests count on it. */
    for (int i = 0; i < 100; i++) {
        redisReply *r = test_redis_cmd(&master, "WAIT 1 100");
        int n = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : 0;
        if (r)
            freeReplyObject(r);
        if (n == 1)
            break;
        sleep_ms(50);
    }
    static const struct conformance_target target = { "redis sentinel conformance (master, replica, sentinel)",
                                                      conformance_config, break_hold, flush_master, 0, 1,
                                                      REDIS_WAITER_TIMEOUT_MS,
                                                      CONFORMANCE_NATIVE_ATTEMPTS | CONFORMANCE_NATIVE_RELEASES };
    int failed = conformance_run(&target);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(locks_through_the_sentinels_master),
        cmocka_unit_test(wait_replicas_confirms_grants_and_refuses_without_replicas),
        cmocka_unit_test(bad_sentinel_settings_are_config_errors),
        cmocka_unit_test(a_password_protected_sentinel_is_usable),
        cmocka_unit_test(a_forced_failover_gives_clear_errors_then_service),
    };
    failed += cmocka_run_group_tests_name("redis sentinel", tests, NULL, NULL);
    stop_sentinel();
    test_redis_stop(&master);
    test_redis_stop(&replica);
    return failed ? 1 : 0;
}
