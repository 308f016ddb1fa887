/* backends/redis/redis_cluster.c - see redis_cluster.h
 *
 * The slot map is an array of 16384 node indexes read from CLUSTER SLOTS.
 * A MOVED answer rewrites its slot at once (the common case after a
 * resharding or a failover is one slot at a time) and asks for a full
 * refresh, at most once a second; a node that cannot be reached asks for
 * one at once, so a failover is followed as soon as a node reports it. */
#include "config.h"

#include "redis_cluster.h"
#include "../common/host_port.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NODES 256
#define MAX_HOPS 8
#define REFRESH_AFTER_MOVED_MS 1000
#define REFRESH_AFTER_FAILURE_MS 100

struct cluster_node {
    char addr[160];                 /* "host:port" */
    struct redis_pool pool;
    struct redis_subscriber *sub;   /* started on the first subscription */
};

struct redis_cluster {
    struct redis_server tmpl;       /* credentials and timeouts for every node */
    int pool_size;
    void *log_handle;
    bool sharded;                   /* SSUBSCRIBE/SPUBLISH available */
    char label[300];
    pthread_rwlock_t map_lock;      /* slot_node, nodes, nnodes */
    int16_t slot_node[REDIS_CLUSTER_SLOTS];  /* index into nodes, -1 unknown */
    struct cluster_node *nodes[MAX_NODES];
    int nnodes;
    int nseeds;                     /* nodes[0..nseeds) are the seeds */
    pthread_mutex_t refresh_mu;     /* one refresh at a time */
    int64_t last_refresh_ms;
    pthread_mutex_t sub_mu;         /* starting subscribers */
};

unsigned redis_cluster_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1) {
            key = open + 1;
            len = (size_t)(close - key);
        }
    }
    /* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as the
     * Cluster specification requires. */
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)key[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc & (REDIS_CLUSTER_SLOTS - 1);
}

int redis_cluster_seeds_from_settings(const dlock_settings *s, const struct redis_server *tmpl,
                                      char seeds[][128], int *rc)
{
    size_t n = dlock_settings_list_count(s, "cluster");
    if (n == 0)
        return 0;
    const char *where = dlock_settings_where(s, "cluster");
    *rc = DLOCK_OK;
    if (n > REDIS_CLUSTER_MAX_SEEDS)
        *rc = dlock_seterr(DLOCK_ECONFIG, "%s: redis.cluster lists more than %d seed nodes", where,
                           REDIS_CLUSTER_MAX_SEEDS);
    else if (tmpl->nsentinels)
        *rc = dlock_seterr(DLOCK_ECONFIG, "%s: redis.cluster and redis.sentinels exclude each other", where);
    else if (tmpl->socket[0])
        *rc = dlock_seterr(DLOCK_ECONFIG, "%s: redis.cluster nodes are reached over TCP; remove redis.socket",
                           where);
    else if (tmpl->db != 0)
        *rc = dlock_seterr(DLOCK_ECONFIG, "%s: a Redis Cluster has only database 0; remove redis.db", where);
    for (size_t i = 0; *rc == DLOCK_OK && i < n; i++) {
        const char *item = dlock_settings_list_item(s, "cluster", i);
        char host[128];
        int port;
        if (strlen(item) >= 128 || !host_port_split(item, host, sizeof host, &port))
            *rc = dlock_seterr(DLOCK_ECONFIG, "%s: redis.cluster: \"%s\" is not \"host:port\"", where, item);
        else
            snprintf(seeds[i], 128, "%s", item);
    }
    return *rc == DLOCK_OK ? (int)n : -1;
}

/* ---- nodes and the slot map --------------------------------------------------- */

/* The node for addr, created if new (map_lock held for writing). NULL when
 * the table is full or addr is malformed. */
