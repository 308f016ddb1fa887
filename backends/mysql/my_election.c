/* backends/mysql/my_election.c - elections on mysql, lease mode: the
 * leader is the row's exclusive owner and its term the row's fence; the
 * value is a row of `<table>_values` (name, term, value), written by one
 * INSERT .. SELECT that finds the owner's live lease on the lock row
 * first, so a leader whose lease ran out cannot. A reader gets the
 * holder's fence and the value in one statement. MySQL has no
 * notifications: observers read every retry_cap_ms. */
#include "config.h"

#include "my_backend.h"

#include <stdlib.h>
#include <string.h>

int my_lease_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    struct my_param p[5] = { my_integer((long long)term), my_bytes(len ? value : "", len),
                             my_bytes(ml->k.key, ml->k.key_len), my_bytes(lk->owner, strlen(lk->owner)),
                             my_integer((long long)term) };
    struct my_outcome o = { .affected = 0 };
    int rc = my_pool_run(&inst->pool, MY_VALUE_PUT, p, 5, -1, &o);
    /* Found rows (CLIENT_FOUND_ROWS): a value stored again as it was
     * counts, so 0 means the owner's hold was not there. */
    if (rc == DLOCK_OK && o.affected == 0)
        rc = dlock_seterr(DLOCK_ELOST, "%s: this owner no longer holds the election (its lease ran out or it was "
                          "broken): the value was not stored", inst->server.label);
    return rc;
}

int my_lease_leader_get(void *instance, const struct sql_lock_key *k, struct dlock_provider_leader *out)
{
    struct my_instance *inst = instance;
    char *buf = malloc(DLOCK_VALUE_MAX + 1);
    if (!buf)
        return dlock_seterr(DLOCK_ENOMEM, "%s: out of memory for an election value", inst->server.label);
    struct my_param p[2] = { my_bytes(k->key, k->key_len), my_bytes(k->key, k->key_len) };
    struct my_outcome o;
    int rc = my_pool_run_blob(&inst->pool, MY_LEADER_GET, p, 2, 2, buf, DLOCK_VALUE_MAX + 1, &o);
    if (rc == DLOCK_OK && o.has_row && !o.nulls[0]) {
        out->holder_term = (uint64_t)o.ints[0];
        if (!o.nulls[1]) {
            out->value_term = (uint64_t)o.ints[1];
            if (o.blob_len > DLOCK_VALUE_MAX) {
                rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: an election value of %lu bytes, more than %d",
                                  inst->server.label, o.blob_len, DLOCK_VALUE_MAX);
            } else if (o.blob_len > 0) {
                out->value = buf;
                out->value_len = o.blob_len;
                buf = NULL;
            }
        }
    }
    free(buf);
    return rc;
}
