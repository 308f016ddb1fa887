/* tests/conformance/conformance_waiting.c - how waiters are woken and in
 * what order, counted rather than timed where it can be: a backend that
 * claims DLOCK_CAP_NATIVE_WAIT wakes one waiter per release (the others
 * make no attempt meanwhile), one that claims DLOCK_CAP_FAIR grants in
 * arrival order (and any other must refuse DLOCK_LOCK_FAIR), and neither a
 * waiter that is cancelled nor one that dies holds up the line behind it
 * past the bound the backend documents. Part of the conformance suite
 * (conformance.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "conformance.h"
#include "../support/test_client.h"
#include "../support/test_time.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const struct conformance_target *target;

enum { LEASE_MS = 30000, WAITERS = 4 };
/* Where waiting is native, a retry cap far above anything the cases wait
 * for, so that only a wake-up explains a waiter's attempt; where waiters
 * poll, a short one, so that the hand-off bound means something. */
enum { NATIVE_RETRY_CAP_MS = 10000, POLL_RETRY_CAP_MS = 200 };
static int retry_cap_ms;
/* A waiter's budget: far longer than any case, short enough that a case
 * that failed while one waits does not hang on it. */
enum { WAIT_BUDGET_MS = 20000 };

/* The backend's capabilities; sets the retry cap the case's clients use. */
static unsigned capabilities(void)
{
    dlock_client *c = conformance_open_client(LEASE_MS, POLL_RETRY_CAP_MS);
    unsigned caps = dlock_client_capabilities(c);
    dlock_client_close(c);
    retry_cap_ms = (caps & DLOCK_CAP_NATIVE_WAIT) ? NATIVE_RETRY_CAP_MS : POLL_RETRY_CAP_MS;
    return caps;
}

/* A handle of NAME, fair where the backend claims fair mode (the order the
 * cases check is then the one it promises). */
static dlock_lock *line_lock(dlock_client *c, const char *name, bool fair)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = fair ? DLOCK_LOCK_FAIR : 0;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("lock_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return l;
}

/* One waiting client on its own thread; each grant takes the next number
 * and holds for hold_ms. The cases keep them in static storage, so that a
 * thread a failed case leaves behind never writes into a stack frame that
 * is gone. */
struct line_waiter {
    dlock_client *client;
    dlock_lock *lock;
    int hold_ms;
    int *grants;
    int rc;     /* 99 while waiting; stored atomically */
    int order;  /* the waiter's place among the grants, -1 if none */
};

