/* core/provider.c - the one doorway from the core to a provider's table.
 *
 * Every call into a provider goes through a function here, in the manner of
 * SQLite's sqlite3Os* wrappers: it checks that the provider's version has
 * the member and that the member is present, takes what must be taken (the
 * entry's op_mu, so that one lock never sees two operations at once),
 * records what the core must remember (lock_fini is due once a lock was
 * touched), and turns a result the contract does not allow into
 * DLOCK_EINTERNAL with a message naming the provider. A member added in a
 * later provider version is then a change to this file and its callers'
 * one line each. */
#include "config.h"

#include "entry.h"

#include <stdlib.h>

#include <stdio.h>
#include <string.h>

/* True when p's version defines a member and p fills it. All members of
 * version 1 are defined from version 1 on. */
#define HAS(p, member, since) ((p)->version >= (since) && (p)->member != NULL)

/* A provider's answer must be DLOCK_OK or one of the error codes; anything
 * else is a bug in the provider, reported as such rather than passed on. */
static int checked(const struct dlock_provider *p, const char *op, int rc)
{
    if (rc == DLOCK_OK || (rc < 0 && strcmp(dlock_errname(rc), "DLOCK_UNKNOWN") != 0))
        return rc;
    return dlock_seterr(DLOCK_EINTERNAL, "the %s backend's %s returned %d, which is not a libdlock result",
                        p->name, op, rc);
}

int dlock__p_open(dlock_client *c, const struct dlock_provider_env *env)
{
    dlock_seterr(DLOCK_EUNAVAILABLE, "the %s backend failed to open without saying why", c->provider->name);
    const struct dlock_provider *p = c->provider;
    int rc = checked(p, "open", p->open(&c->instance, env));
    /* A NULL instance is allowed: a provider may keep no state. */
    if (rc != DLOCK_OK)
        return rc;
    /* A version 1 module is never asked for more than exclusive locks,
     * whatever bits it sets; an instance may lack some of its module's
     * capabilities (a mode of the backend chosen in the configuration). */
    unsigned caps = p->capabilities;
    if (p->version < DLOCK_PROVIDER_VERSION_2)
        caps &= ~(unsigned)(DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE);
    unsigned narrowed = caps;
    if (p->ctl && p->ctl(c->instance, DLOCK_CTL_CAPABILITIES, &narrowed) == DLOCK_OK)
        caps &= narrowed;
    /* Downgrading turns a hold shared: it needs shared holds in this
     * instance (after the narrowing above). The member it needs is
     * checked once, at load (dlock__provider_check). */
    if (!(caps & DLOCK_CAP_SHARED))
        caps &= ~(unsigned)DLOCK_CAP_DOWNGRADE;
    /* A leader's term is its hold's fencing token. */
    if (p->version < DLOCK_PROVIDER_VERSION_6 || !(caps & DLOCK_CAP_FENCE))
        caps &= ~(unsigned)DLOCK_CAP_ELECTION;
    if (p->version < DLOCK_PROVIDER_VERSION_7)
        caps &= ~(unsigned)DLOCK_CAP_IN_PROCESS;
    /* A cached hold lives on its renewals, and is given back when another
     * owner asks (version 8). */
    if (p->version < DLOCK_PROVIDER_VERSION_8 || !(caps & DLOCK_CAP_RENEW))
        caps &= ~(unsigned)DLOCK_CAP_CACHE;
    c->capabilities = caps;
    int64_t hearing_us = 0;
    if ((caps & DLOCK_CAP_CACHE) && p->ctl && p->ctl(c->instance, DLOCK_CTL_HEARING_DELAY, &hearing_us) == DLOCK_OK &&
        hearing_us > 0)
        c->cache_hearing_us = hearing_us;
    return DLOCK_OK;
}

void dlock__p_close(dlock_client *c)
{
    c->provider->close(c->instance);
}

/* An attempt's answer (acquire's, acquire_recv's), checked, with a grant's
 * optional figures brought into range. */
