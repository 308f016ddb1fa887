/* backends/etcd/etcd.c - the etcd backend: mutual exclusion on etcd's v3
 * API through its JSON gateway, as etcd's own clientv3/concurrency.Mutex
 * does it on the client side. (The server-side /v3/lock of etcd 3.4 grants
 * without checking that the lease is still alive; it is not used.)
 *
 * Each waiter and the holder of a name own one key,
 *   <prefix><escaped name>/<owner>
 * created on the client's lease (one lease per lease length, shared by
 * every hold of that length). The key with the lowest create_revision holds
 * the lock; the others wait, each for the deletion of the key just before
 * its own (no herd), and look again when it goes (an event is never a
 * grant). create_revision is the fence: cluster-wide, strictly increasing,
 * linearizable across leader changes. A release deletes our key only if its
 * create_revision is still ours, so a resent release cannot delete a newer
 * hold. The watchdog keeps a lease alive with one keepalive request for all
 * the holds on it, and checks their keys with one more: the lease's list of
 * the keys attached to it.
 *
 * Shared holds and semaphores (provider version 2) queue in the same line.
 * Their keys carry their kind after the name's directory ("~s~" shared,
 * "~p~" a permit; an exclusive key starts with the owner's hex id, so every
 * exclusive key of a name sorts before "<dir>~", the permit keys after
 * them and the shared keys last, so one range finds the keys that keep a
 * reader out). A name is a lock or a semaphore, never both at once: a
 * shared request holds when no exclusive or permit key is older than its
 * own, and waits for the deletion of the youngest such key before it; an
 * exclusive request holds when its key is the oldest of all (so a waiting
 * writer keeps every later reader and permit out); a permit request holds
 * when its key is among the N oldest with only permit keys before it, and
 * waits for any deletion in the name (a permit may come back from any
 * holder). A semaphore's N is kept in a key beside
 * the directory, "<prefix><escaped name>#permits", made by the first
 * request; a request with another N is refused.
 *
 * A downgrade (provider version 4) makes an exclusive hold shared in one
 * txn that puts its key again, on the same lease, with its value marked
 * shared (etcd_keys.h): the key keeps its create revision, so the hold
 * keeps its place and its fence, and every waiter behind it keeps its own.
 * A shared request skips that key when it looks for an older writer, and
 * a reader waiting on it wakes on the put (a watch on one key sees puts
 * as well as deletions) and looks again; a writer waiting on it looks
 * again and goes on waiting, as it is not the oldest key.
 *
 * The listing (etcd_list.c) reads the same layout back: names from the
 * keys, holders and waiters from each name's line.
 *
 * Lease TTLs are whole seconds: a lease of lease_ms asks for
 * ceil(lease_ms / 1000) s, at least what the core counts validity by. */
#include "config.h"

#include "etcd_http.h"
#include "etcd_keys.h"
#include "etcd_list.h"
#include "etcd_orphans.h"
#include "etcd_watch.h"
#include "../common/name_escape.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEASES 16
#define KEY_MAX 2048

struct etcd_lease {
    int64_t ttl_s;      /* the TTL asked for */
    int64_t id;         /* 0: none (granted on the next acquire) */
    int64_t alive_until; /* dlock_provider_stamp_ms() before the last grant or
                          * keepalive that answered, plus the TTL it gave */
};

struct etcd_instance {
    struct etcd_http http;
    char prefix[128];
    pthread_mutex_t lease_mu;   /* leases */
    struct etcd_lease leases[MAX_LEASES];
    struct etcd_orphans orphans; /* our keys that a delete could not reach */
    void *log_handle;
};

struct etcd_lock {
    char *dir;                  /* <prefix><escaped name>/ */
    size_t dir_len;
    char *key;                  /* dir + owner */
    size_t key_len;
    char *key_b64;              /* key in base64, as the lease's key list has it */
    char owner[64];             /* the owner the key was made for */
    int64_t create_rev;         /* our key's create_revision, 0 when we have none */
    int64_t granted_rev;        /* the create_revision a grant was made on, until released */
    int64_t lease_id;           /* the lease our key is on */
    char *pred;                 /* while busy: the key just before ours */
    size_t pred_len;
    bool wait_any;              /* while busy (a permit): wait for any deletion in the name */
    bool permits_checked;       /* a semaphore: its N matches the name's */
    bool queue_unanswered;      /* our last queueing got no answer: our key may exist unknown to us */
    bool make_key_anew;         /* our key was an orphan we adopted: delete it and make a new one */
    bool key_unsettled;         /* the last queueing failed after an adoption, or got no answer */
    bool sweep_in_the_way;      /* busy because a sweep deletes our old key: wait a moment */
    int64_t watch_from;         /* the revision to watch pred from */
};

