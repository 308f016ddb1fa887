/* tests/backends/etcd/test_etcd.c - the etcd backend against a real etcd
 * this program starts on a private port (and stops by PID): the
 * conformance suite, then what is particular to etcd: first come, first
 * served; the fence is the key's create_revision; one lease kept alive for
 * many holds; a partition past the lease; the JSON gateway's errors; a
 * downgrade that keeps the key where it is. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../conformance/conformance.h"
#include "../../support/fault_proxy.h"
#include "../../support/native_cases.h"
#include "../../support/service.h"
#include "../../support/test_client.h"
#include "../../support/test_time.h"

#include <dlock.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static struct test_service server = { .script = "etcd" };
static struct test_service tls_server = { .script = "etcd", .variant = "tls" };
static struct test_service cluster = { .script = "etcd", .nodes = 3 };

static void write_config_timeouts(char *buf, size_t size, int port, int lease_ms, int retry_cap_ms,
                                  long long timeout_ms, const char *extra)
{
    snprintf(buf, size,
             "backend = \"etcd\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "etcd = { endpoints = (\"http://127.0.0.1:%d\"); command_timeout_ms = %lld; connect_timeout_ms = %lld; %s };\n",
             lease_ms, retry_cap_ms, port, timeout_ms, timeout_ms, extra);
}

static void write_config_at(char *buf, size_t size, int port, int lease_ms, int retry_cap_ms, const char *extra)
{
    write_config_timeouts(buf, size, port, lease_ms, retry_cap_ms, 1000, extra);
}

/* The conformance suite's timeouts get the build's slack: its cases time
 * waits and hand-offs, not the server's answers, and a sanitizer build on
 * a loaded machine once saw a request of its random model test go
 * unanswered for a second. */
static void conformance_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    write_config_timeouts(buf, size, server.port, lease_ms, retry_cap_ms, (long long)slack_ms(1000), "");
}

/* Runs etcdctl against the test server; its first line of output in out. */
static int etcdctl(char *out, size_t size, const char *fmt, ...)
{
    char args[1024], cmd[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "ETCDCTL_API=3 etcdctl --endpoints=http://127.0.0.1:%d %s 2>&1", server.port, args);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[512] = "";
    if (!fgets(line, sizeof line, p))
        line[0] = 0;
    if (out)
        snprintf(out, size, "%s", line);
    char rest[512];
    while (fgets(rest, sizeof rest, p))
        ;
    return pclose(p);
}

/* Deletes the holder's key (the name's key with the lowest create_revision),
 * as an operator would. */
static void delete_holder_key(const char *name)
{
    char key[512];
    etcdctl(key, sizeof key, "get --prefix 'dlock:%s/' --sort-by=CREATE --order=ASCEND --limit=1 --keys-only", name);
    key[strcspn(key, "\n")] = 0;
    if (key[0])
        etcdctl(NULL, 0, "del '%s'", key);
}

static dlock_client *open_ok(int lease_ms)
{
    char text[1024];
    write_config_at(text, sizeof text, server.port, lease_ms, 100, "");
    return test_client_open(text);
}

/* ---- particular to etcd ---------------------------------------------------------------- */

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

/* Waiters are granted in the order they arrived, each woken by the
 * deletion of the key just before its own. */
static void waiters_are_granted_in_arrival_order(void **state)
{
    (void)state;
    enum { N = 5 };
    dlock_client *holder = open_ok(30000);
    dlock_lock *h = test_lock_named(holder, "fifo");
    assert_int_equal(dlock_acquire(h, 0), DLOCK_OK);
    struct queued q[N];
    pthread_t t[N];
    int order[N], next = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    for (int i = 0; i < N; i++) {
        q[i] = (struct queued){ open_ok(30000), NULL, i, order, &next, &mu, 99 };
        q[i].lock = test_lock_named(q[i].client, "fifo");
        pthread_create(&t[i], NULL, queue_and_take, &q[i]);
        sleep_ms(150); /* each queues before the next arrives */
    }
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(holder, "fifo", 4, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_non_null(strstr(st.holder, "(5 waiting)"));
    int64_t t0 = now_ms();
    assert_int_equal(dlock_release(h), DLOCK_OK);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(q[i].rc, DLOCK_OK);
    }
    /* Five hand-offs of 20 ms holds, each by a watch event, not by polling. */
    assert_true(now_ms() - t0 < 5 * 20 + slack_ms(1500));
    for (int i = 0; i < N; i++)
        assert_int_equal(order[i], i);
    for (int i = 0; i < N; i++) {
        dlock_lock_free(q[i].lock);
        dlock_client_close(q[i].client);
    }
    dlock_lock_free(h);
    dlock_client_close(holder);
}

/* A field ("CreateRevision", "ModRevision", "Lease") of the first key of
 * NAME, as etcdctl shows it. */
static uint64_t key_field(const char *name, const char *field)
{
    char line[512];
    etcdctl(line, sizeof line, "get --prefix 'dlock:%s/' -w fields | grep '\"%s\"'", name, field);
    const char *colon = strchr(line, ':');
    assert_non_null(colon);
    return strtoull(colon + 1, NULL, 10);
}

/* The fence is the key's create_revision, which etcd assigns in one order
 * across the cluster. */
static void the_fence_is_the_keys_create_revision(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000);
    dlock_lock *l = test_lock_named(a, "revision");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t fence;
    assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
    assert_int_equal(key_field("revision", "CreateRevision"), fence);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    char line[512];
    etcdctl(line, sizeof line, "get --prefix 'dlock:revision/' --keys-only | grep -c .");
    assert_int_equal(atoi(line), 0); /* released: the key is gone */
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* Names with '/' and '%' stay apart: "a/b" is not inside "a"'s range. */
static void names_with_slashes_stay_apart(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000), *b = open_ok(30000);
    dlock_lock *la = test_lock_named(a, "dir"), *lb = test_lock_named(b, "dir/sub");
    dlock_lock *lc = test_lock_named(b, "dir%2Fsub");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lc, 0), DLOCK_OK);
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(a, "dir", 3, &st), DLOCK_OK);
    assert_non_null(strstr(st.holder, "(0 waiting)"));
    dlock_release(la);
    dlock_release(lb);
    dlock_release(lc);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_lock_free(lc);
    dlock_client_close(a);
    dlock_client_close(b);
}

struct listed {
    int n;
    char names[8][64];
    unsigned kind[8];
    int64_t holder_count[8], waiters[8];
    uint64_t fence[8];
};

static int note_listed(const dlock_list_entry *e, void *arg)
{
    struct listed *l = arg;
    assert_true(l->n < 8);
    snprintf(l->names[l->n], sizeof l->names[l->n], "%.*s", (int)e->name_len, e->name);
    l->kind[l->n] = e->kind;
    l->holder_count[l->n] = e->holder_count;
    l->waiters[l->n] = e->waiters;
    l->fence[l->n++] = e->fence;
    return DLOCK_OK;
}

/* A name with more contender keys than one page reads (a holder and 600
 * waiters, put by an operator's transactions) is listed once, whole, and
 * the names after it are still reached. */
