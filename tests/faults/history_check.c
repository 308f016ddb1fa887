/* tests/faults/history_check.c - see history_check.h */
#include "history_check.h"

#include <dlock.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hold {
    int worker;
    unsigned long long fence;
    long long start, end;   /* us */
};

struct hold_list {
    struct hold *v;
    size_t n, cap;
};

static void violation(struct history_report *r, const char *fmt, ...)
{
    if (r->first_violation[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->first_violation, sizeof r->first_violation, fmt, ap);
    va_end(ap);
}

static bool push(struct hold_list *l, struct hold h)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        struct hold *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = h;
    return true;
}

static FILE *open_worker_log(const char *dir, int worker)
{
    char path[512];
    snprintf(path, sizeof path, "%s/worker-%d.log", dir, worker);
    return fopen(path, "r");
}

/* Builds the holds of one worker from its log. */
static void read_worker(const char *dir, int worker, struct hold_list *holds, struct history_report *r)
{
    FILE *f = open_worker_log(dir, worker);
    if (!f)
        return; /* a worker that never started has no holds */
    char line[256], what[32];
    long long t, a;
    unsigned long long fence;
    bool open_hold = false;
    struct hold h = { 0 };
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lld %31s", &t, what) != 2)
            continue; /* a line cut by SIGKILL */
        if (strcmp(what, "grant") == 0 && sscanf(line, "%*s %*s %llu %lld", &fence, &a) == 2) {
            if (open_hold)
                push(holds, h);
            h = (struct hold){ worker, fence, t, a };
            open_hold = true;
            r->grants++;
            if (t > r->last_grant_us)
                r->last_grant_us = t;
        } else if (strcmp(what, "valid") == 0 && open_hold && sscanf(line, "%*s %*s %lld", &a) == 1) {
            if (a > h.end)
                h.end = a;
        } else if (strcmp(what, "releasing") == 0 && open_hold) {
            /* The next holder may be granted from now on. */
            if (t < h.end)
                h.end = t;
        } else if ((strcmp(what, "release") == 0 || strcmp(what, "lost") == 0) && open_hold) {
            /* Released (or told it is lost) at t: held no longer than t. */
            if (t < h.end)
                h.end = t;
            r->lost_notes += what[0] == 'l';
            int code = 0;
            if (what[0] == 'r' && sscanf(line, "%*s %*s %d", &code) == 1 &&
                (code == DLOCK_ELOST || code == DLOCK_ENOTOWNER))
                r->releases_refused++; /* told at release time that the hold was gone */
            if (what[0] == 'r') {
                push(holds, h);
                open_hold = false;
            }
        } else if (strcmp(what, "lost") == 0) {
            r->lost_notes++;
        } else if (strcmp(what, "invalid") == 0) {
            r->invalid_checks++;
        } else if (strcmp(what, "fail") == 0) {
            r->failed_acquires++;
        }
    }
    if (open_hold) /* killed while holding: its window is what it was promised */
        push(holds, h);
    fclose(f);
}

