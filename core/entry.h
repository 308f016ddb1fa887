/*
 * core/entry.h - the per-name state every handle of one name in one client
 * shares, seen by the modules that work on holds: handles.c (handles, the name
 * table), acquire.c (one acquire), hold.c (grant, release, loss),
 * watchdog.c (renewals and give-backs) and expiry.c (loss at the validity
 * end). Not part of any public or provider header.
 */
#ifndef DLOCK_CORE_ENTRY_H
#define DLOCK_CORE_ENTRY_H

#include "internal.h"

struct dlock__entry {
    struct dlock__timer timer;      /* renewal/give-back; guarded by the watchdog mutex */
    bool watchdog_busy;             /* the watchdog is working on it (watchdog mutex) */
    struct dlock__timer expiry;     /* validity end; guarded by the expiry mutex */
    bool expiry_busy;               /* the expiry thread is working on it (expiry mutex) */
    dlock_client *client;
    struct dlock__entry *next_in_bucket;
    unsigned handles;               /* guarded by client->entries_mu */
    unsigned frees_in_flight;       /* dlock_lock_free() calls still using it (entries_mu) */
    uint64_t hash;
    char *name;
    size_t name_len;
    struct dlock__name_metrics *named; /* the name's own series (metrics.names), or NULL (constant) */
    bool own_holder;                /* a shared or semaphore hold: this entry is one
                                     * handle's, never found by name (constant) */
    unsigned holder_no;             /* own_holder: its number in the client, for the owner id */

    pthread_mutex_t mu;             /* guards everything below up to op_mu */
    pthread_cond_t cv;              /* hold released, contender done, cancel, on_lost done */
    unsigned count;                 /* reentry count of the hold, 0 = free here */
    uint64_t holder;                /* thread number of the holder */
    bool contending;                /* a thread of ours is asking the backend */
    int contender_wake_fd;          /* the contender's eventfd, -1 if none */
    unsigned waiters;
    uint64_t cancel_gen;
    bool lost, lost_notified;
    bool give_back_due;             /* lost: an owner-checked release is still to be sent */
    unsigned give_back_tries;       /* give-backs that failed to reach the backend */
    char lost_reason[160];
    uint64_t fence;
    bool has_fence;
    bool renewed_by_watchdog;
    bool downgraded;                /* an exclusive hold turned shared (dlock_downgrade) */
    int64_t lease_ms;               /* the lease the server grants (may be < plock.lease_ms) */
    int64_t valid_until_ms;         /* on the boot clock (dlock__boot_ms) */
    int64_t granted_at_ms;          /* monotonic */
    dlock_lost_fn on_lost;
    void *on_lost_arg;
    dlock_lock *on_lost_handle;
    bool release_pending;           /* a dlock_release_start() of the hold is queued */
    /* A cached hold: released by the application but kept on the server
     * for this client (count 1, holder client->cache_holder, no on_lost),
     * so that the next acquire of the name here needs no round trip. */
    bool cached;
    bool cache_dropping;            /* cached, and to be given back: no more hits */
    bool wanted;                    /* another owner asked for the name during this hold */
    bool watching;                  /* the provider tells us when another owner asks (watch_wanted) */
    int64_t wanted_at_us;           /* monotonic: when another owner last asked (atomic) */
    int64_t watch_retry_at_ms;      /* monotonic: a failed watch_wanted is not tried again before this */
    int64_t cache_last_used_ms;     /* monotonic: when it was last released into the cache */
    int64_t cache_idle_ms;          /* the idle limit of the handle that kept it */
    /* What keeping the name earns and costs, for the switch that stops
     * keeping it when the give-backs cost more than the hits save; e->mu. */
    uint32_t cache_hits_since_ask;  /* kept holds taken over here since the last give-back asked for
                                     * (at most DLOCK__CACHE_HITS_WEIGHED) */
    uint32_t cache_asks;            /* give-backs asked for since the switch last paused keeping */
    int64_t cache_hits_per_ask_x16; /* moving average of hits between two give-backs asked for, x 16 */
    int64_t cache_attempt_us;       /* what a granting attempt costs when nothing waits: a floor of their times */
    int64_t cache_release_us;       /* moving average of the releases sent to the backend */
    int64_t cache_give_back_us;     /* moving average from a request heard to its give-back done */
    int64_t cache_asked_at_us;      /* monotonic: when the kept hold was first asked for */
    int64_t cache_off_until_ms;     /* monotonic: no keeping before this */
    int64_t cache_cooldown_ms;      /* the next pause's length (doubles while it persists) */
    int64_t renew_due_ms;           /* monotonic: the next renewal's due time (atomic) */
    struct dlock__aop *aops, *aops_tail; /* pending non-blocking operations, oldest first
                                     * (client->async.mu; aops also read atomically) */