static void *line_waiter_main(void *arg)
{
    struct line_waiter *w = arg;
    int rc = dlock_acquire(w->lock, WAIT_BUDGET_MS);
    if (rc == DLOCK_OK) {
        __atomic_store_n(&w->order, __atomic_fetch_add(w->grants, 1, __ATOMIC_SEQ_CST), __ATOMIC_SEQ_CST);
        sleep_ms(w->hold_ms);
        dlock_release(w->lock);
    }
    __atomic_store_n(&w->rc, rc, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Starts w waiting for NAME and returns once its client has had a busy
 * answer, so that it is in the line before the next one arrives. */
static void start_waiting(struct line_waiter *w, pthread_t *t, const char *name, bool fair, int hold_ms, int *grants)
{
    *w = (struct line_waiter){ conformance_open_client(LEASE_MS, retry_cap_ms), NULL, hold_ms, grants, 99, -1 };
    w->lock = line_lock(w->client, name, fair);
    pthread_create(t, NULL, line_waiter_main, w);
    int64_t t0 = now_ms();
    while (test_client_metric(w->client, "dlock_busy_total") < 1) {
        if (now_ms() - t0 > slack_ms(5000))
            fail_msg("a waiter for '%s' had no busy answer within %lld ms", name, (long long)slack_ms(5000));
        sleep_ms(2);
    }
    sleep_ms(10); /* past the busy answer, into its wait */
}

static void finish_waiting(struct line_waiter *w, pthread_t t)
{
    pthread_join(t, NULL);
    dlock_lock_free(w->lock);
    dlock_client_close(w->client);
}

/* A line of WAITERS waiters for NAME, each in it before the next comes. */
static int line_grants;
static struct line_waiter line[WAITERS];
static pthread_t line_threads[WAITERS];

static void line_start(const char *name, bool fair, int hold_ms)
{
    line_grants = 0;
    for (int i = 0; i < WAITERS; i++)
        start_waiting(&line[i], &line_threads[i], name, fair, (int)slack_ms(hold_ms), &line_grants);
}

/* Waits for the line's waiters; each must have been granted. */
static void line_finish(void)
{
    for (int i = 0; i < WAITERS; i++)
        finish_waiting(&line[i], line_threads[i]);
    for (int i = 0; i < WAITERS; i++)
        assert_int_equal(line[i].rc, DLOCK_OK);
}

/* Waiters that came one after another are granted in that order. */
static void fair_mode_grants_in_arrival_order(void **state)
{
    (void)state;
    capabilities();
    dlock_client *a = conformance_open_client(LEASE_MS, retry_cap_ms);
    if (!(dlock_client_capabilities(a) & DLOCK_CAP_FAIR)) {
        dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
        o.flags = DLOCK_LOCK_FAIR;
        dlock_lock *l = NULL;
        assert_int_equal(dlock_lock_new(a, "conf-fair", 9, &o, &l), DLOCK_ENOTSUP);
        dlock_client_close(a);
        return;
    }
    dlock_lock *la = line_lock(a, "conf-fair", true);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    line_start("conf-fair", true, 20);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    line_finish();
    for (int i = 0; i < WAITERS; i++)
        if (line[i].order != i)
            fail_msg("waiter %d (in arrival order) was granted as number %d", i, line[i].order);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* A release wakes one waiter: while the next holder holds, the others make
 * no attempt, where a herd makes one each. A waiter also tries again when
 * its own wait times out (on the redis backends after the busy hint, at
 * most 2.5 s), and on a slow machine (sanitizers) that can fall into the
 * window by chance: so the window is short, and one such waiter is let
 * pass; two or more of the three are a herd. */
static void a_release_wakes_one_waiter(void **state)
{
    (void)state;
    unsigned caps = capabilities();
    if (!(caps & DLOCK_CAP_NATIVE_WAIT))
        skip(); /* waiters poll: there is no wake-up to count */
    bool fair = (caps & DLOCK_CAP_FAIR) != 0;
    dlock_client *a = conformance_open_client(LEASE_MS, retry_cap_ms);
    dlock_lock *la = line_lock(a, "conf-wake-one", fair);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    line_start("conf-wake-one", fair, 400);
    long long before[WAITERS];
    for (int i = 0; i < WAITERS; i++)
        before[i] = test_client_metric(line[i].client, "dlock_acquire_attempts_total");
    assert_int_equal(dlock_release(la), DLOCK_OK);
    int64_t t0 = now_ms();
    while (__atomic_load_n(&line_grants, __ATOMIC_SEQ_CST) < 1 && now_ms() - t0 < 5000)
        sleep_ms(1);
    bool granted = __atomic_load_n(&line_grants, __ATOMIC_SEQ_CST) >= 1;
    sleep_ms(slack_ms(50)); /* the first is still holding (400 ms) */
    int woken = 0, extra = 0;
    for (int i = 0; i < WAITERS; i++) {
        long long made = test_client_metric(line[i].client, "dlock_acquire_attempts_total") - before[i];
        if (made > 0 && __atomic_load_n(&line[i].order, __ATOMIC_SEQ_CST) != 0) {
            woken++;
            extra += (int)made;
        }
    }
    line_finish();
    if (!granted)
        fail_msg("no waiter was granted within 5 s of the release");
    if (woken > 1)
        fail_msg("one release woke %d waiters besides the one granted (%d attempts)", woken, extra);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* The next waiter's longest wait after the release, in ms: at once when
 * woken, within the backoff cap when polling. */
static int64_t handoff_bound(unsigned caps)
{
    return slack_ms((caps & DLOCK_CAP_NATIVE_WAIT) ? 250 : POLL_RETRY_CAP_MS + 150);
}

/* A waiter that gives up (cancelled) leaves the line: the one behind it is
 * granted at the release. */
static void a_cancelled_waiter_does_not_stall_the_line(void **state)
{
    (void)state;
    unsigned caps = capabilities();
    bool fair = (caps & DLOCK_CAP_FAIR) != 0;
    dlock_client *a = conformance_open_client(LEASE_MS, retry_cap_ms);
    dlock_lock *la = line_lock(a, "conf-cancel-line", fair);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    static int grants;
    static struct line_waiter first, second;
    static pthread_t t1, t2;
    grants = 0;
    start_waiting(&first, &t1, "conf-cancel-line", fair, 20, &grants);
    start_waiting(&second, &t2, "conf-cancel-line", fair, 20, &grants);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_cancel(first.lock), DLOCK_OK);
    pthread_join(t1, NULL);
    assert_int_equal(first.rc, DLOCK_ECANCELLED);
    if (now_ms() - t0 > slack_ms(500))
        fail_msg("the cancel took %lld ms", (long long)(now_ms() - t0));
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    while (__atomic_load_n(&grants, __ATOMIC_SEQ_CST) < 1 && now_ms() - released_at < 10000)
        sleep_ms(1);
    int64_t took = now_ms() - released_at;
    finish_waiting(&second, t2);
    assert_int_equal(second.rc, DLOCK_OK);
    if (took > handoff_bound(caps))
        fail_msg("the waiter behind a cancelled one was granted %lld ms after the release (bound %lld)",
                 (long long)took, (long long)handoff_bound(caps));
    dlock_lock_free(first.lock);
    dlock_client_close(first.client);
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* A waiter process killed while it waits holds up the one behind it by at
 * most the backend's documented bound (target->dead_waiter_ms; the dead
 * waiter's client had a 1000 ms lease, which bounds it where its place in
 * the line lives on its session or lease). */
static void a_killed_waiter_does_not_stall_the_line(void **state)
{
    (void)state;
    unsigned caps = capabilities();
    bool fair = (caps & DLOCK_CAP_FAIR) != 0;
    /* Forked before this process has threads of ours; it starts waiting
     * when told, and says so once it is about to. */
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(go[1]);
        close(ready[0]);
        char ch;
        if (read(go[0], &ch, 1) != 1)
            _exit(2);
        dlock_client *c = conformance_open_client(1000, retry_cap_ms);
        dlock_lock *l = line_lock(c, "conf-dead-waiter", fair);
        if (dlock_acquire(l, 0) != DLOCK_EBUSY)
            _exit(3);
        if (write(ready[1], "R", 1) != 1)
            _exit(4);
        dlock_acquire(l, -1);
        _exit(0);
    }
    close(go[0]);
    close(ready[1]);
    dlock_client *a = conformance_open_client(LEASE_MS, retry_cap_ms);
    dlock_lock *la = line_lock(a, "conf-dead-waiter", fair);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(write(go[1], "G", 1), 1);
    close(go[1]);
    char ch;
    assert_int_equal(read(ready[0], &ch, 1), 1);
    close(ready[0]);
    sleep_ms(100); /* into its wait, first in the line */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    static int grants;
    static struct line_waiter next;
    static pthread_t t;
    grants = 0;
    start_waiting(&next, &t, "conf-dead-waiter", fair, 20, &grants);
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    int64_t bound = target->dead_waiter_ms + handoff_bound(caps) + target->expiry_slack_ms;
    while (__atomic_load_n(&grants, __ATOMIC_SEQ_CST) < 1 && now_ms() - released_at < bound + 5000)
        sleep_ms(1);
    int64_t took = now_ms() - released_at;
    finish_waiting(&next, t);
    assert_int_equal(next.rc, DLOCK_OK);
    if (took > bound)
        fail_msg("the waiter behind a killed one was granted %lld ms after the release (bound %lld)",
                 (long long)took, (long long)bound);
    dlock_lock_free(la);
    dlock_client_close(a);
}

int conformance_run_waiting(const struct conformance_target *t)
{
    target = t;
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup(fair_mode_grants_in_arrival_order, conformance_before_each),
        cmocka_unit_test_setup(a_release_wakes_one_waiter, conformance_before_each),
        cmocka_unit_test_setup(a_cancelled_waiter_does_not_stall_the_line, conformance_before_each),
        cmocka_unit_test_setup(a_killed_waiter_does_not_stall_the_line, conformance_before_each),
    };
    char group[128];
    snprintf(group, sizeof group, "%s: waiting", t->name);
    return _cmocka_run_group_tests(group, cases, sizeof cases / sizeof cases[0], NULL, conformance_group_teardown);
}