static int attempt_answer(dlock_client *c, const char *op, int rc, struct dlock_grant *g)
{
    rc = checked(c->provider, op, rc);
    if (rc == DLOCK_OK && g->lease_ms < 0)
        g->lease_ms = 0;
    if (rc == DLOCK_OK && g->valid_ms < 0)
        g->valid_ms = 1; /* nothing left: valid until now, so lost at once */
    return rc;
}

int dlock__p_acquire(dlock_client *c, struct dlock__entry *e, struct dlock_grant *g)
{
    pthread_mutex_lock(&e->op_mu);
    e->provider_touched = true;
    int rc = c->provider->acquire(c->instance, &e->plock, g);
    pthread_mutex_unlock(&e->op_mu);
    return attempt_answer(c, "acquire", rc, g);
}

bool dlock__p_can_send(const dlock_client *c)
{
    return HAS(c->provider, acquire_send, DLOCK_PROVIDER_VERSION_6) &&
           HAS(c->provider, acquire_recv, DLOCK_PROVIDER_VERSION_6) &&
           HAS(c->provider, acquire_drop, DLOCK_PROVIDER_VERSION_6);
}

int dlock__p_acquire_send(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io)
{
    if (!dlock__p_can_send(c))
        return DLOCK_ENOTSUP;
    io->fd = -1;
    io->timeout_ms = 0;
    io->priv = NULL;
    pthread_mutex_lock(&e->op_mu);
    e->provider_touched = true;
    int rc = c->provider->acquire_send(c->instance, &e->plock, io);
    pthread_mutex_unlock(&e->op_mu);
    rc = checked(c->provider, "acquire_send", rc);
    if (rc == DLOCK_OK && (io->fd < 0 || io->timeout_ms <= 0)) {
        /* In flight with nothing to watch or no deadline: the core could
         * neither hear the answer nor give up on it. */
        c->provider->acquire_drop(c->instance, &e->plock, io);
        rc = dlock_seterr(DLOCK_EINTERNAL, "the %s backend's acquire_send gave no descriptor or no timeout",
                          c->provider->name);
    }
    return rc;
}

int dlock__p_acquire_recv(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io,
                          struct dlock_grant *g)
{
    pthread_mutex_lock(&e->op_mu);
    int rc = c->provider->acquire_recv(c->instance, &e->plock, io, g);
    pthread_mutex_unlock(&e->op_mu);
    return rc == DLOCK_PROVIDER_AGAIN ? rc : attempt_answer(c, "acquire_recv", rc, g);
}

void dlock__p_acquire_drop(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io)
{
    pthread_mutex_lock(&e->op_mu);
    c->provider->acquire_drop(c->instance, &e->plock, io);
    pthread_mutex_unlock(&e->op_mu);
}

bool dlock__p_in_process(const dlock_client *c)
{
    return (c->capabilities & DLOCK_CAP_IN_PROCESS) != 0;
}

bool dlock__p_can_send_release(const dlock_client *c)
{
    return HAS(c->provider, release_send, DLOCK_PROVIDER_VERSION_7) &&
           HAS(c->provider, release_recv, DLOCK_PROVIDER_VERSION_7) &&
           HAS(c->provider, release_drop, DLOCK_PROVIDER_VERSION_7);
}

int dlock__p_release_send(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io)
{
    if (!dlock__p_can_send_release(c))
        return DLOCK_ENOTSUP;
    io->fd = -1;
    io->timeout_ms = 0;
    io->priv = NULL;
    pthread_mutex_lock(&e->op_mu);
    int rc = c->provider->release_send(c->instance, &e->plock, io);
    pthread_mutex_unlock(&e->op_mu);
    rc = checked(c->provider, "release_send", rc);
    if (rc == DLOCK_OK && (io->fd < 0 || io->timeout_ms <= 0)) {
        c->provider->release_drop(c->instance, &e->plock, io);
        rc = dlock_seterr(DLOCK_EINTERNAL, "the %s backend's release_send gave no descriptor or no timeout",
                          c->provider->name);
    }
    return rc;
}

