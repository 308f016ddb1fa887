/* backends/zookeeper/zk_backend.h - what the files of the zookeeper module
 * share: the instance and the per-lock state, and the functions each file
 * offers the others. zookeeper.c is the provider's table, acquire, wait,
 * downgrade and open; zk_nodes.c our nodes in the tree and the orphans;
 * zk_renew.c the pipelined renewal. */
#ifndef DLOCK_ZK_BACKEND_H
#define DLOCK_ZK_BACKEND_H

#include "zk_session.h"

#include <dlock/provider.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zookeeper/zookeeper.h>

#define ZK_PATH_MAX 2048

/* A node of ours that may exist without our knowing its name: every child
 * of parent that starts with prefix, other than one we hold, is deleted at
 * the next chance. */
struct zk_orphan {
    struct zk_orphan *next;
    char *parent;
    char prefix[128];
};

struct zk_call;
struct zk_wanted;

struct zk_instance {
    struct zk_session session;
    char root[256];
    bool root_ready;                 /* the root's path exists */
    struct ACL_vector *acl;          /* for the nodes we create */
    struct ACL_vector creator_acl;
    struct ACL creator_entry;
    pthread_mutex_t orphan_mu;
    struct zk_orphan *orphans;
    void *log_handle;
    /* Lock caching (zk_wanted.c): the core's "another owner asks", and
     * every name's watch for requests, under wanted_mu. */
    void (*tell_wanted)(struct dlock_provider_lock *lk);
    pthread_mutex_t wanted_mu;
    struct zk_wanted *wanted_list;
};

struct zk_lock {
    char *parent;                    /* <root>/<escaped name> */
    char *node;                      /* our node while queued or holding */
    uint64_t generation;             /* the session that created node */
    int64_t czxid;                   /* node's creation zxid: the fence */
    char prefix[128];                /* "<owner tag>_<attempt>-lock-" of node */
    char *predecessor;               /* while busy: the node to wait for */
    bool wait_children;              /* while busy (a permit): wait for any change of the parent's children */
    int notify_fd;                   /* eventfd + 1 once created */
    struct zk_waiter waiter;         /* registered with the session while a wait watches */
    bool watching;                   /* waiter is registered */
    struct zk_call *call;            /* an attempt in flight without a thread (zk_native.c) */
    int call_step;                   /* which of its calls: create, then the children */
    uint64_t call_generation;        /* the session it was sent on */
    int call_lease_ms;               /* that session's timeout, as the server granted it */
    bool others_after;               /* at the grant: other requests queued behind ours */
    int32_t held_cversion;           /* at the grant: the parent's child version the read saw */
    struct zk_wanted *wanted;        /* while watched for requests (watch_wanted) */
};

/* Where our node stands among the parent's children: DLOCK_OK (we hold
 * it), DLOCK_EBUSY with zl->predecessor set (or zl->wait_children for a
 * permit), DLOCK_ENOTOWNER (our node is not among them), DLOCK_EINVAL (a
 * semaphore of another N), or DLOCK_ENOMEM. Reads no more than children. */
int zk_standing_among(const struct dlock_provider_lock *lk, struct zk_lock *zl,
                      const struct String_vector *children);

/* Forgets zl's node and predecessor (their names only: the nodes stay). */
void zk_forget_node(struct zk_lock *zl);

/* Remembers that a node of ours under parent, named from prefix, may exist
 * unknown to us: the next sweep deletes it. Best effort (out of memory: the
 * session's end removes it). */
void zk_add_orphan(struct zk_instance *inst, const char *parent, const char *prefix);

/* Deletes remembered orphans; keeps those it could not reach. */
void zk_sweep_orphans(struct zk_instance *inst, zhandle_t *zh);

/* Creates every level of the root that is missing (persistent nodes). */
int zk_ensure_root(struct zk_instance *inst, zhandle_t *zh);

/* The lock's parent, a container node: the server removes it once its last
 * child is gone, so the names of past locks do not pile up. */
int zk_ensure_parent(struct zk_instance *inst, zhandle_t *zh, const char *parent);

/* Finds our node among the parent's children after a create whose answer
 * was lost. DLOCK_OK with zl->node set, DLOCK_OK with it NULL (not there),
 * or a failure. */
int zk_find_own_node(struct zk_instance *inst, zhandle_t *zh, struct zk_lock *zl);