static const struct dlock_setting_spec etcd_settings[] = {
    { "endpoints", DLOCK_SETTING_STRING_LIST, 0, 0 },
    { "prefix", DLOCK_SETTING_STRING, 0, 0 },
    { "connect_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "command_timeout_ms", DLOCK_SETTING_INT, 1, 600000 },
    { "username", DLOCK_SETTING_STRING, 0, 0 },
    { "password", DLOCK_SETTING_STRING, 0, 0 },
    { "cacert", DLOCK_SETTING_STRING, 0, 0 },
    { "cert", DLOCK_SETTING_STRING, 0, 0 },
    { "key", DLOCK_SETTING_STRING, 0, 0 },
    { NULL, 0, 0, 0 },
};

/* ---- keys ---------------------------------------------------------------------------- */

/* Builds (or rebuilds, when the contending thread changed) lk's keys. */
static int ensure_keys(struct etcd_instance *inst, struct dlock_provider_lock *lk)
{
    struct etcd_lock *el = lk->priv;
    if (el->key && strcmp(el->owner, lk->owner) == 0)
        return DLOCK_OK;
    if (!el->dir) {
        size_t plen = strlen(inst->prefix);
        el->dir = malloc(plen + 3 * lk->name_len + 2);
        if (!el->dir)
            return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
        memcpy(el->dir, inst->prefix, plen);
        el->dir_len = plen + dlock_name_escape(lk->name, lk->name_len, etcd_name_plain, el->dir + plen);
        el->dir[el->dir_len++] = '/';
        el->dir[el->dir_len] = 0;
    }
    free(el->key);
    const char *kind = lk->mode == DLOCK_MODE_SHARED      ? ETCD_SHARED_MARK
                       : lk->mode == DLOCK_MODE_SEMAPHORE ? ETCD_PERMIT_MARK
                                                          : "";
    size_t olen = strlen(lk->owner), klen = strlen(kind);
    el->key = malloc(el->dir_len + klen + olen + 1);
    if (!el->key)
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
    memcpy(el->key, el->dir, el->dir_len);
    memcpy(el->key + el->dir_len, kind, klen);
    memcpy(el->key + el->dir_len + klen, lk->owner, olen + 1);
    el->key_len = el->dir_len + klen + olen;
    free(el->key_b64);
    if (!(el->key_b64 = etcd_b64(el->key, el->key_len)))
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
    snprintf(el->owner, sizeof el->owner, "%s", lk->owner);
    el->create_rev = 0;
    return DLOCK_OK;
}

/* {"key": dir, "range_end": dir with its last byte + 1}: every key of a name. */
static struct json_object *dir_range(const struct etcd_lock *el)
{
    struct json_object *r = json_object_new_object();
    json_object_object_add(r, "key", etcd_json_b64(el->dir, el->dir_len));
    char end[KEY_MAX];
    size_t n = el->dir_len < sizeof end ? el->dir_len : sizeof end - 1;
    memcpy(end, el->dir, n);
    end[n - 1]++; /* '/' + 1 = '0' */
    json_object_object_add(r, "range_end", etcd_json_b64(end, n));
    return r;
}

/* {"key": dir, "range_end": dir + "~s"}: the name's keys that keep a
 * shared request out, its exclusive keys and its permit keys (ETCD_PERMIT_MARK
 * sorts before ETCD_SHARED_MARK, and every exclusive key before both). */
static struct json_object *reader_blocking_range(const struct etcd_lock *el)
{
    struct json_object *r = json_object_new_object();
    json_object_object_add(r, "key", etcd_json_b64(el->dir, el->dir_len));
    char end[KEY_MAX];
    size_t n = el->dir_len < sizeof end - 2 ? el->dir_len : sizeof end - 3;
    memcpy(end, el->dir, n);
    end[n++] = ETCD_SHARED_MARK[0];
    end[n++] = ETCD_SHARED_MARK[1];
    json_object_object_add(r, "range_end", etcd_json_b64(end, n));
    return r;
}

/* What decides a grant, read in the same txn as the queueing: the oldest
 * key (exclusive), the N oldest keys (a permit), the two oldest keys that
 * keep a reader out, with their values (shared: the first may be a hold
 * made shared, the oldest key of the name and the only one so made, and
 * then the second is the oldest writer or permit). */
static struct json_object *deciding_range(const struct dlock_provider_lock *lk, const struct etcd_lock *el)
{
    bool shared = lk->mode == DLOCK_MODE_SHARED;
    struct json_object *r = shared ? reader_blocking_range(el) : dir_range(el);
    json_object_object_add(r, "sort_order", json_object_new_string("ASCEND"));
    json_object_object_add(r, "sort_target", json_object_new_string("CREATE"));
    json_object_object_add(r, "limit",
                           etcd_json_int_str(lk->mode == DLOCK_MODE_SEMAPHORE ? lk->permits : shared ? 2 : 1));
    if (!shared)
        json_object_object_add(r, "keys_only", json_object_new_boolean(1));
    return r;
}

static struct json_object *op(const char *kind, struct json_object *request)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, kind, request);
    return o;
}

/* Sends the txn of compare, success and failure (all taken). */
static int send_txn(struct etcd_instance *inst, struct json_object *compare, struct json_object *success,
                    struct json_object *failure, struct json_object **reply, struct etcd_status *st)
{
    struct json_object *txn = json_object_new_object();
    json_object_object_add(txn, "compare", compare);
    json_object_object_add(txn, "success", success);
    json_object_object_add(txn, "failure", failure);
    int rc = etcd_call(&inst->http, "/v3/kv/txn", txn, reply, st);
    json_object_put(txn);
    return rc;
}

/* ---- leases ------------------------------------------------------------------------- */

/* A lease request whose body is one integer field ({"TTL": n}, {"ID": n}). */
static int lease_call(struct etcd_instance *inst, const char *path, const char *field, int64_t value,
                      struct json_object **reply)
{
    struct json_object *req = json_object_new_object();
    json_object_object_add(req, field, etcd_json_int_str(value));
    int rc = etcd_call(&inst->http, path, req, reply, NULL);
    json_object_put(req);
    return rc;
}

/* The lease for holds of lease_ms, granted now if there is none. */
static int lease_for(struct etcd_instance *inst, int64_t lease_ms, int64_t *id)
{
    int64_t ttl = (lease_ms + 999) / 1000;
    pthread_mutex_lock(&inst->lease_mu);
    int slot = -1;
    for (int i = 0; i < MAX_LEASES; i++) {
        if (inst->leases[i].id && inst->leases[i].ttl_s == ttl) {
            *id = inst->leases[i].id;
            pthread_mutex_unlock(&inst->lease_mu);
            return DLOCK_OK;
        }
        if (slot < 0 && !inst->leases[i].id)
            slot = i;
    }
    pthread_mutex_unlock(&inst->lease_mu);
    if (slot < 0)
        return dlock_seterr(DLOCK_ENOTSUP, "etcd: more than %d different lease lengths in one client", MAX_LEASES);
    struct json_object *reply = NULL;
    int64_t sent = dlock_provider_stamp_ms();
    int rc = lease_call(inst, "/v3/lease/grant", "TTL", ttl, &reply);
    if (rc != DLOCK_OK)
        return rc;
    int64_t got = etcd_json_int(reply, "ID");
    int64_t granted_ttl = etcd_json_int(reply, "TTL");
    json_object_put(reply);
    if (!got)
        return dlock_seterr(DLOCK_EPROTOCOL, "%s: a lease grant without an ID", inst->http.label);
    pthread_mutex_lock(&inst->lease_mu);
    /* Another thread may have granted one meanwhile: keep the first. */
    for (int i = 0; i < MAX_LEASES; i++) {
        if (inst->leases[i].id && inst->leases[i].ttl_s == ttl) {
            *id = inst->leases[i].id;
            pthread_mutex_unlock(&inst->lease_mu);
            return DLOCK_OK; /* ours expires unused */
        }
    }
    for (int i = 0; i < MAX_LEASES; i++) {
        if (!inst->leases[i].id) {
            inst->leases[i].id = got;
            inst->leases[i].ttl_s = ttl;
            inst->leases[i].alive_until = sent + granted_ttl * 1000;
            break;
        }
    }
    pthread_mutex_unlock(&inst->lease_mu);
    *id = got;
    return DLOCK_OK;
}

