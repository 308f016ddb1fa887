/* tests/conformance/conformance_shared.c - shared holds and semaphores, as
 * every backend that claims DLOCK_CAP_SHARED / DLOCK_CAP_SEMAPHORE keeps
 * them; a backend that does not claim one must refuse it with
 * DLOCK_ENOTSUP. Part of the conformance suite (conformance.h). */
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
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const struct conformance_target *target;

static dlock_client *open_client(int lease_ms)
{
    return conformance_open_client(lease_ms, 100);
}

/* A handle of NAME in mode (permits for a semaphore); NULL when the backend
 * refuses the mode, which it may only do with DLOCK_ENOTSUP and only
 * without the capability. */
static dlock_lock *handle(dlock_client *c, const char *name, unsigned mode, unsigned permits)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = mode;
    o.permits = permits;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(c, name, strlen(name), &o, &l);
    unsigned cap = mode == DLOCK_MODE_SHARED ? DLOCK_CAP_SHARED : mode == DLOCK_MODE_SEMAPHORE ? DLOCK_CAP_SEMAPHORE : 0;
    if (cap && !(dlock_client_capabilities(c) & cap)) {
        assert_int_equal(rc, DLOCK_ENOTSUP);
        return NULL;
    }
    if (rc != DLOCK_OK)
        fail_msg("lock_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return l;
}


/* ---- shared and exclusive ------------------------------------------------------------ */

/* Shared holders of one name hold together, from two clients and from two
 * handles of one client, each with its own, higher fence. */
static void shared_holders_overlap(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000), *b = open_client(30000);
    dlock_lock *a1 = handle(a, "sh-overlap", DLOCK_MODE_SHARED, 0);
    if (!a1)
        goto out;
    dlock_lock *a2 = handle(a, "sh-overlap", DLOCK_MODE_SHARED, 0), *b1 = handle(b, "sh-overlap", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(a1, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(a2, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(b1, 0), DLOCK_OK);
    uint64_t f1 = test_fence(a1), f2 = test_fence(a2), f3 = test_fence(b1);
    assert_true(f1 < f2 && f2 < f3);
    assert_true(dlock_validity_ms(b1) > 0);
    assert_int_equal(dlock_release(a1), DLOCK_OK);
    assert_int_equal(dlock_release(a2), DLOCK_OK);
    assert_int_equal(dlock_release(b1), DLOCK_OK);
    dlock_lock_free(a1);
    dlock_lock_free(a2);
    dlock_lock_free(b1);
out:
    dlock_client_close(a);
    dlock_client_close(b);
}

/* An exclusive hold keeps out both kinds, and a shared one keeps out the
 * exclusive kind. */
static void exclusive_excludes_both_kinds(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000), *b = open_client(30000);
    dlock_lock *s = handle(a, "sh-excl", DLOCK_MODE_SHARED, 0);
    if (!s)
        goto out;
    dlock_lock *x = handle(b, "sh-excl", DLOCK_MODE_EXCLUSIVE, 0), *s2 = handle(b, "sh-excl", DLOCK_MODE_SHARED, 0);
    dlock_lock *x2 = handle(a, "sh-excl", DLOCK_MODE_EXCLUSIVE, 0);
    assert_int_equal(dlock_acquire(s, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(s), DLOCK_OK);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(s, 0), DLOCK_EBUSY);  /* another client's exclusive */
    assert_int_equal(dlock_acquire(x2, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_acquire(s2, 0), DLOCK_EDEADLK); /* its own exclusive: dlock_downgrade() is the way */
    assert_non_null(strstr(dlock_errmsg(), "dlock_downgrade"));
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_lock_free(s);
    dlock_lock_free(x);
    dlock_lock_free(s2);
    dlock_lock_free(x2);
out:
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A thread that holds a name shared and asks for it exclusively is refused
 * at once: it would wait for itself (and two such threads for each other). */
static void upgrade_is_refused(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000);
    dlock_lock *s = handle(a, "sh-upgrade", DLOCK_MODE_SHARED, 0);
    if (!s)
        goto out;
    dlock_lock *x = handle(a, "sh-upgrade", DLOCK_MODE_EXCLUSIVE, 0);
    assert_int_equal(dlock_acquire(s, 0), DLOCK_OK);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(x, 5000), DLOCK_EDEADLK);
    assert_true(now_ms() - t0 < 1000);
    assert_non_null(strstr(dlock_errmsg(), "shared"));
    assert_int_equal(dlock_release(s), DLOCK_OK);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_lock_free(s);
    dlock_lock_free(x);
out:
    dlock_client_close(a);
}

