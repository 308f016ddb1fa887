/* core/async_ops.c - dlock_acquire_start() and dlock_release_start(), and
 * the steps a worker runs for them. An acquire goes as dlock_acquire()
 * does (core/acquire.c): behind this client's own hold or contender of the
 * name first, then one attempt per step, a wait between busy answers. Where
 * the blocking call blocks, a step parks instead: on the provider's
 * descriptor (wait_arm), on a timer (backoff, a passing failure, the queue
 * behind this client's own hold), or, for a provider that can only wait
 * by blocking, through its wait a slice at a time.
 *
 * A hold taken here is the handle's, not a thread's: its holder number is
 * the handle's (h->async_no), so any thread may release it, and the owner
 * the backend stores says the handle. */
#include "config.h"

#include "async.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

/* The longest a blocking provider wait holds a worker before the step
 * gives the worker back; the wait then goes on in the next step. */
#define SLICE_MS 50

static bool cancelled(struct dlock__aop *op)
{
    if (op->cancelled_seen)
        return true;
    struct dlock__entry *e = op->entry;
    pthread_mutex_lock(&e->mu);
    bool called = e->cancel_gen != op->gen;
    pthread_mutex_unlock(&e->mu);
    return called;
}

static enum dlock__step done(struct dlock__aop *op, int rc)
{
    op->rc = rc;
    dlock_error_save(&op->error);
    return STEP_DONE;
}

/* Ends an acquire: out of the provider's line if it was in it, no longer
 * the contender or a waiter, counted. */
static enum dlock__step acquire_done(struct dlock__aop *op, int rc)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    if (op->on_loop_step && rc != DLOCK_OK && op->was_busy) {
        /* Leaving the backend's line is a round trip: a worker ends it. */
        op->deferred = true;
        op->deferred_rc = rc;
        dlock_error_save(&op->error);
        return STEP_AGAIN;
    }
    struct dlock_saved_error saved;
    dlock_error_save(&saved);
    if (op->armed) {
        op->armed = false;
        int64_t none = 0;
        dlock__p_wait_disarm(c, e, false, &none);
    }
    if (rc != DLOCK_OK && op->was_busy)
        dlock__p_abandon(c, e);
    pthread_mutex_lock(&e->mu);
    if (op->contending) {
        __atomic_store_n(&op->contending, false, __ATOMIC_RELEASE);
        dlock__contender_end(c, e);
    } else {
        /* Given the turn but ending without contending: the next one
         * queued behind in the client looks instead. */
        dlock__async_entry_free(c, e);
    }
    e->waiters--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    dlock_error_restore(&saved, rc);
    dlock__acquire_account(c, e, rc, op->start_ms, 0);
    return done(op, rc);
}

static enum dlock__step park_until(struct dlock__aop *op, int fd, int64_t until)
{
    op->park_fd = fd;
    op->park_until = until;
    op->loop_ok = false;
    return STEP_PARK;
}

/* Parked on its armed wait, in the caller's loop's set when what follows
 * a wake-up (wait_disarm, then sending the attempt) needs no thread. */
static enum dlock__step park_armed(struct dlock__aop *op)
{
    dlock_client *c = op->entry->client;
    enum dlock__step step = park_until(op, op->armed_fd, op->armed_until);
    op->loop_ok = (dlock__p_can_send(c) || dlock__p_in_process(c)) && !op->cancelled_seen;
    return step;
}

/* Parked on its attempt's socket, in the caller's loop's set unless the
 * operation is being cancelled: then a worker reads the answer, since
 * the thread that cancels (a free, a close) may be the loop's, waiting
 * for it. */
static enum dlock__step park_in_flight(struct dlock__aop *op)
{
    enum dlock__step step = park_until(op, op->io.fd, op->in_flight_until);
    op->loop_ok = !op->cancelled_seen;
    return step;
}

/* Behind this client's own hold or contender: becomes the contender when
 * the name is free here, or parks until it is (kicked) or time runs out. */
static enum dlock__step queue_locally(struct dlock__aop *op)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    pthread_mutex_lock(&e->mu);
    if (e->count > 0 && e->cached)
        dlock__cache_drop_soon(c, e); /* given back first: holds taken here are the handle's */
    if (e->count > 0 || e->contending) {
        pthread_mutex_unlock(&e->mu);
        if (op->wait_ms == 0)
            return acquire_done(op, dlock_seterr(DLOCK_EBUSY, "lock '%s' is held by another thread or handle of "
                                                 "this client", dlock__entry_show(e)));
        if (dlock__now_ms() >= op->deadline)
            return acquire_done(op, dlock_seterr(DLOCK_ETIMEDOUT, "lock '%s': not granted within %lld ms "
                                                 "(another thread or handle of this client holds it)",
                                                 dlock__entry_show(e), (long long)op->wait_ms));
        return park_until(op, -1, op->deadline);
    }
    dlock__contender_begin(c, e, op->lock, op->self, -1);
    __atomic_store_n(&op->contending, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&e->mu);
    return STEP_NEXT; /* the attempt, which decides itself where it is made */
}

