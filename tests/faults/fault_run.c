/* tests/faults/fault_run.c - see fault_run.h */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fault_run.h"

#include "fenced_counter.h"

#include <errno.h>
#include <stdbool.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void fault_run_semaphore_holder_killed(const char *scenario, const char *config_text, int lease_ms)
{
    struct fault_run run;
    struct history_report r;
    fault_run_start_permits(&run, config_text, 5, 5000 * fault_run_scale(), 40, 2);
    fault_sleep_ms(1500);
    fault_run_keep_going(&run, true); /* a kill late in the run still meets workers */
    /* Kept going, the workers hold again and again; on a machine whose
     * cores are all taken the next hold may still be seconds away. */
    pid_t holder = fault_run_holder(&run, 10000);
    assert_true(holder > 0);
    int64_t killed_at = fault_now_us();
    kill(holder, SIGKILL);
    fault_sleep_ms(lease_ms + 1000);
    int grants = history_grants_between(run.dir, run.nworkers, killed_at, fault_now_us());
    fault_run_keep_going(&run, false);
    fault_run_finish(&run, scenario, &r);
    assert_true(grants >= 1);
    assert_int_equal(r.most_at_once, 2); /* the permits were used, not one at a time */
}

/* A run already going: stops a writer in the middle of its hold, keeps it
 * stopped until someone else has held past its lease (plus a margin for
 * that holder's read), continues it and checks the run. Returns how many
 * grants came while it was stopped. */
static int writer_paused_past_its_lease(struct fault_run *run, const char *scenario, int lease_ms,
                                        struct history_report *r)
{
    fault_sleep_ms(1500);
    fault_run_keep_going(run, true);
    pid_t writer = fault_run_pause_holder(run, 7000);
    assert_true(writer > 0);
    int64_t paused_at = fault_now_us();
    fault_sleep_ms(lease_ms);
    int grants = fault_run_await_grant(run, paused_at + (int64_t)lease_ms * 1000, 3 * lease_ms);
    fault_sleep_ms(300); /* the next holder has read */
    fault_run_keep_going(run, false);
    kill(writer, SIGCONT);
    bool keep_asked = getenv("DLOCK_FAULTS_KEEP") != NULL;
    if (grants == 0) { /* what the others did meanwhile is in the logs */
        printf("# no grant from %lld ms after the pause for %d ms; the run began %lld ms before the pause\n",
               (long long)lease_ms, 3 * lease_ms, (long long)((paused_at - run->started_us) / 1000));
        setenv("DLOCK_FAULTS_KEEP", "1", 1);
    }
    fault_run_finish(run, scenario, r);
    if (grants == 0 && !keep_asked)
        unsetenv("DLOCK_FAULTS_KEEP"); /* this run's logs only */
    return grants;
}

/* A run in which nobody was granted while the writer was stopped checked
 * its history (fault_run_finish) but not the stopped writer's late write:
 * the fault did not happen as meant. That happens when the machine's cores
 * are all taken for the pause's seconds; such a run is done once more, and
 * a second one is a failure. */
enum { PAUSED_WRITER_ATTEMPTS = 2 };

static bool paused_writer_inconclusive(int grants, int attempt, const char *scenario)
{
    if (grants > 0 || attempt + 1 >= PAUSED_WRITER_ATTEMPTS)
        return false;
    printf("# %s: nobody was granted while the writer was stopped; the run is done again\n", scenario);
    return true;
}

