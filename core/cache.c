/* core/cache.c - holds kept for this client after their release (the
 * `cache` group, on backends with DLOCK_CAP_CACHE).
 *
 * The outermost dlock_release() of an exclusive watchdog hold, when
 * caching is on, does not go to the server: the hold stays there, renewed
 * by the watchdog as before, and is marked cached here (its holder becomes
 * the client's cache holder, a number no thread or handle has, and its
 * on_lost is dropped, since no application holds it). The next
 * dlock_acquire() of the name by any thread of the client takes it over
 * with no round trip and the same fencing token: the server-side hold has
 * been continuous, so no other owner can have held the name in between,
 * and a fenced resource cannot tell the two holds from one long one.
 *
 * A cached hold is given back (an owner-checked release, on the watchdog's
 * thread) when it has not been used for cache.idle_ms, when it is lost (a
 * renewal found it gone, or its validity ended), when an acquire cannot
 * take it over (other options, too little validity left), when a
 * non-blocking acquire of the name comes, and when the name's last handle
 * is freed or the client closed. After any of these, the next acquire goes
 * to the server and gets a greater token. */
#include "config.h"

#include "entry.h"

#include <stddef.h>

/* The validity a cached hold must have left to be parked or taken over: a
 * third of the lease, the renewal interval. A healthy hold has at least
 * twice that; one with less has renewals failing. */
static int64_t validity_margin_ms(const struct dlock__entry *e)
{
    return dlock__watchdog_renew_after(e->lease_ms);
}

static bool enough_validity(const struct dlock__entry *e)
{
    return e->valid_until_ms - dlock__boot_ms() >= validity_margin_ms(e);
}

int64_t dlock__cache_idle_for(const dlock_client *c, const dlock_lock *h)
{
    if (h->options.flags & DLOCK_LOCK_NOCACHE)
        return 0;
    if (c->config.cache_idle_ms > 0)
        return c->config.cache_idle_ms;
    return (h->options.flags & DLOCK_LOCK_CACHE) ? DLOCK__DEFAULT_CACHE_IDLE_MS : 0;
}

bool dlock__cache_may_keep(const dlock_client *c, const struct dlock__entry *e, const dlock_lock *h)
{
    /* A fair handle's turn comes in arrival order: a hold kept for this
     * client would let its threads in ahead of the line. */
    return dlock__cache_idle_for(c, h) > 0 && (c->capabilities & DLOCK_CAP_CACHE) && !e->own_holder &&
           !(h->options.flags & DLOCK_LOCK_FAIR) && dlock__hold_renewed_by_watchdog(c, h);
}

/* A moving average with weight 1/k for the new sample; the first sample
 * is taken as it is. */
static int64_t averaged(int64_t avg, int64_t sample, int64_t k)
{
    return avg <= 0 ? sample : avg + (sample - avg) / k;
}

void dlock__cache_note_attempt(struct dlock__entry *e, int64_t attempt_us)
{
    /* A hit replaces a grant made while nobody waits. A grant after a wait
     * can take far longer (on local, the attempt joins the line and looks
     * again), so what is kept is a floor: the least recent time at once,
     * a rise of a sixteenth per grant otherwise. */
    int64_t t = attempt_us > 0 ? attempt_us : 1;
    int64_t risen = e->cache_attempt_us + e->cache_attempt_us / 16 + 1;
    e->cache_attempt_us = e->cache_attempt_us <= 0 || t < risen ? t : risen;
}

void dlock__cache_note_release(struct dlock__entry *e, int64_t release_us)
{
    e->cache_release_us = averaged(e->cache_release_us, release_us > 0 ? release_us : 1, 4);
}

/* A kept hold given back because another owner asked, give_back_us after
 * the request was heard. Keeping pays while the hits between two such
 * requests save more than one request costs. A hit saves a grant made
 * while nobody waits and a release. The request's cost is
 * counted twice the keeper's part (hearing it, the give-back): the asker
 * pays as much again to hear of the give-back and ask once more, where a
 * name nobody kept would have been granted at its first ask. So a backend
 * whose cycle is cheap beside its wake-ups (local: two system calls)
 * keeps only a name that one client takes again and again, and one whose
 * cycle is round trips keeps a name that is mostly its own. A backend
 * that hears requests late (mysql polls for them) says how late on
 * average (DLOCK_CTL_HEARING_DELAY): the asker waits that long too before
 * the keeper's part starts, once per request. A name whose
 * averages say it does not pay, after two requests, is not kept for
 * cache.cooldown_ms, twice as long each time that recurs with no
 * verdict for keeping in between (at most 32 times). e->mu held. */