static void a_name_longer_than_a_page_is_listed_once_whole(void **state)
{
    (void)state;
    char p[64], name[96], cmd[1024];
    snprintf(p, sizeof p, "big-%ld/", (long)getpid());
    dlock_client *c = open_ok(30000);
    dlock_lock *l[3];
    const char *tails[3] = { "a", "big", "z" };
    uint64_t big_fence = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s%s", p, tails[i]);
        l[i] = test_lock_named(c, name);
        assert_int_equal(dlock_acquire(l[i], 0), DLOCK_OK);
    }
    assert_int_equal(dlock_fence(l[1], &big_fence), DLOCK_OK);
    /* 5 x 120 puts, within etcd's 128 operations per transaction. The
     * escaped name's '/' is %2F. */
    for (int t = 0; t < 5; t++) {
        snprintf(cmd, sizeof cmd,
                 "(echo; for i in $(seq %d %d); do echo \"put dlock:big-%ld%%2Fbig/w$i waiter-$i\"; done; "
                 "echo; echo) | ETCDCTL_API=3 etcdctl --endpoints=http://127.0.0.1:%d txn > /dev/null 2>&1",
                 t * 120, t * 120 + 119, (long)getpid(), server.port);
        assert_int_equal(system(cmd), 0);
    }
    struct listed seen = { 0 };
    int pages = test_list_pages(c, p, 10, note_listed, &seen);
    assert_true(pages >= 2); /* the big name's keys did not fit one page's read */
    assert_int_equal(seen.n, 3);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s%s", p, tails[i]);
        assert_string_equal(seen.names[i], name);
        assert_int_equal(seen.holder_count[i], 1);
        assert_int_equal(seen.waiters[i], i == 1 ? 600 : 0);
    }
    assert_int_equal(seen.fence[1], big_fence);
    etcdctl(NULL, 0, "del --prefix 'dlock:big-%ld%%2Fbig/w'", (long)getpid());
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
        dlock_lock_free(l[i]);
    }
    dlock_client_close(c);
}

/* The value of the test server's first metric whose line starts with
 * prefix, 0 when there is none. */
static long server_metric(const char *prefix)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -s http://127.0.0.1:%d/metrics | grep '^%s'", server.port, prefix);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512] = "";
    long n = 0;
    if (fgets(line, sizeof line, p)) {
        char *sp = strrchr(line, ' ');
        n = sp ? atol(sp + 1) : 0;
    }
    pclose(p);
    return n;
}

/* How many messages of a gRPC method (Txn, LeaseKeepAlive, ...) the test
 * server has received: the gateway turns each of our requests into one. */
static long server_count(const char *method)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "grpc_server_msg_received_total{grpc_method=\"%s\"", method);
    return server_metric(prefix);
}

/* Three hundred holds on one lease stay valid past three leases, renewed
 * with two requests a round. */
static void many_holds_renew_on_one_lease(void **state)
{
    (void)state;
    enum { N = 300 };
    dlock_client *c = open_ok(1500);
    dlock_lock *l[N];
    int lost[N] = { 0 };
    test_hold_many(c, "many", N, l, lost);
    sleep_ms(4500);
    for (int i = 0; i < N; i++) {
        assert_int_equal(lost[i], 0);
        assert_true(dlock_validity_ms(l[i]) > 0);
    }
    /* Every hold's key carries the one lease of this client. (The server
     * may still have other leases: those of clients closed by earlier
     * cases whose revoke was still on its way.) */
    char line[512];
    etcdctl(line, sizeof line, "get --prefix 'dlock:many-' -w fields | grep '\"Lease\"' | sort -u | wc -l");
    assert_int_equal(atoi(line), 1);
    etcdctl(line, sizeof line, "get --prefix 'dlock:many-' --keys-only | grep -c .");
    assert_int_equal(atoi(line), N);
    /* Renewal rounds send a keepalive and one look at the lease's keys,
     * never a request per hold or per group of holds. */
    long keepalives = server_count("LeaseKeepAlive"), looks = server_count("LeaseTimeToLive");
    long txns = server_count("Txn"), ranges = server_count("Range");
    sleep_ms(1500);
    long rounds = server_count("LeaseKeepAlive") - keepalives;
    long looked = server_count("LeaseTimeToLive") - looks;
    assert_true(rounds >= 1);
    /* One look a round; a round may be between its two requests when the
     * counters are read, at either end of the window. */
    assert_true(looked >= rounds - 1 && looked <= rounds + 1);
    assert_int_equal(server_count("Txn"), txns);
    assert_int_equal(server_count("Range"), ranges);
    for (int i = 0; i < N; i++) {
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
        dlock_lock_free(l[i]);
    }
    dlock_client_close(c);
}

/* The client's lease was granted long before this grant and nothing kept it
 * alive meanwhile: the grant must refresh it, or the key would expire
 * within the validity the core counts from this acquire and another client
 * would be granted beside the holder. (Found by the checked fault suite.) */