static int node_index_locked(struct redis_cluster *c, const char *addr)
{
    for (int i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i]->addr, addr) == 0)
            return i;
    struct redis_server srv = c->tmpl;
    if (c->nnodes == MAX_NODES || !host_port_split(addr, srv.host, sizeof srv.host, &srv.port))
        return -1;
    struct cluster_node *node = calloc(1, sizeof *node);
    if (!node)
        return -1;
    snprintf(node->addr, sizeof node->addr, "%s", addr);
    snprintf(srv.label, sizeof srv.label, "redis cluster node %s", addr);
    redis_pool_init(&node->pool, &srv, c->pool_size);
    c->nodes[c->nnodes] = node;
    return c->nnodes++;
}

static struct cluster_node *node_for_addr(struct redis_cluster *c, const char *addr)
{
    pthread_rwlock_wrlock(&c->map_lock);
    int i = node_index_locked(c, addr);
    struct cluster_node *node = i >= 0 ? c->nodes[i] : NULL;
    pthread_rwlock_unlock(&c->map_lock);
    return node;
}

static struct cluster_node *node_for_slot(struct redis_cluster *c, unsigned slot)
{
    pthread_rwlock_rdlock(&c->map_lock);
    int i = c->slot_node[slot];
    struct cluster_node *node = i >= 0 ? c->nodes[i] : NULL;
    pthread_rwlock_unlock(&c->map_lock);
    return node;
}

/* Reads CLUSTER SLOTS from node into the map. DLOCK_OK, or an error with
 * the detail set. */
static int read_slots_from(struct redis_cluster *c, struct cluster_node *node)
{
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    int rc;
    redisReply *r = redis_pool_command(&node->pool, 2, argv, NULL, &rc);
    if (!r)
        return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        bool not_cluster = strstr(r->str, "cluster support disabled") != NULL;
        rc = dlock_seterr(not_cluster ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE, "%s: CLUSTER SLOTS refused: %s%s",
                          node->pool.server.label, r->str,
                          not_cluster ? " (this server is not in cluster mode: use redis.host and redis.port)"
                                      : "");
        freeReplyObject(r);
        return rc;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return dlock_seterr(DLOCK_EPROTOCOL, "%s: CLUSTER SLOTS answered something unexpected",
                            node->pool.server.label);
    }
    int16_t *map = malloc(sizeof c->slot_node);
    if (!map) {
        freeReplyObject(r);
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for the slot map");
    }
    for (int i = 0; i < REDIS_CLUSTER_SLOTS; i++)
        map[i] = -1;
    rc = DLOCK_OK;
    pthread_rwlock_wrlock(&c->map_lock);
    for (size_t i = 0; i < r->elements && rc == DLOCK_OK; i++) {
        const redisReply *range = r->element[i];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 || range->element[0]->type != REDIS_REPLY_INTEGER ||
            range->element[1]->type != REDIS_REPLY_INTEGER || range->element[2]->type != REDIS_REPLY_ARRAY ||
            range->element[2]->elements < 2 || range->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            range->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long first = range->element[0]->integer, last = range->element[1]->integer;
        const char *host = range->element[2]->element[0]->str;
        char addr[160];
        /* An empty or "?" endpoint means "the address you reached me on". */
        if (!host[0] || strcmp(host, "?") == 0)
            host = node->pool.server.host;
        snprintf(addr, sizeof addr, "%s:%lld", host, range->element[2]->element[1]->integer);
        int idx = node_index_locked(c, addr);
        if (idx < 0) {
            rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: CLUSTER SLOTS names too many nodes or a bad address (%s)",
                              node->pool.server.label, addr);
            break;
        }
        for (long long s = first < 0 ? 0 : first; s <= last && s < REDIS_CLUSTER_SLOTS; s++)
            map[s] = (int16_t)idx;
    }
    if (rc == DLOCK_OK)
        memcpy(c->slot_node, map, sizeof c->slot_node);
    pthread_rwlock_unlock(&c->map_lock);
    free(map);
    freeReplyObject(r);
    return rc;
}

