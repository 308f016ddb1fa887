/* backends/redis/redis_multi_list.c - see redis_multi_list.h.
 *
 * Each master is listed with the redis backend's own page (redis_list.c).
 * On a Cluster (quorum 0) every name lives on the master of its slot, and
 * is reported from there. For Redlock,
 * every name it reports as held goes through filter(), which asks the
 * other masters (HGET of the owner's field in the name's hash) whether they
 * hold it for the same owner. The view is a majority's: what a Redlock
 * grant needs. The cursor is "<master>:<that master's cursor>". */
#include "config.h"

#include "redis_multi_list.h"
#include "redis_keys.h"
#include "redis_list.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct majority {
    struct redis_pool *const *pools;
    int n, quorum, master;      /* master: the one being listed */
    const char *prefix;
    struct dlock_provider_list *outer;
};

/* Whether master m holds key's hash with a field for owner. An unreachable
 * master holds nothing, as far as a grant could tell. */
static bool holds_for(struct redis_pool *pool, const char *key, size_t key_len, const char *owner)
{
    const char *argv[3] = { "HEXISTS", key, owner };
    size_t lens[3] = { 7, key_len, strlen(owner) };
    int rc;
    redisReply *r = redis_pool_command(pool, 3, argv, lens, &rc);
    bool yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    return yes;
}

/* Master pool's fence counter at fence_key, 0 if it cannot say. */
static uint64_t counter_of(struct redis_pool *pool, const char *fence_key, size_t len)
{
    const char *argv[2] = { "GET", fence_key };
    size_t lens[2] = { 3, len };
    int rc;
    redisReply *r = redis_pool_command(pool, 2, argv, lens, &rc);
    uint64_t v = r && r->type == REDIS_REPLY_STRING ? strtoull(r->str, NULL, 10) : 0;
    if (r)
        freeReplyObject(r);
    return v;
}

static int descending(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int filter(const dlock_list_entry *e, void *arg)
{
    struct majority *m = arg;
    if (m->quorum == 0)
        return m->outer->emit(e, m->outer->emit_arg); /* each name lives on one master */
    if (e->kind != DLOCK_MODE_EXCLUSIVE || e->n_holders == 0 || !e->holders[0].owner || !e->holders[0].owner[0])
        return DLOCK_OK; /* waited for only, here: not a majority's hold */
    size_t key_len;
    char *key = redis_key_for(m->prefix, e->name, e->name_len, "", &key_len);
    if (!key)
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory listing locks");
    const char *owner = e->holders[0].owner;
    int holding = 1;
    bool listed_before = false, holds[64] = { false };
    for (int j = 0; j < m->n && !listed_before; j++) {
        if (j == m->master || !holds_for(m->pools[j], key, key_len, owner))
            continue;
        holding++;
        holds[j] = j < 64;
        listed_before = j < m->master; /* that master's page reported it, or will have */
    }
    free(key);
    if (listed_before || holding < m->quorum)
        return DLOCK_OK;
    /* The hold's token is the majority's: a master whose answer came too
     * late to count granted too, and its counter may be ahead (its own
     * clock's next step). Among the masters that hold it, the quorum-th
     * highest counter is the token the grant handed out: the grant made a
     * majority's counters reach it, and fewer than a majority came late. */
    size_t fence_len;
    char *fence_key = redis_key_for(m->prefix, e->name, e->name_len, ":fence", &fence_len);
    if (!fence_key)
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory listing locks");
    uint64_t counters[64];
    int nc = 0;
    counters[nc++] = e->fence;
    for (int j = 0; j < m->n && j < 64; j++)
        if (holds[j])
            counters[nc++] = counter_of(m->pools[j], fence_key, fence_len);
    free(fence_key);
    qsort(counters, (size_t)nc, sizeof *counters, descending);
    dlock_list_entry out = *e;
    dlock_list_holder holder = e->holders[0];
    out.holder_count = 1;
    out.fence = nc >= m->quorum ? counters[m->quorum - 1] : e->fence;
    if (holder.fence)
        holder.fence = out.fence;
    out.holders = &holder;
    out.n_holders = 1;
    return m->outer->emit(&out, m->outer->emit_arg);
}

/* "<master>:<inner>" into its parts; inner may be "" (from the start). */
static bool parse_cursor(const char *text, int n, int *master, const char **inner)
{
    char *end;
    long i = strtol(text, &end, 10);
    if (end == text || *end != ':' || i < 0 || i >= n)
        return false;
    *master = (int)i;
    *inner = end + 1;
    return true;
}

int redis_multi_list_page(struct redis_pool *const *pools, int n, int quorum, const char *prefix, void *log_handle,
                          struct dlock_provider_list *req)
{
    int master = 0;
    const char *inner = "";
    if (req->cursor && !parse_cursor(req->cursor, n, &master, &inner))
        return dlock_seterr(DLOCK_EINVAL, "redis: '%s' is not a cursor of this backend's listing", req->cursor);
    struct majority m = { pools, n, quorum, master, prefix, req };
    struct dlock_provider_list one = *req;
    one.cursor = inner[0] ? inner : NULL;
    one.emit = filter;
    one.emit_arg = &m;
    one.next_cursor = NULL;
    int rc = redis_list_page(pools[master], prefix, &one);
    if (rc != DLOCK_OK && rc != DLOCK_EUNAVAILABLE)
        return rc; /* the caller's stop, or a bad cursor */
    if (rc == DLOCK_EUNAVAILABLE) {
        dlock_provider_log(log_handle, DLOCK_LOG_WARN, "redis: %s left out of the listing: %s",
                           pools[master]->server.label, dlock_errmsg());
        free(one.next_cursor);
        one.next_cursor = NULL;
    }
    /* Where the next page starts: further in this master, or the next one. */
    char next[96];
    if (one.next_cursor)
        snprintf(next, sizeof next, "%d:", master);
    else if (master + 1 < n)
        snprintf(next, sizeof next, "%d:", master + 1);
    else
        return DLOCK_OK;
    size_t a = strlen(next), b = one.next_cursor ? strlen(one.next_cursor) : 0;
    req->next_cursor = malloc(a + b + 1);
    if (!req->next_cursor) {
        free(one.next_cursor);
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory listing locks");
    }
    memcpy(req->next_cursor, next, a);
    memcpy(req->next_cursor + a, one.next_cursor ? one.next_cursor : "", b + 1);
    free(one.next_cursor);
    return DLOCK_OK;
}