static void a_grant_on_an_old_lease_outlives_its_validity(void **state)
{
    (void)state;
    dlock_client *a = open_ok(2000), *b = open_ok(2000);
    dlock_lock *first = test_lock_named(a, "old-lease-1");
    assert_int_equal(dlock_acquire(first, 0), DLOCK_OK); /* the lease is granted here */
    assert_int_equal(dlock_release(first), DLOCK_OK);
    sleep_ms(1700); /* most of its 2 s TTL gone, nothing renewing it */
    dlock_lock *la = test_lock_named(a, "old-lease-2"), *lb = test_lock_named(b, "old-lease-2");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    int64_t valid = dlock_validity_ms(la);
    assert_true(valid > 1500);
    /* Within that validity, nobody else may get it. */
    assert_int_equal(dlock_acquire(lb, valid - 100), DLOCK_ETIMEDOUT);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(first);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* While the client's lease was refreshed within the last third of it, a
 * grant costs two requests (the txn that queues and reads the head, the
 * txn that releases) and no keepalive; the hold is valid for what is left
 * of the lease, never more. */
static void a_grant_on_a_fresh_lease_sends_no_keepalive(void **state)
{
    (void)state;
    dlock_client *c = open_ok(30000);
    dlock_lock *l = test_lock_named(c, "fresh-lease");
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* grants the lease */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    long keepalives = server_count("LeaseKeepAlive"), txns = server_count("Txn");
    for (int i = 0; i < 10; i++) {
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        int64_t valid = dlock_validity_ms(l);
        assert_true(valid > 0 && valid <= 30000 - (now_ms() - t0));
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    assert_true(now_ms() - t0 < 10000); /* all within the first third */
    assert_int_equal(server_count("LeaseKeepAlive"), keepalives);
    assert_int_equal(server_count("Txn"), txns + 20);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* How many keys a name has (holder and waiters). */
static int keys_of(const char *name)
{
    char out[64];
    etcdctl(out, sizeof out, "get --prefix 'dlock:%s/' --keys-only | grep -c .", name);
    return atoi(out);
}

/* A waiter behind another client's hold, on a lease refreshed just now,
 * waits in slices of the retry cap (100 ms here), each on a watch of its
 * own: it keeps its key alive only when the lease would not outlast the
 * next slice by a third of the lease, never once a slice. */
static void a_waiter_on_a_fresh_lease_sends_no_keepalive_a_slice(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000), *b = open_ok(30000);
    dlock_lock *la = test_lock_named(a, "fresh-wait"), *lb = test_lock_named(b, "fresh-wait");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY); /* b's lease is granted here */
    long keepalives = server_count("LeaseKeepAlive"), watches = server_count("Watch");
    assert_int_equal(dlock_acquire(lb, 1000), DLOCK_ETIMEDOUT);
    /* About ten slices, each its own watch; neither lease needed a
     * keepalive (the holder's watchdog renews at a third of 30 s). */
    assert_true(server_count("Watch") - watches >= 5);
    assert_int_equal(server_count("LeaseKeepAlive"), keepalives);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A blocking acquire on a thread of its own: waits up to wait_ms, notes
 * how it ended and when, holds for hold_ms once granted, then releases.
 * rc and release_rc stay -1 until known (rc may be looked at while the
 * thread waits, atomically); granted_at is the test clock at the end of
 * the wait, 0 before. */
struct thread_waiter {
    dlock_lock *lock;
    int64_t wait_ms, hold_ms;
    int rc, release_rc;
    int64_t took_ms, granted_at;
};

#define THREAD_WAITER(l, wait, hold) ((struct thread_waiter){ (l), (wait), (hold), -1, -1, 0, 0 })

static void *thread_waiter_run(void *arg)
{
    struct thread_waiter *w = arg;
    int64_t t0 = now_ms();
    int rc = dlock_acquire(w->lock, w->wait_ms);
    w->took_ms = now_ms() - t0;
    __atomic_store_n(&w->granted_at, now_ms(), __ATOMIC_SEQ_CST);
    __atomic_store_n(&w->rc, rc, __ATOMIC_SEQ_CST);
    if (rc == DLOCK_OK) {
        sleep_ms(w->hold_ms);
        w->release_rc = dlock_release(w->lock);
    }
    return NULL;
}

/* How many writes etcd's log has applied (every txn with a put or a
 * delete in it, whether or not its compare held), leaving out the leases
 * that ran out: an earlier case's client that was killed, or cut off,
 * leaves its lease to expire up to its 30 s later, and that revoke is a
 * proposal of the server's own, at any moment of a later case. */
static long server_writes(void)
{
    return server_metric("etcd_server_proposals_applied_total ") -
           server_metric("etcd_debugging_server_lease_expired_total ");
}

/* A waiter that queued its key looks again (after each 100 ms slice of its
 * wait, and when its predecessor goes) with reads alone: no write through
 * etcd's log, which would order its look behind other clients' writes.
 * From the waiter's queueing to its grant, the only write is the holder's
 * delete. */
static void a_queued_waiter_looks_again_without_a_write(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000), *b = open_ok(30000);
    dlock_lock *la = test_lock_named(a, "look-again"), *lb = test_lock_named(b, "look-again");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    /* Static: a failed check leaves the thread running, and it must not
     * write into a stack frame the next case reuses. */
    static struct thread_waiter wb;
    wb = THREAD_WAITER(lb, 20000, 50);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_waiter_run, &wb), 0);
    int64_t t0 = now_ms();
    while (keys_of("look-again") < 2 && now_ms() - t0 < 5000)
        sleep_ms(10);
    assert_int_equal(keys_of("look-again"), 2); /* b's key is queued */
    /* The rest of b's queueing attempt may still be on its way (a loaded
     * machine): first a quiet spell longer than a slice (and than the
     * pause a sanitizer's slowness can put between two of the attempt's
     * writes), for at most 2 s. A waiter that wrote at every look never
     * has one, and fails below. */
    long writes = server_writes();
    t0 = now_ms();
    for (;;) {
        sleep_ms(slack_ms(150));
        long now_writes = server_writes();
        if (now_writes == writes || now_ms() - t0 > slack_ms(2000))
            break;
        writes = now_writes;
    }
    sleep_ms(400); /* a few slices, each ending in a look */
    assert_int_equal(server_writes(), writes);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    t0 = now_ms();
    while (__atomic_load_n(&wb.granted_at, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 5000)
        sleep_ms(5);
    long after = server_writes();
    pthread_join(t, NULL);
    assert_int_equal(wb.rc, DLOCK_OK);
    /* The holder's delete; and b's own release, if it came already. */
    assert_true(after - writes >= 1 && after - writes <= 2);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}


/* Deletes the second key of name's line (its first waiter's). */
static void delete_first_waiters_key(const char *name)
{
    char key[512] = "";
    etcdctl(key, sizeof key,
            "get --prefix 'dlock:%s/' --sort-by=CREATE --order=ASCEND --keys-only | grep . | sed -n 2p", name);
    key[strcspn(key, "\n")] = 0;
    assert_true(key[0] != 0);
    char deleted[64] = "";
    etcdctl(deleted, sizeof deleted, "del '%s'", key);
    assert_int_equal(atoi(deleted), 1); /* (the waiter may have queued anew already) */
}

struct async_done {
    int rc;
    bool done;
};

static void note_done(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    struct async_done *d = arg;
    d->rc = rc;
    d->done = true;
}

/* A waiter whose key is deleted while it waits (an operator, or its lease
 * running out) finds it gone when it looks again, queues anew and is
 * granted once the holder lets go: through the blocking call, and through
 * the non-blocking one, whose looks go without a thread. */
static void a_waiter_whose_key_went_queues_anew(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000), *b = open_ok(30000);
    dlock_lock *la = test_lock_named(a, "gone-look"), *lb = test_lock_named(b, "gone-look");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct thread_waiter wb = THREAD_WAITER(lb, 20000, 50);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_waiter_run, &wb), 0);
    int64_t t0 = now_ms();
    while (keys_of("gone-look") < 2 && now_ms() - t0 < 5000)
        sleep_ms(10);
    delete_first_waiters_key("gone-look");
    t0 = now_ms();
    while (keys_of("gone-look") < 2 && now_ms() - t0 < 5000)
        sleep_ms(10);
    assert_int_equal(keys_of("gone-look"), 2); /* queued anew within a slice or two */
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(wb.rc, DLOCK_OK);

    /* The same through dlock_acquire_start, driven by one loop. */
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct async_done d = { -1, false };
    assert_int_equal(dlock_acquire_start(lb, 20000, note_done, &d), DLOCK_OK);
    struct pollfd p = { .fd = dlock_client_fd(b), .events = POLLIN };
    bool deleted = false, released = false;
    t0 = now_ms();
    while (!d.done && now_ms() - t0 < 10000) {
        poll(&p, 1, 10);
        dlock_client_process(b);
        if (!deleted && keys_of("gone-look") == 2) {
            delete_first_waiters_key("gone-look");
            deleted = true;
        } else if (deleted && !released && keys_of("gone-look") == 2) {
            assert_int_equal(dlock_release(la), DLOCK_OK);
            released = true;
        }
    }
    assert_true(d.done);
    assert_int_equal(d.rc, DLOCK_OK);
    assert_true(released);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A waiter whose wait lasts more than twice its 2 s lease keeps its key,
 * and so its place, all along: granted before a client that queued after
 * it. */
