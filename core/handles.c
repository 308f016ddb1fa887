/* core/handles.c - lock handles and the per-name entries they share: the
 * calling thread's identity and wake-up fd, the fork guard, the client's
 * name table, creating and freeing handles, and what a handle can be asked
 * about its hold without talking to the backend.
 *
 * Handles of one name in one client share an entry, and holds belong to
 * (client, thread). Lock order: client->entries_mu, then entry->mu;
 * entry->op_mu is taken with neither held (core/provider.c takes it); the
 * watchdog's and the expiry thread's mutexes are never held while taking
 * these. */
#include "config.h"

#include "entry.h"
#include "../backends/common/fnv1a.h"

#include <errno.h>
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
uint64_t dlock__thread_no(void)
{
    if (this_thread_no == 0)
        this_thread_no = __atomic_fetch_add(&next_thread_no, 1, __ATOMIC_RELAXED);
    return this_thread_no;
}

uint64_t dlock__holder_no_new(void)
{
    return __atomic_fetch_add(&next_thread_no, 1, __ATOMIC_RELAXED);
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
int dlock__thread_wake_fd(void)
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

void dlock__drain(int fd)
{
    uint64_t v;
    while (read(fd, &v, sizeof v) > 0)
        ;
}

/* ---- the fork guard --------------------------------------------------------- */

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

struct dlock__entry *dlock__entry_of(const dlock_lock *h)
{
    return dlock__handle_usable(h) == DLOCK_OK ? h->entry : NULL;
}

int dlock__handle_usable(const dlock_lock *lock)
{
    if (!lock)
        return dlock_seterr(DLOCK_EINVAL, "lock is NULL");
    return dlock__client_usable(lock->entry->client);
}

/* A printable form of a name for messages: at most 64 bytes, escaped. */
const char *dlock__entry_show(const struct dlock__entry *e)
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
    return fnv1a_64(FNV1A_64_OFFSET, name, len);
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
        if (e->hash == h && !e->own_holder && e->name_len == len && memcmp(e->name, name, len) == 0)
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
    e->named = dlock__metrics_name_find(&c->metrics, name, len);
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
    dlock__cache_unwatch(c, e); /* before lock_fini, as the provider's contract says */
    dlock__p_lock_fini(c, e);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->op_mu);
    pthread_cond_destroy(&e->cv);
    free(e->name);
    free(e);
}

/* Drops the pin a freeing thread took, and frees e if nothing refers to it
 * any more. */
