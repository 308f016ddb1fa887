/* core/hold.c - the life of a hold once granted: recording the grant and
 * its validity, renewals' answers, loss (by the backend's word or at the
 * validity end), on_lost, the give-back of a lost hold, release, and the
 * fence. The watchdog (core/watchdog.c) decides when to renew and the
 * expiry thread (core/expiry.c) when validity ends; both call in here. */
#include "config.h"

#include "entry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool dlock__hold_renewed_by_watchdog(const dlock_client *c, const dlock_lock *h)
{
    return h->options.lease_ms == 0 && c->config.watchdog &&
           dlock__p_can_renew(c);
}

/* The lease the server grants: what was asked, or less if it said so. */
static int64_t granted_lease(const struct dlock__entry *e, const struct dlock_grant *g)
{
    return g->lease_ms > 0 && g->lease_ms < e->plock.lease_ms ? g->lease_ms : e->plock.lease_ms;
}

/* How long from the attempt's start the grant is known valid: the lease,
 * or less when the provider says its server lease was refreshed earlier. */
static int64_t granted_validity(int64_t lease, const struct dlock_grant *g)
{
    return g->valid_ms > 0 && g->valid_ms < lease ? g->valid_ms : lease;
}

int dlock__hold_grant(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                        struct dlock__stamp t_send, const struct dlock_grant *g)
{
    int rc = dlock__hold_grant_kept(c, e, h, self, t_send, g);
    if (rc != DLOCK_OK) {
        struct dlock_saved_error saved;
        dlock_error_save(&saved);
        dlock__hold_release(c, e);
        dlock_error_restore(&saved, rc);
    }
    return rc;
}

int dlock__hold_grant_kept(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                           struct dlock__stamp t_send, const struct dlock_grant *g)
{
    int64_t lease = granted_lease(e, g);
    int64_t valid = granted_validity(lease, g);
    bool watchdog = dlock__hold_renewed_by_watchdog(c, h);
    pthread_mutex_lock(&e->mu);
    e->count = 1;
    e->holder = self;
    e->lost = e->lost_notified = e->give_back_due = false;
    e->give_back_tries = 0;
    e->lost_reason[0] = 0;
    e->fence = g->fence;
    e->has_fence = g->has_fence != 0;
    e->renewed_by_watchdog = watchdog;
    e->downgraded = false;
    e->cached = e->cache_dropping = false;
    /* Others already queued, or one that asked since this attempt was
     * sent: their requests may have been answered before this grant, so
     * this hold is not kept (else this client could take the name again
     * and again while they wait). */
    e->wanted = g->others_waiting != 0 || __atomic_load_n(&e->wanted_at_us, __ATOMIC_RELAXED) >= t_send.mono_us;
    /* A hold of the non-blocking API is its handle's, not this thread's,
     * and is never kept; its grant may run on an event loop, which must
     * not wait for a watch to be confirmed. A watch that failed is tried
     * again a while later, not at every grant. */
    bool watch = !e->watching && self == dlock__thread_no() && dlock__now_ms() >= e->watch_retry_at_ms &&
                 dlock__cache_may_keep(c, e, h);
    e->lease_ms = lease;
    e->valid_until_ms = t_send.boot_ms + valid - dlock__drift_ms(lease);
    int64_t now_us = dlock__now_us();
    e->granted_at_ms = now_us / 1000;
    /* A non-blocking grant's time includes its loop's turn: not weighed. */
    if (self == dlock__thread_no())
        dlock__cache_note_attempt(e, now_us - t_send.mono_us);
    e->on_lost = h->options.on_lost;
    e->on_lost_arg = h->options.on_lost_arg;
    e->on_lost_handle = h;
    int64_t valid_until = e->valid_until_ms;
    pthread_mutex_unlock(&e->mu);

    /* Told from now on when another owner asks, so that a hold kept after
     * its release is given back then; made once per entry (the provider
     * may wait for the server here, that once). */
    if (watch) {
        bool ok = dlock__p_watch_wanted(c, e) == DLOCK_OK;
        pthread_mutex_lock(&e->mu);
        e->watching = ok;
        if (!ok)
            e->watch_retry_at_ms = dlock__now_ms() + DLOCK__WATCH_RETRY_MS;
        pthread_mutex_unlock(&e->mu);
    }
    int rc = dlock__expiry_arm(c, e, valid_until);
    if (rc == DLOCK_OK && watchdog)
        rc = dlock__watchdog_schedule_renewal(c, e, t_send.mono_ms, valid);
    if (rc != DLOCK_OK) {
        struct dlock_saved_error saved;
        dlock_error_save(&saved);
        return dlock_seterr(rc, "lock '%s': granted but not kept, since %s", dlock__entry_show(e), saved.text);
    }
    dlock__metric_inc(&c->metrics.grants);
    if (e->named)
        dlock__metric_inc(&e->named->grants);
    return DLOCK_OK;
}