/* Refreshes the map from the first node that answers (the ones in the map
 * first, then the seeds), unless one was done less than min_gap_ms ago. */
static int refresh(struct redis_cluster *c, int64_t min_gap_ms)
{
    /* One refresh at a time; a caller that finds one under way goes on
     * with the map it has (a stopped node can hold a refresh for a whole
     * command timeout, and nobody else should wait for that). */
    if (min_gap_ms > 0 ? pthread_mutex_trylock(&c->refresh_mu) != 0 : pthread_mutex_lock(&c->refresh_mu) != 0)
        return DLOCK_OK;
    int64_t now = dlock_provider_now_ms();
    if (c->last_refresh_ms && now - c->last_refresh_ms < min_gap_ms) {
        pthread_mutex_unlock(&c->refresh_mu);
        return DLOCK_OK;
    }
    c->last_refresh_ms = now;
    pthread_rwlock_rdlock(&c->map_lock);
    int n = c->nnodes;
    struct cluster_node *order[MAX_NODES];
    memcpy(order, c->nodes, (size_t)n * sizeof order[0]);
    pthread_rwlock_unlock(&c->map_lock);
    int rc = DLOCK_EUNAVAILABLE;
    struct dlock_saved_error last = { "" };
    /* Newest nodes first: after a failover, the seeds may be the dead ones. */
    for (int i = n - 1; i >= 0; i--) {
        rc = read_slots_from(c, order[i]);
        if (rc == DLOCK_OK || rc == DLOCK_ECONFIG)
            break;
        dlock_error_save(&last);
    }
    pthread_mutex_unlock(&c->refresh_mu);
    if (rc != DLOCK_OK && rc != DLOCK_ECONFIG)
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: no node answered CLUSTER SLOTS (last: %s)", c->label, last.text);
    return rc;
}

static unsigned uncovered_slots(struct redis_cluster *c, unsigned *first)
{
    unsigned n = 0;
    pthread_rwlock_rdlock(&c->map_lock);
    for (unsigned s = 0; s < REDIS_CLUSTER_SLOTS; s++)
        if (c->slot_node[s] < 0 && n++ == 0)
            *first = s;
    pthread_rwlock_unlock(&c->map_lock);
    return n;
}

/* Asks one master whether it knows SSUBSCRIBE (Redis 7.0+). */
static bool has_sharded_pubsub(struct redis_cluster *c)
{
    struct cluster_node *node = node_for_slot(c, 0);
    const char *argv[3] = { "COMMAND", "INFO", "SSUBSCRIBE" };
    int rc;
    redisReply *r = node ? redis_pool_command(&node->pool, 3, argv, NULL, &rc) : NULL;
    bool yes = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_ARRAY;
    if (r)
        freeReplyObject(r);
    return yes;
}

int redis_cluster_open(struct redis_cluster **out, const struct redis_server *tmpl, char seeds[][128], int nseeds,
                       int pool_size, void *log_handle)
{
    struct redis_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for the cluster");
    c->tmpl = *tmpl;
    c->pool_size = pool_size;
    c->log_handle = log_handle;
    size_t used = (size_t)snprintf(c->label, sizeof c->label, "redis cluster (");
    for (int i = 0; i < nseeds && used < sizeof c->label; i++)
        used += (size_t)snprintf(c->label + used, sizeof c->label - used, "%s%s", i ? ", " : "", seeds[i]);
    if (used < sizeof c->label)
        snprintf(c->label + used, sizeof c->label - used, ")");
    pthread_rwlock_init(&c->map_lock, NULL);
    pthread_mutex_init(&c->refresh_mu, NULL);
    pthread_mutex_init(&c->sub_mu, NULL);
    for (int i = 0; i < REDIS_CLUSTER_SLOTS; i++)
        c->slot_node[i] = -1;
    for (int i = 0; i < nseeds; i++)
        node_for_addr(c, seeds[i]);
    c->nseeds = c->nnodes;
    int rc = refresh(c, 0);
    unsigned first = 0, missing = rc == DLOCK_OK ? uncovered_slots(c, &first) : 0;
    if (rc == DLOCK_OK && missing)
        rc = dlock_seterr(DLOCK_EUNAVAILABLE,
                          "%s: %u of the %d slots have no node (the first is %u): the cluster is not fully set up",
                          c->label, missing, REDIS_CLUSTER_SLOTS, first);
    if (rc != DLOCK_OK) {
        redis_cluster_close(c);
        return rc;
    }
    c->sharded = has_sharded_pubsub(c);
    if (!c->sharded)
        dlock_provider_log(log_handle, DLOCK_LOG_INFO,
                           "%s: no SSUBSCRIBE (Redis < 7.0): waiters use cluster-wide PUBLISH/SUBSCRIBE", c->label);
    *out = c;
    return DLOCK_OK;
}

