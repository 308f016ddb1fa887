/* tests/backends/zookeeper/test_zookeeper.c - the zookeeper backend against real
 * ZooKeeper servers this program starts (a standalone one, then a 3-node
 * ensemble) on private ports and stops by PID: the conformance suite, then
 * what is particular to ZooKeeper. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../conformance/conformance.h"
#include "../../support/service.h"
#include "../../support/campaigner.h"
#include "../../support/fault_proxy.h"
#include "../../support/test_time.h"
#include "../../support/test_client.h"
#include "../../support/waiters.h"
#include "../../support/async_result.h"

#define THREADED 1
#include <zookeeper/zookeeper.h>

#include <dlock.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_service server = { .script = "zookeeper" };

static void quiet(const char *message)
{
    (void)message;
}

/* A plain client of the test server, as an operator would use. */
static zhandle_t *admin_connect(const char *hosts)
{
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zhandle_t *zh = zookeeper_init2(hosts, NULL, 4000, NULL, NULL, 0, quiet);
    for (int i = 0; zh && zoo_state(zh) != ZOO_CONNECTED_STATE && i < 200; i++)
        sleep_ms(10);
    if (!zh || zoo_state(zh) != ZOO_CONNECTED_STATE)
        fail_msg("admin connection to %s failed", hosts);
    return zh;
}

static char *standalone_hosts(void)
{
    static char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", server.port);
    return hosts;
}

/* extra is appended inside the group; the root is /dlock-test unless extra
 * names one. */
static void write_config(char *buf, size_t size, int lease_ms, int retry_cap_ms, const char *extra)
{
    snprintf(buf, size,
             "backend = \"zookeeper\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "zookeeper = { hosts = \"%s\"; %s connect_timeout_ms = 3000; %s };\n",
             lease_ms, retry_cap_ms, standalone_hosts(), strstr(extra, "root") ? "" : "root = \"/dlock-test\";",
             extra);
}

static void conformance_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    write_config(buf, size, lease_ms, retry_cap_ms, "");
}

/* Deletes the holder's node (the lowest child of the lock's parent). */
static void delete_holder_node(const char *name)
{
    zhandle_t *zh = admin_connect(standalone_hosts());
    char parent[256], path[512];
    snprintf(parent, sizeof parent, "/dlock-test/%s", name);
    struct String_vector children;
    assert_int_equal(zoo_get_children(zh, parent, 0, &children), ZOK);
    const char *lowest = NULL;
    for (int i = 0; i < children.count; i++)
        if (!lowest || strcmp(strstr(children.data[i], "-lock-"), strstr(lowest, "-lock-")) < 0)
            lowest = children.data[i];
    assert_non_null(lowest);
    snprintf(path, sizeof path, "%s/%s", parent, lowest);
    assert_int_equal(zoo_delete(zh, path, -1), ZOK);
    deallocate_String_vector(&children);
    zookeeper_close(zh);
}

static dlock_client *open_with(const char *extra, int lease_ms, int *rc)
{
    char text[2048];
    write_config(text, sizeof text, lease_ms, 100, extra);
    dlock_client *c = NULL;
    *rc = dlock_client_open_string(&c, text);
    return c;
}

static dlock_client *open_ok(const char *extra, int lease_ms)
{
    int rc;
    dlock_client *c = open_with(extra, lease_ms, &rc);
    if (rc != DLOCK_OK)
        fail_msg("open: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return c;
}

/* A client of the standalone server through a fault proxy started here
 * (*proxy: stop it), with lease_ms and extra settings in its group. */
static dlock_client *open_through_proxy(struct fault_proxy **proxy, int lease_ms, const char *extra)
{
    int port;
    *proxy = fault_proxy_start(server.port, &port);
    assert_non_null(*proxy);
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"zookeeper\";\nlease_ms = %d;\n"
             "zookeeper = { hosts = \"127.0.0.1:%d\"; root = \"/dlock-test\"; %s connect_timeout_ms = 3000; };\n",
             lease_ms, port, extra);
    return test_client_open(text);
}

/* ---- particular to zookeeper ------------------------------------------------------------ */

struct queued {
    dlock_client *client;
    dlock_lock *lock;
    int index;
    int *order;
    int *next;
    pthread_mutex_t *mu;
    int rc;
};

static void *queue_and_take(void *arg)
{
    struct queued *q = arg;
    q->rc = dlock_acquire(q->lock, 10000);
    if (q->rc == DLOCK_OK) {
        pthread_mutex_lock(q->mu);
        q->order[(*q->next)++] = q->index;
        pthread_mutex_unlock(q->mu);
        sleep_ms(20);
        dlock_release(q->lock);
    }
    return NULL;
}

