/* tests/support/fence_guard_case.h - the SQL fence guard of libdlock(3),
 * FENCING, played on a resource table by both SQL backends' tests. */
#ifndef TEST_FENCE_GUARD_CASE_H
#define TEST_FENCE_GUARD_CASE_H

#include <dlock.h>

struct sql_fence_guard_target {
    /* Runs SQL as an administrator; returns the first value of the first
     * row ("" if none) and fails the case on an error. */
    const char *(*admin)(const char *sql);
    /* Opens a client on the backend (lease mode). */
    dlock_client *(*open)(void);
    /* Resets row 1 of accounts (id, owner, fence) to ('', 0). */
    const char *reset_row_sql;
};

/* A holder whose 300 ms lease ran out writes after the next holder did:
 * `UPDATE ... WHERE fence <= token` keeps the newer write. Fails the
 * current cmocka case otherwise. */
void sql_fence_guard_case(const struct sql_fence_guard_target *t);

#endif
