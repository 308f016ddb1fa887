/* tests/conformance/conformance.c - see conformance.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "conformance.h"
#include "../support/test_client.h"
#include "../support/test_time.h"

#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const struct conformance_target *target;

dlock_client *conformance_open_client(int lease_ms, int retry_cap_ms)
{
    char text[2048];
    target->config(text, sizeof text, lease_ms, retry_cap_ms);
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("%s: open: %s: %s", target->name, dlock_strerror(rc), dlock_errmsg());
    return c;
}

static dlock_client *open_client(int lease_ms, int retry_cap_ms)
{
    return conformance_open_client(lease_ms, retry_cap_ms);
}

static dlock_lock *lock_of(dlock_client *c, const char *name, size_t len, int64_t lease_ms, dlock_lost_fn on_lost,
                           void *arg)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.on_lost = on_lost;
    o.on_lost_arg = arg;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, len, &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("lock_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return l;
}

static dlock_lock *named(dlock_client *c, const char *name)
{
    return lock_of(c, name, strlen(name), 0, NULL, NULL);
}

/* Children a case forked that hold a lock: a case that fails (or crashes)
 * before it kills its child leaves it here, and the next case kills it, so
 * no holder outlives its case (nor keeps the test's output open). */
static pid_t children[16];

void conformance_child_remember(pid_t pid)
{
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (!children[i]) {
            children[i] = pid;
            return;
        }
}

void conformance_child_kill(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (children[i] == pid)
            children[i] = 0;
}

int conformance_group_teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (children[i])
            conformance_child_kill(children[i]);
    return 0;
}

int conformance_before_each(void **state)
{
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (children[i])
            conformance_child_kill(children[i]);
    (void)state;
    if (target->reset)
        target->reset();
    return 0;
}

/* ---- the cases ---------------------------------------------------------------------- */

static void one_try_is_busy_while_held(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000, 100), *b = open_client(30000, 100);
    dlock_lock *la = named(a, "conf-busy"), *lb = named(b, "conf-busy");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void wait_timeout_is_honoured_within_50_ms(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000, 100), *b = open_client(30000, 100);
    dlock_lock *la = named(a, "conf-timeout"), *lb = named(b, "conf-timeout");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    for (int wait = 100; wait <= 300; wait += 200) {
        int64_t t0 = now_ms();
        assert_int_equal(dlock_acquire(lb, wait), DLOCK_ETIMEDOUT);
        int64_t took = now_ms() - t0;
        if (took < wait || took > wait + slack_ms(50))
            fail_msg("a %d ms wait took %lld ms", wait, (long long)took);
    }
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

struct waiter {
    dlock_lock *lock;
    int64_t wait_ms;
    int rc;
    int64_t done_at;
    int release_rc;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    int rc = dlock_acquire(w->lock, w->wait_ms);
    w->done_at = now_ms();
    /* A hold belongs to its thread: this one gives it back. */
    w->release_rc = rc == DLOCK_OK ? dlock_release(w->lock) : DLOCK_OK;
    __atomic_store_n(&w->rc, rc, __ATOMIC_SEQ_CST); /* the main thread looks before joining */
    return NULL;
}

