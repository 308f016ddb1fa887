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

#include "etcd_backend.h"
#include "etcd_list.h"
#include "etcd_wanted.h"
#include "etcd_watch.h"
#include "../common/name_escape.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- leases ------------------------------------------------------------------------- */

/* ---- acquire ------------------------------------------------------------------------- */

/* {"key": our key}: a range of it, or the start of its compare or put. */
static struct json_object *own_key(const struct etcd_lock *el)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "key", etcd_json_b64(el->key, el->key_len));
    return o;
}

/* One transaction: create our key on the lease unless it exists, then read
 * the first key of the name (lowest create_revision). A request whose key
 * an earlier attempt made (a waiter looking again) only reads, on both
 * sides: etcd answers a transaction without a put from its store, with no
 * write through its log, which would also wait behind every write other
 * clients sent before it, such as the releasing holder queueing anew. The
 * answer when that key is gone says so (etcd_read_queueing). */
struct json_object *etcd_queueing_txn(const struct dlock_provider_lock *lk, struct etcd_lock *el, int64_t lease_id)
{
    el->looking = el->create_rev && el->create_rev != el->granted_rev && el->lease_id == lease_id &&
                  !el->make_key_anew && !el->queue_unanswered;

    struct json_object *cmp = own_key(el);
    json_object_object_add(cmp, "target", json_object_new_string("CREATE"));
    json_object_object_add(cmp, "create_revision", etcd_json_int_str(0));
    struct json_object *compare = json_object_new_array();
    json_object_array_add(compare, cmp);

    struct json_object *first_a = etcd_deciding_range(lk, el), *first_b = etcd_deciding_range(lk, el);
    struct json_object *success = json_object_new_array(), *failure = json_object_new_array();
    if (el->looking) {
        json_object_array_add(success, etcd_op("request_range", own_key(el)));
    } else {
        struct json_object *put = own_key(el);
        json_object_object_add(put, "value", etcd_json_b64(el->owner, strlen(el->owner)));
        json_object_object_add(put, "lease", etcd_json_int_str(lease_id));
        json_object_array_add(success, etcd_op("request_put", put));
    }
    json_object_array_add(success, etcd_op("request_range", first_a));
    json_object_array_add(failure, etcd_op("request_range", own_key(el)));
    json_object_array_add(failure, etcd_op("request_range", first_b));
    return etcd_txn_of(compare, success, failure);
}

static int enqueue(struct etcd_instance *inst, const struct dlock_provider_lock *lk, struct etcd_lock *el,
                   int64_t lease_id, struct json_object **reply, struct etcd_status *st)
{
    struct json_object *txn = etcd_queueing_txn(lk, el, lease_id);
    int rc = etcd_call(&inst->http, "/v3/kv/txn", txn, reply, st);
    json_object_put(txn);
    return rc;
}

/* Whether the txn's deciding range (etcd_deciding_range) grants our key. */
static bool is_granted(const struct dlock_provider_lock *lk, const struct etcd_lock *el,
                       struct json_object *deciding)
{
    if (lk->mode == DLOCK_MODE_SHARED) {
        struct json_object *writer = etcd_first_writer(deciding);
        return !writer || etcd_json_int(writer, "create_revision") > el->create_rev; /* no older writer */
    }
    struct json_object *kv = etcd_first_kv(deciding);
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
        if (!etcd_kv_is_permit(el, older))
            return false;
    }
    return false;
}

struct json_object *etcd_predecessor_request(const struct dlock_provider_lock *lk, const struct etcd_lock *el)
{
    bool shared = lk->mode == DLOCK_MODE_SHARED;
    struct json_object *req = shared ? etcd_reader_blocking_range(el) : etcd_dir_range(el);
    json_object_object_add(req, "sort_order", json_object_new_string("DESCEND"));
    json_object_object_add(req, "sort_target", json_object_new_string("CREATE"));
    json_object_object_add(req, "limit", etcd_json_int_str(1));
    json_object_object_add(req, "max_create_revision", etcd_json_int_str(el->create_rev - 1));
    if (!shared)
        json_object_object_add(req, "keys_only", json_object_new_boolean(1));
    return req;
}