/* What is left of lease id by the last answer that refreshed it (0 when
 * it is not ours or nothing is left). */
static int64_t lease_left_ms(struct etcd_instance *inst, int64_t id)
{
    int64_t left = 0;
    pthread_mutex_lock(&inst->lease_mu);
    for (int i = 0; i < MAX_LEASES; i++)
        if (inst->leases[i].id == id)
            left = inst->leases[i].alive_until - dlock_provider_stamp_ms();
    pthread_mutex_unlock(&inst->lease_mu);
    return left > 0 ? left : 0;
}

/* A keepalive sent at stamp `sent` answered with ttl_s. */
static void lease_refreshed(struct etcd_instance *inst, int64_t id, int64_t sent, int64_t ttl_s)
{
    pthread_mutex_lock(&inst->lease_mu);
    for (int i = 0; i < MAX_LEASES; i++)
        if (inst->leases[i].id == id && sent + ttl_s * 1000 > inst->leases[i].alive_until)
            inst->leases[i].alive_until = sent + ttl_s * 1000;
    pthread_mutex_unlock(&inst->lease_mu);
}

/* The lease is gone on the server (expired or revoked): forget it, so the
 * next acquire grants a new one. */
static void forget_lease(struct etcd_instance *inst, int64_t id)
{
    pthread_mutex_lock(&inst->lease_mu);
    for (int i = 0; i < MAX_LEASES; i++)
        if (inst->leases[i].id == id)
            inst->leases[i].id = 0;
    pthread_mutex_unlock(&inst->lease_mu);
}

static void sweep_orphans(struct etcd_instance *inst);
static int delete_own_key_reporting(struct etcd_instance *inst, struct etcd_lock *el, struct etcd_status *st);
static void remember_failed_delete(struct etcd_instance *inst, struct etcd_lock *el, int rc);
static int keepalive(struct etcd_instance *inst, int64_t id);

/* ---- acquire ------------------------------------------------------------------------- */

/* One transaction: create our key on the lease unless it exists, then read
 * the first key of the name (lowest create_revision). */
static int enqueue(struct etcd_instance *inst, const struct dlock_provider_lock *lk, struct etcd_lock *el,
                   int64_t lease_id, struct json_object **reply, struct etcd_status *st)
{
    struct json_object *cmp = json_object_new_object();
    json_object_object_add(cmp, "key", etcd_json_b64(el->key, el->key_len));
    json_object_object_add(cmp, "target", json_object_new_string("CREATE"));
    json_object_object_add(cmp, "create_revision", etcd_json_int_str(0));
    struct json_object *compare = json_object_new_array();
    json_object_array_add(compare, cmp);

    struct json_object *put = json_object_new_object();
    json_object_object_add(put, "key", etcd_json_b64(el->key, el->key_len));
    json_object_object_add(put, "value", etcd_json_b64(el->owner, strlen(el->owner)));
    json_object_object_add(put, "lease", etcd_json_int_str(lease_id));
    struct json_object *first_a = deciding_range(lk, el), *first_b = deciding_range(lk, el);
    struct json_object *mine = json_object_new_object();
    json_object_object_add(mine, "key", etcd_json_b64(el->key, el->key_len));
    struct json_object *success = json_object_new_array(), *failure = json_object_new_array();
    json_object_array_add(success, op("request_put", put));
    json_object_array_add(success, op("request_range", first_a));
    json_object_array_add(failure, op("request_range", mine));
    json_object_array_add(failure, op("request_range", first_b));
    return send_txn(inst, compare, success, failure, reply, st);
}

/* The i-th response of a txn reply, of the given kind ("response_range"). */
static struct json_object *txn_response(struct json_object *reply, size_t i, const char *kind)
{
    struct json_object *responses = etcd_json_get(reply, "responses");
    if (!responses || !json_object_is_type(responses, json_type_array) || json_object_array_length(responses) <= i)
        return NULL;
    return etcd_json_get(json_object_array_get_idx(responses, i), kind);
}

static struct json_object *first_kv(struct json_object *range)
{
    struct json_object *kvs = etcd_json_get(range, "kvs");
    if (!kvs || !json_object_is_type(kvs, json_type_array) || json_object_array_length(kvs) == 0)
        return NULL;
    return json_object_array_get_idx(kvs, 0);
}

/* Whether an exclusive key read with its value is a hold made shared. */
static bool kv_made_shared(struct json_object *kv)
{
    char value[128]; /* room for every value this backend writes: the mark and an owner */
    return etcd_value_made_shared(value, etcd_json_unb64(kv, "value", value, sizeof value));
}

/* Whether a key of lk's name (read from its range) is a permit's. */
static bool kv_is_permit(const struct etcd_lock *el, struct json_object *kv)
{
    char key[KEY_MAX];
    int n = etcd_json_unb64(kv, "key", key, sizeof key);
    size_t mark = strlen(ETCD_PERMIT_MARK);
    return n >= 0 && (size_t)n >= el->dir_len + mark && memcmp(key, el->dir, el->dir_len) == 0 &&
           memcmp(key + el->dir_len, ETCD_PERMIT_MARK, mark) == 0;
}

/* The first key that keeps a reader out among a range read with values
 * (reader_blocking_range: a writer or a permit; a hold made shared is
 * neither), or NULL. */
static struct json_object *first_writer(struct json_object *range)
{
    struct json_object *kvs = etcd_json_get(range, "kvs");
    size_t n = kvs && json_object_is_type(kvs, json_type_array) ? json_object_array_length(kvs) : 0;
    for (size_t i = 0; i < n; i++)
        if (!kv_made_shared(json_object_array_get_idx(kvs, i)))
            return json_object_array_get_idx(kvs, i);
    return NULL;
}

