/* backends/redis/redis_cluster.h - Redis Cluster routing for the redis
 * backend: the slot map (CLUSTER SLOTS), one connection pool per node,
 * MOVED (the map is refreshed) and ASK (ASKING on the target) followed,
 * and one sharded Pub/Sub subscriber per node (SSUBSCRIBE, Redis 7.0+).
 *
 * Every key of a lock carries the escaped name as its hash tag, so every
 * command of one lock goes to one slot; the caller passes a key of the lock
 * and the module finds the node. Thread-safe: the map is behind a rwlock,
 * nodes are created once and live until redis_cluster_close. */
#ifndef DLOCK_REDIS_CLUSTER_H
#define DLOCK_REDIS_CLUSTER_H

#include "redis_conn.h"
#include "redis_scripts.h"
#include "redis_subscriber.h"

#include <stdbool.h>
#include <stdint.h>

#define REDIS_CLUSTER_SLOTS 16384
#define REDIS_CLUSTER_MAX_SEEDS 16

struct redis_cluster;

/* The slot of a key: CRC16 (XMODEM) of its hash tag (the bytes between the
 * first '{' and the next '}', when not empty) or of the whole key, mod 16384. */
unsigned redis_cluster_slot(const char *key, size_t len);

/* Reads the "cluster" list ("host:port", ...) into seeds; returns how many
 * (0: not a cluster configuration), or -1 with the detail set (DLOCK_ECONFIG
 * in *rc) when a seed is malformed or the list does not go with tmpl
 * (sentinels, a unix socket or a db other than 0). */
int redis_cluster_seeds_from_settings(const dlock_settings *s, const struct redis_server *tmpl,
                                      char seeds[][128], int *rc);

/* Connects to the seeds, reads the slot map and checks that every slot is
 * served. tmpl gives credentials and timeouts for every node; pool_size is
 * per node. The result is owned by the caller (redis_cluster_close).
 * DLOCK_OK, DLOCK_EUNAVAILABLE (no seed answered, or slots not covered) or
 * DLOCK_ECONFIG (AUTH refused, or a seed is not in cluster mode). */
int redis_cluster_open(struct redis_cluster **out, const struct redis_server *tmpl, char seeds[][128], int nseeds,
                       int pool_size, void *log_handle);
void redis_cluster_close(struct redis_cluster *c);

/* True when every master answered that it has SSUBSCRIBE (Redis 7.0+):
 * releases then SPUBLISH and waiters SSUBSCRIBE on the slot's node. */
bool redis_cluster_sharded_pubsub(const struct redis_cluster *c);

/* EVALSHA of a script whose first key is args[0], on the node serving its
 * slot, following MOVED and ASK (a few hops at most) and loading the script
 * on a node that answers NOSCRIPT. Same contract as redis_script_run. With
 * retry_hint_ms, a cluster between two states (TRYAGAIN, CLUSTERDOWN) is
 * answered at once with DLOCK_EUNAVAILABLE and the pause to wait before
 * trying again in *retry_hint_ms; without it, the call pauses and retries
 * itself (operations the core does not retry). */
redisReply *redis_cluster_script_run(struct redis_cluster *c, struct redis_scripts *s, enum redis_script which,
                                     int nkeys, int nargs, const char **args, const size_t *lens, int *rc,
                                     int64_t *retry_hint_ms);

/* n commands, all on keys of key's slot, in one pipeline on one connection
 * of that slot's node, following MOVED and ASK. Same contract as
 * redis_pool_pipeline. When the first reply is NOSCRIPT, the scripts are
 * loaded on that node and the pipeline is sent again once (if s is given). */
int redis_cluster_pipeline(struct redis_cluster *c, struct redis_scripts *s, const char *key, size_t key_len,
                           size_t n, int *argcs, const char ***argvs, const size_t **lenses, redisReply **replies,
                           int64_t *retry_hint_ms);

/* n single commands, each on keys of its own slot (keys[i] is one of
 * command i's keys), in as few round trips as the map allows: one pipeline
 * per node. A command answered with a redirection, NOSCRIPT, or on a node
 * that failed is sent again alone through redis_cluster_pipeline. rcs[i]
 * gets DLOCK_OK with replies[i] set (caller frees), or a failure with
 * replies[i] NULL. */
void redis_cluster_scatter(struct redis_cluster *c, struct redis_scripts *s, size_t n, const char **keys,
                           const size_t *key_lens, int *argcs, const char ***argvs, const size_t **lenses,
                           redisReply **replies, int *rcs);

/* Loads every script on the node serving key's slot (see
 * redis_scripts_preload). */
int redis_cluster_preload(struct redis_cluster *c, struct redis_scripts *s, const char *key, size_t key_len);

/* Subscribes channel (its hash tag decides the node) as
 * redis_subscriber_add does, on that node's sharded subscriber, started on
 * first use. *used gets that subscriber: unsubscribe there
 * (redis_subscriber_remove), even if the slot has moved since. */
int redis_cluster_subscribe(struct redis_cluster *c, const char *channel, size_t len, int notify_fd,
                            int64_t timeout_ms, struct redis_subscriber **used);

/* True when r is an error that says its command did not run and must be
 * sent again (in a cluster, to the right node): MOVED, ASK, TRYAGAIN,
 * CLUSTERDOWN, or NOSCRIPT (the node lacks the script). */
bool redis_reply_unrun(const redisReply *r);
/* The pool of the master serving key's slot, as the slot map says now
 * (NULL when no node is known for it). Never connects or waits: for a
 * round trip sent without a thread, which the blocking call makes instead
 * when the node answers MOVED or ASK. */
struct redis_pool *redis_cluster_pool_of(struct redis_cluster *c, const char *key, size_t len);
/* The subscriber serving channel's slot now, NULL if none is started. A
 * lock subscribed on another one (its slot moved, or its node failed over)
 * should unsubscribe there and subscribe again. */
struct redis_subscriber *redis_cluster_subscriber_of(struct redis_cluster *c, const char *channel, size_t len);

/* "redis cluster (seed host:port, ...)", for messages. */
const char *redis_cluster_label(const struct redis_cluster *c);

/* The pools of the nodes that serve slots now (the masters), in the order
 * of their addresses, at most max; returns how many. The pools live as
 * long as the cluster. */
int redis_cluster_masters(struct redis_cluster *c, struct redis_pool **pools, int max);

#endif
