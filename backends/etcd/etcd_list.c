/* backends/etcd/etcd_list.c - see etcd_list.h.
 *
 * A page is three steps, each one bounded request or a bounded few:
 *
 * 1. One /v3/kv/range, keys only, sorted by key, of at most PAGE_KEYS keys
 *    from the cursor to the end of the listed prefix. It only finds names:
 *    a name's contender keys all start with "<prefix><escaped name>/" and
 *    no other key does (an escaped name has no '/'), so they lie together
 *    in key order, and the name ends where the range moves on to another.
 *    The semaphores' "#permits" keys and keys this backend does not make
 *    are skipped.
 * 2. One /v3/kv/txn of read-only ranges, in one snapshot: per name found
 *    (at most the page's limit, at most NAMES_MAX), its directory sorted
 *    by create revision (its line: who holds follows from it, as a grant
 *    decides, queue_list.h), and for a semaphore its "#permits" key.
 * 3. One /v3/lease/timetolive per distinct lease of a holder (at most
 *    LEASES_MAX): what is left of it. Its TTL is whole seconds, rounded
 *    down by the server, so what is reported is at most 999 ms short.
 *
 * A name is read whole in step 2 whatever step 1 saw of it, so one that
 * straddles step 1's limit is still reported once, and whole. The next
 * page starts just after the last name the page read ("<escaped name>0",
 * '/' + 1); the cursor is that key, after the instance's prefix, in hex.
 *
 * Age is -1: etcd keeps a key's create revision, not its creation time,
 * and its revisions are no clock.
 *
 * An operator's break reads one name's line the same way (step 2 for one
 * name) and deletes its holders' keys in one txn that first compares each
 * key's mod revision with the one read: a holder that changed in between
 * (made again, or made shared by a downgrade) fails the compare, and
 * nothing is half-done. A status reads one name's line the same way too.
 *
 * An exclusive key whose value carries the shared mark is a hold made
 * shared by a downgrade (etcd_keys.h): it is listed as the shared holder it
 * is, with its create revision as its fence, as every key. */
#include "config.h"

#include "etcd_list.h"
#include "../common/cursor.h"
#include "etcd_keys.h"
#include "../common/lock_kind.h"
#include "../common/name_escape.h"
#include "../common/queue_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_KEYS 512       /* keys step 1 reads */
#define NAMES_MAX 50        /* names one page reads: two ranges each, within etcd's 128 ops per txn */
#define NAME_KEYS 1000      /* contenders of one name step 2 reads */
#define LEASES_MAX 32       /* leases one page asks about */
#define HOLDERS_MAX 256     /* holders of one entry described */
#define KEY_MAX 2048
#define OWNER_MAX 128

struct found_name {
    char name[DLOCK_NAME_MAX + 1];
    size_t name_len;
    bool permits;           /* a permit key was seen: read its N */
};

struct lease_left {
    int64_t id, left_ms;
};

struct page {
    struct etcd_http *http;
    const char *prefix;
    size_t prefix_len;
    struct found_name *names;
    size_t n_names;
    bool more;              /* step 1 stopped at its limit */
    char last_key[KEY_MAX]; /* the last key step 1 read, after the prefix */
    size_t last_key_len;
    struct json_object *txn_reply;
    struct lease_left leases[LEASES_MAX];
    size_t n_leases;
};

/* ---- cursor and range bounds ------------------------------------------------------------ */

/* The end of the range of keys starting with key[0..len): the shortest key
 * after all of them, or "\0" (to the end of the keyspace) when there is
 * none. */
static size_t prefix_end(const char *key, size_t len, char *out)
{
    memcpy(out, key, len);
    while (len > 0 && (unsigned char)out[len - 1] == 0xff)
        len--;
    if (len == 0) {
        out[0] = 0;
        return 1;
    }
    out[len - 1]++;
    return len;
}

/* {"key": from, "range_end": to} */
static struct json_object *range_of(const char *from, size_t from_len, const char *to, size_t to_len)
{
    struct json_object *r = json_object_new_object();
    json_object_object_add(r, "key", etcd_json_b64(from, from_len));
    if (to)
        json_object_object_add(r, "range_end", etcd_json_b64(to, to_len));
    return r;
}

