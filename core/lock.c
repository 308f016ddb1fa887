/* core/lock.c - lock handles and their shared per-name state: the acquire
 * loop, reentrancy, release, renewal, fences, validity and cancellation.
 *
 * Handles of one name in one client share an entry, and holds belong to
 * (client, thread). Inside a client only one thread at a time talks to the
 * backend about a name (the contender); the others queue on the entry's
 * condition variable. That keeps in-process contention off the server and
 * means a provider never sees two operations on one lock at once.
 *
 * Lock order: client->entries_mu, then entry->mu; entry->op_mu is taken with
 * neither held; the watchdog's mutex is never held while taking these. */
#include "config.h"

#include "entry.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---- thread identity and wake-up fd --------------------------------------- */

static uint64_t next_thread_no = 1;
static __thread uint64_t this_thread_no;

/* A process-unique number for the calling thread. pthread_t values are
 * reused after a thread exits; these never are. */
static uint64_t thread_no(void)
{
    if (this_thread_no == 0)
        this_thread_no = __atomic_fetch_add(&next_thread_no, 1, __ATOMIC_RELAXED);
    return this_thread_no;
}

static pthread_once_t wake_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t wake_key;
static __thread int this_thread_wake_fd = -1;

static void close_wake_fd(void *value)
{
    close((int)(intptr_t)value - 1);
}

static void make_wake_key(void)
{
    pthread_key_create(&wake_key, close_wake_fd);
}

/* The calling thread's eventfd, which dlock_cancel() writes to interrupt a
 * wait. One per thread (not per lock) so holding many locks costs no fds. */
static int thread_wake_fd(void)
{
    if (this_thread_wake_fd >= 0)
        return this_thread_wake_fd;
    pthread_once(&wake_key_once, make_wake_key);
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0)
        return -1;
    this_thread_wake_fd = fd;
    pthread_setspecific(wake_key, (void *)(intptr_t)(fd + 1));
    return fd;
}

static void drain(int fd)
{
    uint64_t v;
    while (read(fd, &v, sizeof v) > 0)
        ;
}

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void count_fork(void)
{
    fork_generation++; /* in the child, which has one thread */
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, count_fork);
}

uint64_t dlock__fork_generation(void)
{
    pthread_once(&atfork_once, install_atfork);
    return __atomic_load_n(&fork_generation, __ATOMIC_RELAXED);
}

int dlock__client_usable(const dlock_client *client)
{
    if (!client)
        return dlock_seterr(DLOCK_EINVAL, "client is NULL");
    if (client->fork_generation != __atomic_load_n(&fork_generation, __ATOMIC_RELAXED))
        return dlock_seterr(DLOCK_EINVAL,
                            "this client was opened in process %ld and cannot be used after fork(); "
                            "open a new client in the child (this is process %ld)", (long)client->pid,
                            (long)getpid());
    return DLOCK_OK;
}

static int handle_usable(const dlock_lock *lock)
{
    if (!lock)
        return dlock_seterr(DLOCK_EINVAL, "lock is NULL");
    return dlock__client_usable(lock->entry->client);
}

/* A printable form of a name for messages: at most 64 bytes, escaped. */
static const char *show(const struct dlock__entry *e)
{
    static __thread char buf[300];
    size_t o = 0;
    for (size_t i = 0; i < e->name_len && i < 64 && o + 5 < sizeof buf; i++) {
        unsigned char c = (unsigned char)e->name[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, sizeof buf - o, "\\x%02x", c);
    }
    if (e->name_len > 64)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "...");
    buf[o] = 0;
    return buf;
}