static int by_start(const void *a, const void *b)
{
    const struct hold *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static void check_overlaps(struct hold_list *holds, struct history_report *r)
{
    qsort(holds->v, holds->n, sizeof *holds->v, by_start);
    /* Sweep: the hold reaching furthest so far; a later start before its
     * end by another worker is an overlap. */
    const struct hold *reach = NULL;
    for (size_t i = 0; i < holds->n; i++) {
        const struct hold *h = &holds->v[i];
        if (reach && reach->worker != h->worker && h->start < reach->end) {
            r->overlaps++;
            violation(r, "overlap: worker %d (fence %llu) held until %lld us, worker %d (fence %llu) granted at %lld us",
                      reach->worker, reach->fence, reach->end, h->worker, h->fence, h->start);
        }
        if (!reach || h->end > reach->end)
            reach = h;
    }
}

/* A token granted again to the worker that had it (lock caching: an
 * acquire took over the hold its client kept) is one continuous server
 * hold: the grant just before it, in time, is that worker's, with that
 * token. Another worker's grant between the two means the kept hold had
 * ended (lost, given back, broken, dropped by the server), and taking it
 * over was a stale grant. holds sorted by start. */
static void check_kept_tokens(const struct hold_list *holds, struct history_report *r)
{
    enum { MAX_WORKERS = 64 };
    unsigned long long last_fence[MAX_WORKERS] = { 0 };
    bool had[MAX_WORKERS] = { false };
    for (size_t i = 0; i < holds->n; i++) {
        const struct hold *h = &holds->v[i];
        /* 0: the worker could not read its token (the hold ended first). */
        if (h->worker < 0 || h->worker >= MAX_WORKERS || h->fence == 0)
            continue;
        if (had[h->worker] && last_fence[h->worker] == h->fence) {
            r->kept_grants++;
            const struct hold *before = &holds->v[i - 1];
            if (before->worker != h->worker || before->fence != h->fence) {
                r->stale_grants++;
                violation(r, "stale grant: worker %d took token %llu again at %lld us, after worker %d was "
                          "granted token %llu at %lld us", h->worker, h->fence, h->start, before->worker,
                          before->fence, before->start);
            }
        }
        had[h->worker] = true;
        last_fence[h->worker] = h->fence;
    }
}

/* The resource's log, in its own order. */
static void check_resource(const char *dir, struct history_report *r)
{
    char path[512];
    snprintf(path, sizeof path, "%s/resource.log", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[256], op[8], verdict[8];
    long long seq, t, before, after, last_shared_read_seq = -1;
    int worker, last_worker = -1;
    unsigned long long token, highest = 0, last_token = 0, highest_exclusive = 0;
    /* The value each worker read last (with its token), for lost updates. */
    enum { MAX_WORKERS = 64 };
    long long read_value[MAX_WORKERS], read_seq[MAX_WORKERS];
    unsigned long long read_token[MAX_WORKERS];
    memset(read_token, 0, sizeof read_token);
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lld %lld %7s %d %llu %7s %lld %lld", &seq, &t, op, &worker, &token, verdict, &before,
                   &after) != 8 ||
            worker < 0 || worker >= MAX_WORKERS) {
            r->unreadable++;
            violation(r, "unreadable resource log line: %s", line);
            continue;
        }
        bool admitted = strcmp(verdict, "ok") == 0, write = strcmp(op, "write") == 0;
        if (strcmp(op, "sread") == 0) {
            /* A shared holder's read (fenced_counter.h): admitted against
             * the exclusive holders' tokens only. */
            if (admitted && token < highest_exclusive) {
                r->stale_admitted++;
                violation(r, "stale shared read admitted: worker %d token %llu after writer token %llu (seq %lld)",
                          worker, token, highest_exclusive, seq);
            }
            if (!admitted && token >= highest_exclusive) {
                r->fence_disorder++;
                violation(r, "the guard refused reader %d's current token %llu (writers' highest %llu, seq %lld)",
                          worker, token, highest_exclusive, seq);
            }
            r->reads_refused += !admitted;
            if (admitted) {
                r->shared_reads++;
                last_shared_read_seq = seq;
                if (token > highest)
                    highest = token;
            }
            continue;
        }
        if (admitted && token < highest) {
            r->stale_admitted++;
            violation(r, "stale %s admitted: worker %d token %llu after token %llu (seq %lld)", op, worker, token,
                      highest, seq);
        }
        if (!admitted && token >= highest) {
            r->fence_disorder++;
            violation(r, "the guard refused worker %d's current token %llu (highest %llu, seq %lld)", worker, token,
                      highest, seq);
        }
        if (admitted) {
            if (last_worker >= 0 && worker != last_worker && token <= last_token) {
                r->fence_disorder++;
                violation(r, "token %llu admitted for worker %d after token %llu of worker %d (seq %lld)", token,
                          worker, last_token, last_worker, seq);
            }
            last_worker = worker;
            last_token = token;
            if (token > highest)
                highest = token;
            highest_exclusive = token;
        }
        if (!write) {
            r->reads_refused += !admitted;
            if (admitted) {
                read_value[worker] = before;
                read_token[worker] = token;
                read_seq[worker] = seq;
            }
            continue;
        }
        if (!admitted) {
            r->writes_refused++;
            continue;
        }
        r->writes_admitted++;
        r->counter = after;
        if (read_token[worker] == token && last_shared_read_seq > read_seq[worker]) {
            r->reader_saw_partial++;
            violation(r, "a reader read while worker %d (token %llu) was between its read and its admitted write "
                      "(seq %lld)", worker, token, seq);
        }
        if (read_token[worker] != token || read_value[worker] != before || after != before + 1) {
            r->lost_updates++;
            violation(r, "lost update: worker %d (token %llu) read %lld but replaced %lld with %lld (seq %lld)", worker,
                      token, read_value[worker], before, after, seq);
        }
    }
    fclose(f);
    if (r->counter != r->writes_admitted) {
        r->lost_updates++;
        violation(r, "the counter is %lld after %d admitted increments", r->counter, r->writes_admitted);
    }
}