static int by_addr(const void *a, const void *b)
{
    const struct cluster_node *x = *(struct cluster_node *const *)a, *y = *(struct cluster_node *const *)b;
    return strcmp(x->addr, y->addr);
}

int redis_cluster_masters(struct redis_cluster *c, struct redis_pool **pools, int max)
{
    bool serves[MAX_NODES] = { false };
    struct cluster_node *found[MAX_NODES];
    int n = 0;
    pthread_rwlock_rdlock(&c->map_lock);
    for (int s = 0; s < REDIS_CLUSTER_SLOTS; s++)
        if (c->slot_node[s] >= 0)
            serves[c->slot_node[s]] = true;
    for (int i = 0; i < c->nnodes; i++)
        if (serves[i])
            found[n++] = c->nodes[i];
    pthread_rwlock_unlock(&c->map_lock);
    /* Address order: the same listing walks the same masters in the same
     * order from one page to the next. */
    qsort(found, (size_t)n, sizeof *found, by_addr);
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++)
        pools[i] = &found[i]->pool;
    return n;
}

void redis_cluster_close(struct redis_cluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nnodes; i++) {
        redis_subscriber_stop(c->nodes[i]->sub);
        redis_pool_destroy(&c->nodes[i]->pool);
        free(c->nodes[i]);
    }
    pthread_mutex_destroy(&c->sub_mu);
    pthread_mutex_destroy(&c->refresh_mu);
    pthread_rwlock_destroy(&c->map_lock);
    free(c);
}

bool redis_cluster_sharded_pubsub(const struct redis_cluster *c)
{
    return c->sharded;
}

const char *redis_cluster_label(const struct redis_cluster *c)
{
    return c->label;
}

/* ---- commands ------------------------------------------------------------------- */

/* The pipeline with ASKING before each command (an ASK redirection is good
 * for the one command that follows ASKING); the ASKING replies are dropped. */
static int pipeline_asking(struct cluster_node *node, size_t n, int *argcs, const char ***argvs,
                           const size_t **lenses, redisReply **replies)
{
    int *a = malloc(2 * n * sizeof *a);
    const char ***v = malloc(2 * n * sizeof *v);
    const size_t **l = malloc(2 * n * sizeof *l);
    redisReply **r = malloc(2 * n * sizeof *r);
    static const char *asking[1] = { "ASKING" };
    static const size_t asking_len[1] = { 6 };
    int rc = DLOCK_OK;
    if (!a || !v || !l || !r)
        rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for a redirected pipeline");
    for (size_t i = 0; rc == DLOCK_OK && i < n; i++) {
        a[2 * i] = 1;
        v[2 * i] = asking;
        l[2 * i] = asking_len;
        a[2 * i + 1] = argcs[i];
        v[2 * i + 1] = argvs[i];
        l[2 * i + 1] = lenses[i];
    }
    if (rc == DLOCK_OK)
        rc = redis_pool_pipeline(&node->pool, 2 * n, a, v, l, r);
    for (size_t i = 0; rc == DLOCK_OK && i < n; i++) {
        freeReplyObject(r[2 * i]);
        replies[i] = r[2 * i + 1];
    }
    free(a);
    free(v);
    free(l);
    free(r);
    return rc;
}