static void note_asked(dlock_client *c, struct dlock__entry *e, int64_t give_back_us)
{
    e->cache_give_back_us = averaged(e->cache_give_back_us, give_back_us > 0 ? give_back_us : 1, 4);
    /* Hits past the cap say no more (a name long used alone, then shared,
     * is weighed on its sharing after a few requests). The average moves
     * at least one step towards each sample: a name whose hits stopped
     * comes down to none. */
    int64_t sample = 16 * (int64_t)e->cache_hits_since_ask;
    if (e->cache_asks == 0) {
        e->cache_hits_per_ask_x16 = sample;
    } else {
        int64_t step = (sample - e->cache_hits_per_ask_x16) / 8;
        if (step == 0 && sample != e->cache_hits_per_ask_x16)
            step = sample > e->cache_hits_per_ask_x16 ? 1 : -1;
        e->cache_hits_per_ask_x16 += step;
    }
    e->cache_hits_since_ask = 0;
    if (e->cache_asks < UINT32_MAX)
        e->cache_asks++;
    int64_t base = c->config.cache_cooldown_ms;
    if (base <= 0 || e->cache_asks < 2)
        return;
    int64_t cycle_us = e->cache_attempt_us + e->cache_release_us;
    int64_t saved_x16 = e->cache_hits_per_ask_x16 * cycle_us;
    int64_t cost_us = 2 * e->cache_give_back_us + c->cache_hearing_us;
    int64_t cost_x16 = 16 * cost_us;
    if (saved_x16 >= cost_x16) {
        e->cache_cooldown_ms = 0;
        return;
    }
    int64_t pause = e->cache_cooldown_ms > 0 ? e->cache_cooldown_ms : base;
    e->cache_off_until_ms = dlock__now_ms() + pause;
    e->cache_cooldown_ms = pause * 2 <= base * 32 ? pause * 2 : base * 32;
    e->cache_asks = 0;
    dlock__metric_inc(&c->metrics.cache_pauses);
    dlock__logf(&c->log, DLOCK_LOG_DEBUG,
                "lock '%s': keeping it does not pay (%lld.%02lld hits between requests, each saving %lld us; a "
                "request costs %lld us): not kept for %lld ms",
                dlock__entry_show(e), (long long)(e->cache_hits_per_ask_x16 / 16),
                (long long)(e->cache_hits_per_ask_x16 % 16 * 100 / 16), (long long)cycle_us,
                (long long)cost_us, (long long)pause);
}

void dlock__cache_unwatch(dlock_client *c, struct dlock__entry *e)
{
    pthread_mutex_lock(&e->mu);
    bool watching = e->watching;
    e->watching = false;
    pthread_mutex_unlock(&e->mu);
    if (watching)
        dlock__p_unwatch_wanted(c, e);
}

void dlock__cache_wanted(struct dlock_provider_lock *lk)
{
    struct dlock__entry *e = (struct dlock__entry *)((char *)lk - offsetof(struct dlock__entry, plock));
    pthread_mutex_lock(&e->mu);
    /* Watched until the entry goes (unwatch comes first), so it is alive.
     * Between holds the time is noted: a request answered just after the
     * server granted our next hold, but heard before the grant's answer
     * was read, is one for that hold (the grant then marks it wanted). */
    int64_t now_us = dlock__now_us();
    __atomic_store_n(&e->wanted_at_us, now_us, __ATOMIC_RELAXED);
    if (e->count > 0 && !e->wanted) {
        e->wanted = true;
        if (e->cached) {
            /* The first request is the one the give-back answers: a later
             * one (the asker looking again) does not restart its cost. */
            e->cache_asked_at_us = now_us;
            dlock__cache_drop_soon(e->client, e);
        }
    }
    pthread_mutex_unlock(&e->mu);
}

bool dlock__cache_may_park(const dlock_client *c, const struct dlock__entry *e, const dlock_lock *h, uint64_t self)
{
    /* Another owner asked meanwhile: this release is a real one. So it is
     * with non-blocking acquires queued here, which would otherwise wait
     * behind the kept hold until it is given back. */
    return dlock__cache_idle_for(c, h) > 0 && !(h->options.flags & DLOCK_LOCK_FAIR) &&
           !(e->plock.flags & DLOCK_LOCK_FAIR) && e->watching && !e->wanted && e->count == 1 && e->holder == self &&
           !e->lost && !e->release_pending && e->renewed_by_watchdog && !e->own_holder && !e->downgraded &&
           e->plock.mode == DLOCK_MODE_EXCLUSIVE && !__atomic_load_n(&e->aops, __ATOMIC_ACQUIRE) &&
           enough_validity(e) && (e->cache_off_until_ms == 0 || dlock__now_ms() >= e->cache_off_until_ms);
}

void dlock__cache_park(dlock_client *c, struct dlock__entry *e, const dlock_lock *h)
{
    int64_t now = dlock__now_ms();
    int64_t held = now - e->granted_at_ms;
    e->holder = c->cache_holder;
    e->cached = true;
    e->cache_dropping = false;
    e->cache_last_used_ms = now;
    int64_t idle_ms = e->cache_idle_ms = dlock__cache_idle_for(c, h);
    e->on_lost = NULL;
    e->on_lost_arg = NULL;
    e->on_lost_handle = NULL;
    if (e->waiters > 0)
        pthread_cond_broadcast(&e->cv); /* a thread of ours queued behind it takes it over */
    pthread_mutex_unlock(&e->mu);

    /* The application's hold ended here, as far as its length goes; the
     * release on the backend is counted when the hold is given back. */
    dlock__histogram_observe(&c->metrics.hold_ms, held);
    if (e->named)
        dlock__histogram_observe(&e->named->hold_ms, held);
    dlock__metric_inc(&c->metrics.cache_keeps);
    /* The idle check: the renewal timer may be due later than that. (The
     * limit as read under e->mu: a take-over and a park by other threads
     * may have come since.) */
    dlock__watchdog_schedule_earlier(c, e, now + idle_ms);
}

