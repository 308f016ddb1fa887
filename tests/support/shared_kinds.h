/* tests/support/shared_kinds.h - the part of a backend's shared-hold test
 * that every backend keeping the kind of a name in one record shares:
 * status counts the holders, and a name held in one kind refuses the
 * other. Include after <cmocka.h> and test_client.h. */
#ifndef TEST_SHARED_KINDS_H
#define TEST_SHARED_KINDS_H

#include <dlock.h>
#include <string.h>

/* Holds "rw" shared from a and from b, and "sem" as one of 3 permits from
 * a; checks that status says "2 shared holders" and "1 of 3 permits held",
 * and that a semaphore request on "rw" and a shared one on "sem" are
 * refused with DLOCK_EINVAL saying why. The holds go to out: the two
 * shared ones, then the permit. */
static inline void test_shared_kinds_hold(dlock_client *a, dlock_client *b, dlock_lock *out[3])
{
    out[0] = test_lock_of_kind(a, "rw", DLOCK_MODE_SHARED, 0);
    out[1] = test_lock_of_kind(b, "rw", DLOCK_MODE_SHARED, 0);
    out[2] = test_lock_of_kind(a, "sem", DLOCK_MODE_SEMAPHORE, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_acquire(out[i], 0), DLOCK_OK);
    dlock_status_info st = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(a, "rw", 2, &st), DLOCK_OK);
    assert_int_equal(st.held, 1);
    assert_string_equal(st.holder, "2 shared holders");
    assert_int_equal(dlock_status(a, "sem", 3, &st), DLOCK_OK);
    assert_string_equal(st.holder, "1 of 3 permits held");
    dlock_lock *wrong = test_lock_of_kind(a, "rw", DLOCK_MODE_SEMAPHORE, 2);
    assert_int_equal(dlock_acquire(wrong, 0), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "shared lock, not as a semaphore"));
    dlock_lock_free(wrong);
    wrong = test_lock_of_kind(b, "sem", DLOCK_MODE_SHARED, 0);
    assert_int_equal(dlock_acquire(wrong, 0), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "semaphore of 3 permits, not a shared lock"));
    dlock_lock_free(wrong);
}

#endif
