/* backends/postgres/pg_sql.c - see pg_sql.h.
 *
 * Lease mode keeps one row per name: (name bytea, owner, fence, expires_at).
 * A release frees the row (owner NULL) instead of deleting it, because the
 * row carries the name's fence: a deleted row would restart the count and
 * hand the next holder a token lower than the last one (Redis keeps its
 * fence key for the same reason). Every comparison with time uses the
 * server's now(), never the client's clock.
 *
 * The upsert takes the row when it is free, expired or already ours; on
 * conflict PostgreSQL locks the row and re-checks the WHERE against its
 * newest version, so two contenders can never both take it, and the fence
 * is raised under that row lock: strictly increasing per name. */
#include "config.h"

#include "pg_sql.h"

#include "../common/sql_text.h"

#include <dlock/provider.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pg_sql_init(struct pg_sql *sql, const char *table)
{
    memset(sql, 0, sizeof *sql);
    snprintf(sql->table, sizeof sql->table, "%s", table);
    /* The name is checked to be [A-Za-z0-9_]: quoting keeps its case. */
    const char *t = table;
    char **q = sql->text;
    q[PG_EXISTS] = sql_format("SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL");
    q[PG_CREATE_TABLE] = sql_format("CREATE TABLE IF NOT EXISTS \"%s\" (\n"
                                "  name bytea PRIMARY KEY,\n"
                                "  owner text,\n"
                                "  fence bigint NOT NULL,\n"
                                "  expires_at timestamptz NOT NULL)",
                                t);
    q[PG_CREATE_SEQUENCE] = sql_format("CREATE SEQUENCE IF NOT EXISTS \"%s_fence\" AS bigint CACHE 1 NO CYCLE", t);
    /* An UPDATE of the row costs less than INSERT .. ON CONFLICT (no
     * speculative insertion, no CTE); it is tried first when the lock was
     * free the last time we looked. */
    q[PG_TAKE] = sql_format("UPDATE \"%s\" AS t SET\n"
                        "  fence = CASE WHEN t.owner = $2 AND t.expires_at >= now() THEN t.fence ELSE t.fence + 1 END,\n"
                        "  owner = $2, expires_at = now() + $3::bigint * interval '1 millisecond'\n"
                        "WHERE name = $1 AND (t.owner IS NULL OR t.expires_at < now() OR t.owner = $2)\n"
                        "RETURNING fence",
                        t);
    q[PG_ACQUIRE] = sql_format(
        "WITH prev AS (SELECT expires_at FROM \"%s\" WHERE name = $1),\n"
        "up AS (INSERT INTO \"%s\" AS t (name, owner, fence, expires_at)\n"
        "  VALUES ($1, $2, 1, now() + $3::bigint * interval '1 millisecond')\n"
        "  ON CONFLICT (name) DO UPDATE SET\n"
        "    fence = CASE WHEN t.owner = excluded.owner AND t.expires_at >= now() THEN t.fence\n"
        "                 ELSE t.fence + 1 END,\n"
        "    owner = excluded.owner, expires_at = excluded.expires_at\n"
        "  WHERE t.owner IS NULL OR t.expires_at < now() OR t.owner = excluded.owner\n"
        "  RETURNING fence)\n"
        "SELECT (SELECT fence FROM up),\n"
        "       (SELECT greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint FROM prev)",
        t, t);
    /* Renewals, of one hold or of every hold due together, in one
     * statement: the arrays are zipped by unnest, and the positions of the
     * rows still ours come back (the others expired or were taken). */
    q[PG_RENEW_BATCH] = sql_format("UPDATE \"%s\" AS t SET expires_at = now() + u.lease * interval '1 millisecond'\n"
                               "FROM unnest($1::bytea[], $2::text[], $3::bigint[])\n"
                               "  WITH ORDINALITY AS u(name, owner, lease, i)\n"
                               "WHERE t.name = u.name AND t.owner = u.owner AND t.expires_at >= now()\n"
                               "RETURNING u.i",
                               t);
    q[PG_RELEASE] = sql_format("WITH r AS (UPDATE \"%s\" SET owner = NULL, expires_at = now()\n"
                           "  WHERE name = $1 AND owner = $2 AND expires_at >= now() RETURNING 1)\n"
                           "SELECT pg_notify($3, '') FROM r",
                           t);
    q[PG_STATUS] = sql_format("SELECT owner, fence, greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint,\n"
                          "       owner IS NOT NULL AND expires_at >= now()\n"
                          "FROM \"%s\" WHERE name = $1",
                          t);
    q[PG_SESSION_ACQUIRE] = sql_format("SELECT pg_try_advisory_lock($1::bigint)");
    /* Drawn on demand, only while this session holds the lock: the last
     * holder drew its own before unlocking, so with a sequence without
     * cache the tokens of those who ask strictly increase. */
    q[PG_SESSION_FENCE] = sql_format("SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'\n"
                                 "    AND pid = pg_backend_pid() AND objsubid = 1 AND granted\n"
                                 "    AND ((classid::bigint << 32) | objid::bigint) = $1::bigint)\n"
                                 "  THEN nextval('\"%s_fence\"') END",
                                 t);
    q[PG_SESSION_CHECK] = sql_format("SELECT 1");
    q[PG_SESSION_RELEASE] = sql_format("SELECT pg_advisory_unlock($1::bigint), pg_notify($2, '')");
    q[PG_SESSION_STATUS] = sql_format("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1\n"
                                  "  AND granted AND ((classid::bigint << 32) | objid::bigint) = $1::bigint");
    for (int i = 0; i < PG_STATEMENT_COUNT; i++)
        if (!q[i]) {
            pg_sql_free(sql);
            return dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory");
        }
    return DLOCK_OK;
}

void pg_sql_free(struct pg_sql *sql)
{
    for (int i = 0; i < PG_STATEMENT_COUNT; i++)
        free(sql->text[i]);
    memset(sql, 0, sizeof *sql);
}

int pg_sql_renew_batch_arrays(const struct sql_renew_batch *b, char *out[3])
{
    /* Sizes first: each key is "\\x<hex>" in quotes ('\\' is how an array
     * literal spells a backslash, and bytea reads "\x<hex>"), each owner is
     * quoted, each lease at most 20 digits; plus commas and braces. */
    size_t klen = 3, olen = 3, llen = 3;
    for (size_t i = 0; i < b->n; i++) {
        klen += 2 * b->keys[i]->key_len + 6;
        olen += strlen(b->owners[i]) + 3;
        llen += 22;
    }
    out[0] = malloc(klen);
    out[1] = malloc(olen);
    out[2] = malloc(llen);
    if (!out[0] || !out[1] || !out[2]) {
        for (int j = 0; j < 3; j++) {
            free(out[j]);
            out[j] = NULL;
        }
        return dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory for a renewal batch of %zu", b->n);
    }
    char *k = out[0], *o = out[1], *l = out[2];
    *k++ = '{';
    *o++ = '{';
    *l++ = '{';
    for (size_t i = 0; i < b->n; i++) {
        if (i > 0) {
            *k++ = ',';
            *o++ = ',';
            *l++ = ',';
        }
        memcpy(k, "\"\\\\x", 4);
        k = sql_hex(k + 4, b->keys[i]->key, b->keys[i]->key_len);
        *k++ = '"';
        o += sprintf(o, "\"%s\"", b->owners[i]);
        l += sprintf(l, "%" PRId64, b->leases[i]);
    }
    strcpy(k, "}");
    strcpy(o, "}");
    strcpy(l, "}");
    return DLOCK_OK;
}
