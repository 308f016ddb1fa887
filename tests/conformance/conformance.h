/* tests/conformance/conformance.h - the semantics every backend keeps, as one
 * set of cmocka cases run against any backend by configuration.
 *
 * A backend's test program describes its target (how to write a config for
 * it, its capability bits, and optionally how to take a hold away from
 * outside) and runs conformance_run(). Cases that need a capability the
 * backend does not claim check instead that the API answers DLOCK_ENOTSUP.
 * Every client a case opens is closed before it returns, so a case may fork
 * a child that uses the library. */
#ifndef TEST_CONFORMANCE_H
#define TEST_CONFORMANCE_H

#include <dlock.h>
#include <stddef.h>
#include <sys/types.h>

struct conformance_target {
    const char *name;       /* printed as the cmocka group name */
    /* Writes a complete configuration into buf: the backend with
     * lease_ms as the default lease, retry_cap_ms as the backoff cap. */
    void (*config)(char *buf, size_t size, int lease_ms, int retry_cap_ms);
    /* Makes the current hold of NAME vanish on the server as an operator or
     * a failure would (delete the key or row, end the session). NULL for a
     * backend whose hold nothing outside can take (local): the suite then
     * loses a hold through an explicit lease instead. */
    void (*break_hold)(const char *name);
    /* Optional: empties the backend's state between cases. */
    void (*reset)(void);
    /* How much later than its lease the server may free a dead holder's
     * hold (etcd checks for expired leases every 500 ms); 0 for none. */
    int expiry_slack_ms;
    /* Whether the backend lists its locks (dlock_list): 0 when it does not
     * (the suite checks that it answers DLOCK_ENOTSUP), else CONFORMANCE_LISTS, plus CONFORMANCE_LISTS_NO_WAITERS when it
     * cannot count waiters (reports -1), plus CONFORMANCE_LISTS_NO_LEASE_LEFT
     * when it reports -1 for what is left of a hold although the server
     * frees dead holders' holds (zookeeper: a session kept alive by its
     * holder's heartbeats has no deadline another client can read). */
    int lists;
    /* How long a waiter that was killed while it waited may hold up the
     * line behind it, in ms, as the backend documents (0: not at all). */
    int dead_waiter_ms;
    /* CONFORMANCE_NATIVE_ATTEMPTS when the non-blocking API's attempts go
     * out without a thread (the provider's acquire_send), plus
     * CONFORMANCE_NATIVE_RELEASES when its releases do (release_send): the
     * suite counts them. CONFORMANCE_FIRST_ATTEMPT_TWO_TRIPS when a first
     * attempt is two round trips, the second sent after the first's
     * answer (zookeeper: create our node, then list the parent's
     * children), so it may wake the caller's loop twice. */
    int native_round_trips;
};
#define CONFORMANCE_NATIVE_ATTEMPTS 1
#define CONFORMANCE_NATIVE_RELEASES 2
#define CONFORMANCE_FIRST_ATTEMPT_TWO_TRIPS 4

/* The redis family's documented bound for a dead waiter: waiter_timeout_ms,
 * whose default the conformance configs keep. */
#define REDIS_WAITER_TIMEOUT_MS 5000

enum { CONFORMANCE_LISTS = 1, CONFORMANCE_LISTS_NO_LEASE_LEFT = 2, CONFORMANCE_LISTS_NO_WAITERS = 4 };

/* For the suite's files: a client of the target being run (fails the case
 * when it cannot be opened), and the setup before each case. */
dlock_client *conformance_open_client(int lease_ms, int retry_cap_ms);
int conformance_before_each(void **state);
/* Forks a child that opens its own client (lease 1 s), holds NAME in mode
 * (permits for a semaphore), tells the parent and waits to be killed;
 * returns its pid once it holds. */
pid_t conformance_child_holding(const char *name, unsigned mode, unsigned permits);

/* Acquires l (waiting up to 10 s) after a holder with a 1 s lease died,
 * and fails the case unless the name came free within that lease, the
 * backend's expiry slack and the build's slack; then releases it. what
 * names the dead holder in the message. */
void conformance_acquire_within_a_dead_lease(dlock_lock *l, const char *what);

/* Has the next case (or the group's end) kill a child the case forked,
 * should the case fail before it does. */
void conformance_child_remember(pid_t pid);

/* Forks a child that runs prepare(arg) (0 when done, else the child's exit
 * status), tells the parent and waits to be killed; returns its pid once
 * prepare returned 0, remembered as above. */
pid_t conformance_child_ready(int (*prepare)(const void *arg), const void *arg);
/* Kills such a child (SIGKILL) and reaps it. A child a failed case left
 * behind is killed before the next case. */
void conformance_child_kill(pid_t pid);
/* A group's teardown: kills the children its last case left. */
int conformance_group_teardown(void **state);

/* Runs every case against target, then conformance_run_shared(),
 * conformance_run_kinds(), conformance_run_model(), conformance_run_list(), conformance_run_waiting() and
 * conformance_run_async() and conformance_run_election(); returns
 * the number of failed cases. */
int conformance_run(const struct conformance_target *target);

/* The shared-hold and semaphore cases (conformance_shared.c): run where the
 * backend claims DLOCK_CAP_SHARED / DLOCK_CAP_SEMAPHORE, and otherwise a
 * check that it refuses them with DLOCK_ENOTSUP. */
int conformance_run_shared(const struct conformance_target *target);

/* One name asked for in two kinds (conformance_kinds.c): every ordered pair
 * of exclusive, shared and semaphores of 1 and 2 permits, trying once and
 * waiting; never two holders of kinds that cannot mix. */
int conformance_run_kinds(const struct conformance_target *target);

/* The seeded random test (conformance_model.c): clients and threads issue
 * random operations of every kind, cancels and breaks, and the history is
 * checked against a model of what a name may grant. DLOCK_MODEL_SEED and
 * DLOCK_MODEL_MS set its seed and length. */
int conformance_run_model(const struct conformance_target *target);

/* Lock caching (conformance_cache.c): where the backend claims
 * DLOCK_CAP_CACHE, kept holds taken again with no round trip and their
 * token, renewed, given back when asked for, idle or closed, and never
 * served once broken; elsewhere the cache group and DLOCK_LOCK_CACHE
 * refused with DLOCK_ENOTSUP. */
int conformance_run_cache(const struct conformance_target *target);

/* The listing cases (conformance_list.c): run where target->lists is set,
 * and otherwise a check that dlock_list() answers DLOCK_ENOTSUP. */
int conformance_run_list(const struct conformance_target *target);

/* The waiting cases (conformance_waiting.c): one waiter woken per release
 * where the backend claims DLOCK_CAP_NATIVE_WAIT, arrival order where it
 * claims DLOCK_CAP_FAIR (else DLOCK_LOCK_FAIR is refused), and a cancelled
 * or killed waiter does not stall the line. */
int conformance_run_waiting(const struct conformance_target *target);

/* The non-blocking API's cases (conformance_async.c): the semantics above
 * through dlock_acquire_start() and dlock_release_start(), driven by a
 * poll() loop, on every backend. */
int conformance_run_async(const struct conformance_target *target);
/* Leader election (conformance_election.c): run where the backend claims
 * DLOCK_CAP_ELECTION, and otherwise a check that it refuses elections with
 * DLOCK_ENOTSUP. */
int conformance_run_election(const struct conformance_target *target);

#endif