void etcd_read_predecessor(const struct dlock_provider_lock *lk, struct etcd_lock *el, struct json_object *reply)
{
    free(el->pred);
    el->pred = NULL;
    struct json_object *kv = etcd_first_kv(reply);
    el->watch_from = etcd_json_int(etcd_json_get(reply, "header"), "revision") + 1;
    if (kv && lk->mode == DLOCK_MODE_SHARED && etcd_kv_made_shared(kv))
        kv = NULL;
    if (kv) {
        char key[KEY_MAX];
        int n = etcd_json_unb64(kv, "key", key, sizeof key);
        if (n > 0 && (el->pred = malloc((size_t)n)) != NULL) {
            memcpy(el->pred, key, (size_t)n);
            el->pred_len = (size_t)n;
        }
    }
}

/* Busy: finds the key just before ours that keeps us out
 * (etcd_read_predecessor). */
static int find_predecessor(struct etcd_instance *inst, const struct dlock_provider_lock *lk,
                            struct etcd_lock *el)
{
    free(el->pred);
    el->pred = NULL;
    struct json_object *req = etcd_predecessor_request(lk, el), *reply = NULL;
    int rc = etcd_call(&inst->http, "/v3/kv/range", req, &reply, NULL);
    json_object_put(req);
    if (rc != DLOCK_OK)
        return rc;
    etcd_read_predecessor(lk, el, reply);
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
    json_object_array_add(success, etcd_op("request_put", put));
    json_object_array_add(failure, etcd_op("request_range", get));
    return etcd_send_txn(inst, compare, success, failure, reply, NULL);
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
        int n = etcd_json_unb64(etcd_first_kv(etcd_txn_response(reply, 0, "response_range")), "value", stored,
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

/* A grant on our key: its create_revision is the fence. Another key of
 * the name in the granting read is a request queued behind ours (or a try
 * about to leave): the core does not keep such a hold. */
static void grant_on_our_key(struct etcd_lock *el, struct dlock_grant *g)
{
    el->granted_rev = el->create_rev;
    __atomic_store_n(&el->wanted_floor, el->create_rev, __ATOMIC_RELEASE);
    g->fence = (uint64_t)el->create_rev;
    g->has_fence = 1;
    g->others_waiting = el->others_queued;
}

/* One attempt (etcd_acquire). */
static int attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    int rc = etcd_ensure_keys(inst, lk);
    if (rc == DLOCK_OK && lk->mode == DLOCK_MODE_SEMAPHORE && !el->permits_checked)
        rc = check_permits(inst, lk, el);
    int64_t lease_id = 0;
    if (rc == DLOCK_OK)
        rc = etcd_lease_for(inst, lk->lease_ms, &lease_id);
    if (rc != DLOCK_OK)
        return rc;
    etcd_sweep_orphans(inst);
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
        etcd_forget_lease(inst, lease_id);
        if ((rc = etcd_lease_for(inst, lk->lease_ms, &lease_id)) == DLOCK_OK)
            rc = enqueue(inst, lk, el, lease_id, &reply, &st);
    }
    el->queue_unanswered = rc != DLOCK_OK && st.sent && st.grpc_code == 0;
    el->key_unsettled = rc != DLOCK_OK && (el->queue_unanswered || adopted);
    if (rc != DLOCK_OK)
        return rc;
    struct etcd_queueing q;
    etcd_read_queueing(lk, el, reply, lease_id, &q);
    json_object_put(reply);
    if (q.gone)
        return attempt(instance, lk, g); /* queues anew: a look is made only with a key */
    if (q.stale_key) {
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
        if ((rc = etcd_delete_own_key_reporting(inst, el, &dst)) != DLOCK_OK && rc != DLOCK_ENOTOWNER) {
            etcd_remember_failed_delete(inst, el, rc);
            return rc;
        }
        el->make_key_anew = false;
        el->granted_rev = 0;
        return attempt(instance, lk, g);
    }
    if (!q.consistent)
        return dlock_seterr(DLOCK_EPROTOCOL, "%s: the queue of lock '%s' read back inconsistently (our key %s)",
                            inst->http.label, lk->name, q.created ? "just made" : "already there");
    if (q.first) {
        if (etcd_grant_if_fresh(inst, lk, el, g))
            return DLOCK_OK;
        /* Too little of the lease is left: refresh it now, after the
         * grant, so that it outlives the whole lease; if it ran out
         * meanwhile, our key went with it: not a grant. */
        if ((rc = etcd_keepalive(inst, el->lease_id)) != DLOCK_OK) {
            if (rc != DLOCK_ELOST)
                return rc;
            el->create_rev = 0;
            g->retry_hint_ms = 0;
            return DLOCK_EBUSY;
        }
        grant_on_our_key(el, g);
        return DLOCK_OK;
    }
    if (etcd_busy_without_predecessor(lk, el, &q, g))
        return DLOCK_EBUSY;
    /* Queued behind others: wait for the one just before us. */
    if ((rc = find_predecessor(inst, lk, el)) != DLOCK_OK)
        return rc;
    g->retry_hint_ms = el->pred ? -1 : 0; /* it just went: look again at once */
    return DLOCK_EBUSY;
}