static void waiters_are_granted_in_arrival_order(void **state)
{
    (void)state;
    enum { N = 5 };
    dlock_client *holder = open_ok("", 30000);
    dlock_lock *h = test_lock_named(holder, "fifo");
    assert_int_equal(dlock_acquire(h, 0), DLOCK_OK);
    struct queued q[N];
    pthread_t t[N];
    int order[N], next = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    for (int i = 0; i < N; i++) {
        q[i] = (struct queued){ open_ok("", 30000), NULL, i, order, &next, &mu, 99 };
        q[i].lock = test_lock_named(q[i].client, "fifo");
        pthread_create(&t[i], NULL, queue_and_take, &q[i]);
        sleep_ms(100); /* each queues before the next arrives */
    }
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(holder, "fifo", 4, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_non_null(strstr(st.holder, "(5 waiting)"));
    assert_int_equal(dlock_release(h), DLOCK_OK);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(q[i].rc, DLOCK_OK);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(order[i], i);
    for (int i = 0; i < N; i++) {
        dlock_lock_free(q[i].lock);
        dlock_client_close(q[i].client);
    }
    dlock_lock_free(h);
    dlock_client_close(holder);
}

static void the_fence_is_the_nodes_czxid(void **state)
{
    (void)state;
    dlock_client *a = open_ok("", 30000);
    dlock_lock *l = test_lock_named(a, "czxid");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t fence;
    assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
    zhandle_t *zh = admin_connect(standalone_hosts());
    struct String_vector children;
    assert_int_equal(zoo_get_children(zh, "/dlock-test/czxid", 0, &children), ZOK);
    assert_int_equal(children.count, 1);
    char path[256];
    snprintf(path, sizeof path, "/dlock-test/czxid/%s", children.data[0]);
    struct Stat st;
    char data[128];
    int len = sizeof data - 1;
    assert_int_equal(zoo_get(zh, path, 0, data, &len, &st), ZOK);
    data[len] = '\0';
    assert_int_equal((uint64_t)st.czxid, fence);
    assert_non_null(strchr(data, ':')); /* the owner id */
    assert_true(st.ephemeralOwner != 0);
    deallocate_String_vector(&children);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* The parent is a container node: the server removes it once empty. */
    int zrc = ZOK;
    for (int i = 0; i < 100 && (zrc = zoo_exists(zh, "/dlock-test/czxid", 0, &st)) == ZOK; i++)
        sleep_ms(50);
    assert_int_equal(zrc, ZNONODE);
    zookeeper_close(zh);
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* Takes a lock on its own thread, notes its fence, and holds it until
 * told to let go (a hold is its thread's). */
struct fenced_taker {
    dlock_lock *lock;
    int rc;            /* -1 until the acquire returns */
    uint64_t fence;
    int let_go;
};

static void *take_note_fence_and_hold(void *arg)
{
    struct fenced_taker *t = arg;
    int rc = dlock_acquire(t->lock, 10000);
    if (rc == DLOCK_OK)
        assert_int_equal(dlock_fence(t->lock, &t->fence), DLOCK_OK);
    __atomic_store_n(&t->rc, rc, __ATOMIC_SEQ_CST);
    while (rc == DLOCK_OK && !__atomic_load_n(&t->let_go, __ATOMIC_SEQ_CST))
        sleep_ms(10);
    if (rc == DLOCK_OK)
        dlock_release(t->lock);
    return NULL;
}

/* Waits (up to 5 s) for the taker's acquire to return; its result. */
static int taken(struct fenced_taker *t)
{
    int rc = -1;
    for (int64_t end = now_ms() + 5000; (rc = __atomic_load_n(&t->rc, __ATOMIC_SEQ_CST)) == -1 && now_ms() < end;)
        sleep_ms(10);
    return rc;
}

/* The child of parent whose name has the mark (NULL: none, "~s": shared)
 * and, if seq >= 0, that sequence number; its name into out, its stat
 * into st. Fails the case if there is none. */
static void find_child(zhandle_t *zh, const char *parent, const char *mark, int64_t seq, char *out, size_t size,
                       struct Stat *st)
{
    struct String_vector children;
    assert_int_equal(zoo_get_children(zh, parent, 0, &children), ZOK);
    out[0] = '\0';
    for (int i = 0; i < children.count && !out[0]; i++) {
        const char *c = children.data[i], *lock = strstr(c, "-lock-");
        int marked = mark ? lock - c >= 2 && strncmp(lock - 2, mark, 2) == 0 : !strchr(c, '~');
        if (lock && marked && (seq < 0 || strtoll(lock + 6, NULL, 10) == seq))
            snprintf(out, size, "%s", c);
    }
    deallocate_String_vector(&children);
    if (!out[0])
        fail_msg("no child of %s marked %s with sequence %lld", parent, mark ? mark : "exclusive", (long long)seq);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", parent, out);
    assert_int_equal(zoo_exists(zh, path, 0, st), ZOK);
}

/* A downgrade puts a shared node of the same session in the exclusive
 * node's place: the same sequence number (its place in line), the owner
 * id and, after it, the fence the hold keeps (the exclusive node's czxid;
 * the new node's own czxid is above the writer's waiting behind it). The
 * writer keeps its node and place, and is granted with its node's czxid,
 * above the downgraded hold's fence; the reader that waited behind the
 * writer gets one above the writer's. The status shows the downgraded
 * hold as a shared holder, with its fence. */
static void a_downgraded_node_keeps_its_place_and_fences_stay_in_order(void **state)
{
    (void)state;
    dlock_client *a = open_ok("", 30000), *b = open_ok("", 30000), *c = open_ok("", 30000);
    dlock_lock *x = test_lock_named(a, "zdown");
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    uint64_t exclusive_fence, shared_fence;
    assert_int_equal(dlock_fence(x, &exclusive_fence), DLOCK_OK);
    zhandle_t *zh = admin_connect(standalone_hosts());
    char held[256], twin[256], writer_node[256], node[256];
    struct Stat st, twin_st;
    find_child(zh, "/dlock-test/zdown", NULL, -1, held, sizeof held, &st);
    int64_t seq = strtoll(strstr(held, "-lock-") + 6, NULL, 10);
    struct fenced_taker writer = { test_lock_named(b, "zdown"), -1, 0, 0 };
    struct fenced_taker reader = { test_lock_of_kind(c, "zdown", DLOCK_MODE_SHARED, 0), -1, 0, 0 };
    pthread_t tw, tr;
    assert_int_equal(pthread_create(&tw, NULL, take_note_fence_and_hold, &writer), 0);
    sleep_ms(200); /* the writer queues first */
    assert_int_equal(pthread_create(&tr, NULL, take_note_fence_and_hold, &reader), 0);
    sleep_ms(200);
    find_child(zh, "/dlock-test/zdown", NULL, seq + 1, writer_node, sizeof writer_node, &st);

    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    assert_int_equal(dlock_fence(x, &shared_fence), DLOCK_OK);
    assert_int_equal(shared_fence, exclusive_fence); /* the same hold */
    find_child(zh, "/dlock-test/zdown", "~s", seq, twin, sizeof twin, &twin_st);
    assert_true((uint64_t)twin_st.czxid > shared_fence); /* a new node, which carries the kept fence */
    assert_int_equal(strncmp(twin, held, (size_t)(strstr(held, "-lock-") - held)), 0); /* same owner tag and attempt */
    char path[512], data[128];
    int len = sizeof data - 1;
    snprintf(path, sizeof path, "/dlock-test/zdown/%s", twin);
    assert_int_equal(zoo_get(zh, path, 0, data, &len, &st), ZOK);
    data[len] = '\0';
    assert_non_null(strchr(data, '\n'));
    assert_int_equal(strtoull(strchr(data, '\n') + 1, NULL, 10), exclusive_fence);
    *strchr(data, '\n') = '\0';
    assert_null(strchr(data, '/')); /* the owner id of the exclusive hold it was */
    assert_true(st.ephemeralOwner != 0);
    snprintf(path, sizeof path, "/dlock-test/zdown/%s", held);
    assert_int_equal(zoo_exists(zh, path, 0, &st), ZNONODE);
    dlock_status_info info = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(a, "zdown", 5, &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_string_equal(info.holder, "1 shared holder (2 waiting)");
    assert_int_equal(info.fence, shared_fence);
    sleep_ms(200);
    assert_int_equal(__atomic_load_n(&writer.rc, __ATOMIC_SEQ_CST), -1);
    assert_int_equal(__atomic_load_n(&reader.rc, __ATOMIC_SEQ_CST), -1); /* behind the writer */

    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(taken(&writer), DLOCK_OK);
    assert_true(writer.fence > shared_fence);
    find_child(zh, "/dlock-test/zdown", NULL, seq + 1, node, sizeof node, &st);
    assert_string_equal(node, writer_node);
    assert_int_equal((uint64_t)st.czxid, writer.fence);
    assert_int_equal(__atomic_load_n(&reader.rc, __ATOMIC_SEQ_CST), -1);
    __atomic_store_n(&writer.let_go, 1, __ATOMIC_SEQ_CST);
    assert_int_equal(taken(&reader), DLOCK_OK);
    assert_true(reader.fence > writer.fence);
    __atomic_store_n(&reader.let_go, 1, __ATOMIC_SEQ_CST);
    pthread_join(tw, NULL);
    pthread_join(tr, NULL);
    zookeeper_close(zh);
    dlock_lock_free(writer.lock);
    dlock_lock_free(reader.lock);
    dlock_lock_free(x);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

/* Children of parent now (0 when the parent is gone). */
static int children_of(zhandle_t *zh, const char *parent)
{
    struct String_vector children;
    int zrc = zoo_get_children(zh, parent, 0, &children);
    if (zrc == ZNONODE)
        return 0;
    assert_int_equal(zrc, ZOK);
    int n = children.count;
    deallocate_String_vector(&children);
    return n;
}

/* A hold whose node an operator deleted cannot be downgraded: lost, and
 * no shared node is made in its place. */
static void a_downgrade_of_a_deleted_node_is_lost(void **state)
{
    (void)state;
    dlock_client *a = open_ok("", 30000);
    dlock_lock *x = test_lock_named(a, "zdown-gone");
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    delete_holder_node("zdown-gone");
    assert_int_equal(dlock_downgrade(x), DLOCK_ELOST);
    assert_non_null(strstr(dlock_errmsg(), "no longer held"));
    zhandle_t *zh = admin_connect(standalone_hosts());
    assert_int_equal(children_of(zh, "/dlock-test/zdown-gone"), 0);
    zookeeper_close(zh);
    assert_int_equal(dlock_release(x), DLOCK_ELOST);
    dlock_lock_free(x);
    dlock_client_close(a);
}

/* The downgrade is made on the server but its answer never comes: the
 * hold is given up as lost, and the shared node the server made is
 * deleted with it, so a writer gets the name (the session lives on). */
static void a_downgrade_without_an_answer_leaves_no_node_behind(void **state)
{
    (void)state;
    struct fault_proxy *proxy;
    dlock_client *a = open_through_proxy(&proxy, 4000, "");
    dlock_lock *x = test_lock_named(a, "zdown-noanswer");
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    assert_int_equal(dlock_downgrade(x), DLOCK_ELOST);
    assert_non_null(strstr(dlock_errmsg(), "no clear answer"));
    dlock_client *b = open_ok("", 30000);
    dlock_lock *w = test_lock_named(b, "zdown-noanswer");
    assert_int_equal(dlock_acquire(w, 5000), DLOCK_OK);
    zhandle_t *zh = admin_connect(standalone_hosts());
    assert_int_equal(children_of(zh, "/dlock-test/zdown-noanswer"), 1); /* the writer's node alone */
    zookeeper_close(zh);
    assert_int_equal(dlock_release(x), DLOCK_ELOST);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    dlock_lock_free(w);
    dlock_lock_free(x);
    dlock_client_close(b);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

/* ---- the non-blocking API's attempts, sent without a thread --------------------- */

static int acquire_on_loop(dlock_client *c, dlock_lock *l, int64_t wait_ms)
{
    struct async_result r = { 0 };
    int rc = async_acquire_looping(c, l, wait_ms, slack_ms(15000), &r);
    assert_int_equal(r.calls, 1);
    return rc;
}

/* The create sent without a thread may have made its node when the
 * connection drops under it: the attempt is made again by acquire, which
 * first deletes that node by the attempt's tag, so the name holds one node
 * of ours, and another client is kept out until the release. */
static void native_create_whose_answer_is_lost_leaves_one_node(void **state)
{
    (void)state;
    struct fault_proxy *proxy;
    dlock_client *a = open_through_proxy(&proxy, 4000, "");
    dlock_lock *x = test_lock_named(a, "znative-lost");
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK); /* the parent made */
    assert_int_equal(dlock_release(x), DLOCK_OK);
    long long parked = test_client_metric(a, "dlock_acquire_attempts_parked_total");
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    assert_int_equal(acquire_on_loop(a, x, 0), DLOCK_OK);
    assert_true(test_client_metric(a, "dlock_acquire_attempts_parked_total") > parked);
    zhandle_t *zh = admin_connect(standalone_hosts());
    assert_int_equal(children_of(zh, "/dlock-test/znative-lost"), 1);
    dlock_client *b = open_ok("", 30000);
    dlock_lock *w = test_lock_named(b, "znative-lost");
    assert_int_equal(dlock_acquire(w, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_acquire(w, 5000), DLOCK_OK);
    assert_int_equal(children_of(zh, "/dlock-test/znative-lost"), 1);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    zookeeper_close(zh);
    dlock_lock_free(w);
    dlock_lock_free(x);
    dlock_client_close(b);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

/* A waiter's attempts go without a thread: the create and its first
 * listing, then the listing after the release's wake-up, which grants. */
static void native_waiter_is_granted_on_its_listing_after_the_release(void **state)
{
    (void)state;
    dlock_client *a = open_ok("", 30000), *b = open_ok("", 30000);
    dlock_lock *x = test_lock_named(a, "znative-wait"), *w = test_lock_named(b, "znative-wait");
    assert_int_equal(dlock_acquire(w, 0), DLOCK_OK); /* the parent made */
    assert_int_equal(dlock_release(w), DLOCK_OK);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    long long parked = test_client_metric(b, "dlock_acquire_attempts_parked_total");
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(w, slack_ms(10000), async_record, &r), DLOCK_OK);
    for (int64_t end = now_ms() + slack_ms(5000);
         now_ms() < end && test_client_metric(b, "dlock_acquire_attempts_parked_total") == parked;)
        assert_true(async_loop_turn(b, 20) >= 0);
    for (int i = 0; i < 10; i++) /* its answer read: busy, and waiting */
        assert_true(async_loop_turn(b, 20) >= 0);
    assert_int_equal(r.calls, 0);
    long long before_release = test_client_metric(b, "dlock_acquire_attempts_parked_total");
    assert_int_equal(dlock_release(x), DLOCK_OK);
    for (int64_t end = now_ms() + slack_ms(5000); r.calls == 0 && now_ms() < end;)
        assert_true(async_loop_turn(b, 20) >= 0);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_true(test_client_metric(b, "dlock_acquire_attempts_parked_total") > before_release);
    uint64_t fence = 0;
    assert_int_equal(dlock_fence(w, &fence), DLOCK_OK);
    assert_true(fence > 0);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    dlock_lock_free(w);
    dlock_lock_free(x);
    dlock_client_close(b);
    dlock_client_close(a);
}

/* The server here has tickTime 200, so it grants sessions of at most 4 s
 * whatever is asked: a 10 s lease must not be believed (validity, renewals
 * and loss follow the negotiated session). */
static void validity_follows_the_negotiated_session(void **state)
{
    (void)state;
    dlock_client *a = open_ok("", 10000);
    dlock_lock *l = test_lock_named(a, "clamped");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    int64_t v = dlock_validity_ms(l);
    if (v > 4000)
        fail_msg("validity %lld ms, beyond the 4 s session the server grants", (long long)v);
    sleep_ms(2500); /* renewed at a third of 4 s, so still held */
    assert_true(dlock_validity_ms(l) > 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void names_never_leave_their_parent(void **state)
{
    (void)state;
    dlock_client *a = open_ok("", 30000);
    static const char name[] = "../../zookeeper/x";
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(a, name, sizeof name - 1, NULL, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    zhandle_t *zh = admin_connect(standalone_hosts());
    struct Stat st;
    assert_int_equal(zoo_exists(zh, "/dlock-test/%2E%2E%2F%2E%2E%2Fzookeeper%2Fx", 0, &st), ZOK);
    assert_int_equal(st.numChildren, 1);
    assert_int_equal(zoo_exists(zh, "/zookeeper/x", 0, &st), ZNONODE);
    zookeeper_close(zh);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

struct listed_names {
    int n;
    char names[8][64];
    int64_t waiters[8];
};

static int note_listed(const dlock_list_entry *e, void *arg)
{
    struct listed_names *l = arg;
    assert_true(l->n < 8);
    snprintf(l->names[l->n], sizeof l->names[l->n], "%.*s", (int)e->name_len, e->name);
    l->waiters[l->n++] = e->waiters;
    return DLOCK_OK;
}

/* A parent nobody queues under (a container not reaped yet) and a node
 * under the root that no escape makes are passed over, one entry a page,
 * and the listing still ends. */
static void empty_parents_and_foreign_nodes_are_not_listed(void **state)
{
    (void)state;
    char p[64], held[96], empty[160], foreign[160];
    snprintf(p, sizeof p, "zkl-%ld/", (long)getpid());
    snprintf(held, sizeof held, "%sheld", p);
    snprintf(empty, sizeof empty, "/dlock-test/zkl-%ld%%2Fempty", (long)getpid());
    snprintf(foreign, sizeof foreign, "/dlock-test/zkl-%ld%%2Fforeign.x", (long)getpid()); /* '.' is always escaped */
    dlock_client *a = open_ok("", 30000);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(a, held, strlen(held), NULL, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* and the root exists */
    zhandle_t *zh = admin_connect(standalone_hosts());
    assert_int_equal(zoo_create(zh, empty, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
    assert_int_equal(zoo_create(zh, foreign, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
    struct listed_names seen = { 0 };
    test_list_pages(a, p, 1, note_listed, &seen);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.names[0], held);
    assert_int_equal(seen.waiters[0], 0);
    assert_int_equal(zoo_delete(zh, empty, -1), ZOK);
    assert_int_equal(zoo_delete(zh, foreign, -1), ZOK);
    zookeeper_close(zh);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* A partition shorter than the session but longer than the lease: the
 * holder declares its hold lost at the lease's end, while its session (and
 * so its node) survives the partition. The client must then delete the
 * node once it can, so that others are not blocked by a hold nobody has. */
static int64_t declared_lost_at;

static void note_declared_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    __atomic_store_n(&declared_lost_at, now_ms(), __ATOMIC_SEQ_CST);
}

static void hold_declared_lost_is_given_back_when_the_session_survives(void **state)
{
    (void)state;
    __atomic_store_n(&declared_lost_at, 0, __ATOMIC_SEQ_CST);
    struct fault_proxy *proxy;
    dlock_client *a = open_through_proxy(&proxy, 1500, "session_timeout_ms = 4000;");
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = note_declared_lost;
    dlock_lock *la = NULL;
    assert_int_equal(dlock_lock_new(a, "survivor", 8, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_BLACKHOLE, 0);
    sleep_ms(2300); /* lost at ~1.5 s; the 4 s session lives on */
    assert_true(__atomic_load_n(&declared_lost_at, __ATOMIC_SEQ_CST) != 0);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    dlock_client *b = open_ok("", 30000);
    dlock_lock *lb = test_lock_named(b, "survivor");
    int64_t t0 = now_ms();
    int rc = dlock_acquire(lb, 6000);
    int64_t took = now_ms() - t0;
    if (rc != DLOCK_OK)
        fail_msg("the node of the hold declared lost still blocked others %lld ms later: %s",
                 (long long)took, dlock_strerror(rc));
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(b);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

static uint64_t leader_term(dlock_client *c, const char *name, char *value, size_t cap)
{
    size_t len = 0;
    uint64_t term = 0;
    assert_int_equal(dlock_leader(c, name, strlen(name), value, cap - 1, &len, &term), DLOCK_OK);
    value[len < cap ? len : cap - 1] = 0;
    return term;
}

/* A candidate whose session expires while its campaign waits (its node
 * goes with it) is no phantom leader: when the leader resigns, the next
 * live candidate is elected, and the one cut off is not, neither then nor
 * once it is back; it leads only after that one, with a greater term. */
static void a_waiting_candidate_whose_session_expired_is_no_phantom_leader(void **state)
{
    (void)state;
    struct fault_proxy *proxy;
    dlock_client *a = open_ok("", 30000), *c = open_ok("", 30000), *reader = open_ok("", 30000);
    dlock_client *b = open_through_proxy(&proxy, 1500, "session_timeout_ms = 1000;");
    dlock_election *ea = NULL, *eb = NULL, *ec = NULL;
    assert_int_equal(dlock_election_new(a, "phantom", 7, "a", 1, &ea), DLOCK_OK);
    assert_int_equal(dlock_election_new(b, "phantom", 7, "b", 1, &eb), DLOCK_OK);
    assert_int_equal(dlock_election_new(c, "phantom", 7, "c", 1, &ec), DLOCK_OK);
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    /* Their waits outlast the cut below, which the slack widens. */
    struct campaigner cb = { eb, slack_ms(10000), -99, 0 }, cc = { ec, slack_ms(10000), -99, 0 };
    pthread_t tb, tc;
    pthread_create(&tb, NULL, campaigner_run, &cb);
    sleep_ms(300); /* b queued first */
    pthread_create(&tc, NULL, campaigner_run, &cc);
    sleep_ms(300);
    fault_proxy_set(proxy, FAULT_BLACKHOLE, 0);
    sleep_ms(slack_ms(2500)); /* b's 1 s session expires on the server, and its node */
    assert_int_equal(dlock_resign(ea), DLOCK_OK);
    pthread_join(tc, NULL);
    int b_while_cut = __atomic_load_n(&cb.rc, __ATOMIC_ACQUIRE);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    sleep_ms(slack_ms(1500)); /* b back, with a new session */
    int b_after = __atomic_load_n(&cb.rc, __ATOMIC_ACQUIRE);
    char value[8];
    uint64_t tc_term = leader_term(reader, "phantom", value, sizeof value);
    bool c_leads = strcmp(value, "c") == 0;
    assert_int_equal(dlock_resign(ec), DLOCK_OK);
    pthread_join(tb, NULL);
    assert_int_equal(cc.rc, DLOCK_OK);
    assert_true(c_leads);
    /* b never believed it led while c did: still waiting, or its campaign
     * failed (the session ended under it); never DLOCK_OK. */
    assert_int_not_equal(b_while_cut, DLOCK_OK);
    assert_int_not_equal(b_after, DLOCK_OK);
    if (cb.rc == DLOCK_OK) {
        uint64_t tb_term = 0;
        assert_int_equal(dlock_election_term(eb, &tb_term), DLOCK_OK);
        assert_true(tb_term > tc_term);
        assert_true(leader_term(reader, "phantom", value, sizeof value) == tb_term);
    }
    dlock_election_free(ea);
    dlock_election_free(eb);
    dlock_election_free(ec);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
    dlock_client_close(reader);
    fault_proxy_stop(proxy);
}

/* The holder is stopped past its session timeout: the server expires the
 * session and deletes its node, the waiter gets the lock, and when the
 * holder runs again it is told (on_lost) within a second. */
static int lost_pipe[2];

static void report_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    ssize_t ignored = write(lost_pipe[1], "L", 1);
    (void)ignored;
}

static void expired_session_fires_on_lost_and_frees_the_lock(void **state)
{
    (void)state;
    int held[2];
    assert_int_equal(pipe(held), 0);
    assert_int_equal(pipe(lost_pipe), 0);
    pid_t pid = fork();
    if (pid == 0) {
        char text[1024];
        write_config(text, sizeof text, 1500, 100, "session_timeout_ms = 1000;");
        dlock_client *c = NULL;
        if (dlock_client_open_string(&c, text) != DLOCK_OK)
            _exit(2);
        dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
        o.on_lost = report_lost;
        dlock_lock *l = NULL;
        if (dlock_lock_new(c, "expiry", 6, &o, &l) != DLOCK_OK || dlock_acquire(l, 2000) != DLOCK_OK)
            _exit(3);
        if (write(held[1], "H", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    char ch;
    assert_int_equal(read(held[0], &ch, 1), 1);
    dlock_client *b = open_ok("", 30000);
    dlock_lock *l = test_lock_named(b, "expiry");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    kill(pid, SIGSTOP);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 5000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    if (took > 1000 + 500)
        fail_msg("the stopped holder's session freed the lock after %lld ms", (long long)took);
    kill(pid, SIGCONT);
    int64_t t1 = now_ms();
    struct pollfd p = { .fd = lost_pipe[0], .events = POLLIN };
    int n = poll(&p, 1, 3000);
    int64_t told = now_ms() - t1;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_int_equal(n, 1);
    if (told > 1000)
        fail_msg("on_lost came %lld ms after the holder ran again", (long long)told);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(b);
    close(held[0]);
    close(held[1]);
    close(lost_pipe[0]);
    close(lost_pipe[1]);
}

static void digest_auth_guards_the_nodes(void **state)
{
    (void)state;
    dlock_client *a = open_ok("root = \"/dlock-secure\"; auth = \"digest:app:app-secret\";", 30000);
    dlock_lock *l = test_lock_named(a, "guarded");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    /* Someone without the identity can neither list, queue nor delete. */
    zhandle_t *zh = admin_connect(standalone_hosts());
    struct String_vector children;
    assert_int_equal(zoo_get_children(zh, "/dlock-secure/guarded", 0, &children), ZNOAUTH);
    assert_int_equal(zoo_create(zh, "/dlock-secure/guarded/x-lock-", "", 0, &ZOO_OPEN_ACL_UNSAFE,
                                ZOO_EPHEMERAL_SEQUENTIAL, NULL, 0),
                     ZNOAUTH);
    zookeeper_close(zh);
    /* A client with the wrong password is refused with a clear error. */
    int rc;
    dlock_client *bad = open_with("root = \"/dlock-secure\"; auth = \"digest:app:wrong\";", 30000, &rc);
    assert_int_equal(rc, DLOCK_OK); /* ZooKeeper accepts any digest; the ACL refuses it */
    dlock_lock *bl = test_lock_named(bad, "guarded");
    assert_int_equal(dlock_acquire(bl, 0), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "zookeeper.auth"));
    dlock_lock_free(bl);
    dlock_client_close(bad);
    /* The same identity from another client queues behind the holder. */
    dlock_client *b = open_ok("root = \"/dlock-secure\"; auth = \"digest:app:app-secret\";", 30000);
    dlock_lock *lb = test_lock_named(b, "guarded");
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(lb);
    dlock_client_close(b);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void bad_settings_are_config_errors(void **state)
{
    (void)state;
    const char *bad[] = { "root = \"dlock\";", "root = \"/a/../b\";", "root = \"/a/\";", "auth = \"app:secret\";" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        dlock_client *c = open_with(bad[i], 30000, &rc);
        assert_null(c);
        if (rc != DLOCK_ECONFIG)
            fail_msg("%s: %s (%s)", bad[i], dlock_strerror(rc), dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(), "zookeeper."));
    }
}

static void unreachable_ensemble_is_a_clear_error(void **state)
{
    (void)state;
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"zookeeper\";\nzookeeper = { hosts = \"127.0.0.1:%d\"; connect_timeout_ms = 500; };\n",
             server.port + 7);
    dlock_client *c = NULL;
    int64_t t0 = now_ms();
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_EUNAVAILABLE);
    assert_true(now_ms() - t0 < 1500);
    assert_non_null(strstr(dlock_errmsg(), "no server established a session"));
}

/* ---- a 3-node ensemble -------------------------------------------------------------------- */

static struct test_service ensemble = { .script = "zookeeper", .nodes = 3 };

static int mode_is_leader(int port)
{
    char cmd[256], out[64] = "";
    snprintf(cmd, sizeof cmd, "bash '%s/support/zookeeper.sh' mode %d", getenv("DLOCK_TEST_SRCDIR"), port);
    FILE *p = popen(cmd, "r");
    if (p) {
        if (!fgets(out, sizeof out, p))
            out[0] = '\0';
        pclose(p);
    }
    return strncmp(out, "leader", 6) == 0;
}

static void holds_survive_the_leader_being_killed(void **state)
{
    (void)state;
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"zookeeper\";\nlease_ms = 4000;\nretry_cap_ms = 100;\n"
             "zookeeper = { hosts = \"127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d\"; connect_timeout_ms = 5000; };\n",
             ensemble.port, ensemble.port + 1, ensemble.port + 2);
    dlock_client *a = NULL, *b = NULL;
    assert_int_equal(dlock_client_open_string(&a, text), DLOCK_OK);
    assert_int_equal(dlock_client_open_string(&b, text), DLOCK_OK);
    dlock_lock *la = test_lock_named(a, "ensemble"), *lb = test_lock_named(b, "ensemble"), *other = test_lock_named(b, "after");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t before;
    assert_int_equal(dlock_fence(la, &before), DLOCK_OK);
    int leader = -1;
    for (int i = 0; i < 3; i++)
        if (mode_is_leader(ensemble.port + i))
            leader = i;
    assert_true(leader >= 0);
    char pidfile[256];
    snprintf(pidfile, sizeof pidfile, "%s/%d/pid", ensemble.data, leader + 1);
    FILE *f = fopen(pidfile, "r");
    assert_non_null(f);
    long pid = 0;
    assert_int_equal(fscanf(f, "%ld", &pid), 1);
    fclose(f);
    kill((pid_t)pid, SIGKILL);
    /* A new leader is elected; the session (4 s) outlives the election. */
    int64_t t0 = now_ms();
    int rc;
    while ((rc = dlock_renew(la)) != DLOCK_OK && now_ms() - t0 < 8000)
        sleep_ms(100);
    assert_int_equal(rc, DLOCK_OK);
    /* b may have been talking to the dead leader: suspended until it has
     * moved to another server, then served again. */
    t0 = now_ms();
    while ((rc = dlock_acquire(lb, 0)) == DLOCK_EUNAVAILABLE && now_ms() - t0 < 8000)
        sleep_ms(100);
    assert_int_equal(rc, DLOCK_EBUSY);
    assert_int_equal(dlock_acquire(other, 3000), DLOCK_OK);
    uint64_t after;
    assert_int_equal(dlock_fence(other, &after), DLOCK_OK);
    assert_true(after > before); /* zxids only grow, across leaders too */
    assert_int_equal(dlock_release(other), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    /* b's session may still be moving off the dead leader (slowly under
     * TSan): suspended, then served. */
    t0 = now_ms();
    while ((rc = dlock_acquire(lb, 3000)) == DLOCK_EUNAVAILABLE && now_ms() - t0 < 8000)
        sleep_ms(100);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_lock_free(other);
    dlock_client_close(a);
    dlock_client_close(b);
}

enum { BATCH_HOLDS = 100, BATCH_LEASE_MS = 1200 };

/* ---- lock caching ------------------------------------------------------------------------ */

/* A client of the standalone server (or through a proxy on port) whose
 * released holds are kept. */
static dlock_client *open_caching(int port, int lease_ms)
{
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"zookeeper\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "zookeeper = { hosts = \"127.0.0.1:%d\"; root = \"/dlock-test\"; connect_timeout_ms = 3000; };\n"
             "cache = { idle_ms = 60000; cooldown_ms = 0; };\n",
             lease_ms, port ? port : server.port);
    return test_client_open(text);
}

/* A hold granted with another request queued behind it is not kept: its
 * release is a real one and the request behind is granted. */
static void a_hold_granted_while_others_wait_is_not_kept(void **state)
{
    (void)state;
    dlock_client *h = open_ok("", 4000), *c = open_ok("", 4000);
    dlock_client *a = open_caching(0, 4000);
    test_grant_with_one_queued_behind(h, a, c, "zk-queued-grant", NULL);
}

/* The keeper's connection lost (the session lives on): a request could
 * have come unseen, so the kept hold is given back though nobody asked. */
static void a_lost_connection_gives_a_kept_hold_back(void **state)
{
    (void)state;
    int port;
    struct fault_proxy *proxy = fault_proxy_start(server.port, &port);
    assert_non_null(proxy);
    dlock_client *a = open_caching(port, 4000);
    dlock_lock *l = test_lock_named(a, "zk-kept-cut");
    test_cycle_keeps(a, l, 1);
    assert_int_equal(test_client_metric(a, "dlock_cache_givebacks_total"), 0);
    fault_proxy_set(proxy, FAULT_RESET, 0);
    sleep_ms(100);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    test_await_give_back(a, 3000);
    assert_int_equal(test_client_metric(a, "dlock_cache_hits_total"), 0);
    dlock_lock_free(l);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

/* 100 holds on one session are renewed together (pipelined checks of
 * their nodes) through 3 leases; a node deleted by an operator loses that
 * hold alone, reported once. */
static void many_holds_renew_together(void **state)
{
    (void)state;
    dlock_client *c = open_ok("", BATCH_LEASE_MS);
    dlock_lock *locks[BATCH_HOLDS];
    int lost[BATCH_HOLDS] = { 0 };
    test_hold_many(c, "zbatch", BATCH_HOLDS, locks, lost);
    sleep_ms(3 * BATCH_LEASE_MS);
    test_only_this_hold_lost(locks, lost, BATCH_HOLDS, -1);
    assert_true(test_client_metric(c, "dlock_renewals_total") >= BATCH_HOLDS * 6);
    delete_holder_node("zbatch-7");
    sleep_ms(BATCH_LEASE_MS);
    test_only_this_hold_lost(locks, lost, BATCH_HOLDS, 7);
    test_release_many(locks, BATCH_HOLDS, 7);
    dlock_client_close(c);
}

int main(void)
{
    if (getenv("CMOCKA_FILTER")) /* one case by name, for checking it against older code */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    if (test_service_start(&server) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] zookeeper did not start\n");
        return 1;
    }
    static const struct conformance_target target = { "zookeeper", conformance_config, delete_holder_node, NULL, 0,
                                                      CONFORMANCE_LISTS | CONFORMANCE_LISTS_NO_LEASE_LEFT, 1000,
                                                      CONFORMANCE_NATIVE_ATTEMPTS | CONFORMANCE_FIRST_ATTEMPT_TWO_TRIPS };
    int failed = conformance_run(&target);
    const struct CMUnitTest particular[] = {
        cmocka_unit_test(waiters_are_granted_in_arrival_order),
        cmocka_unit_test(the_fence_is_the_nodes_czxid),
        cmocka_unit_test(a_downgraded_node_keeps_its_place_and_fences_stay_in_order),
        cmocka_unit_test(a_downgrade_of_a_deleted_node_is_lost),
        cmocka_unit_test(a_downgrade_without_an_answer_leaves_no_node_behind),
        cmocka_unit_test(native_create_whose_answer_is_lost_leaves_one_node),
        cmocka_unit_test(native_waiter_is_granted_on_its_listing_after_the_release),
        cmocka_unit_test(hold_declared_lost_is_given_back_when_the_session_survives),
        cmocka_unit_test(a_waiting_candidate_whose_session_expired_is_no_phantom_leader),
        cmocka_unit_test(validity_follows_the_negotiated_session),
        cmocka_unit_test(names_never_leave_their_parent),
        cmocka_unit_test(empty_parents_and_foreign_nodes_are_not_listed),
        cmocka_unit_test(expired_session_fires_on_lost_and_frees_the_lock),
        cmocka_unit_test(a_hold_granted_while_others_wait_is_not_kept),
        cmocka_unit_test(a_lost_connection_gives_a_kept_hold_back),
        cmocka_unit_test(many_holds_renew_together),
        cmocka_unit_test(digest_auth_guards_the_nodes),
        cmocka_unit_test(bad_settings_are_config_errors),
        cmocka_unit_test(unreachable_ensemble_is_a_clear_error),
    };
    failed += cmocka_run_group_tests_name("zookeeper standalone", particular, NULL, NULL);
    test_service_stop(&server);
    if (test_service_start(&ensemble) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] the zookeeper ensemble did not start\n");
        return 1;
    }
    const struct CMUnitTest three[] = {
        cmocka_unit_test(holds_survive_the_leader_being_killed),
    };
    failed += cmocka_run_group_tests_name("zookeeper ensemble", three, NULL, NULL);
    test_service_stop(&ensemble);
    return failed ? 1 : 0;
}
