/* tests/support/fence_guard_case.c - see fence_guard_case.h */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fence_guard_case.h"

#include "test_client.h"

#include <stdio.h>

/* A write carries the hold's token and lands only if no newer token has
 * written, raising the stored fence in the same statement. */
static void guarded_write(const struct sql_fence_guard_target *t, const char *who, uint64_t token)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE accounts SET owner = '%s', fence = %llu WHERE id = 1 AND fence <= %llu", who,
             (unsigned long long)token, (unsigned long long)token);
    t->admin(sql);
}

void sql_fence_guard_case(const struct sql_fence_guard_target *t)
{
    t->admin("CREATE TABLE IF NOT EXISTS accounts (id INT PRIMARY KEY, owner VARCHAR(32) NOT NULL, "
             "fence BIGINT NOT NULL)");
    t->admin(t->reset_row_sql);
    dlock_client *a = t->open(), *b = t->open();
    dlock_lock_options short_lease = DLOCK_LOCK_OPTIONS_INIT;
    short_lease.lease_ms = 300;
    dlock_lock *la = NULL, *lb = test_lock_named(b, "guarded");
    assert_int_equal(dlock_lock_new(a, "guarded", 7, &short_lease, &la), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    uint64_t fa, fb;
    assert_int_equal(dlock_fence(la, &fa), DLOCK_OK);
    guarded_write(t, "a", fa);
    assert_int_equal(dlock_acquire(lb, 5000), DLOCK_OK); /* after A's 300 ms */
    assert_int_equal(dlock_fence(lb, &fb), DLOCK_OK);
    assert_true(fb > fa);
    guarded_write(t, "b", fb);
    guarded_write(t, "a-late", fa); /* A did not notice: refused */
    assert_string_equal(t->admin("SELECT owner FROM accounts WHERE id = 1"), "b");
    char want[32];
    snprintf(want, sizeof want, "%llu", (unsigned long long)fb);
    assert_string_equal(t->admin("SELECT fence FROM accounts WHERE id = 1"), want);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}