struct taker {
    dlock_lock *lock;
    int rc;
    int64_t granted_at;
    int hold_ms;
    int64_t wait_ms;            /* 0: 10 s */
};

static void *take_and_hold(void *arg)
{
    struct taker *t = arg;
    /* Atomic: a case may look at it while the thread still waits. */
    __atomic_store_n(&t->rc, dlock_acquire(t->lock, t->wait_ms ? t->wait_ms : 10000), __ATOMIC_SEQ_CST);
    t->granted_at = now_us();
    if (t->rc == DLOCK_OK) {
        sleep_ms(t->hold_ms);
        dlock_release(t->lock);
    }
    return NULL;
}

/* A writer waiting behind a reader keeps the readers that come after it
 * out, and is granted before them: a stream of readers cannot starve it. */
static void a_waiting_writer_goes_before_later_readers(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000), *b = open_client(30000), *c = open_client(30000);
    dlock_lock *first = handle(a, "sh-writer", DLOCK_MODE_SHARED, 0);
    if (!first)
        goto out;
    struct taker writer = { .lock = handle(b, "sh-writer", DLOCK_MODE_EXCLUSIVE, 0), .rc = -1, .hold_ms = 100 };
    struct taker reader = { .lock = handle(c, "sh-writer", DLOCK_MODE_SHARED, 0), .rc = -1, .hold_ms = 0 };
    assert_int_equal(dlock_acquire(first, 0), DLOCK_OK);
    pthread_t tw, tr;
    assert_int_equal(pthread_create(&tw, NULL, take_and_hold, &writer), 0);
    /* The writer has asked and found the reader there. */
    dlock_lock *probe = handle(c, "sh-writer", DLOCK_MODE_SHARED, 0);
    int64_t t0 = now_ms();
    int rc;
    while ((rc = dlock_acquire(probe, 0)) == DLOCK_OK && now_ms() - t0 < 5000) {
        dlock_release(probe);
        sleep_ms(10);
    }
    assert_int_equal(rc, DLOCK_EBUSY); /* a later reader is kept out while the writer waits */
    assert_int_equal(pthread_create(&tr, NULL, take_and_hold, &reader), 0);
    sleep_ms(100);
    assert_int_equal(dlock_release(first), DLOCK_OK);
    pthread_join(tw, NULL);
    pthread_join(tr, NULL);
    assert_int_equal(writer.rc, DLOCK_OK);
    assert_int_equal(reader.rc, DLOCK_OK);
    assert_true(writer.granted_at < reader.granted_at);
    dlock_lock_free(first);
    dlock_lock_free(probe);
    dlock_lock_free(writer.lock);
    dlock_lock_free(reader.lock);
out:
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

/* Readers waiting behind a writer all come in when it lets go: the
 * release lets every one of them in, not one per retry interval. */