/* Whether the txn's deciding range (deciding_range) grants our key. */
static bool is_granted(const struct dlock_provider_lock *lk, const struct etcd_lock *el,
                       struct json_object *deciding)
{
    if (lk->mode == DLOCK_MODE_SHARED) {
        struct json_object *writer = first_writer(deciding);
        return !writer || etcd_json_int(writer, "create_revision") > el->create_rev; /* no older writer */
    }
    struct json_object *kv = first_kv(deciding);
    if (lk->mode != DLOCK_MODE_SEMAPHORE)
        return kv && etcd_json_int(kv, "create_revision") == el->create_rev;
    /* Among the N oldest, with only permits before it: an older key of a
     * lock request (a holder or a writer waiting, exclusive or shared)
     * keeps every permit behind it out, as it would keep out a writer. */
    struct json_object *kvs = etcd_json_get(deciding, "kvs");
    size_t n = kvs && json_object_is_type(kvs, json_type_array) ? json_object_array_length(kvs) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *older = json_object_array_get_idx(kvs, i);
        if (etcd_json_int(older, "create_revision") == el->create_rev)
            return true;
        if (!kv_is_permit(el, older))
            return false;
    }
    return false;
}

/* Busy: finds the key just before ours that keeps us out (any key for an
 * exclusive request, an exclusive or permit one for a shared request), to wait for
 * its deletion, or for a shared request its being made shared. For a
 * shared request the youngest older exclusive key may have been made
 * shared since the grant was decided: it is then the oldest key, no writer
 * is before us, and there is nothing to wait for. */
static int find_predecessor(struct etcd_instance *inst, const struct dlock_provider_lock *lk,
                            struct etcd_lock *el)
{
    free(el->pred);
    el->pred = NULL;
    bool shared = lk->mode == DLOCK_MODE_SHARED;
    struct json_object *req = shared ? reader_blocking_range(el) : dir_range(el), *reply = NULL;
    json_object_object_add(req, "sort_order", json_object_new_string("DESCEND"));
    json_object_object_add(req, "sort_target", json_object_new_string("CREATE"));
    json_object_object_add(req, "limit", etcd_json_int_str(1));
    json_object_object_add(req, "max_create_revision", etcd_json_int_str(el->create_rev - 1));
    if (!shared)
        json_object_object_add(req, "keys_only", json_object_new_boolean(1));
    int rc = etcd_call(&inst->http, "/v3/kv/range", req, &reply, NULL);
    json_object_put(req);
    if (rc != DLOCK_OK)
        return rc;
    struct json_object *kv = first_kv(reply);
    el->watch_from = etcd_json_int(etcd_json_get(reply, "header"), "revision") + 1;
    if (kv && shared && kv_made_shared(kv))
        kv = NULL;
    if (kv) {
        char key[KEY_MAX];
        int n = etcd_json_unb64(kv, "key", key, sizeof key);
        if (n > 0 && (el->pred = malloc((size_t)n)) != NULL) {
            memcpy(el->pred, key, (size_t)n);
            el->pred_len = (size_t)n;
        }
    }
    json_object_put(reply);
    return DLOCK_OK;
}

/* One txn: if every compare holds, put value at key (keep_lease: on the
 * lease the key is on; else on none); otherwise read key. */
static int put_or_read(struct etcd_instance *inst, struct json_object *compare, const char *key, size_t key_len,
                       const char *value, size_t value_len, bool keep_lease, struct json_object **reply)
{
    struct json_object *put = json_object_new_object();
    json_object_object_add(put, "key", etcd_json_b64(key, key_len));
    json_object_object_add(put, "value", etcd_json_b64(value, value_len));
    if (keep_lease)
        json_object_object_add(put, "ignore_lease", json_object_new_boolean(1));
    struct json_object *get = json_object_new_object();
    json_object_object_add(get, "key", etcd_json_b64(key, key_len));
    struct json_object *success = json_object_new_array(), *failure = json_object_new_array();
    json_object_array_add(success, op("request_put", put));
    json_object_array_add(failure, op("request_range", get));
    return send_txn(inst, compare, success, failure, reply, NULL);
}

/* A semaphore's N is the name's: the first request writes it beside the
 * name's keys (no lease: it outlives every holder), later ones compare. */
static int check_permits(struct etcd_instance *inst, const struct dlock_provider_lock *lk, struct etcd_lock *el)
{
    char meta[KEY_MAX], value[16];
    int mlen = snprintf(meta, sizeof meta, "%.*s" ETCD_PERMITS_SUFFIX, (int)(el->dir_len - 1), el->dir);
    int vlen = snprintf(value, sizeof value, "%u", lk->permits);
    struct json_object *cmp = json_object_new_object();
    json_object_object_add(cmp, "key", etcd_json_b64(meta, (size_t)mlen));
    json_object_object_add(cmp, "target", json_object_new_string("CREATE"));
    json_object_object_add(cmp, "create_revision", etcd_json_int_str(0));
    struct json_object *compare = json_object_new_array(), *reply = NULL;
    json_object_array_add(compare, cmp);
    int rc = put_or_read(inst, compare, meta, (size_t)mlen, value, (size_t)vlen, false, &reply);
    if (rc != DLOCK_OK)
        return rc;
    bool made = etcd_json_get(reply, "succeeded") && json_object_get_boolean(etcd_json_get(reply, "succeeded"));
    char stored[16] = "";
    if (!made) {
        int n = etcd_json_unb64(first_kv(txn_response(reply, 0, "response_range")), "value", stored,
                                sizeof stored - 1);
        stored[n > 0 ? n : 0] = 0;
    }
    json_object_put(reply);
    if (!made && strcmp(stored, value) != 0)
        return dlock_seterr(DLOCK_EINVAL, "%s: '%s' is a semaphore of %s permits, not %u", inst->http.label,
                            lk->name, stored[0] ? stored : "an unknown number of", lk->permits);
    el->permits_checked = true;
    return DLOCK_OK;
}

/* A grant on our key: its create_revision is the fence. */
static void grant_on_our_key(struct etcd_lock *el, struct dlock_grant *g)
{
    el->granted_rev = el->create_rev;
    g->fence = (uint64_t)el->create_rev;
    g->has_fence = 1;
}