static void a_waiter_keeps_its_place_through_waits_longer_than_its_lease(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000), *b = open_ok(2000), *c = open_ok(30000);
    dlock_lock *la = test_lock_named(a, "long-wait");
    struct thread_waiter wb = THREAD_WAITER(test_lock_named(b, "long-wait"), 20000, 50),
                         wc = THREAD_WAITER(test_lock_named(c, "long-wait"), 20000, 50);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    pthread_t tb, tc;
    assert_int_equal(pthread_create(&tb, NULL, thread_waiter_run, &wb), 0);
    sleep_ms(4500);
    assert_int_equal(keys_of("long-wait"), 2); /* the holder's and b's */
    assert_int_equal(pthread_create(&tc, NULL, thread_waiter_run, &wc), 0);
    int64_t t0 = now_ms();
    while (keys_of("long-wait") < 3 && now_ms() - t0 < 5000)
        sleep_ms(20);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(tb, NULL);
    pthread_join(tc, NULL);
    assert_int_equal(wb.rc, DLOCK_OK);
    assert_int_equal(wc.rc, DLOCK_OK);
    assert_true(wb.granted_at < wc.granted_at);
    dlock_lock_free(la);
    dlock_lock_free(wb.lock);
    dlock_lock_free(wc.lock);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

/* An exclusive hold of NAME and a waiter in mode behind it, through a
 * proxy that delays each byte of the waiter's 300 ms each way, so that
 * what the holder does next comes while the waiter's requests are on
 * their way. */
struct slow_line {
    struct fault_proxy *proxy;
    dlock_client *a, *b;
    dlock_lock *holder;
    struct thread_waiter w;
    pthread_t t;
};

/* Takes the hold, starts the waiter, and comes back once its queue txn is
 * in (its key is there). */
static void slow_line_start(struct slow_line *s, const char *name, unsigned mode)
{
    int proxy_port;
    s->proxy = fault_proxy_start(server.port, &proxy_port);
    assert_non_null(s->proxy);
    s->a = open_ok(30000);
    s->holder = test_lock_named(s->a, name);
    assert_int_equal(dlock_acquire(s->holder, 0), DLOCK_OK);
    char text[1024];
    /* One wait covers the whole budget: no look again on a timer. */
    write_config_at(text, sizeof text, proxy_port, 30000, 30000, "");
    s->b = test_client_open(text);
    s->w = THREAD_WAITER(test_lock_of_kind(s->b, name, mode, 0), 20000, 0);
    fault_proxy_set(s->proxy, FAULT_DELAY, 300);
    assert_int_equal(pthread_create(&s->t, NULL, thread_waiter_run, &s->w), 0);
    int64_t t0 = now_ms();
    while (keys_of(name) < 2 && now_ms() - t0 < 5000)
        sleep_ms(20);
    assert_int_equal(keys_of(name), 2);
}

/* The waiter was granted, and not at the end of its 20 s wait: the
 * holder's act was seen. It has let go again. */
static void slow_line_granted(struct slow_line *s)
{
    pthread_join(s->t, NULL);
    assert_int_equal(s->w.rc, DLOCK_OK);
    assert_true(s->w.took_ms < 10000);
    assert_int_equal(s->w.release_rc, DLOCK_OK);
    fault_proxy_set(s->proxy, FAULT_PASS, 0);
}

static void slow_line_end(struct slow_line *s)
{
    dlock_lock_free(s->holder);
    dlock_lock_free(s->w.lock);
    dlock_client_close(s->a);
    dlock_client_close(s->b);
    fault_proxy_stop(s->proxy);
}

/* The holder lets go after the waiter read who is before it but before its
 * watch reached the server: the watch starts after the deletion, which it
 * must still see. */
static void a_release_before_the_watch_is_created_is_seen(void **state)
{
    (void)state;
    struct slow_line s;
    slow_line_start(&s, "before-watch", DLOCK_MODE_EXCLUSIVE);
    /* Its queue txn is in; its read of the key before it lands 600 ms
     * later, its keepalive 600 ms after that and its watch 600 ms after
     * that again: let go in between. */
    sleep_ms(1000);
    assert_int_equal(dlock_release(s.holder), DLOCK_OK);
    slow_line_granted(&s);
    slow_line_end(&s);
}

/* A downgrade puts the holder's key again: the same key, with its create
 * revision (its place in line and its fence) and its lease, its value
 * marked shared. From then on the status and the listing show a shared
 * hold, with that fence, and a writer waiting behind it as a waiter. */
static void a_downgraded_key_keeps_its_place_and_shows_as_shared(void **state)
{
    (void)state;
    dlock_client *a = open_ok(30000), *b = open_ok(30000), *c = open_ok(30000);
    dlock_lock *x = test_lock_named(a, "down-key");
    dlock_lock *reader = test_lock_of_kind(b, "down-key", DLOCK_MODE_SHARED, 0);
    struct thread_waiter w = THREAD_WAITER(test_lock_named(c, "down-key"), 20000, 0);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    uint64_t created = key_field("down-key", "CreateRevision"), lease = key_field("down-key", "Lease"), fence;
    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    assert_int_equal(dlock_fence(x, &fence), DLOCK_OK);
    assert_int_equal(key_field("down-key", "CreateRevision"), created);
    assert_int_equal(key_field("down-key", "Lease"), lease);
    assert_int_equal(fence, created); /* the hold keeps its fence */
    assert_true(key_field("down-key", "ModRevision") > created); /* the key was put again */
    char value[256];
    etcdctl(value, sizeof value, "get --prefix 'dlock:down-key/' --print-value-only");
    assert_memory_equal(value, "~s~", 3);
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(a, "down-key", 8, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_string_equal(st.holder, "1 shared holder (0 waiting)");
    assert_int_equal(st.fence, fence);

    assert_int_equal(dlock_acquire(reader, 0), DLOCK_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_waiter_run, &w), 0);
    int64_t t0 = now_ms();
    while (keys_of("down-key") < 3 && now_ms() - t0 < 5000)
        sleep_ms(20);
    assert_int_equal(keys_of("down-key"), 3);
    assert_int_equal(dlock_status(a, "down-key", 8, &st), DLOCK_OK);
    assert_string_equal(st.holder, "2 shared holders (1 waiting)");
    struct listed seen = { 0 };
    test_list_pages(a, "down-key", 10, note_listed, &seen);
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.kind[0], DLOCK_MODE_SHARED);
    assert_int_equal(seen.holder_count[0], 2);
    assert_int_equal(seen.waiters[0], 1);
    assert_true(seen.fence[0] > fence); /* the reader's, made after the downgrade */

    assert_int_equal(dlock_release(reader), DLOCK_OK);
    sleep_ms(100);
    assert_int_equal(__atomic_load_n(&w.rc, __ATOMIC_SEQ_CST), -1); /* the downgraded hold still keeps the writer out */
    assert_int_equal(dlock_release(x), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(w.release_rc, DLOCK_OK);
    dlock_lock_free(x);
    dlock_lock_free(reader);
    dlock_lock_free(w.lock);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

/* As a_release_before_the_watch_is_created_is_seen, for a reader: the
 * writer before it is downgraded after_ms after its queue txn is in:
 * 250 ms, before its read of the key before it lands (that read finds the
 * key made shared: nothing to wait for); 1000 ms, after that read but
 * before its watch is created (the key is still there with its create
 * revision; the watch's look at it must see it was put again). Either way
 * the reader comes in while the downgraded hold holds. */
static void downgrade_while_a_reader_queues(int after_ms)
{
    struct slow_line s;
    slow_line_start(&s, "down-watch", DLOCK_MODE_SHARED);
    sleep_ms(after_ms);
    assert_int_equal(dlock_downgrade(s.holder), DLOCK_OK);
    slow_line_granted(&s);
    assert_true(dlock_validity_ms(s.holder) > 0); /* it came in beside the downgraded hold */
    assert_int_equal(dlock_release(s.holder), DLOCK_OK);
    slow_line_end(&s);
}

static void a_downgrade_while_a_reader_queues_is_seen(void **state)
{
    (void)state;
    downgrade_while_a_reader_queues(250);
    downgrade_while_a_reader_queues(1000);
}

static int64_t lost_at;

static void note_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    __atomic_store_n(&lost_at, now_ms(), __ATOMIC_SEQ_CST);
}