enum redirect { REDIRECT_NONE, REDIRECT_MOVED, REDIRECT_ASK, REDIRECT_RETRY };

/* Looks for a cluster redirection among the replies: MOVED or ASK (addr
 * gets the target), TRYAGAIN or CLUSTERDOWN (retry after a pause); text
 * gets the server's words. */
static enum redirect find_redirect(redisReply **replies, size_t n, char addr[160], char text[200])
{
    for (size_t i = 0; i < n; i++) {
        const redisReply *r = replies[i];
        if (r->type != REDIS_REPLY_ERROR)
            continue;
        bool moved = strncmp(r->str, "MOVED ", 6) == 0, ask = strncmp(r->str, "ASK ", 4) == 0;
        if (moved || ask) {
            /* "MOVED <slot> <host>:<port>" */
            const char *space = strrchr(r->str, ' ');
            snprintf(addr, 160, "%s", space ? space + 1 : "");
            snprintf(text, 200, "%s", r->str);
            return moved ? REDIRECT_MOVED : REDIRECT_ASK;
        }
        if (strncmp(r->str, "TRYAGAIN", 8) == 0 || strncmp(r->str, "CLUSTERDOWN", 11) == 0) {
            snprintf(text, 200, "%s", r->str);
            return REDIRECT_RETRY;
        }
    }
    return REDIRECT_NONE;
}

static void set_slot(struct redis_cluster *c, unsigned slot, struct cluster_node *node)
{
    pthread_rwlock_wrlock(&c->map_lock);
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i] == node)
            c->slot_node[slot] = (int16_t)i;
    pthread_rwlock_unlock(&c->map_lock);
}

static void pause_ms(long ms)
{
    struct timespec ts = { 0, ms * 1000000L };
    nanosleep(&ts, NULL);
}

int redis_cluster_pipeline(struct redis_cluster *c, struct redis_scripts *s, const char *key, size_t key_len,
                           size_t n, int *argcs, const char ***argvs, const size_t **lenses, redisReply **replies,
                           int64_t *retry_hint_ms)
{
    unsigned slot = redis_cluster_slot(key, key_len);
    struct cluster_node *ask = NULL;
    bool reloaded = false, refreshed = false;
    char addr[160], text[200] = "";
    for (int hop = 0; hop < MAX_HOPS; hop++) {
        struct cluster_node *node = ask ? ask : node_for_slot(c, slot);
        if (!node) {
            refresh(c, REFRESH_AFTER_FAILURE_MS);
            if (!(node = node_for_slot(c, slot)))
                return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: no node serves slot %u (is the cluster down?)",
                                    c->label, slot);
        }
        int rc = ask ? pipeline_asking(node, n, argcs, argvs, lenses, replies)
                     : redis_pool_pipeline(&node->pool, n, argcs, argvs, lenses, replies);
        if (rc != DLOCK_OK) {
            /* The node is gone: if the cluster has moved its slot (a
             * failover), go there at once; otherwise report it. */
            if (rc != DLOCK_EUNAVAILABLE || refreshed || ask)
                return rc;
            refreshed = true;
            struct dlock_saved_error saved;
            dlock_error_save(&saved);
            if (refresh(c, REFRESH_AFTER_FAILURE_MS) == DLOCK_OK && node_for_slot(c, slot) != node)
                continue;
            return dlock_error_restore(&saved, rc);
        }
        if (s && !reloaded && replies[0]->type == REDIS_REPLY_ERROR && strncmp(replies[0]->str, "NOSCRIPT", 8) == 0) {
            /* A node that never saw our scripts (new, restarted, or
             * promoted from a replica): load them there and send again. */
            for (size_t i = 0; i < n; i++)
                freeReplyObject(replies[i]);
            reloaded = true;
            if ((rc = redis_scripts_preload(&node->pool, s)) != DLOCK_OK)
                return rc;
            continue;
        }
        enum redirect how = find_redirect(replies, n, addr, text);
        if (how == REDIRECT_NONE)
            return DLOCK_OK;
        for (size_t i = 0; i < n; i++)
            freeReplyObject(replies[i]);
        if (how == REDIRECT_RETRY) {
            /* A slot half-migrated for a multi-key command, or a cluster
             * that lost a master and has not failed over yet. */
            refresh(c, REFRESH_AFTER_FAILURE_MS);
            if (retry_hint_ms) { /* the caller (the core) waits, cancellably */
                *retry_hint_ms = 50;
                return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: slot %u is between two states (%s)", c->label,
                                    slot, text);
            }
            pause_ms(20L << (hop < 4 ? hop : 4));
            ask = NULL;
            continue;
        }
        struct cluster_node *target = node_for_addr(c, addr);
        if (!target)
            return dlock_seterr(DLOCK_EPROTOCOL, "%s: cannot follow \"%s\"", c->label, text);
        if (how == REDIRECT_ASK) {
            ask = target;
            continue;
        }
        ask = NULL;
        set_slot(c, slot, target);
        refresh(c, REFRESH_AFTER_MOVED_MS);
        set_slot(c, slot, target); /* the node we asked may have been behind */
    }
    return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: slot %u still redirected after %d tries (last answer: %s)", c->label,
                        slot, MAX_HOPS, text);
}