/* One attempt (etcd_acquire). */
static int attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    int rc = ensure_keys(inst, lk);
    if (rc == DLOCK_OK && lk->mode == DLOCK_MODE_SEMAPHORE && !el->permits_checked)
        rc = check_permits(inst, lk, el);
    int64_t lease_id = 0;
    if (rc == DLOCK_OK)
        rc = lease_for(inst, lk->lease_ms, &lease_id);
    if (rc != DLOCK_OK)
        return rc;
    sweep_orphans(inst);
    bool adopted = false;
    if (etcd_orphans_adopt(&inst->orphans, el->key, el->key_len, &adopted) != DLOCK_OK) {
        /* A sweep is deleting our old key this moment. */
        free(el->pred);
        el->pred = NULL;
        el->wait_any = false;
        el->sweep_in_the_way = true;
        g->retry_hint_ms = 20;
        return DLOCK_EBUSY;
    }
    if (adopted)
        el->make_key_anew = true;
    struct json_object *reply = NULL;
    struct etcd_status st;
    rc = enqueue(inst, lk, el, lease_id, &reply, &st);
    if (rc == DLOCK_EUNAVAILABLE && st.grpc_code == 5) {
        /* "requested lease not found": it expired (the client was cut off
         * longer than its TTL). Every hold on it is lost; start a new one. */
        forget_lease(inst, lease_id);
        if ((rc = lease_for(inst, lk->lease_ms, &lease_id)) == DLOCK_OK)
            rc = enqueue(inst, lk, el, lease_id, &reply, &st);
    }
    el->queue_unanswered = rc != DLOCK_OK && st.sent && st.grpc_code == 0;
    el->key_unsettled = rc != DLOCK_OK && (el->queue_unanswered || adopted);
    if (rc != DLOCK_OK)
        return rc;
    bool created = etcd_json_get(reply, "succeeded") != NULL &&
                   json_object_get_boolean(etcd_json_get(reply, "succeeded"));
    struct json_object *deciding = txn_response(reply, 1, "response_range");
    int64_t at_revision = etcd_json_int(etcd_json_get(reply, "header"), "revision");
    bool made_shared = false;
    if (created) {
        struct json_object *put = txn_response(reply, 0, "response_put");
        el->create_rev = etcd_json_int(etcd_json_get(put, "header"), "revision");
        el->lease_id = lease_id;
    } else {
        struct json_object *kv = first_kv(txn_response(reply, 0, "response_range"));
        el->create_rev = etcd_json_int(kv, "create_revision");
        el->lease_id = etcd_json_int(kv, "lease");
        made_shared = kv_made_shared(kv);
    }
    bool first = is_granted(lk, el, deciding);
    bool consistent = el->create_rev && (lk->mode == DLOCK_MODE_SHARED || first_kv(deciding));
    json_object_put(reply);
    if (created)
        el->make_key_anew = false;
    if (!created && el->create_rev &&
        (el->create_rev == el->granted_rev || el->lease_id != lease_id || made_shared || el->make_key_anew)) {
        /* Our key of a hold granted before and declared lost, whose
         * give-back did not get through: a new grant needs a new key, and
         * so a new, higher fence. Or our key left from a wait with another
         * lease length (a handle with its own lease_ms): its lease would
         * not last the validity counted for this one. Or our key left from
         * a hold made shared (whatever this handle remembers): taken as it
         * is, it would be an exclusive grant that readers pass. Or an
         * orphan of ours we adopted: a delete of it may still be on its
         * way, and must find a new key. */
        struct etcd_status dst;
        if ((rc = delete_own_key_reporting(inst, el, &dst)) != DLOCK_OK && rc != DLOCK_ENOTOWNER) {
            remember_failed_delete(inst, el, rc);
            return rc;
        }
        el->make_key_anew = false;
        el->granted_rev = 0;
        return attempt(instance, lk, g);
    }
    if (!consistent)
        return dlock_seterr(DLOCK_EPROTOCOL, "%s: the queue of lock '%s' read back inconsistently (our key %s)",
                            inst->http.label, lk->name, created ? "just made" : "already there");
    if (first) {
        /* The lease was granted or last kept alive some time ago (holds
         * share it, and nothing keeps it alive between holds), while the
         * core counts this hold's validity from this attempt. If at least
         * two thirds of it are left (it was refreshed within the last
         * renewal interval), say how much, and the core counts validity by
         * that and renews sooner. Otherwise refresh it now, after the
         * grant, so that it outlives the whole lease; if it ran out
         * meanwhile, our key went with it: not a grant. */
        int64_t ttl_ms = (lk->lease_ms + 999) / 1000 * 1000;
        /* What is left was counted from the stamp of the refresh, over up
         * to the whole TTL: the core takes drift off for lease_ms only, so
         * take off the rest here. */
        int64_t left = lease_left_ms(inst, el->lease_id) -
                       (dlock_provider_drift_ms(ttl_ms) - dlock_provider_drift_ms(lk->lease_ms));
        if (left >= lk->lease_ms - lk->lease_ms / 3) {
            grant_on_our_key(el, g);
            g->valid_ms = left < lk->lease_ms ? left : 0;
            return DLOCK_OK;
        }
        if ((rc = keepalive(inst, el->lease_id)) != DLOCK_OK) {
            if (rc != DLOCK_ELOST)
                return rc;
            el->create_rev = 0;
            g->retry_hint_ms = 0;
            return DLOCK_EBUSY;
        }
        grant_on_our_key(el, g);
        return DLOCK_OK;
    }
    if (lk->mode == DLOCK_MODE_SEMAPHORE) {
        /* Behind N others: any of them may let go. */
        free(el->pred);
        el->pred = NULL;
        el->wait_any = true;
        el->watch_from = at_revision + 1;
        g->retry_hint_ms = -1;
        return DLOCK_EBUSY;
    }
    /* Queued behind others: wait for the one just before us. */
    el->wait_any = false;
    if ((rc = find_predecessor(inst, lk, el)) != DLOCK_OK)
        return rc;
    g->retry_hint_ms = el->pred ? -1 : 0; /* it just went: look again at once */
    return DLOCK_EBUSY;
}

/* An attempt that fails (neither granted nor busy) may leave a key of ours
 * that no hold or waiter stands on: one it made or found, or one whose
 * queueing got no answer. The core abandons only a request that was
 * busy before, so the attempt remembers such a key itself, revision not
 * known (read before the delete): a sweep deletes it, or the next attempt
 * adopts it and makes it anew. */
