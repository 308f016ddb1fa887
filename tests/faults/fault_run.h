/* tests/faults/fault_run.h - one run of the fault suite: N fault_worker
 * processes contending for one lock under a configuration, a fault
 * injected by the caller while they run, then the checker over their logs.
 *
 *   struct fault_run run;
 *   fault_run_start(&run, config_text, 4, 5000, 40);   // workers, ms, hold ms
 *   ... inject a fault (fault_run_holder() names the current holder) ...
 *   fault_run_finish(&run, "redis: holder SIGKILL", &report);  // 0 violations?
 *
 * The suite's length is scaled by DLOCK_FAULTS_LONG (a factor, default 1):
 * CI runs the short form, `DLOCK_FAULTS_LONG=10 make check` the long one.
 * DLOCK_FAULTS_KEEP=1 keeps every run's logs (a failing run's always are). */
#ifndef TEST_FAULT_RUN_H
#define TEST_FAULT_RUN_H

#include "history_check.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define FAULT_RUN_MAX_WORKERS 16

struct fault_run {
    char dir[128];          /* logs, the fenced counter, the config */
    int nworkers;
    int duration_ms;
    int hold_ms;            /* each worker's hold */
    pid_t pids[FAULT_RUN_MAX_WORKERS];
    int64_t started_us;
    int permits;            /* > 0: the workers hold permits of a semaphore of this many */
    int readers;            /* > 0: the last this many workers hold the lock shared and read */
    int permit_workers;     /* > 0: a mixed run: after the readers, this many more ask for the
                             * lock's name as a semaphore of `permits` */
    int64_t stopped_us;     /* when fault_run_released_holder last stopped the worker it returned */
};

/* How long a worker holding for hold_ms waits for each acquire: 2 s
 * plus four holds. */
static inline int64_t fault_worker_wait_ms(int64_t hold_ms)
{
    return 2000 + 4 * hold_ms;
}

/* The DLOCK_FAULTS_LONG factor (>= 1). */
int fault_run_scale(void);

/* Writes config_text to a fresh temp dir and starts the workers. Fails the
 * cmocka case if fault_worker cannot be found or started. */
void fault_run_start(struct fault_run *run, const char *config_text, int nworkers, int duration_ms, int hold_ms);

/* The same with workers that each hold one permit of a semaphore of
 * `permits` (and make no increment); finish then checks that no more than
 * `permits` hold at any moment and that no token is granted twice. */
void fault_run_start_permits(struct fault_run *run, const char *config_text, int nworkers, int duration_ms,
                             int hold_ms, int permits);

/* A read/write run: `writers` workers increment under exclusive holds (as
 * fault_run_start's), then `readers` more hold the same name shared and
 * read the counter. finish then checks it with history_check_rw. Only
 * writers name themselves in the holder file. */
void fault_run_start_rw(struct fault_run *run, const char *config_text, int writers, int readers, int duration_ms,
                        int hold_ms);

/* The PID of the worker holding the lock now, waiting up to wait_ms for
 * one; 0 if none. */
pid_t fault_run_holder(const struct fault_run *run, int wait_ms);

/* A worker that has released and not asked again (its log ends with its
 * release), within wait_ms; 0 if none did. With lock caching its client
 * may keep the hold now. The worker is returned stopped (SIGSTOP): the
 * caller kills it, or continues it with SIGCONT. */
pid_t fault_run_released_holder(struct fault_run *run, int wait_ms);

/* The fence of worker's latest grant, from its log; 0 if it has none. */
uint64_t fault_run_last_fence(const struct fault_run *run, pid_t worker);

/* The number on the first line cmd (a shell command) prints, 0 when none
 * (a server's answer read with its command-line client). */
uint64_t fault_shell_number(const char *cmd);

/* A worker that has just released while its client keeps the hold: the
 * server still has the hold of the worker's last grant (still_kept, given
 * that grant's fence, asks the server), stopped (SIGSTOP) as
 * fault_run_released_holder returns it; 0 when no such moment came within
 * wait_ms. */
pid_t fault_run_keeper(struct fault_run *run, int wait_ms, bool (*still_kept)(uint64_t fence));

/* Kills keeper (SIGKILL; the keep-going file must be on), waits up to
 * lease_ms + 5 s for another worker's grant, ends the run and checks it
 * (scenario names it), prints how long the grant took after the keeper
 * was stopped (run->stopped_us), and fails the case when there was no
 * keeper (ending the run first) or no grant came. Returns that time, in
 * ms. */
int64_t fault_run_kill_a_keeper(struct fault_run *run, pid_t keeper, const char *scenario, int lease_ms);

/* Leaves keeper stopped (the keep-going file must be on) until another
 * worker is granted (up to lease_ms + 5 s: the kept hold's lease must run
 * out first), continues it, waits for its next grant (up to 5 s, times the
 * build's scale), ends the run and checks it (scenario names it): the
 * resumed keeper may not serve its kept hold, whose lease ended while it
 * was stopped (the checker counts a kept token after another worker's
 * grant as a stale grant). Prints how long the grant took after the
 * keeper was stopped, and fails the case when there was no keeper
 * (ending the run first), no grant came, or the keeper was not granted a
 * greater token. Returns that time, in ms. */
