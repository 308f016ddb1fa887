/* core/acquire.c - one acquire, top to bottom: reentry, queueing behind the
 * client's other threads, contending with the backend (one attempt, then a
 * native wait or a backoff, until granted, out of time, cancelled or
 * failed), and cancellation. A grant is handed to core/hold.c.
 *
 * Inside a client only one thread at a time talks to the backend about a
 * name (the contender); the others queue on the entry's condition
 * variable. That keeps in-process contention off the server and means a
 * provider never sees two operations on one lock at once. */
#include "config.h"

#include "entry.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int64_t effective_lease(const dlock_client *c, const dlock_lock *h)
{
    return h->options.lease_ms > 0 ? h->options.lease_ms : c->config.lease_ms;
}

/* How long to pause after a busy answer. */
int64_t dlock__pause_after_busy(const dlock_client *c, unsigned attempt, int64_t hint_ms)
{
    if (dlock__p_can_wait(c))
        return hint_ms >= 0 ? hint_ms + 1 : c->config.retry_cap_ms;
    int64_t pause = dlock__backoff_ms(attempt, c->config.retry_base_ms, c->config.retry_cap_ms);
    if (hint_ms >= 0 && hint_ms + 1 < pause)
        pause = hint_ms + 1;
    return pause;
}

/* Sleeps up to ms unless the wake fd fires (cancel). */
static int idle_wait(int wake_fd, int64_t ms)
{
    struct pollfd p = { .fd = wake_fd, .events = POLLIN };
    int timeout = ms > INT_MAX ? INT_MAX : (int)ms;
    int n = poll(&p, wake_fd >= 0 ? 1 : 0, timeout);
    if (n < 0 && errno != EINTR)
        return dlock_seterr(DLOCK_EINTERNAL, "poll failed: %s", strerror(errno));
    return DLOCK_OK;
}

/* Waits, queued behind other threads of this client, until this thread may
 * contend. Called and returns with e->mu held. */
/* Whether an acquire must wait in this client before it may contend or
 * take over a cached hold (e->mu held). */
static bool kept_waiting_here(const struct dlock__entry *e)
{
    return e->contending || (e->count > 0 && !(e->cached && !e->cache_dropping));
}