void fault_run_rw_writer_paused(const char *scenario, const char *config_text, int lease_ms)
{
    struct fault_run run;
    struct history_report r;
    int grants = 0;
    for (int attempt = 0; attempt < PAUSED_WRITER_ATTEMPTS; attempt++) {
        /* Holds of half to all of half a lease: long enough to catch a
         * writer inside one, short enough that on a loaded machine the
         * writers get turns between the readers' holds. */
        fault_run_start_rw(&run, config_text, 2, 3, 9000 * fault_run_scale(), lease_ms / 2);
        grants = writer_paused_past_its_lease(&run, scenario, lease_ms, &r);
        if (!paused_writer_inconclusive(grants, attempt, scenario))
            break;
    }
    assert_true(grants >= 1);
    /* The stopped writer's late write (or its read, when the stop landed
     * between its grant and its read) was refused. */
    assert_true(r.writes_refused + r.reads_refused >= 1);
    assert_true(r.most_at_once >= 2);     /* readers held together */
    assert_true(r.shared_reads >= 1 && r.writes_admitted >= 1);
}

static void start_workers(struct fault_run *run, const char *config_text, int nworkers, int duration_ms,
                          int hold_ms, int permits, int readers, int permit_workers);
static void start_candidates(struct fault_run *run, const char *config_text, int nworkers, int duration_ms,
                             int hold_ms);

void fault_run_mixed_kinds_writer_paused(const char *scenario, const char *config_text, int lease_ms)
{
    struct fault_run run;
    struct history_report r;
    int grants = 0;
    for (int attempt = 0; attempt < PAUSED_WRITER_ATTEMPTS; attempt++) {
        /* Holds of a quarter lease: six workers in one line of three kinds
         * get several turns each in the run's length, even on a loaded
         * machine. */
        start_workers(&run, config_text, 6, 9000 * fault_run_scale(), lease_ms / 4, 2, 2, 2);
        grants = writer_paused_past_its_lease(&run, scenario, lease_ms, &r);
        if (!paused_writer_inconclusive(grants, attempt, scenario))
            break;
    }
    assert_true(grants >= 1);
    assert_true(r.writes_admitted >= 1);
    /* Permits may never be granted: where a request in another kind is
     * refused (DLOCK_EINVAL) rather than queued, four lock workers can keep
     * the name busy as a lock throughout; the figure is printed. */
}

void fault_run_election_leader_paused_then_killed(const char *scenario, const char *config_text, int lease_ms)
{
    struct fault_run run;
    struct history_report r;
    start_candidates(&run, config_text, 3, 9000 * fault_run_scale(), lease_ms / 2);
    fault_sleep_ms(1500);
    fault_run_keep_going(&run, true);
    pid_t leader = fault_run_pause_holder(&run, 7000);
    assert_true(leader > 0);
    int64_t paused_at = fault_now_us();
    fault_sleep_ms(lease_ms);
    int while_paused = fault_run_await_grant(&run, paused_at + (int64_t)lease_ms * 1000, 3 * lease_ms);
    fault_sleep_ms(300); /* the next leader has read */
    kill(leader, SIGCONT);
    fault_sleep_ms(500);
    pid_t next = fault_run_holder(&run, 7000);
    assert_true(next > 0);
    int64_t killed_at = fault_now_us();
    kill(next, SIGKILL);
    int after_kill = fault_run_await_grant(&run, killed_at, 3 * lease_ms + 2000);
    fault_run_keep_going(&run, false);
    fault_run_finish(&run, scenario, &r);
    assert_true(while_paused >= 1);
    assert_true(after_kill >= 1);
    /* The paused leader learnt of its loss, and its late write (or read)
     * with the old term was refused. */
    assert_true(r.lost_notes + r.invalid_checks >= 1);
    assert_true(r.writes_refused + r.reads_refused >= 1);
}

int64_t fault_now_us(void)
{
    return fenced_now_us();
}