static int etcd_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    el->key_unsettled = false;
    int rc = attempt(instance, lk, g);
    if (rc != DLOCK_OK && rc != DLOCK_EBUSY && el->key && (el->create_rev || el->key_unsettled))
        etcd_orphans_add(&inst->orphans, el->key, el->key_len, 0);
    return rc;
}

static int etcd_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    if (el->sweep_in_the_way) {
        /* Nothing to watch: the pause the attempt asked for, unless called. */
        el->sweep_in_the_way = false;
        struct pollfd p = { .fd = wake_fd, .events = POLLIN };
        if (poll(&p, wake_fd >= 0 ? 1 : 0, timeout_ms > 50 ? 50 : (int)timeout_ms) < 0 && errno != EINTR)
            return dlock_seterr(DLOCK_EINTERNAL, "etcd: poll failed: %s", strerror(errno));
        return DLOCK_OK;
    }
    if (!el->pred && !el->wait_any)
        return DLOCK_OK;
    /* Nothing else keeps a waiter's lease alive: without this its key
     * would expire while it waits, and it would lose its place in line. */
    int rc = keepalive(inst, el->lease_id);
    if (rc == DLOCK_ELOST)
        return DLOCK_OK; /* its key is gone: look again (a new lease, the back of the line) */
    if (rc != DLOCK_OK)
        return rc;
    if (el->wait_any) {
        char end[KEY_MAX];
        size_t n = el->dir_len < sizeof end ? el->dir_len : sizeof end - 1;
        memcpy(end, el->dir, n);
        end[n - 1]++; /* '/' + 1: the end of the name's keys */
        return etcd_watch_deletions(&inst->http, el->dir, el->dir_len, end, n, el->watch_from, timeout_ms,
                                    wake_fd);
    }
    return etcd_watch_change(&inst->http, el->pred, el->pred_len, el->watch_from, timeout_ms, wake_fd);
}

/* ---- release, renewal ------------------------------------------------------------------- */

/* Deletes key if its create_revision is create_rev (any, when 0): a
 * release sent twice, or late, never deletes a newer key of the same
 * owner. DLOCK_OK with *deleted set, or the failure (st says whether the
 * request may have reached the server). */
static int delete_key(struct etcd_instance *inst, const char *key, size_t key_len, int64_t create_rev, bool *deleted,
                      struct etcd_status *st)
{
    struct json_object *compare = json_object_new_array();
    if (create_rev) {
        struct json_object *cmp = json_object_new_object();
        json_object_object_add(cmp, "key", etcd_json_b64(key, key_len));
        json_object_object_add(cmp, "target", json_object_new_string("CREATE"));
        json_object_object_add(cmp, "create_revision", etcd_json_int_str(create_rev));
        json_object_array_add(compare, cmp);
    }
    struct json_object *del = json_object_new_object();
    json_object_object_add(del, "key", etcd_json_b64(key, key_len));
    struct json_object *success = json_object_new_array();
    json_object_array_add(success, op("request_delete_range", del));
    struct json_object *txn = json_object_new_object(), *reply = NULL;
    json_object_object_add(txn, "compare", compare);
    json_object_object_add(txn, "success", success);
    int rc = etcd_call(&inst->http, "/v3/kv/txn", txn, &reply, st);
    json_object_put(txn);
    if (rc != DLOCK_OK)
        return rc;
    *deleted = etcd_json_get(reply, "succeeded") && json_object_get_boolean(etcd_json_get(reply, "succeeded"));
    json_object_put(reply);
    return DLOCK_OK;
}

/* Deletes our key if its create_revision is still ours. DLOCK_OK,
 * DLOCK_ENOTOWNER (no key of ours, or no longer the one we made), or the
 * failure, with el unchanged. */
static int delete_own_key_reporting(struct etcd_instance *inst, struct etcd_lock *el, struct etcd_status *st)
{
    st->grpc_code = 0;
    st->sent = false;
    if (!el->key || !el->create_rev)
        return DLOCK_ENOTOWNER;
    bool deleted = false;
    int rc = delete_key(inst, el->key, el->key_len, el->create_rev, &deleted, st);
    if (rc != DLOCK_OK)
        return rc;
    el->create_rev = el->granted_rev = 0;
    return deleted ? DLOCK_OK : DLOCK_ENOTOWNER;
}

/* A sweep's delete of an orphan (etcd_orphans.h). */
static int delete_orphan(void *arg, const char *key, size_t key_len, int64_t create_rev, int64_t age_ms)
{
    struct etcd_instance *inst = arg;
    bool deleted;
    struct etcd_status st;
    if (!create_rev) {
        /* Not known: read it, so the delete compares it, and a delete that
         * arrives late cannot remove a key made since. */
        struct json_object *req = json_object_new_object(), *reply = NULL;
        json_object_object_add(req, "key", etcd_json_b64(key, key_len));
        json_object_object_add(req, "keys_only", json_object_new_boolean(1));
        int rc = etcd_call(&inst->http, "/v3/kv/range", req, &reply, NULL);
        json_object_put(req);
        if (rc != DLOCK_OK)
            return rc;
        create_rev = etcd_json_int(first_kv(reply), "create_revision");
        json_object_put(reply);
        /* Never made, or gone; but a queueing that got no answer may still
         * be on its way to the server: kept until it cannot be. */
        if (!create_rev)
            return age_ms > 2 * inst->http.command_timeout_ms + 1000 ? DLOCK_OK : DLOCK_EBUSY;
    }
    return delete_key(inst, key, key_len, create_rev, &deleted, &st);
}

static void sweep_orphans(struct etcd_instance *inst)
{
    etcd_orphans_sweep(&inst->orphans, delete_orphan, inst);
}

/* A delete that failed (not sent, not answered, or refused) leaves our key
 * on a lease that our other holds keep alive: remember it, so a sweep
 * deletes it. */
static void remember_failed_delete(struct etcd_instance *inst, struct etcd_lock *el, int rc)
{
    if (rc == DLOCK_OK || rc == DLOCK_ENOTOWNER)
        return;
    if (etcd_orphans_add(&inst->orphans, el->key, el->key_len, el->create_rev) != DLOCK_OK)
        return; /* out of memory: the lease frees it once no hold of ours keeps it alive */
}

