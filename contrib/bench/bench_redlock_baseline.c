/* contrib/bench/bench_redlock_baseline.c - the plain Redlock loop that the
 * redlock backend is measured against: what a careful user of hiredis
 * writes from the algorithm's description. One cycle is
 *   SET key token NX PX 30000 to every master, written to all before any
 *   answer is read (the masters work in parallel), a grant when a majority
 *   answered OK; then compare-and-delete (one EVALSHA) to every master the
 *   same way.
 * One connection per master, one process thread: the round trips of the N
 * masters overlap, so a cycle costs about two round trips of the slowest
 * master, as the backend's does.
 *
 * Beside it, the same loop sending the backend's own acquire and release
 * scripts (redis_script_text.h) in place of SET and compare-and-delete:
 * what the masters' work for the lock's features (the fencing token, the
 * owner's field, the waiters' queue) costs a cycle without the client,
 * so that the backend's ratio to the plain loop can be split into the
 * scripts' share and the client's. */
#include "config.h"

#include "bench.h"
#include "redis_script_text.h"

#include <hiredis/hiredis.h>
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MASTERS 16

struct redlock_loop {
    redisContext *masters[MAX_MASTERS];
    char *cad_sha[MAX_MASTERS];
    char *acquire_sha[MAX_MASTERS], *release_sha[MAX_MASTERS];
    int n;
};

/* Sends the command already formatted in each master's output buffer to
 * all of them, then reads one answer from each; returns how many answered
 * as ok() says. Exits on a connection failure (the loop must not count a
 * master that is gone). */
static int round_trip_all(struct redlock_loop *l, bool (*ok)(const redisReply *r))
{
    for (int i = 0; i < l->n; i++) {
        int done = 0;
        while (!done)
            if (redisBufferWrite(l->masters[i], &done) != REDIS_OK)
                goto failed;
    }
    int yes = 0;
    for (int i = 0; i < l->n; i++) {
        void *r;
        if (redisGetReply(l->masters[i], &r) != REDIS_OK)
            goto failed;
        yes += ok(r);
        freeReplyObject(r);
    }
    return yes;
failed:
    fprintf(stderr, "dlock-bench: the redlock baseline lost a master\n");
    exit(1);
}

static bool set_ok(const redisReply *r)
{
    return r->type == REDIS_REPLY_STATUS;
}

static bool deleted(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

static void redlock_cycle(void *arg)
{
    struct redlock_loop *l = arg;
    const char *token = "0123456789abcdef0123456789abcdef:1";
    for (int i = 0; i < l->n; i++)
        redisAppendCommand(l->masters[i], "SET bench-redlock-baseline %s NX PX 30000", token);
    int majority = l->n / 2 + 1;
    if (round_trip_all(l, set_ok) < majority) {
        fprintf(stderr, "dlock-bench: the redlock baseline was not granted by a majority\n");
        exit(1);
    }
    for (int i = 0; i < l->n; i++)
        redisAppendCommand(l->masters[i], "EVALSHA %s 1 bench-redlock-baseline %s", l->cad_sha[i], token);
    if (round_trip_all(l, deleted) < majority) {
        fprintf(stderr, "dlock-bench: the redlock baseline's release missed a majority\n");
        exit(1);
    }
}

static bool granted_by_script(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
           r->element[0]->integer == 1;
}

static bool released_by_script(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer == 0;
}

/* The backend's scripts with the arguments an uncontended redlock cycle
 * gives them: an owner that never queued, the fence's clock in 10 ms
 * steps, a 30 s lease; the keys share a hash tag, as the backend's do. */
static void redlock_scripts_cycle(void *arg)
{
    struct redlock_loop *l = arg;
    const char *token = "0123456789abcdef0123456789abcdef:1";
    for (int i = 0; i < l->n; i++)
        redisAppendCommand(l->masters[i],
                           "EVALSHA %s 4 {bench-redlock-scripts} {bench-redlock-scripts}:fence "
                           "{bench-redlock-scripts}:queue {bench-redlock-scripts}:timeouts %s 30000 5000 0 10000",
                           l->acquire_sha[i], token);
    int majority = l->n / 2 + 1;
    if (round_trip_all(l, granted_by_script) < majority) {
        fprintf(stderr, "dlock-bench: the redlock scripts loop was not granted by a majority\n");
        exit(1);
    }
    for (int i = 0; i < l->n; i++)
        redisAppendCommand(l->masters[i],
                           "EVALSHA %s 3 {bench-redlock-scripts} {bench-redlock-scripts}:queue "
                           "{bench-redlock-scripts}:timeouts %s {bench-redlock-scripts}:ch: 30000 publish",
                           l->release_sha[i], token);
    if (round_trip_all(l, released_by_script) < majority) {
        fprintf(stderr, "dlock-bench: the redlock scripts loop's release missed a majority\n");
        exit(1);
    }
}

static char *load_script(redisContext *c, const char *text)
{
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", text);
    char *sha = r && r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    if (r)
        freeReplyObject(r);
    return sha;
}

static char *load_cad(redisContext *c)
{
    return load_script(c, "if redis.call('get', KEYS[1]) == ARGV[1] then "
                          "return redis.call('del', KEYS[1]) else return 0 end");
}

bool run_redlock_baseline_uncontended(const struct bench_config *cfg, int64_t *samples)
{
    if (strcmp(cfg->backend, "redlock") != 0)
        return false;
    config_t c;
    config_init(&c);
    struct redlock_loop l = { .n = 0 };
    bool ok = config_read_file(&c, cfg->path) == CONFIG_TRUE;
    config_setting_t *servers = ok ? config_lookup(&c, "redlock.servers") : NULL;
    int n = servers ? config_setting_length(servers) : 0;
    for (int i = 0; ok && i < n && i < MAX_MASTERS; i++) {
        const char *s = config_setting_get_string_elem(servers, i);
        l.masters[i] = s ? bench_redis_connect_to(s) : NULL;
        l.cad_sha[i] = l.masters[i] ? load_cad(l.masters[i]) : NULL;
        l.acquire_sha[i] = l.masters[i] ? load_script(l.masters[i], redis_script_text(SCRIPT_ACQUIRE)) : NULL;
        l.release_sha[i] = l.masters[i] ? load_script(l.masters[i], redis_script_text(SCRIPT_RELEASE)) : NULL;
        ok = l.masters[i] && l.cad_sha[i] && l.acquire_sha[i] && l.release_sha[i];
        l.n = i + 1;
    }
    config_destroy(&c);
    if (ok && l.n > 0) {
        double secs;
        size_t cycles = bench_timed_cycles(redlock_cycle, &l, samples, &secs);
        bench_record_cycles(cfg->label, "baseline-uncontended", samples, cycles, secs);
        cycles = bench_timed_cycles(redlock_scripts_cycle, &l, samples, &secs);
        bench_record_cycles(cfg->label, "baseline-scripts", samples, cycles, secs);
    }
    for (int i = 0; i < l.n; i++) {
        free(l.cad_sha[i]);
        free(l.acquire_sha[i]);
        free(l.release_sha[i]);
        if (l.masters[i])
            redisFree(l.masters[i]);
    }
    return ok && l.n > 0;
}
