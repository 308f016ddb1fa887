/* tests/faults/history_check.h - the fault suite's checker: reads the
 * workers' logs and the fenced counter's log from one run (see
 * fault_worker.c and fenced_counter.h) and verifies what a lock service
 * promises, whatever faults were injected:
 *
 *  1. no overlap: the windows in which two different workers believed they
 *     held the lock never intersect. A hold's window runs from its grant to
 *     the latest validity deadline the library gave it (at the grant or at a
 *     check), cut short when it starts its release or by on_lost;
 *  2. fences: the tokens the resource admitted never decrease, a token is
 *     never admitted for two workers, and strictly grows from one worker's
 *     hold to the next;
 *  3. stale writes: every write whose token is below one already admitted
 *     was refused;
 *  4. no lost update: every admitted write replaced exactly the value its
 *     worker had read (read-sleep-write increments), so the counter equals
 *     the number of admitted writes;
 *  5. kept tokens (lock caching): a worker granted the token it held
 *     before (its client took over the hold it kept) was granted nothing
 *     else in between by anyone: the grant just before, in time, is its
 *     own with that token. Another worker's grant between the two is a
 *     stale grant. */
#ifndef TEST_HISTORY_CHECK_H
#define TEST_HISTORY_CHECK_H

struct history_report {
    /* what happened */
    int grants, failed_acquires, writes_admitted, writes_refused, reads_refused, lost_notes, invalid_checks;
    int releases_refused;   /* release answered DLOCK_ELOST or DLOCK_ENOTOWNER */
    long long counter;
    int kept_grants;        /* grants of a token the same worker held just before (lock caching) */
    /* violations: all must be 0 */
    int overlaps, fence_disorder, stale_admitted, lost_updates, unreadable;
    int stale_grants;       /* a kept token taken again after another worker's grant */
    int reader_saw_partial; /* a shared read between a writer's read and its admitted write */
    int shared_reads;       /* shared holders' reads admitted */
    int most_at_once;       /* a semaphore's run: the most holds at one moment */
    char first_violation[400];
    /* the last grant's time (CLOCK_MONOTONIC us), for liveness checks */
    long long last_grant_us;
};

/* Checks the run in dir with workers 0..nworkers-1. Returns the number of
 * violations (0: the run is correct), overlaps included. */
int history_check(const char *dir, int nworkers, struct history_report *r);

/* The same run for workers holding permits of a semaphore of `permits`:
 * at no moment more holds than permits (the windows as for locks; the most
 * at once goes to r->most_at_once, each excess counts in r->overlaps), and
 * no fencing token granted twice. No counter: nobody increments. */
int history_check_permits(const char *dir, int nworkers, int permits, struct history_report *r);

/* The same for a read/write run: workers first_reader.. hold the name
 * shared and only read (fault_worker "shared"). A writer's window meets no
 * other worker's (readers' windows may meet: the most at once goes to
 * r->most_at_once); fences and stale writes as for locks, shared reads
 * admitted against the writers' tokens only; no shared read lands between
 * a writer's read and its admitted write; no lost update. */
int history_check_rw(const char *dir, int nworkers, int first_reader, struct history_report *r);

/* The same for a run of mixed kinds on one name: workers 0..first_reader-1
 * write under exclusive holds, first_reader..first_permit-1 hold it
 * shared and read, first_permit.. hold permits of a semaphore of
 * `permits` on it (and touch nothing). A writer's window meets no other
 * worker's; a reader's meets no permit holder's; never more than permits
 * permit holders at once (the most at once goes to r->most_at_once); the
 * counter's checks as for history_check_rw. */
int history_check_mixed(const char *dir, int nworkers, int first_reader, int first_permit, int permits,
                        struct history_report *r);

/* Grants whose time falls in [from_us, to_us). */
int history_grants_between(const char *dir, int nworkers, long long from_us, long long to_us);

/* The first "lost" or "invalid" line at or after from_us, -1 if none. */
long long history_first_loss_after(const char *dir, int nworkers, long long from_us);

#endif
