/* tests/faults/fault_worker.c CONFIG NAME DIR WORKER DURATION_MS HOLD_MS [PERMITS|shared|exclusive|elect]
 *
 * With "elect" the worker is a candidate in the election NAME: it
 * campaigns instead of acquiring, writes with its term as the token, and
 * resigns instead of releasing; the log is the same (a grant is an
 * election, its fence the term), so the checker proves of leaders what it
 * proves of holders.
 *
 * With PERMITS > 0 the worker holds one permit of the semaphore NAME
 * instead, and makes no increment (several hold at once by design): the
 * checker then counts holders at each moment against PERMITS. With
 * "shared" it is a reader: it holds NAME shared and only reads the counter
 * (fenced_counter_read_shared), and never names itself in DIR/holder (the
 * harness stops and kills writers); "exclusive" is a writer beside such
 * readers (it pauses for half a hold after each release).
 *
 * One contender of the fault suite: for DURATION_MS, takes the lock NAME
 * (waiting up to 2 s), and under it does a read-sleep-write increment of the
 * fenced counter in DIR with the hold's fence token, then releases. While it
 * holds, DIR/holder names its PID (for the harness to stop or kill it).
 * Every step goes to DIR/worker-<WORKER>.log, one line each:
 *   <t_us> invoke                       an acquire starts
 *   <t_us> grant <fence> <deadline_us>  granted; valid until deadline
 *   <t_us> fail <code>                  not granted (busy, timeout, error)
 *   <t_us> valid <deadline_us>          checked before the write: still valid
 *   <t_us> invalid <code>               checked: no longer valid
 *   <t_us> lost                         on_lost fired
 *   <t_us> releasing                    about to release
 *   <t_us> release <code>               released (or what release said)
 * Between holds it pauses up to 3 ms, or up to $DLOCK_FAULT_WORKER_PAUSE_MS
 * (a run with lock caching: a pause longer than the holds leaves the name
 * unasked for between some of a worker's holds, so that its next acquire
 * takes over the hold its client kept).
 * Read and write outcomes are in the resource's own log. A worker stopped
 * mid-hold resumes and carries on as a real process would: its late write is
 * what the fence guard must refuse. */
#include "fault_run.h"
#include "fenced_counter.h"

#include <dlock.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static FILE *log_file;