void dlock__cache_drop_soon(dlock_client *c, struct dlock__entry *e)
{
    if (e->cache_dropping)
        return;
    e->cache_dropping = true;
    /* Lock order e->mu, then the watchdog's mutex, as everywhere; this
     * never waits for the watchdog's round. */
    dlock__watchdog_schedule(c, e, dlock__now_ms());
}

bool dlock__cache_hit(dlock_client *c, struct dlock__entry *e, const dlock_lock *h, uint64_t self, int64_t now_ms)
{
    /* The hold on the server was asked for with the lease and flags of the
     * handle that contended for it; another handle's options need a new
     * request. */
    bool same_request = dlock__hold_renewed_by_watchdog(c, h) && e->plock.lease_ms == c->config.lease_ms &&
                        e->plock.flags == (h->options.flags & DLOCK_LOCK_FAIR);
    if (e->cache_dropping || e->wanted || e->lost || !same_request || !enough_validity(e)) {
        dlock__cache_drop_soon(c, e);
        return false;
    }
    e->holder = self;
    e->cached = false;
    e->on_lost = h->options.on_lost;
    e->on_lost_arg = h->options.on_lost_arg;
    e->on_lost_handle = (dlock_lock *)h;
    e->granted_at_ms = now_ms;
    if (e->cache_hits_since_ask < DLOCK__CACHE_HITS_WEIGHED)
        e->cache_hits_since_ask++;
    dlock__metric_inc(&c->metrics.cache_hits);
    return true;
}

/* The owner-checked release of a cached hold (lost ones only when the
 * backend may still have them), and the wake-up of whoever waits for the
 * name in this client. */
static void give_back(dlock_client *c, struct dlock__entry *e, int64_t asked_at_us)
{
    struct dlock__release_plan plan;
    dlock__hold_release_begin(c, e, false, &plan);
    int rc = plan.call_backend ? dlock__p_release(c, e) : DLOCK_OK;
    /* Noted here, where e->mu is free and the give-back's round trip is
     * in the time. */
    if (asked_at_us > 0) {
        pthread_mutex_lock(&e->mu);
        note_asked(c, e, dlock__now_us() - asked_at_us);
        pthread_mutex_unlock(&e->mu);
    }
    rc = dlock__hold_release_end(c, e, &plan, rc);
    if (rc != DLOCK_OK)
        dlock__logf(&c->log, DLOCK_LOG_DEBUG, "lock '%s': giving back its cached hold: %s", dlock__entry_show(e),
                    dlock_errmsg());
}

bool dlock__cache_round(dlock_client *c, struct dlock__entry *e)
{
    int64_t now = dlock__now_ms();
    int64_t idle_due = e->cache_last_used_ms + e->cache_idle_ms;
    if (e->lost || e->cache_dropping || e->wanted || now >= idle_due || !enough_validity(e)) {
        e->cache_dropping = true;
        int64_t asked_at_us = e->wanted ? e->cache_asked_at_us : 0;
        pthread_mutex_unlock(&e->mu);
        give_back(c, e, asked_at_us);
        return true;
    }
    int64_t renew_due = __atomic_load_n(&e->renew_due_ms, __ATOMIC_RELAXED);
    if (now >= renew_due) {
        pthread_mutex_unlock(&e->mu);
        return false; /* renewed with the round; the renewal brings the idle check back */
    }
    /* Under e->mu: a request that comes now schedules after this. */
    dlock__watchdog_schedule(c, e, renew_due < idle_due ? renew_due : idle_due);
    pthread_mutex_unlock(&e->mu);
    return true;
}

void dlock__cache_drop_now(dlock_client *c, struct dlock__entry *e)
{
    /* The watchdog gives it back, as every kept hold: a second give-back
     * from here could release the next holder's hold, taken between the
     * two. This thread waits for it. */
    pthread_mutex_lock(&e->mu);
    if (e->count > 0 && e->cached)
        dlock__cache_drop_soon(c, e);
    while (e->count > 0 && e->cached)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

void dlock__cache_timer_check(dlock_client *c, struct dlock__entry *e)
{
    pthread_mutex_lock(&e->mu);
    if (e->count > 0 && e->cached) {
        if (e->cache_dropping)
            dlock__watchdog_schedule(c, e, dlock__now_ms());
        else
            dlock__watchdog_schedule_earlier(c, e, e->cache_last_used_ms + e->cache_idle_ms);
    }
    pthread_mutex_unlock(&e->mu);
}