    pthread_mutex_t op_mu;          /* one provider operation at a time */
    bool provider_touched;          /* lock_fini is due */
    struct dlock_provider_lock plock;
    char owner[64];
    uint64_t owner_thread;          /* the thread owner was made for */
    /* provider private state follows */
};

/* DLOCK_EDEADLK when the calling thread's own hold of e's name in another
 * mode would keep this acquire waiting forever (an exclusive acquire while
 * it holds the name shared, a shared one while it holds it exclusively),
 * else DLOCK_OK. Takes entries_mu and other entries' mu (e->mu not held). */
int dlock__check_own_holds(dlock_client *client, struct dlock__entry *e, uint64_t self);

/* A moment on both clocks: monotonic for timers, boot for validity. */
struct dlock__stamp {
    int64_t mono_ms, boot_ms;
    int64_t mono_us;        /* the monotonic time in microseconds, for ordering events */
};
static inline struct dlock__stamp dlock__stamp_now(void)
{
    int64_t us = dlock__now_us();
    struct dlock__stamp s = { us / 1000, dlock__boot_ms(), us };
    return s;
}

/* ---- handles.c ------------------------------------------------------------- */
/* A process-unique number for the calling thread (never reused). */
uint64_t dlock__thread_no(void);
/* A fresh number from the same sequence, for a holder that is not a thread
 * (a handle's non-blocking holds). */
uint64_t dlock__holder_no_new(void);
/* The calling thread's eventfd that dlock_cancel() writes to, -1 if none
 * could be made. One per thread, closed when the thread exits. */
int dlock__thread_wake_fd(void);
/* Reads an eventfd until it is empty. */
void dlock__drain(int fd);
/* Checks a handle (NULL, fork guard); DLOCK_OK or DLOCK_EINVAL with detail. */
int dlock__handle_usable(const dlock_lock *h);
/* The entry of a usable handle, or NULL (then DLOCK_EINVAL, detail set). */
struct dlock__entry *dlock__entry_of(const dlock_lock *h);
/* A printable form of e's name for messages (escaped, at most 64 bytes),
 * in a per-thread buffer valid until the next call. */
const char *dlock__entry_show(const struct dlock__entry *e);

/* ---- acquire.c: the pieces the non-blocking path shares ------------------ */
/* How long to pause after the attempt-th busy answer with a holder's hint. */
int64_t dlock__pause_after_busy(const dlock_client *c, unsigned attempt, int64_t hint_ms);
/* Makes the caller e's contender for holder self, whose cancel signal is
 * wake_fd (-1: none), and sets the owner and the request (e->mu held). */
void dlock__contender_begin(dlock_client *c, struct dlock__entry *e, const dlock_lock *h, uint64_t self,
                            int wake_fd);
/* Ends the caller's contention for e, whatever its result, and lets the
 * next acquire queued behind it in the client look (e->mu held). */
void dlock__contender_end(dlock_client *c, struct dlock__entry *e);
/* Counts an acquire's end in the metrics: rc, started at start (monotonic);
 * granted_at, the grant's monotonic time when the caller read it (0: the
 * clock is read now). */
void dlock__acquire_account(dlock_client *c, struct dlock__entry *e, int rc, int64_t start, int64_t granted_at);