int history_check(const char *dir, int nworkers, struct history_report *r)
{
    memset(r, 0, sizeof *r);
    struct hold_list holds = { 0 };
    for (int w = 0; w < nworkers; w++)
        read_worker(dir, w, &holds, r);
    check_overlaps(&holds, r);
    check_kept_tokens(&holds, r);
    check_resource(dir, r);
    free(holds.v);
    return r->overlaps + r->stale_grants + r->fence_disorder + r->stale_admitted + r->lost_updates + r->unreadable;
}

/* Read/write runs: a writer's window meets no other worker's; readers'
 * windows may meet each other. */
static void check_writer_overlaps(struct hold_list *holds, int first_reader, struct history_report *r)
{
    qsort(holds->v, holds->n, sizeof *holds->v, by_start);
    for (size_t i = 0; i < holds->n; i++) {
        const struct hold *a = &holds->v[i];
        for (size_t j = i + 1; j < holds->n && holds->v[j].start < a->end; j++) {
            const struct hold *b = &holds->v[j];
            bool both_readers = a->worker >= first_reader && b->worker >= first_reader;
            if (b->worker == a->worker || both_readers || b->end <= b->start)
                continue;
            r->overlaps++;
            violation(r, "overlap: %s %d (fence %llu) held until %lld us, %s %d (fence %llu) granted at %lld us",
                      a->worker >= first_reader ? "reader" : "writer", a->worker, a->fence, a->end,
                      b->worker >= first_reader ? "reader" : "writer", b->worker, b->fence, b->start);
        }
    }
}

static void sweep_holds(struct hold_list *holds, int permits, struct history_report *r);

int history_check_rw(const char *dir, int nworkers, int first_reader, struct history_report *r)
{
    memset(r, 0, sizeof *r);
    struct hold_list holds = { 0 };
    for (int w = 0; w < nworkers; w++)
        read_worker(dir, w, &holds, r);
    check_writer_overlaps(&holds, first_reader, r);
    sweep_holds(&holds, 0, r); /* readers only meet each other */
    check_resource(dir, r);
    free(holds.v);
    return r->overlaps + r->fence_disorder + r->stale_admitted + r->lost_updates + r->unreadable +
           r->reader_saw_partial;
}

int history_check_mixed(const char *dir, int nworkers, int first_reader, int first_permit, int permits,
                        struct history_report *r)
{
    memset(r, 0, sizeof *r);
    struct hold_list holds = { 0 }, permit_holds = { 0 };
    for (int w = 0; w < nworkers; w++)
        read_worker(dir, w, &holds, r);
    qsort(holds.v, holds.n, sizeof *holds.v, by_start);
    for (size_t i = 0; i < holds.n; i++) {
        const struct hold *a = &holds.v[i];
        if (a->worker >= first_permit && a->end > a->start && !push(&permit_holds, *a)) {
            r->unreadable++;
            violation(r, "out of memory checking %zu holds", holds.n);
        }
        for (size_t j = i + 1; j < holds.n && holds.v[j].start < a->end; j++) {
            const struct hold *b = &holds.v[j];
            if (b->worker == a->worker || b->end <= b->start)
                continue;
            int ka = a->worker < first_reader ? 0 : a->worker < first_permit ? 1 : 2;
            int kb = b->worker < first_reader ? 0 : b->worker < first_permit ? 1 : 2;
            if (ka == kb && ka != 0)
                continue; /* readers together, or permits together (counted below) */
            static const char *const kind[] = { "writer", "reader", "permit holder" };
            r->overlaps++;
            violation(r, "overlap: %s %d (fence %llu) held until %lld us, %s %d (fence %llu) granted at %lld us",
                      kind[ka], a->worker, a->fence, a->end, kind[kb], b->worker, b->fence, b->start);
        }
    }
    sweep_holds(&permit_holds, permits, r); /* r->most_at_once: the most permits at once */
    check_resource(dir, r);
    free(holds.v);
    free(permit_holds.v);
    return r->overlaps + r->fence_disorder + r->stale_admitted + r->lost_updates + r->unreadable +
           r->reader_saw_partial;
}

