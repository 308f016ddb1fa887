/* backends/etcd/etcd_txn.c - a name's keys (see etcd_keys.h for the
 * layout) and the transactions on them: the ranges that decide a grant,
 * and reading the answers. */
#include "config.h"

#include "etcd_backend.h"
#include "../common/name_escape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Builds (or rebuilds, when the contending thread changed) lk's keys. */
int etcd_ensure_keys(struct etcd_instance *inst, struct dlock_provider_lock *lk)
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
        el->dir_len = plen + name_escape(lk->name, lk->name_len, etcd_name_plain, el->dir + plen);
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
struct json_object *etcd_dir_range(const struct etcd_lock *el)
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
struct json_object *etcd_reader_blocking_range(const struct etcd_lock *el)
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
struct json_object *etcd_deciding_range(const struct dlock_provider_lock *lk, const struct etcd_lock *el)
{
    bool shared = lk->mode == DLOCK_MODE_SHARED;
    struct json_object *r = shared ? etcd_reader_blocking_range(el) : etcd_dir_range(el);
    json_object_object_add(r, "sort_order", json_object_new_string("ASCEND"));
    json_object_object_add(r, "sort_target", json_object_new_string("CREATE"));
    json_object_object_add(r, "limit",
                           etcd_json_int_str(lk->mode == DLOCK_MODE_SEMAPHORE ? lk->permits : shared ? 2 : 1));
    if (!shared)
        json_object_object_add(r, "keys_only", json_object_new_boolean(1));
    return r;
}

struct json_object *etcd_op(const char *kind, struct json_object *request)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, kind, request);
    return o;
}

struct json_object *etcd_txn_of(struct json_object *compare, struct json_object *success,
                                struct json_object *failure)
{
    struct json_object *txn = json_object_new_object();
    json_object_object_add(txn, "compare", compare);
    json_object_object_add(txn, "success", success);
    json_object_object_add(txn, "failure", failure);
    return txn;
}

/* Sends the txn of compare, success and failure (all taken). */
int etcd_send_txn(struct etcd_instance *inst, struct json_object *compare, struct json_object *success,
                    struct json_object *failure, struct json_object **reply, struct etcd_status *st)
{
    struct json_object *txn = etcd_txn_of(compare, success, failure);
    int rc = etcd_call(&inst->http, "/v3/kv/txn", txn, reply, st);
    json_object_put(txn);
    return rc;
}

/* The i-th response of a txn reply, of the given kind ("response_range"). */
struct json_object *etcd_txn_response(struct json_object *reply, size_t i, const char *kind)
{
    struct json_object *responses = etcd_json_get(reply, "responses");
    if (!responses || !json_object_is_type(responses, json_type_array) || json_object_array_length(responses) <= i)
        return NULL;
    return etcd_json_get(json_object_array_get_idx(responses, i), kind);
}

struct json_object *etcd_first_kv(struct json_object *range)
{
    struct json_object *kvs = etcd_json_get(range, "kvs");
    if (!kvs || !json_object_is_type(kvs, json_type_array) || json_object_array_length(kvs) == 0)
        return NULL;
    return json_object_array_get_idx(kvs, 0);
}

/* Whether an exclusive key read with its value is a hold made shared. */
bool etcd_kv_made_shared(struct json_object *kv)
{
    char value[128]; /* room for every value this backend writes: the mark and an owner */
    return etcd_value_made_shared(value, etcd_json_unb64(kv, "value", value, sizeof value));
}

/* Whether a key of lk's name (read from its range) is a permit's. */
bool etcd_kv_is_permit(const struct etcd_lock *el, struct json_object *kv)
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
struct json_object *etcd_first_writer(struct json_object *range)
{
    struct json_object *kvs = etcd_json_get(range, "kvs");
    size_t n = kvs && json_object_is_type(kvs, json_type_array) ? json_object_array_length(kvs) : 0;
    for (size_t i = 0; i < n; i++)
        if (!etcd_kv_made_shared(json_object_array_get_idx(kvs, i)))
            return json_object_array_get_idx(kvs, i);
    return NULL;
}