static void readers_waiting_behind_a_writer_all_come_in_at_its_release(void **state)
{
    (void)state;
    enum { READERS = 3 };
    dlock_client *w = open_client(30000), *r[READERS];
    dlock_lock *probe = handle(w, "sh-herd", DLOCK_MODE_SHARED, 0);
    if (!probe)
        goto out;
    dlock_lock *writer = handle(w, "sh-herd", DLOCK_MODE_EXCLUSIVE, 0);
    assert_int_equal(dlock_acquire(writer, 0), DLOCK_OK);
    struct taker readers[READERS];
    pthread_t t[READERS];
    for (int i = 0; i < READERS; i++) {
        r[i] = open_client(30000);
        readers[i] = (struct taker){ .lock = handle(r[i], "sh-herd", DLOCK_MODE_SHARED, 0), .rc = -1, .hold_ms = 300 };
        assert_int_equal(pthread_create(&t[i], NULL, take_and_hold, &readers[i]), 0);
    }
    sleep_ms(300); /* every reader has asked and is waiting */
    int64_t released_at = now_us();
    assert_int_equal(dlock_release(writer), DLOCK_OK);
    for (int i = 0; i < READERS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < READERS; i++) {
        assert_int_equal(readers[i].rc, DLOCK_OK);
        int64_t after_ms = (readers[i].granted_at - released_at) / 1000;
        /* Each holds 300 ms: a reader that came in only after another let
         * go would be 300 ms late. */
        if (after_ms > slack_ms(250) + target->expiry_slack_ms)
            fail_msg("reader %d came in %lld ms after the writer let go", i, (long long)after_ms);
        dlock_lock_free(readers[i].lock);
        dlock_client_close(r[i]);
    }
    dlock_lock_free(writer);
out:
    dlock_lock_free(probe);
    dlock_client_close(w);
}

/* Holds of each kind, side by side in one client, are kept by the
 * watchdog past three leases, and keep others out all along. */
static void holds_of_every_kind_outlive_three_leases(void **state)
{
    (void)state;
    dlock_client *a = open_client(600), *b = open_client(600);
    dlock_lock *s = handle(a, "mix-shared", DLOCK_MODE_SHARED, 0);
    dlock_lock *p = handle(a, "mix-permit", DLOCK_MODE_SEMAPHORE, 1);
    if (!s || !p)
        goto out;
    dlock_lock *x = handle(a, "mix-exclusive", DLOCK_MODE_EXCLUSIVE, 0);
    dlock_lock *other[3] = { handle(b, "mix-shared", DLOCK_MODE_EXCLUSIVE, 0),
                             handle(b, "mix-permit", DLOCK_MODE_SEMAPHORE, 1),
                             handle(b, "mix-exclusive", DLOCK_MODE_EXCLUSIVE, 0) };
    dlock_lock *mine[3] = { s, p, x };
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_acquire(mine[i], 0), DLOCK_OK);
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 3 * 600) {
        for (int i = 0; i < 3; i++) {
            assert_true(dlock_validity_ms(mine[i]) > 0);
            assert_int_equal(dlock_acquire(other[i], 0), DLOCK_EBUSY);
        }
        sleep_ms(150);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_release(mine[i]), DLOCK_OK);
        assert_int_equal(dlock_acquire(other[i], 0), DLOCK_OK);
        assert_int_equal(dlock_release(other[i]), DLOCK_OK);
        dlock_lock_free(mine[i]);
        dlock_lock_free(other[i]);
    }
    s = p = NULL;
out:
    dlock_lock_free(s);
    dlock_lock_free(p);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A reader queued behind a waiting writer is let in as soon as the writer
 * gives up, not at some later retry or expiry. */
static void a_reader_behind_a_writer_that_gives_up_comes_in_at_once(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000), *b = open_client(30000), *c = open_client(30000);
    dlock_lock *first = handle(a, "sh-give-way", DLOCK_MODE_SHARED, 0);
    if (!first)
        goto out;
    struct taker writer = { .lock = handle(b, "sh-give-way", DLOCK_MODE_EXCLUSIVE, 0), .rc = -1, .hold_ms = 0 };
    struct taker reader = { .lock = handle(c, "sh-give-way", DLOCK_MODE_SHARED, 0), .rc = -1, .hold_ms = 0 };
    assert_int_equal(dlock_acquire(first, 0), DLOCK_OK);
    int64_t t0 = now_us();
    pthread_t tw, tr;
    writer.wait_ms = 400;
    assert_int_equal(pthread_create(&tw, NULL, take_and_hold, &writer), 0);
    sleep_ms(150);
    assert_int_equal(pthread_create(&tr, NULL, take_and_hold, &reader), 0);
    pthread_join(tw, NULL);
    pthread_join(tr, NULL);
    assert_int_equal(writer.rc, DLOCK_ETIMEDOUT);
    assert_int_equal(reader.rc, DLOCK_OK);
    int64_t after_ms = (reader.granted_at - t0) / 1000;
    if (after_ms < 400 - 20 || after_ms > 400 + slack_ms(300) + target->expiry_slack_ms)
        fail_msg("the reader came in %lld ms after the start; the writer gave up at 400 ms", (long long)after_ms);
    assert_int_equal(dlock_release(first), DLOCK_OK);
    dlock_lock_free(first);
    dlock_lock_free(writer.lock);
    dlock_lock_free(reader.lock);