static int etcd_release(void *instance, struct dlock_provider_lock *lk)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    struct etcd_status st;
    int rc = delete_own_key_reporting(inst, el, &st);
    remember_failed_delete(inst, el, rc);
    return rc;
}

static void etcd_abandon(void *instance, struct dlock_provider_lock *lk)
{
    /* Out of the queue now, not at the lease's end. */
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    struct etcd_status st;
    if (!el->create_rev && el->queue_unanswered && el->key) {
        /* Our queueing got no answer: our key may be there (the attempt
         * remembered it already). */
        el->queue_unanswered = false;
        return;
    }
    int rc = delete_own_key_reporting(inst, el, &st);
    remember_failed_delete(inst, el, rc);
}

/* One keepalive for a lease: DLOCK_OK (alive), DLOCK_ELOST (expired or
 * revoked), or a failure. */
static int keepalive(struct etcd_instance *inst, int64_t id)
{
    struct json_object *reply = NULL;
    int64_t sent = dlock_provider_stamp_ms();
    int rc = lease_call(inst, "/v3/lease/keepalive", "ID", id, &reply);
    if (rc != DLOCK_OK)
        return rc;
    int64_t ttl = etcd_json_int(etcd_json_get(reply, "result"), "TTL");
    json_object_put(reply);
    if (ttl > 0) {
        lease_refreshed(inst, id, sent, ttl);
        return DLOCK_OK;
    }
    forget_lease(inst, id);
    return dlock_seterr(DLOCK_ELOST, "%s: lease %llx expired or was revoked", inst->http.label,
                        (unsigned long long)id);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks that the holds on lease id still have their keys, with one
 * request whatever their number: the lease's own list of the keys attached
 * to it. A key an operator deleted, or replaced with a key off our lease,
 * is not on it, and its hold is lost although the lease lives. */
static int check_keys(struct etcd_instance *inst, int64_t id, struct dlock_provider_lock *const *locks, size_t n,
                      int *results)
{
    struct json_object *req = json_object_new_object(), *reply = NULL;
    json_object_object_add(req, "ID", etcd_json_int_str(id));
    json_object_object_add(req, "keys", json_object_new_boolean(1));
    int rc = etcd_call(&inst->http, "/v3/lease/timetolive", req, &reply, NULL);
    json_object_put(req);
    if (rc != DLOCK_OK)
        return rc;
    struct json_object *keys = etcd_json_get(reply, "keys");
    size_t nkeys = keys && json_object_is_type(keys, json_type_array) ? json_object_array_length(keys) : 0;
    const char **sorted = malloc((nkeys ? nkeys : 1) * sizeof *sorted);
    if (!sorted) {
        json_object_put(reply);
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
    }
    size_t nsorted = 0;
    for (size_t k = 0; k < nkeys; k++) {
        struct json_object *key = json_object_array_get_idx(keys, k);
        if (key && json_object_is_type(key, json_type_string))
            sorted[nsorted++] = json_object_get_string(key);
    }
    qsort(sorted, nsorted, sizeof *sorted, compare_strings);
    for (size_t i = 0; i < n; i++) {
        const struct etcd_lock *el = locks[i]->priv;
        if (el->lease_id != id || results[i] != DLOCK_OK)
            continue;
        if (!bsearch(&el->key_b64, sorted, nsorted, sizeof *sorted, compare_strings))
            results[i] = dlock_seterr(DLOCK_ELOST, "%s: the key of lock '%s' is gone or was replaced",
                                      inst->http.label, locks[i]->name);
    }
    free(sorted);
    json_object_put(reply);
    return DLOCK_OK;
}

/* A renewal round: for each lease the holds are on, one keepalive and one
 * look at the lease's keys, whatever the number of holds. */
static int etcd_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    struct etcd_instance *inst = instance;
    /* The distinct leases: few (one per lease length), so a list will do. */
    int64_t *ids = malloc(n * sizeof *ids);
    if (!ids) {
        int rc = dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
        for (size_t i = 0; i < n; i++)
            results[i] = rc;
        return rc;
    }
    size_t nids = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = DLOCK_OK;
        int64_t id = ((const struct etcd_lock *)locks[i]->priv)->lease_id;
        size_t k = 0;
        while (k < nids && ids[k] != id)
            k++;
        if (k == nids)
            ids[nids++] = id;
    }
    for (size_t k = 0; k < nids; k++) {
        int rc = keepalive(inst, ids[k]);
        if (rc == DLOCK_OK)
            rc = check_keys(inst, ids[k], locks, n, results);
        if (rc != DLOCK_OK)
            for (size_t i = 0; i < n; i++)
                if (((const struct etcd_lock *)locks[i]->priv)->lease_id == ids[k])
                    results[i] = rc;
    }
    free(ids);
    /* Our holds keep the lease alive, and with it any key of ours a delete
     * could not reach: delete those, after the renewals, so a server that
     * does not answer delays no renewal. */
    sweep_orphans(inst);
    return DLOCK_OK;
}

static int etcd_renew(void *instance, struct dlock_provider_lock *lk)
{
    int result;
    struct dlock_provider_lock *one[1] = { lk };
    int rc = etcd_renew_batch(instance, one, 1, &result);
    return rc != DLOCK_OK ? rc : result;
}

/* ---- downgrade ------------------------------------------------------------------------ */

/* One txn: if our key is still the one granted (same create revision) and
 * not made shared yet, put it again with its value marked shared, on the
 * lease it is on; otherwise read it. The put keeps the key's create
 * revision, which is the hold's fence and its place in line, so no moment
 * passes when the name is free or held by another, and nobody's place
 * moves; it wakes the waiter watching the key (a reader behind it comes
 * in, a writer looks again and waits on). A resent downgrade that finds
 * the key made shared already is answered as done. */