bool dlock__hold_release_begin(dlock_client *c, struct dlock__entry *e, bool nowait,
                               struct dlock__release_plan *plan)
{
    /* Expiry first: a loss it declares schedules a give-back on the
     * watchdog, which the cancel below then takes out (and this release
     * sends itself), so no give-back can run after this hold is gone. */
    if (!nowait) {
        dlock__expiry_disarm(c, e);
        dlock__watchdog_cancel(c, e);
    } else if (!dlock__expiry_try_disarm(c, e)) {
        return false;
    } else if (!dlock__watchdog_try_cancel(c, e)) {
        /* Left as it was: the hold's end is still watched until the
         * release that waits for the watchdog begins. */
        pthread_mutex_lock(&e->mu);
        int64_t valid_until = e->valid_until_ms;
        pthread_mutex_unlock(&e->mu);
        dlock__expiry_arm(c, e, valid_until);
        return false;
    }
    pthread_mutex_lock(&e->mu);
    /* From here the hold is on its way out: a second release of it, or a
     * value put for it, is refused rather than sent beside this one. */
    e->release_pending = true;
    plan->lost = e->lost;
    /* A loss the client declared whose give-back the watchdog has not sent
     * yet: send it here, owner-checked, so the server forgets the hold now
     * rather than at its own expiry (or, for a session, never). */
    plan->call_backend = !e->lost || e->give_back_due;
    plan->cached = e->cached;
    e->give_back_due = false;
    plan->granted_at = e->granted_at_ms;
    /* Timed only where the caching switch weighs it: a watched name. */
    plan->sent_us = e->watching && plan->call_backend ? dlock__now_us() : 0;
    pthread_mutex_unlock(&e->mu);
    return true;
}

