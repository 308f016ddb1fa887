/* tests/support/downgrade_case.c - see downgrade_case.h */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "downgrade_case.h"

#include "fault_proxy.h"
#include "test_client.h"
#include "test_time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fence_of(dlock_lock *l)
{
    uint64_t f = 0;
    assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
    return f;
}

struct waiting_writer {
    dlock_lock *lock;
    int rc;
    uint64_t fence;
};

static void *take_and_release(void *arg)
{
    struct waiting_writer *w = arg;
    int rc = dlock_acquire(w->lock, 10000);
    __atomic_store_n(&w->rc, rc, __ATOMIC_SEQ_CST); /* the case looks at it while we wait */
    if (rc == DLOCK_OK) {
        dlock_fence(w->lock, &w->fence);
        dlock_release(w->lock);
    }
    return NULL;
}

/* What the listing says of "dg". */
struct listed {
    int entries;
    unsigned kind;
    int64_t holder_count;
    char owner[128];
};

static int note_dg(const dlock_list_entry *e, void *arg)
{
    struct listed *l = arg;
    if (e->name_len != 2 || memcmp(e->name, "dg", 2) != 0)
        return DLOCK_OK;
    l->entries++;
    l->kind = e->kind;
    l->holder_count = e->holder_count;
    snprintf(l->owner, sizeof l->owner, "%s", e->n_holders > 0 ? e->holders[0].owner : "");
    return DLOCK_OK;
}

void a_downgrade_makes_the_row_shared_in_place(void **state)
{
    const struct sql_downgrade_target *t = *state;
    dlock_client *a = t->open(), *b = t->open(), *c = t->open();
    dlock_lock *x = test_lock_named(a, "dg");
    struct waiting_writer writer = { test_lock_named(b, "dg"), -1, 0 };
    dlock_lock *probe = test_lock_of_kind(c, "dg", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    uint64_t exclusive_fence = fence_of(x);
    pthread_t tw;
    assert_int_equal(pthread_create(&tw, NULL, take_and_release, &writer), 0);
    /* The writer registers while the hold is still exclusive. */
    int64_t t0 = now_ms();
    while (strcmp(t->admin(t->writer_registered_sql), "1") != 0 && now_ms() - t0 < 5000)
        sleep_ms(10);
    assert_string_equal(t->admin(t->writer_registered_sql), "1");

    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    uint64_t shared_fence = fence_of(x);
    assert_int_equal(shared_fence, exclusive_fence); /* the same hold */
    /* The row is shared, with the hold's own expiry, and the writer keeps
     * its place (the fence it registered for did not move). */
    assert_string_equal(t->admin(t->row_sql), "~s 1 1");
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(c, "dg", 2, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_string_equal(st.holder, "1 shared holder");
    assert_int_equal(st.fence, shared_fence);
    struct listed l = { 0 };
    char *next = NULL;
    assert_int_equal(dlock_list(c, "dg", 2, NULL, 10, note_dg, &l, &next), DLOCK_OK);
    free(next);
    assert_int_equal(l.entries, 1);
    assert_int_equal(l.kind, DLOCK_MODE_SHARED);
    assert_int_equal(l.holder_count, 1);
    assert_non_null(strchr(l.owner, ':'));
    assert_null(strchr(l.owner, '/')); /* the exclusive hold's own id */
    assert_int_equal(dlock_acquire(probe, 0), DLOCK_EBUSY); /* behind the writer */
    assert_int_equal(__atomic_load_n(&writer.rc, __ATOMIC_SEQ_CST), -1);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    pthread_join(tw, NULL);
    assert_int_equal(writer.rc, DLOCK_OK);
    assert_true(writer.fence > shared_fence);

    /* The downgrade itself keeps a registered writer's place. */
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    t->admin(t->idle_writer_sql);
    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    assert_string_equal(t->admin(t->row_sql), "~s 1 1");
    assert_int_equal(dlock_acquire(probe, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(x), DLOCK_OK);

    /* Taken over before the downgrade: refused, and the row is left as the
     * new owner has it. */
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    t->admin(t->steal_sql);
    assert_int_equal(dlock_downgrade(x), DLOCK_ELOST);
    assert_non_null(strstr(dlock_errmsg(), "no longer held"));
    assert_string_equal(t->admin(t->owner_sql), "someone-else:1");
    dlock_release(x);
    dlock_lock_free(probe);
    dlock_lock_free(writer.lock);
    dlock_lock_free(x);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(c);
}

void downgrade_resent_after_a_lost_answer_is_ok(void **state)
{
    const struct sql_downgrade_target *t = *state;
    int proxy_port;
    struct fault_proxy *proxy = fault_proxy_start(t->server_port, &proxy_port);
    assert_non_null(proxy);
    dlock_client *c = t->open_at(proxy_port), *other = t->open();
    dlock_lock *x = test_lock_named(c, "resent-dg");
    dlock_lock *writer = test_lock_named(other, "resent-dg");
    dlock_lock *reader = test_lock_of_kind(other, "resent-dg", DLOCK_MODE_SHARED, 0);
    /* The statements prepared on the one connection, so that the answer
     * lost is the downgrade's own. */
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    assert_int_equal(dlock_downgrade(x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    uint64_t exclusive_fence = fence_of(x);
    fault_proxy_set(proxy, FAULT_DROP_REPLY_RESET, 0);
    int rc = dlock_downgrade(x);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_errmsg());
    fault_proxy_set(proxy, FAULT_PASS, 0);
    if (rc != DLOCK_OK)
        fail_msg("downgrade: %s: %s", dlock_strerror(rc), why);
    assert_int_equal(fence_of(x), exclusive_fence);
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(other, "resent-dg", 9, &st), DLOCK_OK);
    assert_string_equal(st.holder, "1 shared holder");
    assert_int_equal(dlock_acquire(reader, 0), DLOCK_OK);
    assert_int_equal(dlock_release(reader), DLOCK_OK);
    assert_int_equal(dlock_acquire(writer, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_acquire(writer, 0), DLOCK_OK);
    assert_int_equal(dlock_release(writer), DLOCK_OK);
    dlock_lock_free(x);
    dlock_lock_free(writer);
    dlock_lock_free(reader);
    dlock_client_close(c);
    dlock_client_close(other);
    fault_proxy_stop(proxy);
}

void a_reader_behind_a_registered_writer_does_not_spin(void **state)
{
    const struct sql_downgrade_target *t = *state;
    dlock_client *a = t->open(), *b = t->open();
    dlock_lock *x = test_lock_named(a, "dg");
    dlock_lock *reader = test_lock_of_kind(b, "dg", DLOCK_MODE_SHARED, 0);
    t->admin(t->delete_sql);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    t->admin(t->idle_writer_sql);
    assert_int_equal(dlock_release(x), DLOCK_OK); /* the row is free, the registration stays */
    long long before = test_client_metric(b, "dlock_acquire_attempts_total");
    assert_int_equal(dlock_acquire(reader, 300), DLOCK_ETIMEDOUT);
    long long attempts = test_client_metric(b, "dlock_acquire_attempts_total") - before;
    if (attempts > 30)
        fail_msg("a reader kept out for 300 ms by a registered writer made %lld attempts", attempts);
    dlock_lock_free(reader);
    dlock_lock_free(x);
    dlock_client_close(a);
    dlock_client_close(b);
}