int dlock__p_release_recv(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io)
{
    pthread_mutex_lock(&e->op_mu);
    int rc = c->provider->release_recv(c->instance, &e->plock, io);
    pthread_mutex_unlock(&e->op_mu);
    return rc == DLOCK_PROVIDER_AGAIN ? rc : checked(c->provider, "release_recv", rc);
}

void dlock__p_release_drop(dlock_client *c, struct dlock__entry *e, struct dlock_provider_io *io)
{
    pthread_mutex_lock(&e->op_mu);
    c->provider->release_drop(c->instance, &e->plock, io);
    pthread_mutex_unlock(&e->op_mu);
}

int dlock__p_release(dlock_client *c, struct dlock__entry *e)
{
    pthread_mutex_lock(&e->op_mu);
    int rc = c->provider->release(c->instance, &e->plock);
    pthread_mutex_unlock(&e->op_mu);
    return checked(c->provider, "release", rc);
}

int dlock__p_downgrade(dlock_client *c, struct dlock__entry *e)
{
    if (!(c->capabilities & DLOCK_CAP_DOWNGRADE))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot turn an exclusive hold shared in place "
                            "(release it and acquire it shared instead)", c->provider->name);
    pthread_mutex_lock(&e->op_mu);
    int rc = checked(c->provider, "downgrade", c->provider->downgrade(c->instance, &e->plock));
    if (rc == DLOCK_OK)
        e->plock.mode = DLOCK_MODE_SHARED;
    pthread_mutex_unlock(&e->op_mu);
    return rc;
}

bool dlock__p_can_renew(const dlock_client *c)
{
    return (c->capabilities & DLOCK_CAP_RENEW) && HAS(c->provider, renew, 1);
}

int dlock__p_renew(dlock_client *c, struct dlock__entry *e)
{
    if (!dlock__p_can_renew(c))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot renew a hold", c->provider->name);
    pthread_mutex_lock(&e->op_mu);
    int rc = c->provider->renew(c->instance, &e->plock);
    pthread_mutex_unlock(&e->op_mu);
    return checked(c->provider, "renew", rc);
}

void dlock__p_renew_batch(dlock_client *c, struct dlock__entry *const *entries, size_t n, int *results)
{
    /* No op_mu: the watchdog marks these entries busy, and every other
     * operation on them waits for that mark to clear first. */
    bool can_batch = n > 1 && HAS(c->provider, renew_batch, 1);
    struct dlock_provider_lock **plocks = can_batch ? malloc(n * sizeof *plocks) : NULL;
    if (plocks) {
        for (size_t i = 0; i < n; i++)
            plocks[i] = &entries[i]->plock;
        int rc = checked(c->provider, "renew_batch", c->provider->renew_batch(c->instance, plocks, n, results));
        free(plocks);
        if (rc != DLOCK_ENOTSUP) { /* ENOTSUP: this server cannot batch; one by one below */
            for (size_t i = 0; i < n; i++)
                results[i] = rc != DLOCK_OK ? rc : checked(c->provider, "renew_batch", results[i]);
            return;
        }
    }
    else if (can_batch) {
        /* Short of memory for the whole batch: in batches of what fits on
         * the stack, never one by one (a provider's single renew may cost
         * as much as a batch). */
        enum { SMALL = 64 };
        struct dlock_provider_lock *small[SMALL];
        for (size_t from = 0; from < n; from += SMALL) {
            size_t m = n - from < SMALL ? n - from : SMALL;
            for (size_t i = 0; i < m; i++)
                small[i] = &entries[from + i]->plock;
            int rc = checked(c->provider, "renew_batch",
                             c->provider->renew_batch(c->instance, small, m, results + from));
            if (rc == DLOCK_ENOTSUP)
                break;
            for (size_t i = 0; i < m; i++)
                results[from + i] = rc != DLOCK_OK ? rc : checked(c->provider, "renew_batch", results[from + i]);
            if (from + m == n)
                return;
        }
    }
    for (size_t i = 0; i < n; i++)
        results[i] = checked(c->provider, "renew", c->provider->renew(c->instance, &entries[i]->plock));
}

