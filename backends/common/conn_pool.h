/* backends/common/conn_pool.h - a small thread-safe pool of connections to
 * one server, for backends whose client libraries have no pool of their own
 * (libpq, libmariadb, hiredis). Connections are opaque here: the backend passes how
 * to open one, whether one can be reused, and how to close it.
 *
 * After a failed connect, new connections are not tried again before a
 * backoff (50 ms doubling to 2 s) has passed: callers meanwhile get the last
 * error at once, so a server that is down is not hammered by every caller
 * and nobody waits for a connect timeout that is known to fail. */
#ifndef DLOCK_CONN_POOL_H
#define DLOCK_CONN_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define CONN_POOL_MAX 64

struct conn_pool_ops {
    /* Opens a connection; NULL with the detail set (dlock_seterr) and *rc. */
    void *(*connect)(void *arg, int *rc);
    /* True when conn can be handed out again. */
    bool (*reusable)(void *conn);
    void (*close)(void *conn);
};

struct conn_pool {
    const struct conn_pool_ops *ops;
    void *arg;                  /* passed to connect */
    int max;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *idle[CONN_POOL_MAX];
    int nidle;
    int total;                  /* idle + in use */
    int64_t retry_at_ms;        /* no new connection before this */
    int64_t backoff_ms;
    char last_error[512];
};

void conn_pool_init(struct conn_pool *pool, const struct conn_pool_ops *ops, void *arg, int max);
/* Closes the idle connections; every connection must have been put back. */
void conn_pool_destroy(struct conn_pool *pool);
/* An idle connection, a new one, or (at max) waits for one to come back.
 * *was_idle tells which (an idle one may have died meanwhile). DLOCK_OK or
 * the connect failure (DLOCK_EUNAVAILABLE during the backoff). */
int conn_pool_get(struct conn_pool *pool, void **out, bool *was_idle);
/* As conn_pool_get, but DLOCK_EBUSY (detail set) at once instead of
 * waiting when every connection is in use: for a caller that has another
 * way (a waiter that can poll). */
int conn_pool_try_get(struct conn_pool *pool, void **out);
/* An idle connection, or DLOCK_EBUSY at once: never connects, never
 * waits (for a caller that must not block). */
int conn_pool_take_idle(struct conn_pool *pool, void **out);
/* Gives a connection back: kept if reusable, else closed. NULL is allowed
 * (a connection the caller closed itself). */
void conn_pool_put(struct conn_pool *pool, void *conn);

/* Closes every idle connection: after one was found dead, the others to
 * the same server most likely are too. */
void conn_pool_drop_idle(struct conn_pool *pool);


#endif
