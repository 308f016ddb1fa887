/* tests/support/downgrade_case.h - dlock_downgrade in lease mode, as both
 * SQL backends do it in the name's row, played by both backends' tests. */
#ifndef TEST_DOWNGRADE_CASE_H
#define TEST_DOWNGRADE_CASE_H

#include <dlock.h>

struct sql_downgrade_target {
    /* Runs SQL as an administrator; returns the first value of the first
     * row ("" if none) and fails the case on an error. */
    const char *(*admin)(const char *sql);
    /* Opens a client on the backend (lease mode, 30 s lease). */
    dlock_client *(*open)(void);
    /* Opens a client (lease mode, one pooled connection) on the server at
     * 127.0.0.1:port: the fault proxy in front of it. */
    dlock_client *(*open_at)(int port);
    int server_port;
    /* About the row of the lock "dg": "1" when a writer is registered in
     * it for the row's current fence. */
    const char *writer_registered_sql;
    /* "<owner> <n> <w>": n holders whose key is an exclusive-style owner id
     * (no "/") and whose expiry is the row's, w 1 when a writer is
     * registered for the current fence (else 0). */
    const char *row_sql;
    /* Registers a writer that never comes back (someone-waiting:1) for the
     * row's current fence, for a minute. */
    const char *idle_writer_sql;
    /* Gives the row to 'someone-else:1'; and its owner. */
    const char *steal_sql;
    const char *owner_sql;
    /* Deletes the row (what an earlier case left). */
    const char *delete_sql;
};

/* The cmocka cases below take their target as their state
 * (cmocka_unit_test_prestate). */

/* The downgrade in the row: an exclusive hold with a writer waiting behind
 * it (registered in the row while the hold was exclusive) becomes the
 * row's only shared holder, with the expiry and the fence it had; a later
 * reader is busy and the writer is granted at the release; status and the
 * listing show a shared holder. A registration stays in force through the
 * downgrade (shown with a writer that does not wake up to register
 * again). A downgrade of a hold taken over is DLOCK_ELOST and leaves the
 * row alone. */
void a_downgrade_makes_the_row_shared_in_place(void **state);

/* The downgrade runs, its answer is lost with the connection, and the pool
 * sends it again on a new one: the hold is already shared, which is
 * DLOCK_OK with the same fence, and the hold is then released as shared. */
void downgrade_resent_after_a_lost_answer_is_ok(void **state);

/* A reader kept out of a free row by a registered writer (one that does
 * not come back) waits as it would behind a holder, and does not retry
 * every millisecond: counted in acquire attempts over 300 ms. */
void a_reader_behind_a_registered_writer_does_not_spin(void **state);

#endif