int64_t fault_run_pause_a_keeper(struct fault_run *run, pid_t keeper, const char *scenario, int lease_ms);

/* Ends a run of kept holds with no fault and checks it (scenario names
 * it): no violation, no loss, no failed check, and at least one grant of
 * a kept token. */
void fault_run_finish_kept_holds(struct fault_run *run, const char *scenario);

/* Runs of kept holds (lock caching), as cmocka setup and teardown: on,
 * the workers pause up to 200 ms between holds (longer than they hold, so
 * that a worker's next acquire may take over the hold its client kept)
 * and fault_run_cache_group() gives the configuration's cache group. */
int fault_run_caching_on(void **state);
int fault_run_caching_off(void **state);
/* "cache = { ... };" while caching is on, "" otherwise. */
const char *fault_run_cache_group(void);
/* Whether caching is on. */
bool fault_run_caching(void);

/* Stops (SIGSTOP) the worker holding the lock in the middle of its hold,
 * waiting up to wait_ms for one: it is stopped, then the holder file is
 * read again, and a worker that had already left its hold when the signal
 * landed is continued and the next holder tried. Returns the stopped PID
 * (the caller sends SIGCONT), or 0 if no holder could be caught. Without
 * this, a short hold often ends between reading the holder file and the
 * signal, and the pause then tests nothing. */
pid_t fault_run_pause_holder(const struct fault_run *run, int wait_ms);

/* While on, the workers go on past the run's duration: for a scenario
 * that must see grants after a fault, whenever the fault came. Turn it
 * off before fault_run_finish. */
void fault_run_keep_going(const struct fault_run *run, bool on);

/* Grants made since since_us, waiting up to max_ms for the first one; 0 if
 * none came. A paused holder is resumed only after the next holder's grant
 * (plus a margin for its read): resumed earlier, its late write could land
 * before anyone holds a newer token, and be admitted rightly. */
int fault_run_await_grant(const struct fault_run *run, int64_t since_us, int max_ms);

/* Waits for the workers (a stopped one is continued, one that overruns is
 * killed), runs the checker, prints one line of figures as a cmocka
 * comment, and fails the case on any violation. The report is kept for
 * the scenario's own pass figures; the dir is removed unless it failed. */
void fault_run_finish(struct fault_run *run, const char *scenario, struct history_report *report);

/* The same for a fault after which the backend documents that two holders
 * may overlap (a Redis restart without persistence, a session lock whose
 * session an operator ended): overlaps are counted and printed, not failed; the fence guard must still have refused every
 * stale write, and no increment may be lost. */
void fault_run_finish_overlap_documented(struct fault_run *run, const char *scenario,
                                         struct history_report *report);

/* The semaphore scenario every backend with semaphores runs: five workers
 * on a semaphore of two under config_text (leases of lease_ms), one holder
 * SIGKILLed once they are going. Fails the case unless the checker finds
 * no more than two holds at any moment and no token twice, two did hold
 * at once, and a grant came within the lease and a second after the kill
 * (the dead holder's permit came back). */
void fault_run_semaphore_holder_killed(const char *scenario, const char *config_text, int lease_ms);

/* The read/write scenario every backend with shared holds runs: two
 * writers and three readers under config_text (leases of lease_ms), a
 * writer stopped in the middle of its hold (between its read and its
 * write) until someone else has held past its lease, then continued. Fails
 * the case unless the checker finds no writer overlapping anyone, every
 * stale write refused, no shared read inside an admitted increment and no
 * lost update, and unless readers did hold together, someone was granted
 * while the writer was stopped, and its late write (or read) was refused. */
void fault_run_rw_writer_paused(const char *scenario, const char *config_text, int lease_ms);

/* The mixed-kind scenario every backend with shared holds and semaphores
 * runs: two writers, two readers and two workers asking for the same name
 * as a semaphore of two, a writer stopped in the middle of its hold until
 * someone else has held past its lease, then continued. Fails the case
 * unless the checker finds no writer meeting anyone, no reader meeting a
 * permit holder, no more than two permits at once, every stale write
 * refused and no lost update, and unless someone was granted while the
 * writer was stopped. (Whether a permit is ever granted depends on the
 * backend: one that refuses a request of another kind rather than queue
 * it lets the lock workers keep the name.) */
void fault_run_mixed_kinds_writer_paused(const char *scenario, const char *config_text, int lease_ms);

/* CLOCK_MONOTONIC in microseconds (the workers' clock). */
/* Three candidates in an election, each leading for half a lease at a
 * time: the leader stopped (SIGSTOP) past its lease, then continued, then
 * the next leader SIGKILLed. The checker proves of the leaders what it
 * proves of lock holders: no two leaderships overlap, terms grow, the
 * paused leader's late write is refused, no increment is lost. */
void fault_run_election_leader_paused_then_killed(const char *scenario, const char *config_text, int lease_ms);
int64_t fault_now_us(void);
void fault_sleep_ms(int64_t ms);

#endif