/* ---- async_engine.c: hooks the blocking path calls (e->mu held) ------------ */
/* e's hold or contention ended: non-blocking acquires queued behind it in
 * the client look again. */
void dlock__async_entry_free(dlock_client *c, struct dlock__entry *e);
/* dlock_cancel() of e's name: its non-blocking acquires stop waiting. */
void dlock__async_entry_cancel(dlock_client *c, struct dlock__entry *e);
/* Before a blocking call waits for e's non-blocking operations (a hold
 * whose release is in flight, a contender): those parked for the caller's
 * loop move to the workers, since the waiting thread may be the loop's
 * own and would never read their answers. e->mu may be held. */
void dlock__async_entry_off_loop(dlock_client *c, struct dlock__entry *e);

/* ---- hold.c ------------------------------------------------------------------ */
/* Whether holds of handle h are renewed by the watchdog (no fixed lease, the
 * watchdog on, a backend that can renew). */
bool dlock__hold_renewed_by_watchdog(const dlock_client *c, const dlock_lock *h);
/* Records a grant of a request sent at t_send for thread self, arms its
 * expiry and first renewal. DLOCK_OK, or an error after giving it back. */
int dlock__hold_grant(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                      struct dlock__stamp t_send, const struct dlock_grant *g);
/* The same without the round trip: on an error the hold is recorded but
 * not looked after, and the caller gives it back (dlock__hold_release) on
 * a thread that may block. */
int dlock__hold_grant_kept(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                           struct dlock__stamp t_send, const struct dlock_grant *g);
/* Lets go of the calling thread's whole hold on e, on the backend too. */
int dlock__hold_release(dlock_client *c, struct dlock__entry *e);
/* The same in two halves around the backend's call, for a release whose
 * round trip is made elsewhere (the non-blocking API). begin stops the
 * hold's renewals and expiry and marks its release under way; with
 * nowait it answers false, having changed nothing that matters, when the
 * watchdog or the expiry thread is working on e right now (then call it
 * again where waiting is allowed). plan->call_backend says whether the
 * backend must be told; end takes the backend's answer (DLOCK_OK when it
 * was not called) and returns the release's result. */
struct dlock__release_plan {
    bool lost;            /* the hold had been lost: nothing is released */
    bool call_backend;
    bool cached;          /* a cached hold given back: the application's release was counted at its park */
    int64_t granted_at;
    int64_t sent_us;      /* monotonic: when the release began, for the caching switch (0: not timed) */
};
bool dlock__hold_release_begin(dlock_client *c, struct dlock__entry *e, bool nowait,
                               struct dlock__release_plan *plan);
int dlock__hold_release_end(dlock_client *c, struct dlock__entry *e, const struct dlock__release_plan *plan,
                            int rc);
/* Whether h's entry is held by the calling thread or by h's own
 * non-blocking hold (e->mu held). */
bool dlock__hold_is_callers(const dlock_lock *h, const struct dlock__entry *e);
/* Checks that the calling thread, or h through the non-blocking API, holds
 * h's name and that no release of it is under way; returns with e->mu held
 * on DLOCK_OK (and on DLOCK_ELOST when allow_lost). */
int dlock__hold_own(const dlock_lock *h, bool allow_lost);
/* Stores a leader's value beside h's hold (the caller's or h's own), with
 * the watchdog kept off it meanwhile; a hold the backend no longer has is
 * declared lost (on_lost runs) and DLOCK_ELOST returned. */
int dlock__hold_value_put(dlock_lock *h, uint64_t term, const void *value, size_t len);
/* dlock_acquire() for holder self: the calling thread's number, or a
 * handle's own (h->async_no) for a hold that belongs to the handle. */
int dlock__acquire_for(dlock_lock *h, int64_t wait_ms, uint64_t self);
/* Applies the answer rc to a renewal sent at t_send (e->mu not held). */
void dlock__hold_renewed(dlock_client *c, struct dlock__entry *e, int rc, struct dlock__stamp t_send);
/* Declares e lost at its validity end (e->mu held; returns with it
 * released) and calls on_lost. */