int dlock__hold_release_end(dlock_client *c, struct dlock__entry *e, const struct dlock__release_plan *plan, int rc)
{
    char reason[sizeof e->lost_reason];
    int64_t released_at_us = plan->sent_us > 0 ? dlock__now_us() : 0;
    pthread_mutex_lock(&e->mu);
    if (released_at_us > 0 && rc == DLOCK_OK)
        dlock__cache_note_release(e, released_at_us - plan->sent_us);
    memcpy(reason, e->lost_reason, sizeof reason);
    e->count = 0;
    e->holder = 0;
    e->lost = e->lost_notified = e->give_back_due = false;
    e->downgraded = false;
    e->cached = e->cache_dropping = e->wanted = false;
    e->on_lost = NULL;
    e->on_lost_handle = NULL;
    e->release_pending = false;
    pthread_cond_broadcast(&e->cv);
    dlock__async_entry_free(c, e);
    pthread_mutex_unlock(&e->mu);

    if (plan->cached) {
        /* The application's hold was measured when it was kept; a kept
         * hold found gone is simply over. */
        dlock__metric_inc(&c->metrics.cache_givebacks);
        if (rc == DLOCK_OK && !plan->lost) {
            dlock__metric_inc(&c->metrics.releases);
            if (e->named)
                dlock__metric_inc(&e->named->releases);
        }
        if (plan->lost || rc == DLOCK_OK || rc == DLOCK_ENOTOWNER || rc == DLOCK_ELOST)
            return DLOCK_OK;
        dlock__metric_inc(&c->metrics.backend_errors);
        return rc; /* provider detail; the lease frees it */
    }

    int64_t held = dlock__now_ms() - plan->granted_at;
    dlock__histogram_observe(&c->metrics.hold_ms, held);
    if (e->named)
        dlock__histogram_observe(&e->named->hold_ms, held);
    if (plan->lost) {
        dlock__metric_inc(&c->metrics.release_failures);
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the hold had been lost (%s); nothing was released",
                            dlock__entry_show(e), reason);
    }
    if (rc == DLOCK_ENOTOWNER || rc == DLOCK_ELOST) {
        dlock__metric_inc(&c->metrics.release_failures);
        dlock__metric_inc(&c->metrics.losses);
        if (e->named)
            dlock__metric_inc(&e->named->losses);
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the backend no longer had this hold (it expired or "
                            "was taken over); nothing was deleted", dlock__entry_show(e));
    }
    if (rc != DLOCK_OK) {
        dlock__metric_inc(&c->metrics.release_failures);
        dlock__metric_inc(&c->metrics.backend_errors);
        return rc; /* provider detail; the lease frees it */
    }
    dlock__metric_inc(&c->metrics.releases);
    if (e->named)
        dlock__metric_inc(&e->named->releases);
    return DLOCK_OK;
}

/* Lets go of the calling thread's whole hold on e, on the backend too. */
int dlock__hold_release(dlock_client *c, struct dlock__entry *e)
{
    struct dlock__release_plan plan;
    dlock__hold_release_begin(c, e, false, &plan);
    int rc = plan.call_backend ? dlock__p_release(c, e) : DLOCK_OK;
    return dlock__hold_release_end(c, e, &plan, rc);
}

bool dlock__hold_is_callers(const dlock_lock *h, const struct dlock__entry *e)
{
    return e->count > 0 && (e->holder == dlock__thread_no() || e->holder == h->async_no);
}

/* Checks that the calling thread, or h itself (a hold taken through the
 * non-blocking API), holds h's name and that no release of it is under
 * way; returns with e->mu held on DLOCK_OK (and also on DLOCK_ELOST when
 * allow_lost). */
int dlock__hold_own(const dlock_lock *h, bool allow_lost)
{
    struct dlock__entry *e = h->entry;
    pthread_mutex_lock(&e->mu);
    if (!dlock__hold_is_callers(h, e) || e->release_pending) {
        bool releasing = e->count > 0 && e->release_pending;
        pthread_mutex_unlock(&e->mu);
        return dlock_seterr(DLOCK_ENOTOWNER, releasing ? "lock '%s': its release is already under way"
                                                       : "lock '%s' is not held by this thread or handle",
                            dlock__entry_show(e));
    }
    if (e->lost) {
        if (allow_lost)
            return DLOCK_ELOST;
        pthread_mutex_unlock(&e->mu);
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the hold was lost (%s)", dlock__entry_show(e), e->lost_reason);
    }
    return DLOCK_OK;
}

int dlock_release(dlock_lock *h)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    int rc;
    rc = dlock__hold_own(h, true);
    if (rc != DLOCK_OK && rc != DLOCK_ELOST)
        return rc;
    if (rc == DLOCK_OK && e->count > 1) {
        e->count--;
        pthread_mutex_unlock(&e->mu);
        return DLOCK_OK;
    }
    if (rc == DLOCK_OK && dlock__cache_may_park(e->client, e, h, dlock__thread_no())) {
        dlock__cache_park(e->client, e, h);
        return DLOCK_OK;
    }
    pthread_mutex_unlock(&e->mu);
    return dlock__hold_release(e->client, e);
}