static void note(const char *fmt, ...)
{
    char line[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One write per line on an O_APPEND stream: the checker may read it
     * while we run, and a SIGKILL leaves whole lines. */
    fprintf(log_file, "%" PRId64 " %s\n", fenced_now_us(), line);
    fflush(log_file);
}

static void on_lost(dlock_lock *l, void *arg)
{
    (void)l;
    (void)arg;
    note("lost");
}

static void on_leadership_lost(dlock_election *e, void *arg)
{
    (void)e;
    (void)arg;
    note("lost");
}

/* The hold a worker has: a lock, or a leadership. */
struct hold {
    dlock_lock *lock;
    dlock_election *election;
};

static int take(struct hold *h, int64_t wait_ms)
{
    return h->election ? dlock_campaign(h->election, wait_ms) : dlock_acquire(h->lock, wait_ms);
}

static uint64_t token_of(struct hold *h)
{
    uint64_t token = 0;
    if (h->election)
        dlock_election_term(h->election, &token);
    else
        dlock_fence(h->lock, &token);
    return token;
}

static int64_t validity_of(struct hold *h)
{
    return h->election ? dlock_election_validity_ms(h->election) : dlock_validity_ms(h->lock);
}

static int give_up(struct hold *h)
{
    return h->election ? dlock_resign(h->election) : dlock_release(h->lock);
}

static void sleep_us(int64_t us)
{
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Holds for half to all of hold_us, then notes what the library says of
 * the hold's validity (a deadline, or that it is gone). */
static void hold_then_check(struct hold *h, int64_t hold_us)
{
    sleep_us(hold_us / 2 + rand() % (hold_us / 2 + 1));
    int64_t now = fenced_now_us(), valid = validity_of(h);
    if (valid > 0)
        note("valid %" PRId64, now + valid * 1000);
    else
        note("invalid %" PRId64, valid);
}

static void set_holder(const char *dir, pid_t pid)
{
    char path[512], tmp[520], text[32];
    snprintf(path, sizeof path, "%s/holder", dir);
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    int n = snprintf(text, sizeof text, "%d\n", (int)pid);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, text, (size_t)n) == n)
            rename(tmp, path);
        close(fd);
    }
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: fault_worker CONFIG NAME DIR WORKER DURATION_MS HOLD_MS "
                "[PERMITS|shared|exclusive|elect]\n");
        return 2;
    }
    bool reader = argc == 8 && strcmp(argv[7], "shared") == 0;
    bool writer_among_readers = argc == 8 && strcmp(argv[7], "exclusive") == 0;
    bool elect = argc == 8 && strcmp(argv[7], "elect") == 0;
    unsigned permits = argc == 8 && !reader && !writer_among_readers && !elect ? (unsigned)atoi(argv[7]) : 0;
    const char *config = argv[1], *name = argv[2], *dir = argv[3];
    int worker = atoi(argv[4]);
    int64_t duration_us = atoll(argv[5]) * 1000, hold_us = atoll(argv[6]) * 1000;
    char path[512];
    snprintf(path, sizeof path, "%s/worker-%d.log", dir, worker);
    log_file = fopen(path, "a");
    if (!log_file)
        return 1;
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, config);
    if (rc != DLOCK_OK) {
        note("fail %d open: %s", rc, dlock_errmsg());
        return 1;
    }
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.on_lost = on_lost;
    if (permits > 0) {
        o.mode = DLOCK_MODE_SEMAPHORE;
        o.permits = permits;
    }
    if (reader)
        o.mode = DLOCK_MODE_SHARED;
    struct hold h = { NULL, NULL };
    if (elect) {
        char value[32];
        int len = snprintf(value, sizeof value, "worker-%d", worker);
        if (dlock_election_new(c, name, strlen(name), value, (size_t)len, &h.election) != DLOCK_OK ||
            dlock_election_on_lost(h.election, on_leadership_lost, NULL) != DLOCK_OK)
            return 1;
    } else if (dlock_lock_new(c, name, strlen(name), &o, &h.lock) != DLOCK_OK) {
        return 1;
    }
    srand((unsigned)getpid());
    int64_t end = fenced_now_us() + duration_us;
    /* Beside readers, a writer starts one hold late: until then no writer
     * waits, so the readers, which start together, are granted together and
     * the run shows the name shared whatever the machine's load. Later, the
     * writers' turns (a writer never starved by readers) may leave the
     * readers no overlap at all on a slow build. */
    if (writer_among_readers)
        sleep_us(hold_us);
    /* Lines are fair on most backends: a waiter that gives up goes to the
     * back. A wait shorter than the holds that can stand ahead of it (the
     * other workers' turns, in a line of several kinds) could then time out
     * on every turn under load and never hold at all. */
    int64_t wait_ms = fault_worker_wait_ms(hold_us / 1000);
    const char *pause_env = getenv("DLOCK_FAULT_WORKER_PAUSE_MS");
    int64_t pause_us = pause_env ? atoll(pause_env) * 1000 : 3000;
    /* A run goes on past its duration while the test's keep-going file is
     * there: a scenario that waits for a grant after a fault keeps the
     * workers asking however late, on a loaded machine, the fault came;
     * never more than a minute past, should a failed test leave it. */
    char keep_going[600];
    snprintf(keep_going, sizeof keep_going, "%s/keep-going", dir);
    while (fenced_now_us() < end
           || (fenced_now_us() < end + 60 * 1000000LL && access(keep_going, F_OK) == 0)) {
        note("invoke");
        rc = take(&h, wait_ms);
        if (rc != DLOCK_OK) {
            note("fail %d", rc);
            sleep_us(10000 + rand() % 20000); /* a server down: do not spin */
            continue;
        }
        uint64_t fence = token_of(&h);
        int64_t now = fenced_now_us(), valid = validity_of(&h);
        /* The deadline is measured after the call, so it is never later
         * than what the library promised. */
        note("grant %" PRIu64 " %" PRId64, fence, valid > 0 ? now + valid * 1000 : now);
        if (!reader)
            set_holder(dir, getpid());
        int64_t value;
        if (permits > 0) {
            hold_then_check(&h, hold_us);
        } else if (reader) {
            fenced_counter_read_shared(dir, worker, fence, &value);
            hold_then_check(&h, hold_us);
        } else if (fenced_counter_read(dir, worker, fence, &value) == 1) {
            hold_then_check(&h, hold_us);
            /* No longer the one to pause once the write is on its way: a
             * holder paused after its write has nothing left for the guard
             * to refuse, and the scenarios pause a holder to see that. */
            set_holder(dir, 0);
            /* Written even when no longer valid: a process cannot check and
             * write atomically (it may be paused in between), and the guard
             * is what must catch it. */
            fenced_counter_write(dir, worker, fence, value + 1);
        }
        if (!reader)
            set_holder(dir, 0);
        /* From here the next holder may be granted (before our release
         * returns): the window this hold claims ends now. */
        note("releasing");
        note("release %d", give_up(&h));
        /* Beside readers, a writer pauses for half a hold: the run is about
         * exclusion and fences, and a backend whose waiters poll would
         * otherwise hardly ever let a reader in between two writers. */
        sleep_us(writer_among_readers ? hold_us / 2 : rand() % (pause_us > 0 ? pause_us : 1));
    }
    dlock_lock_free(h.lock);
    dlock_election_free(h.election);
    dlock_client_close(c);
    fclose(log_file);
    return 0;
}