void fault_sleep_ms(int64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int fault_run_scale(void)
{
    const char *v = getenv("DLOCK_FAULTS_LONG");
    int n = v ? atoi(v) : 1;
    return n < 1 ? 1 : n;
}

/* fault_worker is built in tests/faults, which the test environment names
 * ($DLOCK_FAULT_WORKER_DIR); under libtool the real binary is in .libs and
 * a wrapper script one up. Without it, it is looked for beside this program. */
static void worker_path(char *out, size_t size)
{
    const char *dir_env = getenv("DLOCK_FAULT_WORKER_DIR");
    if (dir_env) {
        snprintf(out, size, "%s/.libs/fault_worker", dir_env);
        if (access(out, X_OK) != 0)
            snprintf(out, size, "%s/fault_worker", dir_env);
        return;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(out, size, "tests/faults/fault_worker");
        return;
    }
    self[n] = 0;
    char *dir = dirname(self);
    snprintf(out, size, "%s/fault_worker", dir);
    if (access(out, X_OK) != 0)
        snprintf(out, size, "%s/../fault_worker", dir);
}

static void start_as(struct fault_run *run, const char *config_text, int nworkers, int duration_ms, int hold_ms,
                     int permits, int readers, int permit_workers, bool elect);

static void start_workers(struct fault_run *run, const char *config_text, int nworkers, int duration_ms,
                          int hold_ms, int permits, int readers, int permit_workers)
{
    start_as(run, config_text, nworkers, duration_ms, hold_ms, permits, readers, permit_workers, false);
}

/* Candidates in an election instead of lock workers (fault_worker's
 * "elect"). */
static void start_candidates(struct fault_run *run, const char *config_text, int nworkers, int duration_ms,
                             int hold_ms)
{
    start_as(run, config_text, nworkers, duration_ms, hold_ms, 0, 0, 0, true);
}

static void start_as(struct fault_run *run, const char *config_text, int nworkers, int duration_ms, int hold_ms,
                     int permits, int readers, int permit_workers, bool elect)
{
    memset(run, 0, sizeof *run);
    run->permits = permits;
    run->readers = readers;
    run->permit_workers = permit_workers;
    assert_true(nworkers > 0 && nworkers <= FAULT_RUN_MAX_WORKERS);
    snprintf(run->dir, sizeof run->dir, "/tmp/dlock-faults-XXXXXX");
    assert_non_null(mkdtemp(run->dir));
    char config[256], worker[PATH_MAX + 32], id[16], duration[24], hold[24], n[16];
    snprintf(n, sizeof n, "%d", permits);
    snprintf(config, sizeof config, "%s/dlock.conf", run->dir);
    FILE *f = fopen(config, "w");
    assert_non_null(f);
    fputs(config_text, f);
    fclose(f);
    assert_int_equal(fenced_counter_init(run->dir), 0);
    worker_path(worker, sizeof worker);
    if (access(worker, X_OK) != 0)
        fail_msg("cannot find the fault_worker program (looked for %s)", worker);
    run->nworkers = nworkers;
    run->duration_ms = duration_ms;
    run->hold_ms = hold_ms;
    snprintf(duration, sizeof duration, "%d", duration_ms);
    snprintf(hold, sizeof hold, "%d", hold_ms);
    run->started_us = fault_now_us();
    for (int i = 0; i < nworkers; i++) {
        snprintf(id, sizeof id, "%d", i);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (elect)
                execl(worker, worker, config, "fault-suite-election", run->dir, id, duration, hold, "elect",
                      (char *)NULL);
            else if (permits > 0 && permit_workers == 0)
                execl(worker, worker, config, "fault-suite-semaphore", run->dir, id, duration, hold, n, (char *)NULL);
            else if (i >= nworkers - permit_workers) /* the lock's own name, as a semaphore */
                execl(worker, worker, config, "fault-suite-lock", run->dir, id, duration, hold, n, (char *)NULL);
            else if (i >= nworkers - permit_workers - readers)
                execl(worker, worker, config, "fault-suite-lock", run->dir, id, duration, hold, "shared", (char *)NULL);
            else if (readers > 0 || permit_workers > 0)
                execl(worker, worker, config, "fault-suite-lock", run->dir, id, duration, hold, "exclusive",
                      (char *)NULL);
            else
                execl(worker, worker, config, "fault-suite-lock", run->dir, id, duration, hold, (char *)NULL);
            fprintf(stderr, "cannot run %s: %s\n", worker, strerror(errno));
            _exit(127);
        }
        run->pids[i] = pid;
    }
}