/* Marks e lost (e->mu held) and notes that the backend should be told, in
 * case it still keeps the hold (a session that outlived the client's
 * decision, a key whose renewal reply never came). Returns true if on_lost
 * should now be called. */
static bool mark_lost(dlock_client *c, struct dlock__entry *e, const char *why)
{
    if (!e->lost) {
        e->lost = true;
        e->give_back_due = true;
        snprintf(e->lost_reason, sizeof e->lost_reason, "%s", why);
        dlock__metric_inc(&c->metrics.losses);
        if (e->named)
            dlock__metric_inc(&e->named->losses);
    }
    if (e->lost_notified || !e->on_lost)
        return false;
    e->lost_notified = true;
    return true;
}

/* An on_lost call to make once e->mu is dropped. The handle is pinned (its
 * dlock_lock_free() waits) from lost_call_take() until lost_call_run(). */
struct lost_call {
    dlock_lost_fn fn;
    dlock_lock *handle;
    void *arg;
};

static struct lost_call lost_call_take(struct dlock__entry *e)
{
    struct lost_call call = { e->on_lost, e->on_lost_handle, e->on_lost_arg };
    if (call.fn)
        call.handle->lost_calls_running++;
    return call;
}

/* Has the watchdog give e's hold back now, if it is still lost and due. */
static void schedule_give_back(dlock_client *c, struct dlock__entry *e)
{
    pthread_mutex_lock(&e->mu);
    bool due = e->count > 0 && e->lost && e->give_back_due;
    pthread_mutex_unlock(&e->mu);
    if (due)
        dlock__watchdog_schedule(c, e, dlock__now_ms());
}

/* Runs on_lost, then schedules the give-back (so that the backend hears of
 * the loss only after the holder did), then unpins the handle: while it is
 * pinned the handle, and so the entry, cannot be freed. */