void dlock__hold_expired(dlock_client *c, struct dlock__entry *e);
/* Sends a lost hold's owner-checked release; schedules another try when
 * the backend cannot be reached. */
void dlock__hold_give_back(dlock_client *c, struct dlock__entry *e);

/* A timer thread's round defers the on_lost calls it causes until its busy
 * marks are cleared: begin before the round, flush after. */
void dlock__loss_defer_begin(void);
void dlock__loss_defer_flush(void);

/* ---- cache.c: holds kept for this client after their release ---------------- */
/* Whether the outermost release of e by thread self may keep the hold
 * cached instead (e->mu held). */
bool dlock__cache_may_park(const dlock_client *c, const struct dlock__entry *e, const dlock_lock *h, uint64_t self);
/* Keeps e's hold as a cached one (e->mu held; returns with it released):
 * the release of the application's hold, without a round trip. */
void dlock__cache_park(dlock_client *c, struct dlock__entry *e, const dlock_lock *h);
/* Serves an acquire of e by thread self through handle h from the cache
 * (e->mu held, e cached): true and the hold is self's, or false and the
 * cached hold is being given back (the caller waits for that, queued as
 * behind any hold of this client). now_ms: the monotonic time, which
 * starts the taken-over hold (the acquire's start when nothing kept it
 * waiting, so that a hit reads no clock for it). */
bool dlock__cache_hit(dlock_client *c, struct dlock__entry *e, const dlock_lock *h, uint64_t self,
                      int64_t now_ms);
/* A grant of e came attempt_us after its attempt was sent, and a release
 * of e sent to the backend took release_us: what a hold costs the server,
 * beside which the switch weighs give-backs (e->mu held). */
void dlock__cache_note_attempt(struct dlock__entry *e, int64_t attempt_us);
void dlock__cache_note_release(struct dlock__entry *e, int64_t release_us);
/* Whether holds of e taken through h may be kept after their release:
 * caching on and offered, an exclusive watchdog hold. */
bool dlock__cache_may_keep(const dlock_client *c, const struct dlock__entry *e, const dlock_lock *h);
/* How long h's released holds may be kept unused (0: never kept): the
 * cache group's idle_ms, or DLOCK_LOCK_CACHE's default; DLOCK_LOCK_NOCACHE
 * makes it 0. */
int64_t dlock__cache_idle_for(const dlock_client *c, const dlock_lock *h);
/* Ends e's watch_wanted, if it has one (e->mu not held): after it, no
 * provider thread calls in for e. */
void dlock__cache_unwatch(dlock_client *c, struct dlock__entry *e);
/* env->wanted: another owner asks for lk's name (provider threads). */
void dlock__cache_wanted(struct dlock_provider_lock *lk);
/* Has the watchdog give e's cached hold back now (e->mu held). */
void dlock__cache_drop_soon(dlock_client *c, struct dlock__entry *e);
/* The watchdog's part for a cached entry due in a round (e->mu held;
 * returns with it released): true when it took care of e (given back, or
 * its timer moved to the next renewal or idle check), false when e is to
 * be renewed with the round. */
bool dlock__cache_round(dlock_client *c, struct dlock__entry *e);
/* Has e's cached hold given back and waits until it is (not on the
 * watchdog's thread): the last handle of the name is being freed. */
void dlock__cache_drop_now(dlock_client *c, struct dlock__entry *e);
/* After e's watchdog timer was set for a renewal (e->mu not held): a
 * cached hold's give-back asked for meanwhile, or its idle check, must
 * not wait for that renewal. */
void dlock__cache_timer_check(dlock_client *c, struct dlock__entry *e);

/* ---- watchdog.c: when to renew ---------------------------------------------- */
/* The renewal interval of a lease (a third of it, Redisson's rule). */
int64_t dlock__watchdog_renew_after(int64_t lease_ms);
/* The pause before retrying a renewal that failed transiently with
 * valid_left_ms of validity left: well before the end, at most lease/6. */
