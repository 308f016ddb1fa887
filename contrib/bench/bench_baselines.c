/* contrib/bench/bench_baselines.c - the plain client loop of each backend,
 * written the way a careful user of its client library would, measured in
 * the same run as libdlock: the limit the library is compared with.
 *
 *   redis  SET k token NX PX 30000 + EVALSHA compare-and-delete, one
 *          connection (in a cluster, to the master of the key's slot); K
 *          single-lock EVALSHA renewals in one pipeline
 *   local  fcntl(F_OFD_SETLK) write lock + unlock on one file
 * and those of redlock, the SQL backends, ZooKeeper and etcd in
 * bench_redlock_baseline.c, bench_sql_baselines.c, bench_zk_baseline.c and
 * bench_etcd_baseline.c. */
#include "config.h"

#include "bench.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Looks up a string in cfg's file; def when absent. */
static const char *config_string(config_t *c, const char *path, const char *def)
{
    const char *v;
    return config_lookup_string(c, path, &v) ? v : def;
}

redisContext *bench_redis_connect_for(const struct bench_config *cfg)
{
    if (strcmp(cfg->backend, "redis") != 0)
        return NULL;
    config_t c;
    config_init(&c);
    if (config_read_file(&c, cfg->path) != CONFIG_TRUE) {
        config_destroy(&c);
        return NULL;
    }
    if (config_lookup(&c, "redis.cluster")) {
        /* A cluster is measured against the single server (its own row),
         * not against a plain loop of its own. */
        config_destroy(&c);
        return NULL;
    }
    int port = 6379, db = 0;
    config_lookup_int(&c, "redis.port", &port);
    config_lookup_int(&c, "redis.db", &db);
    const char *socket = config_string(&c, "redis.socket", NULL), *password = config_string(&c, "redis.password", NULL);
    const char *user = config_string(&c, "redis.user", NULL);
    struct timeval tv = { 2, 0 };
    redisContext *r = socket ? redisConnectUnixWithTimeout(socket, tv)
                             : redisConnectWithTimeout(config_string(&c, "redis.host", "127.0.0.1"), port, tv);
    if (r && !r->err && password) {
        redisReply *rep = user ? redisCommand(r, "AUTH %s %s", user, password) : redisCommand(r, "AUTH %s", password);
        if (rep)
            freeReplyObject(rep);
    }
    if (r && !r->err && db) {
        redisReply *rep = redisCommand(r, "SELECT %d", db);
        if (rep)
            freeReplyObject(rep);
    }
    config_destroy(&c);
    if (r && r->err) {
        redisFree(r);
        r = NULL;
    }
    return r;
}

long long redis_commands_sent(const struct bench_config *cfg)
{
    redisContext *c = bench_redis_connect_for(cfg);
    if (!c)
        return -1;
    /* What clients sent, not the redis.call()s inside scripts (INFO counts
     * both): the commands our scripts never call. */
    static const char *const sent[] = { "evalsha", "eval", "subscribe", "unsubscribe", "ping", "script|load" };
    redisReply *r = redisCommand(c, "INFO commandstats");
    long long n = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        n = 0;
        for (size_t i = 0; i < sizeof sent / sizeof sent[0]; i++) {
            char needle[64];
            snprintf(needle, sizeof needle, "cmdstat_%s:calls=", sent[i]);
            const char *at = strstr(r->str, needle);
            if (at)
                n += atoll(at + strlen(needle));
        }
    }
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return n; /* INFO itself is not in the list */
}

static char *redis_load(redisContext *c, const char *script)
{
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", script);
    char *sha = r && r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    if (r)
        freeReplyObject(r);
    return sha;
}

struct set_nx_state {
    redisContext *c;
    const char *cad_sha;
};

static void set_nx_cycle(void *arg)
{
    struct set_nx_state *st = arg;
    const char *token = "0123456789abcdef0123456789abcdef:1";
    redisReply *r = redisCommand(st->c, "SET bench-baseline %s NX PX 30000", token);
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    r = ok ? redisCommand(st->c, "EVALSHA %s 1 bench-baseline %s", st->cad_sha, token) : NULL;
    ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    if (!ok) {
        fprintf(stderr, "dlock-bench: the redis baseline loop failed\n");
        exit(1);
    }
}

struct redisContext *bench_redis_connect_to(const char *host_port)
{
    char host[256];
    const char *colon = strrchr(host_port, ':');
    size_t len = colon ? (size_t)(colon - host_port) : strlen(host_port);
    if (len >= sizeof host)
        return NULL;
    memcpy(host, host_port, len);
    host[len] = 0;
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout(host, colon ? atoi(colon + 1) : 6379, tv);
    if (c && c->err) {
        redisFree(c);
        c = NULL;
    }
    return c;
}

/* In a cluster, the master that serves the baseline's key: the first seed,
 * or the node its MOVED answer names (what a cluster-aware client does
 * once, then keeps). NULL when cfg is not a redis cluster. */