static uint64_t hash_name(const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)name[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static size_t priv_offset(void)
{
    return (sizeof(struct dlock__entry) + 15) & ~(size_t)15;
}

/* ---- the name table (client->entries_mu held) ------------------------------ */

static struct dlock__entry *table_find(dlock_client *c, const char *name, size_t len, uint64_t h)
{
    if (!c->buckets)
        return NULL;
    for (struct dlock__entry *e = c->buckets[h % c->nbuckets]; e; e = e->next_in_bucket)
        if (e->hash == h && e->name_len == len && memcmp(e->name, name, len) == 0)
            return e;
    return NULL;
}

static int table_grow(dlock_client *c)
{
    size_t n = c->nbuckets ? c->nbuckets * 2 : 64;
    struct dlock__entry **b = calloc(n, sizeof *b);
    if (!b)
        return DLOCK_ENOMEM;
    for (size_t i = 0; i < c->nbuckets; i++) {
        struct dlock__entry *e = c->buckets[i];
        while (e) {
            struct dlock__entry *next = e->next_in_bucket;
            e->next_in_bucket = b[e->hash % n];
            b[e->hash % n] = e;
            e = next;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = n;
    return DLOCK_OK;
}

static void table_unlink(dlock_client *c, struct dlock__entry *e)
{
    struct dlock__entry **p = &c->buckets[e->hash % c->nbuckets];
    while (*p && *p != e)
        p = &(*p)->next_in_bucket;
    if (*p) {
        *p = e->next_in_bucket;
        c->nentries--;
    }
}

static struct dlock__entry *entry_new(dlock_client *c, const char *name, size_t len, uint64_t h)
{
    size_t priv = c->provider->lock_priv_size;
    struct dlock__entry *e = calloc(1, priv_offset() + priv);
    if (!e)
        return NULL;
    e->name = malloc(len + 1);
    if (!e->name) {
        free(e);
        return NULL;
    }
    memcpy(e->name, name, len);
    e->name[len] = 0;
    e->name_len = len;
    e->hash = h;
    e->client = c;
    e->timer.heap_index = SIZE_MAX;
    e->expiry.heap_index = SIZE_MAX;
    e->contender_wake_fd = -1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->op_mu, NULL);
    dlock__cond_init_monotonic(&e->cv);
    e->plock.name = e->name;
    e->plock.name_len = len;
    e->plock.owner = e->owner;
    e->plock.priv = priv ? (char *)e + priv_offset() : NULL;
    return e;
}

static void entry_destroy(dlock_client *c, struct dlock__entry *e)
{
    if (e->provider_touched && c->provider->lock_fini)
        c->provider->lock_fini(c->instance, &e->plock);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->op_mu);
    pthread_cond_destroy(&e->cv);
    free(e->name);
    free(e);
}

/* Frees e if nothing refers to it any more. */
static void entry_maybe_destroy(dlock_client *c, struct dlock__entry *e)
{
    bool idle;
    pthread_mutex_lock(&c->entries_mu);
    pthread_mutex_lock(&e->mu);
    idle = e->handles == 0 && e->count == 0 && !e->contending && e->waiters == 0;
    if (idle)
        table_unlink(c, e);
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_unlock(&c->entries_mu);
    if (idle) {
        dlock__expiry_disarm(c, e);
        dlock__watchdog_cancel(c, e);
        entry_destroy(c, e);
    }
}

/* ---- handles ----------------------------------------------------------------- */

static int check_name(const char *name, size_t len)
{
    if (!name)
        return dlock_seterr(DLOCK_EINVAL, "lock name is NULL");
    if (len == 0 || len > DLOCK_NAME_MAX)
        return dlock_seterr(DLOCK_EINVAL, "lock name must be 1..%d bytes, not %zu", DLOCK_NAME_MAX, len);
    if (memchr(name, 0, len))
        return dlock_seterr(DLOCK_EINVAL, "lock name contains a NUL byte at offset %zu",
                            (size_t)((const char *)memchr(name, 0, len) - name));
    return DLOCK_OK;
}

static int check_options(const dlock_client *c, const dlock_lock_options *o)
{
    if (!o)
        return DLOCK_OK;
    if (o->version < 1 || o->version > DLOCK_LOCK_OPTIONS_VERSION)
        return dlock_seterr(DLOCK_EINVAL,
                            "dlock_lock_options.version is %u; initialise options with "
                            "DLOCK_LOCK_OPTIONS_INIT", o->version);
    if (o->lease_ms < 0 || (o->lease_ms > 0 && o->lease_ms < 10) || o->lease_ms > 86400000)
        return dlock_seterr(DLOCK_EINVAL,
                            "lease_ms must be 0 (watchdog) or 10..86400000 ms, not %lld",
                            (long long)o->lease_ms);
    if (o->flags & ~DLOCK_LOCK_FAIR)
        return dlock_seterr(DLOCK_EINVAL, "unknown lock flags 0x%x", o->flags & ~DLOCK_LOCK_FAIR);
    if ((o->flags & DLOCK_LOCK_FAIR) && !(c->provider->capabilities & DLOCK_CAP_FAIR))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend has no fair mode", c->provider->name);
    return DLOCK_OK;
}

int dlock_lock_new(dlock_client *client, const char *name, size_t name_len,
                   const dlock_lock_options *options, dlock_lock **out)
{
    int rc;
    if (out)
        *out = NULL;
    if ((rc = dlock__client_usable(client)) != DLOCK_OK || (rc = check_name(name, name_len)) != DLOCK_OK ||
        (rc = check_options(client, options)) != DLOCK_OK)
        return rc;
    if (!out)
        return dlock_seterr(DLOCK_EINVAL, "dlock_lock_new: out is NULL");

    dlock_lock *h = calloc(1, sizeof *h);
    if (!h)
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for a lock handle");
    dlock_lock_options defaults = DLOCK_LOCK_OPTIONS_INIT;
    h->options = options ? *options : defaults;
    h->options.version = DLOCK_LOCK_OPTIONS_VERSION;

    uint64_t hash = hash_name(name, name_len);
    pthread_mutex_lock(&client->entries_mu);
    struct dlock__entry *e = table_find(client, name, name_len, hash);
    if (!e) {
        if (client->nentries >= client->nbuckets && table_grow(client) != DLOCK_OK) {
            pthread_mutex_unlock(&client->entries_mu);
            free(h);
            return dlock_seterr(DLOCK_ENOMEM, "out of memory for the lock table");
        }
        e = entry_new(client, name, name_len, hash);
        if (!e) {
            pthread_mutex_unlock(&client->entries_mu);
            free(h);
            return dlock_seterr(DLOCK_ENOMEM, "out of memory for lock state");
        }
        e->next_in_bucket = client->buckets[hash % client->nbuckets];
        client->buckets[hash % client->nbuckets] = e;
        client->nentries++;
    }
    e->handles++;
    h->entry = e;
    h->next = client->handles;
    if (client->handles)
        client->handles->prev = h;
    client->handles = h;
    pthread_mutex_unlock(&client->entries_mu);
    *out = h;
    return DLOCK_OK;
}

const char *dlock_lock_name(const dlock_lock *lock, size_t *len)
{
    if (!lock) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = lock->entry->name_len;
    return lock->entry->name;
}

static int release_hold(dlock_client *c, struct dlock__entry *e);

void dlock_lock_free(dlock_lock *lock)
{
    if (!lock || dlock__client_usable(lock->entry->client) != DLOCK_OK)
        return;
    struct dlock__entry *e = lock->entry;
    dlock_client *c = e->client;
    pthread_mutex_lock(&c->entries_mu);
    bool last = --e->handles == 0;
    if (lock->prev)
        lock->prev->next = lock->next;
    else
        c->handles = lock->next;
    if (lock->next)
        lock->next->prev = lock->prev;
    pthread_mutex_lock(&e->mu);
    if (e->on_lost_handle == lock) {
        /* The callback belonged to this handle's options. */
        e->on_lost = NULL;
        e->on_lost_handle = NULL;
    }
    bool held_by_me = e->count > 0 && e->holder == thread_no();
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_unlock(&c->entries_mu);
    /* An on_lost call already under way may use this handle until it
     * returns (dlock.h allows it any call but close and free). */
    pthread_mutex_lock(&e->mu);
    while (lock->lost_calls_running > 0)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    free(lock);

    if (last && held_by_me)
        release_hold(c, e);
    if (last)
        entry_maybe_destroy(c, e);
}

/* ---- acquire ------------------------------------------------------------------ */

static int64_t effective_lease(const dlock_client *c, const dlock_lock *h)
{
    return h->options.lease_ms > 0 ? h->options.lease_ms : c->config.lease_ms;
}

static bool renewed_by_watchdog(const dlock_client *c, const dlock_lock *h)
{
    return h->options.lease_ms == 0 && c->config.watchdog &&
           (c->provider->capabilities & DLOCK_CAP_RENEW);
}

/* The lease the server grants: what was asked, or less if it said so. */
static int64_t granted_lease(const struct dlock__entry *e, const struct dlock_grant *g)
{
    return g->lease_ms > 0 && g->lease_ms < e->plock.lease_ms ? g->lease_ms : e->plock.lease_ms;
}

/* Records a grant of a request sent at t_send; called by the contender.
 * Returns DLOCK_OK, or an error if the hold cannot be looked after (then it
 * has been given back). */
static int record_grant(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                        struct dlock__stamp t_send, const struct dlock_grant *g)
{
    int64_t lease = granted_lease(e, g);
    bool watchdog = renewed_by_watchdog(c, h);
    pthread_mutex_lock(&e->mu);
    e->count = 1;
    e->holder = self;
    e->lost = e->lost_notified = e->give_back_due = false;
    e->give_back_tries = 0;
    e->lost_reason[0] = 0;
    e->fence = g->fence;
    e->has_fence = g->has_fence != 0;
    e->renewed_by_watchdog = watchdog;
    e->lease_ms = lease;
    e->valid_until_ms = t_send.boot_ms + lease - dlock__drift_ms(lease);
    e->granted_at_ms = dlock__now_ms();
    e->on_lost = h->options.on_lost;
    e->on_lost_arg = h->options.on_lost_arg;
    e->on_lost_handle = h;
    int64_t valid_until = e->valid_until_ms;
    pthread_mutex_unlock(&e->mu);

    int rc = dlock__expiry_arm(c, e, valid_until);
    if (rc == DLOCK_OK && watchdog)
        rc = dlock__watchdog_schedule(c, e, t_send.mono_ms + lease / 3);
    if (rc != DLOCK_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", dlock_errmsg());
        release_hold(c, e);
        return dlock_seterr(rc, "lock '%s': granted but not kept, since %s", show(e), why);
    }
    dlock__metric_inc(&c->metrics.grants);
    return DLOCK_OK;
}

/* How long to pause after a busy answer. */
static int64_t pause_after_busy(const dlock_client *c, unsigned attempt, int64_t hint_ms)
{
    if (c->provider->wait)
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
static int queue_locally(struct dlock__entry *e, int64_t wait_ms, int64_t deadline, uint64_t gen)
{
    while (e->count > 0 || e->contending) {
        if (e->cancel_gen != gen)
            return dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled", show(e));
        if (wait_ms == 0)
            return dlock_seterr(DLOCK_EBUSY, "lock '%s' is held by another thread of this client", show(e));
        if (dlock__now_ms() >= deadline)
            return dlock_seterr(DLOCK_ETIMEDOUT, "lock '%s': not granted within %lld ms (another thread of "
                                "this client holds it)", show(e), (long long)wait_ms);
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
        return dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled", show(e));
    return DLOCK_OK;
}

static int contend_loop(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                        int64_t wait_ms, int64_t deadline, uint64_t gen, int wake_fd, bool *was_busy);

/* Talks to the backend until granted, out of time, cancelled or failed; a
 * provider that queued us is told when we give up. */
static int contend(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                   int64_t wait_ms, int64_t deadline, uint64_t gen, int wake_fd)
{
    bool was_busy = false;
    int rc = contend_loop(c, e, h, self, wait_ms, deadline, gen, wake_fd, &was_busy);
    if (rc != DLOCK_OK && was_busy && c->provider->abandon) {
        char detail[1024];
        snprintf(detail, sizeof detail, "%s", dlock_errmsg());
        pthread_mutex_lock(&e->op_mu);
        c->provider->abandon(c->instance, &e->plock);
        pthread_mutex_unlock(&e->op_mu);
        dlock_seterr(rc, "%s", detail);
    }
    return rc;
}

static int contend_loop(dlock_client *c, struct dlock__entry *e, dlock_lock *h, uint64_t self,
                        int64_t wait_ms, int64_t deadline, uint64_t gen, int wake_fd, bool *was_busy)
{
    for (unsigned attempt = 0;; attempt++) {
        struct dlock_grant g = { .fence = 0, .has_fence = 0, .retry_hint_ms = -1 };
        struct dlock__stamp t_send = dlock__stamp_now();
        pthread_mutex_lock(&e->op_mu);
        e->provider_touched = true;
        int rc = c->provider->acquire(c->instance, &e->plock, &g);
        pthread_mutex_unlock(&e->op_mu);
        dlock__metric_inc(&c->metrics.attempts);

        if (rc == DLOCK_OK)
            return record_grant(c, e, h, self, t_send, &g);
        if (rc != DLOCK_EBUSY) {
            dlock__metric_inc(&c->metrics.backend_errors);
            return rc; /* the provider set the detail */
        }
        *was_busy = true;
        dlock__metric_inc(&c->metrics.busy);
        if (wait_ms == 0)
            return dlock_seterr(DLOCK_EBUSY, "lock '%s' is held by another owner", show(e));
        int64_t now = dlock__now_ms();
        if (now >= deadline)
            return dlock_seterr(DLOCK_ETIMEDOUT, "lock '%s': not granted within %lld ms", show(e),
                                (long long)wait_ms);
        int64_t pause = pause_after_busy(c, attempt, g.retry_hint_ms);
        if (deadline != DLOCK__INFINITE && pause > deadline - now)
            pause = deadline - now;
        if (c->provider->wait)
            rc = c->provider->wait(c->instance, &e->plock, pause, wake_fd);
        else
            rc = idle_wait(wake_fd, pause);
        if (rc != DLOCK_OK && rc != DLOCK_ETIMEDOUT) {
            dlock__metric_inc(&c->metrics.backend_errors);
            return rc;
        }
        if (wake_fd >= 0)
            drain(wake_fd);
        pthread_mutex_lock(&e->mu);
        bool cancelled = e->cancel_gen != gen;
        pthread_mutex_unlock(&e->mu);
        if (cancelled)
            return dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled", show(e));
    }
}

int dlock_acquire(dlock_lock *h, int64_t wait_ms)
{
    int rc = handle_usable(h);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__entry *e = h->entry;
    dlock_client *c = e->client;
    uint64_t self = thread_no();
    int64_t start = dlock__now_ms();
    int64_t deadline = dlock__deadline_after(start, wait_ms);

    pthread_mutex_lock(&e->mu);
    if (e->count > 0 && e->holder == self) {
        if (e->lost) {
            pthread_mutex_unlock(&e->mu);
            return dlock_seterr(DLOCK_ELOST, "lock '%s': this thread's hold was lost (%s); release it "
                                "before acquiring again", show(e), e->lost_reason);
        }
        e->count++;
        pthread_mutex_unlock(&e->mu);
        dlock__metric_inc(&c->metrics.reentries);
        return DLOCK_OK;
    }
    uint64_t gen = e->cancel_gen;
    e->waiters++;
    rc = queue_locally(e, wait_ms, deadline, gen);
    int wake_fd = -1;
    if (rc == DLOCK_OK) {
        e->contending = true;
        wake_fd = thread_wake_fd();
        e->contender_wake_fd = wake_fd;
        snprintf(e->owner, sizeof e->owner, "%s:%llu", c->client_id, (unsigned long long)self);
        e->plock.lease_ms = effective_lease(c, h);
        e->plock.flags = h->options.flags;
        pthread_mutex_unlock(&e->mu);
        if (wake_fd < 0)
            rc = dlock_seterr(DLOCK_EINTERNAL, "cannot create an eventfd for waiting: %s", strerror(errno));
        else
            rc = contend(c, e, h, self, wait_ms, deadline, gen, wake_fd);
        pthread_mutex_lock(&e->mu);
        e->contending = false;
        e->contender_wake_fd = -1;
    }
    e->waiters--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);

    switch (rc) {
    case DLOCK_OK:
        dlock__histogram_observe(&c->metrics.wait_ms, dlock__now_ms() - start);
        break;
    case DLOCK_ETIMEDOUT:
        dlock__metric_inc(&c->metrics.timeouts);
        break;
    case DLOCK_ECANCELLED:
        dlock__metric_inc(&c->metrics.cancels);
        break;
    }
    return rc;
}

/* ---- release, renew ------------------------------------------------------------ */

/* Lets go of the calling thread's whole hold on e, on the backend too. */
static int release_hold(dlock_client *c, struct dlock__entry *e)
{
    dlock__watchdog_cancel(c, e);
    dlock__expiry_disarm(c, e);
    pthread_mutex_lock(&e->mu);
    bool lost = e->lost;
    /* A loss the client declared whose give-back the watchdog has not sent
     * yet: send it here, owner-checked, so the server forgets the hold now
     * rather than at its own expiry (or, for a session, never). */
    bool give_back = e->give_back_due;
    e->give_back_due = false;
    int64_t granted_at = e->granted_at_ms;
    char reason[sizeof e->lost_reason];
    memcpy(reason, e->lost_reason, sizeof reason);
    pthread_mutex_unlock(&e->mu);

    int rc = DLOCK_OK;
    if (!lost || give_back) {
        pthread_mutex_lock(&e->op_mu);
        rc = c->provider->release(c->instance, &e->plock);
        pthread_mutex_unlock(&e->op_mu);
    }

    pthread_mutex_lock(&e->mu);
    e->count = 0;
    e->holder = 0;
    e->lost = e->lost_notified = e->give_back_due = false;
    e->on_lost = NULL;
    e->on_lost_handle = NULL;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);

    dlock__histogram_observe(&c->metrics.hold_ms, dlock__now_ms() - granted_at);
    if (lost) {
        dlock__metric_inc(&c->metrics.release_failures);
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the hold had been lost (%s); nothing was released",
                            show(e), reason);
    }
    if (rc == DLOCK_ENOTOWNER || rc == DLOCK_ELOST) {
        dlock__metric_inc(&c->metrics.release_failures);
        dlock__metric_inc(&c->metrics.losses);
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the backend no longer had this hold (it expired or "
                            "was taken over); nothing was deleted", show(e));
    }
    if (rc != DLOCK_OK) {
        dlock__metric_inc(&c->metrics.release_failures);
        dlock__metric_inc(&c->metrics.backend_errors);
        return rc; /* provider detail; the lease frees it */
    }
    dlock__metric_inc(&c->metrics.releases);
    return DLOCK_OK;
}

