/* backends/redis/redis_conn.h - connections to one Redis server: settings,
 * connect (TCP or unix socket, timeouts, AUTH, SELECT), a small thread-safe
 * pool with reconnection backoff, and commands with error text that names
 * the server. Shared by the redis backend and (later) redlock. */
#ifndef DLOCK_REDIS_CONN_H
#define DLOCK_REDIS_CONN_H

#include "../common/conn_pool.h"

#include <dlock/provider.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#define REDIS_POOL_MAX CONN_POOL_MAX
#define REDIS_MAX_SENTINELS 8

struct redis_server {
    char host[256];
    int port;
    char socket[PATH_MAX];      /* used instead of host:port when set */
    char user[128];             /* ACL user (Redis 6+), "" for none */
    char password[256];         /* "" for no AUTH */
    int db;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    char label[300];            /* "redis 127.0.0.1:6379" or "redis unix:/path", for messages */
    /* Sentinel: when nsentinels > 0, host and port are not used; every new
     * connection asks the sentinels where master_name's master is now. */
    char sentinels[REDIS_MAX_SENTINELS][128]; /* "host:port" */
    int nsentinels;
    char sentinel_password[256]; /* AUTH to the sentinels, "" for none */
    char master_name[128];
};

/* Reads host, port, socket, user, password, db, connect_timeout_ms,
 * command_timeout_ms, sentinels and master from a group (defaults:
 * 127.0.0.1:6379, db 0, 2000 ms, no sentinels). */
int redis_server_from_settings(struct redis_server *srv, const dlock_settings *s);

/* Opens one connection: connect, timeouts, AUTH, SELECT; with sentinels,
 * to the master they name, checked with ROLE. NULL on failure with the
 * detail set (dlock_seterr) and *rc the code. */
redisContext *redis_connect(const struct redis_server *srv, int *rc);

/* Connections to one server: the shared pool of backends/common (reuse,
 * a cap, reconnection backoff) over redisContexts opened by redis_connect. */
struct redis_pool {
    struct redis_server server;
    struct conn_pool conns;     /* of redisContext *; its connect argument is &server */
};

/* The pool must stay where it is until destroyed (the pool points at its
 * server). */
int redis_pool_init(struct redis_pool *pool, const struct redis_server *srv, int max);
void redis_pool_destroy(struct redis_pool *pool);

/* Takes a connection (idle, new, or waits for one). DLOCK_OK or an error
 * (DLOCK_EUNAVAILABLE while the server cannot be reached; the detail says
 * which server, why, and when the next attempt is due). */
int redis_pool_get(struct redis_pool *pool, redisContext **out);
/* An idle connection, or DLOCK_EBUSY at once: never connects, never
 * waits. */
int redis_pool_take_idle(struct redis_pool *pool, redisContext **out);
/* Gives a connection back; broken ones (ctx->err set) are closed. */
void redis_pool_put(struct redis_pool *pool, redisContext *ctx);

/* Sends one command (argv, lengths) and returns its reply, owned by the
 * caller (freeReplyObject). On an I/O error it retries once on a fresh
 * connection, so an idle connection that died (server restart) is not an
 * error. An error reply is returned as a reply, not as a failure. NULL with
 * *rc set when no reply could be had. */
redisReply *redis_pool_command(struct redis_pool *pool, int argc, const char **argv, const size_t *lens,
                               int *rc);
/* True when the calling thread's last redis_pool_command sent its command a
 * second time after the connection died with the first one in flight: the
 * first may have run (a release that then finds the hold gone did it). */
bool redis_pool_last_resent(void);

/* Sends n commands in one pipeline on one connection and reads n replies
 * into replies[] (caller frees each). DLOCK_OK or a failure (replies freed). */
int redis_pool_pipeline(struct redis_pool *pool, size_t n, int *argcs, const char ***argvs,
                        const size_t **lenses, redisReply **replies);


#endif