static int queue_locally(struct dlock__entry *e, int64_t wait_ms, int64_t deadline, uint64_t gen)
{
    if (kept_waiting_here(e) && wait_ms != 0)
        dlock__async_entry_off_loop(e->client, e);
    while (kept_waiting_here(e)) {
        if (e->cancel_gen != gen)
            return dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled", dlock__entry_show(e));
        if (wait_ms == 0 && e->cached)
            return dlock_seterr(DLOCK_EBUSY, "lock '%s': this client's cached hold of it is being given back",
                                dlock__entry_show(e));
        if (wait_ms == 0)
            return dlock_seterr(DLOCK_EBUSY, "lock '%s' is held by another thread of this client", dlock__entry_show(e));
        if (dlock__now_ms() >= deadline)
            return dlock_seterr(DLOCK_ETIMEDOUT, "lock '%s': not granted within %lld ms (another thread of "
                                "this client holds it)", dlock__entry_show(e), (long long)wait_ms);
        if (deadline == DLOCK__INFINITE) {
            pthread_cond_wait(&e->cv, &e->mu);
        } else {
            struct timespec ts;
            dlock__abstime(deadline, &ts);
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
    }
    /* Woken because the contender stepped down, which it does when it was
     * cancelled too: a cancel that came meanwhile is for us as well. */
    if (e->cancel_gen != gen)
        return dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled", dlock__entry_show(e));
    return DLOCK_OK;
}

static int contend_loop(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                        int64_t wait_ms, int64_t deadline, uint64_t gen, int wake_fd, int64_t first_send_ms,
                        bool *was_busy);

/* Talks to the backend until granted, out of time, cancelled or failed; a
 * provider that queued us is told when we give up. first_send_ms: the
 * monotonic time the first attempt may count as sent at (the acquire's
 * start, when nothing kept it waiting since; 0 to read the clock). */
static int contend(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                   int64_t wait_ms, int64_t deadline, uint64_t gen, int wake_fd, int64_t first_send_ms)
{
    bool was_busy = false;
    int rc = contend_loop(c, e, h, self, wait_ms, deadline, gen, wake_fd, first_send_ms, &was_busy);
    if (rc != DLOCK_OK && was_busy) {
        struct dlock_saved_error saved;
        dlock_error_save(&saved);
        dlock__p_abandon(c, e);
        dlock_error_restore(&saved, rc);
    }
    return rc;
}

static int contend_loop(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                        int64_t wait_ms, int64_t deadline, uint64_t gen, int wake_fd, int64_t first_send_ms,
                        bool *was_busy)
{
    for (unsigned attempt = 0;; attempt++) {
        struct dlock_grant g = { .fence = 0, .has_fence = 0, .retry_hint_ms = -1 };
        /* An earlier monotonic stamp only schedules the first renewal
         * sooner; the validity counts from the boot clock, read now. */
        struct dlock__stamp t_send = attempt == 0 && first_send_ms > 0
                                         ? (struct dlock__stamp){ first_send_ms, dlock__boot_ms(), dlock__now_us() }
                                         : dlock__stamp_now();
        int rc = dlock__p_acquire(c, e, &g);
        dlock__metric_inc(&c->metrics.attempts);

        if (rc == DLOCK_OK)
            return dlock__hold_grant(c, e, h, self, t_send, &g);
        if (rc != DLOCK_EBUSY) {
            dlock__metric_inc(&c->metrics.backend_errors);
            /* A failure the provider calls passing (retry_hint_ms >= 0) is
             * tried again here, where the wait is cancellable and bounded
             * by the caller's budget; any other is returned at once. */
            if (rc != DLOCK_EUNAVAILABLE || g.retry_hint_ms < 0 || wait_ms == 0 ||
                dlock__now_ms() + g.retry_hint_ms >= deadline)
                return rc; /* the provider set the detail */
            struct dlock_saved_error saved;
            dlock_error_save(&saved);
            int64_t pause = g.retry_hint_ms;
            int64_t floor = dlock__backoff_ms(attempt, c->config.retry_base_ms, c->config.retry_cap_ms);
            if (pause < floor) /* a hint of 0 again and again must not spin */
                pause = floor;
            if (deadline != DLOCK__INFINITE && pause > deadline - dlock__now_ms())
                pause = deadline - dlock__now_ms();
            idle_wait(wake_fd, pause > 0 ? pause : 0);
            dlock__drain(wake_fd);
            pthread_mutex_lock(&e->mu);
            bool cancelled = e->cancel_gen != gen;
            pthread_mutex_unlock(&e->mu);
            if (cancelled)
                return dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled (the backend was saying: %s)",
                                    dlock__entry_show(e), saved.text);
            continue;
        }
        *was_busy = true;
        dlock__metric_inc(&c->metrics.busy);
        if (wait_ms == 0)
            return dlock_seterr(DLOCK_EBUSY, "lock '%s' is held by another owner", dlock__entry_show(e));
        int64_t now = dlock__now_ms();
        if (now >= deadline)
            return dlock_seterr(DLOCK_ETIMEDOUT, "lock '%s': not granted within %lld ms", dlock__entry_show(e),
                                (long long)wait_ms);
        int64_t pause = dlock__pause_after_busy(c, attempt, g.retry_hint_ms);
        if (deadline != DLOCK__INFINITE && pause > deadline - now)
            pause = deadline - now;
        if (dlock__p_can_wait(c))
            rc = dlock__p_wait(c, e, pause, wake_fd);
        else
            rc = idle_wait(wake_fd, pause);
        if (rc != DLOCK_OK && rc != DLOCK_ETIMEDOUT) {
            dlock__metric_inc(&c->metrics.backend_errors);
            return rc;
        }
        if (wake_fd >= 0)
            dlock__drain(wake_fd);
        pthread_mutex_lock(&e->mu);
        bool cancelled = e->cancel_gen != gen;
        pthread_mutex_unlock(&e->mu);
        if (cancelled)
            return dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled", dlock__entry_show(e));
    }
}

int dlock_acquire(dlock_lock *h, int64_t wait_ms)
{
    return dlock__acquire_for(h, wait_ms, dlock__thread_no());
}