/* A client that talks to etcd through a proxy (lease 6 s, so its other
 * hold outlives the faults), holding "<name>-keep" beside what the case
 * does: that hold keeps the client's lease alive throughout. */
struct stray_client {
    struct fault_proxy *proxy;
    dlock_client *client;
    dlock_lock *keep;
};

static void stray_client_open(struct stray_client *sc, const char *name)
{
    int proxy_port;
    sc->proxy = fault_proxy_start(server.port, &proxy_port);
    assert_non_null(sc->proxy);
    char text[1024];
    write_config_at(text, sizeof text, proxy_port, 6000, 100, "");
    sc->client = test_client_open(text);
    char keep[64];
    snprintf(keep, sizeof keep, "%s-keep", name);
    sc->keep = test_lock_named(sc->client, keep);
    assert_int_equal(dlock_acquire(sc->keep, 0), DLOCK_OK);
}

static void stray_client_close(struct stray_client *sc)
{
    assert_int_equal(dlock_release(sc->keep), DLOCK_OK);
    dlock_lock_free(sc->keep);
    dlock_client_close(sc->client);
    fault_proxy_stop(sc->proxy);
}

/* Another client waits for name: granted well within one lease of the
 * stray client (before, it waited for as long as that client held
 * anything, as the key stayed on a lease kept alive). */
static void granted_within_a_lease(const char *name)
{
    dlock_client *d = open_ok(6000);
    dlock_lock *ld = test_lock_named(d, name);
    int64_t t0 = now_ms();
    int rc = dlock_acquire(ld, 14000);
    int64_t took = now_ms() - t0;
    if (rc != DLOCK_OK || took > 5000)
        fail_msg("'%s': %s after %lld ms: a key of the stray client still holds it", name, dlock_strerror(rc),
                 (long long)took);
    assert_int_equal(dlock_release(ld), DLOCK_OK);
    dlock_lock_free(ld);
    dlock_client_close(d);
}

/* A release whose request is lost (and so its answer never comes) leaves
 * the key; it is deleted at the client's next renewal round. */
static void a_release_that_gets_no_answer_is_deleted_later(void **state)
{
    (void)state;
    struct stray_client sc;
    stray_client_open(&sc, "stray-rel");
    dlock_lock *la = test_lock_named(sc.client, "stray-rel");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    fault_proxy_set(sc.proxy, FAULT_DROP, 0);
    sleep_ms(100); /* the proxy thread has taken the new mode */
    assert_int_equal(dlock_release(la), DLOCK_EUNAVAILABLE);
    fault_proxy_set(sc.proxy, FAULT_PASS, 0);
    granted_within_a_lease("stray-rel");
    /* The handle takes the name again: a new key, with a higher fence. */
    assert_int_equal(dlock_acquire(la, 5000), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    stray_client_close(&sc);
}

/* The same, and then the handle tries once more while the requests are
 * still lost: the orphan it takes up for that attempt goes back on the
 * list when the attempt gets no answer either. */
static void a_retry_that_gets_no_answer_keeps_the_key_remembered(void **state)
{
    (void)state;
    struct stray_client sc;
    stray_client_open(&sc, "stray-retry");
    dlock_lock *la = test_lock_named(sc.client, "stray-retry");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    fault_proxy_set(sc.proxy, FAULT_DROP, 0);
    sleep_ms(100); /* the proxy thread has taken the new mode */
    assert_int_equal(dlock_release(la), DLOCK_EUNAVAILABLE);
    assert_int_not_equal(dlock_acquire(la, 0), DLOCK_OK);
    fault_proxy_set(sc.proxy, FAULT_PASS, 0);
    granted_within_a_lease("stray-retry");
    dlock_lock_free(la);
    stray_client_close(&sc);
}

/* A waiter gives up while its requests are lost: its delete never comes.
 * When the holder lets go, that key must not become the holder. */
static void a_waiter_that_gives_up_without_an_answer_leaves_no_key(void **state)
{
    (void)state;
    dlock_client *x = open_ok(6000);
    dlock_lock *lx = test_lock_named(x, "stray-wait");
    assert_int_equal(dlock_acquire(lx, 0), DLOCK_OK);
    struct stray_client sc;
    stray_client_open(&sc, "stray-wait");
    struct thread_waiter w = THREAD_WAITER(test_lock_named(sc.client, "stray-wait"), 1500, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_waiter_run, &w), 0);
    sleep_ms(700); /* queued, and waiting */
    fault_proxy_set(sc.proxy, FAULT_DROP, 0);
    pthread_join(t, NULL);
    assert_int_not_equal(w.rc, DLOCK_OK);
    fault_proxy_set(sc.proxy, FAULT_PASS, 0);
    assert_int_equal(dlock_release(lx), DLOCK_OK);
    granted_within_a_lease("stray-wait");
    dlock_lock_free(w.lock);
    stray_client_close(&sc);
    dlock_lock_free(lx);
    dlock_client_close(x);
}

/* The holder is cut off longer than its lease: it is told at its validity
 * end, and the next client is granted only after that, once the server's
 * lease ran out. */
