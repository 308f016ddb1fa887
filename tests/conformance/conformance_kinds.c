/* tests/conformance/conformance_kinds.c - one name asked for in two kinds.
 * Client A holds a name in one kind (exclusive, shared, a semaphore of 1 or
 * of 2 permits) and client B asks for it in every kind, trying once and
 * waiting. Two kinds that may hold together (shared with shared, a
 * semaphore of 2 with itself) are both granted; every other pair must
 * never be: B is answered DLOCK_EBUSY (try once) or DLOCK_ETIMEDOUT
 * (waiting), as behind any holder, or DLOCK_EINVAL, where the backend can
 * tell that the name is in use in a kind the request cannot join. Once A
 * lets go, B's waiting request in the same kind is granted, or refused
 * with DLOCK_EINVAL (a backend may keep a name's kind once it is a
 * semaphore). Part of the conformance suite (conformance.h). */
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
#include <string.h>

static const struct conformance_target *target;

/* What went wrong, one line per pair, so one run shows every bad pair. */
static char report[8192];

#define COMPLAIN(...)                                                                  \
    do {                                                                               \
        size_t used_ = strlen(report);                                                 \
        snprintf(report + used_, sizeof report - used_, __VA_ARGS__);                  \
        used_ = strlen(report);                                                        \
        snprintf(report + used_, sizeof report - used_, "\n");                         \
        goto out;                                                                      \
    } while (0)

struct kind {
    const char *label;
    unsigned mode;
    unsigned permits;
};

static const struct kind kinds[] = {
    { "x", DLOCK_MODE_EXCLUSIVE, 0 },
    { "s", DLOCK_MODE_SHARED, 0 },
    { "p1", DLOCK_MODE_SEMAPHORE, 1 },
    { "p2", DLOCK_MODE_SEMAPHORE, 2 },
};
enum { KINDS = sizeof kinds / sizeof kinds[0] };

/* Whether a holder of kind a and one of kind b may hold one name together. */
static bool may_hold_together(const struct kind *a, const struct kind *b)
{
    if (a->mode != b->mode || a->permits != b->permits)
        return false;
    return a->mode == DLOCK_MODE_SHARED || (a->mode == DLOCK_MODE_SEMAPHORE && a->permits >= 2);
}

static unsigned capability_of(const struct kind *k)
{
    return k->mode == DLOCK_MODE_SHARED ? DLOCK_CAP_SHARED : k->mode == DLOCK_MODE_SEMAPHORE ? DLOCK_CAP_SEMAPHORE : 0;
}

/* A handle of name in kind k; NULL when the backend lacks the kind's
 * capability, which it must then say with DLOCK_ENOTSUP. */
static dlock_lock *handle(dlock_client *c, const char *name, const struct kind *k)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = k->mode;
    o.permits = k->permits;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    unsigned cap = capability_of(k);
    if (cap && !(dlock_client_capabilities(c) & cap)) {
        assert_int_equal(rc, DLOCK_ENOTSUP);
        return NULL;
    }
    if (rc != DLOCK_OK)
        fail_msg("lock_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return l;
}

/* B's waiting request, in a thread of its own while A lets go (an
 * exclusive hold is the thread's: A must release on the case's thread). */
struct late_waiter {
    dlock_lock *lock;
    int64_t wait_ms;
    int rc;
    int release_rc;
    int64_t granted_at_us;
};

static void *wait_then_release(void *arg)
{
    struct late_waiter *w = arg;
    w->rc = dlock_acquire(w->lock, w->wait_ms);
    w->granted_at_us = now_us();
    if (w->rc == DLOCK_OK)
        w->release_rc = dlock_release(w->lock);
    return NULL; /* checked by the case's thread: cmocka's asserts belong there */
}

/* One ordered pair: A holds in kind a; B asks in kind b, once and then
 * waiting 300 ms; then B waits while A lets go after 200 ms. */