int dlock__acquire_for(dlock_lock *h, int64_t wait_ms, uint64_t self)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    int rc;
    dlock_client *c = e->client;
    int64_t start = dlock__now_ms();
    int64_t deadline = dlock__deadline_after(start, wait_ms);

    pthread_mutex_lock(&e->mu);
    /* This thread's hold whose non-blocking release is under way is not
     * entered again: the release would end it under the new acquire. Its
     * end is waited for (one round trip), then this is a new hold. */
    if (e->count > 0 && e->holder == self && e->release_pending)
        dlock__async_entry_off_loop(c, e);
    while (e->count > 0 && e->holder == self && e->release_pending)
        pthread_cond_wait(&e->cv, &e->mu);
    if (e->count > 0 && e->holder == self) {
        if (e->lost) {
            pthread_mutex_unlock(&e->mu);
            return dlock_seterr(DLOCK_ELOST, "lock '%s': this thread's hold was lost (%s); release it "
                                "before acquiring again", dlock__entry_show(e), e->lost_reason);
        }
        if (e->downgraded) {
            pthread_mutex_unlock(&e->mu);
            return dlock_seterr(DLOCK_EDEADLK, "lock '%s': this thread holds it shared since it downgraded "
                                "it; taking it exclusively again would wait for that hold forever (release "
                                "it first)", dlock__entry_show(e));
        }
        e->count++;
        pthread_mutex_unlock(&e->mu);
        dlock__metric_inc(&c->metrics.reentries);
        return DLOCK_OK;
    }
    if (e->own_holder || __atomic_load_n(&c->own_holders, __ATOMIC_RELAXED) > 0) {
        pthread_mutex_unlock(&e->mu);
        if ((rc = dlock__check_own_holds(c, e, self)) != DLOCK_OK)
            return rc;
        pthread_mutex_lock(&e->mu);
    }
    uint64_t gen = e->cancel_gen;
    e->waiters++;
    bool kept_waiting = kept_waiting_here(e);
    bool hit = false;
    for (;;) {
        rc = queue_locally(e, wait_ms, deadline, gen);
        if (rc != DLOCK_OK || !(e->count > 0 && e->cached))
            break;
        /* This client's cached hold of the name: taken over with no round
         * trip, or (other options, lost, too little validity) given back
         * first, which the next turn of the loop waits for. */
        if ((hit = dlock__cache_hit(c, e, h, self, kept_waiting ? dlock__now_ms() : start)))
            break;
        kept_waiting = true;
    }
    int wake_fd = -1;
    if (rc == DLOCK_OK && !hit) {
        wake_fd = dlock__thread_wake_fd();
        dlock__contender_begin(c, e, h, self, wake_fd);
        pthread_mutex_unlock(&e->mu);
        if (wake_fd < 0)
            rc = dlock_seterr(DLOCK_EINTERNAL, "cannot create an eventfd for waiting: %s", strerror(errno));
        else
            rc = contend(c, e, h, self, wait_ms, deadline, gen, wake_fd, kept_waiting ? 0 : start);
        pthread_mutex_lock(&e->mu);
        dlock__contender_end(c, e);
    }
    /* The grant's own time ends the wait: no clock read for it. */
    int64_t granted_at = rc == DLOCK_OK ? e->granted_at_ms : 0;
    e->waiters--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    dlock__acquire_account(c, e, rc, start, granted_at);
    return rc;
}

void dlock__contender_begin(dlock_client *c, struct dlock__entry *e, const dlock_lock *h, uint64_t self,
                            int wake_fd)
{
    e->contending = true;
    e->contender_wake_fd = wake_fd;
    if (e->owner_thread != self || !e->owner[0]) {
        /* Formatted once per holder that contends, not per acquire. A
         * shared or semaphore handle is a holder of its own, so its id
         * says which. */
        if (e->own_holder)
            snprintf(e->owner, sizeof e->owner, "%s:%llu/%u", c->client_id, (unsigned long long)self,
                     e->holder_no);
        else
            snprintf(e->owner, sizeof e->owner, "%s:%llu", c->client_id, (unsigned long long)self);
        e->owner_thread = self;
    }
    e->plock.lease_ms = effective_lease(c, h);
    e->plock.flags = h->options.flags & DLOCK_LOCK_FAIR; /* what the backend sees */
    if (!e->own_holder) /* a downgrade made the last hold shared */
        e->plock.mode = DLOCK_MODE_EXCLUSIVE;
}

void dlock__contender_end(dlock_client *c, struct dlock__entry *e)
{
    e->contending = false;
    e->contender_wake_fd = -1;
    /* The name is free in this client again: the next acquire queued
     * behind it looks (blocking ones wait on e->cv, which the caller
     * broadcasts; non-blocking ones are parked in the engine). */
    dlock__async_entry_free(c, e);
}

void dlock__acquire_account(dlock_client *c, struct dlock__entry *e, int rc, int64_t start, int64_t granted_at)
{
    switch (rc) {
    case DLOCK_OK: {
        int64_t waited = (granted_at > 0 ? granted_at : dlock__now_ms()) - start;
        dlock__histogram_observe(&c->metrics.wait_ms, waited);
        if (e->named)
            dlock__histogram_observe(&e->named->wait_ms, waited);
        break;
    }
    case DLOCK_ETIMEDOUT:
        dlock__metric_inc(&c->metrics.timeouts);
        if (e->named)
            dlock__metric_inc(&e->named->timeouts);
        break;
    case DLOCK_ECANCELLED:
        dlock__metric_inc(&c->metrics.cancels);
        break;
    }
}

int dlock_cancel(dlock_lock *h)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    pthread_mutex_lock(&e->mu);
    e->cancel_gen++;
    pthread_cond_broadcast(&e->cv);
    dlock__async_entry_cancel(e->client, e);
    if (e->contender_wake_fd >= 0) {
        uint64_t one = 1;
        ssize_t ignored = write(e->contender_wake_fd, &one, sizeof one);
        (void)ignored; /* EAGAIN only if already signalled */
    }
    pthread_mutex_unlock(&e->mu);
    return DLOCK_OK;
}
