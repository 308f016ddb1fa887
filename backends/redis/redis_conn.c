/* backends/redis/redis_conn.c - see redis_conn.h */
#include "config.h"

#include "redis_conn.h"
#include "../common/host_port.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct timeval to_timeval(int64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };
    return tv;
}

static int copy_setting(const dlock_settings *s, const char *name, char *out, size_t len)
{
    const char *v;
    if (!dlock_settings_string(s, name, &v))
        return DLOCK_OK;
    if (strlen(v) >= len)
        return dlock_seterr(DLOCK_ECONFIG, "%s: redis.%s is longer than %zu bytes",
                            dlock_settings_where(s, name), name, len - 1);
    snprintf(out, len, "%s", v);
    return DLOCK_OK;
}

int redis_server_from_settings(struct redis_server *srv, const dlock_settings *s)
{
    memset(srv, 0, sizeof *srv);
    snprintf(srv->host, sizeof srv->host, "127.0.0.1");
    srv->port = 6379;
    srv->connect_timeout_ms = 2000;
    srv->command_timeout_ms = 2000;
    int64_t v;
    int rc;
    if ((rc = copy_setting(s, "host", srv->host, sizeof srv->host)) != DLOCK_OK ||
        (rc = copy_setting(s, "socket", srv->socket, sizeof srv->socket)) != DLOCK_OK ||
        (rc = copy_setting(s, "user", srv->user, sizeof srv->user)) != DLOCK_OK ||
        (rc = copy_setting(s, "password", srv->password, sizeof srv->password)) != DLOCK_OK ||
        (rc = copy_setting(s, "sentinel_password", srv->sentinel_password, sizeof srv->sentinel_password)) != DLOCK_OK)
        return rc;
    if (dlock_settings_int(s, "port", &v))
        srv->port = (int)v;
    if (dlock_settings_int(s, "db", &v))
        srv->db = (int)v;
    dlock_settings_int(s, "connect_timeout_ms", &srv->connect_timeout_ms);
    dlock_settings_int(s, "command_timeout_ms", &srv->command_timeout_ms);
    if (srv->user[0] && !srv->password[0])
        return dlock_seterr(DLOCK_ECONFIG, "%s: redis.user needs redis.password",
                            dlock_settings_where(s, "user"));
    size_t nsent = dlock_settings_list_count(s, "sentinels");
    bool has_master = dlock_settings_string(s, "master", &(const char *){ NULL });
    if (nsent > REDIS_MAX_SENTINELS)
        return dlock_seterr(DLOCK_ECONFIG, "%s: redis.sentinels lists more than %d sentinels",
                            dlock_settings_where(s, "sentinels"), REDIS_MAX_SENTINELS);
    if ((nsent > 0) != has_master)
        return dlock_seterr(DLOCK_ECONFIG, "%s: redis.sentinels and redis.master go together",
                            dlock_settings_where(s, nsent ? "sentinels" : "master"));
    for (size_t i = 0; i < nsent; i++) {
        const char *item = dlock_settings_list_item(s, "sentinels", i);
        char host[128];
        int port;
        if (!host_port_split(item, host, sizeof host, &port) || strlen(item) >= sizeof srv->sentinels[0])
            return dlock_seterr(DLOCK_ECONFIG, "%s: redis.sentinels: \"%s\" is not \"host:port\"",
                                dlock_settings_where(s, "sentinels"), item);
        snprintf(srv->sentinels[i], sizeof srv->sentinels[i], "%s", item);
    }
    srv->nsentinels = (int)nsent;
    if ((rc = copy_setting(s, "master", srv->master_name, sizeof srv->master_name)) != DLOCK_OK)
        return rc;
    if (srv->nsentinels)
        snprintf(srv->label, sizeof srv->label, "redis sentinel master '%s'", srv->master_name);
    else if (srv->socket[0])
        snprintf(srv->label, sizeof srv->label, "redis unix:%s", srv->socket);
    else
        snprintf(srv->label, sizeof srv->label, "redis %s:%d", srv->host, srv->port);
    return DLOCK_OK;
}

/* Runs a command during connection set-up; DLOCK_OK or an error with text. */
static int setup_command(redisContext *ctx, const struct redis_server *srv, const char *what, int argc,
                         const char **argv)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
    if (!r)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: %s failed: %s", srv->label, what, ctx->errstr);
    int rc = DLOCK_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        bool auth = strcmp(what, "AUTH") == 0;
        rc = dlock_seterr(auth ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE, "%s: %s refused: %s%s", srv->label, what,
                          r->str, auth ? " (check redis.user and redis.password)" : "");
    }
    freeReplyObject(r);
    return rc;
}