/* Checks that the calling thread holds e; returns with e->mu held on
 * DLOCK_OK (and also on DLOCK_ELOST when allow_lost). */
static int lock_own(struct dlock__entry *e, bool allow_lost)
{
    pthread_mutex_lock(&e->mu);
    if (e->count == 0 || e->holder != thread_no()) {
        pthread_mutex_unlock(&e->mu);
        return dlock_seterr(DLOCK_ENOTOWNER, "lock '%s' is not held by this thread", show(e));
    }
    if (e->lost) {
        if (allow_lost)
            return DLOCK_ELOST;
        pthread_mutex_unlock(&e->mu);
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the hold was lost (%s)", show(e), e->lost_reason);
    }
    return DLOCK_OK;
}

int dlock_release(dlock_lock *h)
{
    int rc = handle_usable(h);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__entry *e = h->entry;
    rc = lock_own(e, true);
    if (rc != DLOCK_OK && rc != DLOCK_ELOST)
        return rc;
    if (rc == DLOCK_OK && e->count > 1) {
        e->count--;
        pthread_mutex_unlock(&e->mu);
        return DLOCK_OK;
    }
    pthread_mutex_unlock(&e->mu);
    return release_hold(e->client, e);
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

static void lost_call_run(struct dlock__entry *e, struct lost_call *call)
{
    if (!call->fn)
        return;
    call->fn(call->handle, call->arg);
    pthread_mutex_lock(&e->mu);
    call->handle->lost_calls_running--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    call->fn = NULL;
}

/* After a loss: logs it (outside e->mu, as the log sink may be slow), calls
 * on_lost, and has the watchdog give the hold back. */
static void after_loss(dlock_client *c, struct dlock__entry *e, bool notify, struct lost_call *call,
                       const char *why)
{
    dlock__logf(&c->log, DLOCK_LOG_WARN, "lock '%s' lost: %s", show(e), why);
    if (notify)
        lost_call_run(e, call);
    dlock__watchdog_schedule(c, e, dlock__now_ms());
}

/* Applies the answer to a renewal sent at t_send (e->mu not held). */
static void apply_renewal(dlock_client *c, struct dlock__entry *e, int rc, struct dlock__stamp t_send)
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
            dlock__watchdog_schedule(c, e, t_send.mono_ms + lease / 3);
        return;
    }
    dlock__metric_inc(&c->metrics.renewal_failures);
    const char *why = NULL;
    if (rc == DLOCK_ELOST || rc == DLOCK_ENOTOWNER)
        why = "the backend no longer has it (expired or taken over)";
    else if (now.boot_ms >= e->valid_until_ms)
        why = "renewals failed until the lease ran out";
    if (why) {
        bool notify = mark_lost(c, e, why);
        struct lost_call call = notify ? lost_call_take(e) : (struct lost_call){ 0 };
        pthread_mutex_unlock(&e->mu);
        after_loss(c, e, notify, &call, why);
        return;
    }
    /* Transient failure: try again soon, well before validity ends. The
     * expiry thread declares the loss at the validity end if no retry gets
     * through, however long a retry takes. */
    int64_t left = e->valid_until_ms - now.boot_ms;
    int64_t retry = left / 3;
    if (retry > lease / 6)
        retry = lease / 6;
    due = now.mono_ms + (retry < 10 ? 10 : retry);
    pthread_mutex_unlock(&e->mu);
    char detail[256];
    snprintf(detail, sizeof detail, "%s", dlock_errmsg());
    dlock__logf(&c->log, DLOCK_LOG_WARN, "lock '%s': renewal failed (%s); retrying in %lld ms, lost in %lld ms "
                "unless renewed", show(e), detail, (long long)(due - now.mono_ms), (long long)left);
    dlock__watchdog_schedule(c, e, due);
}