int dlock__p_fence(dlock_client *c, struct dlock__entry *e, uint64_t *out)
{
    if (!HAS(c->provider, fence, 1))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend does not issue fencing tokens", c->provider->name);
    pthread_mutex_lock(&e->op_mu);
    int rc = c->provider->fence(c->instance, &e->plock, out);
    pthread_mutex_unlock(&e->op_mu);
    return checked(c->provider, "fence", rc);
}

bool dlock__p_can_wait(const dlock_client *c)
{
    /* The instance's capabilities, not only the member: a module that can
     * wait in one mode and not in another clears the bit for the other. */
    return (c->capabilities & DLOCK_CAP_NATIVE_WAIT) && HAS(c->provider, wait, 1);
}

int dlock__p_wait(dlock_client *c, struct dlock__entry *e, int64_t timeout_ms, int wake_fd)
{
    /* No op_mu: only the contender waits, and nothing else operates on a
     * lock that is being contended for (its hold is not ours). */
    int rc = c->provider->wait(c->instance, &e->plock, timeout_ms, wake_fd);
    return checked(c->provider, "wait", rc);
}

bool dlock__p_can_park(const dlock_client *c)
{
    return dlock__p_can_wait(c) && HAS(c->provider, wait_arm, DLOCK_PROVIDER_VERSION_5) &&
           HAS(c->provider, wait_disarm, DLOCK_PROVIDER_VERSION_5);
}

int dlock__p_wait_arm(dlock_client *c, struct dlock__entry *e, int64_t *timeout_ms, int *fd)
{
    *fd = -1;
    if (!dlock__p_can_park(c))
        return DLOCK_ENOTSUP;
    int64_t asked = *timeout_ms;
    /* No op_mu, as for wait: only the contender arms and disarms. */
    int rc = checked(c->provider, "wait_arm", c->provider->wait_arm(c->instance, &e->plock, timeout_ms, fd));
    if (rc != DLOCK_OK)
        *fd = -1;
    if (*timeout_ms > asked || *timeout_ms < 0)
        *timeout_ms = asked; /* it may only lower it */
    return rc;
}

int dlock__p_wait_disarm(dlock_client *c, struct dlock__entry *e, bool fired, int64_t *timeout_ms)
{
    int64_t left = *timeout_ms > 0 ? *timeout_ms : 0;
    int rc = checked(c->provider, "wait_disarm",
                     c->provider->wait_disarm(c->instance, &e->plock, fired ? 1 : 0, timeout_ms));
    if (rc == DLOCK_EBUSY && !fired) /* the wait must end: it has, with nothing come */
        rc = DLOCK_ETIMEDOUT;
    if (*timeout_ms > left || *timeout_ms < 0)
        *timeout_ms = left; /* it may only lower it */
    return rc;
}

void dlock__p_abandon(dlock_client *c, struct dlock__entry *e)
{
    if (!HAS(c->provider, abandon, 1))
        return;
    pthread_mutex_lock(&e->op_mu);
    c->provider->abandon(c->instance, &e->plock);
    pthread_mutex_unlock(&e->op_mu);
}

void dlock__p_lock_fini(dlock_client *c, struct dlock__entry *e)
{
    if (e->provider_touched && HAS(c->provider, lock_fini, 1))
        c->provider->lock_fini(c->instance, &e->plock);
    e->provider_touched = false;
}

int dlock__p_ctl(dlock_client *c, int op, void *arg)
{
    if (!HAS(c->provider, ctl, 1))
        return DLOCK_ENOTSUP;
    return checked(c->provider, "ctl", c->provider->ctl(c->instance, op, arg));
}

int dlock__p_break(dlock_client *c, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    if (!HAS(c->provider, break_hold, DLOCK_PROVIDER_VERSION_3))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot break a hold%s", c->provider->name,
                            c->provider->version < DLOCK_PROVIDER_VERSION_3
                                ? " (its module predates provider version 3)" : "");
    return checked(c->provider, "break_hold", c->provider->break_hold(c->instance, name, name_len, broken, fence));
}