/* Connects to host:port (or the socket when host is NULL) with srv's
 * timeouts and credentials. */
static redisContext *connect_to(const struct redis_server *srv, const char *host, int port, int *rc)
{
    struct timeval ct = to_timeval(srv->connect_timeout_ms);
    redisContext *ctx = !host ? redisConnectUnixWithTimeout(srv->socket, ct) : redisConnectWithTimeout(host, port, ct);
    if (!ctx) {
        *rc = dlock_seterr(DLOCK_ENOMEM, "%s: out of memory for a connection", srv->label);
        return NULL;
    }
    if (ctx->err) {
        *rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: cannot connect: %s", srv->label, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    /* hiredis does not set close-on-exec: a `dlock run` child must not
     * inherit the connection. */
    fcntl(ctx->fd, F_SETFD, fcntl(ctx->fd, F_GETFD) | FD_CLOEXEC);
    redisSetTimeout(ctx, to_timeval(srv->command_timeout_ms));
    if (host)
        redisEnableKeepAlive(ctx); /* TCP only: it fails, and poisons the context, on a unix socket */
    *rc = DLOCK_OK;
    if (srv->password[0]) {
        const char *auth_user[] = { "AUTH", srv->user, srv->password };
        const char *auth_pass[] = { "AUTH", srv->password };
        *rc = srv->user[0] ? setup_command(ctx, srv, "AUTH", 3, auth_user)
                           : setup_command(ctx, srv, "AUTH", 2, auth_pass);
    }
    if (*rc == DLOCK_OK && srv->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", srv->db);
        const char *select[] = { "SELECT", db };
        *rc = setup_command(ctx, srv, "SELECT", 2, select);
    }
    if (*rc != DLOCK_OK) {
        redisFree(ctx);
        return NULL;
    }
    return ctx;
}

/* True when ctx's server says it is a master (ROLE), so that a sentinel's
 * stale answer during a failover does not send writes to a replica. */
static bool is_master(redisContext *ctx)
{
    redisReply *r = redisCommand(ctx, "ROLE");
    bool master = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                  r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    if (r)
        freeReplyObject(r);
    return master;
}

/* Asks each sentinel in turn where the master is, and connects there. */
static redisContext *connect_via_sentinels(const struct redis_server *srv, int *rc)
{
    char why[300] = "no sentinel answered";
    for (int i = 0; i < srv->nsentinels; i++) {
        char host[128];
        int port = 0;
        host_port_split(srv->sentinels[i], host, sizeof host, &port); /* checked when read */
        struct timeval ct = to_timeval(srv->connect_timeout_ms);
        redisContext *sc = redisConnectWithTimeout(host, port, ct);
        if (!sc || sc->err) {
            snprintf(why, sizeof why, "sentinel %s: %s", srv->sentinels[i], sc ? sc->errstr : "out of memory");
            if (sc)
                redisFree(sc);
            continue;
        }
        redisSetTimeout(sc, to_timeval(srv->command_timeout_ms));
        if (srv->sentinel_password[0]) {
            const char *auth[] = { "AUTH", srv->sentinel_password };
            if (setup_command(sc, srv, "AUTH", 2, auth) != DLOCK_OK) {
                snprintf(why, sizeof why, "sentinel %s: AUTH refused (check redis.sentinel_password)",
                         srv->sentinels[i]);
                redisFree(sc);
                continue;
            }
        }
        redisReply *r = redisCommand(sc, "SENTINEL get-master-addr-by-name %s", srv->master_name);
        if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0) {
            snprintf(why, sizeof why, "sentinel %s requires a password (set redis.sentinel_password)",
                     srv->sentinels[i]);
            freeReplyObject(r);
            redisFree(sc);
            continue;
        }
        redisFree(sc);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING) {
            snprintf(why, sizeof why, "sentinel %s does not know a master named '%s'", srv->sentinels[i],
                     srv->master_name);
            if (r)
                freeReplyObject(r);
            continue;
        }
        char mhost[128];
        snprintf(mhost, sizeof mhost, "%s", r->element[0]->str);
        int mport = atoi(r->element[1]->str);
        freeReplyObject(r);
        redisContext *ctx = connect_to(srv, mhost, mport, rc);
        if (ctx && is_master(ctx))
            return ctx;
        if (ctx) {
            redisFree(ctx);
            snprintf(why, sizeof why, "%s:%d, named by sentinel %s, is not a master (failover under way?)", mhost,
                     mport, srv->sentinels[i]);
        } else {
            snprintf(why, sizeof why, "%s", dlock_errmsg());
        }
    }
    *rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: %s", srv->label, why);
    return NULL;
}