int dlock_renew(dlock_lock *h)
{
    int rc = handle_usable(h);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__entry *e = h->entry;
    dlock_client *c = e->client;
    if (!(c->provider->capabilities & DLOCK_CAP_RENEW))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot renew a hold", c->provider->name);
    if ((rc = lock_own(e, false)) != DLOCK_OK)
        return rc;
    pthread_mutex_unlock(&e->mu);

    /* Out of the watchdog's hands while we renew; apply_renewal schedules
     * it again (or it was lost). */
    dlock__watchdog_cancel(c, e);
    struct dlock__stamp t_send = dlock__stamp_now();
    pthread_mutex_lock(&e->op_mu);
    rc = c->provider->renew(c->instance, &e->plock);
    pthread_mutex_unlock(&e->op_mu);
    apply_renewal(c, e, rc, t_send); /* re-arms expiry and the next renewal, or declares the loss */
    if (rc == DLOCK_ENOTOWNER || rc == DLOCK_ELOST)
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the backend no longer has this hold", show(e));
    return rc;
}

/* ---- the watchdog's work ----------------------------------------------------------- */

/* Declares e lost now that its validity has ended (e->mu held; returns
 * with it released), and calls on_lost. */
static void declare_expired(dlock_client *c, struct dlock__entry *e)
{
    char why[96];
    if (e->renewed_by_watchdog)
        snprintf(why, sizeof why, "renewals did not get through before the lease ran out");
    else
        snprintf(why, sizeof why, "its lease of %lld ms ran out", (long long)e->lease_ms);
    bool notify = mark_lost(c, e, why);
    struct lost_call call = notify ? lost_call_take(e) : (struct lost_call){ 0 };
    pthread_mutex_unlock(&e->mu);
    after_loss(c, e, notify, &call, why);
}