/* ---- step 1: the names ------------------------------------------------------------------ */

/* The name of a contender key "<prefix><escaped name>/<member>" (key
 * without the prefix), and whether it is a permit; false for any other
 * key. */
static bool name_of_key(const char *key, size_t len, struct found_name *out, bool *permit)
{
    const char *slash = memchr(key, '/', len);
    if (!slash || !name_unescape(key, (size_t)(slash - key), etcd_name_plain, out->name, &out->name_len))
        return false;
    size_t rest = len - (size_t)(slash + 1 - key);
    *permit = rest >= strlen(ETCD_PERMIT_MARK) && memcmp(slash + 1, ETCD_PERMIT_MARK, strlen(ETCD_PERMIT_MARK)) == 0;
    return true;
}

static int find_names(struct page *pg, const char *from, size_t from_len, const char *to, size_t to_len,
                      const struct dlock_provider_list *req)
{
    struct json_object *r = range_of(from, from_len, to, to_len), *reply = NULL;
    json_object_object_add(r, "limit", etcd_json_int_str(PAGE_KEYS));
    json_object_object_add(r, "keys_only", json_object_new_boolean(1));
    int rc = etcd_call(pg->http, "/v3/kv/range", r, &reply, NULL);
    json_object_put(r);
    if (rc != DLOCK_OK)
        return rc;
    struct json_object *kvs = etcd_json_get(reply, "kvs"), *more = etcd_json_get(reply, "more");
    size_t n = kvs && json_object_is_type(kvs, json_type_array) ? json_object_array_length(kvs) : 0;
    pg->more = more && json_object_get_boolean(more);
    size_t cap = req->limit < NAMES_MAX ? req->limit : NAMES_MAX;
    for (size_t i = 0; i < n; i++) {
        char key[KEY_MAX];
        int len = etcd_json_unb64(json_object_array_get_idx(kvs, i), "key", key, sizeof key);
        if (len < (int)pg->prefix_len || memcmp(key, pg->prefix, pg->prefix_len) != 0)
            continue;
        const char *own = key + pg->prefix_len;
        size_t own_len = (size_t)len - pg->prefix_len;
        struct found_name f;
        bool permit;
        if (!name_of_key(own, own_len, &f, &permit) || f.name_len < req->prefix_len ||
            memcmp(f.name, req->prefix, req->prefix_len) != 0)
            continue;
        struct found_name *last = pg->n_names ? &pg->names[pg->n_names - 1] : NULL;
        if (last && last->name_len == f.name_len && memcmp(last->name, f.name, f.name_len) == 0) {
            last->permits |= permit;
            continue;
        }
        if (pg->n_names == cap) {
            pg->more = true; /* names left for the next page */
            break;
        }
        f.permits = permit;
        pg->names[pg->n_names++] = f;
        memcpy(pg->last_key, own, own_len);
        pg->last_key_len = own_len;
    }
    if (pg->n_names == 0 && n > 0 && pg->more) {
        /* Only keys that are no contenders' (semaphores' N): go on after
         * the last one. */
        int len = etcd_json_unb64(json_object_array_get_idx(kvs, n - 1), "key", pg->last_key, sizeof pg->last_key - 1);
        if (len >= (int)pg->prefix_len) {
            memmove(pg->last_key, pg->last_key + pg->prefix_len, (size_t)len - pg->prefix_len);
            pg->last_key_len = (size_t)len - pg->prefix_len;
            pg->last_key[pg->last_key_len++] = 0; /* the next key after it */
        }
    }
    json_object_put(reply);
    return DLOCK_OK;
}

/* ---- step 2: each name's line ----------------------------------------------------------- */

/* "<prefix><escaped name>" into out; its length. */
static size_t name_key(const struct page *pg, const struct found_name *f, char *out)
{
    memcpy(out, pg->prefix, pg->prefix_len);
    return pg->prefix_len + name_escape(f->name, f->name_len, etcd_name_plain, out + pg->prefix_len);
}