int dlock__p_list(dlock_client *c, struct dlock_provider_list *req)
{
    if (!HAS(c->provider, list, DLOCK_PROVIDER_VERSION_3))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot list its locks%s", c->provider->name,
                            c->provider->version < DLOCK_PROVIDER_VERSION_3
                                ? " (its module predates provider version 3)" : "");
    return checked(c->provider, "list", c->provider->list(c->instance, req));
}

int dlock__p_value_put(dlock_client *c, struct dlock__entry *e, uint64_t holder, uint64_t term, const void *value,
                       size_t len)
{
    if (!(c->capabilities & DLOCK_CAP_ELECTION))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot hold elections", c->provider->name);
    pthread_mutex_lock(&e->op_mu);
    /* Still the hold whose term this is, with op_mu held: a release takes
     * op_mu for its provider call after it marks itself pending, and the
     * next acquire takes it too, so the provider never sees this put
     * beside either, nor on a lock that is contended for again. */
    pthread_mutex_lock(&e->mu);
    bool same = e->count > 0 && e->holder == holder && e->has_fence && e->fence == term && !e->release_pending &&
                !e->lost;
    pthread_mutex_unlock(&e->mu);
    int rc = same ? c->provider->value_put(c->instance, &e->plock, term, value, len)
                  : dlock_seterr(DLOCK_ENOTOWNER, "lock '%s': the hold of term %llu ended before its value was stored",
                                 dlock__entry_show(e), (unsigned long long)term);
    pthread_mutex_unlock(&e->op_mu);
    return same ? checked(c->provider, "value_put", rc) : rc;
}

int dlock__p_leader_get(dlock_client *c, const char *name, size_t name_len, struct dlock_provider_leader *out)
{
    memset(out, 0, sizeof *out);
    if (!(c->capabilities & DLOCK_CAP_ELECTION))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot hold elections", c->provider->name);
    int rc = checked(c->provider, "leader_get", c->provider->leader_get(c->instance, name, name_len, out));
    if (rc != DLOCK_OK) {
        free(out->value);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

bool dlock__p_can_watch(const dlock_client *c)
{
    return (c->capabilities & DLOCK_CAP_ELECTION) && HAS(c->provider, watch_open, DLOCK_PROVIDER_VERSION_6);
}

int dlock__p_watch_open(dlock_client *c, const char *name, size_t name_len, void **watch, int *fd)
{
    *watch = NULL;
    *fd = -1;
    int rc = checked(c->provider, "watch_open", c->provider->watch_open(c->instance, name, name_len, watch, fd));
    if (rc == DLOCK_OK && *fd < 0) {
        c->provider->watch_close(c->instance, *watch);
        *watch = NULL;
        return dlock_seterr(DLOCK_EINTERNAL, "the %s backend's watch_open gave no descriptor", c->provider->name);
    }
    return rc;
}

int dlock__p_watch_consume(dlock_client *c, void *watch)
{
    return checked(c->provider, "watch_consume", c->provider->watch_consume(c->instance, watch));
}

void dlock__p_watch_close(dlock_client *c, void *watch)
{
    if (watch)
        c->provider->watch_close(c->instance, watch);
}

int dlock__p_watch_wanted(dlock_client *c, struct dlock__entry *e)
{
    if (!(c->capabilities & DLOCK_CAP_CACHE))
        return DLOCK_ENOTSUP;
    pthread_mutex_lock(&e->op_mu);
    int rc = checked(c->provider, "watch_wanted", c->provider->watch_wanted(c->instance, &e->plock));
    pthread_mutex_unlock(&e->op_mu);
    return rc;
}

void dlock__p_unwatch_wanted(dlock_client *c, struct dlock__entry *e)
{
    pthread_mutex_lock(&e->op_mu);
    c->provider->unwatch_wanted(c->instance, &e->plock);
    pthread_mutex_unlock(&e->op_mu);
}