static void wait_forever_ends_with_the_release(void **state)
{
    (void)state;
    /* Without native waiting the waiter polls: a short backoff cap keeps
     * the bound below meaningful. */
    dlock_client *a = open_client(30000, 200);
    bool native = (dlock_client_capabilities(a) & DLOCK_CAP_NATIVE_WAIT) != 0;
    dlock_client *b = open_client(30000, native ? 5000 : 200);
    dlock_lock *la = named(a, "conf-forever"), *lb = named(b, "conf-forever");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct waiter w = { .lock = lb, .wait_ms = -1, .rc = 99 };
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    sleep_ms(300);
    assert_int_equal(__atomic_load_n(&w.rc, __ATOMIC_SEQ_CST), 99); /* still waiting */
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    /* A native wait is woken at once; polling within the backoff cap. */
    int64_t bound = native ? slack_ms(100) : 200 + slack_ms(100);
    if (w.done_at - released_at > bound)
        fail_msg("granted %lld ms after the release (bound %lld)", (long long)(w.done_at - released_at),
                 (long long)bound);
    assert_int_equal(w.release_rc, DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void cancel_from_another_thread(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000, 200), *b = open_client(30000, 200);
    dlock_lock *la = named(a, "conf-cancel"), *lb = named(b, "conf-cancel");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct waiter w = { .lock = lb, .wait_ms = -1, .rc = 99 };
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    sleep_ms(200);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_cancel(lb), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_ECANCELLED);
    assert_true(w.done_at - t0 < slack_ms(100));
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void reentry_is_counted(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000, 100), *b = open_client(30000, 100);
    dlock_lock *l = named(a, "conf-reentry"), *other = named(b, "conf-reentry");
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(dlock_hold_count(l), i);
    }
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_acquire(other, 0), DLOCK_EBUSY); /* one hold left */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_acquire(other, 0), DLOCK_OK);
    assert_int_equal(dlock_release(other), DLOCK_OK);
    dlock_lock_free(l);
    dlock_lock_free(other);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void release_by_a_non_owner_changes_nothing(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000, 100), *b = open_client(30000, 100);
    dlock_lock *la = named(a, "conf-owner"), *lb = named(b, "conf-owner");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_hold_count(la), 1);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void explicit_lease_runs_out(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000, 100), *b = open_client(30000, 100);
    dlock_lock *la = lock_of(a, "conf-lease", 10, 300, NULL, NULL), *lb = named(b, "conf-lease");
    /* The clock starts before the lease does: a pause after the grant
     * must not make the takeover look early. */
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 3000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    /* Late by at most a retry pause and the backend's expiry lag, widened
     * for the sanitizer builds' slower steps. */
    if (took < 200 || took > 300 + slack_ms(150) + target->expiry_slack_ms)
        fail_msg("a 300 ms lease was taken over after %lld ms", (long long)took);
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
    /* The lease is widened with the builds' slack: what is checked is the
     * renewal, not that a loaded machine never stalls for 2/3 of a lease. */
    int lease_ms = (int)slack_ms(300);
    dlock_client *a = open_client(lease_ms, 100), *b = open_client(lease_ms, 100);
    dlock_lock *la = named(a, "conf-watchdog"), *lb = named(b, "conf-watchdog");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    if (!(dlock_client_capabilities(a) & DLOCK_CAP_RENEW)) {
        assert_int_equal(dlock_renew(la), DLOCK_ENOTSUP);
    } else {
        sleep_ms(3 * lease_ms + 100);
        assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
        assert_true(dlock_validity_ms(la) > 0);
        assert_int_equal(dlock_renew(la), DLOCK_OK);
    }
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static int lost_calls;


static void lost_hold_is_reported_once(void **state)
{
    (void)state;
    __atomic_store_n(&lost_calls, 0, __ATOMIC_SEQ_CST);
    if (!target->break_hold) {
        /* Nothing outside can take this backend's hold (the local kernel
         * lock): lose it the one way there is, an explicit lease. */
        dlock_client *a = open_client(30000, 100);
        dlock_lock *l = lock_of(a, "conf-lost", 9, 200, test_count_loss, &lost_calls);
        int64_t t0 = now_ms(); /* before the lease starts, as above */
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 2000)
            sleep_ms(10);
        int64_t took = now_ms() - t0;
        if (took < 150 || took > 200 + slack_ms(150))
            fail_msg("on_lost came %lld ms into a 200 ms lease", (long long)took);
        sleep_ms(300);
        assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
        assert_int_equal(dlock_release(l), DLOCK_ELOST);
        dlock_lock_free(l);
        dlock_client_close(a);
        return;
    }
    dlock_client *a = open_client(600, 100);
    dlock_lock *l = lock_of(a, "conf-lost", 9, 0, test_count_loss, &lost_calls);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    target->break_hold("conf-lost");
    /* The watchdog renews at lease/3: the loss shows within one interval
     * (and a round trip), and on_lost fires once, not per renewal. */
    int64_t t0 = now_ms();
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 2000)
        sleep_ms(10);
    int64_t took = now_ms() - t0;
    if (took > 200 + slack_ms(250))
        fail_msg("on_lost came %lld ms after the hold vanished", (long long)took);
    sleep_ms(700);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    assert_int_equal(dlock_validity_ms(l), DLOCK_ELOST);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* An operator's break (dlock_break) of a held name: the holder learns it
 * at its next renewal, the name is free at once, the next grant's fence is
 * above the old holder's (so a resource that keeps the highest token seen
 * refuses the old holder's late write once the new one wrote), and a
 * second break finds nothing. A backend that cannot do it safely says
 * why. */