redisContext *redis_connect(const struct redis_server *srv, int *rc)
{
    if (srv->nsentinels)
        return connect_via_sentinels(srv, rc);
    return connect_to(srv, srv->socket[0] ? NULL : srv->host, srv->port, rc);
}

static void *pool_connect(void *server, int *rc)
{
    return redis_connect(server, rc);
}

static bool pool_reusable(void *ctx)
{
    return ((redisContext *)ctx)->err == 0;
}

static void pool_close(void *ctx)
{
    redisFree(ctx);
}

static const struct conn_pool_ops pool_ops = { pool_connect, pool_reusable, pool_close };

int redis_pool_init(struct redis_pool *pool, const struct redis_server *srv, int max)
{
    pool->server = *srv;
    conn_pool_init(&pool->conns, &pool_ops, &pool->server, max);
    return DLOCK_OK;
}

void redis_pool_destroy(struct redis_pool *pool)
{
    conn_pool_destroy(&pool->conns);
}

int redis_pool_get(struct redis_pool *pool, redisContext **out)
{
    void *ctx = NULL;
    int rc = conn_pool_get(&pool->conns, &ctx, NULL);
    *out = ctx;
    return rc;
}

int redis_pool_take_idle(struct redis_pool *pool, redisContext **out)
{
    void *ctx = NULL;
    int rc = conn_pool_take_idle(&pool->conns, &ctx);
    *out = ctx;
    return rc;
}

void redis_pool_put(struct redis_pool *pool, redisContext *ctx)
{
    conn_pool_put(&pool->conns, ctx);
}

static __thread bool last_command_resent;

bool redis_pool_last_resent(void)
{
    return last_command_resent;
}

redisReply *redis_pool_command(struct redis_pool *pool, int argc, const char **argv, const size_t *lens,
                               int *rc)
{
    last_command_resent = false;
    for (int attempt = 0; attempt < 2; attempt++) {
        redisContext *ctx;
        *rc = redis_pool_get(pool, &ctx);
        if (*rc != DLOCK_OK)
            return NULL;
        redisReply *r = redisCommandArgv(ctx, argc, argv, lens);
        int saved_errno = errno;
        if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0 && attempt == 0) {
            /* The server became a replica (a failover): the command was
             * refused, not run. Drop this server's connections, so the next
             * one asks the sentinels again, and send it once more. */
            freeReplyObject(r);
            ctx->err = REDIS_ERR_OTHER; /* closed by redis_pool_put */
            redis_pool_put(pool, ctx);
            conn_pool_drop_idle(&pool->conns);
            continue;
        }
        if (r) {
            redis_pool_put(pool, ctx);
            *rc = DLOCK_OK;
            return r;
        }
        *rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: %s failed: %s", pool->server.label, argv[0], ctx->errstr);
        bool timed_out = ctx->err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK);
        redis_pool_put(pool, ctx);
        conn_pool_drop_idle(&pool->conns);
        /* A timeout may mean the command ran: do not send it twice. An
         * end-of-file or reset is resent once, since an idle connection
         * that died (a server restart) must not fail a call; the command
         * may have run before the connection died, so every command this
         * backend sends is safe to run twice (the scripts are idempotent
         * for their owner), and the caller can ask whether it was resent. */
        if (timed_out)
            return NULL;
        last_command_resent = true;
    }
    return NULL;
}

int redis_pool_pipeline(struct redis_pool *pool, size_t n, int *argcs, const char ***argvs,
                        const size_t **lenses, redisReply **replies)
{
    redisContext *ctx;
    int rc = redis_pool_get(pool, &ctx);
    if (rc != DLOCK_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        redisAppendCommandArgv(ctx, argcs[i], argvs[i], lenses[i]);
    size_t got = 0;
    for (; got < n; got++) {
        void *r;
        if (redisGetReply(ctx, &r) != REDIS_OK)
            break;
        replies[got] = r;
    }
    if (got < n) {
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: pipeline of %zu commands failed after %zu replies: %s",
                          pool->server.label, n, got, ctx->errstr);
        for (size_t i = 0; i < got; i++)
            freeReplyObject(replies[i]);
    }
    redis_pool_put(pool, ctx);
    if (rc != DLOCK_OK)
        conn_pool_drop_idle(&pool->conns);
    return rc;
}