void etcd_read_queueing(const struct dlock_provider_lock *lk, struct etcd_lock *el, struct json_object *reply,
                        int64_t lease_id, struct etcd_queueing *q)
{
    bool succeeded = etcd_json_get(reply, "succeeded") != NULL &&
                     json_object_get_boolean(etcd_json_get(reply, "succeeded"));
    q->at_revision = etcd_json_int(etcd_json_get(reply, "header"), "revision");
    q->gone = el->looking && succeeded;
    el->looking = false;
    if (q->gone) {
        /* Our key went while we waited (its lease ran out, or it was
         * deleted): nothing was made; the next transaction queues anew. */
        el->create_rev = 0;
        q->created = q->first = q->stale_key = false;
        q->consistent = true;
        return;
    }
    q->created = succeeded;
    struct json_object *deciding = etcd_txn_response(reply, 1, "response_range");
    bool made_shared = false;
    if (q->created) {
        struct json_object *put = etcd_txn_response(reply, 0, "response_put");
        el->create_rev = etcd_json_int(etcd_json_get(put, "header"), "revision");
        el->lease_id = lease_id;
    } else {
        struct json_object *kv = etcd_first_kv(etcd_txn_response(reply, 0, "response_range"));
        el->create_rev = etcd_json_int(kv, "create_revision");
        el->lease_id = etcd_json_int(kv, "lease");
        made_shared = etcd_kv_made_shared(kv);
    }
    q->first = is_granted(lk, el, deciding);
    /* The range's count is of every key in it, past its limit. */
    el->others_queued = lk->mode == DLOCK_MODE_EXCLUSIVE && etcd_json_int(deciding, "count") > 1;
    el->read_at_rev = q->at_revision;
    q->consistent = el->create_rev && (lk->mode == DLOCK_MODE_SHARED || etcd_first_kv(deciding));
    if (q->created)
        el->make_key_anew = false;
    q->stale_key = !q->created && el->create_rev &&
                   (el->create_rev == el->granted_rev || el->lease_id != lease_id || made_shared || el->make_key_anew);
}

bool etcd_grant_if_fresh(struct etcd_instance *inst, const struct dlock_provider_lock *lk, struct etcd_lock *el,
                         struct dlock_grant *g)
{
    /* The lease was granted or last kept alive some time ago (holds share
     * it, and nothing keeps it alive between holds), while the core counts
     * this hold's validity from this attempt. If at least two thirds of it
     * are left (it was refreshed within the last renewal interval), say
     * how much, and the core counts validity by that and renews sooner. */
    int64_t ttl_ms = (lk->lease_ms + 999) / 1000 * 1000;
    /* What is left was counted from the stamp of the refresh, over up to
     * the whole TTL: the core takes drift off for lease_ms only, so take
     * off the rest here. */
    int64_t left = etcd_lease_left_ms(inst, el->lease_id) -
                   (dlock_provider_drift_ms(ttl_ms) - dlock_provider_drift_ms(lk->lease_ms));
    if (left < lk->lease_ms - lk->lease_ms / 3)
        return false;
    grant_on_our_key(el, g);
    g->valid_ms = left < lk->lease_ms ? left : 0;
    return true;
}