static void one_pair(const struct kind *a, const struct kind *b, int *tried)
{
    char name[64];
    snprintf(name, sizeof name, "kinds-%s-then-%s", a->label, b->label);
    dlock_client *ca = conformance_open_client(30000, 20), *cb = conformance_open_client(30000, 20);
    dlock_lock *la = handle(ca, name, a), *lb = la ? handle(cb, name, b) : NULL;
    if (!la || !lb)
        goto out;
    ++*tried;
    int rc = dlock_acquire(la, 0);
    if (rc != DLOCK_OK)
        COMPLAIN("%s: A's %s: %s: %s", name, a->label, dlock_strerror(rc), dlock_errmsg());
    bool together = may_hold_together(a, b);

    rc = dlock_acquire(lb, 0);
    if (together) {
        if (rc != DLOCK_OK)
            COMPLAIN("%s: B's %s beside A's %s: %s: %s", name, b->label, a->label, dlock_strerror(rc), dlock_errmsg());
        if ((rc = dlock_release(lb)) != DLOCK_OK)
            COMPLAIN("%s: B's release: %s", name, dlock_strerror(rc));
    } else if (rc == DLOCK_OK)
        COMPLAIN("%s: B was granted %s while A holds %s: the name is held twice", name, b->label, a->label);
    else if (rc != DLOCK_EBUSY && rc != DLOCK_EINVAL)
        COMPLAIN("%s: B's try-once: %s: %s (expected DLOCK_EBUSY or DLOCK_EINVAL)", name, dlock_strerror(rc),
                 dlock_errmsg());
    bool refused_as_kind = rc == DLOCK_EINVAL;

    rc = dlock_acquire(lb, 300);
    if (together) {
        if (rc != DLOCK_OK)
            COMPLAIN("%s: B's waiting %s: %s: %s", name, b->label, dlock_strerror(rc), dlock_errmsg());
        if ((rc = dlock_release(lb)) != DLOCK_OK)
            COMPLAIN("%s: B's release: %s", name, dlock_strerror(rc));
    } else if (rc == DLOCK_OK)
        COMPLAIN("%s: B waited and was granted %s while A holds %s: the name is held twice", name, b->label, a->label);
    else if (rc != DLOCK_ETIMEDOUT && rc != DLOCK_EINVAL)
        COMPLAIN("%s: B's wait: %s: %s (expected DLOCK_ETIMEDOUT or DLOCK_EINVAL)", name, dlock_strerror(rc),
                 dlock_errmsg());
    else if ((rc == DLOCK_EINVAL) != refused_as_kind)
        COMPLAIN("%s: B's try-once and B's wait disagree on whether %s may be asked beside %s", name, b->label,
                 a->label);

    /* A still holds, and nobody took its place meanwhile. */
    if (dlock_validity_ms(la) <= 0)
        COMPLAIN("%s: A lost its %s while B asked", name, a->label);

    /* B waits while A lets go: granted after A's release, or refused. */
    struct late_waiter w = { lb, slack_ms(5000), -1, DLOCK_OK, 0 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_then_release, &w), 0);
    sleep_ms(200);
    int64_t released_at = now_us();
    rc = dlock_release(la);
    pthread_join(t, NULL);
    if (rc != DLOCK_OK)
        COMPLAIN("%s: A's release of its %s: %s: %s", name, a->label, dlock_strerror(rc), dlock_errmsg());
    if (w.rc == DLOCK_OK) {
        if (!together && w.granted_at_us < released_at)
            COMPLAIN("%s: B's %s was granted before A let go of its %s", name, b->label, a->label);
        if (w.release_rc != DLOCK_OK)
            COMPLAIN("%s: B's release: %s", name, dlock_strerror(w.release_rc));
    } else if (w.rc != DLOCK_EINVAL)
        COMPLAIN("%s: B waiting through A's release of its %s: %s", name, a->label, dlock_strerror(w.rc));
out:
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(ca);
    dlock_client_close(cb);
}

/* Every ordered pair of kinds, on names of their own. */
static void every_ordered_pair_of_kinds(void **state)
{
    (void)state;
    int tried = 0;
    report[0] = 0;
    for (int i = 0; i < KINDS; i++)
        for (int j = 0; j < KINDS; j++)
            one_pair(&kinds[i], &kinds[j], &tried);
    if (report[0])
        fail_msg("%s", report);
    assert_true(tried >= 1); /* exclusive with exclusive, everywhere */
}

/* A semaphore request waits behind an exclusive hold that is downgraded:
 * the name is then held shared, which a permit may not join either. */
static void a_permit_waiting_through_a_downgrade_stays_out(void **state)
{
    (void)state;
    static const struct kind exclusive = { "x", DLOCK_MODE_EXCLUSIVE, 0 }, permit = { "p2", DLOCK_MODE_SEMAPHORE, 2 };
    dlock_client *ca = conformance_open_client(30000, 20), *cb = conformance_open_client(30000, 20);
    unsigned caps = dlock_client_capabilities(ca);
    dlock_lock *la = handle(ca, "kinds-downgrade-then-p2", &exclusive);
    dlock_lock *lb = handle(cb, "kinds-downgrade-then-p2", &permit); /* NULL, refused, without semaphores */
    if (!lb || !(caps & DLOCK_CAP_DOWNGRADE)) {
        assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
        if (!(caps & DLOCK_CAP_DOWNGRADE))
            assert_int_equal(dlock_downgrade(la), DLOCK_ENOTSUP);
        assert_int_equal(dlock_release(la), DLOCK_OK);
        dlock_lock_free(la);
        dlock_lock_free(lb);
        goto out;
    }
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct late_waiter w = { lb, slack_ms(5000), -1, DLOCK_OK, 0 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_then_release, &w), 0);
    sleep_ms(200); /* B waits behind the exclusive hold */
    assert_int_equal(dlock_downgrade(la), DLOCK_OK);
    sleep_ms(400); /* held shared: B must still be out */
    int64_t released_at = now_us();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    if (w.rc == DLOCK_OK && w.granted_at_us < released_at)
        fail_msg("a permit was granted beside the downgraded (shared) hold");
    if (w.rc != DLOCK_OK && w.rc != DLOCK_EINVAL)
        fail_msg("the permit request: %s", dlock_strerror(w.rc));
    dlock_lock_free(la);
    dlock_lock_free(lb);
out:
    dlock_client_close(ca);
    dlock_client_close(cb);
}

int conformance_run_kinds(const struct conformance_target *t)
{
    target = t;
    char group[128];
    snprintf(group, sizeof group, "%s: one name in two kinds", t->name);
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup(every_ordered_pair_of_kinds, conformance_before_each),
        cmocka_unit_test_setup(a_permit_waiting_through_a_downgrade_stays_out, conformance_before_each),
    };
    return _cmocka_run_group_tests(group, cases, sizeof cases / sizeof cases[0], NULL, conformance_group_teardown);
}