static void a_broken_hold_is_lost_and_fenced_out(void **state)
{
    (void)state;
    __atomic_store_n(&lost_calls, 0, __ATOMIC_SEQ_CST);
    dlock_client *a = open_client(600, 100), *op = open_client(30000, 100), *b = open_client(30000, 100);
    dlock_lock *la = lock_of(a, "conf-break", 10, 0, test_count_loss, &lost_calls);
    dlock_lock *lb = named(b, "conf-break");
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t fa = 0, fb = 0, after = 0;
    bool fenced = (dlock_client_capabilities(a) & DLOCK_CAP_FENCE) != 0;
    if (fenced)
        assert_int_equal(dlock_fence(la, &fa), DLOCK_OK);
    int broken = -1;
    int rc = dlock_break(op, "conf-break", 10, &broken, &after);
    if (rc == DLOCK_ENOTSUP) {
        assert_true(strlen(dlock_errmsg()) > 20);
        assert_int_equal(dlock_release(la), DLOCK_OK);
        goto out;
    }
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(broken, 1);
    assert_true(after == 0 || after > fa);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    if (fenced) {
        assert_int_equal(dlock_fence(lb, &fb), DLOCK_OK);
        assert_true(fb > fa && (after == 0 || fb > after));
        /* A resource behind the fence guard: the old holder wrote before
         * the break, the new one after it, then the old one's late write
         * comes and is refused. */
        uint64_t highest = 0;
        assert_int_equal(dlock_fence_admit(&highest, fa), DLOCK_OK);
        assert_int_equal(dlock_fence_admit(&highest, fb), DLOCK_OK);
        assert_int_equal(dlock_fence_admit(&highest, fa), DLOCK_ESTALE);
    }
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() - t0 < 3000)
        sleep_ms(10);
    if (now_ms() - t0 > 200 + slack_ms(250) + target->expiry_slack_ms)
        fail_msg("the broken holder learnt it %lld ms later", (long long)(now_ms() - t0));
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    assert_int_equal(dlock_validity_ms(la), DLOCK_ELOST);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    assert_int_equal(dlock_break(op, "conf-break", 10, &broken, NULL), DLOCK_OK);
    assert_int_equal(broken, 0);
out:
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(op);
    dlock_client_close(b);
}

static void fences_increase_across_holders(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000, 100), *b = open_client(30000, 100);
    dlock_lock *la = named(a, "conf-fence"), *lb = named(b, "conf-fence");
    if (!(dlock_client_capabilities(a) & DLOCK_CAP_FENCE)) {
        uint64_t f;
        assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
        assert_int_equal(dlock_fence(la, &f), DLOCK_ENOTSUP);
        assert_int_equal(dlock_release(la), DLOCK_OK);
    } else {
        uint64_t last = 0;
        for (int i = 0; i < 6; i++) {
            dlock_lock *l = i % 2 ? lb : la;
            uint64_t f = 0;
            assert_int_equal(dlock_acquire(l, 1000), DLOCK_OK);
            assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
            if (f <= last)
                fail_msg("fence %llu after %llu", (unsigned long long)f, (unsigned long long)last);
            last = f;
            assert_int_equal(dlock_release(l), DLOCK_OK);
        }
    }
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

void conformance_acquire_within_a_dead_lease(dlock_lock *l, const char *what)
{
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 10000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    /* Its last renewal gave it at most one lease (a session ends sooner). */
    if (took > 1000 + slack_ms(250) + target->expiry_slack_ms)
        fail_msg("%s hold came free after %lld ms", what, (long long)took);
    assert_int_equal(dlock_release(l), DLOCK_OK);
}

pid_t conformance_child_ready(int (*prepare)(const void *arg), const void *arg)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        int rc = prepare(arg);
        if (rc != 0)
            _exit(rc);
        if (write(p[1], "R", 1) != 1)
            _exit(4);
        pause();
        _exit(0);
    }
    close(p[1]);
    conformance_child_remember(pid);
    char ch;
    assert_int_equal(read(p[0], &ch, 1), 1);
    close(p[0]);
    return pid;
}

struct child_hold {
    const char *name;
    unsigned mode, permits;
};