static redisContext *redis_cluster_node_for(const struct bench_config *cfg)
{
    if (strcmp(cfg->backend, "redis") != 0)
        return NULL;
    config_t c;
    config_init(&c);
    const char *seed = NULL;
    config_setting_t *seeds = config_read_file(&c, cfg->path) == CONFIG_TRUE ? config_lookup(&c, "redis.cluster") : NULL;
    if (seeds)
        seed = config_setting_get_string_elem(seeds, 0);
    char where[300] = "";
    if (seed)
        snprintf(where, sizeof where, "%s", seed);
    config_destroy(&c);
    redisContext *r = NULL;
    for (int hop = 0; hop < 2 && where[0]; hop++) {
        if (r)
            redisFree(r);
        r = bench_redis_connect_to(where);
        where[0] = 0;
        redisReply *rep = r ? redisCommand(r, "GET bench-baseline") : NULL;
        if (rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "MOVED ", 6) == 0) {
            const char *node = strchr(rep->str + 6, ' ');
            if (node)
                snprintf(where, sizeof where, "%s", node + 1);
        }
        if (rep)
            freeReplyObject(rep);
    }
    return r;
}

static bool redis_set_nx_loop(const struct bench_config *cfg, int64_t *samples)
{
    redisContext *c = bench_redis_connect_for(cfg);
    if (!c)
        c = redis_cluster_node_for(cfg);
    if (!c)
        return false;
    char *cad = redis_load(c, "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
                              "else return 0 end");
    if (cad) {
        struct set_nx_state st = { c, cad };
        double secs;
        size_t n = bench_timed_cycles(set_nx_cycle, &st, samples, &secs);
        bench_record_cycles(cfg->label, "baseline-uncontended", samples, n, secs);
    }
    free(cad);
    redisFree(c);
    return true;
}

static void fcntl_cycle(void *arg)
{
    int fd = *(int *)arg;
    struct flock lock = { .l_type = F_WRLCK, .l_whence = SEEK_SET }, unlock = { .l_type = F_UNLCK, .l_whence = SEEK_SET };
    if (fcntl(fd, F_OFD_SETLK, &lock) != 0 || fcntl(fd, F_OFD_SETLK, &unlock) != 0) {
        perror("fcntl");
        exit(1);
    }
}

static bool local_fcntl_loop(const struct bench_config *cfg, int64_t *samples)
{
    config_t c;
    config_init(&c);
    char dir[1024];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dlock-%ld", tmp && tmp[0] == '/' ? tmp : "/tmp", (long)getuid());
    if (cfg->path && config_read_file(&c, cfg->path) == CONFIG_TRUE)
        snprintf(dir, sizeof dir, "%s", config_string(&c, "local.dir", dir));
    config_destroy(&c);
    char path[1100];
    snprintf(path, sizeof path, "%s/bench-baseline.plain", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        return false;
    }
    double secs;
    size_t n = bench_timed_cycles(fcntl_cycle, &fd, samples, &secs);
    bench_record_cycles(cfg->label, "baseline-uncontended", samples, n, secs);
    close(fd);
    unlink(path);
    return true;
}

bool run_baseline_uncontended(const struct bench_config *cfg, int64_t *samples)
{
    if (!strcmp(cfg->backend, "redis"))
        return redis_set_nx_loop(cfg, samples);
    if (!strcmp(cfg->backend, "local"))
        return local_fcntl_loop(cfg, samples);
    if (!strcmp(cfg->backend, "redlock"))
        return run_redlock_baseline_uncontended(cfg, samples);
    if (!strcmp(cfg->backend, "zookeeper"))
        return run_zk_baseline_uncontended(cfg, samples);
    if (!strcmp(cfg->backend, "etcd"))
        return run_etcd_baseline_uncontended(cfg, samples);
    return run_sql_baseline_uncontended(cfg, samples);
}

bool run_baseline_many_locks(const struct bench_config *cfg)
{
    redisContext *c = bench_redis_connect_for(cfg);
    if (!c)
        return false;
    char *renew = redis_load(c, "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then "
                                "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end");
    char key[48];
    for (int pass = 0; pass < 3; pass++) { /* create, renew (timed), delete */
        int64_t t0 = bench_now_us();
        for (int i = 0; i < opt.locks; i++) {
            snprintf(key, sizeof key, "bench-pipe-%d", i);
            if (pass == 0)
                redisAppendCommand(c, "HSET %s owner:1 1", key);
            else if (pass == 1)
                redisAppendCommand(c, "EVALSHA %s 1 %s owner:1 30000", renew, key);
            else
                redisAppendCommand(c, "DEL %s", key);
        }
        for (int i = 0; i < opt.locks; i++) {
            void *r;
            if (redisGetReply(c, &r) != REDIS_OK) {
                fprintf(stderr, "dlock-bench: the redis pipeline failed\n");
                exit(1);
            }
            freeReplyObject(r);
        }
        if (pass == 1) {
            double ms = (double)(bench_now_us() - t0) / 1e3;
            figure_add(cfg->label, "baseline-many-locks", "renewal of all locks", "ms", ms);
            figure_add(cfg->label, "baseline-many-locks", "renewal per lock-tick", "us", ms * 1e3 / opt.locks);
        }
    }
    free(renew);
    redisFree(c);
    return true;
}