bool etcd_busy_without_predecessor(const struct dlock_provider_lock *lk, struct etcd_lock *el,
                                   const struct etcd_queueing *q, struct dlock_grant *g)
{
    if (lk->mode != DLOCK_MODE_SEMAPHORE) {
        el->wait_any = false;
        return false;
    }
    /* Behind N others: any of them may let go. */
    free(el->pred);
    el->pred = NULL;
    el->wait_any = true;
    el->watch_from = q->at_revision + 1;
    g->retry_hint_ms = -1;
    return true;
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

/* Keeps a waiter's key alive for a wait of wait_ms. Nothing else does so
 * while the client holds nothing on that lease: without it the key would
 * expire during a long wait, and the waiter would lose its place in line.
 * A keepalive is sent only when the lease, by the last answer that
 * refreshed it, would not outlast the wait by a third of the lease: a wait
 * is cut in slices of the retry cap, each with a watch of its own, and a
 * keepalive a slice was a request in every hand-off that the key did not
 * need. DLOCK_ELOST: the lease, and with it the key, is gone. */
static int keep_waiter_alive(struct etcd_instance *inst, const struct dlock_provider_lock *lk,
                             const struct etcd_lock *el, int64_t wait_ms)
{
    int64_t ttl_ms = (lk->lease_ms + 999) / 1000 * 1000;
    if (etcd_lease_left_ms(inst, el->lease_id) > wait_ms + ttl_ms / 3)
        return DLOCK_OK;
    return etcd_keepalive(inst, el->lease_id);
}

/* What a wait of wait_ms watches, once the waiter's key is kept alive: *w
 * open (not sent yet), or NULL when there is nothing to watch and the core
 * should look again now. */
static int open_watch(struct etcd_instance *inst, const struct dlock_provider_lock *lk, struct etcd_lock *el,
                      int64_t wait_ms, struct etcd_watch **w)
{
    *w = NULL;
    if (!el->pred && !el->wait_any)
        return DLOCK_OK;
    int rc = keep_waiter_alive(inst, lk, el, wait_ms);
    if (rc == DLOCK_ELOST)
        return DLOCK_OK; /* its key is gone: look again (a new lease, the back of the line) */
    if (rc != DLOCK_OK)
        return rc;
    if (el->wait_any) {
        char end[KEY_MAX];
        size_t n = el->dir_len < sizeof end ? el->dir_len : sizeof end - 1;
        memcpy(end, el->dir, n);
        end[n - 1]++; /* '/' + 1: the end of the name's keys */
        return etcd_watch_open(&inst->http, el->dir, el->dir_len, end, n, el->watch_from, w);
    }
    return etcd_watch_open(&inst->http, el->pred, el->pred_len, NULL, 0, el->watch_from, w);
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
    struct etcd_watch *w;
    int rc = open_watch(inst, lk, el, timeout_ms, &w);
    if (rc != DLOCK_OK || !w)
        return rc;
    rc = etcd_watch_wait(w, timeout_ms, wake_fd);
    etcd_watch_close(w);
    return rc;
}

/* The same wait, parked on the watch's socket: the keepalive and the watch's
 * creation (its round trips) are made here, the events are read in
 * etcd_wait_disarm. */
static int etcd_wait_arm(void *instance, struct dlock_provider_lock *lk, int64_t *timeout_ms, int *fd)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    *fd = -1;
    if (el->sweep_in_the_way) {
        el->sweep_in_the_way = false;
        if (*timeout_ms > 50)
            *timeout_ms = 50;
        return DLOCK_OK;
    }
    int rc = open_watch(inst, lk, el, *timeout_ms, &el->watch);
    if (rc != DLOCK_OK)
        return rc;
    int over_rc = DLOCK_OK;
    if (!el->watch || etcd_watch_start(el->watch, *timeout_ms, fd, &over_rc)) {
        etcd_watch_close(el->watch);
        el->watch = NULL;
        if (over_rc != DLOCK_OK && over_rc != DLOCK_ETIMEDOUT)
            return over_rc;
        *timeout_ms = 0; /* nothing to watch, changed already, or the time went on the creation: look again */
    }
    return DLOCK_OK;
}

static int etcd_wait_disarm(void *instance, struct dlock_provider_lock *lk, int fired, int64_t *timeout_ms)
{
    (void)timeout_ms;
    (void)instance;
    struct etcd_lock *el = lk->priv;
    int rc = fired ? DLOCK_OK : DLOCK_ETIMEDOUT;
    if (el->watch && fired && !etcd_watch_step(el->watch, &rc))
        return DLOCK_EBUSY; /* no event yet (a part of a message): the watch goes on */
    etcd_watch_close(el->watch);
    el->watch = NULL;
    return rc;
}

