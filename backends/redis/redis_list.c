/* backends/redis/redis_list.c - see redis_list.h.
 *
 * One page is one SCAN over the fence counters (<prefix>{NAME}:fence: one
 * per name, never expiring, so each name is found through exactly one key
 * however many of its keys exist), then one pipeline that reads each found
 * name: TIME first (leases and waiter deadlines are on the server's
 * clock), then per name the hash and its PTTL, the fence, the holders set
 * and the waiters' deadlines. A name is reported while its hash exists or a
 * waiter's deadline has not passed.
 *
 * A SCAN batch may hold more names than the page's limit: the cursor is
 * then the same SCAN cursor plus the last name reported, and the next page
 * scans that cursor again and goes on after that name in the batch (names
 * sorted by their bytes). */
#include "config.h"

#include "redis_list.h"
#include "redis_keys.h"
#include "../common/name_escape.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCAN_COUNT "1000"
#define PER_NAME 5 /* HGETALL, PTTL, GET fence, ZRANGE holders, ZRANGE timeouts */

struct found {
    char *key;          /* the fence key as scanned */
    size_t key_len;
    char name[DLOCK_NAME_MAX + 1];
    size_t name_len;
};

struct cursor {
    char scan[32];      /* SCAN's cursor, "0" at the start */
    char last[DLOCK_NAME_MAX + 1];
    size_t last_len;    /* 0: none reported from this batch yet */
};

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "<scan cursor>" or "<scan cursor>.<hex of the last name reported>". */
static bool parse_cursor(const char *text, struct cursor *c)
{
    memset(c, 0, sizeof *c);
    const char *dot = strchr(text, '.');
    size_t n = dot ? (size_t)(dot - text) : strlen(text);
    if (n == 0 || n >= sizeof c->scan || strspn(text, "0123456789") != n)
        return false;
    memcpy(c->scan, text, n);
    if (!dot)
        return true;
    const char *h = dot + 1;
    size_t hl = strlen(h);
    if (hl == 0 || hl % 2 || hl / 2 > DLOCK_NAME_MAX)
        return false;
    for (size_t i = 0; i < hl; i += 2) {
        int a = hex(h[i]), b = hex(h[i + 1]);
        if (a < 0 || b < 0 || (a == 0 && b == 0))
            return false;
        c->last[c->last_len++] = (char)(a * 16 + b);
    }
    return true;
}

static char *format_cursor(const char *scan, const char *last, size_t last_len)
{
    size_t n = strlen(scan);
    char *out = malloc(n + 2 + 2 * last_len);
    if (!out)
        return NULL;
    memcpy(out, scan, n + 1);
    if (last_len) {
        out[n++] = '.';
        for (size_t i = 0; i < last_len; i++)
            n += (size_t)sprintf(out + n, "%02x", (unsigned char)last[i]);
    }
    return out;
}

/* Appends s to a glob pattern, each of *?[]\ taken literally. */
static size_t glob_literal(char *out, const char *s, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (strchr("*?[]\\", s[i]))
            out[o++] = '\\';
        out[o++] = s[i];
    }
    return o;
}

/* <prefix>{<name prefix, escaped as in keys>*}:fence */
static char *scan_pattern(const char *prefix, const char *name_prefix, size_t len, size_t *out_len)
{
    size_t key_len;
    char *key = redis_key_for(prefix, name_prefix, len, "", &key_len); /* "<prefix>{<escaped>}" */
    char *pat = key ? malloc(2 * key_len + 16) : NULL;
    if (!pat) {
        free(key);
        return NULL;
    }
    size_t o = glob_literal(pat, key, key_len - 1); /* all but the closing brace */
    memcpy(pat + o, "*}:fence", 9);
    *out_len = o + 8;
    free(key);
    return pat;
}

/* The name in "<prefix>{<escaped name>}:fence"; false for a key that is
 * not one this backend makes. */
static bool name_of_key(const char *prefix, const char *key, size_t key_len, char *name, size_t *name_len)
{
    size_t plen = strlen(prefix);
    if (key_len < plen + 2 + 7 || memcmp(key, prefix, plen) != 0 || key[plen] != '{' ||
        memcmp(key + key_len - 7, "}:fence", 7) != 0)
        return false;
    return name_unescape(key + plen + 1, key_len - 7 - plen - 1, redis_name_plain, name, name_len);
}