static struct json_object *range_op(struct json_object *r)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "request_range", r);
    return o;
}

static int read_lines(struct page *pg)
{
    struct json_object *success = json_object_new_array();
    for (size_t i = 0; i < pg->n_names; i++) {
        char dir[KEY_MAX], end[KEY_MAX];
        size_t n = name_key(pg, &pg->names[i], dir);
        dir[n++] = '/';
        struct json_object *r = range_of(dir, n, end, prefix_end(dir, n, end));
        json_object_object_add(r, "sort_order", json_object_new_string("ASCEND"));
        json_object_object_add(r, "sort_target", json_object_new_string("CREATE"));
        json_object_object_add(r, "limit", etcd_json_int_str(NAME_KEYS));
        json_object_array_add(success, range_op(r));
        if (pg->names[i].permits) {
            n--;
            memcpy(dir + n, ETCD_PERMITS_SUFFIX, strlen(ETCD_PERMITS_SUFFIX));
            json_object_array_add(success, range_op(range_of(dir, n + strlen(ETCD_PERMITS_SUFFIX), NULL, 0)));
        }
    }
    struct json_object *txn = json_object_new_object();
    json_object_object_add(txn, "success", success);
    int rc = etcd_call(pg->http, "/v3/kv/txn", txn, &pg->txn_reply, NULL);
    json_object_put(txn);
    return rc;
}

static struct json_object *txn_range(const struct page *pg, size_t op)
{
    struct json_object *responses = etcd_json_get(pg->txn_reply, "responses");
    if (!responses || !json_object_is_type(responses, json_type_array) || json_object_array_length(responses) <= op)
        return NULL;
    return etcd_json_get(json_object_array_get_idx(responses, op), "response_range");
}

static struct json_object *kvs_of(struct json_object *range, size_t *n)
{
    struct json_object *kvs = etcd_json_get(range, "kvs");
    *n = kvs && json_object_is_type(kvs, json_type_array) ? json_object_array_length(kvs) : 0;
    return kvs;
}

/* A semaphore's N from the read of its "#permits" key; 0 without one. */
static unsigned permits_in(struct json_object *range)
{
    size_t m;
    struct json_object *kvs = kvs_of(range, &m);
    char value[16];
    int vlen = m ? etcd_json_unb64(json_object_array_get_idx(kvs, 0), "value", value, sizeof value - 1) : -1;
    value[vlen > 0 ? vlen : 0] = 0;
    return (unsigned)strtoul(value, NULL, 10);
}

/* A name's line from its range: q[] (room for NAME_KEYS) in arrival order,
 * owners[] holding their owners. Returns the number of contenders read;
 * *total gets how many the name has. */
static size_t line_of(struct json_object *range, size_t prefix_len, struct queued_contender *q, char (*owners)[OWNER_MAX],
                      unsigned permits, int64_t *total)
{
    size_t n;
    struct json_object *kvs = kvs_of(range, &n);
    *total = etcd_json_int(range, "count");
    for (size_t i = 0; i < n && i < NAME_KEYS; i++) {
        struct json_object *kv = json_object_array_get_idx(kvs, i);
        char key[KEY_MAX];
        int klen = etcd_json_unb64(kv, "key", key, sizeof key);
        const char *slash = klen > (int)prefix_len ? memchr(key + prefix_len, '/', (size_t)klen - prefix_len) : NULL;
        const char *member = slash ? slash + 1 : "";
        size_t mlen = slash ? (size_t)(key + klen - member) : 0;
        unsigned mode = DLOCK_MODE_EXCLUSIVE;
        if (mlen >= 3 && memcmp(member, ETCD_SHARED_MARK, 3) == 0)
            mode = DLOCK_MODE_SHARED;
        else if (mlen >= 3 && memcmp(member, ETCD_PERMIT_MARK, 3) == 0)
            mode = DLOCK_MODE_SEMAPHORE;
        int olen = etcd_json_unb64(kv, "value", owners[i], OWNER_MAX - 1);
        owners[i][olen > 0 ? olen : 0] = 0;
        if (mode == DLOCK_MODE_EXCLUSIVE && etcd_value_made_shared(owners[i], olen)) {
            /* A hold made shared by a downgrade: its owner follows the mark. */
            mode = DLOCK_MODE_SHARED;
            size_t mark = strlen(ETCD_SHARED_MARK);
            memmove(owners[i], owners[i] + mark, (size_t)olen - mark + 1);
        }
        /* In line by its create revision, which is also its fence (a hold
         * made shared by a downgrade keeps both). */
        int64_t rev = etcd_json_int(kv, "create_revision");
        q[i] = (struct queued_contender){ mode, rev, false, { owners[i], -1, "", (uint64_t)rev, -1, -1 }, kv };
    }
    n = n < NAME_KEYS ? n : NAME_KEYS;
    queue_decide(q, n, permits);
    return n;
}

