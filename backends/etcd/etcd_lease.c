/* backends/etcd/etcd_lease.c - the client's leases, one per lease
 * length and shared by every hold of that length, and the renewal of
 * holds: a keepalive of each lease, then one range read proving each key
 * still ours. */
#include "config.h"

#include "etcd_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A lease request whose body is one integer field ({"TTL": n}, {"ID": n}). */
int etcd_lease_call(struct etcd_instance *inst, const char *path, const char *field, int64_t value,
                      struct json_object **reply)
{
    struct json_object *req = json_object_new_object();
    json_object_object_add(req, field, etcd_json_int_str(value));
    int rc = etcd_call(&inst->http, path, req, reply, NULL);
    json_object_put(req);
    return rc;
}

/* The lease for holds of lease_ms, granted now if there is none. */
bool etcd_lease_known(struct etcd_instance *inst, int64_t lease_ms, int64_t *id)
{
    int64_t ttl = (lease_ms + 999) / 1000;
    bool found = false;
    pthread_mutex_lock(&inst->lease_mu);
    for (int i = 0; i < MAX_LEASES && !found; i++) {
        if (inst->leases[i].id && inst->leases[i].ttl_s == ttl) {
            *id = inst->leases[i].id;
            found = true;
        }
    }
    pthread_mutex_unlock(&inst->lease_mu);
    return found;
}

int etcd_lease_for(struct etcd_instance *inst, int64_t lease_ms, int64_t *id)
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
    int rc = etcd_lease_call(inst, "/v3/lease/grant", "TTL", ttl, &reply);
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
int64_t etcd_lease_left_ms(struct etcd_instance *inst, int64_t id)
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
void etcd_lease_refreshed(struct etcd_instance *inst, int64_t id, int64_t sent, int64_t ttl_s)
{
    pthread_mutex_lock(&inst->lease_mu);
    for (int i = 0; i < MAX_LEASES; i++)
        if (inst->leases[i].id == id && sent + ttl_s * 1000 > inst->leases[i].alive_until)
            inst->leases[i].alive_until = sent + ttl_s * 1000;
    pthread_mutex_unlock(&inst->lease_mu);
}

/* The lease is gone on the server (expired or revoked): forget it, so the
 * next acquire grants a new one. */
void etcd_forget_lease(struct etcd_instance *inst, int64_t id)
{
    pthread_mutex_lock(&inst->lease_mu);
    for (int i = 0; i < MAX_LEASES; i++)
        if (inst->leases[i].id == id)
            inst->leases[i].id = 0;
    pthread_mutex_unlock(&inst->lease_mu);
}

/* One keepalive for a lease: DLOCK_OK (alive), DLOCK_ELOST (expired or
 * revoked), or a failure. */
int etcd_keepalive(struct etcd_instance *inst, int64_t id)
{
    struct json_object *reply = NULL;
    int64_t sent = dlock_provider_stamp_ms();
    int rc = etcd_lease_call(inst, "/v3/lease/keepalive", "ID", id, &reply);
    if (rc != DLOCK_OK)
        return rc;
    int64_t ttl = etcd_json_int(etcd_json_get(reply, "result"), "TTL");
    json_object_put(reply);
    if (ttl > 0) {
        etcd_lease_refreshed(inst, id, sent, ttl);
        return DLOCK_OK;
    }
    etcd_forget_lease(inst, id);
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
int etcd_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
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
        int rc = etcd_keepalive(inst, ids[k]);
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
    etcd_sweep_orphans(inst);
    return DLOCK_OK;
}

int etcd_renew(void *instance, struct dlock_provider_lock *lk)
{
    int result;
    struct dlock_provider_lock *one[1] = { lk };
    int rc = etcd_renew_batch(instance, one, 1, &result);
    return rc != DLOCK_OK ? rc : result;
}