out:
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

/* ---- downgrade ------------------------------------------------------------------------ */

/* An exclusive handle of NAME on a backend that downgrades; NULL (after
 * checking the refusal) on one that does not: only a backend without
 * shared holds may lack it. */
static dlock_lock *downgradable(dlock_client *c, const char *name)
{
    dlock_lock *x = handle(c, name, DLOCK_MODE_EXCLUSIVE, 0);
    unsigned caps = dlock_client_capabilities(c);
    if (caps & DLOCK_CAP_DOWNGRADE)
        return x;
    assert_false(caps & DLOCK_CAP_SHARED); /* shared holds come with downgrade */
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    assert_int_equal(dlock_downgrade(x), DLOCK_ENOTSUP);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK); /* still exclusive, still reentrant */
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_lock_free(x);
    return NULL;
}

/* A downgraded hold is shared: readers come in beside it, writers stay
 * out, it keeps its fence (readers after it get greater ones), its own
 * thread cannot take it exclusively again, and its release lets a writer
 * in. */
static void a_downgraded_hold_is_shared(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000), *b = open_client(30000), *c = open_client(30000);
    dlock_lock *x = downgradable(a, "sh-down");
    if (!x)
        goto out;
    dlock_lock *reader = handle(b, "sh-down", DLOCK_MODE_SHARED, 0);
    dlock_lock *writer = handle(c, "sh-down", DLOCK_MODE_EXCLUSIVE, 0);
    dlock_lock *own_reader = handle(a, "sh-down", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_downgrade(x), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_downgrade(own_reader), DLOCK_EINVAL);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    uint64_t exclusive_fence = test_fence(x);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    assert_int_equal(dlock_downgrade(x), DLOCK_EINVAL); /* held twice: the outer hold counts on exclusivity */
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_acquire(reader, 0), DLOCK_EBUSY);

    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    uint64_t shared_fence = test_fence(x);
    assert_int_equal(shared_fence, exclusive_fence); /* the same hold */
    assert_int_equal(dlock_downgrade(x), DLOCK_OK); /* already shared */
    assert_int_equal(test_fence(x), shared_fence);
    assert_int_equal(dlock_acquire(reader, 0), DLOCK_OK);
    assert_true(test_fence(reader) > shared_fence);
    assert_int_equal(dlock_acquire(writer, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_EDEADLK); /* exclusive again: an upgrade */
    assert_int_equal(dlock_acquire(own_reader, 0), DLOCK_OK); /* another shared hold of its own is fine */
    assert_int_equal(dlock_release(own_reader), DLOCK_OK);
    assert_int_equal(dlock_release(reader), DLOCK_OK);
    assert_int_equal(dlock_acquire(writer, 0), DLOCK_EBUSY); /* the downgraded hold still keeps it out */
    assert_true(dlock_validity_ms(x) > 0);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_acquire(writer, 0), DLOCK_OK);
    assert_true(test_fence(writer) > shared_fence);
    assert_int_equal(dlock_release(writer), DLOCK_OK);

    /* The handle takes exclusive holds again afterwards. */
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(reader, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_lock_free(reader);
    dlock_lock_free(writer);
    dlock_lock_free(own_reader);
    dlock_lock_free(x);
out:
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

/* Readers waiting behind the exclusive hold come in when it is downgraded,
 * at once, while it is still held. */
static void a_downgrade_lets_waiting_readers_in(void **state)
{
    (void)state;
    enum { READERS = 2 };
    dlock_client *a = open_client(30000), *r[READERS];
    dlock_lock *x = downgradable(a, "sh-down-wake");
    if (!x)
        goto out;
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    struct taker readers[READERS];
    pthread_t t[READERS];
    for (int i = 0; i < READERS; i++) {
        r[i] = open_client(30000);
        readers[i] = (struct taker){ .lock = handle(r[i], "sh-down-wake", DLOCK_MODE_SHARED, 0), .rc = -1, .hold_ms = 0 };
        assert_int_equal(pthread_create(&t[i], NULL, take_and_hold, &readers[i]), 0);
    }
    sleep_ms(300); /* every reader has asked and is waiting */
    int64_t downgraded_at = now_us();
    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    for (int i = 0; i < READERS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(readers[i].rc, DLOCK_OK);
        int64_t after_ms = (readers[i].granted_at - downgraded_at) / 1000;
        if (after_ms > slack_ms(250) + target->expiry_slack_ms)
            fail_msg("reader %d came in %lld ms after the downgrade", i, (long long)after_ms);
        dlock_lock_free(readers[i].lock);
        dlock_client_close(r[i]);
    }
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_lock_free(x);
out:
    dlock_client_close(a);
}

/* A writer that was waiting when the hold was downgraded keeps its place:
 * readers that come after it stay out, and it is granted when the
 * downgraded hold is released, before them. */
static void a_writer_waiting_through_a_downgrade_keeps_its_place(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000), *b = open_client(30000), *c = open_client(30000);
    dlock_lock *x = downgradable(a, "sh-down-writer");
    if (!x)
        goto out;
    struct taker writer = { .lock = handle(b, "sh-down-writer", DLOCK_MODE_EXCLUSIVE, 0), .rc = -1, .hold_ms = 100 };
    struct taker reader = { .lock = handle(c, "sh-down-writer", DLOCK_MODE_SHARED, 0), .rc = -1, .hold_ms = 0 };
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    pthread_t tw, tr;
    assert_int_equal(pthread_create(&tw, NULL, take_and_hold, &writer), 0);
    sleep_ms(300); /* the writer has asked and is waiting */
    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    dlock_lock *probe = handle(c, "sh-down-writer", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(probe, 0), DLOCK_EBUSY); /* behind the waiting writer */
    assert_int_equal(pthread_create(&tr, NULL, take_and_hold, &reader), 0);
    sleep_ms(100);
    assert_int_equal(__atomic_load_n(&writer.rc, __ATOMIC_SEQ_CST), -1);
    int64_t released_at = now_us();
    assert_int_equal(dlock_release(x), DLOCK_OK);
    pthread_join(tw, NULL);
    pthread_join(tr, NULL);
    assert_int_equal(writer.rc, DLOCK_OK);
    assert_int_equal(reader.rc, DLOCK_OK);
    assert_true(writer.granted_at >= released_at);
    assert_true(writer.granted_at < reader.granted_at);
    dlock_lock_free(probe);
    dlock_lock_free(writer.lock);
    dlock_lock_free(reader.lock);
    dlock_lock_free(x);
out:
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

/* A downgraded hold is kept by the watchdog past three leases, renewed as
 * the shared hold it now is, and keeps writers out all along. */
static void a_downgraded_hold_is_renewed_as_shared(void **state)
{
    (void)state;
    dlock_client *a = open_client(600), *b = open_client(600);
    dlock_lock *x = downgradable(a, "sh-down-renew");
    if (!x)
        goto out;
    dlock_lock *reader = handle(b, "sh-down-renew", DLOCK_MODE_SHARED, 0);
    dlock_lock *writer = handle(b, "sh-down-renew", DLOCK_MODE_EXCLUSIVE, 0);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 3 * 600) {
        assert_true(dlock_validity_ms(x) > 0);
        assert_int_equal(dlock_acquire(writer, 0), DLOCK_EBUSY);
        sleep_ms(150);
    }
    assert_int_equal(dlock_acquire(reader, 0), DLOCK_OK);
    assert_int_equal(dlock_release(reader), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_acquire(writer, 0), DLOCK_OK);
    assert_int_equal(dlock_release(writer), DLOCK_OK);
    dlock_lock_free(reader);
    dlock_lock_free(writer);
    dlock_lock_free(x);
out:
    dlock_client_close(a);
    dlock_client_close(b);
}

