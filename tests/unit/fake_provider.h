/* tests/unit/fake_provider.h - an in-process provider that keeps its "server"
 * state in memory and counts every call, so the core's loop, watchdog and
 * lost path can be checked exactly. Registered as "fake" (backoff waiting),
 * "fakewait" (native wait), "fakesend" (attempts and releases sent with
 * acquire_send and release_send, answered when the test says:
 * fake_answer_all) and "fakequick" (DLOCK_CAP_IN_PROCESS). */
#ifndef FAKE_PROVIDER_H
#define FAKE_PROVIDER_H

#include <dlock/provider.h>
#include <pthread.h>
#include <stdbool.h>

#define FAKE_SLOTS 32
#define FAKE_TIMES 512

struct fake_slot {
    char name[64];
    char holder[64];          /* owner id, "" when free */
    struct dlock_provider_lock *watched; /* fakecache: the holder told when someone asks */
};

struct fake_server {
    pthread_mutex_t mu;
    struct fake_slot slots[FAKE_SLOTS];
    uint64_t fence;
    uint64_t release_seq;     /* bumped on every release, for wait */
    int opens, closes, acquires, releases, renews, batches, batch_items, waits, finis;
    int acquire_rc;           /* if non-zero, acquire returns it */
    int renew_rc;             /* if non-zero, renew returns it */
    int64_t busy_hint_ms;     /* hint on busy (-1 none) */
    int64_t renew_delay_ms;   /* renew/renew_batch block this long first (a slow server) */
    int64_t release_delay_ms; /* release blocks this long first */
    int64_t acquire_delay_ms; /* acquire blocks this long first (a server far away) */
    int64_t granted_lease_ms; /* if > 0, acquire reports this as the lease granted */
    int64_t granted_valid_ms; /* if non-zero, acquire reports this as what is left of the lease */
    int passing_failures;     /* acquire answers this many DLOCK_EUNAVAILABLE with a 20 ms retry hint */
    unsigned caps_lacking;    /* DLOCK_CTL_CAPABILITIES clears these bits (an instance lacking them) */
    int sends, in_flight, most_in_flight, drops; /* fakesend's attempts */
    pthread_t recv_thread;    /* fakesend: the thread of the last answer read */
    pthread_t acquire_thread, release_thread; /* the threads of the last acquire and release */
    int release_sends;        /* fakesend: releases sent with release_send */
    pthread_t send_thread;    /* fakesend: the thread of the last acquire_send */
    pthread_t release_send_thread;
    bool release_answer_unreadable; /* fakesend: release_recv answers DLOCK_ENOTSUP */
    int64_t send_timeout_ms;  /* fakesend's io->timeout_ms (0: 5000) */
    int answer_fds[FAKE_SLOTS * 4]; /* fakesend: the test's ends of the attempts in flight */
    int nanswer_fds;
    int64_t renew_at[FAKE_TIMES];
    int nrenew_at;
    int64_t last_batch_n;
    void (*wanted)(struct dlock_provider_lock *lk); /* the core's env->wanted */
    int wanted_calls;         /* fakecache: holders told that someone asks */
    int watches;              /* fakecache: watch_wanted calls */
    int grants_made;          /* acquires answered with a grant */
    int asked_at_grant;       /* fakecache: a grant tells its (watched) holder someone asks, as when
                               * another owner's busy answer follows the grant at once */
    int foreign_releases;     /* releases by an owner that did not hold the name */
};

extern struct fake_server fake;
extern const struct dlock_provider fake_provider;
extern const struct dlock_provider fake_wait_provider;
/* "fakecache": the fake with DLOCK_CAP_CACHE (released holds may be kept). */
extern const struct dlock_provider fake_cache_provider;
extern const struct dlock_provider fake_send_provider;
/* "fakequick": the fake with DLOCK_CAP_IN_PROCESS (its calls never wait). */
extern const struct dlock_provider fake_in_process_provider;
/* fakesend: answers every attempt in flight (the answer is then read by
 * acquire_recv, which runs the fake's acquire). */
void fake_answer_all(void);

void fake_reset(void);
/* Makes NAME held by an owner that is not any client, or frees it. */
void fake_hold_externally(const char *name, bool held);
/* Drops NAME's hold as if it expired on the server. */
void fake_expire(const char *name);
int fake_get(int *counter);
/* Sets a field of the fake server under its mutex (the core's threads read them). */
#define FAKE_SET(field, value)              \
    do {                                    \
        pthread_mutex_lock(&fake.mu);       \
        fake.field = (value);               \
        pthread_mutex_unlock(&fake.mu);     \
    } while (0)

#endif