struct edge {
    long long t;
    int delta;      /* +1 a hold starts, -1 one ends */
    const struct hold *h;
};

static int by_time(const void *a, const void *b)
{
    const struct edge *x = a, *y = b;
    /* At one instant an end goes before a start: a permit handed from one
     * holder to the next at the same microsecond is not two at once. */
    return x->t != y->t ? (x->t < y->t ? -1 : 1) : x->delta - y->delta;
}

static int by_fence(const void *a, const void *b)
{
    const struct hold *x = a, *y = b;
    return x->fence < y->fence ? -1 : x->fence > y->fence;
}

/* A sweep over the holds' starts and ends: the most at one moment goes to
 * r->most_at_once, and with permits > 0 every moment with more than that
 * many is a violation. */
static void sweep_holds(struct hold_list *holds, int permits, struct history_report *r)
{
    struct edge *edges = malloc(2 * holds->n * sizeof *edges + 1);
    if (!edges) {
        r->unreadable++;
        violation(r, "out of memory checking %zu holds", holds->n);
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < holds->n; i++) {
        const struct hold *h = &holds->v[i];
        if (h->end <= h->start)
            continue; /* lost before it began: held at no moment */
        edges[n++] = (struct edge){ h->start, +1, h };
        edges[n++] = (struct edge){ h->end, -1, h };
    }
    qsort(edges, n, sizeof *edges, by_time);
    int now = 0;
    for (size_t i = 0; i < n; i++) {
        now += edges[i].delta;
        if (now > r->most_at_once)
            r->most_at_once = now;
        if (permits > 0 && now > permits) {
            r->overlaps++;
            violation(r, "%d holds at once of a semaphore of %d: worker %d (fence %llu) granted at %lld us", now,
                      permits, edges[i].h->worker, edges[i].h->fence, edges[i].t);
        }
    }
    free(edges);
}

/* Never more than permits at once, no token twice. */
static void check_permits(struct hold_list *holds, int permits, struct history_report *r)
{
    sweep_holds(holds, permits, r);
    qsort(holds->v, holds->n, sizeof *holds->v, by_fence);
    for (size_t i = 1; i < holds->n; i++)
        if (holds->v[i].fence == holds->v[i - 1].fence) {
            r->fence_disorder++;
            violation(r, "token %llu granted twice (workers %d and %d)", holds->v[i].fence, holds->v[i - 1].worker,
                      holds->v[i].worker);
        }
}

int history_check_permits(const char *dir, int nworkers, int permits, struct history_report *r)
{
    memset(r, 0, sizeof *r);
    struct hold_list holds = { 0 };
    for (int w = 0; w < nworkers; w++)
        read_worker(dir, w, &holds, r);
    check_permits(&holds, permits, r);
    free(holds.v);
    return r->overlaps + r->fence_disorder + r->unreadable;
}

static long long scan(const char *dir, int nworkers, long long from, long long to, bool count_grants)
{
    long long found = count_grants ? 0 : -1;
    for (int w = 0; w < nworkers; w++) {
        FILE *f = open_worker_log(dir, w);
        if (!f)
            continue;
        char line[256], what[32];
        long long t;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "%lld %31s", &t, what) != 2 || t < from)
                continue;
            if (count_grants && t < to && strcmp(what, "grant") == 0)
                found++;
            if (!count_grants && (strcmp(what, "lost") == 0 || strcmp(what, "invalid") == 0) &&
                (found < 0 || t < found))
                found = t;
        }
        fclose(f);
    }
    return found;
}

int history_grants_between(const char *dir, int nworkers, long long from_us, long long to_us)
{
    return (int)scan(dir, nworkers, from_us, to_us, true);
}

long long history_first_loss_after(const char *dir, int nworkers, long long from_us)
{
    return scan(dir, nworkers, from_us, 0, false);
}