static void lost_call_run(dlock_client *c, struct dlock__entry *e, struct lost_call *call)
{
    call->fn(call->handle, call->arg);
    schedule_give_back(c, e);
    pthread_mutex_lock(&e->mu);
    call->handle->lost_calls_running--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* on_lost calls found during a timer thread's round wait here until the
 * round has ended and its busy marks are cleared: a callback that blocks, or
 * calls dlock_release()/dlock_lock_free() on a lock of the same round, must
 * not hold up every other operation on those locks. */
struct deferred_loss {
    struct deferred_loss *next;
    dlock_client *client;
    struct dlock__entry *entry;
    struct lost_call call;
};
static __thread bool deferring;
static __thread struct deferred_loss *deferred_head, **deferred_tail;

void dlock__loss_defer_begin(void)
{
    deferring = true;
    deferred_head = NULL;
    deferred_tail = &deferred_head;
}

void dlock__loss_defer_flush(void)
{
    deferring = false;
    while (deferred_head) {
        struct deferred_loss *d = deferred_head;
        deferred_head = d->next;
        lost_call_run(d->client, d->entry, &d->call);
        free(d);
    }
    deferred_tail = &deferred_head;
}

/* After a loss: logs it (outside e->mu, as the log sink may be slow), calls
 * on_lost (now, or after the timer thread's round), and has the watchdog
 * give the hold back after that. */
static void after_loss(dlock_client *c, struct dlock__entry *e, bool notify, struct lost_call *call,
                       const char *why)
{
    dlock__logf(&c->log, DLOCK_LOG_WARN, "lock '%s' lost: %s", dlock__entry_show(e), why);
    if (!notify) {
        schedule_give_back(c, e);
        return;
    }
    struct deferred_loss *d = deferring ? malloc(sizeof *d) : NULL;
    if (!d) {
        lost_call_run(c, e, call);
        return;
    }
    *d = (struct deferred_loss){ NULL, c, e, *call };
    *deferred_tail = d;
    deferred_tail = &d->next;
}

/* Marks e lost for why (e->mu held; returns with it released), then logs
 * it and calls on_lost as after_loss does. */
static void declare_lost(dlock_client *c, struct dlock__entry *e, const char *why)
{
    bool notify = mark_lost(c, e, why);
    struct lost_call call = notify ? lost_call_take(e) : (struct lost_call){ 0 };
    pthread_mutex_unlock(&e->mu);
    after_loss(c, e, notify, &call, why);
}

/* Applies the answer to a renewal sent at t_send (e->mu not held). */
void dlock__hold_renewed(dlock_client *c, struct dlock__entry *e, int rc, struct dlock__stamp t_send)
{
    struct dlock__stamp now = dlock__stamp_now();
    pthread_mutex_lock(&e->mu);
    if (e->count == 0 || e->lost) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    int64_t lease = e->lease_ms;
    int64_t due;
    if (rc == DLOCK_OK) {
        e->valid_until_ms = t_send.boot_ms + lease - dlock__drift_ms(lease);
        int64_t valid_until = e->valid_until_ms;
        bool watchdog = e->renewed_by_watchdog;
        pthread_mutex_unlock(&e->mu);
        dlock__metric_inc(&c->metrics.renewals);
        dlock__expiry_arm(c, e, valid_until);
        if (watchdog)
            dlock__watchdog_schedule_renewal(c, e, t_send.mono_ms, lease);
        dlock__cache_timer_check(c, e);
        return;
    }
    dlock__metric_inc(&c->metrics.renewal_failures);
    const char *why = NULL;
    if (rc == DLOCK_ELOST || rc == DLOCK_ENOTOWNER)
        why = "the backend no longer has it (expired or taken over)";
    else if (now.boot_ms >= e->valid_until_ms)
        why = "renewals failed until the lease ran out";
    if (why) {
        declare_lost(c, e, why);
        return;
    }
    /* Transient failure: try again soon, well before validity ends. The
     * expiry thread declares the loss at the validity end if no retry gets
     * through, however long a retry takes. */
    int64_t left = e->valid_until_ms - now.boot_ms;
    due = now.mono_ms + dlock__watchdog_retry_after(left, lease);
    pthread_mutex_unlock(&e->mu);
    struct dlock_saved_error saved;
    dlock_error_save(&saved);
    dlock__logf(&c->log, DLOCK_LOG_WARN, "lock '%s': renewal failed (%s); retrying in %lld ms, lost in %lld ms "
                "unless renewed", dlock__entry_show(e), saved.text, (long long)(due - now.mono_ms), (long long)left);
    dlock__watchdog_schedule(c, e, due);
    dlock__cache_timer_check(c, e);
}

int dlock_renew(dlock_lock *h)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    int rc;
    dlock_client *c = e->client;
    if (!dlock__p_can_renew(c))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot renew a hold", c->provider->name);
    if ((rc = dlock__hold_own(h, false)) != DLOCK_OK)
        return rc;
    pthread_mutex_unlock(&e->mu);

    /* Out of the watchdog's hands while we renew; dlock__hold_renewed
     * schedules it again (or it was lost). */
    dlock__watchdog_cancel(c, e);
    struct dlock__stamp t_send = dlock__stamp_now();
    rc = dlock__p_renew(c, e);
    dlock__hold_renewed(c, e, rc, t_send); /* re-arms expiry and the next renewal, or declares the loss */
    if (rc == DLOCK_ENOTOWNER || rc == DLOCK_ELOST)
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the backend no longer has this hold", dlock__entry_show(e));
    pthread_mutex_lock(&e->mu);
    bool lost = e->lost; /* the validity ended while the renewal was on its way */
    pthread_mutex_unlock(&e->mu);
    if (rc == DLOCK_OK && lost)
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the hold was lost before the renewal answered",
                            dlock__entry_show(e));
    return rc;
}

/* Declares e lost now that its validity has ended (e->mu held; returns
 * with it released), and calls on_lost. */
