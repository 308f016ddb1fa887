/* backends/etcd/etcd_release.c - deleting our keys: a release, a
 * waiter that gives up, and the orphans, keys whose delete got no answer,
 * which are remembered and deleted later (etcd_orphans.h) so that the
 * shared lease the client's other holds keep alive does not keep them
 * too. */
#include "config.h"

#include "etcd_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deletes key if its create_revision is create_rev (any, when 0): a
 * release sent twice, or late, never deletes a newer key of the same
 * owner. DLOCK_OK with *deleted set, or the failure (st says whether the
 * request may have reached the server). */
struct json_object *etcd_delete_txn(const char *key, size_t key_len, int64_t create_rev)
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
    json_object_array_add(success, etcd_op("request_delete_range", del));
    struct json_object *txn = json_object_new_object();
    json_object_object_add(txn, "compare", compare);
    json_object_object_add(txn, "success", success);
    return txn;
}

bool etcd_txn_succeeded(struct json_object *reply)
{
    return etcd_json_get(reply, "succeeded") && json_object_get_boolean(etcd_json_get(reply, "succeeded"));
}

int etcd_delete_key(struct etcd_instance *inst, const char *key, size_t key_len, int64_t create_rev, bool *deleted,
                      struct etcd_status *st)
{
    struct json_object *txn = etcd_delete_txn(key, key_len, create_rev), *reply = NULL;
    int rc = etcd_call(&inst->http, "/v3/kv/txn", txn, &reply, st);
    json_object_put(txn);
    if (rc != DLOCK_OK)
        return rc;
    *deleted = etcd_txn_succeeded(reply);
    json_object_put(reply);
    return DLOCK_OK;
}

/* Deletes our key if its create_revision is still ours. DLOCK_OK,
 * DLOCK_ENOTOWNER (no key of ours, or no longer the one we made), or the
 * failure, with el unchanged. */
int etcd_delete_own_key_reporting(struct etcd_instance *inst, struct etcd_lock *el, struct etcd_status *st)
{
    st->grpc_code = 0;
    st->sent = false;
    if (!el->key || !el->create_rev)
        return DLOCK_ENOTOWNER;
    bool deleted = false;
    int rc = etcd_delete_key(inst, el->key, el->key_len, el->create_rev, &deleted, st);
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
        create_rev = etcd_json_int(etcd_first_kv(reply), "create_revision");
        json_object_put(reply);
        /* Never made, or gone; but a queueing that got no answer may still
         * be on its way to the server: kept until it cannot be. */
        if (!create_rev)
            return age_ms > 2 * inst->http.command_timeout_ms + 1000 ? DLOCK_OK : DLOCK_EBUSY;
    }
    return etcd_delete_key(inst, key, key_len, create_rev, &deleted, &st);
}

void etcd_sweep_orphans(struct etcd_instance *inst)
{
    etcd_orphans_sweep(&inst->orphans, delete_orphan, inst);
}

/* A delete that failed (not sent, not answered, or refused) leaves our key
 * on a lease that our other holds keep alive: remember it, so a sweep
 * deletes it. */
void etcd_remember_failed_delete(struct etcd_instance *inst, struct etcd_lock *el, int rc)
{
    if (rc == DLOCK_OK || rc == DLOCK_ENOTOWNER)
        return;
    if (etcd_orphans_add(&inst->orphans, el->key, el->key_len, el->create_rev) != DLOCK_OK)
        return; /* out of memory: the lease frees it once no hold of ours keeps it alive */
}

int etcd_release(void *instance, struct dlock_provider_lock *lk)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    struct etcd_status st;
    /* Sent before without an answer (release_recv): a key found gone was
     * that delete's work (only our own key, of our revision, is deleted). */
    bool sent_before = el->release_sent_before;
    el->release_sent_before = false;
    int rc = etcd_delete_own_key_reporting(inst, el, &st);
    etcd_remember_failed_delete(inst, el, rc);
    return rc == DLOCK_ENOTOWNER && sent_before ? DLOCK_OK : rc;
}

void etcd_abandon(void *instance, struct dlock_provider_lock *lk)
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
    int rc = etcd_delete_own_key_reporting(inst, el, &st);
    etcd_remember_failed_delete(inst, el, rc);
}