/* ---- release, renewal ------------------------------------------------------------------- */

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
        struct json_object *kv = etcd_first_kv(etcd_txn_response(reply, 0, "response_range"));
        /* Made shared by an earlier send of this request, or gone. */
        done = kv && etcd_json_int(kv, "create_revision") == el->create_rev && etcd_kv_made_shared(kv);
    }
    json_object_put(reply);
    if (!done)
        return dlock_seterr(DLOCK_ELOST, "%s: the lock's key is gone or was replaced, so it was not made shared",
                            inst->http.label);
    return DLOCK_OK;
}

static void etcd_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    struct etcd_lock *el = lk->priv;
    etcd_native_forget(instance, el);
    etcd_watch_close(el->watch);
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
    if ((rc = etcd_wanted_new(&inst->http, env->wanted, env->log_handle, &inst->wanted)) != DLOCK_OK) {
        etcd_orphans_destroy(&inst->orphans);
        pthread_mutex_destroy(&inst->lease_mu);
        etcd_http_destroy(&inst->http);
        free(inst);
        return rc;
    }
    etcd_native_init(inst);
    *instance = inst;
    return DLOCK_OK;
}

/* A name whose holds may be kept: its directory's puts are watched from
 * just after the read that granted this hold, so a request made since is
 * told even if the stream starts later. Keys of this client (every owner
 * id of it starts with the client's id) are not requests of another
 * owner: another thread of ours queues in the client, not on the server. */
static int etcd_watch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    const char *colon = strchr(lk->owner, ':');
    if (!el->dir || !colon)
        return dlock_seterr(DLOCK_EINVAL, "etcd: lock '%s' has no key to watch", lk->name);
    char ours[KEY_MAX];
    size_t id_len = (size_t)(colon - lk->owner) + 1;
    if (el->dir_len + id_len > sizeof ours)
        return dlock_seterr(DLOCK_EINVAL, "etcd: lock '%s': name too long to watch", lk->name);
    memcpy(ours, el->dir, el->dir_len);
    memcpy(ours + el->dir_len, lk->owner, id_len);
    return etcd_wanted_watch(inst->wanted, lk, el->dir, el->dir_len, ours, el->dir_len + id_len, &el->wanted_floor,
                             el->read_at_rev + 1);
}

static void etcd_unwatch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    struct etcd_instance *inst = instance;
    etcd_wanted_unwatch(inst->wanted, lk);
}

static void etcd_close(void *instance)
{
    struct etcd_instance *inst = instance;
    /* Revoking the leases deletes every key on them at once, rather than
     * leaving them to the TTL; orphans on other leases are deleted first. */
    etcd_sweep_orphans(inst);
    for (int i = 0; i < MAX_LEASES; i++) {
        if (!inst->leases[i].id)
            continue;
        struct json_object *reply = NULL;
        if (etcd_lease_call(inst, "/v3/lease/revoke", "ID", inst->leases[i].id, &reply) == DLOCK_OK)
            json_object_put(reply);
    }
    etcd_wanted_free(inst->wanted);
    etcd_native_destroy(inst);
    etcd_orphans_destroy(&inst->orphans);
    pthread_mutex_destroy(&inst->lease_mu);
    etcd_http_destroy(&inst->http);
    free(inst);
}

static const struct dlock_provider etcd_provider = {
    .version = DLOCK_PROVIDER_VERSION_8,
    .name = "etcd",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_FENCE_LINEARIZABLE | DLOCK_CAP_NATIVE_WAIT |
                    DLOCK_CAP_FAIR | DLOCK_CAP_SERVER_EXPIRY | DLOCK_CAP_MULTI_HOST | DLOCK_CAP_SHARED |
                    DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE | DLOCK_CAP_ELECTION | DLOCK_CAP_CACHE,
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
    .wait_arm = etcd_wait_arm,
    .wait_disarm = etcd_wait_disarm,
    .value_put = etcd_value_put,
    .leader_get = etcd_leader_get,
    .watch_open = etcd_observer_open,
    .watch_consume = etcd_observer_consume,
    .watch_close = etcd_observer_close,
    .acquire_send = etcd_acquire_send,
    .acquire_recv = etcd_acquire_recv,
    .acquire_drop = etcd_acquire_drop,
    .release_send = etcd_release_send,
    .release_recv = etcd_release_recv,
    .release_drop = etcd_release_drop,
    .watch_wanted = etcd_watch_wanted,
    .unwatch_wanted = etcd_unwatch_wanted,
};

DLOCK_MODULE(etcd_provider)