void dlock__hold_expired(dlock_client *c, struct dlock__entry *e)
{
    char why[96];
    if (e->renewed_by_watchdog)
        snprintf(why, sizeof why, "renewals did not get through before the lease ran out");
    else
        snprintf(why, sizeof why, "its lease of %lld ms ran out", (long long)e->lease_ms);
    declare_lost(c, e, why);
}

/* Sends the owner-checked release of a lost hold. When the backend cannot
 * be reached (the partition that made the hold lost may still be on), it
 * is tried again with backoff while the hold is still registered here, a
 * few times: the server may keep the hold (a session that survives a short
 * partition) until it is told. */
#define GIVE_BACK_TRIES 8
void dlock__hold_give_back(dlock_client *c, struct dlock__entry *e)
{
    int rc = dlock__p_release(c, e);
    if (rc == DLOCK_OK || rc == DLOCK_ENOTOWNER || rc == DLOCK_ELOST)
        return;
    pthread_mutex_lock(&e->mu);
    bool again = e->count > 0 && e->lost && e->give_back_tries < GIVE_BACK_TRIES;
    int64_t pause = 0;
    if (again) {
        e->give_back_due = true;
        pause = dlock__backoff_ceiling_ms(e->give_back_tries++, 250, 5000);
    }
    pthread_mutex_unlock(&e->mu);
    if (again)
        dlock__watchdog_schedule(c, e, dlock__now_ms() + pause);
}

void dlock__entry_on_expiry(dlock_client *c, struct dlock__entry *e)
{
    pthread_mutex_lock(&e->mu);
    if (e->count == 0 || e->lost) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    if (dlock__boot_ms() < e->valid_until_ms) { /* renewed since it was armed */
        int64_t at = e->valid_until_ms;
        pthread_mutex_unlock(&e->mu);
        dlock__expiry_arm(c, e, at);
        return;
    }
    dlock__hold_expired(c, e);
}

/* Gives e back to the watchdog after a call made with it taken out
 * (dlock__watchdog_cancel gave due): its renewal as it was, or, when the
 * loss was declared meanwhile, the give-back. */
static void watchdog_resume(dlock_client *c, struct dlock__entry *e, int64_t due)
{
    pthread_mutex_lock(&e->mu);
    bool lost = e->lost;
    pthread_mutex_unlock(&e->mu);
    if (lost)
        schedule_give_back(c, e);
    else if (due >= 0)
        dlock__watchdog_schedule(c, e, due);
}

int dlock__hold_value_put(dlock_lock *h, uint64_t term, const void *value, size_t len)
{
    struct dlock__entry *e = h->entry;
    dlock_client *c = e->client;
    int rc = dlock__hold_own(h, false);
    if (rc != DLOCK_OK)
        return rc;
    uint64_t holder = e->holder;
    pthread_mutex_unlock(&e->mu);
    int64_t due = dlock__watchdog_cancel(c, e); /* no overlap with a renewal */
    rc = dlock__p_value_put(c, e, holder, term, value, len);
    if (rc == DLOCK_ENOTOWNER) {
        /* Released (or lost) meanwhile, by another thread: nothing sent. */
        watchdog_resume(c, e, due);
        return rc;
    }
    if (rc == DLOCK_ELOST) {
        /* The server says the hold is gone. The loss is declared by the
         * watchdog's renewal, sent now, so that on_lost runs on its thread
         * as for any loss, never on a caller's that may hold the
         * election's locks. */
        watchdog_resume(c, e, dlock__now_ms());
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the backend no longer has this hold", dlock__entry_show(e));
    }
    watchdog_resume(c, e, due);
    return rc;
}

