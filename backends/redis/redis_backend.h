/* backends/redis/redis_backend.h - what the files of the redis module
 * share: the instance and the per-lock state, and the table of a route.
 *
 * A route is where a lock's commands go: one server (or the master the
 * sentinels name), or the cluster node that serves the lock's slot. It is
 * chosen once, at open, and redis.c sends every command through it, so the
 * lock operations do not branch on the deployment (redis_route.c has
 * both). */
#ifndef DLOCK_REDIS_BACKEND_H
#define DLOCK_REDIS_BACKEND_H

#include "redis_cluster.h"
#include "redis_conn.h"
#include "redis_keys.h"
#include "redis_scripts.h"
#include "redis_subscriber.h"

#include <dlock/provider.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct redis_route;

struct redis_instance {
    struct redis_pool pool;     /* one server (or the sentinels' master); unused in a cluster */
    const struct redis_route *route; /* one server or a cluster, chosen at open */
    struct redis_cluster *cluster;  /* NULL unless redis.cluster is set */
    const char *publish;        /* "publish", or "spublish" in a cluster with sharded Pub/Sub */
    struct redis_scripts scripts;
    struct redis_subscriber *subscriber;  /* one server only; a cluster has one per node */
    char prefix[65];
    int64_t waiter_timeout_ms;  /* a waiter that stops retrying leaves the queue after this */
    int64_t wait_replicas;      /* after a grant, WAIT for this many replicas (0: do not) */
    int64_t wait_timeout_ms;
    void *log_handle;
    int native_in_flight;       /* attempts sent by acquire_send, not yet read (atomic) */
    void (*wanted)(struct dlock_provider_lock *lk); /* the core's: someone asks for a kept hold */
};

struct redis_lock {
    struct redis_lock_keys k;   /* k.key NULL until first use */
    char *sub_channel;          /* the channel subscribed, while notify_fd */
    struct redis_subscriber *sub;   /* where it is subscribed */
    size_t sub_channel_len;
    int notify_fd;              /* eventfd + 1 while subscribed, else 0 */
    bool registered;            /* the owner is in the waiter queue */
    bool published;             /* this hold stored an election value (redis_election.c) */
    bool release_sent_before;   /* a release went out on a connection that died with it (redis_native.c) */
    struct redis_pool *native_pool; /* the pool of the round trip in flight without a thread (redis_native.c) */
    char *wanted_channel;       /* <prefix>{name}:cw:<client id>, while watched (watch_wanted) */
    size_t wanted_channel_len;
};

struct redis_route {
    const char *name;   /* "single" or "cluster", for messages */
    /* The deployment, for messages. */
    const char *(*label)(const struct redis_instance *inst);
    /* A script whose first key (args[0]) is a key of one lock. With
     * retry_hint_ms, a cluster between two states answers at once with a
     * pause for the core to wait (see redis_cluster_script_run). */
    redisReply *(*script)(struct redis_instance *inst, enum redis_script which, int nkeys, int nargs,
                          const char **args, const size_t *lens, int *rc, int64_t *retry_hint_ms);
    /* n commands on keys of one lock (key is one of them), in one pipeline. */
    int (*pipeline)(struct redis_instance *inst, const char *key, size_t key_len, size_t n, int *argcs,
                    const char ***argvs, const size_t **lenses, redisReply **replies);
    /* Loads the scripts where the lock of key lives. */
    int (*preload)(struct redis_instance *inst, const char *key, size_t key_len);
    /* Subscribes fd to channel where its lock's releases are published;
     * *sub gets the subscriber, for redis_subscriber_remove(). */
    int (*subscribe)(struct redis_instance *inst, const char *channel, size_t len, int fd,
                     struct redis_subscriber **sub);
    /* The lock's slot moved since it subscribed: subscribe again. */
    bool (*moved)(struct redis_instance *inst, const struct redis_lock *rl);
    /* The last command was sent twice, its connection dead with the first
     * in flight (a release that finds nothing was then the first one's). */
    bool (*resent)(void);
    /* Renews n holds of one kind (shared: shared holds and permits) into
     * results, as dlock_provider.renew_batch. */
    int (*renew)(struct redis_instance *inst, bool shared, struct dlock_provider_lock *const *locks, size_t n,
                 int *results);
    int (*list)(struct redis_instance *inst, struct dlock_provider_list *req);
    /* The pool whose connection carries a round trip on key sent without
     * a thread (redis_native.c): it must not connect or wait. NULL: none
     * now (the blocking call makes it). */
    struct redis_pool *(*native_pool)(struct redis_instance *inst, const char *key, size_t key_len);
};