void fault_run_start(struct fault_run *run, const char *config_text, int nworkers, int duration_ms, int hold_ms)
{
    start_workers(run, config_text, nworkers, duration_ms, hold_ms, 0, 0, 0);
}

void fault_run_start_rw(struct fault_run *run, const char *config_text, int writers, int readers, int duration_ms,
                        int hold_ms)
{
    start_workers(run, config_text, writers + readers, duration_ms, hold_ms, 0, readers, 0);
}

void fault_run_start_permits(struct fault_run *run, const char *config_text, int nworkers, int duration_ms,
                             int hold_ms, int permits)
{
    start_workers(run, config_text, nworkers, duration_ms, hold_ms, permits, 0, 0);
}

pid_t fault_run_holder(const struct fault_run *run, int wait_ms)
{
    char path[256];
    snprintf(path, sizeof path, "%s/holder", run->dir);
    int64_t end = fault_now_us() + (int64_t)wait_ms * 1000;
    do {
        FILE *f = fopen(path, "r");
        int pid = 0;
        if (f) {
            if (fscanf(f, "%d", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        if (pid > 0)
            return (pid_t)pid;
        fault_sleep_ms(5);
    } while (fault_now_us() < end);
    return 0;
}

/* Whether worker i's log ends with its release: it is between holds, in
 * its pause, and has not asked again. Lines are whole (one write each). */
static bool log_ends_with_release(const struct fault_run *run, int i)
{
    char path[256], tail[512];
    snprintf(path, sizeof path, "%s/worker-%d.log", run->dir, i);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = 0;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        long from = size > (long)sizeof tail - 1 ? size - (long)sizeof tail + 1 : 0;
        if (fseek(f, from, SEEK_SET) == 0)
            n = fread(tail, 1, sizeof tail - 1, f);
    }
    fclose(f);
    tail[n] = 0;
    if (n == 0 || tail[n - 1] != '\n')
        return false;
    tail[n - 1] = 0;
    const char *last = strrchr(tail, '\n');
    last = last ? last + 1 : tail;
    long long t;
    char what[32];
    return sscanf(last, "%lld %31s", &t, what) == 2 && strcmp(what, "release") == 0;
}

uint64_t fault_run_last_fence(const struct fault_run *run, pid_t worker)
{
    for (int i = 0; i < run->nworkers; i++) {
        if (run->pids[i] != worker)
            continue;
        char path[256], line[256], what[32];
        snprintf(path, sizeof path, "%s/worker-%d.log", run->dir, i);
        FILE *f = fopen(path, "r");
        if (!f)
            return 0;
        unsigned long long fence, last = 0;
        long long t;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "%lld %31s %llu", &t, what, &fence) == 3 && strcmp(what, "grant") == 0)
                last = fence;
        fclose(f);
        return last;
    }
    return 0;
}

pid_t fault_run_released_holder(struct fault_run *run, int wait_ms)
{
    /* The holder file empties before the worker's write and its release:
     * a worker killed at that moment dies holding, and its window in the
     * history is then the whole validity it was promised. So the worker is
     * stopped, and taken only if its log, read while it cannot move, ends
     * with its release. */
    int64_t end = fault_now_us() + (int64_t)wait_ms * 1000;
    while (fault_now_us() < end) {
        for (int i = 0; i < run->nworkers; i++) {
            pid_t pid = run->pids[i];
            if (pid <= 0 || !log_ends_with_release(run, i) || kill(pid, SIGSTOP) != 0)
                continue;
            int status;
            if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status))
                continue;
            run->stopped_us = fault_now_us();
            if (log_ends_with_release(run, i))
                return pid;
            kill(pid, SIGCONT);
        }
        fault_sleep_ms(1);
    }
    return 0;
}