static void partition_past_the_lease(void **state)
{
    (void)state;
    __atomic_store_n(&lost_at, 0, __ATOMIC_SEQ_CST);
    int proxy_port;
    struct fault_proxy *proxy = fault_proxy_start(server.port, &proxy_port);
    assert_non_null(proxy);
    char text[1024];
    write_config_at(text, sizeof text, proxy_port, 2000, 100, "");
    dlock_client *a = test_client_open(text);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = note_lost;
    dlock_lock *la = NULL;
    assert_int_equal(dlock_lock_new(a, "cut", 3, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    dlock_client *b = open_ok(2000);
    dlock_lock *lb = test_lock_named(b, "cut");
    fault_proxy_set(proxy, FAULT_BLACKHOLE, 0);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(lb, 6000), DLOCK_OK);
    int64_t granted = now_ms();
    int64_t told = __atomic_load_n(&lost_at, __ATOMIC_SEQ_CST);
    assert_true(told != 0);
    assert_true(told <= granted);
    assert_true(granted - t0 >= 1500); /* not before the lease could run out */
    fault_proxy_set(proxy, FAULT_PASS, 0);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_close(b);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

/* ---- the non-blocking API's attempts, sent without a thread --------------------- */

static dlock_client *open_native_at(int port)
{
    char text[1024];
    write_config_at(text, sizeof text, port, 30000, 100, "");
    return test_client_open(text);
}

static dlock_client *open_direct(void)
{
    return open_ok(30000);
}

/* Lost and missing answers (tests/support/native_cases.c): the
 * transaction is sent again by acquire, which finds our key; an attempt
 * without an answer ends at two command timeouts (the transaction and the
 * predecessor's read), and its key, which it may have made, is swept. */
NATIVE_CASES(open_native_at, open_direct, server.port, 2000)

/* A release's delete sent without a thread: it ends at the command timeout
 * when no answer comes, and goes out again on a fresh connection after
 * the idle ones were cut. (The case of an answer lost after the delete ran
 * is not one of them: libcurl itself sends a request again on a fresh
 * connection when a reused one dies before any answer, and the second
 * delete, finding the key gone, reports a loss; docs/design.md.) */
static void native_release_without_an_answer_ends_at_its_deadline(void **state)
{
    (void)state;
    const struct native_target t = { open_native_at, open_direct, server.port, 1000 };
    native_case_release_without_an_answer_ends_at_its_deadline(&t);
}

static void native_release_on_a_dead_idle_connection_is_sent_again(void **state)
{
    (void)state;
    const struct native_target t = { open_native_at, open_direct, server.port, 1000 };
    native_case_release_on_a_dead_idle_connection_is_sent_again(&t);
}

struct collected_findings {
    char text[4096];
    int warnings;
};

static void collect_finding(int is_error, const char *file, int line, const char *msg, void *arg)
{
    (void)file;
    (void)line;
    struct collected_findings *f = arg;
    size_t used = strlen(f->text);
    snprintf(f->text + used, sizeof f->text - used, "%s|%s\n", is_error ? "E" : "W", msg);
    if (!is_error)
        f->warnings++;
}

/* A port on which nothing listens, for as long as this program runs: a
 * socket bound to it and never listening, so that no other server (the
 * test programs run side by side, each starting servers of its own) can
 * take it, and a connection to it is refused at once. */
static int dead_port(void)
{
    static int port;
    if (port)
        return port;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0 };
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port); /* fd stays open until the program exits */
    return port;
}

/* A user and password in an endpoint URL (for an etcd behind an
 * authenticating proxy) are sent, but never shown: not in a failure to
 * connect, not in the server's answer, which carries the instance label,
 * and check-config warns and points to etcd.username and etcd.password. */
static void credentials_in_an_endpoint_url_are_never_shown(void **state)
{
    (void)state;
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"etcd\";\netcd = { endpoints = (\"http://u:S3CRETxyz@127.0.0.1:%d\"); "
             "connect_timeout_ms = 500; };\n", dead_port());
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_EUNAVAILABLE);
    if (strstr(dlock_errmsg(), "S3CRET") || !strstr(dlock_errmsg(), "http://***@127.0.0.1"))
        fail_msg("the failure to connect: %s", dlock_errmsg());

    snprintf(text, sizeof text,
             "backend = \"etcd\";\netcd = { endpoints = (\"http://u:S3CRETxyz@127.0.0.1:%d/\"); };\n", server.port);
    /* etcd itself takes the basic authentication libcurl sends for them
     * as a bad token: the server's answer, with the endpoint in it. */
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_ECONFIG || strstr(dlock_errmsg(), "S3CRET") || !strstr(dlock_errmsg(), "http://***@127.0.0.1") ||
        !strstr(dlock_errmsg(), "etcd.username"))
        fail_msg("the server's refusal: %s: %s", dlock_strerror(rc), dlock_errmsg());

    char path[] = "/tmp/dlock-etcd-cred-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct collected_findings f = { "", 0 };
    assert_int_equal(dlock_config_check(path, collect_finding, &f), DLOCK_OK);
    unlink(path);
    if (f.warnings != 1 || strstr(f.text, "S3CRET") || !strstr(f.text, "etcd.username"))
        fail_msg("check-config: %s", f.text);
}

static void bad_settings_are_config_errors(void **state)
{
    (void)state;
    const char *bad[] = {
        "backend = \"etcd\";\netcd = { endpoints = (\"127.0.0.1:2379\"); };\n",
        "backend = \"etcd\";\netcd = { endpoints = \"http://127.0.0.1:2379\"; };\n",
        "backend = \"etcd\";\netcd = { command_timeout_ms = 0; };\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlock_client *c = NULL;
        int rc = dlock_client_open_string(&c, bad[i]);
        if (rc != DLOCK_ECONFIG)
            fail_msg("case %zu: %s (%s)", i, dlock_strerror(rc), dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(), "etcd."));
    }
}

static void unreachable_cluster_is_a_clear_error(void **state)
{
    (void)state;
    char text[512];
    write_config_at(text, sizeof text, dead_port(), 30000, 100, "");
    dlock_client *c = NULL;
    int64_t t0 = now_ms();
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_EUNAVAILABLE);
    assert_true(now_ms() - t0 < 2000);
    char where[64];
    snprintf(where, sizeof where, "etcd http://127.0.0.1:%d", dead_port());
    assert_non_null(strstr(dlock_errmsg(), where));
}

/* The first endpoint refuses connections: each call goes on to the next
 * one by itself, so opening, taking and giving back all succeed at once. */
static void a_dead_endpoint_is_followed_within_the_call(void **state)
{
    (void)state;
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"etcd\";\nlease_ms = 3000;\n"
             "etcd = { endpoints = (\"http://127.0.0.1:%d\", \"http://127.0.0.1:%d\"); "
             "command_timeout_ms = 1000; connect_timeout_ms = 1000; };\n",
             dead_port(), server.port);
    dlock_client *c = test_client_open(text);
    dlock_lock *l = test_lock_named(c, "dead-endpoint");
    for (int round = 0; round < 3; round++) {
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* a single try */
        assert_true(dlock_validity_ms(l) > 0);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* An https endpoint: the server's certificate is checked against the CA
 * the configuration names; without it, a clear error. */
static void tls_with_the_servers_ca(void **state)
{
    (void)state;
    assert_int_equal(test_service_start(&tls_server), 0);
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"etcd\";\netcd = { endpoints = (\"https://127.0.0.1:%d\"); cacert = \"%s/ca.pem\"; };\n",
             tls_server.port, tls_server.data);
    dlock_client *a = test_client_open(text);
    dlock_lock *l = test_lock_named(a, "over-tls");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t fence;
    assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
    snprintf(text, sizeof text, "backend = \"etcd\";\netcd = { endpoints = (\"https://127.0.0.1:%d\"); };\n",
             tls_server.port);
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_errmsg());
    assert_int_equal(test_service_stop(&tls_server), 0);
    assert_int_equal(rc, DLOCK_EUNAVAILABLE);
    if (!strstr(why, "certificate") && !strstr(why, "SSL"))
        fail_msg("the error does not say it is the certificate: %s", why);
}