/* One slice of a blocking provider wait, on this worker. */
static enum dlock__step wait_slice(struct dlock__aop *op, int wake_fd)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    if (wake_fd < 0)
        return STEP_AGAIN; /* a blocking wait needs a worker and its cancel signal */
    int64_t left = op->wait_until - dlock__now_ms();
    if (left < 0)
        left = 0;
    pthread_mutex_lock(&e->mu);
    e->contender_wake_fd = wake_fd;
    pthread_mutex_unlock(&e->mu);
    int rc = dlock__p_wait(c, e, left < SLICE_MS ? left : SLICE_MS, wake_fd);
    pthread_mutex_lock(&e->mu);
    e->contender_wake_fd = -1;
    pthread_mutex_unlock(&e->mu);
    dlock__drain(wake_fd);
    if (rc != DLOCK_OK && rc != DLOCK_ETIMEDOUT) {
        dlock__metric_inc(&c->metrics.backend_errors);
        return acquire_done(op, rc);
    }
    if (rc == DLOCK_OK || dlock__now_ms() >= op->wait_until)
        op->slicing = false; /* notified, or the pause is over: look again */
    return STEP_AGAIN;
}

/* After a busy answer: waits for the release notification or the pause. */
static enum dlock__step wait_after_busy(struct dlock__aop *op, int64_t pause, int wake_fd)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    int64_t now = dlock__now_ms();
    if (!dlock__p_can_wait(c))
        return park_until(op, -1, now + pause);
    int64_t timeout = pause;
    int fd = -1;
    int rc = dlock__p_wait_arm(c, e, &timeout, &fd);
    if (rc == DLOCK_OK) {
        op->armed = true;
        op->armed_fd = fd;
        op->armed_until = now + timeout;
        return park_armed(op);
    }
    if (rc != DLOCK_ENOTSUP) {
        dlock__metric_inc(&c->metrics.backend_errors);
        return acquire_done(op, rc);
    }
    op->slicing = true;
    op->wait_until = now + pause;
    return wait_slice(op, wake_fd);
}

/* What follows an attempt's answer rc (with *g), sent at t_send. */
static enum dlock__step answered(struct dlock__aop *op, int rc, const struct dlock_grant *g, struct dlock__stamp t_send,
                                 int wake_fd)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    if (op->on_loop_step && rc != DLOCK_OK) {
        /* On the loop a grant is kept here (no round trip); anything else
         * may need one (sending again, leaving the line, arming a wait):
         * a worker takes it from here. */
        op->answer_kept = true;
        op->answer_rc = rc;
        op->answer = *g;
        op->t_send = t_send;
        dlock_error_save(&op->error);
        return STEP_AGAIN;
    }
    dlock__metric_inc(&c->metrics.attempts);
    unsigned attempt_no = op->attempt++;
    if (rc == DLOCK_OK && op->on_loop_step) {
        /* Giving back a grant that cannot be looked after is a round trip:
         * a worker makes it. */
        rc = dlock__hold_grant_kept(c, e, op->lock, op->self, t_send, g);
        if (rc != DLOCK_OK) {
            op->deferred = op->deferred_give_back = true;
            op->deferred_rc = rc;
            dlock_error_save(&op->error);
            return STEP_AGAIN;
        }
        return acquire_done(op, DLOCK_OK);
    }
    if (rc == DLOCK_OK)
        return acquire_done(op, dlock__hold_grant(c, e, op->lock, op->self, t_send, g));
    /* A cancel that came while the attempt was in flight (its kick was
     * spent on waiting for the answer) ends the acquire now rather than
     * after the pause that follows a busy answer. */
    if (cancelled(op))
        return acquire_done(op, dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled",
                                             dlock__entry_show(e)));
    int64_t now = dlock__now_ms();
    if (rc != DLOCK_EBUSY) {
        dlock__metric_inc(&c->metrics.backend_errors);
        /* A passing failure is tried again within the budget, as the
         * blocking call does; any other ends the operation. */
        if (rc != DLOCK_EUNAVAILABLE || g->retry_hint_ms < 0 || op->wait_ms == 0 ||
            now + g->retry_hint_ms >= op->deadline)
            return acquire_done(op, rc);
        int64_t pause = g->retry_hint_ms;
        int64_t floor = dlock__backoff_ms(attempt_no, c->config.retry_base_ms, c->config.retry_cap_ms);
        if (pause < floor)
            pause = floor;
        return park_until(op, -1, now + pause < op->deadline ? now + pause : op->deadline);
    }
    op->was_busy = true;
    dlock__metric_inc(&c->metrics.busy);
    if (op->wait_ms == 0)
        return acquire_done(op, dlock_seterr(DLOCK_EBUSY, "lock '%s' is held by another owner",
                                             dlock__entry_show(e)));
    if (now >= op->deadline)
        return acquire_done(op, dlock_seterr(DLOCK_ETIMEDOUT, "lock '%s': not granted within %lld ms",
                                             dlock__entry_show(e), (long long)op->wait_ms));
    int64_t pause = dlock__pause_after_busy(c, attempt_no, g->retry_hint_ms);
    if (op->deadline != DLOCK__INFINITE && pause > op->deadline - now)
        pause = op->deadline - now;
    return wait_after_busy(op, pause, wake_fd);
}

