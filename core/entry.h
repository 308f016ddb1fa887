/*
 * core/entry.h - the per-name state every handle of one name in one client
 * shares, seen by the modules that work on holds: lock.c (handles, acquire,
 * release, loss), watchdog.c (renewals and give-backs) and expiry.c (loss at
 * the validity end). Not part of any public or provider header.
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
    uint64_t hash;
    char *name;
    size_t name_len;

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
    int64_t lease_ms;               /* the lease the server grants (may be < plock.lease_ms) */
    int64_t valid_until_ms;         /* on the boot clock (dlock__boot_ms) */
    int64_t granted_at_ms;          /* monotonic */
    dlock_lost_fn on_lost;
    void *on_lost_arg;
    dlock_lock *on_lost_handle;

    pthread_mutex_t op_mu;          /* one provider operation at a time */
    bool provider_touched;          /* lock_fini is due */
    struct dlock_provider_lock plock;
    char owner[64];
    /* provider private state follows */
};

/* A moment on both clocks: monotonic for timers, boot for validity. */
struct dlock__stamp {
    int64_t mono_ms, boot_ms;
};
static inline struct dlock__stamp dlock__stamp_now(void)
{
    struct dlock__stamp s = { dlock__now_ms(), dlock__boot_ms() };
    return s;
}

/* ---- expiry.c: declares holds lost at their validity end ------------------- */
/* A thread per client (started with the first hold) that fires at each
 * hold's validity end on the boot clock and never calls the provider, so no
 * slow server call can delay a loss. */
void dlock__expiry_init(dlock_client *client);
void dlock__expiry_stop(dlock_client *client);
/* (Re)arms entry's expiry at valid_until_boot_ms. DLOCK_OK or an error. */
int dlock__expiry_arm(dlock_client *client, struct dlock__entry *entry, int64_t valid_until_boot_ms);
/* Disarms it, after waiting until the expiry thread is not working on entry
 * (unless called from that thread, as an on_lost callback that releases). */
void dlock__expiry_disarm(dlock_client *client, struct dlock__entry *entry);
/* Called by the expiry thread when entry's validity end has come (lock.c). */
void dlock__entry_on_expiry(dlock_client *client, struct dlock__entry *entry);

#endif