/* ---- step 3: leases --------------------------------------------------------------------- */

/* Asks how long lease id has left, once per page; -1 when there is no
 * lease or the page has asked about LEASES_MAX already. */
static int lease_left(struct page *pg, int64_t id, int64_t *left)
{
    *left = -1;
    if (id == 0)
        return DLOCK_OK;
    for (size_t i = 0; i < pg->n_leases; i++)
        if (pg->leases[i].id == id) {
            *left = pg->leases[i].left_ms;
            return DLOCK_OK;
        }
    if (pg->n_leases == LEASES_MAX)
        return DLOCK_OK;
    struct json_object *body = json_object_new_object(), *reply = NULL;
    json_object_object_add(body, "ID", etcd_json_int_str(id));
    int rc = etcd_call(pg->http, "/v3/lease/timetolive", body, &reply, NULL);
    json_object_put(body);
    if (rc != DLOCK_OK)
        return rc;
    int64_t ttl = etcd_json_int(reply, "TTL");
    json_object_put(reply);
    /* -1: expired since the range was read; its keys go with it. */
    *left = ttl > 0 ? ttl * 1000 : 0;
    pg->leases[pg->n_leases++] = (struct lease_left){ id, *left };
    return DLOCK_OK;
}

/* ---- the page ------------------------------------------------------------------------- */

static int emit_names(struct page *pg, struct dlock_provider_list *req)
{
    struct queued_contender *q = malloc(NAME_KEYS * sizeof *q);
    char (*owners)[OWNER_MAX] = malloc(NAME_KEYS * sizeof *owners);
    dlock_list_holder *holders = malloc(HOLDERS_MAX * sizeof *holders);
    int rc = q && owners && holders ? DLOCK_OK : dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory listing locks");
    size_t op = 0;
    for (size_t i = 0; rc == DLOCK_OK && i < pg->n_names; i++) {
        const struct found_name *f = &pg->names[i];
        struct json_object *range = txn_range(pg, op++);
        unsigned permits = f->permits ? permits_in(txn_range(pg, op++)) : 0;
        if (!range) {
            rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: the read of lock '%s' while listing answered no range",
                              pg->http->label, f->name);
            break;
        }
        int64_t total;
        size_t n = line_of(range, pg->prefix_len, q, owners, permits, &total);
        if (n == 0)
            continue; /* let go of since step 1 */
        for (size_t k = 0; rc == DLOCK_OK && k < n; k++)
            if (q[k].holds)
                rc = lease_left(pg, etcd_json_int((struct json_object *)q[k].ref, "lease"),
                                &q[k].holder.lease_left_ms);
        if (rc != DLOCK_OK)
            break;
        dlock_list_entry e = { .name = f->name, .name_len = f->name_len };
        queue_entry(q, n, permits, &e, holders, HOLDERS_MAX);
        if ((size_t)total > n) {
            /* The line goes on past what was read: behind a holder that
             * was read last, more may hold. */
            if (q[n - 1].holds)
                e.holder_count = e.waiters = -1;
            else
                e.waiters += total - (int64_t)n;
        }
        rc = req->emit(&e, req->emit_arg);
    }
    free(q);
    free(owners);
    free(holders);
    return rc;
}