/* Whether the target claims cap (a client opened and closed to ask). */
static bool claims(unsigned cap)
{
    dlock_client *c = open_client(1000);
    bool yes = (dlock_client_capabilities(c) & cap) != 0;
    dlock_client_close(c);
    return yes;
}

/* A holder of NAME in mode killed by SIGKILL lets a waiter of another
 * client (in waiter_mode) in within its lease. The child is forked before
 * this process opens a client: a fork while a client's threads run could
 * leave the child a lock that one of them held. */
static void killed_holder_lets_in(const char *name, unsigned mode, unsigned permits, unsigned waiter_mode)
{
    pid_t pid = conformance_child_holding(name, mode, permits);
    dlock_client *b = open_client(1000);
    dlock_lock *waiter = handle(b, name, waiter_mode, waiter_mode == DLOCK_MODE_SEMAPHORE ? permits : 0);
    assert_int_equal(dlock_acquire(waiter, 0), DLOCK_EBUSY);
    conformance_child_kill(pid);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(waiter, 5000), DLOCK_OK);
    if (now_ms() - t0 > 1000 + slack_ms(250) + target->expiry_slack_ms)
        fail_msg("the killed holder of '%s' let go after %lld ms", name, (long long)(now_ms() - t0));
    assert_int_equal(dlock_release(waiter), DLOCK_OK);
    dlock_lock_free(waiter);
    dlock_client_close(b);
}