uint64_t fault_shell_number(const char *cmd)
{
    char line[64] = "";
    FILE *f = popen(cmd, "r");
    if (!f)
        return 0;
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    pclose(f);
    return strtoull(line, NULL, 10);
}

pid_t fault_run_keeper(struct fault_run *run, int wait_ms, bool (*still_kept)(uint64_t fence))
{
    int64_t end = fault_now_us() + (int64_t)wait_ms * 1000;
    while (fault_now_us() < end) {
        pid_t released = fault_run_released_holder(run, (int)((end - fault_now_us()) / 1000) + 1);
        if (released <= 0)
            continue;
        uint64_t fence = fault_run_last_fence(run, released);
        if (fence > 0 && still_kept(fence))
            return released;
        kill(released, SIGCONT);
    }
    return 0;
}

/* No keeper came: the run is ended (its workers would go on into the next
 * case) before the case fails. */
static void fail_without_a_keeper(struct fault_run *run, const char *scenario)
{
    struct history_report r;
    fault_run_keep_going(run, false);
    fault_run_finish(run, scenario, &r);
    fail_msg("%s: no worker was stopped while its client kept its hold", scenario);
}

int64_t fault_run_kill_a_keeper(struct fault_run *run, pid_t keeper, const char *scenario, int lease_ms)
{
    struct history_report r;
    if (keeper <= 0)
        fail_without_a_keeper(run, scenario);
    /* Timed from the stop, not from now: the server's lease of the kept
     * hold has been running out since its last renewal before it, and the
     * check that it was kept took a while. */
    int64_t stopped_at = run->stopped_us, killed_at = fault_now_us();
    kill(keeper, SIGKILL);
    /* The scenario is a keeper killed between holds: one killed holding
     * would claim its whole validity in the history, which a backend whose
     * server frees a dead client's locks at once (local) does not give. */
    bool between_holds = false;
    for (int i = 0; i < run->nworkers; i++)
        if (run->pids[i] == keeper)
            between_holds = log_ends_with_release(run, i);
    int after = fault_run_await_grant(run, killed_at, lease_ms + 5000);
    int64_t granted_after_ms = (fault_now_us() - stopped_at) / 1000;
    fault_run_keep_going(run, false);
    fault_run_finish(run, scenario, &r);
    printf("# the next grant came %lld ms after the keeper was stopped, %lld ms after the kill (lease %d ms)\n",
           (long long)granted_after_ms, (long long)(granted_after_ms - (killed_at - stopped_at) / 1000), lease_ms);
    assert_true(between_holds); /* checked after the run ended: a failure leaves no worker going */
    assert_true(after >= 1);
    return granted_after_ms;
}

int64_t fault_run_pause_a_keeper(struct fault_run *run, pid_t keeper, const char *scenario, int lease_ms)
{
    struct history_report r;
    if (keeper <= 0)
        fail_without_a_keeper(run, scenario);
    uint64_t kept_fence = fault_run_last_fence(run, keeper);
    int64_t stopped_at = run->stopped_us;
    int after = fault_run_await_grant(run, stopped_at, lease_ms + 5000);
    int64_t granted_after_ms = (fault_now_us() - stopped_at) / 1000;
    fault_sleep_ms(300); /* the next holder's read, before the keeper can be heard */
    kill(keeper, SIGCONT);
    int64_t resumed_at = fault_now_us();
    while (fault_run_last_fence(run, keeper) <= kept_fence &&
           fault_now_us() - resumed_at < (int64_t)5000 * 1000 * fault_run_scale())
        fault_sleep_ms(20);
    uint64_t next_fence = fault_run_last_fence(run, keeper);
    fault_run_keep_going(run, false);
    fault_run_finish(run, scenario, &r);
    printf("# the next grant came %lld ms after the keeper stopped (lease %d ms); resumed, it was granted fence %llu "
           "after its kept %llu\n",
           (long long)granted_after_ms, lease_ms, (unsigned long long)next_fence, (unsigned long long)kept_fence);
    assert_true(after >= 1);
    assert_true(next_fence > kept_fence);
    return granted_after_ms;
}