int etcd_list_page(struct etcd_http *http, const char *prefix, struct dlock_provider_list *req)
{
    struct page pg = { .http = http, .prefix = prefix, .prefix_len = strlen(prefix) };
    char from[KEY_MAX], to[KEY_MAX];
    memcpy(from, prefix, pg.prefix_len);
    size_t from_len =
        pg.prefix_len + name_escape(req->prefix, req->prefix_len, etcd_name_plain, from + pg.prefix_len);
    size_t to_len = prefix_end(from, from_len, to);
    if (req->cursor) {
        char key[KEY_MAX];
        size_t len;
        if (!cursor_decode(req->cursor, key, KEY_MAX, &len) || pg.prefix_len + len > sizeof from)
            return dlock_seterr(DLOCK_EINVAL, "etcd: '%s' is not a cursor of the etcd backend's listing",
                                req->cursor);
        /* A cursor before the listed names (from another listing) starts
         * at their first. */
        char start[KEY_MAX];
        memcpy(start, prefix, pg.prefix_len);
        memcpy(start + pg.prefix_len, key, len);
        size_t slen = pg.prefix_len + len, m = slen < from_len ? slen : from_len;
        int c = memcmp(start, from, m);
        if (c > 0 || (c == 0 && slen > from_len)) {
            memcpy(from, start, slen);
            from_len = slen;
        }
    }
    if (from_len == 0)
        from[from_len++] = 0; /* no prefix at all: from the first key */
    pg.names = malloc(NAMES_MAX * sizeof *pg.names);
    if (!pg.names)
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory listing locks");
    int rc = find_names(&pg, from, from_len, to, to_len, req);
    if (rc == DLOCK_OK && pg.n_names)
        rc = read_lines(&pg);
    if (rc == DLOCK_OK && pg.n_names)
        rc = emit_names(&pg, req);
    if (rc == DLOCK_OK && pg.more && pg.last_key_len) {
        if (pg.n_names) {
            /* After the last name read: its directory's end. */
            char *slash = memchr(pg.last_key, '/', pg.last_key_len);
            pg.last_key_len = (size_t)(slash - pg.last_key) + 1;
            pg.last_key[pg.last_key_len - 1] = '/' + 1;
        }
        if (!(req->next_cursor = cursor_encode(pg.last_key, pg.last_key_len)))
            rc = dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory listing locks");
    }
    if (pg.txn_reply)
        json_object_put(pg.txn_reply);
    free(pg.names);
    return rc;
}

/* ---- one name: a break, a status ------------------------------------------------------ */

/* One name's line, read and decided as a page's step 2 does it: q[] (whose
 * refs point into pg's reply) and owners[] until one_line_free(). */
struct one_line {
    struct found_name name;
    struct page pg;
    struct queued_contender *q;
    char (*owners)[OWNER_MAX];
    size_t n;           /* contenders read (at most NAME_KEYS) */
    unsigned permits;   /* a semaphore's N, else 0 */
    int64_t total;      /* contenders the name has */
};

static int read_one_line(struct etcd_http *http, const char *prefix, const char *name, size_t name_len,
                         struct one_line *l, const char *doing)
{
    memset(l, 0, sizeof *l);
    l->name.name_len = name_len;
    l->name.permits = true; /* whether it is a semaphore is not known yet: read its N too */
    memcpy(l->name.name, name, name_len);
    l->pg = (struct page){ .http = http, .prefix = prefix, .prefix_len = strlen(prefix), .names = &l->name,
                           .n_names = 1 };
    l->q = malloc(NAME_KEYS * sizeof *l->q);
    l->owners = malloc(NAME_KEYS * sizeof *l->owners);
    int rc = l->q && l->owners ? read_lines(&l->pg) : dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory %s", doing);
    struct json_object *range = rc == DLOCK_OK ? txn_range(&l->pg, 0) : NULL;
    if (rc == DLOCK_OK && !range)
        rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: the read of lock '%s' answered no range", http->label, l->name.name);
    if (rc == DLOCK_OK) {
        l->permits = permits_in(txn_range(&l->pg, 1));
        l->n = line_of(range, l->pg.prefix_len, l->q, l->owners, l->permits, &l->total);
    }
    return rc;
}