/* A shared holder killed by SIGKILL gives its share back within its lease. */
static void a_killed_readers_share_comes_back(void **state)
{
    (void)state;
    if (claims(DLOCK_CAP_SHARED))
        killed_holder_lets_in("sh-victim", DLOCK_MODE_SHARED, 0, DLOCK_MODE_EXCLUSIVE);
}

/* ---- semaphores -------------------------------------------------------------------- */

/* Three permits: three holders at once (each with a higher fence), the
 * fourth waits, and gets one when a holder lets go. */
static void no_more_than_n_holders(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000), *b = open_client(30000);
    dlock_lock *h[4];
    if (!(h[0] = handle(a, "sem-3", DLOCK_MODE_SEMAPHORE, 3)))
        goto out;
    h[1] = handle(a, "sem-3", DLOCK_MODE_SEMAPHORE, 3);
    h[2] = handle(b, "sem-3", DLOCK_MODE_SEMAPHORE, 3);
    h[3] = handle(b, "sem-3", DLOCK_MODE_SEMAPHORE, 3);
    uint64_t last = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_acquire(h[i], 0), DLOCK_OK);
        uint64_t f = test_fence(h[i]);
        assert_true(f > last);
        last = f;
    }
    assert_int_equal(dlock_acquire(h[3], 0), DLOCK_EBUSY);
    struct taker fourth = { .lock = h[3], .rc = -1, .hold_ms = 0 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, take_and_hold, &fourth), 0);
    sleep_ms(100);
    int64_t released_at = now_us();
    assert_int_equal(dlock_release(h[1]), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(fourth.rc, DLOCK_OK);
    assert_true(fourth.granted_at >= released_at);
    assert_int_equal(dlock_release(h[0]), DLOCK_OK);
    assert_int_equal(dlock_release(h[2]), DLOCK_OK);
    for (int i = 0; i < 4; i++)
        dlock_lock_free(h[i]);
out:
    dlock_client_close(a);
    dlock_client_close(b);
}

/* The number of permits is the name's: asking with another is an error
 * that says both numbers, not a silent mix. */