void fault_run_finish_kept_holds(struct fault_run *run, const char *scenario)
{
    struct history_report r;
    fault_run_finish(run, scenario, &r);
    assert_true(r.kept_grants >= 1);
    assert_int_equal(r.lost_notes + r.invalid_checks, 0);
}

static bool caching;

int fault_run_caching_on(void **state)
{
    (void)state;
    caching = true;
    return setenv("DLOCK_FAULT_WORKER_PAUSE_MS", "200", 1);
}

int fault_run_caching_off(void **state)
{
    (void)state;
    caching = false;
    return unsetenv("DLOCK_FAULT_WORKER_PAUSE_MS");
}

const char *fault_run_cache_group(void)
{
    return caching ? "cache = { idle_ms = 1000; cooldown_ms = 0; };\n" : "";
}

bool fault_run_caching(void)
{
    return caching;
}

pid_t fault_run_pause_holder(const struct fault_run *run, int wait_ms)
{
    int64_t end = fault_now_us() + (int64_t)wait_ms * 1000;
    while (fault_now_us() < end) {
        pid_t pid = fault_run_holder(run, (int)((end - fault_now_us()) / 1000) + 1);
        if (pid <= 0)
            return 0;
        if (kill(pid, SIGSTOP) != 0)
            continue;
        /* The workers are our children: WUNTRACED reports the stop itself,
         * so the holder file read below is what the stopped worker left. */
        int status;
        if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status))
            return 0;
        if (fault_run_holder(run, 0) == pid)
            return pid;
        kill(pid, SIGCONT);
    }
    return 0;
}

int fault_run_await_grant(const struct fault_run *run, int64_t since_us, int max_ms)
{
    int64_t end = fault_now_us() + (int64_t)max_ms * 1000;
    for (;;) {
        int n = history_grants_between(run->dir, run->nworkers, since_us, fault_now_us());
        if (n > 0 || fault_now_us() >= end)
            return n;
        fault_sleep_ms(20);
    }
}

void fault_run_keep_going(const struct fault_run *run, bool on)
{
    char path[200];
    snprintf(path, sizeof path, "%s/keep-going", run->dir);
    if (on) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
    } else {
        unlink(path);
    }
}

static void reap(struct fault_run *run)
{
    /* Every worker ends on its own after its duration (or, kept going,
     * from now) plus one acquire wait; give them that and a margin, then
     * stop the rest. */
    int64_t ends_us = run->started_us + (int64_t)run->duration_ms * 1000;
    if (fault_now_us() > ends_us)
        ends_us = fault_now_us();
    int64_t deadline = ends_us + (fault_worker_wait_ms(run->hold_ms) + 6000) * 1000;
    for (int i = 0; i < run->nworkers; i++) {
        if (run->pids[i] <= 0)
            continue;
        kill(run->pids[i], SIGCONT);
        int status;
        while (waitpid(run->pids[i], &status, WNOHANG) == 0) {
            if (fault_now_us() > deadline) {
                kill(run->pids[i], SIGKILL);
                waitpid(run->pids[i], &status, 0);
                break;
            }
            fault_sleep_ms(20);
        }
        run->pids[i] = 0;
    }
}

/* A passing run's logs go, unless a person asked to keep them. */
static void remove_logs(const struct fault_run *run)
{
    if (getenv("DLOCK_FAULTS_KEEP")) { /* for a look at the logs of a passing run */
        printf("# logs kept in %s\n", run->dir);
        return;
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", run->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", run->dir);
}