/* True when zl's node was made for lk's current owner (the same client and
 * thread), whatever the attempt. */
bool zk_node_of_owner(const struct zk_lock *zl, const struct dlock_provider_lock *lk);

/* Queues the owner: creates its ephemeral sequential node. The node's name
 * carries the owner and a random tag of this attempt, as Curator's
 * protected mode does: a create whose reply was lost is found, or swept
 * later, by that exact tag, so a sweep can never take a node of a later
 * attempt by the same thread (one it may hold by then). */
int zk_create_own_node(struct zk_instance *inst, zhandle_t *zh, struct dlock_provider_lock *lk);

/* The first step of that create: a new attempt's prefix in zl->prefix,
 * and *path (malloc()ed) the path to create under the lock's parent. */
int zk_new_node_path(struct dlock_provider_lock *lk, char **path);

/* Leaves the queue (or gives up the hold): deletes our node, or remembers
 * it when the server cannot be told now. */
int zk_delete_own_node(struct zk_instance *inst, zhandle_t *zh, struct zk_lock *zl);

/* Puts the node new_path (a child of the same parent with our node's
 * sequence number, so the same place in line) in the place of ours, in one
 * multi: ours is deleted and new_path created as an ephemeral of this
 * session holding data. There is no moment when neither node is there,
 * and the waiters behind keep their places. Returns the multi's ZooKeeper
 * result; *own_gone says it failed because our node was no longer there. */
int zk_replace_own_node(zhandle_t *zh, const struct zk_lock *zl, const char *data, const struct ACL_vector *acl,
                            const char *new_path, bool *own_gone);

/* Whether the node at path is one of this session: DLOCK_OK,
 * DLOCK_ELOST (gone, or another session's), or a failure. */
int zk_node_is_ours(struct zk_instance *inst, zhandle_t *zh, const char *path);

/* Forgets a remembered orphan: the node it stands for turned out to be a
 * hold after all. */
void zk_drop_orphan(struct zk_instance *inst, const char *parent, const char *prefix);

/* A renewal proves that each hold's node still exists and is still this
 * session's (the session keeps it alive). All the requests are sent before
 * the first reply is awaited: one round trip for the batch, not one per
 * hold. The client calls every completion, also on connection loss or
 * session end (with an error), so waiting for all of them is bounded. */
int zk_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results);

/* renew_batch of one hold. */
int zk_renew(void *instance, struct dlock_provider_lock *lk);

/* An attempt without a thread, for the non-blocking API (zk_native.c):
 * the provider's acquire_send, acquire_recv and acquire_drop, and what
 * lock_fini does with an attempt still in flight. */
int zk_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int zk_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                    struct dlock_grant *g);
void zk_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
void zk_native_forget(struct zk_lock *zl);

/* Elections (zk_election.c): the provider's value_put, leader_get and
 * watch_*. */
int zk_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len);
int zk_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out);
int zk_watch_open(void *instance, const char *name, size_t name_len, void **watch, int *fd);
int zk_watch_consume(void *instance, void *watch);
void zk_watch_close(void *instance, void *watch);

/* Lock caching (zk_wanted.c). zk_wanted_watch leaves a child watch on
 * lk's parent that tells the core (inst->tell_wanted) when another owner
 * asks while we hold; it lasts across holds until zk_wanted_unwatch.
 * zk_wanted_read_children reads the parent's children on zh (of session
 * generation) and, where lk is watched, leaves a watch of that read's own.
 * zk_wanted_held says whether we hold: true right after the read that
 * granted (zl->held_cversion being its cversion), false before our node
 * is deleted. zk_wanted_close frees what is left, after the session's
 * end. Thread-safe under inst->wanted_mu; the watchers run on the client
 * library's completion thread. */
int zk_wanted_watch(struct zk_instance *inst, struct dlock_provider_lock *lk);
void zk_wanted_unwatch(struct zk_instance *inst, struct dlock_provider_lock *lk);
int zk_wanted_read_children(struct zk_instance *inst, zhandle_t *zh, uint64_t generation, struct zk_lock *zl,
                            struct String_vector *children, struct Stat *st);
void zk_wanted_held(struct zk_instance *inst, struct zk_lock *zl, bool held);
void zk_wanted_close(struct zk_instance *inst);

#endif