static void entry_unpin_maybe_destroy(dlock_client *c, struct dlock__entry *e)
{
    bool idle;
    pthread_mutex_lock(&c->entries_mu);
    e->frees_in_flight--;
    pthread_mutex_lock(&e->mu);
    idle = e->handles == 0 && e->frees_in_flight == 0 && e->count == 0 && !e->contending && e->waiters == 0;
    if (idle) {
        table_unlink(c, e);
        if (e->own_holder)
            __atomic_sub_fetch(&c->own_holders, 1, __ATOMIC_RELAXED);
    }
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

/* DLOCK_LOCK_CACHE asks for holds that can be kept: refused where they
 * never are, rather than quietly never kept. */
static int check_cache_flags(const dlock_client *c, const dlock_lock_options *o)
{
    if (!(o->flags & DLOCK_LOCK_CACHE))
        return DLOCK_OK;
    if (o->flags & DLOCK_LOCK_NOCACHE)
        return dlock_seterr(DLOCK_EINVAL, "DLOCK_LOCK_CACHE and DLOCK_LOCK_NOCACHE together: choose one");
    if (o->flags & DLOCK_LOCK_FAIR)
        return dlock_seterr(DLOCK_EINVAL, "a DLOCK_LOCK_FAIR hold is never kept (its turn comes in arrival "
                            "order): drop DLOCK_LOCK_CACHE or DLOCK_LOCK_FAIR");
    if (o->lease_ms > 0)
        return dlock_seterr(DLOCK_EINVAL, "a fixed lease (lease_ms %lld) is never kept, since no watchdog "
                            "renews it: drop DLOCK_LOCK_CACHE or set lease_ms to 0", (long long)o->lease_ms);
    if (o->version >= 2 && o->mode != DLOCK_MODE_EXCLUSIVE)
        return dlock_seterr(DLOCK_EINVAL, "only exclusive holds are kept, not shared holds or permits: "
                            "drop DLOCK_LOCK_CACHE");
    if (!(c->capabilities & DLOCK_CAP_CACHE))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot keep released holds (DLOCK_LOCK_CACHE)",
                            c->provider->name);
    if (!c->config.watchdog)
        return dlock_seterr(DLOCK_EINVAL, "caching keeps holds the watchdog renews, and watchdog = false "
                            "here: drop DLOCK_LOCK_CACHE");
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
    const unsigned known = DLOCK_LOCK_FAIR | DLOCK_LOCK_CACHE | DLOCK_LOCK_NOCACHE;
    if (o->flags & ~known)
        return dlock_seterr(DLOCK_EINVAL, "unknown lock flags 0x%x", o->flags & ~known);
    if ((o->flags & DLOCK_LOCK_FAIR) && !(c->capabilities & DLOCK_CAP_FAIR))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend has no fair mode", c->provider->name);
    int rc = check_cache_flags(c, o);
    if (rc != DLOCK_OK)
        return rc;
    if (o->version < 2)
        return DLOCK_OK;
    unsigned caps = c->capabilities;
    switch (o->mode) {
    case DLOCK_MODE_EXCLUSIVE:
        if (o->permits != 0)
            return dlock_seterr(DLOCK_EINVAL, "permits is for DLOCK_MODE_SEMAPHORE; leave it 0 for a lock");
        return DLOCK_OK;
    case DLOCK_MODE_SHARED:
        if (o->permits != 0)
            return dlock_seterr(DLOCK_EINVAL, "permits is for DLOCK_MODE_SEMAPHORE; leave it 0 for a shared lock");
        if (!(caps & DLOCK_CAP_SHARED))
            return dlock_seterr(DLOCK_ENOTSUP, "the %s backend has no shared locks", c->provider->name);
        return DLOCK_OK;
    case DLOCK_MODE_SEMAPHORE:
        if (o->permits < 1 || o->permits > 65535)
            return dlock_seterr(DLOCK_EINVAL, "a semaphore needs 1..65535 permits, not %u", o->permits);
        if (!(caps & DLOCK_CAP_SEMAPHORE))
            return dlock_seterr(DLOCK_ENOTSUP, "the %s backend has no semaphores", c->provider->name);
        return DLOCK_OK;
    default:
        return dlock_seterr(DLOCK_EINVAL, "unknown lock mode %u (DLOCK_MODE_EXCLUSIVE, _SHARED or _SEMAPHORE)",
                            o->mode);
    }
}

/* The caller's options as this version knows them: a caller built against
 * an older dlock.h passes a shorter struct, whose later fields get their
 * defaults. */
static dlock_lock_options options_of(const dlock_lock_options *o)
{
    dlock_lock_options out = DLOCK_LOCK_OPTIONS_INIT;
    if (!o)
        return out;
    if (o->version >= 2)
        out = *o;
    else
        memcpy(&out, o, offsetof(dlock_lock_options, mode));
    out.version = DLOCK_LOCK_OPTIONS_VERSION;
    return out;
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
    h->options = options_of(options);
    h->async_no = dlock__holder_no_new();
    bool own_holder = h->options.mode != DLOCK_MODE_EXCLUSIVE;

    uint64_t hash = hash_name(name, name_len);
    pthread_mutex_lock(&client->entries_mu);
    /* A shared or semaphore handle is a holder of its own: never one
     * another handle of the name shares. */
    struct dlock__entry *e = own_holder ? NULL : table_find(client, name, name_len, hash);
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
        if (own_holder) {
            e->own_holder = true;
            e->holder_no = ++client->holders_made;
            e->plock.mode = h->options.mode;
            e->plock.permits = h->options.permits;
            __atomic_add_fetch(&client->own_holders, 1, __ATOMIC_RELAXED);
        }
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

void dlock_lock_free(dlock_lock *lock)
{
    if (!lock || dlock__client_usable(lock->entry->client) != DLOCK_OK)
        return;
    if (lock->freeing)
        return; /* called again by a callback that its own free runs */
    lock->freeing = true;
    struct dlock__entry *e = lock->entry;
    dlock_client *c = e->client;
    /* Its non-blocking operations end first, their callbacks called here. */
    dlock__async_lock_freeing(c, lock);
    pthread_mutex_lock(&c->entries_mu);
    bool last = --e->handles == 0;
    /* Pinned until this free is done, last handle or not: below it still
     * waits on e->mu for on_lost calls, and another thread freeing the last
     * handle meanwhile must not destroy the entry under it. */
    e->frees_in_flight++;
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
    bool held_by_me = e->count > 0 && e->holder == dlock__thread_no();
    /* A hold of the handle's own is released with it, last handle or not:
     * no other handle can release it. */
    bool held_by_handle = e->count > 0 && e->holder == lock->async_no;
    bool cached = e->count > 0 && e->cached;
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_unlock(&c->entries_mu);
    /* An on_lost call already under way may use this handle until it
     * returns (dlock.h allows it any call but close and free). */
    pthread_mutex_lock(&e->mu);
    while (lock->lost_calls_running > 0)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    free(lock);

    if ((last && held_by_me) || held_by_handle)
        dlock__hold_release(c, e);
    else if (last && cached)
        dlock__cache_drop_now(c, e); /* nothing could take it over any more */
    entry_unpin_maybe_destroy(c, e);
}

/* ---- queries ------------------------------------------------------------------ */

int64_t dlock_validity_ms(dlock_lock *h)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    int rc;
    if ((rc = dlock__hold_own(h, false)) != DLOCK_OK)
        return rc;
    int64_t left = e->valid_until_ms - dlock__boot_ms();
    pthread_mutex_unlock(&e->mu);
    return left > 0 ? left : 0;
}

