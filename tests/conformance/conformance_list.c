/* tests/conformance/conformance_list.c tests/conformance/conformance_waiting.c - dlock_list() as every backend that
 * lists keeps it: known holds of each kind and a waiter come back with
 * their exact fields, an unused prefix lists nothing, paging one entry at a
 * time reports every name exactly once, and names with any bytes come back
 * byte for byte. A backend whose target does not say it lists must answer
 * DLOCK_ENOTSUP. Part of the conformance suite (conformance.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "conformance.h"
#include "../support/test_time.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct conformance_target *target;

#define MAX_SEEN 64

/* What a listing reported, copied out of the callbacks. */
struct seen_entry {
    char name[DLOCK_NAME_MAX + 1];
    size_t name_len;
    unsigned kind, permits;
    int64_t holder_count, lease_left_ms, waiters;
    size_t n_holders;
    char owner0[128];
    uint64_t fence, holder0_fence;
};

struct seen {
    struct seen_entry e[MAX_SEEN];
    size_t n;
    size_t page_max; /* the most entries one page had */
    size_t in_page;
};

static int collect(const dlock_list_entry *e, void *arg)
{
    struct seen *s = arg;
    assert_true(s->n < MAX_SEEN);
    struct seen_entry *c = &s->e[s->n++];
    memset(c, 0, sizeof *c);
    assert_true(e->name_len <= DLOCK_NAME_MAX);
    memcpy(c->name, e->name, e->name_len);
    assert_int_equal(e->name[e->name_len], 0);
    c->name_len = e->name_len;
    c->kind = e->kind;
    c->permits = e->permits;
    c->holder_count = e->holder_count;
    c->lease_left_ms = e->lease_left_ms;
    c->waiters = e->waiters;
    c->n_holders = e->n_holders;
    c->fence = e->fence;
    if (e->n_holders) {
        snprintf(c->owner0, sizeof c->owner0, "%s", e->holders[0].owner ? e->holders[0].owner : "");
        c->holder0_fence = e->holders[0].fence;
    }
    if (++s->in_page > s->page_max)
        s->page_max = s->in_page;
    return DLOCK_OK;
}

/* Lists every page under prefix with pages of limit entries into s. */
static void list_all(dlock_client *c, const char *prefix, size_t limit, struct seen *s)
{
    memset(s, 0, sizeof *s);
    char *cursor = NULL;
    for (int pages = 0;; pages++) {
        assert_true(pages < 100000); /* a cursor that never ends */
        char *next = NULL;
        s->in_page = 0;
        int rc = dlock_list(c, prefix, strlen(prefix), cursor, limit, collect, s, &next);
        if (rc != DLOCK_OK)
            fail_msg("dlock_list: %s: %s", dlock_strerror(rc), dlock_errmsg());
        free(cursor);
        cursor = next;
        if (!cursor)
            break;
    }
    assert_true(s->page_max <= limit);
}

static const struct seen_entry *find(const struct seen *s, const char *name, size_t len)
{
    const struct seen_entry *found = NULL;
    for (size_t i = 0; i < s->n; i++)
        if (s->e[i].name_len == len && memcmp(s->e[i].name, name, len) == 0) {
            if (found)
                fail_msg("'%.*s' was listed twice", (int)len, name);
            found = &s->e[i];
        }
    return found;
}

/* A prefix of this process and case, so that what other cases left behind
 * (a killed holder's lease that has not run out) is never counted. */
static void case_prefix(char *buf, size_t size, const char *what)
{
    snprintf(buf, size, "ls-%ld-%s/", (long)getpid(), what);
}

static dlock_lock *handle(dlock_client *c, const char *name, size_t len, unsigned mode, unsigned permits)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = mode;
    o.permits = permits;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, len, &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("lock_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return l;
}

static bool has_leases(dlock_client *c)
{
    return (dlock_client_capabilities(c) & DLOCK_CAP_SERVER_EXPIRY) != 0;
}

/* The lease left, as a backend with server leases must report it: within
 * the lease and not yet over. A backend without them, or one that cannot
 * read them (CONFORMANCE_LISTS_NO_LEASE_LEFT), reports -1. */
static void check_lease(dlock_client *c, int64_t left, int64_t lease_ms)
{
    if (has_leases(c) && !(target->lists & CONFORMANCE_LISTS_NO_LEASE_LEFT)) {
        if (left <= 0 || left > lease_ms)
            fail_msg("lease left %lld ms, not within (0, %lld]", (long long)left, (long long)lease_ms);
    } else {
        assert_int_equal(left, -1);
    }
}

struct waiter {
    dlock_lock *lock;
    int rc;
};

static void *wait_for(void *arg)
{
    struct waiter *w = arg;
    w->rc = dlock_acquire(w->lock, 20000);
    if (w->rc == DLOCK_OK)
        dlock_release(w->lock);
    return NULL;
}

/* ---- the cases ---------------------------------------------------------------------- */