static int etcd_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    if (!el->key || !el->create_rev)
        return dlock_seterr(DLOCK_ELOST, "%s: the lock has no key to make shared", inst->http.label);
    char value[sizeof ETCD_SHARED_MARK + sizeof el->owner];
    int vlen = snprintf(value, sizeof value, ETCD_SHARED_MARK "%s", el->owner);

    struct json_object *ours = json_object_new_object();
    json_object_object_add(ours, "key", etcd_json_b64(el->key, el->key_len));
    json_object_object_add(ours, "target", json_object_new_string("CREATE"));
    json_object_object_add(ours, "create_revision", etcd_json_int_str(el->create_rev));
    struct json_object *not_yet = json_object_new_object();
    json_object_object_add(not_yet, "key", etcd_json_b64(el->key, el->key_len));
    json_object_object_add(not_yet, "target", json_object_new_string("VALUE"));
    json_object_object_add(not_yet, "result", json_object_new_string("NOT_EQUAL"));
    json_object_object_add(not_yet, "value", etcd_json_b64(value, (size_t)vlen));
    struct json_object *compare = json_object_new_array(), *reply = NULL;
    json_object_array_add(compare, ours);
    json_object_array_add(compare, not_yet);
    int rc = put_or_read(inst, compare, el->key, el->key_len, value, (size_t)vlen, true /* its lease */, &reply);
    if (rc != DLOCK_OK)
        return rc;
    bool done = etcd_json_get(reply, "succeeded") && json_object_get_boolean(etcd_json_get(reply, "succeeded"));
    if (!done) {
        struct json_object *kv = first_kv(txn_response(reply, 0, "response_range"));
        /* Made shared by an earlier send of this request, or gone. */
        done = kv && etcd_json_int(kv, "create_revision") == el->create_rev && kv_made_shared(kv);
    }
    json_object_put(reply);
    if (!done)
        return dlock_seterr(DLOCK_ELOST, "%s: the lock's key is gone or was replaced, so it was not made shared",
                            inst->http.label);
    return DLOCK_OK;
}

static void etcd_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    struct etcd_lock *el = lk->priv;
    free(el->dir);
    free(el->key);
    free(el->key_b64);
    free(el->pred);
    memset(el, 0, sizeof *el);
}

/* ---- status ---------------------------------------------------------------------------- */

static int etcd_status(struct etcd_instance *inst, struct dlock_ctl_status *arg)
{
    return etcd_name_status(&inst->http, inst->prefix, arg->name, arg->name_len, arg->out);
}

static int etcd_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    struct etcd_instance *inst = instance;
    return etcd_break_holders(&inst->http, inst->prefix, name, name_len, broken, fence);
}

static int etcd_list(void *instance, struct dlock_provider_list *req)
{
    struct etcd_instance *inst = instance;
    return etcd_list_page(&inst->http, inst->prefix, req);
}

static int etcd_ctl(void *instance, int op_code, void *arg)
{
    if (op_code == DLOCK_CTL_STATUS)
        return etcd_status(instance, arg);
    return DLOCK_ENOTSUP;
}

/* ---- instance ------------------------------------------------------------------------- */

static int etcd_open(void **instance, const struct dlock_provider_env *env)
{
    struct etcd_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
    int rc = etcd_http_init(&inst->http, env->settings);
    if (rc != DLOCK_OK) {
        free(inst);
        return rc;
    }
    const char *prefix = env->prefix;
    dlock_settings_string(env->settings, "prefix", &prefix);
    if (strlen(prefix) >= sizeof inst->prefix) {
        etcd_http_destroy(&inst->http);
        free(inst);
        return dlock_seterr(DLOCK_ECONFIG, "%s: etcd.prefix must be shorter than %zu bytes",
                            dlock_settings_where(env->settings, "prefix"), sizeof inst->prefix);
    }
    snprintf(inst->prefix, sizeof inst->prefix, "%s", prefix);
    inst->log_handle = env->log_handle;
    pthread_mutex_init(&inst->lease_mu, NULL);
    etcd_orphans_init(&inst->orphans);
    /* Reach the cluster now, so a wrong address or password is reported
     * at open. */
    rc = etcd_authenticate(&inst->http);
    struct json_object *req = json_object_new_object(), *reply = NULL;
    json_object_object_add(req, "key", etcd_json_b64(inst->prefix, strlen(inst->prefix)));
    json_object_object_add(req, "keys_only", json_object_new_boolean(1));
    json_object_object_add(req, "limit", etcd_json_int_str(1));
    if (rc == DLOCK_OK)
        rc = etcd_call(&inst->http, "/v3/kv/range", req, &reply, NULL);
    json_object_put(req);
    if (reply)
        json_object_put(reply);
    if (rc != DLOCK_OK) {
        etcd_orphans_destroy(&inst->orphans);
        pthread_mutex_destroy(&inst->lease_mu);
        etcd_http_destroy(&inst->http);
        free(inst);
        return rc;
    }
    *instance = inst;
    return DLOCK_OK;
}

static void etcd_close(void *instance)
{
    struct etcd_instance *inst = instance;
    /* Revoking the leases deletes every key on them at once, rather than
     * leaving them to the TTL; orphans on other leases are deleted first. */
    sweep_orphans(inst);
    for (int i = 0; i < MAX_LEASES; i++) {
        if (!inst->leases[i].id)
            continue;
        struct json_object *reply = NULL;
        if (lease_call(inst, "/v3/lease/revoke", "ID", inst->leases[i].id, &reply) == DLOCK_OK)
            json_object_put(reply);
    }
    etcd_orphans_destroy(&inst->orphans);
    pthread_mutex_destroy(&inst->lease_mu);
    etcd_http_destroy(&inst->http);
    free(inst);
}

static const struct dlock_provider etcd_provider = {
    .version = DLOCK_PROVIDER_VERSION_4,
    .name = "etcd",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_FENCE_LINEARIZABLE | DLOCK_CAP_NATIVE_WAIT |
                    DLOCK_CAP_FAIR | DLOCK_CAP_SERVER_EXPIRY | DLOCK_CAP_MULTI_HOST | DLOCK_CAP_SHARED |
                    DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE,
    .lock_priv_size = sizeof(struct etcd_lock),
    .settings = etcd_settings,
    .open = etcd_open,
    .close = etcd_close,
    .acquire = etcd_acquire,
    .release = etcd_release,
    .renew = etcd_renew,
    .renew_batch = etcd_renew_batch,
    .wait = etcd_wait,
    .lock_fini = etcd_lock_fini,
    .ctl = etcd_ctl,
    .abandon = etcd_abandon,
    .list = etcd_list,
    .break_hold = etcd_break,
    .downgrade = etcd_downgrade,
};

DLOCK_MODULE(etcd_provider)