static void finish(struct fault_run *run, const char *scenario, struct history_report *r, bool overlap_ok)
{
    reap(run);
    if (run->permit_workers > 0) {
        int first_reader = run->nworkers - run->permit_workers - run->readers;
        int violations = history_check_mixed(run->dir, run->nworkers, first_reader, first_reader + run->readers,
                                             run->permits, r);
        printf("# %s: %d grants, %d increments admitted, %d shared reads, at most %d permits at once, %d stale "
               "writes and %d stale reads refused, %d losses reported, counter %lld, violations %d\n",
               scenario, r->grants, r->writes_admitted, r->shared_reads, r->most_at_once, r->writes_refused,
               r->reads_refused, r->lost_notes + r->invalid_checks + r->releases_refused, r->counter, violations);
        fflush(stdout);
        if (violations)
            fail_msg("%s: %d violation(s) in %s; the first: %s", scenario, violations, run->dir, r->first_violation);
        if (r->grants == 0)
            fail_msg("%s: no worker was ever granted the name (see %s/worker-*.log)", scenario, run->dir);
        remove_logs(run);
        return;
    }
    if (run->permits > 0) {
        int violations = history_check_permits(run->dir, run->nworkers, run->permits, r);
        printf("# %s: %d grants, at most %d holding at once (semaphore of %d), %d losses reported, violations %d\n",
               scenario, r->grants, r->most_at_once, run->permits, r->lost_notes + r->invalid_checks + r->releases_refused,
               violations);
        fflush(stdout);
        if (violations)
            fail_msg("%s: %d violation(s) in %s; the first: %s", scenario, violations, run->dir, r->first_violation);
        if (r->grants == 0)
            fail_msg("%s: no worker was ever granted a permit (see %s/worker-*.log)", scenario, run->dir);
        remove_logs(run);
        return;
    }
    if (run->readers > 0) {
        int violations = history_check_rw(run->dir, run->nworkers, run->nworkers - run->readers, r);
        printf("# %s: %d grants, %d increments admitted, %d shared reads, at most %d holding at once, %d stale "
               "writes and %d stale reads refused, %d losses reported, counter %lld, violations %d\n",
               scenario, r->grants, r->writes_admitted, r->shared_reads, r->most_at_once, r->writes_refused,
               r->reads_refused, r->lost_notes + r->invalid_checks + r->releases_refused, r->counter, violations);
        fflush(stdout);
        if (violations)
            fail_msg("%s: %d violation(s) in %s; the first: %s", scenario, violations, run->dir,
                     r->first_violation);
        if (r->grants == 0)
            fail_msg("%s: no worker was ever granted the lock (see %s/worker-*.log)", scenario, run->dir);
        remove_logs(run);
        return;
    }
    int violations = history_check(run->dir, run->nworkers, r);
    /* A server that drops holds silently (a restart without them): until
     * the holders' next renewals tell them, they believe they hold, and a
     * kept hold may be taken over; the fence refuses their writes. */
    if (overlap_ok)
        violations -= r->overlaps + r->stale_grants;
    printf("# %s: %d grants (%d of a kept token), %d increments admitted, %d stale writes and %d stale reads "
           "refused, %d losses reported (%d on_lost, %d by release), counter %lld, %d overlapping holds and %d "
           "stale grants%s, violations %d\n",
           scenario, r->grants, r->kept_grants, r->writes_admitted, r->writes_refused, r->reads_refused,
           r->lost_notes + r->invalid_checks + r->releases_refused, r->lost_notes, r->releases_refused, r->counter,
           r->overlaps, r->stale_grants, overlap_ok ? " (documented for this fault)" : "", violations);
    fflush(stdout);
    if (violations)
        fail_msg("%s: %d violation(s) in %s; the first: %s", scenario, violations, run->dir, r->first_violation);
    /* A run in which nobody ever held the lock proves nothing. */
    if (r->grants == 0)
        fail_msg("%s: no worker was ever granted the lock (see %s/worker-*.log)", scenario, run->dir);
    remove_logs(run);
}

void fault_run_finish(struct fault_run *run, const char *scenario, struct history_report *r)
{
    finish(run, scenario, r, false);
}

void fault_run_finish_overlap_documented(struct fault_run *run, const char *scenario, struct history_report *r)
{
    finish(run, scenario, r, true);
}