extern const struct redis_route redis_single_route;
extern const struct redis_route redis_cluster_route;

/* The acquire script's arguments for lk (keys ready): which script, its
 * keys, then its arguments. args may point into the struct: do not copy
 * it. */
struct redis_attempt_args {
    enum redis_script which;
    int nkeys, nargs;
    const char *args[16];
    size_t lens[16];
    char lease[24], queue_timeout[24], kind[16], permits[16];
};
void redis_attempt_args(struct redis_instance *inst, struct dlock_provider_lock *lk, struct redis_attempt_args *a);

/* The release script's arguments for lk, as redis_attempt_args. */
struct redis_release_args {
    enum redis_script which;
    int nkeys, nargs;
    const char *args[8];
    size_t lens[8];
    char number[24];
};
void redis_release_args(struct redis_instance *inst, struct dlock_provider_lock *lk, struct redis_release_args *a);

/* Reads the acquire script's answer r (freed here; acked: WAIT's count,
 * -1 without WAIT) into *g: DLOCK_OK (granted), DLOCK_EBUSY (retry hint
 * set), or a failure. */
int redis_attempt_answer(struct redis_instance *inst, struct dlock_provider_lock *lk, redisReply *r, long long acked,
                         struct dlock_grant *g);

/* An attempt's or a release's round trip without a thread, for the
 * non-blocking API (redis_native.c): the provider's acquire_send,
 * acquire_recv, acquire_drop and their release twins. One server only,
 * without WAIT, and for releases no election value to withdraw; anything
 * else answers DLOCK_ENOTSUP and goes through acquire or release. */
int redis_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int redis_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                       struct dlock_grant *g);
void redis_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int redis_release_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int redis_release_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
void redis_release_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);

/* Readies lk for an attempt, as acquire does first: its keys made, a
 * subscription for another owner dropped, the notifications from before
 * it drained. */
int redis_attempt_prepare(struct redis_instance *inst, struct dlock_provider_lock *lk);

/* True when r is an array of at least n integers. */
bool redis_is_int_array(const redisReply *r, size_t n);

/* DLOCK_EPROTOCOL: what's script answered something unexpected. */
int redis_unexpected(struct redis_instance *inst, const char *what);

/* Elections (redis_election.c): the provider's value_put, leader_get and
 * watch_*; redis_value_released tells the name's observers that a hold
 * that published a value was released (after the release). */
int redis_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len);
void redis_value_released(struct redis_instance *inst, struct dlock_provider_lock *lk);
int redis_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out);
int redis_watch_open(void *instance, const char *name, size_t name_len, void **watch, int *fd);
int redis_watch_consume(void *instance, void *watch);
void redis_watch_close(void *instance, void *watch);

/* True when p may prefix every key: no braces, spaces or control bytes. */
bool redis_valid_prefix(const char *p);

/* A command that blocks longer than a third of the lease leaves a renewal
 * no second try before the hold runs out: cap it there. (The core declares
 * the loss at the validity end whatever a call in flight is doing; the cap
 * is what gives renewals their chance.) */
void redis_cap_command_timeout(struct redis_server *srv, const struct dlock_provider_env *env);

/* Redis evicts keys with a TTL first under the volatile-* policies, and any
 * key under allkeys-*: a held lock's hash can vanish and be granted to
 * another client while its holder has most of its lease left. Refused
 * unless the operator accepts it (redis.allow_eviction). */
int redis_check_eviction(struct redis_pool *pool, const struct dlock_provider_env *env);

/* The scripts read TIME before they write, which Redis allows from 5.0 on
 * (scripts are replicated by their effects). An older server is refused at
 * open with that reason rather than failing every grant. */
int redis_check_version(struct redis_pool *pool);

#endif