/* An exclusive hold with a waiter, a shared name with two holders and a
 * semaphore of 3 with two: each is listed once, with its kind, holder
 * count, latest fence, lease and waiters. */
static void known_holds_are_listed_exactly(void **state)
{
    (void)state;
    const int64_t lease = 30000;
    char p[64], x[80], s[80], m[80];
    case_prefix(p, sizeof p, "kinds");
    snprintf(x, sizeof x, "%sexclusive", p);
    snprintf(s, sizeof s, "%sshared", p);
    snprintf(m, sizeof m, "%ssemaphore", p);
    dlock_client *a = conformance_open_client((int)lease, 100), *b = conformance_open_client((int)lease, 100);
    unsigned caps = dlock_client_capabilities(a);
    dlock_lock *lx = handle(a, x, strlen(x), DLOCK_MODE_EXCLUSIVE, 0);
    uint64_t fx = 0;
    assert_int_equal(dlock_acquire(lx, 0), DLOCK_OK);
    assert_int_equal(dlock_fence(lx, &fx), DLOCK_OK);
    struct waiter w = { handle(b, x, strlen(x), DLOCK_MODE_EXCLUSIVE, 0), -100 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for, &w), 0);
    dlock_lock *ls[2] = { NULL, NULL }, *lm[2] = { NULL, NULL };
    uint64_t fs = 0, fm = 0, f;
    for (int i = 0; i < 2 && (caps & DLOCK_CAP_SHARED); i++) {
        ls[i] = handle(i ? b : a, s, strlen(s), DLOCK_MODE_SHARED, 0);
        assert_int_equal(dlock_acquire(ls[i], 0), DLOCK_OK);
        assert_int_equal(dlock_fence(ls[i], &f), DLOCK_OK);
        fs = f > fs ? f : fs;
    }
    for (int i = 0; i < 2 && (caps & DLOCK_CAP_SEMAPHORE); i++) {
        lm[i] = handle(i ? b : a, m, strlen(m), DLOCK_MODE_SEMAPHORE, 3);
        assert_int_equal(dlock_acquire(lm[i], 0), DLOCK_OK);
        assert_int_equal(dlock_fence(lm[i], &f), DLOCK_OK);
        fm = f > fm ? f : fm;
    }
    /* The waiter registers itself on its own thread: look until it shows. */
    bool counts_waiters = !(target->lists & CONFORMANCE_LISTS_NO_WAITERS);
    int64_t one_waiter = counts_waiters ? 1 : -1, no_waiter = counts_waiters ? 0 : -1;
    struct seen seen;
    const struct seen_entry *ex = NULL;
    for (int64_t end = now_ms() + slack_ms(5000);;) {
        list_all(a, p, 100, &seen);
        ex = find(&seen, x, strlen(x));
        if ((ex && (ex->waiters >= 1 || !counts_waiters)) || now_ms() > end)
            break;
        usleep(20000);
    }
    assert_non_null(ex);
    assert_int_equal(ex->kind, DLOCK_MODE_EXCLUSIVE);
    assert_int_equal(ex->holder_count, 1);
    assert_int_equal(ex->fence, fx);
    assert_int_equal(ex->waiters, one_waiter);
    check_lease(a, ex->lease_left_ms, lease);
    assert_int_equal(ex->n_holders, 1);
    assert_true(ex->owner0[0] != 0);
    if (ex->holder0_fence)
        assert_int_equal(ex->holder0_fence, fx);
    size_t expected = 1;
    if (caps & DLOCK_CAP_SHARED) {
        const struct seen_entry *se = find(&seen, s, strlen(s));
        assert_non_null(se);
        assert_int_equal(se->kind, DLOCK_MODE_SHARED);
        assert_int_equal(se->holder_count, 2);
        assert_int_equal(se->fence, fs);
        assert_int_equal(se->waiters, no_waiter);
        check_lease(a, se->lease_left_ms, lease);
        expected++;
    }
    if (caps & DLOCK_CAP_SEMAPHORE) {
        const struct seen_entry *me = find(&seen, m, strlen(m));
        assert_non_null(me);
        assert_int_equal(me->kind, DLOCK_MODE_SEMAPHORE);
        assert_int_equal(me->permits, 3);
        assert_int_equal(me->holder_count, 2);
        assert_int_equal(me->fence, fm);
        assert_int_equal(me->waiters, no_waiter);
        check_lease(a, me->lease_left_ms, lease);
        expected++;
    }
    assert_int_equal(seen.n, expected);
    assert_int_equal(dlock_cancel(w.lock), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_ECANCELLED);
    for (int i = 0; i < 2; i++) {
        if (ls[i])
            assert_int_equal(dlock_release(ls[i]), DLOCK_OK);
        if (lm[i])
            assert_int_equal(dlock_release(lm[i]), DLOCK_OK);
        dlock_lock_free(ls[i]);
        dlock_lock_free(lm[i]);
    }
    assert_int_equal(dlock_release(lx), DLOCK_OK);
    dlock_lock_free(lx);
    dlock_lock_free(w.lock);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* Nothing held under a prefix: no entry, and the listing ends. A cursor
 * the backend did not make is refused. */