/* One attempt: its round trip parked on the provider's descriptor where
 * the provider can send it so, else made on this worker. */
static enum dlock__step attempt(struct dlock__aop *op, int wake_fd)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    struct dlock_grant g = { .fence = 0, .has_fence = 0, .retry_hint_ms = -1 };
    struct dlock__stamp t_send = dlock__stamp_now();
    if (dlock__p_can_send(c)) {
        int rc = dlock__p_acquire_send(c, e, &op->io);
        if (rc == DLOCK_OK) {
            dlock__metric_inc(&c->metrics.attempts_parked);
            op->in_flight = true;
            op->t_send = t_send;
            op->in_flight_until = dlock__now_ms() + op->io.timeout_ms;
            return park_in_flight(op);
        }
        if (rc != DLOCK_ENOTSUP)
            return answered(op, rc, &g, t_send, wake_fd);
    }
    if (op->on_loop_step)
        return STEP_AGAIN; /* a round trip on a thread: a worker makes it */
    return answered(op, dlock__p_acquire(c, e, &g), &g, t_send, wake_fd);
}

/* An attempt in flight: its answer once the descriptor fired, else more
 * waiting until its deadline. A kick or a cancel does not end it: a grant
 * may be on its way, and must be read to be kept or given back. */
/* A round trip in flight whose deadline came: whether its answer came
 * meanwhile all the same (the loop that was to read it was busy), when it
 * is read (a grant is never dropped unread). Sets op->fired. */
static bool answered_late(struct dlock__aop *op)
{
    struct pollfd ready = { .fd = op->io.fd, .events = POLLIN };
    op->fired = poll(&ready, 1, 0) == 1;
    return op->fired;
}

static enum dlock__step in_flight(struct dlock__aop *op, int wake_fd)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    struct dlock_grant g = { .fence = 0, .has_fence = 0, .retry_hint_ms = -1 };
    if (op->fired) {
        int rc = dlock__p_acquire_recv(c, e, &op->io, &g);
        if (rc == DLOCK_PROVIDER_AGAIN)
            return park_in_flight(op);
        op->in_flight = false;
        /* Validity counts from the first sending, which the attempt made
         * again here may only repeat. */
        if (rc == DLOCK_ENOTSUP && !op->on_loop_step)
            rc = dlock__p_acquire(c, e, &g);
        return answered(op, rc, &g, op->t_send, wake_fd);
    }
    if (dlock__now_ms() < op->in_flight_until)
        return park_in_flight(op);
    if (answered_late(op))
        return in_flight(op, wake_fd);
    dlock__p_acquire_drop(c, e, &op->io);
    op->in_flight = false;
    int rc = dlock_seterr(DLOCK_EUNAVAILABLE, "lock '%s': the %s backend did not answer an attempt within %lld ms",
                          dlock__entry_show(e), c->provider->name, (long long)op->io.timeout_ms);
    return answered(op, rc, &g, op->t_send, wake_fd);
}