static void one_line_free(struct one_line *l)
{
    if (l->pg.txn_reply)
        json_object_put(l->pg.txn_reply);
    free(l->q);
    free(l->owners);
}

/* The txn deleting the holders among q[0..n) of the line read, each only if
 * its key is still as read (same mod revision: neither made again nor made
 * shared since, which would have let readers in beside it). */
static struct json_object *delete_holders_txn(const struct queued_contender *q, size_t n)
{
    struct json_object *compare = json_object_new_array(), *success = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        if (!q[i].holds)
            continue;
        struct json_object *kv = (struct json_object *)q[i].ref, *key = etcd_json_get(kv, "key");
        struct json_object *c = json_object_new_object();
        json_object_object_add(c, "key", json_object_get(key));
        json_object_object_add(c, "target", json_object_new_string("MOD"));
        json_object_object_add(c, "result", json_object_new_string("EQUAL"));
        json_object_object_add(c, "mod_revision", etcd_json_int_str(etcd_json_int(kv, "mod_revision")));
        json_object_array_add(compare, c);
        struct json_object *d = json_object_new_object(), *op = json_object_new_object();
        json_object_object_add(d, "key", json_object_get(key));
        json_object_object_add(op, "request_delete_range", d);
        json_object_array_add(success, op);
    }
    struct json_object *txn = json_object_new_object();
    json_object_object_add(txn, "compare", compare);
    json_object_object_add(txn, "success", success);
    return txn;
}

int etcd_break_holders(struct etcd_http *http, const char *prefix, const char *name, size_t name_len, int *broken,
                       uint64_t *fence)
{
    *broken = 0;
    *fence = 0;
    struct one_line l;
    int rc = read_one_line(http, prefix, name, name_len, &l, "breaking a hold");
    size_t holding = 0;
    for (size_t i = 0; rc == DLOCK_OK && i < l.n; i++)
        holding += l.q[i].holds;
    if (holding > 0) {
        struct json_object *txn = delete_holders_txn(l.q, l.n), *reply = NULL;
        rc = etcd_call(http, "/v3/kv/txn", txn, &reply, NULL);
        json_object_put(txn);
        if (rc == DLOCK_OK && !json_object_get_boolean(etcd_json_get(reply, "succeeded")))
            rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: the holders of '%s' changed while it was being broken; "
                              "run it again", http->label, l.name.name);
        else if (rc == DLOCK_OK)
            *broken = 1;
        if (reply)
            json_object_put(reply);
    }
    one_line_free(&l);
    return rc;
}

int etcd_name_status(struct etcd_http *http, const char *prefix, const char *name, size_t name_len,
                     dlock_status_info *out)
{
    out->held = 0; /* the rest arrives preset (provider.h) */
    struct one_line l;
    int rc = read_one_line(http, prefix, name, name_len, &l, "reading a lock's status");
    if (rc == DLOCK_OK && l.n > 0) {
        dlock_list_entry e = { .name = name, .name_len = name_len };
        dlock_list_holder first;
        queue_entry(l.q, l.n, l.permits, &e, &first, 1);
        out->held = e.holder_count > 0;
        out->fence = e.fence;
        char who[sizeof out->holder];
        if (e.holder_count == 0)
            snprintf(who, sizeof who, "nobody");
        else if (e.kind == DLOCK_MODE_EXCLUSIVE)
            snprintf(who, sizeof who, "%s", first.owner);
        else
            kind_holders_text(who, sizeof who, e.holder_count, e.permits);
        if ((size_t)l.total > l.n && l.q[l.n - 1].holds) /* the line goes on past what was read, holding */
            snprintf(out->holder, sizeof out->holder, "at least %s (waiters not counted)", who);
        else
            snprintf(out->holder, sizeof out->holder, "%s (%lld waiting)", who,
                     (long long)(e.waiters + l.total - (int64_t)l.n));
    }
    one_line_free(&l);
    return rc;
}
