/* core/async.h - one non-blocking operation (a dlock_acquire_start() or a
 * dlock_release_start()) as the engine (async_engine.c) moves it and its
 * steps (async_ops.c) advance it. Not part of any public header.
 *
 * An operation is in one place at a time, all under client->async.mu:
 *   READY    in the ready queue, for the next free worker;
 *   RUNNING  a worker runs one step of it, with no core mutex held;
 *   PARKED   in an epoll set or the timer heap, until its descriptor is
 *            readable, its timer is due, or it is kicked (a cancel, its
 *            name set free in the client). The set is the workers' own,
 *            or, for a step that can be taken without blocking (reading
 *            an attempt's answer), the caller's loop's (loop_fd): then
 *            dlock_client_process() takes that step on the caller's
 *            thread, and the result needs no hop from a worker;
 *   DONE     its result is in the done queue, for dlock_client_process().
 * It is on its entry's list (e->aops) from start until it is delivered, so
 * a cancel, a free or a close can find it. A step runs on a worker only, so
 * the fields a step owns need no lock; the rest are the engine's. */
#ifndef DLOCK_CORE_ASYNC_H
#define DLOCK_CORE_ASYNC_H

#include "entry.h"

enum dlock__aop_kind { AOP_ACQUIRE, AOP_RELEASE };
enum dlock__aop_state { AOP_READY, AOP_RUNNING, AOP_PARKED, AOP_DONE };

/* What a step asks of the engine next. */
enum dlock__step {
    STEP_DONE,   /* finished: op->rc and op->error are its result */
    STEP_PARK,   /* wait for op->park_fd (may be -1) until op->park_until */
    STEP_AGAIN,  /* run another step soon (at the back of the ready queue); from a
                  * step on the caller's loop: on a worker */
    STEP_NEXT,   /* run the next step now, on the same thread (it may not block
                  * where this one may not) */
};

struct dlock__aop {
    struct dlock__timer timer;      /* parked with a deadline (engine) */
    struct dlock__aop *next;        /* in the ready, done or kick queue (engine) */
    struct dlock__aop *entry_prev, *entry_next; /* on entry->aops (engine) */
    dlock_lock *lock;
    struct dlock__entry *entry;
    dlock_done_fn done;
    void *arg;
    enum dlock__aop_kind kind;

    /* the engine's, under client->async.mu */
    enum dlock__aop_state state;
    bool kick_pending;              /* kicked while not parked: do not park */
    bool in_kick_list;
    struct dlock__aop *kick_next;   /* in the kick list */
    bool parked_local;              /* parked behind this client's own hold or contender */
    int running_wake_fd;            /* running: the worker's cancel signal */
    bool cancelled;                 /* its handle is being freed or the client closed */
    bool cancelled_seen;            /* cancelled, as the running step was told */
    bool fired;                     /* the last park ended with its descriptor readable */
    bool on_loop;                   /* parked in the loop's set (loop_fd), not the workers' */
    bool loop_ok;                   /* the step parking it may be taken on the loop (set by the step) */
    int park_fd;                    /* parked on it (the step's), -1: timer only */
    int polled_fd;                  /* the descriptor in the epoll set: park_fd or a dup */
    int64_t park_until;             /* monotonic ms, DLOCK__INFINITE for none */

    /* the steps' (async_ops.c), touched by one worker at a time */
    bool contending;                /* the entry's contender (past the local queue);
                                     * written atomically, read so by the engine */
    bool armed;                     /* wait_arm succeeded: wait_disarm is due */
    int armed_fd;                   /* the descriptor and deadline it was armed with */
    int64_t armed_until;
    bool slicing;                   /* waiting through a blocking wait, slice by slice */
    bool in_flight;                 /* an attempt sent (acquire_send), its answer not read */
    struct dlock_provider_io io;    /* that attempt's descriptor and deadline */
    int64_t in_flight_until;        /* monotonic ms: no answer by then, it is dropped */
    struct dlock__stamp t_send;     /* when that attempt was sent */
    bool on_loop_step;              /* this step runs on the caller's loop: it must not block */
    bool in_loop_queue;             /* ready, in the loop's queue (engine) */
    bool needs_worker;              /* its last step on the loop asked for a worker (engine) */
    bool kept_off_loop;             /* a blocking call on the loop's thread waits for it: never
                                     * parked or queued for the loop again (engine) */
    bool deferred;                  /* ended on the loop with deferred_rc; a worker ends it */
    bool deferred_give_back;        /* ... after giving back a grant that could not be kept */
    int deferred_rc;
    bool answer_kept;               /* read on the loop, to be acted on by a worker: */
    int answer_rc;                  /* acquire_recv's answer (DLOCK_ENOTSUP: send it again) */
    struct dlock_grant answer;
    bool was_busy;
    bool release_begun;             /* a release's first half is done (plan) */
    struct dlock__release_plan plan;
    unsigned attempt;
    uint64_t self;                  /* the holder number: the handle's */
    uint64_t gen;                   /* entry->cancel_gen at start */
    int64_t wait_ms, start_ms, deadline, wait_until;
    int rc;
    struct dlock_saved_error error; /* the detail, restored on the delivering thread */
};

/* ---- async_ops.c ---------------------------------------------------------- */
/* Runs one step of op on a worker thread; wake_fd is the worker's cancel
 * signal for a blocking provider wait. wake_fd -1: on the caller's loop
 * (dlock_client_process), where the step must not block: what would is
 * left to a worker (STEP_AGAIN). */
enum dlock__step dlock__aop_step(struct dlock__aop *op, int wake_fd);

/* ---- async_engine.c ---------------------------------------------------------- */
/* Takes op (filled in, state unset) into the engine: onto its entry's list
 * and into the ready queue, or straight into the done queue with op->rc
 * when done is true. Starts the threads with the first operation.
 * DLOCK_OK, or an error (then op was not taken: free it). */
int dlock__async_submit(dlock_client *c, struct dlock__aop *op, bool done);
/* The same, but the first step runs now, on the calling thread, as a step
 * on the caller's loop does (it must not block): a release sent from the
 * loop, or any operation of a provider whose calls never wait
 * (DLOCK_CAP_IN_PROCESS), starts without a hop to a worker. Its callback
 * still runs only in dlock_client_process(). */
int dlock__async_submit_here(dlock_client *c, struct dlock__aop *op);

#endif