/* Last: turns authentication on for the rest of the server's life. A user
 * with readwrite on its prefix only locks there; a wrong password and a
 * prefix outside its permission are configuration errors saying so. */
static void authentication_with_a_least_privilege_user(void **state)
{
    (void)state;
    char out[256];
    assert_int_equal(etcdctl(out, sizeof out, "user add root:root-secret"), 0);
    assert_int_equal(etcdctl(out, sizeof out, "role add lockers"), 0);
    assert_int_equal(etcdctl(out, sizeof out, "role grant-permission lockers --prefix=true readwrite 'dlock-auth:'"), 0);
    assert_int_equal(etcdctl(out, sizeof out, "user add locker:locker-secret"), 0);
    assert_int_equal(etcdctl(out, sizeof out, "user grant-role locker lockers"), 0);
    assert_int_equal(etcdctl(out, sizeof out, "auth enable"), 0);
    char text[1024];
    write_config_at(text, sizeof text, server.port, 30000, 100,
                    "username = \"locker\"; password = \"locker-secret\"; prefix = \"dlock-auth:\";");
    dlock_client *a = test_client_open(text);
    dlock_lock *l = test_lock_named(a, "guarded");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_renew(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(a);
    dlock_client *c = NULL;
    write_config_at(text, sizeof text, server.port, 30000, 100,
                    "username = \"locker\"; password = \"wrong\"; prefix = \"dlock-auth:\";");
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "etcd.password"));
    assert_null(strstr(dlock_errmsg(), "wrong"));
    write_config_at(text, sizeof text, server.port, 30000, 100, "");
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "etcd.username"));
    write_config_at(text, sizeof text, server.port, 30000, 100,
                    "username = \"locker\"; password = \"locker-secret\"; prefix = \"elsewhere:\";");
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_ECONFIG); /* found at open */
    assert_non_null(strstr(dlock_errmsg(), "permission"));
}

/* The pid of member i (1..3) of the cluster. */
static pid_t cluster_member(int i)
{
    char pidfile[300];
    snprintf(pidfile, sizeof pidfile, "%s/%d/pid", cluster.data, i);
    FILE *f = fopen(pidfile, "r");
    long pid = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld", &pid), 1);
    fclose(f);
    return (pid_t)pid;
}

/* A 3-member cluster loses its leader (SIGKILL) while a lock is held:
 * the hold survives (its renewals go to the next
 * endpoint) or is reported lost, never silently; fences keep growing; and
 * the lock is served again after the election. */