bool redis_reply_unrun(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR)
        return false;
    static const char *const again[] = { "MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "NOSCRIPT" };
    for (size_t i = 0; i < sizeof again / sizeof again[0]; i++)
        if (strncmp(r->str, again[i], strlen(again[i])) == 0)
            return true;
    return false;
}

void redis_cluster_scatter(struct redis_cluster *c, struct redis_scripts *s, size_t n, const char **keys,
                           const size_t *key_lens, int *argcs, const char ***argvs, const size_t **lenses,
                           redisReply **replies, int *rcs)
{
    struct cluster_node **node = calloc(n, sizeof *node);
    size_t *pick = malloc(n * sizeof *pick);
    int *a = malloc(n * sizeof *a);
    const char ***v = malloc(n * sizeof *v);
    const size_t **l = malloc(n * sizeof *l);
    redisReply **r = malloc(n * sizeof *r);
    bool *done = calloc(n, sizeof *done);
    bool batched = node && pick && a && v && l && r && done;
    for (size_t i = 0; batched && i < n; i++)
        node[i] = node_for_slot(c, redis_cluster_slot(keys[i], key_lens[i]));
    /* One pipeline per node, over the commands the map sends there. */
    for (size_t first = 0; batched && first < n; first++) {
        if (done[first] || !node[first])
            continue;
        size_t m = 0;
        for (size_t i = first; i < n; i++)
            if (!done[i] && node[i] == node[first]) {
                pick[m] = i;
                a[m] = argcs[i];
                v[m] = argvs[i];
                l[m] = lenses[i];
                m++;
            }
        bool ok = redis_pool_pipeline(&node[first]->pool, m, a, v, l, r) == DLOCK_OK;
        for (size_t j = 0; j < m; j++) {
            size_t i = pick[j];
            if (ok && !redis_reply_unrun(r[j])) {
                replies[i] = r[j];
                rcs[i] = DLOCK_OK;
                done[i] = true;
            } else if (ok) {
                freeReplyObject(r[j]);
            }
            node[i] = NULL; /* not again in this loop: alone, below */
        }
    }
    /* The rest (out of memory, node failed, redirected) one by one. */
    for (size_t i = 0; i < n; i++) {
        if (done && done[i])
            continue;
        rcs[i] = redis_cluster_pipeline(c, s, keys[i], key_lens[i], 1, &argcs[i], &argvs[i], &lenses[i], &replies[i],
                                        NULL);
        if (rcs[i] != DLOCK_OK)
            replies[i] = NULL;
    }
    free(node);
    free(pick);
    free(a);
    free(v);
    free(l);
    free(r);
    free(done);
}