int64_t dlock__watchdog_retry_after(int64_t valid_left_ms, int64_t lease_ms);

/* ---- provider.c: every call into the provider's table ---------------------- */
/* Each checks the member's presence and the provider's version, takes
 * e->op_mu where one lock's operations must not overlap, and turns a
 * result outside the contract into DLOCK_EINTERNAL. */
int dlock__p_open(dlock_client *c, const struct dlock_provider_env *env);
void dlock__p_close(dlock_client *c);
int dlock__p_acquire(dlock_client *c, struct dlock__entry *e, struct dlock_grant *g);
int dlock__p_release(dlock_client *c, struct dlock__entry *e);
/* Turns e's exclusive hold shared on the backend; on DLOCK_OK e->plock.mode
 * is DLOCK_MODE_SHARED. DLOCK_ENOTSUP without DLOCK_CAP_DOWNGRADE. */
int dlock__p_downgrade(dlock_client *c, struct dlock__entry *e);
bool dlock__p_can_renew(const dlock_client *c);
int dlock__p_renew(dlock_client *c, struct dlock__entry *e);
/* Renews n entries the watchdog marked busy (no op_mu), in one batch when
 * the provider has renew_batch; results[i] for entries[i]. */
void dlock__p_renew_batch(dlock_client *c, struct dlock__entry *const *entries, size_t n, int *results);
int dlock__p_fence(dlock_client *c, struct dlock__entry *e, uint64_t *out);
bool dlock__p_can_wait(const dlock_client *c);
int dlock__p_wait(dlock_client *c, struct dlock__entry *e, int64_t timeout_ms, int wake_fd);
/* Whether waits can be parked on a descriptor (wait_arm and wait_disarm,
 * version 5, with native waiting). */
bool dlock__p_can_park(const dlock_client *c);
/* wait_arm: DLOCK_OK with *fd (-1: none) and *timeout_ms (never raised);
 * DLOCK_ENOTSUP when the provider cannot park this wait; a failure. */
int dlock__p_wait_arm(dlock_client *c, struct dlock__entry *e, int64_t *timeout_ms, int *fd);
/* wait_disarm, after each DLOCK_OK of wait_arm until it answers other than
 * DLOCK_EBUSY (still armed, for *timeout_ms more: it arrives as the time
 * left, never raised; only ever answered when fired). */
int dlock__p_wait_disarm(dlock_client *c, struct dlock__entry *e, bool fired, int64_t *timeout_ms);
/* Whether an attempt's round trip can be parked (acquire_send,
 * acquire_recv and acquire_drop, version 6). */
bool dlock__p_can_send(const dlock_client *c);
/* acquire_send: DLOCK_OK (in flight, io filled); DLOCK_ENOTSUP (use
 * dlock__p_acquire for this attempt); a failure, as acquire's. */
int dlock__p_acquire_send(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io);
/* acquire_recv: DLOCK_PROVIDER_AGAIN (not whole yet), DLOCK_ENOTSUP (nothing
 * in flight: use dlock__p_acquire), or the attempt's result with *g, as
 * dlock__p_acquire's. */
int dlock__p_acquire_recv(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io,
                          struct dlock_grant *g);
/* acquire_drop, after the answer did not come in io->timeout_ms. */
void dlock__p_acquire_drop(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io);
/* Whether no call of the provider waits for a network or another process
 * (DLOCK_CAP_IN_PROCESS, version 7): the non-blocking API then makes them
 * on the caller's thread. */
bool dlock__p_in_process(const dlock_client *c);
/* Whether a release's round trip can be parked (release_send,
 * release_recv and release_drop, version 7). */
bool dlock__p_can_send_release(const dlock_client *c);
/* release_send: DLOCK_OK (in flight, io filled); DLOCK_ENOTSUP (use
 * dlock__p_release); a failure, as release's. */
int dlock__p_release_send(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io);
/* release_recv: DLOCK_PROVIDER_AGAIN, DLOCK_ENOTSUP (nothing in flight: use
 * dlock__p_release), or the release's result. */
