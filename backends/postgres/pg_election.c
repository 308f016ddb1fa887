/* backends/postgres/pg_election.c - elections on postgres, lease mode: the
 * leader is the row's exclusive owner and its term the row's fence; the
 * value is a row of "<table>_values" (name, term, value), written by one
 * statement that checks the owner's live lease on the lock row first and
 * notifies the name's channel. A reader gets the holder's fence and the
 * value in one statement (one snapshot). Observers LISTEN on the name's
 * channel, which a release, a break and a stored value notify; a leader
 * whose lease ran out is seen at the observer's next read. */
#include "config.h"

#include "pg_backend.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pg_lease_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    char term_text[24];
    snprintf(term_text, sizeof term_text, "%" PRIu64, term);
    const char *values[5] = { pl->k.key, lk->owner, term_text, len ? value : "", pl->k.tag };
    int lengths[5] = { (int)pl->k.key_len, 0, 0, (int)len, 0 }, formats[5] = { 1, 0, 0, 1, 0 };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_VALUE_PUT, 5, values, lengths, formats, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "storing an election value");
    if (rc == DLOCK_OK && PQntuples(res) != 1)
        rc = dlock_seterr(DLOCK_ELOST, "%s: this owner no longer holds the election (its lease ran out or it was "
                          "broken): the value was not stored", inst->server.label);
    PQclear(res);
    return rc;
}

int pg_lease_leader_get(void *instance, const struct sql_lock_key *k, struct dlock_provider_leader *out)
{
    struct pg_instance *inst = instance;
    const char *values[1] = { k->key };
    int lengths[1] = { (int)k->key_len }, formats[1] = { 1 };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_LEADER_GET, 1, values, lengths, formats, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "reading an election's leader");
    if (rc == DLOCK_OK && PQntuples(res) == 1) {
        if (!PQgetisnull(res, 0, 0))
            out->holder_term = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        if (out->holder_term && !PQgetisnull(res, 0, 1)) {
            out->value_term = strtoull(PQgetvalue(res, 0, 1), NULL, 10);
            size_t n = 0;
            unsigned char *bytes = PQunescapeBytea((const unsigned char *)PQgetvalue(res, 0, 2), &n);
            if (!bytes) {
                rc = dlock_seterr(DLOCK_ENOMEM, "%s: out of memory for an election value", inst->server.label);
            } else if (n > 0) {
                if ((out->value = malloc(n))) {
                    memcpy(out->value, bytes, n);
                    out->value_len = n;
                } else {
                    rc = dlock_seterr(DLOCK_ENOMEM, "%s: out of memory for an election value", inst->server.label);
                }
            }
            PQfreemem(bytes);
        }
    }
    PQclear(res);
    return rc;
}

/* An observer's own connection, LISTENing on the name's channel. */
struct pg_watch {
    PGconn *conn;
};

int pg_watch_open(void *instance, const char *name, size_t name_len, void **watch, int *fd)
{
    struct pg_instance *inst = instance;
    struct sql_lock_key k;
    int rc = sql_lock_key_init(&k, inst->head.prefix, name, name_len);
    if (rc != DLOCK_OK)
        return rc;
    struct pg_watch *w = calloc(1, sizeof *w);
    if (!w) {
        sql_lock_key_free(&k);
        return dlock_seterr(DLOCK_ENOMEM, "%s: out of memory", inst->server.label);
    }
    w->conn = pg_connect(&inst->server, &rc);
    if (w->conn) {
        char sql[48];
        snprintf(sql, sizeof sql, "LISTEN \"%s\"", k.tag);
        PGresult *res = pg_exec(&inst->server, &w->conn, sql, 0, NULL, NULL, NULL, &rc);
        if (res) {
            rc = pg_result_check(&inst->server, res, "LISTEN");
            PQclear(res);
        }
    }
    sql_lock_key_free(&k);
    if (rc != DLOCK_OK || !w->conn || PQsocket(w->conn) < 0) {
        if (rc == DLOCK_OK)
            rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: the observer's connection broke", inst->server.label);
        pg_watch_close(inst, w);
        return rc;
    }
    *watch = w;
    *fd = PQsocket(w->conn);
    return DLOCK_OK;
}

int pg_watch_consume(void *instance, void *watch)
{
    struct pg_instance *inst = instance;
    struct pg_watch *w = watch;
    /* A broken connection may have lost notifications: the core opens
     * another watch and reads the state again. */
    if (!PQconsumeInput(w->conn) || PQstatus(w->conn) != CONNECTION_OK)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: the observer's connection broke", inst->server.label);
    PGnotify *n;
    while ((n = PQnotifies(w->conn)))
        PQfreemem(n);
    return DLOCK_OK;
}

void pg_watch_close(void *instance, void *watch)
{
    (void)instance;
    struct pg_watch *w = watch;
    if (w->conn)
        PQfinish(w->conn);
    free(w);
}