int redis_cluster_preload(struct redis_cluster *c, struct redis_scripts *s, const char *key, size_t key_len)
{
    struct cluster_node *node = node_for_slot(c, redis_cluster_slot(key, key_len));
    if (!node)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: no node serves the slot of this lock", c->label);
    return redis_scripts_preload(&node->pool, s);
}

redisReply *redis_cluster_script_run(struct redis_cluster *c, struct redis_scripts *s, enum redis_script which,
                                     int nkeys, int nargs, const char **args, const size_t *lens, int *rc,
                                     int64_t *retry_hint_ms)
{
    struct redis_evalsha e;
    if ((*rc = redis_evalsha_build(&e, s, which, nkeys, nargs, args, lens)) != DLOCK_OK)
        return NULL;
    if (!e.sha[0]) { /* never loaded anywhere yet */
        redis_evalsha_free(&e);
        if ((*rc = redis_cluster_preload(c, s, args[0], lens[0])) != DLOCK_OK ||
            (*rc = redis_evalsha_build(&e, s, which, nkeys, nargs, args, lens)) != DLOCK_OK)
            return NULL;
    }
    redisReply *r = NULL;
    const size_t *elens = e.lens;
    *rc = redis_cluster_pipeline(c, s, args[0], lens[0], 1, &e.argc, &e.argv, &elens, &r, retry_hint_ms);
    redis_evalsha_free(&e);
    if (*rc != DLOCK_OK)
        return NULL;
    if (r->type == REDIS_REPLY_ERROR) {
        *rc = redis_script_error(c->label, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* ---- waiting -------------------------------------------------------------------- */

/* Sharded: the node that serves the channel's slot. Otherwise a PUBLISH
 * reaches every node of the cluster, so the first one will do. */
static struct cluster_node *node_for_channel(struct redis_cluster *c, const char *channel, size_t len)
{
    return c->sharded ? node_for_slot(c, redis_cluster_slot(channel, len)) : c->nodes[0];
}

struct redis_pool *redis_cluster_pool_of(struct redis_cluster *c, const char *key, size_t len)
{
    struct cluster_node *node = node_for_slot(c, redis_cluster_slot(key, len));
    return node ? &node->pool : NULL;
}

struct redis_subscriber *redis_cluster_subscriber_of(struct redis_cluster *c, const char *channel, size_t len)
{
    struct cluster_node *node = node_for_channel(c, channel, len);
    pthread_mutex_lock(&c->sub_mu);
    struct redis_subscriber *sub = node ? node->sub : NULL;
    pthread_mutex_unlock(&c->sub_mu);
    return sub;
}

int redis_cluster_subscribe(struct redis_cluster *c, const char *channel, size_t len, int notify_fd,
                            int64_t timeout_ms, struct redis_subscriber **used)
{
    struct cluster_node *node = node_for_channel(c, channel, len);
    if (!node)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: no node serves the slot of this channel", c->label);
    pthread_mutex_lock(&c->sub_mu);
    int rc = DLOCK_OK;
    if (!node->sub)
        rc = redis_subscriber_start(&node->sub, &node->pool.server, c->sharded, c->log_handle);
    struct redis_subscriber *sub = node->sub;
    pthread_mutex_unlock(&c->sub_mu);
    if (rc == DLOCK_OK)
        rc = redis_subscriber_add(sub, channel, len, notify_fd, timeout_ms);
    if (rc == DLOCK_OK)
        *used = sub;
    return rc;
}