static int by_name(const void *a, const void *b)
{
    const struct found *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static int compare_name(const struct found *f, const char *name, size_t len)
{
    struct found other;
    memcpy(other.name, name, len);
    other.name_len = len;
    return by_name(f, &other);
}

/* ---- one name from its replies ------------------------------------------------------ */

static int64_t reply_int(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return -1;
}

static bool is_pair_array(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements % 2 == 0;
}

/* Describes one name from r[0..PER_NAME-1] at server time now_ms into e;
 * false when it is neither held nor waited for. holders has room for
 * cap entries. */
static bool describe(redisReply **r, int64_t now_ms, dlock_list_entry *e, dlock_list_holder *holders, size_t cap)
{
    const redisReply *hash = r[0], *set = r[3], *deadlines = r[4];
    int64_t waiters = 0;
    if (is_pair_array(deadlines))
        for (size_t i = 1; i < deadlines->elements; i += 2)
            waiters += reply_int(deadlines->element[i]) > now_ms;
    bool held = is_pair_array(hash) && hash->elements >= 2;
    if (!held && waiters == 0)
        return false;
    const char *kind = NULL;
    for (size_t i = 0; held && i < hash->elements; i += 2)
        if (hash->element[i]->type == REDIS_REPLY_STRING && hash->element[i]->len == 0 &&
            hash->element[i + 1]->type == REDIS_REPLY_STRING)
            kind = hash->element[i + 1]->str;
    e->waiters = waiters;
    e->fence = r[2]->type == REDIS_REPLY_STRING ? strtoull(r[2]->str, NULL, 10) : 0;
    e->age_ms = -1;
    e->lease_left_ms = -1;
    e->holder_count = 0;
    if (kind) {
        e->kind = kind[0] == 'p' ? DLOCK_MODE_SEMAPHORE : DLOCK_MODE_SHARED;
        e->permits = kind[0] == 'p' ? (unsigned)strtoul(kind + 1, NULL, 10) : 0;
        /* Members whose score (expiry) has passed are dead holders the
         * next script run sweeps out: not holders any more. */
        for (size_t i = 0; is_pair_array(set) && i < set->elements; i += 2) {
            int64_t left = reply_int(set->element[i + 1]) - now_ms;
            if (left <= 0 || set->element[i]->type != REDIS_REPLY_STRING)
                continue;
            if ((size_t)e->n_holders < cap)
                holders[e->n_holders++] = (dlock_list_holder){ set->element[i]->str, -1, "", 0, left, -1 };
            e->holder_count++;
            if (left > e->lease_left_ms)
                e->lease_left_ms = left;
        }
    } else if (held) {
        e->kind = DLOCK_MODE_EXCLUSIVE;
        e->lease_left_ms = reply_int(r[1]) >= 0 ? reply_int(r[1]) : -1;
        for (size_t i = 0; i < hash->elements; i += 2)
            if (hash->element[i]->type == REDIS_REPLY_STRING && e->n_holders < cap) {
                /* One owner: the core never asks for a hold it has. */
                holders[e->n_holders++] =
                    (dlock_list_holder){ hash->element[i]->str, -1, "", e->fence, e->lease_left_ms, -1 };
                e->holder_count++;
            }
    }
    e->holders = holders;
    return true;
}

/* ---- the page ------------------------------------------------------------------------ */

/* Commands of one pipeline, at most five arguments each. */
struct pipeline {
    int *argcs;
    const char ***argvs;
    const size_t **lenses;
    const char **args;
    size_t *lens;
    size_t used;
};

static void add(struct pipeline *p, int argc, const char *const *a)
{
    size_t c = p->used++;
    for (int j = 0; j < argc; j++) {
        p->args[5 * c + (size_t)j] = a[j];
        p->lens[5 * c + (size_t)j] = strlen(a[j]); /* keys have no NUL: names have none */
    }
    p->argcs[c] = argc;
    p->argvs[c] = &p->args[5 * c];
    p->lenses[c] = &p->lens[5 * c];
}

/* Emits those of batch[0..n) that are held or waited for, at most the
 * page's limit; *last is the index of the last one examined (or -1). */
static int emit_described(const struct found *batch, size_t n, redisReply **replies,
                          struct dlock_provider_list *req, long *last)
{
    const redisReply *t = replies[0];
    if (t->type != REDIS_REPLY_ARRAY || t->elements != 2)
        return dlock_seterr(DLOCK_EPROTOCOL, "redis: TIME did not answer the server's clock while listing locks");
    int64_t now_ms = reply_int(t->element[0]) * 1000 + reply_int(t->element[1]) / 1000;
    dlock_list_holder holders[REDIS_LIST_HOLDERS_MAX];
    size_t emitted = 0;
    for (size_t i = 0; i < n && emitted < req->limit; i++) {
        redisReply **r = &replies[1 + PER_NAME * i];
        for (int k = 0; k < PER_NAME; k++)
            if (r[k]->type == REDIS_REPLY_ERROR)
                return dlock_seterr(DLOCK_EPROTOCOL, "redis: listing the lock '%s' failed: %s", batch[i].name,
                                    r[k]->str);
        *last = (long)i;
        dlock_list_entry e = { .name = batch[i].name, .name_len = batch[i].name_len };
        if (!describe(r, now_ms, &e, holders, REDIS_LIST_HOLDERS_MAX))
            continue;
        emitted++;
        int rc = req->emit(&e, req->emit_arg);
        if (rc != DLOCK_OK)
            return rc;
    }
    return DLOCK_OK;
}

/* Reads the names of batch[0..n) in one pipeline and emits them. */
static int read_names(struct redis_pool *pool, const char *prefix, const struct found *batch, size_t n,
                      struct dlock_provider_list *req, long *last)
{
    size_t cmds = 1 + PER_NAME * n;
    struct pipeline p = { calloc(cmds, sizeof(int)), calloc(cmds, sizeof(const char **)),
                          calloc(cmds, sizeof(const size_t *)), calloc(5 * cmds, sizeof(const char *)),
                          calloc(5 * cmds, sizeof(size_t)), 0 };
    redisReply **replies = calloc(cmds, sizeof *replies);
    char **keys = calloc(4 * n, sizeof *keys);
    int rc = DLOCK_OK;
    if (!p.argcs || !p.argvs || !p.lenses || !p.args || !p.lens || !replies || !keys)
        rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory listing locks");
    static const char *const suffix[4] = { "", ":holders", ":timeouts", ":fence" };
    size_t unused;
    for (size_t i = 0; rc == DLOCK_OK && i < 4 * n; i++)
        if (!(keys[i] = redis_key_for(prefix, batch[i / 4].name, batch[i / 4].name_len, suffix[i % 4], &unused)))
            rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory listing locks");
    if (rc == DLOCK_OK) {
        add(&p, 1, (const char *[]){ "TIME" });
        for (size_t i = 0; i < n; i++) {
            char **k = &keys[4 * i];
            add(&p, 2, (const char *[]){ "HGETALL", k[0] });
            add(&p, 2, (const char *[]){ "PTTL", k[0] });
            add(&p, 2, (const char *[]){ "GET", k[3] });
            add(&p, 5, (const char *[]){ "ZRANGE", k[1], "0", "-1", "WITHSCORES" });
            add(&p, 5, (const char *[]){ "ZRANGE", k[2], "0", "-1", "WITHSCORES" });
        }
        rc = redis_pool_pipeline(pool, cmds, p.argcs, p.argvs, p.lenses, replies);
        if (rc == DLOCK_OK) {
            rc = emit_described(batch, n, replies, req, last);
            for (size_t i = 0; i < cmds; i++)
                freeReplyObject(replies[i]);
        }
    }
    for (size_t i = 0; keys && i < 4 * n; i++)
        free(keys[i]);
    free(keys);
    free(replies);
    free(p.argcs);
    free(p.argvs);
    free(p.lenses);
    free(p.args);
    free(p.lens);
    return rc;
}

int redis_list_page(struct redis_pool *pool, const char *prefix, struct dlock_provider_list *req)
{
    struct cursor cur;
    if (!parse_cursor(req->cursor ? req->cursor : "0", &cur))
        return dlock_seterr(DLOCK_EINVAL, "redis: '%s' is not a cursor of the redis backend's listing", req->cursor);
    size_t pat_len;
    char *pat = scan_pattern(prefix, req->prefix, req->prefix_len, &pat_len);
    if (!pat)
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory listing locks");
    const char *argv[6] = { "SCAN", cur.scan, "MATCH", pat, "COUNT", SCAN_COUNT };
    size_t lens[6] = { 4, strlen(cur.scan), 5, pat_len, 5, strlen(SCAN_COUNT) };
    int rc = DLOCK_OK;
    redisReply *scan = redis_pool_command(pool, 6, argv, lens, &rc);
    free(pat);
    if (!scan)
        return rc;
    if (scan->type != REDIS_REPLY_ARRAY || scan->elements != 2 || scan->element[0]->type != REDIS_REPLY_STRING ||
        scan->element[1]->type != REDIS_REPLY_ARRAY) {
        rc = dlock_seterr(DLOCK_EPROTOCOL, "redis: SCAN answered %s while listing locks",
                          scan->type == REDIS_REPLY_ERROR ? scan->str : "something else than a cursor and keys");
        freeReplyObject(scan);
        return rc;
    }
    const redisReply *keys = scan->element[1];
    struct found *batch = calloc(keys->elements ? keys->elements : 1, sizeof *batch);
    size_t n = 0;
    if (!batch)
        rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory listing locks");
    for (size_t i = 0; rc == DLOCK_OK && i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        if (k->type == REDIS_REPLY_STRING &&
            name_of_key(prefix, k->str, k->len, batch[n].name, &batch[n].name_len) &&
            batch[n].name_len >= req->prefix_len && memcmp(batch[n].name, req->prefix, req->prefix_len) == 0)
            n++;
    }
    if (rc == DLOCK_OK && n > 1)
        qsort(batch, n, sizeof *batch, by_name);
    size_t from = 0;
    while (cur.last_len && from < n && compare_name(&batch[from], cur.last, cur.last_len) <= 0)
        from++;
    long last = -1;
    if (rc == DLOCK_OK && from < n)
        rc = read_names(pool, prefix, batch + from, n - from, req, &last);
    if (rc == DLOCK_OK) {
        const char *next_scan = scan->element[0]->str;
        bool batch_done = last < 0 || from + (size_t)last + 1 == n;
        if (!batch_done)
            req->next_cursor = format_cursor(cur.scan, batch[from + (size_t)last].name,
                                             batch[from + (size_t)last].name_len);
        else if (strcmp(next_scan, "0") != 0)
            req->next_cursor = format_cursor(next_scan, "", 0);
        if ((!batch_done || strcmp(next_scan, "0") != 0) && !req->next_cursor)
            rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory listing locks");
    }
    free(batch);
    freeReplyObject(scan);
    return rc;
}
