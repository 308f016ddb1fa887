/* backends/zookeeper/zk_session.h - one ZooKeeper session per client.
 *
 * Owns the zhandle and follows its state through the session watcher:
 * connected, suspended (connection lost: ZooKeeper keeps the session, and
 * with it the ephemeral lock nodes, for the session timeout), expired (the
 * server ended the session and deleted its nodes: every hold is lost). An
 * expired handle is replaced by a new session on the next use, with a new
 * generation number: a hold remembers the generation it was taken in, and
 * is lost when that is no longer the current one.
 *
 * Watches on lock nodes come back through the same watcher; a waiter
 * registers the path it waits on and an eventfd the watcher writes to. */
#ifndef DLOCK_ZK_SESSION_H
#define DLOCK_ZK_SESSION_H

#define THREADED 1
#include <zookeeper/zookeeper.h>

#include <dlock/provider.h>
#include <pthread.h>
#include <stdbool.h>

struct zk_waiter {
    struct zk_waiter *next;
    const char *path;          /* the node whose deletion ends the wait */
    int fd;                    /* eventfd written when it changes */
};

struct zk_session {
    char hosts[1024];
    int timeout_ms;            /* the session timeout asked for */
    int64_t connect_timeout_ms;
    char auth[512];            /* "user:password" for the digest scheme, "" for none */
    void *log_handle;

    /* Readers use zh; a writer replaces it after an expiry. */
    pthread_rwlock_t handle_lock;
    zhandle_t *zh;
    uint64_t generation;

    pthread_mutex_t mu;        /* the fields below */
    pthread_cond_t cv;
    int state;                 /* last ZOO_*_STATE seen */
    bool expired;
    int auth_rc;               /* 1 while pending, else the add_auth result */
    struct zk_waiter *waiters;
};

/* Connects and waits (connect_timeout_ms) for the session to be established
 * and, with auth, accepted. DLOCK_OK, DLOCK_EUNAVAILABLE, DLOCK_ECONFIG
 * (authentication refused). */
int zk_session_open(struct zk_session *s);
void zk_session_close(struct zk_session *s);

/* Takes the current handle for one or more calls (a read lock): replaces an
 * expired session first. *generation gets the session's generation. Pair
 * with zk_session_put. DLOCK_OK or DLOCK_EUNAVAILABLE (no new session). */
int zk_session_get(struct zk_session *s, zhandle_t **zh, uint64_t *generation);
void zk_session_put(struct zk_session *s);
/* As zk_session_get, but never waits or connects: DLOCK_EBUSY at once
 * when the handle is being replaced or the session is over. */
int zk_session_try_get(struct zk_session *s, zhandle_t **zh, uint64_t *generation);

void zk_session_add_waiter(struct zk_session *s, struct zk_waiter *w);
void zk_session_remove_waiter(struct zk_session *s, struct zk_waiter *w);

/* The watcher every zoo_w* call of this session passes, with s as context. */
void zk_session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* A ZooKeeper result code as a libdlock error with a message naming what
 * failed and where. */
int zk_error(const struct zk_session *s, int zrc, const char *what, const char *path);

#endif