/* Sends the owner-checked release of a lost hold. When the backend cannot
 * be reached (the partition that made the hold lost may still be on), it
 * is tried again with backoff while the hold is still registered here, a
 * few times: the server may keep the hold (a session that survives a short
 * partition) until it is told. */
#define GIVE_BACK_TRIES 8
static void give_back_lost_hold(dlock_client *c, struct dlock__entry *e)
{
    pthread_mutex_lock(&e->op_mu);
    int rc = c->provider->release(c->instance, &e->plock);
    pthread_mutex_unlock(&e->op_mu);
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
    declare_expired(c, e);
}

void dlock__entry_on_timer(dlock_client *c, struct dlock__entry **due, size_t n)
{
    struct dlock__entry *renew[DLOCK__WATCHDOG_BATCH_MAX];
    struct dlock_provider_lock *plocks[DLOCK__WATCHDOG_BATCH_MAX];
    int results[DLOCK__WATCHDOG_BATCH_MAX];
    size_t nrenew = 0;

    for (size_t i = 0; i < n; i++) {
        struct dlock__entry *e = due[i];
        pthread_mutex_lock(&e->mu);
        if (e->count == 0) {
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        if (e->lost) {
            /* Give a lost hold back, owner-checked: harmless where the
             * server already let it go, and it frees a backend without
             * server-side expiry (local) or a session that outlived the
             * client's decision (ZooKeeper, SQL session locks). */
            bool give_back = e->give_back_due;
            e->give_back_due = false;
            pthread_mutex_unlock(&e->mu);
            if (give_back)
                give_back_lost_hold(c, e);
            continue;
        }
        if (dlock__boot_ms() >= e->valid_until_ms) {
            declare_expired(c, e); /* the expiry thread is about to; no renewal can save it */
            continue;
        }
        bool watchdog = e->renewed_by_watchdog;
        pthread_mutex_unlock(&e->mu);
        if (watchdog) {
            renew[nrenew] = e;
            plocks[nrenew++] = &e->plock;
        }
    }

    if (nrenew == 0)
        return;
    /* No op_mu here: these entries are marked busy for the watchdog, and
     * release, dlock_renew and dlock_fence wait for that flag to clear before
     * they touch the provider, so no other operation on them can overlap. */
    struct dlock__stamp t_send = dlock__stamp_now();
    int64_t t_send_us = dlock__now_us();
    int batch_rc = DLOCK_ENOTSUP;
    if (nrenew > 1 && c->provider->renew_batch) {
        batch_rc = c->provider->renew_batch(c->instance, plocks, nrenew, results);
        if (batch_rc != DLOCK_OK)
            for (size_t i = 0; i < nrenew; i++)
                results[i] = batch_rc;
    } else {
        for (size_t i = 0; i < nrenew; i++)
            results[i] = c->provider->renew(c->instance, &renew[i]->plock);
    }
    __atomic_add_fetch(&c->metrics.renewal_round_us, (uint64_t)(dlock__now_us() - t_send_us), __ATOMIC_RELAXED);
    dlock__metric_inc(&c->metrics.renewal_rounds);
    for (size_t i = 0; i < nrenew; i++)
        apply_renewal(c, renew[i], results[i], t_send);
}

/* ---- queries -------------------------------------------------------------------- */

int dlock_fence(dlock_lock *h, uint64_t *out)
{
    int rc = handle_usable(h);
    if (rc != DLOCK_OK)
        return rc;
    if (!out)
        return dlock_seterr(DLOCK_EINVAL, "dlock_fence: out is NULL");
    struct dlock__entry *e = h->entry;
    dlock_client *c = e->client;
    if ((rc = lock_own(e, false)) != DLOCK_OK)
        return rc;
    bool has = e->has_fence;
    uint64_t fence = e->fence;
    pthread_mutex_unlock(&e->mu);
    if (has) {
        *out = fence;
        return DLOCK_OK;
    }
    if (!c->provider->fence)
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend does not issue fencing tokens", c->provider->name);
    int64_t due = dlock__watchdog_cancel(c, e); /* no overlap with a renewal */
    pthread_mutex_lock(&e->op_mu);
    rc = c->provider->fence(c->instance, &e->plock, &fence);
    pthread_mutex_unlock(&e->op_mu);
    if (due >= 0)
        dlock__watchdog_schedule(c, e, due);
    if (rc == DLOCK_OK) {
        pthread_mutex_lock(&e->mu);
        e->fence = fence;
        e->has_fence = true;
        pthread_mutex_unlock(&e->mu);
        *out = fence;
    }
    return rc;
}

int64_t dlock_validity_ms(dlock_lock *h)
{
    int rc = handle_usable(h);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__entry *e = h->entry;
    if ((rc = lock_own(e, false)) != DLOCK_OK)
        return rc;
    int64_t left = e->valid_until_ms - dlock__boot_ms();
    pthread_mutex_unlock(&e->mu);
    return left > 0 ? left : 0;
}

int dlock_hold_count(dlock_lock *h)
{
    int rc = handle_usable(h);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__entry *e = h->entry;
    pthread_mutex_lock(&e->mu);
    int count = (e->count > 0 && e->holder == thread_no()) ? (int)e->count : 0;
    bool lost = count > 0 && e->lost;
    pthread_mutex_unlock(&e->mu);
    if (lost)
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the hold was lost", show(e));
    return count;
}

int dlock_cancel(dlock_lock *h)
{
    int rc = handle_usable(h);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__entry *e = h->entry;
    pthread_mutex_lock(&e->mu);
    e->cancel_gen++;
    pthread_cond_broadcast(&e->cv);
    if (e->contender_wake_fd >= 0) {
        uint64_t one = 1;
        ssize_t ignored = write(e->contender_wake_fd, &one, sizeof one);
        (void)ignored; /* EAGAIN only if already signalled */
    }
    pthread_mutex_unlock(&e->mu);
    return DLOCK_OK;
}

/* ---- client close ------------------------------------------------------------------ */

void dlock__entries_close_all(dlock_client *c)
{
    while (c->handles) {
        dlock_lock *h = c->handles;
        c->handles = h->next;
        free(h);
    }
    for (size_t i = 0; i < c->nbuckets; i++) {
        struct dlock__entry *e = c->buckets[i];
        while (e) {
            struct dlock__entry *next = e->next_in_bucket;
            if (e->count > 0 && (!e->lost || e->give_back_due)) {
                pthread_mutex_lock(&e->op_mu);
                c->provider->release(c->instance, &e->plock);
                pthread_mutex_unlock(&e->op_mu);
            }
            entry_destroy(c, e);
            e = next;
        }
    }
    free(c->buckets);
    c->buckets = NULL;
    c->nbuckets = c->nentries = 0;
}
