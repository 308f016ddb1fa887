/* core/election.c - a candidate in a leader election.
 *
 * A candidate is an exclusive lock handle whose hold belongs to the
 * handle (holder number h->async_no, as for the non-blocking API), so that
 * the thread that campaigned need not be the one that resigns, and a value
 * published beside the hold with its fencing token as the term. Everything
 * a hold has (the lease, the watchdog, the loss at the validity end and
 * on_lost) is the lock's; this file adds the value and the bookkeeping of
 * one campaign at a time. Reading who leads is core/leader.c. */
#include "config.h"

#include "entry.h"

#include <stdlib.h>
#include <string.h>

struct dlock_election {
    dlock_client *client;
    dlock_lock *lock;               /* exclusive; its hold is the leadership */
    /* Taken by the publication after a grant, dlock_proclaim and
     * dlock_resign (never while a campaign waits): one of them at a time,
     * so two resignations cannot both release, and the value stored last
     * is the one kept. */
    pthread_mutex_t publish_mu;
    pthread_mutex_t mu;             /* guards what follows */
    void *value;                    /* what the next publication stores (malloc()ed or NULL) */
    size_t value_len;
    dlock_leadership_lost_fn on_lost;
    void *on_lost_arg;
    bool campaigning;               /* a dlock_campaign() is under way */
};

/* The lock's on_lost: the same call, seen as the election's. */
static void hold_lost(dlock_lock *lock, void *arg)
{
    (void)lock;
    dlock_election *el = arg;
    pthread_mutex_lock(&el->mu);
    dlock_leadership_lost_fn fn = el->on_lost;
    void *fn_arg = el->on_lost_arg;
    pthread_mutex_unlock(&el->mu);
    if (fn)
        fn(el, fn_arg);
}

static int copy_value(const void *value, size_t len, void **out)
{
    *out = NULL;
    if (len > DLOCK_VALUE_MAX)
        return dlock_seterr(DLOCK_EINVAL, "an election value is at most %d bytes (this one has %zu)", DLOCK_VALUE_MAX,
                            len);
    if (len > 0 && !value)
        return dlock_seterr(DLOCK_EINVAL, "an election value of %zu bytes needs its bytes (value is NULL)", len);
    if (len == 0)
        return DLOCK_OK;
    if (!(*out = malloc(len)))
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for an election value of %zu bytes", len);
    memcpy(*out, value, len);
    return DLOCK_OK;
}

int dlock_election_new(dlock_client *client, const char *name, size_t name_len, const void *value,
                       size_t value_len, dlock_election **out)
{
    int rc = dlock__client_usable(client);
    if (rc != DLOCK_OK)
        return rc;
    if (!out)
        return dlock_seterr(DLOCK_EINVAL, "dlock_election_new: out is NULL");
    *out = NULL;
    if (!(client->capabilities & DLOCK_CAP_ELECTION))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot hold elections%s", client->provider->name,
                            (client->capabilities & DLOCK_CAP_FENCE) ? "" : " (it issues no fencing tokens, which "
                            "are the leaders' terms)");
    dlock_election *el = calloc(1, sizeof *el);
    if (!el)
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for an election candidate");
    if ((rc = copy_value(value, value_len, &el->value)) != DLOCK_OK) {
        free(el);
        return rc;
    }
    el->value_len = value_len;
    el->client = client;
    pthread_mutex_init(&el->mu, NULL);
    pthread_mutex_init(&el->publish_mu, NULL);
    dlock_lock_options opts = DLOCK_LOCK_OPTIONS_INIT;
    opts.on_lost = hold_lost;
    opts.on_lost_arg = el;
    if ((rc = dlock_lock_new(client, name, name_len, &opts, &el->lock)) != DLOCK_OK) {
        pthread_mutex_destroy(&el->publish_mu);
        pthread_mutex_destroy(&el->mu);
        free(el->value);
        free(el);
        return rc;
    }
    *out = el;
    return DLOCK_OK;
}

int dlock_election_on_lost(dlock_election *el, dlock_leadership_lost_fn fn, void *arg)
{
    if (!el)
        return dlock_seterr(DLOCK_EINVAL, "dlock_election_on_lost: no election");
    pthread_mutex_lock(&el->mu);
    el->on_lost = fn;
    el->on_lost_arg = arg;
    pthread_mutex_unlock(&el->mu);
    return DLOCK_OK;
}

/* True when the election's own hold is in place (lost or not); *lost
 * (may be NULL) says whether it was lost. */
static bool holding(const dlock_election *el, bool *lost)
{
    struct dlock__entry *e = el->lock->entry;
    pthread_mutex_lock(&e->mu);
    bool yes = e->count > 0 && e->holder == el->lock->async_no;
    if (lost)
        *lost = yes && e->lost;
    pthread_mutex_unlock(&e->mu);
    return yes;
}

static bool leading(const dlock_election *el)
{
    return holding(el, NULL);
}