static void holds_survive_the_leader_being_killed(void **state)
{
    (void)state;
    assert_int_equal(test_service_start(&cluster), 0);
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"etcd\";\nlease_ms = 3000;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "etcd = { endpoints = (\"http://127.0.0.1:%d\", \"http://127.0.0.1:%d\", \"http://127.0.0.1:%d\"); "
             "command_timeout_ms = 500; connect_timeout_ms = 500; };\n",
             cluster.port, cluster.port + 1, cluster.port + 2);
    __atomic_store_n(&lost_at, 0, __ATOMIC_SEQ_CST);
    dlock_client *a = test_client_open(text), *b = test_client_open(text);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = note_lost;
    dlock_lock *la = NULL, *lb = test_lock_named(b, "leader");
    assert_int_equal(dlock_lock_new(a, "leader", 6, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t fa = 0, fb = 0;
    assert_int_equal(dlock_fence(la, &fa), DLOCK_OK);
    char cmd[512], out[16] = "";
    snprintf(cmd, sizeof cmd, "bash '%s/support/etcd.sh' leader %d 3", getenv("DLOCK_TEST_SRCDIR"), cluster.port);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    if (!fgets(out, sizeof out, p))
        out[0] = 0;
    pclose(p);
    int leader = atoi(out);
    assert_true(leader >= 1 && leader <= 3);
    kill(cluster_member(leader), SIGKILL);
    sleep_ms(4000); /* an election, and more than a lease */
    int64_t valid = dlock_validity_ms(la);
    bool told = __atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) != 0;
    assert_true((valid > 0 && !told) || (valid == DLOCK_ELOST && told)); /* survived, or said so */
    int released = dlock_release(la);
    assert_true(released == DLOCK_OK || released == DLOCK_ELOST);
    assert_int_equal(dlock_acquire(lb, 5000), DLOCK_OK); /* served after the election */
    assert_int_equal(dlock_fence(lb, &fb), DLOCK_OK);
    assert_true(fb > fa);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
    assert_int_equal(test_service_stop(&cluster), 0);
}

/* ---- lock caching ------------------------------------------------------------------------ */

/* A client of the server (or through a proxy on port) whose released holds
 * are kept for a minute unused. */
static dlock_client *open_caching(int port)
{
    char text[1024];
    write_config_timeouts(text, sizeof text, port ? port : server.port, 30000, 100, (long long)slack_ms(5000),
                          "");
    size_t used = strlen(text);
    snprintf(text + used, sizeof text - used, "cache = { idle_ms = 60000; cooldown_ms = 0; };\n");
    return test_client_open(text);
}

/* The member a keeper watches through loses its cluster's quorum (the
 * other two stopped): requests made through the others would go unheard
 * on a stream that stays open, so the member is asked to end it once it
 * has no leader, and that end tells the keeper. Once the two are back,
 * the kept hold is given back, though nobody asked. */
static void a_watch_on_a_member_without_a_leader_ends(void **state)
{
    (void)state;
    assert_int_equal(test_service_start(&cluster), 0);
    char text[1024];
    snprintf(text, sizeof text,
             "backend = \"etcd\";\nlease_ms = 30000;\n"
             "etcd = { endpoints = (\"http://127.0.0.1:%d\"); command_timeout_ms = 1000; connect_timeout_ms = 1000; };\n"
             "cache = { idle_ms = 60000; cooldown_ms = 0; };\n",
             cluster.port);
    dlock_client *a = test_client_open(text);
    dlock_lock *l = test_lock_named(a, "no-leader");
    test_cycle_keeps(a, l, 1);
    sleep_ms(200); /* the stream in place */
    pid_t m2 = cluster_member(2), m3 = cluster_member(3);
    kill(m2, SIGSTOP);
    kill(m3, SIGSTOP);
    /* The member gives up on a leader after three election timeouts of
     * 500 ms with none: about 2 s. */
    sleep_ms(slack_ms(3500));
    kill(m2, SIGCONT);
    kill(m3, SIGCONT);
    test_await_give_back(a, 10000);
    assert_int_equal(test_client_metric(a, "dlock_cache_hits_total"), 0);
    dlock_lock_free(l);
    dlock_client_close(a);
    assert_int_equal(test_service_stop(&cluster), 0);
}

/* A hold granted with another request queued behind it is not kept: its
 * release is a real one and the request behind is granted. */
static void a_hold_granted_while_others_wait_is_not_kept(void **state)
{
    (void)state;
    dlock_client *h = open_ok(30000), *c = open_ok(30000), *a = open_caching(0);
    dlock_lock *lh = test_lock_named(h, "etcd-queued-grant");
    assert_int_equal(dlock_acquire(lh, 0), DLOCK_OK);
    struct thread_waiter wa = THREAD_WAITER(test_lock_named(a, "etcd-queued-grant"), 20000, 0);
    struct thread_waiter wc = THREAD_WAITER(test_lock_named(c, "etcd-queued-grant"), 20000, 0);
    pthread_t ta, tc;
    assert_int_equal(pthread_create(&ta, NULL, thread_waiter_run, &wa), 0);
    int64_t t0 = now_ms();
    while (keys_of("etcd-queued-grant") < 2 && now_ms() - t0 < 5000)
        sleep_ms(10);
    assert_int_equal(pthread_create(&tc, NULL, thread_waiter_run, &wc), 0); /* behind a */
    while (keys_of("etcd-queued-grant") < 3 && now_ms() - t0 < 5000)
        sleep_ms(10);
    assert_int_equal(keys_of("etcd-queued-grant"), 3);
    assert_int_equal(dlock_release(lh), DLOCK_OK);
    pthread_join(ta, NULL); /* a is granted and releases at once */
    pthread_join(tc, NULL);
    test_queued_grant_case_end(h, lh, a, wa.lock, wa.rc, c, wc.lock, wc.rc);
}

/* The keeper's watch reaches the server 300 ms after it was sent, and a
 * try comes in between: the watch starts at the granting read's revision,
 * so etcd sends it that try's key from its history, and the hold is given
 * back long before the idle limit. */
static void a_request_made_before_the_watch_is_in_place_is_heard(void **state)
{
    (void)state;
    int port;
    struct fault_proxy *proxy = fault_proxy_start(server.port, &port);
    assert_non_null(proxy);
    dlock_client *a = open_caching(port);
    dlock_lock *la = test_lock_named(a, "etcd-kept-early");
    fault_proxy_set(proxy, FAULT_DELAY, 300);
    /* The watch is sent after this grant. */
    test_cycle_keeps(a, la, 1);
    dlock_client *b = open_ok(30000);
    dlock_lock *lb = test_lock_named(b, "etcd-kept-early");
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    test_gives_back_soon(a);
    assert_int_equal(dlock_acquire(lb, slack_ms(5000)), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    dlock_lock_free(lb);
    dlock_client_close(b);
    dlock_lock_free(la);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

/* The keeper's connections cut: a request could have come unseen while
 * its watch was down, so the kept hold is given back though nobody asked. */
static void a_lost_connection_gives_a_kept_hold_back(void **state)
{
    (void)state;
    int port;
    struct fault_proxy *proxy = fault_proxy_start(server.port, &port);
    assert_non_null(proxy);
    dlock_client *a = open_caching(port);
    dlock_lock *l = test_lock_named(a, "etcd-kept-cut");
    test_cycle_keeps(a, l, 1);
    sleep_ms(200); /* the watch in place */
    assert_int_equal(test_client_metric(a, "dlock_cache_givebacks_total"), 0);
    fault_proxy_set(proxy, FAULT_RESET, 0);
    sleep_ms(100);
    fault_proxy_set(proxy, FAULT_PASS, 0);
    test_gives_back_soon(a);
    dlock_lock_free(l);
    dlock_client_close(a);
    fault_proxy_stop(proxy);
}

int main(void)
{
    if (getenv("CMOCKA_FILTER")) /* one case by name */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    if (test_service_start(&server) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] etcd did not start\n");
        return 1;
    }
    /* etcd's lessor looks for expired leases every 500 ms: a killed
     * holder's key goes up to that long after its TTL. */
    static const struct conformance_target target = { "etcd conformance", conformance_config, delete_holder_key,
                                                      NULL, 500, CONFORMANCE_LISTS, 1000,
                                                      CONFORMANCE_NATIVE_ATTEMPTS | CONFORMANCE_NATIVE_RELEASES };
    int failed = conformance_run(&target);
    const struct CMUnitTest particular[] = {
        cmocka_unit_test(waiters_are_granted_in_arrival_order),
        cmocka_unit_test(the_fence_is_the_keys_create_revision),
        cmocka_unit_test(names_with_slashes_stay_apart),
        cmocka_unit_test(a_name_longer_than_a_page_is_listed_once_whole),
        cmocka_unit_test(many_holds_renew_on_one_lease),
        cmocka_unit_test(a_grant_on_an_old_lease_outlives_its_validity),
        cmocka_unit_test(a_grant_on_a_fresh_lease_sends_no_keepalive),
        cmocka_unit_test(a_waiter_on_a_fresh_lease_sends_no_keepalive_a_slice),
        cmocka_unit_test(a_waiter_keeps_its_place_through_waits_longer_than_its_lease),
        cmocka_unit_test(a_queued_waiter_looks_again_without_a_write),
        cmocka_unit_test(a_waiter_whose_key_went_queues_anew),
        cmocka_unit_test(a_release_before_the_watch_is_created_is_seen),
        cmocka_unit_test(a_downgraded_key_keeps_its_place_and_shows_as_shared),
        cmocka_unit_test(a_downgrade_while_a_reader_queues_is_seen),
        cmocka_unit_test(a_release_that_gets_no_answer_is_deleted_later),
        cmocka_unit_test(a_waiter_that_gives_up_without_an_answer_leaves_no_key),
        cmocka_unit_test(a_retry_that_gets_no_answer_keeps_the_key_remembered),
        cmocka_unit_test(partition_past_the_lease),
        cmocka_unit_test(native_attempt_whose_answer_is_lost_holds_once),
        cmocka_unit_test(native_attempt_without_an_answer_ends_at_its_deadline),
        cmocka_unit_test(native_attempt_on_a_dead_idle_connection_is_sent_again),
        cmocka_unit_test(native_release_without_an_answer_ends_at_its_deadline),
        cmocka_unit_test(native_release_on_a_dead_idle_connection_is_sent_again),
        cmocka_unit_test(a_hold_granted_while_others_wait_is_not_kept),
        cmocka_unit_test(a_request_made_before_the_watch_is_in_place_is_heard),
        cmocka_unit_test(a_lost_connection_gives_a_kept_hold_back),
        cmocka_unit_test(bad_settings_are_config_errors),
        cmocka_unit_test(credentials_in_an_endpoint_url_are_never_shown),
        cmocka_unit_test(unreachable_cluster_is_a_clear_error),
        cmocka_unit_test(tls_with_the_servers_ca),
        cmocka_unit_test(a_dead_endpoint_is_followed_within_the_call),
        cmocka_unit_test(holds_survive_the_leader_being_killed),
        cmocka_unit_test(a_watch_on_a_member_without_a_leader_ends),
        cmocka_unit_test(authentication_with_a_least_privilege_user), /* last: auth stays on */
    };
    failed += cmocka_run_group_tests_name("etcd", particular, NULL, NULL);
    /* A case that fails stops where it failed: the servers it started
     * are stopped here (stopping one twice does nothing). */
    failed += test_service_stop(&cluster) != 0;
    failed += test_service_stop(&tls_server) != 0;
    if (test_service_stop(&server) != 0) { /* scripts/bench.sh stops etcd the same way */
        printf("[  FAILED  ] stopping etcd\n");
        failed++;
    }
    return failed ? 1 : 0;
}
