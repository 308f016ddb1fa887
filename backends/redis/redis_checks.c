/* backends/redis/redis_checks.c - what the redis backend checks of its
 * settings and of the server when it opens: the key prefix, the command
 * timeout against the lease, the server's version, and an eviction policy
 * that could drop a held lock. */
#include "config.h"

#include "redis_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool redis_valid_prefix(const char *p)
{
    for (; *p; p++)
        if (*p == '{' || *p == '}' || (unsigned char)*p <= ' ')
            return false;
    return true;
}

/* A command that blocks longer than a third of the lease leaves a renewal
 * no second try before the hold runs out: cap it there. (The core declares
 * the loss at the validity end whatever a call in flight is doing; the cap
 * is what gives renewals their chance.) */
void redis_cap_command_timeout(struct redis_server *srv, const struct dlock_provider_env *env)
{
    int64_t cap = env->default_lease_ms / 3;
    if (cap < 1 || srv->command_timeout_ms <= cap)
        return;
    int64_t asked = 0;
    bool explicit = dlock_settings_int(env->settings, "command_timeout_ms", &asked);
    dlock_provider_log(env->log_handle, DLOCK_LOG_WARN,
                       "%s: command timeout %s%lld ms cut to %lld ms, a third of lease_ms %lld, so that a renewal "
                       "can be tried again before the lease ends",
                       srv->label, explicit ? "(redis.command_timeout_ms) " : "",
                       (long long)srv->command_timeout_ms, (long long)cap, (long long)env->default_lease_ms);
    srv->command_timeout_ms = cap;
}

/* The first value of CONFIG GET name, copied to out ("" if none). Returns
 * DLOCK_OK, or an error when the server refuses (an ACL without CONFIG). */
static int config_get(struct redis_pool *pool, const char *name, char *out, size_t len)
{
    const char *argv[3] = { "CONFIG", "GET", name };
    int rc;
    out[0] = 0;
    redisReply *r = redis_pool_command(pool, 3, argv, NULL, &rc);
    if (!r)
        return rc;
    if (r->type == REDIS_REPLY_ERROR)
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s", r->str);
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(out, len, "%s", r->element[1]->str);
    freeReplyObject(r);
    return rc;
}

/* Redis evicts keys with a TTL first under the volatile-* policies, and any
 * key under allkeys-*: a held lock's hash can vanish and be granted to
 * another client while its holder has most of its lease left. Refused
 * unless the operator accepts it (redis.allow_eviction). */
int redis_check_eviction(struct redis_pool *pool, const struct dlock_provider_env *env)
{
    const char *label = pool->server.label;
    char policy[64], maxmemory[32];
    if (config_get(pool, "maxmemory-policy", policy, sizeof policy) != DLOCK_OK ||
        config_get(pool, "maxmemory", maxmemory, sizeof maxmemory) != DLOCK_OK) {
        dlock_provider_log(env->log_handle, DLOCK_LOG_INFO,
                           "%s: cannot read maxmemory-policy (%s); make sure it is noeviction, or held locks "
                           "can be evicted", label, dlock_errmsg());
        return DLOCK_OK;
    }
    if (policy[0] == 0 || strcmp(policy, "noeviction") == 0)
        return DLOCK_OK;
    int allow = 0;
    dlock_settings_bool(env->settings, "allow_eviction", &allow);
    if (strcmp(maxmemory, "0") == 0 || allow) {
        dlock_provider_log(env->log_handle, DLOCK_LOG_WARN,
                           "%s: maxmemory-policy is %s (maxmemory %s): under memory pressure Redis can evict a "
                           "held lock and grant it to another client; use noeviction on a lock server",
                           label, policy, maxmemory);
        return DLOCK_OK;
    }
    return dlock_seterr(DLOCK_ECONFIG,
                        "%s: maxmemory-policy is %s with maxmemory %s bytes: Redis may evict a held lock's key and "
                        "grant the lock to another client. Set maxmemory-policy noeviction on the lock server, or "
                        "redis.allow_eviction = true to accept that risk", label, policy, maxmemory);
}

/* The scripts read TIME before they write, which Redis allows from 5.0 on
 * (scripts are replicated by their effects). An older server is refused at
 * open with that reason rather than failing every grant. */
int redis_check_version(struct redis_pool *pool)
{
    const char *argv[2] = { "INFO", "server" };
    int rc;
    redisReply *r = redis_pool_command(pool, 2, argv, NULL, &rc);
    if (!r)
        return rc;
    int major = -1;
    if (r->type == REDIS_REPLY_STRING) {
        const char *v = strstr(r->str, "redis_version:");
        if (v)
            major = atoi(v + strlen("redis_version:"));
    }
    freeReplyObject(r);
    if (major >= 0 && major < 5)
        return dlock_seterr(DLOCK_ECONFIG, "%s: Redis %d.x is too old: libdlock's scripts need Redis 5.0 or later",
                            pool->server.label, major);
    return DLOCK_OK; /* 5 or later, or INFO not allowed here (an ACL): let the scripts tell */
}
