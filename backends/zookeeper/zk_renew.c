/* backends/zookeeper/zk_renew.c - renewing holds: one pipelined round
 * trip proves that each hold's node still exists and is this session's. */
#include "config.h"

#include "zk_backend.h"

#include <stdlib.h>
#include <string.h>

/* The replies of one pipelined renewal batch, filled by the client's
 * completion thread. */
struct renew_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t pending;
    int *zrcs;
    int64_t *owners;             /* ephemeralOwner of each node */
};

struct renew_slot {
    struct renew_batch *batch;
    size_t index;
};

static void renew_completion(int zrc, const struct Stat *st, const void *data)
{
    const struct renew_slot *slot = data;
    struct renew_batch *b = slot->batch;
    pthread_mutex_lock(&b->mu);
    b->zrcs[slot->index] = zrc;
    b->owners[slot->index] = zrc == ZOK && st ? st->ephemeralOwner : 0;
    if (--b->pending == 0)
        pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* A renewal proves that each hold's node still exists and is still this
 * session's (the session keeps it alive). All the requests are sent before
 * the first reply is awaited: one round trip for the batch, not one per
 * hold. The client calls every completion, also on connection loss or
 * session end (with an error), so waiting for all of them is bounded. */
int zk_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    struct zk_instance *inst = instance;
    struct renew_batch b = { .pending = 0 };
    struct renew_slot *slots = malloc(n * sizeof *slots);
    b.zrcs = malloc(n * sizeof *b.zrcs);
    b.owners = malloc(n * sizeof *b.owners);
    if (!slots || !b.zrcs || !b.owners) {
        free(slots);
        free(b.zrcs);
        free(b.owners);
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory for a renewal batch of %zu", n);
    }
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(&inst->session, &zh, &generation);
    if (rc == DLOCK_OK) {
        /* A node whose create reply was lost, if any, blocks everyone
         * behind it: do not wait for this client's next acquire to remove
         * it (the watchdog comes by every lease/3 while anything is held). */
        zk_sweep_orphans(inst, zh);
        for (size_t i = 0; i < n; i++) {
            const struct zk_lock *zl = locks[i]->priv;
            b.zrcs[i] = ZNONODE; /* a hold of an earlier session: lost */
            if (!zl->node || zl->generation != generation)
                continue;
            slots[i] = (struct renew_slot){ &b, i };
            /* Counted before it is sent: its reply may come at once. */
            pthread_mutex_lock(&b.mu);
            b.pending++;
            pthread_mutex_unlock(&b.mu);
            int zrc = zoo_aexists(zh, zl->node, 0, renew_completion, &slots[i]);
            if (zrc != ZOK) { /* not sent: no completion will come */
                pthread_mutex_lock(&b.mu);
                b.pending--;
                b.zrcs[i] = zrc;
                pthread_mutex_unlock(&b.mu);
            }
        }
        pthread_mutex_lock(&b.mu);
        while (b.pending > 0)
            pthread_cond_wait(&b.cv, &b.mu);
        pthread_mutex_unlock(&b.mu);
        int64_t me = zoo_client_id(zh)->client_id;
        for (size_t i = 0; i < n; i++) {
            int zrc = b.zrcs[i];
            if (zrc == ZOK && b.owners[i] == me)
                results[i] = DLOCK_OK;
            else if (zrc == ZOK || zrc == ZNONODE)
                results[i] = DLOCK_ELOST;
            else
                results[i] = zk_error(&inst->session, zrc, "checking",
                                      ((const struct zk_lock *)locks[i]->priv)->node);
        }
        zk_session_put(&inst->session);
    }
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
    free(slots);
    free(b.zrcs);
    free(b.owners);
    return rc;
}

int zk_renew(void *instance, struct dlock_provider_lock *lk)
{
    int result;
    int rc = zk_renew_batch(instance, &lk, 1, &result);
    return rc == DLOCK_OK ? result : rc;
}