/* In the child: its own client (lease 1 s) takes the name. */
static int hold_in_child(const void *arg)
{
    const struct child_hold *h = arg;
    char text[2048];
    target->config(text, sizeof text, 1000, 100);
    dlock_client *c = NULL;
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = h->mode;
    o.permits = h->permits;
    dlock_lock *l = NULL;
    if (dlock_client_open_string(&c, text) != DLOCK_OK ||
        dlock_lock_new(c, h->name, strlen(h->name), &o, &l) != DLOCK_OK || dlock_acquire(l, 2000) != DLOCK_OK)
        return 3;
    return 0;
}

pid_t conformance_child_holding(const char *name, unsigned mode, unsigned permits)
{
    const struct child_hold h = { name, mode, permits };
    return conformance_child_ready(hold_in_child, &h);
}

static void killed_holder_is_replaced_within_its_lease(void **state)
{
    (void)state;
    pid_t pid = conformance_child_holding("conf-victim", DLOCK_MODE_EXCLUSIVE, 0);
    dlock_client *b = open_client(1000, 100);
    dlock_lock *l = named(b, "conf-victim");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    conformance_child_kill(pid);
    conformance_acquire_within_a_dead_lease(l, "the killed holder's");
    dlock_lock_free(l);
    dlock_client_close(b);
}

static void names_up_to_the_cap_any_bytes(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000, 100), *b = open_client(30000, 100);
    /* Quotes, a semicolon, a backslash, SQL and path syntax, braces, UTF-8
     * and bytes that are not UTF-8: a name is bytes, nothing else. */
    static const char tricky[] = "it's; DROP TABLE x; -- \"q\" \\ ../{slot}%7B \xc3\xa9\xe6\x97\xa5 \xff\x01";
    char cap[DLOCK_NAME_MAX + 1];
    for (size_t i = 0; i < sizeof cap; i++)
        cap[i] = tricky[i % (sizeof tricky - 1)];
    const size_t lens[3] = { sizeof tricky - 1, DLOCK_NAME_MAX, 1 };
    for (int i = 0; i < 3; i++) {
        dlock_lock *la = lock_of(a, cap, lens[i], 0, NULL, NULL), *lb = lock_of(b, cap, lens[i], 0, NULL, NULL);
        assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
        assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
        assert_int_equal(dlock_release(la), DLOCK_OK);
        assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
        assert_int_equal(dlock_release(lb), DLOCK_OK);
        dlock_lock_free(la);
        dlock_lock_free(lb);
    }
    /* Names that differ only past the first bytes are different locks. */
    char other[DLOCK_NAME_MAX];
    memcpy(other, cap, DLOCK_NAME_MAX);
    other[DLOCK_NAME_MAX - 1] ^= 1;
    dlock_lock *l1 = lock_of(a, cap, DLOCK_NAME_MAX, 0, NULL, NULL), *l2 = lock_of(b, other, DLOCK_NAME_MAX, 0, NULL, NULL);
    assert_int_equal(dlock_acquire(l1, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(l2, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l1), DLOCK_OK);
    assert_int_equal(dlock_release(l2), DLOCK_OK);
    dlock_lock_free(l1);
    dlock_lock_free(l2);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(a, cap, DLOCK_NAME_MAX + 1, NULL, &l), DLOCK_EINVAL);
    assert_null(l);
    assert_int_equal(dlock_lock_new(a, cap, 0, NULL, &l), DLOCK_EINVAL);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* The process's open descriptors, each as "fd -> what it is", one per
 * line; *count is how many there are and *sockets how many are sockets. */
static char *fd_table(int *count, int *sockets)
{
    size_t size = 0;
    char *text = NULL;
    FILE *out = open_memstream(&text, &size);
    int n = 0, socks = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!out || !d)
        fail_msg("cannot list /proc/self/fd: %s", strerror(errno));
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || atoi(de->d_name) == dirfd(d))
            continue;
        char path[300], link[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
        ssize_t len = readlink(path, link, sizeof link - 1);
        link[len > 0 ? len : 0] = 0;
        fprintf(out, "  %s -> %s\n", de->d_name, link);
        n++;
        socks += strncmp(link, "socket:", 7) == 0;
    }
    closedir(d);
    fclose(out);
    *count = n;
    *sockets = socks;
    return text;
}