static enum dlock__step acquire_step(struct dlock__aop *op, int wake_fd)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    if (op->in_flight)
        return in_flight(op, wake_fd);
    if (op->deferred) {
        op->deferred = false;
        if (op->deferred_give_back) {
            op->deferred_give_back = false;
            dlock__hold_release(c, e);
        }
        dlock_error_restore(&op->error, op->deferred_rc);
        return acquire_done(op, op->deferred_rc);
    }
    if (op->answer_kept) {
        op->answer_kept = false;
        struct dlock_grant g = op->answer;
        int rc = op->answer_rc;
        if (rc == DLOCK_ENOTSUP)
            rc = dlock__p_acquire(c, e, &g); /* the answer could not be read: send it again */
        else
            dlock_error_restore(&op->error, rc);
        return answered(op, rc, &g, op->t_send, wake_fd);
    }
    if (op->armed) {
        int64_t now = dlock__now_ms();
        int64_t left = op->armed_until - now;
        int rc = dlock__p_wait_disarm(c, e, op->fired, &left);
        if (rc == DLOCK_EBUSY && op->fired) {
            /* Nothing that ends the wait: the same wait goes on (for as long
             * as the provider still wants), unless it is over or called
             * off, when it is ended properly. */
            if (!cancelled(op) && left > 0) {
                op->armed_until = now + left;
                return park_armed(op);
            }
            left = 0;
            rc = dlock__p_wait_disarm(c, e, false, &left);
        }
        op->armed = false;
        if (rc != DLOCK_OK && rc != DLOCK_ETIMEDOUT) {
            dlock__metric_inc(&c->metrics.backend_errors);
            return acquire_done(op, rc);
        }
    }
    if (cancelled(op))
        return acquire_done(op, dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled",
                                             dlock__entry_show(e)));
    if (!op->contending)
        return queue_locally(op);
    if (op->slicing)
        return wait_slice(op, wake_fd);
    return attempt(op, wake_fd);
}

static enum dlock__step release_done(struct dlock__aop *op, int rc)
{
    struct dlock__entry *e = op->entry;
    return done(op, dlock__hold_release_end(e->client, e, &op->plan, rc));
}

static enum dlock__step release_step(struct dlock__aop *op, int wake_fd);

/* A release in flight: its answer once the descriptor fired, else more
 * waiting until its deadline, when it is dropped. */
static enum dlock__step release_in_flight(struct dlock__aop *op, int wake_fd)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    if (!op->fired && dlock__now_ms() < op->in_flight_until)
        return park_in_flight(op);
    if (!op->fired && !answered_late(op)) {
        dlock__p_release_drop(c, e, &op->io);
        op->in_flight = false;
        return release_done(op, dlock_seterr(DLOCK_EUNAVAILABLE, "lock '%s': the %s backend did not answer a "
                                             "release within %lld ms (the hold runs out with its lease)",
                                             dlock__entry_show(e), c->provider->name,
                                             (long long)op->io.timeout_ms));
    }
    int rc = dlock__p_release_recv(c, e, &op->io);
    if (rc == DLOCK_PROVIDER_AGAIN)
        return park_in_flight(op);
    op->in_flight = false;
    if (rc == DLOCK_ENOTSUP)
        return release_step(op, wake_fd); /* made again with release, on a thread that may block */
    return release_done(op, rc);
}

/* A release: its first half on the calling thread unless the watchdog or
 * the expiry thread is busy with the hold, its round trip parked where the
 * provider can send it so, else made on a worker. */
static enum dlock__step release_step(struct dlock__aop *op, int wake_fd)
{
    struct dlock__entry *e = op->entry;
    dlock_client *c = e->client;
    if (op->in_flight)
        return release_in_flight(op, wake_fd);
    if (!op->release_begun) {
        if (op->on_loop_step && !dlock__p_can_send_release(c))
            return STEP_AGAIN;
        if (!dlock__hold_release_begin(c, e, wake_fd < 0, &op->plan))
            return STEP_AGAIN;
        op->release_begun = true;
        if (!op->plan.call_backend)
            return release_done(op, DLOCK_OK);
        int rc = dlock__p_release_send(c, e, &op->io);
        if (rc == DLOCK_OK) {
            dlock__metric_inc(&c->metrics.releases_parked);
            op->in_flight = true;
            op->in_flight_until = dlock__now_ms() + op->io.timeout_ms;
            return park_in_flight(op);
        }
        if (rc != DLOCK_ENOTSUP)
            return release_done(op, rc);
    }
    if (op->on_loop_step)
        return STEP_AGAIN; /* a round trip on a thread: a worker makes it */
    return release_done(op, dlock__p_release(c, e));
}

