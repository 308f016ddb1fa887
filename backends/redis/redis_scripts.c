/* backends/redis/redis_scripts.c - see redis_scripts.h */
#include "config.h"

#include "redis_scripts.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void redis_scripts_init(struct redis_scripts *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
}

void redis_scripts_destroy(struct redis_scripts *s)
{
    pthread_mutex_destroy(&s->mu);
}

static int load(struct redis_pool *pool, struct redis_scripts *s, enum redis_script which, char sha[41])
{
    const char *argv[3] = { "SCRIPT", "LOAD", redis_script_text(which) };
    int rc;
    redisReply *r = redis_pool_command(pool, 3, argv, NULL, &rc);
    if (!r)
        return rc;
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: SCRIPT LOAD answered %s", pool->server.label,
                          r->type == REDIS_REPLY_ERROR ? r->str : "something other than a SHA1");
        freeReplyObject(r);
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    memcpy(s->sha[which], r->str, 40);
    s->sha[which][40] = 0;
    memcpy(sha, s->sha[which], 41);
    pthread_mutex_unlock(&s->mu);
    freeReplyObject(r);
    return DLOCK_OK;
}

int redis_scripts_preload(struct redis_pool *pool, struct redis_scripts *s)
{
    char sha[41];
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        int rc = load(pool, s, (enum redis_script)i, sha);
        if (rc != DLOCK_OK)
            return rc;
    }
    return DLOCK_OK;
}

int redis_evalsha_build(struct redis_evalsha *e, struct redis_scripts *s, enum redis_script which, int nkeys,
                        int nargs, const char **args, const size_t *lens)
{
    pthread_mutex_lock(&s->mu);
    memcpy(e->sha, s->sha[which], sizeof e->sha);
    pthread_mutex_unlock(&s->mu);
    snprintf(e->numkeys, sizeof e->numkeys, "%d", nkeys);
    e->argc = nargs + 3;
    e->argv = e->small_argv;
    e->lens = e->small_lens;
    if (e->argc > 16) { /* a renewal batch */
        e->argv = malloc((size_t)e->argc * sizeof *e->argv);
        e->lens = malloc((size_t)e->argc * sizeof *e->lens);
        if (!e->argv || !e->lens) {
            free(e->argv);
            free(e->lens);
            e->argv = NULL;
            e->lens = NULL;
            return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for a script call");
        }
    }
    e->argv[0] = "EVALSHA";
    e->lens[0] = 7;
    e->argv[1] = e->sha;
    e->lens[1] = 40;
    e->argv[2] = e->numkeys;
    e->lens[2] = strlen(e->numkeys);
    for (int i = 0; i < nargs; i++) {
        e->argv[3 + i] = args[i];
        e->lens[3 + i] = lens[i];
    }
    return DLOCK_OK;
}

void redis_evalsha_free(struct redis_evalsha *e)
{
    if (e->argv != e->small_argv) {
        free(e->argv);
        free(e->lens);
    }
    e->argv = NULL;
    e->lens = NULL;
}

int redis_script_error(const char *label, const char *text)
{
    /* A server that is loading, a replica after a failover, one stuck in a
     * script, one that lost our AUTH, or a cluster between two states: all
     * "try again later", not a protocol problem of ours. */
    bool transient = strncmp(text, "LOADING", 7) == 0 || strncmp(text, "READONLY", 8) == 0 ||
                     strncmp(text, "MASTERDOWN", 10) == 0 || strncmp(text, "BUSY", 4) == 0 ||
                     strncmp(text, "NOAUTH", 6) == 0 || strncmp(text, "TRYAGAIN", 8) == 0 ||
                     strncmp(text, "CLUSTERDOWN", 11) == 0 || strncmp(text, "MOVED", 5) == 0 ||
                     strncmp(text, "ASK", 3) == 0;
    return dlock_seterr(transient ? DLOCK_EUNAVAILABLE : DLOCK_EPROTOCOL, "%s: lock script failed: %s", label, text);
}

redisReply *redis_script_run(struct redis_pool *pool, struct redis_scripts *s, enum redis_script which,
                             int nkeys, int nargs, const char **args, const size_t *lens, int *rc)
{
    struct redis_evalsha e;
    if ((*rc = redis_evalsha_build(&e, s, which, nkeys, nargs, args, lens)) != DLOCK_OK)
        return NULL;
    if (!e.sha[0] && (*rc = load(pool, s, which, e.sha)) != DLOCK_OK) {
        redis_evalsha_free(&e);
        return NULL;
    }
    redisReply *r = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        r = redis_pool_command(pool, e.argc, e.argv, e.lens, rc);
        if (!r)
            break;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 && attempt == 0) {
            /* The server lost its script cache: load again and retry once. */
            freeReplyObject(r);
            r = NULL;
            if ((*rc = load(pool, s, which, e.sha)) != DLOCK_OK)
                break;
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            *rc = redis_script_error(pool->server.label, r->str);
            freeReplyObject(r);
            r = NULL;
        }
        break;
    }
    redis_evalsha_free(&e);
    return r;
}
