/* backends/etcd/etcd_orphans.h - keys of ours that a delete could not reach.
 *
 * A release, or a waiter giving up, whose delete got no answer leaves its
 * key on the client's lease, which the client's other holds keep alive:
 * the name would stay held, or a dead waiter would come to hold it, for as
 * long as the client lives. Such keys are remembered here and deleted at
 * the next chance (every renewal round and acquire), as the zookeeper
 * backend does with its orphan nodes.
 *
 * A key's name is its owner's (the name, the kind and the owner id), so a
 * later request of the same owner queues on the very same key. Such a
 * request adopts the orphan (takes it off the list) before it queues, and
 * an orphan being deleted cannot be adopted meanwhile: a sweep never
 * deletes a key that a live request stands on. Thread-safe. */
#ifndef DLOCK_ETCD_ORPHANS_H
#define DLOCK_ETCD_ORPHANS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct etcd_orphan;

struct etcd_orphans {
    pthread_mutex_t mu;
    struct etcd_orphan *head;
    size_t count;      /* read without the mutex, as a hint */
    unsigned sweeps;   /* the number of the sweep going on, to visit each entry once */
};

void etcd_orphans_init(struct etcd_orphans *o);
/* Frees every entry (the keys themselves go with the revoked leases). */
void etcd_orphans_destroy(struct etcd_orphans *o);

/* Remembers key (copied), made at create_rev (0 when not known: a queueing
 * whose answer never came). DLOCK_OK or DLOCK_ENOMEM. */
int etcd_orphans_add(struct etcd_orphans *o, const char *key, size_t key_len, int64_t create_rev);

/* Called before a request queues on key: DLOCK_OK when no orphan of that
 * key is left (one that was is taken off the list, and *found set: the
 * request stands on it now, and must make the key anew, so that a delete
 * of the orphan still on its way cannot reach the new key), DLOCK_EBUSY
 * when a sweep is deleting it this moment (look again soon). */
int etcd_orphans_adopt(struct etcd_orphans *o, const char *key, size_t key_len, bool *found);

/* The delete a sweep makes, for an orphan remembered age_ms ago: DLOCK_OK
 * when the server answered (the key is gone, or was no longer the one
 * made at create_rev; 0: whatever one is there now), DLOCK_EBUSY to keep
 * the entry for a later sweep and go on with the others, anything else
 * when the server did not answer (the sweep stops there). */
typedef int (*etcd_orphan_delete_fn)(void *arg, const char *key, size_t key_len, int64_t create_rev,
                                     int64_t age_ms);

/* Deletes every orphan no other sweep is deleting, without holding the
 * mutex over the calls; entries whose delete got no answer stay. */
void etcd_orphans_sweep(struct etcd_orphans *o, etcd_orphan_delete_fn del, void *arg);

/* Whether any orphan is remembered (a hint, for skipping the sweep). */
bool etcd_orphans_any(struct etcd_orphans *o);

#endif