int dlock__p_release_recv(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io);
/* release_drop, after the answer did not come in io->timeout_ms. */
void dlock__p_release_drop(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io);
void dlock__p_abandon(dlock_client *c, struct dlock__entry *e);
/* watch_wanted (DLOCK_ENOTSUP without DLOCK_CAP_CACHE) and unwatch_wanted,
 * under e->op_mu. */
int dlock__p_watch_wanted(dlock_client *c, struct dlock__entry *e);
void dlock__p_unwatch_wanted(dlock_client *c, struct dlock__entry *e);
/* Calls lock_fini once if the provider ever touched e. */
void dlock__p_lock_fini(dlock_client *c, struct dlock__entry *e);
/* DLOCK_ENOTSUP when the provider has no ctl. */
int dlock__p_ctl(dlock_client *c, int op, void *arg);
/* One page of a listing; DLOCK_ENOTSUP (with the detail set) when the
 * provider predates version 3 or does not list. */
int dlock__p_list(dlock_client *c, struct dlock_provider_list *req);
int dlock__p_break(dlock_client *c, const char *name, size_t name_len, int *broken, uint64_t *fence);
/* Elections (DLOCK_CAP_ELECTION; DLOCK_ENOTSUP without). value_put takes
 * e->op_mu and sends nothing (DLOCK_ENOTOWNER) unless e is still holder's
 * hold of fence term, not lost nor being released; the caller keeps the
 * watchdog off e meanwhile. leader_get
 * zeroes *out first and frees what a failure left in it. */
int dlock__p_value_put(dlock_client *c, struct dlock__entry *e, uint64_t holder, uint64_t term, const void *value,
                       size_t len);
int dlock__p_leader_get(dlock_client *c, const char *name, size_t name_len, struct dlock_provider_leader *out);
/* What an observer reported last (core/leader.c), zeroed at the start. */
struct dlock__leader_seen {
    bool reported;
    uint64_t term;                  /* of the last report, 0 for nobody */
    uint64_t highest;               /* the greatest term ever reported */
    uint64_t ended;                 /* the greatest term seen to end (nobody read after it) */
    void *value;                    /* the last report's value (owned) */
    size_t value_len;
};
/* Whether a read (term, value: malloc()ed, taken) is news to report: a
 * change, and neither older than a term reported nor a term seen to end.
 * Updates s when it is; frees value when not. */
bool dlock__leader_news(struct dlock__leader_seen *s, uint64_t term, void *value, size_t len);
void dlock__leader_seen_free(struct dlock__leader_seen *s);
/* Observers' watches: can_watch says whether the provider has them. */
bool dlock__p_can_watch(const dlock_client *c);
int dlock__p_watch_open(dlock_client *c, const char *name, size_t name_len, void **watch, int *fd);
int dlock__p_watch_consume(dlock_client *c, void *watch);
void dlock__p_watch_close(dlock_client *c, void *watch);

/* ---- expiry.c: declares holds lost at their validity end ------------------- */
/* A thread per client (started with the first hold) that fires at each
 * hold's validity end on the boot clock and never calls the provider, so no
 * slow server call can delay a loss. */
void dlock__expiry_init(dlock_client *client);
/* (Re)arms entry's expiry at valid_until_boot_ms. DLOCK_OK or an error. */
int dlock__expiry_arm(dlock_client *client, struct dlock__entry *entry, int64_t valid_until_boot_ms);
/* Disarms it, after waiting until the expiry thread is not working on entry
 * (unless called from that thread, as an on_lost callback that releases). */
void dlock__expiry_disarm(dlock_client *client, struct dlock__entry *entry);
/* The same, unless the expiry thread is working on entry right now:
 * false then, and nothing changed. */
bool dlock__expiry_try_disarm(dlock_client *client, struct dlock__entry *entry);
/* Called by the expiry thread when entry's validity end has come (hold.c). */
void dlock__entry_on_expiry(dlock_client *client, struct dlock__entry *entry);

#endif