int dlock_fence(dlock_lock *h, uint64_t *out)
{
    int rc = dlock__handle_usable(h);
    if (rc != DLOCK_OK)
        return rc;
    if (!out)
        return dlock_seterr(DLOCK_EINVAL, "dlock_fence: out is NULL");
    struct dlock__entry *e = h->entry;
    dlock_client *c = e->client;
    if ((rc = dlock__hold_own(h, false)) != DLOCK_OK)
        return rc;
    bool has = e->has_fence;
    uint64_t fence = e->fence;
    pthread_mutex_unlock(&e->mu);
    if (has) {
        *out = fence;
        return DLOCK_OK;
    }
    int64_t due = dlock__watchdog_cancel(c, e); /* no overlap with a renewal */
    rc = dlock__p_fence(c, e, &fence);
    watchdog_resume(c, e, due);
    if (rc == DLOCK_OK) {
        pthread_mutex_lock(&e->mu);
        e->fence = fence;
        e->has_fence = true;
        pthread_mutex_unlock(&e->mu);
        *out = fence;
    }
    return rc;
}

int dlock_downgrade(dlock_lock *h)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    dlock_client *c = e->client;
    if (e->own_holder)
        return dlock_seterr(DLOCK_EINVAL, "lock '%s': only an exclusive hold can be downgraded; this handle "
                            "takes %s holds", dlock__entry_show(e),
                            e->plock.mode == DLOCK_MODE_SHARED ? "shared" : "semaphore");
    if (!(c->capabilities & DLOCK_CAP_DOWNGRADE))
        return dlock__p_downgrade(c, e); /* the refusal, with the reason */
    int rc;
    if ((rc = dlock__hold_own(h, false)) != DLOCK_OK)
        return rc;
    if (e->downgraded) {
        pthread_mutex_unlock(&e->mu);
        return DLOCK_OK;
    }
    if (e->count > 1) {
        unsigned count = e->count;
        pthread_mutex_unlock(&e->mu);
        return dlock_seterr(DLOCK_EINVAL, "lock '%s': this thread holds it %u times; a downgrade would take "
                            "exclusivity from the outer holds too (downgrade at the outermost level)",
                            dlock__entry_show(e), count);
    }
    pthread_mutex_unlock(&e->mu);

    /* Out of the watchdog's hands meanwhile: a renewal must not be sent for
     * one kind of hold and answered for the other. */
    int64_t due = dlock__watchdog_cancel(c, e);
    rc = dlock__p_downgrade(c, e);
    pthread_mutex_lock(&e->mu);
    bool lost = e->lost; /* the validity ended while the request was on its way */
    char reason[sizeof e->lost_reason];
    memcpy(reason, e->lost_reason, sizeof reason);
    if (rc == DLOCK_OK)
        e->downgraded = true; /* the same hold: its fence stays */
    pthread_mutex_unlock(&e->mu);
    /* Refused before anything reached the backend: the hold is as it was. */
    bool unchanged = rc == DLOCK_ENOTSUP || rc == DLOCK_EINVAL || rc == DLOCK_ENOMEM || rc == DLOCK_EINTERNAL;
    if ((rc == DLOCK_OK || unchanged) && !lost) {
        if (due >= 0)
            dlock__watchdog_schedule(c, e, due);
        if (rc == DLOCK_OK)
            dlock__logf(&c->log, DLOCK_LOG_DEBUG, "lock '%s' downgraded to shared", dlock__entry_show(e));
        return rc;
    }
    if (lost) {
        schedule_give_back(c, e);
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the hold was lost (%s)", dlock__entry_show(e), reason);
    }
    /* Gone (nothing changed), or no answer: the server may have made the
     * hold shared while this thread still counts on exclusivity, so the
     * hold is given up either way, as lost, with on_lost. */
    struct dlock_saved_error saved;
    dlock_error_save(&saved);
    const char *why = rc == DLOCK_ELOST || rc == DLOCK_ENOTOWNER
                          ? "the backend no longer had it when it was to be downgraded"
                          : "the downgrade got no clear answer, so the hold may be exclusive or shared";
    pthread_mutex_lock(&e->mu);
    declare_lost(c, e, why);
    return dlock_seterr(DLOCK_ELOST, "lock '%s': %s (%s); release it", dlock__entry_show(e), why, saved.text);
}