enum dlock__step dlock__aop_step(struct dlock__aop *op, int wake_fd)
{
    /* A provider whose calls never wait may be called on the loop as on a
     * worker: only a blocking wait (wait_slice) still needs a worker. */
    op->on_loop_step = wake_fd < 0 && !dlock__p_in_process(op->entry->client);
    if (op->kind == AOP_RELEASE)
        return release_step(op, wake_fd);
    return acquire_step(op, wake_fd);
}

/* ---- the public calls ---------------------------------------------------------- */

static struct dlock__aop *aop_new(dlock_lock *h, enum dlock__aop_kind kind, dlock_done_fn fn, void *arg)
{
    struct dlock__aop *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->lock = h;
    op->entry = h->entry;
    op->done = fn;
    op->arg = arg;
    op->kind = kind;
    op->self = h->async_no;
    return op;
}

/* DLOCK_EINVAL when h is being freed (a callback run by dlock_lock_free). */
static int not_freeing(const dlock_lock *h, const char *call)
{
    if (h->freeing)
        return dlock_seterr(DLOCK_EINVAL, "%s: the handle is being freed", call);
    return DLOCK_OK;
}

int dlock_acquire_start(dlock_lock *h, int64_t wait_ms, dlock_done_fn fn, void *arg)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    if (not_freeing(h, "dlock_acquire_start") != DLOCK_OK)
        return DLOCK_EINVAL;
    if (!fn)
        return dlock_seterr(DLOCK_EINVAL, "dlock_acquire_start: done is NULL");
    dlock_client *c = e->client;
    uint64_t me = dlock__thread_no();
    pthread_mutex_lock(&e->mu);
    /* A hold whose release is under way is not in the way: the start
     * queues behind it in the client. */
    bool mine = e->count > 0 && (e->holder == h->async_no || e->holder == me) && !e->release_pending;
    pthread_mutex_unlock(&e->mu);
    if (mine)
        return dlock_seterr(DLOCK_EDEADLK, "lock '%s': this handle (or the calling thread) already holds it; "
                            "holds taken with dlock_acquire_start() are not reentrant", dlock__entry_show(e));
    int rc;
    struct dlock__aop *op = aop_new(h, AOP_ACQUIRE, fn, arg);
    if (!op)
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for a non-blocking acquire");
    op->wait_ms = wait_ms;
    op->start_ms = dlock__now_ms();
    op->deadline = dlock__deadline_after(op->start_ms, wait_ms);
    pthread_mutex_lock(&e->mu);
    op->gen = e->cancel_gen;
    e->waiters++;
    pthread_mutex_unlock(&e->mu);
    /* Its first step made from here where that never blocks (an
     * in-process backend, or one that sends its attempt without a thread):
     * the attempt goes out now, not after a turn of the caller's loop. */
    rc = dlock__p_in_process(c) || dlock__p_can_send(c) ? dlock__async_submit_here(c, op)
                                                        : dlock__async_submit(c, op, false);
    if (rc != DLOCK_OK) {
        pthread_mutex_lock(&e->mu);
        e->waiters--;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        free(op);
    }
    return rc;
}

int dlock_release_start(dlock_lock *h, dlock_done_fn fn, void *arg)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    if (not_freeing(h, "dlock_release_start") != DLOCK_OK)
        return DLOCK_EINVAL;
    if (!fn)
        return dlock_seterr(DLOCK_EINVAL, "dlock_release_start: done is NULL");
    struct dlock__aop *op = aop_new(h, AOP_RELEASE, fn, arg);
    if (!op)
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for a non-blocking release");
    int rc = dlock__hold_own(h, true);
    if (rc != DLOCK_OK && rc != DLOCK_ELOST) {
        free(op);
        return rc;
    }
    bool inner = rc == DLOCK_OK && e->count > 1; /* a thread's reentered hold: one level less */
    if (inner)
        e->count--;
    else
        e->release_pending = true;
    pthread_mutex_unlock(&e->mu);
    op->rc = DLOCK_OK;
    dlock_seterr(DLOCK_OK, "%s", "released");
    dlock_error_save(&op->error);
    dlock_client *c = e->client;
    /* Sent from here where that never blocks: a hand-off then starts
     * without waiting for a worker to wake. */
    if (!inner && (dlock__p_can_send_release(c) || dlock__p_in_process(c)))
        rc = dlock__async_submit_here(c, op);
    else
        rc = dlock__async_submit(c, op, inner);
    if (rc != DLOCK_OK) {
        pthread_mutex_lock(&e->mu);
        if (inner)
            e->count++;
        else
            e->release_pending = false;
        pthread_mutex_unlock(&e->mu);
        free(op);
    }
    return rc;
}