static void an_unused_prefix_lists_nothing(void **state)
{
    (void)state;
    char p[64];
    case_prefix(p, sizeof p, "empty");
    dlock_client *a = conformance_open_client(30000, 100);
    struct seen seen;
    list_all(a, p, 10, &seen);
    assert_int_equal(seen.n, 0);
    char *next = (char *)"untouched";
    assert_int_equal(dlock_list(a, p, strlen(p), "\x01 no cursor of ours", 10, collect, &seen, &next), DLOCK_EINVAL);
    assert_null(next);
    assert_int_equal(dlock_list(a, p, strlen(p), NULL, 0, collect, &seen, &next), DLOCK_EINVAL);
    dlock_client_close(a);
}

/* Pages of one entry each, until the cursor ends: every held name once. */
static void paging_one_at_a_time_reports_each_name_once(void **state)
{
    (void)state;
    enum { N = 7 };
    char p[64], names[N][80];
    case_prefix(p, sizeof p, "paging");
    dlock_client *a = conformance_open_client(30000, 100);
    dlock_lock *l[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "%sname-%d", p, i);
        l[i] = handle(a, names[i], strlen(names[i]), DLOCK_MODE_EXCLUSIVE, 0);
        assert_int_equal(dlock_acquire(l[i], 0), DLOCK_OK);
    }
    struct seen seen;
    list_all(a, p, 1, &seen);
    assert_int_equal(seen.n, N);
    for (int i = 0; i < N; i++)
        assert_non_null(find(&seen, names[i], strlen(names[i])));
    /* Released names are no longer listed. */
    for (int i = 0; i < N; i++) {
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
        dlock_lock_free(l[i]);
    }
    list_all(a, p, 1, &seen);
    assert_int_equal(seen.n, 0);
    dlock_client_close(a);
}

/* Braces, '%', quotes, a newline, control and non-UTF-8 bytes, and a name
 * of DLOCK_NAME_MAX bytes come back byte for byte. */
static void odd_names_come_back_exactly(void **state)
{
    (void)state;
    char p[64];
    case_prefix(p, sizeof p, "odd");
    const char *tails[] = { "{braces}", "%25 and %", "\"quoted\" 'too'", "new\nline", "\x01\x7f\xff\xfe*?[x]\\" };
    enum { T = sizeof tails / sizeof tails[0] };
    char names[T + 1][DLOCK_NAME_MAX + 1];
    size_t lens[T + 1];
    for (size_t i = 0; i < T; i++)
        lens[i] = (size_t)snprintf(names[i], sizeof names[i], "%s%s", p, tails[i]);
    lens[T] = DLOCK_NAME_MAX;
    memset(names[T], '}', DLOCK_NAME_MAX);
    memcpy(names[T], p, strlen(p));
    dlock_client *a = conformance_open_client(30000, 100);
    dlock_lock *l[T + 1];
    for (size_t i = 0; i <= T; i++) {
        l[i] = handle(a, names[i], lens[i], DLOCK_MODE_EXCLUSIVE, 0);
        assert_int_equal(dlock_acquire(l[i], 0), DLOCK_OK);
    }
    struct seen seen;
    list_all(a, p, 2, &seen);
    assert_int_equal(seen.n, T + 1);
    for (size_t i = 0; i <= T; i++)
        if (!find(&seen, names[i], lens[i]))
            fail_msg("name %zu was not listed as it is", i);
    for (size_t i = 0; i <= T; i++) {
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
        dlock_lock_free(l[i]);
    }
    dlock_client_close(a);
}

/* A backend that does not list says so. */
static void listing_is_not_supported(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100);
    struct seen seen;
    char *next = NULL;
    assert_int_equal(dlock_list(a, NULL, 0, NULL, 10, collect, &seen, &next), DLOCK_ENOTSUP);
    assert_null(next);
    assert_non_null(strstr(dlock_errmsg(), "list"));
    dlock_client_close(a);
}

int conformance_run_list(const struct conformance_target *t)
{
    target = t;
    char group[128];
    snprintf(group, sizeof group, "%s: listing", t->name);
    const struct CMUnitTest lists[] = {
        cmocka_unit_test_setup(known_holds_are_listed_exactly, conformance_before_each),
        cmocka_unit_test_setup(an_unused_prefix_lists_nothing, conformance_before_each),
        cmocka_unit_test_setup(paging_one_at_a_time_reports_each_name_once, conformance_before_each),
        cmocka_unit_test_setup(odd_names_come_back_exactly, conformance_before_each),
    };
    const struct CMUnitTest does_not[] = {
        cmocka_unit_test_setup(listing_is_not_supported, conformance_before_each),
    };
    if (t->lists)
        return _cmocka_run_group_tests(group, lists, sizeof lists / sizeof lists[0], NULL, conformance_group_teardown);
    return _cmocka_run_group_tests(group, does_not, 1, NULL, conformance_group_teardown);
}