static void a_different_number_of_permits_is_an_error(void **state)
{
    (void)state;
    dlock_client *a = open_client(30000);
    dlock_lock *three = handle(a, "sem-n", DLOCK_MODE_SEMAPHORE, 3);
    if (!three)
        goto out;
    dlock_lock *two = handle(a, "sem-n", DLOCK_MODE_SEMAPHORE, 2);
    assert_int_equal(dlock_acquire(three, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(two, 0), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "3 permits"));
    assert_int_equal(dlock_release(three), DLOCK_OK);
    dlock_lock_free(three);
    dlock_lock_free(two);
out:
    dlock_client_close(a);
}

/* A permit holder killed by SIGKILL gives its permit back within its lease. */
static void a_killed_holders_permit_comes_back(void **state)
{
    (void)state;
    if (claims(DLOCK_CAP_SEMAPHORE))
        killed_holder_lets_in("sem-victim", DLOCK_MODE_SEMAPHORE, 1, DLOCK_MODE_SEMAPHORE);
}

/* Names at the length cap work in both modes. */
static void names_at_the_cap_in_both_modes(void **state)
{
    (void)state;
    char name[DLOCK_NAME_MAX + 1];
    memset(name, 'n', DLOCK_NAME_MAX);
    name[DLOCK_NAME_MAX] = 0;
    dlock_client *a = open_client(30000);
    dlock_lock *s = handle(a, name, DLOCK_MODE_SHARED, 0);
    if (s) {
        assert_int_equal(dlock_acquire(s, 0), DLOCK_OK);
        assert_int_equal(dlock_release(s), DLOCK_OK);
        dlock_lock_free(s);
    }
    name[0] = 's';
    dlock_lock *p = handle(a, name, DLOCK_MODE_SEMAPHORE, 2);
    if (p) {
        assert_int_equal(dlock_acquire(p, 0), DLOCK_OK);
        assert_int_equal(dlock_release(p), DLOCK_OK);
        dlock_lock_free(p);
    }
    dlock_client_close(a);
}

int conformance_run_shared(const struct conformance_target *t)
{
    target = t;
    char group[128];
    snprintf(group, sizeof group, "%s: shared holds and semaphores", t->name);
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup(shared_holders_overlap, conformance_before_each),
        cmocka_unit_test_setup(exclusive_excludes_both_kinds, conformance_before_each),
        cmocka_unit_test_setup(upgrade_is_refused, conformance_before_each),
        cmocka_unit_test_setup(a_waiting_writer_goes_before_later_readers, conformance_before_each),
        cmocka_unit_test_setup(readers_waiting_behind_a_writer_all_come_in_at_its_release, conformance_before_each),
        cmocka_unit_test_setup(a_reader_behind_a_writer_that_gives_up_comes_in_at_once, conformance_before_each),
        cmocka_unit_test_setup(holds_of_every_kind_outlive_three_leases, conformance_before_each),
        cmocka_unit_test_setup(a_killed_readers_share_comes_back, conformance_before_each),
        cmocka_unit_test_setup(no_more_than_n_holders, conformance_before_each),
        cmocka_unit_test_setup(a_different_number_of_permits_is_an_error, conformance_before_each),
        cmocka_unit_test_setup(a_killed_holders_permit_comes_back, conformance_before_each),
        cmocka_unit_test_setup(names_at_the_cap_in_both_modes, conformance_before_each),
        cmocka_unit_test_setup(a_downgraded_hold_is_shared, conformance_before_each),
        cmocka_unit_test_setup(a_downgrade_lets_waiting_readers_in, conformance_before_each),
        cmocka_unit_test_setup(a_writer_waiting_through_a_downgrade_keeps_its_place, conformance_before_each),
        cmocka_unit_test_setup(a_downgraded_hold_is_renewed_as_shared, conformance_before_each),
    };
    return _cmocka_run_group_tests(group, cases, sizeof cases / sizeof cases[0], NULL, conformance_group_teardown);
}