static void many_cycles_do_not_grow(void **state)
{
    (void)state;
    const char *env = getenv("DLOCK_TEST_CYCLES");
    int cycles = env ? atoi(env) : 10000;
    dlock_client *a = open_client(30000, 100);
    dlock_lock *l = named(a, "conf-cycles");
    for (int i = 0; i < 200; i++) { /* warm up: pools, prepared statements */
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    int fds, sockets;
    char *fds_before = fd_table(&fds, &sockets);
    size_t heap = mallinfo2().uordblks;
    for (int i = 0; i < cycles; i++) {
        int rc = dlock_acquire(l, 0);
        if (rc != DLOCK_OK)
            fail_msg("cycle %d: acquire: %s: %s", i, dlock_strerror(rc), dlock_errmsg());
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    /* Every descriptor but sockets must be the same. A client library may be
     * re-establishing a dropped connection (ZooKeeper's does so on its own
     * thread, between our calls) when either list is taken, so one socket
     * more or less is not a leak; a leak in the cycle would be thousands.
     * Such a reconnect also opens files for a moment (ZooKeeper's reads
     * /dev/urandom to shuffle its servers): a list that differs is taken
     * again a moment later, and only a difference that stays counts. */
    int fds_now, sockets_now;
    char *fds_after = fd_table(&fds_now, &sockets_now);
    for (int again = 0; again < 5 && (fds_now - sockets_now != fds - sockets || abs(sockets_now - sockets) > 1);
         again++) {
        free(fds_after);
        sleep_ms(100);
        fds_after = fd_table(&fds_now, &sockets_now);
    }
    if (fds_now - sockets_now != fds - sockets || abs(sockets_now - sockets) > 1)
        fail_msg("%d descriptors before the cycles, %d after:\nbefore:\n%safter:\n%s", fds, fds_now, fds_before,
                 fds_after);
    free(fds_before);
    free(fds_after);
    size_t grown = mallinfo2().uordblks - heap;
    if (mallinfo2().uordblks > heap && grown > 64 * 1024)
        fail_msg("the heap grew by %zu bytes over %d cycles", grown, cycles);
    dlock_lock_free(l);
    dlock_client_close(a);
}

/* The row of the capability table in libdlock(3) for the target: its
 * backend's name, and the mode for the SQL backends' two targets. */
static void man_row_label(dlock_client *c, char *out, size_t size)
{
    const char *mode = strstr(target->name, "session mode") ? " session mode"
                       : strstr(target->name, "lease mode") ? " lease mode"
                       : strstr(target->name, "cluster")    ? " cluster"
                                                             : "";
    snprintf(out, size, "%s%s", dlock_client_backend(c), mode);
}

static const struct {
    const char *word;
    unsigned bit;
} capability_words[] = {
    { "RENEW", DLOCK_CAP_RENEW },           { "FENCE", DLOCK_CAP_FENCE },
    { "FENCE_LINEARIZABLE", DLOCK_CAP_FENCE_LINEARIZABLE },
    { "NATIVE_WAIT", DLOCK_CAP_NATIVE_WAIT }, { "FAIR", DLOCK_CAP_FAIR },
    { "SERVER_EXPIRY", DLOCK_CAP_SERVER_EXPIRY }, { "MULTI_HOST", DLOCK_CAP_MULTI_HOST },
    { "SHARED", DLOCK_CAP_SHARED },         { "SEMAPHORE", DLOCK_CAP_SEMAPHORE },
    { "DOWNGRADE", DLOCK_CAP_DOWNGRADE },     { "ELECTION", DLOCK_CAP_ELECTION },
    { "IN_PROCESS", DLOCK_CAP_IN_PROCESS },   { "CACHE", DLOCK_CAP_CACHE },
};

/* The words of bits, in the table's order. */
static void capability_text(unsigned bits, char *out, size_t size)
{
    out[0] = 0;
    for (size_t i = 0; i < sizeof capability_words / sizeof capability_words[0]; i++)
        if (bits & capability_words[i].bit) {
            size_t used = strlen(out);
            snprintf(out + used, size - used, "%s%s", used ? " " : "", capability_words[i].word);
        }
}

/* libdlock(3)'s table of each backend's capabilities says what the client
 * reports: the table is read from the man page and compared with the bits,
 * so the two cannot drift apart again. */
static void the_man_page_lists_these_capabilities(void **state)
{
    (void)state;
    const char *src = getenv("DLOCK_TEST_SRCDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/../docs/libdlock.3", src ? src : "tests");
    FILE *f = fopen(path, "re");
    if (!f)
        fail_msg("cannot read %s (set DLOCK_TEST_SRCDIR)", path);
    dlock_client *c = open_client(30000, 100);
    char label[128], want[256];
    man_row_label(c, label, sizeof label);
    unsigned bits = dlock_client_capabilities(c);
    capability_text(bits, want, sizeof want);
    dlock_client_close(c);
    char line[1024], row[300];
    snprintf(row, sizeof row, ".B %s\n", label);
    bool in_table = false, found = false;
    unsigned listed = 0;
    while (fgets(line, sizeof line, f)) {
        if (strcmp(line, ".\\\" capability table\n") == 0) {
            in_table = true;
            continue;
        }
        if (strcmp(line, ".\\\" end of capability table\n") == 0)
            break;
        if (!in_table || strcmp(line, row) != 0)
            continue;
        if (!fgets(line, sizeof line, f))
            break;
        found = true;
        for (char *save = NULL, *w = strtok_r(line, " \n", &save); w; w = strtok_r(NULL, " \n", &save)) {
            size_t i = 0;
            while (i < sizeof capability_words / sizeof capability_words[0] && strcmp(capability_words[i].word, w) != 0)
                i++;
            if (i == sizeof capability_words / sizeof capability_words[0])
                fail_msg("libdlock(3), %s: '%s' is not a capability", label, w);
            listed |= capability_words[i].bit;
        }
        break;
    }
    fclose(f);
    /* A backend built outside the project (tests/modules) has no row: the
     * man page speaks only of the backends libdlock ships. */
    static const char *const shipped[] = { "local", "redis", "redlock", "zookeeper", "etcd", "postgres", "mysql" };
    bool ours = false;
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++)
        ours = ours || strncmp(label, shipped[i], strlen(shipped[i])) == 0;
    if (!ours) {
        if (found)
            fail_msg("libdlock(3)'s capability table has a row for '%s', which libdlock does not ship", label);
        return;
    }
    if (!found)
        fail_msg("libdlock(3)'s capability table has no row '%s'; it reports 0x%x:\n.B %s\n%s", label, bits, label,
                 want);
    if (listed != bits) {
        char have[256];
        capability_text(listed, have, sizeof have);
        fail_msg("libdlock(3) gives %s as %s; it reports 0x%x: %s", label, have, bits, want);
    }
}

int conformance_run(const struct conformance_target *t)
{
    target = t;
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup(one_try_is_busy_while_held, conformance_before_each),
        cmocka_unit_test_setup(wait_timeout_is_honoured_within_50_ms, conformance_before_each),
        cmocka_unit_test_setup(wait_forever_ends_with_the_release, conformance_before_each),
        cmocka_unit_test_setup(cancel_from_another_thread, conformance_before_each),
        cmocka_unit_test_setup(reentry_is_counted, conformance_before_each),
        cmocka_unit_test_setup(release_by_a_non_owner_changes_nothing, conformance_before_each),
        cmocka_unit_test_setup(explicit_lease_runs_out, conformance_before_each),
        cmocka_unit_test_setup(watchdog_keeps_a_hold_past_three_leases, conformance_before_each),
        cmocka_unit_test_setup(lost_hold_is_reported_once, conformance_before_each),
        cmocka_unit_test_setup(a_broken_hold_is_lost_and_fenced_out, conformance_before_each),
        cmocka_unit_test_setup(fences_increase_across_holders, conformance_before_each),
        cmocka_unit_test_setup(killed_holder_is_replaced_within_its_lease, conformance_before_each),
        cmocka_unit_test_setup(names_up_to_the_cap_any_bytes, conformance_before_each),
        cmocka_unit_test_setup(many_cycles_do_not_grow, conformance_before_each),
        cmocka_unit_test_setup(the_man_page_lists_these_capabilities, conformance_before_each),
    };
    int failed = _cmocka_run_group_tests(t->name, cases, sizeof cases / sizeof cases[0], NULL,
                                         conformance_group_teardown);
    return failed + conformance_run_shared(t) + conformance_run_kinds(t) + conformance_run_model(t) + conformance_run_list(t) + conformance_run_waiting(t) +
           conformance_run_async(t) + conformance_run_election(t) + conformance_run_cache(t);
}