/* Stores the candidate's value with the hold's term (publish_mu held). */
static int publish(dlock_election *el)
{
    uint64_t term;
    int rc = dlock_fence(el->lock, &term);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&el->mu);
    void *value = NULL;
    size_t len = el->value_len;
    rc = copy_value(el->value, len, &value);
    pthread_mutex_unlock(&el->mu);
    if (rc == DLOCK_OK)
        rc = dlock__hold_value_put(el->lock, term, value, len);
    free(value);
    return rc;
}

int dlock_campaign(dlock_election *el, int64_t wait_ms)
{
    if (!el)
        return dlock_seterr(DLOCK_EINVAL, "dlock_campaign: no election");
    pthread_mutex_lock(&el->mu);
    if (el->campaigning) {
        pthread_mutex_unlock(&el->mu);
        return dlock_seterr(DLOCK_EINVAL, "election '%s': another campaign of this candidate is under way",
                            dlock__entry_show(el->lock->entry));
    }
    el->campaigning = true;
    pthread_mutex_unlock(&el->mu);
    int rc = DLOCK_OK;
    bool lost = false;
    if (holding(el, &lost)) {
        /* Leading already; but a leadership that was lost is not one (a
         * successor may lead now), whatever the hold's count says. */
        if (lost)
            rc = dlock_seterr(DLOCK_ELOST, "election '%s': this candidate's leadership was lost; resign before "
                              "campaigning again", dlock__entry_show(el->lock->entry));
    } else {
        rc = dlock__acquire_for(el->lock, wait_ms, el->lock->async_no);
        if (rc == DLOCK_OK) {
            pthread_mutex_lock(&el->publish_mu);
            if ((rc = publish(el)) != DLOCK_OK && leading(el)) {
                /* Elected but not published: not a leader anyone can see,
                 * so the hold goes back (unless another thread resigned
                 * it meanwhile). */
                struct dlock_saved_error saved;
                dlock_error_save(&saved);
                dlock_release(el->lock);
                dlock_error_restore(&saved, rc);
            }
            pthread_mutex_unlock(&el->publish_mu);
        }
    }
    pthread_mutex_lock(&el->mu);
    el->campaigning = false;
    pthread_mutex_unlock(&el->mu);
    return rc;
}

int dlock_election_cancel(dlock_election *el)
{
    if (!el)
        return dlock_seterr(DLOCK_EINVAL, "dlock_election_cancel: no election");
    return dlock_cancel(el->lock);
}

int dlock_election_term(dlock_election *el, uint64_t *term)
{
    if (!el || !term)
        return dlock_seterr(DLOCK_EINVAL, "dlock_election_term: need an election and an out pointer");
    if (!leading(el))
        return dlock_seterr(DLOCK_ENOTOWNER, "election '%s': this candidate does not lead",
                            dlock__entry_show(el->lock->entry));
    return dlock_fence(el->lock, term);
}

int64_t dlock_election_validity_ms(dlock_election *el)
{
    if (!el)
        return dlock_seterr(DLOCK_EINVAL, "dlock_election_validity_ms: no election");
    if (!leading(el))
        return dlock_seterr(DLOCK_ENOTOWNER, "election '%s': this candidate does not lead",
                            dlock__entry_show(el->lock->entry));
    return dlock_validity_ms(el->lock);
}

int dlock_proclaim(dlock_election *el, const void *value, size_t value_len)
{
    if (!el)
        return dlock_seterr(DLOCK_EINVAL, "dlock_proclaim: no election");
    void *copy;
    int rc = copy_value(value, value_len, &copy);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&el->publish_mu);
    pthread_mutex_lock(&el->mu);
    free(el->value);
    el->value = copy;
    el->value_len = value_len;
    pthread_mutex_unlock(&el->mu);
    rc = leading(el) ? publish(el)
                     : dlock_seterr(DLOCK_ENOTOWNER, "election '%s': this candidate does not lead (the value is kept "
                                    "for its next campaign)", dlock__entry_show(el->lock->entry));
    pthread_mutex_unlock(&el->publish_mu);
    return rc;
}

int dlock_resign(dlock_election *el)
{
    if (!el)
        return dlock_seterr(DLOCK_EINVAL, "dlock_resign: no election");
    pthread_mutex_lock(&el->publish_mu);
    int rc = leading(el) ? dlock_release(el->lock)
                         : dlock_seterr(DLOCK_ENOTOWNER, "election '%s': this candidate does not lead",
                                        dlock__entry_show(el->lock->entry));
    pthread_mutex_unlock(&el->publish_mu);
    return rc;
}

void dlock_election_free(dlock_election *el)
{
    if (!el)
        return;
    if (leading(el))
        dlock_release(el->lock);
    dlock_lock_free(el->lock);
    pthread_mutex_destroy(&el->publish_mu);
    pthread_mutex_destroy(&el->mu);
    free(el->value);
    free(el);
}