int dlock_hold_count(dlock_lock *h)
{
    struct dlock__entry *e = dlock__entry_of(h);
    if (!e)
        return DLOCK_EINVAL;
    pthread_mutex_lock(&e->mu);
    int count = dlock__hold_is_callers(h, e) ? (int)e->count : 0;
    bool lost = count > 0 && e->lost;
    pthread_mutex_unlock(&e->mu);
    if (lost)
        return dlock_seterr(DLOCK_ELOST, "lock '%s': the hold was lost", dlock__entry_show(e));
    return count;
}

/* ---- holds of one thread that stand in each other's way ------------------------- */

/* Whether the entry holds its name for thread self (e->mu not held); with
 * exclusively, only a hold that was not downgraded counts. */
static bool held_by(struct dlock__entry *e, uint64_t self, bool exclusively)
{
    pthread_mutex_lock(&e->mu);
    bool held = e->count > 0 && e->holder == self && !(exclusively && e->downgraded);
    pthread_mutex_unlock(&e->mu);
    return held;
}

int dlock__check_own_holds(dlock_client *c, struct dlock__entry *e, uint64_t self)
{
    int rc = DLOCK_OK;
    pthread_mutex_lock(&c->entries_mu);
    if (!e->own_holder && __atomic_load_n(&c->own_holders, __ATOMIC_RELAXED) > 0) {
        /* Exclusive after shared: it would wait for our own shared hold,
         * and two threads doing it would wait for each other. */
        for (dlock_lock *h = c->handles; h && rc == DLOCK_OK; h = h->next) {
            struct dlock__entry *s = h->entry;
            if (s->own_holder && s->plock.mode == DLOCK_MODE_SHARED && s->name_len == e->name_len &&
                memcmp(s->name, e->name, e->name_len) == 0 && held_by(s, self, false))
                rc = dlock_seterr(DLOCK_EDEADLK,
                                  "lock '%s': this thread holds it shared; an exclusive hold would wait for "
                                  "that one forever (upgrading is refused: release the shared hold first)",
                                  dlock__entry_show(e));
        }
    } else if (e->own_holder && e->plock.mode == DLOCK_MODE_SHARED) {
        struct dlock__entry *x = table_find(c, e->name, e->name_len, e->hash);
        if (x && held_by(x, self, true))
            rc = dlock_seterr(DLOCK_EDEADLK,
                              "lock '%s': this thread holds it exclusively; a shared hold would wait for "
                              "that one (to keep holding it shared, call dlock_downgrade() on the "
                              "exclusive hold instead)",
                              dlock__entry_show(e));
    }
    pthread_mutex_unlock(&c->entries_mu);
    return rc;
}

/* ---- client close ------------------------------------------------------------------ */

void dlock__entries_unwatch_all(dlock_client *c)
{
    for (size_t i = 0; i < c->nbuckets; i++)
        for (struct dlock__entry *e = c->buckets[i]; e; e = e->next_in_bucket)
            dlock__cache_unwatch(c, e);
}

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
                dlock__p_release(c, e);
            }
            entry_destroy(c, e);
            e = next;
        }
    }
    free(c->buckets);
    c->buckets = NULL;
    c->nbuckets = c->nentries = 0;
}
