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
 * is raised under that row lock: strictly increasing per name.
 *
 * Shared holds and permits live in the same row: owner is then a marker,
 * "~s" or "~p<N>" (owner ids never start with '~'), expires_at the latest
 * holder's expiry, and holders a JSON object of owner -> expiry in ms on the
 * server's clock. The exclusive statements see a row held by someone else
 * until the last holder goes, with no change. Every decision about holders
 * is made from the row being updated (never from a separate read), which
 * PostgreSQL re-reads after waiting for a concurrent update of the row, so
 * two statements cannot both decide on an old list. A writer kept waiting,
 * by holders of any kind, registers in the row (writer, writer_until,
 * writer_fence); shared requests after it are busy until it gets its turn
 * (any grant raises the fence, which voids the registration), gives up, or
 * stops renewing the registration for two of its leases. Registering
 * behind an exclusive hold too is what lets the writer keep its place when
 * that hold is downgraded, and after its release.
 *
 * A downgrade is one UPDATE of the row that finds it still ours (by owner
 * and server time, under the row lock) and makes it the shared row of a
 * single holder, us, with the expiry we had: the name is never free or
 * anyone else's in between. The fence stays (the same hold), and with it
 * a waiting writer's registration, so the writer keeps its place. */
#include "config.h"

#include "pg_sql.h"

#include "../common/sql_text.h"

#include <dlock/provider.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Now on the server's clock in ms, as the holders' expiries are kept. */
#define NOW_MS "(extract(epoch FROM now()) * 1000)::bigint"
/* The holders of row t other than $2 that are still live, as (k, v). */
#define OTHER_LIVE_HOLDERS "jsonb_each(t.holders) AS e(k, v) WHERE k <> $2 AND v::bigint > " NOW_MS

int pg_sql_init(struct pg_sql *sql, const char *table)
{
    memset(sql, 0, sizeof *sql);
    snprintf(sql->table, sizeof sql->table, "%s", table);
    /* The name is checked to be [A-Za-z0-9_]: quoting keeps its case. */
    const char *t = table;
    char **q = sql->text;
    q[PG_EXISTS] = sql_format("SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,\n"
                              "  EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)\n"
                              "          AND attname = 'writer_fence' AND NOT attisdropped)");
    q[PG_CREATE_TABLE] = sql_format("CREATE TABLE IF NOT EXISTS \"%s\" (\n"
                                "  name bytea PRIMARY KEY,\n"
                                "  owner text,\n"
                                "  fence bigint NOT NULL,\n"
                                "  expires_at timestamptz NOT NULL,\n"
                                "  holders jsonb, writer text, writer_until timestamptz, writer_fence bigint)",
                                t);
    /* Tables made before shared holds existed get their columns. */
    q[PG_ADD_SHARED_COLUMNS] = sql_format("ALTER TABLE \"%s\" ADD COLUMN IF NOT EXISTS holders jsonb,\n"
                                          "  ADD COLUMN IF NOT EXISTS writer text,\n"
                                          "  ADD COLUMN IF NOT EXISTS writer_until timestamptz,\n"
                                          "  ADD COLUMN IF NOT EXISTS writer_fence bigint",
                                          t);
    q[PG_CREATE_SEQUENCE] = sql_format("CREATE SEQUENCE IF NOT EXISTS \"%s_fence\" AS bigint CACHE 1 NO CYCLE", t);
    /* An UPDATE of the row costs less than INSERT .. ON CONFLICT (no
     * speculative insertion, no CTE); it is tried first when the lock was
     * free the last time we looked. */
    /* A release leaves expires_at at the time it ran, so a free row's is
     * when it came free; a live head of the line would have taken it long
     * before PG_LATE_MS. */
    q[PG_TAKE_LATE] = sql_format("UPDATE \"%s\" AS t SET fence = t.fence + 1, owner = $2,\n"
                                 "  expires_at = now() + $3::bigint * interval '1 millisecond'\n"
                                 "WHERE name = $1 AND (t.owner IS NULL OR t.expires_at < now())\n"
                                 "  AND t.expires_at < now() - interval '" PG_LATE_MS " milliseconds'\n"
                                 "RETURNING fence",
                                 t);
    q[PG_TAKE] = sql_format("UPDATE \"%s\" AS t SET\n"
                        "  fence = CASE WHEN t.owner = $2 AND t.expires_at >= now() THEN t.fence ELSE t.fence + 1 END,\n"
                        "  owner = $2, expires_at = now() + $3::bigint * interval '1 millisecond'\n"
                        "WHERE name = $1 AND (t.owner IS NULL OR t.expires_at < now() OR t.owner = $2)\n"
                        "RETURNING fence",
                        t);
    q[PG_ACQUIRE] = sql_format(
        "WITH prev AS (SELECT owner, expires_at FROM \"%s\" WHERE name = $1),\n"
        "up AS (INSERT INTO \"%s\" AS t (name, owner, fence, expires_at)\n"
        "  VALUES ($1, $2, 1, now() + $3::bigint * interval '1 millisecond')\n"
        "  ON CONFLICT (name) DO UPDATE SET\n"
        "    fence = CASE WHEN t.owner = excluded.owner AND t.expires_at >= now() THEN t.fence\n"
        "                 ELSE t.fence + 1 END,\n"
        "    owner = excluded.owner, expires_at = excluded.expires_at\n"
        "  WHERE t.owner IS NULL OR t.expires_at < now() OR t.owner = excluded.owner\n"
        "  RETURNING fence)\n"
        "SELECT (SELECT fence FROM up),\n"
        "       (SELECT greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint FROM prev),\n"
        /* Busy: a client that keeps the name hears that someone asks. */
        "       (SELECT pg_notify($4, '') WHERE NOT EXISTS (SELECT 1 FROM up))",
        t, t);
    q[PG_SHARED_ACQUIRE] = sql_format(
        "WITH prev AS (SELECT owner, expires_at, holders FROM \"%s\" WHERE name = $1),\n"
        "up AS (INSERT INTO \"%s\" AS t (name, owner, fence, expires_at, holders)\n"
        "  VALUES ($1, $4, 1, now() + $3::bigint * interval '1 millisecond',\n"
        "          jsonb_build_object($2::text, " NOW_MS " + $3::bigint))\n"
        "  ON CONFLICT (name) DO UPDATE SET\n"
        "    fence = t.fence + 1,\n"
        "    owner = excluded.owner,\n"
        "    holders = (SELECT coalesce(jsonb_object_agg(k, v), '{}') FROM " OTHER_LIVE_HOLDERS "\n"
        "               AND t.owner = excluded.owner) || excluded.holders,\n"
        "    expires_at = CASE WHEN t.owner = excluded.owner AND t.expires_at > excluded.expires_at\n"
        "                 THEN t.expires_at ELSE excluded.expires_at END,\n"
        "    writer = NULL\n"
        "  WHERE (t.owner IS NULL OR t.expires_at < now() OR t.owner = excluded.owner)\n"
        "    AND ($5::bigint = 0 OR (SELECT count(*) FROM " OTHER_LIVE_HOLDERS " AND t.owner = excluded.owner) < $5)\n"
        "    AND ($5::bigint <> 0 OR t.writer IS NULL OR t.writer = $2 OR t.writer_until < now()\n"
        "         OR t.writer_fence <> t.fence)\n"
        "  RETURNING fence)\n"
        "SELECT (SELECT fence FROM up),\n"
        "       (SELECT greatest(0, CASE WHEN $5::bigint > 0 AND owner = $4\n"
        "          THEN (SELECT min(v::bigint) FROM jsonb_each(holders) AS e(k, v)) - " NOW_MS "\n"
        "          ELSE ceil(extract(epoch FROM expires_at - now()) * 1000) END)::bigint FROM prev),\n"
        "       (SELECT owner FROM prev WHERE expires_at >= now() AND left(owner, 1) = '~'),\n"
        "       (SELECT pg_notify($6, '') WHERE NOT EXISTS (SELECT 1 FROM up))",
        t, t);
    q[PG_REGISTER_WRITER] = sql_format(
        "UPDATE \"%s\" SET writer = $2, writer_until = now() + 2 * $3::bigint * interval '1 millisecond',\n"
        "  writer_fence = fence\n"
        "WHERE name = $1 AND owner IS NOT NULL AND expires_at >= now()\n"
        "  AND (writer IS NULL OR writer = $2 OR writer_until < now() OR writer_fence <> fence)",
        t);
    /* Readers were kept out by the registration only where no exclusive
     * hold keeps them out anyway: only they need waking. */
    q[PG_UNREGISTER_WRITER] = sql_format(
        "WITH r AS (UPDATE \"%s\" SET writer = NULL WHERE name = $1 AND writer = $2\n"
        "  RETURNING owner, expires_at)\n"
        "SELECT pg_notify($3, '') FROM r WHERE owner IS NULL OR left(owner, 1) = '~' OR expires_at < now()",
        t);
    /* Our own exclusive row becomes shared (holders: us alone, with our
     * expiry); or, sent again after the answer to the first was lost, our
     * entry is already in the shared row. Either way the fence stays. The
     * SET expressions all read the row as it was. */
    q[PG_DOWNGRADE] = sql_format(
        "WITH d AS (UPDATE \"%s\" AS t SET\n"
        "    holders = CASE WHEN t.owner = $2\n"
        "                   THEN jsonb_build_object($2::text, (extract(epoch FROM t.expires_at) * 1000)::bigint)\n"
        "                   ELSE t.holders END,\n"
        "    owner = '~s'\n"
        "  WHERE t.name = $1 AND t.expires_at >= now()\n"
        "    AND (t.owner = $2 OR (t.owner = '~s' AND (t.holders ->> $2)::bigint > " NOW_MS "))\n"
        "  RETURNING 1)\n"
        "SELECT pg_notify($3, '') FROM d",
        t);
    q[PG_SHARED_RELEASE] = sql_format(
        "WITH r AS (UPDATE \"%s\" AS t SET\n"
        "    holders = (SELECT coalesce(jsonb_object_agg(k, v), '{}') FROM " OTHER_LIVE_HOLDERS "),\n"
        "    owner = CASE WHEN EXISTS (SELECT 1 FROM " OTHER_LIVE_HOLDERS ") THEN t.owner END,\n"
        "    expires_at = coalesce((SELECT to_timestamp(max(v::bigint) / 1000.0) FROM " OTHER_LIVE_HOLDERS "),\n"
        "                          now())\n"
        "  WHERE t.name = $1 AND left(t.owner, 1) = '~' AND (t.holders ->> $2)::bigint > " NOW_MS "\n"
        "  RETURNING 1)\n"
        "SELECT pg_notify($3, '') FROM r",
        t);
    /* Holders of one name renewed in one batch update its row once: the
     * batch is grouped by name first (an UPDATE .. FROM meeting one row
     * twice would apply only one of the two). */
    q[PG_SHARED_RENEW_BATCH] = sql_format(
        "WITH u AS (SELECT name, array_agg(owner) AS owners, array_agg(lease) AS leases, array_agg(i) AS idx\n"
        "           FROM unnest($1::bytea[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(name, owner, lease, i)\n"
        "           GROUP BY name),\n"
        "r AS (UPDATE \"%s\" AS t SET\n"
        "    holders = t.holders || (SELECT coalesce(jsonb_object_agg(o, " NOW_MS " + l), '{}')\n"
        "        FROM unnest(u.owners, u.leases) AS x(o, l) WHERE (t.holders ->> o)::bigint > " NOW_MS "),\n"
        "    expires_at = greatest(t.expires_at, now() + (SELECT max(l) FROM unnest(u.owners, u.leases) AS x(o, l)\n"
        "        WHERE (t.holders ->> o)::bigint > " NOW_MS ") * interval '1 millisecond')\n"
        "  FROM u WHERE t.name = u.name AND left(t.owner, 1) = '~' AND t.expires_at >= now()\n"
        "  RETURNING u.owners, u.idx, t.holders)\n"
        "SELECT i FROM r, unnest(r.owners, r.idx) AS x(o, i) WHERE (r.holders ->> o)::bigint > " NOW_MS,
        t);
    q[PG_SHARED_STATUS] = sql_format(
        "SELECT count(*) FROM \"%s\" AS t, jsonb_each(t.holders) AS e(k, v)\n"
        "WHERE t.name = $1 AND v::bigint > " NOW_MS,
        t);
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
    /* One page of held names: keys starting with $1 after $2, in key
     * order; shared holders as "owner ms-left" lines. A read, no locks. */
    q[PG_LIST] = sql_format(
        "SELECT name, owner, fence, greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint,\n"
        "  (SELECT string_agg(k || ' ' || (v::bigint - " NOW_MS "), E'\\n' ORDER BY k)\n"
        "   FROM jsonb_each(t.holders) AS e(k, v) WHERE left(t.owner, 1) = '~' AND v::bigint > " NOW_MS ")\n"
        "FROM \"%s\" AS t\n"
        "WHERE name > $2::bytea AND substring(name FROM 1 FOR length($1::bytea)) = $1::bytea\n"
        "  AND owner IS NOT NULL AND expires_at >= now()\n"
        "ORDER BY name LIMIT $3::bigint",
        t);
    /* An operator's break: the holds go (holders and a waiting writer's
     * registration are void once owner is NULL and the fence moved). */
    q[PG_BREAK] = sql_format(
        "WITH r AS (UPDATE \"%s\" SET owner = NULL, expires_at = now(), fence = fence + 1\n"
        "  WHERE name = $1 AND owner IS NOT NULL AND expires_at >= now() RETURNING fence)\n"
        "SELECT fence, pg_notify($2, '') FROM r",
        t);
    /* An election's value, in a table of its own so that the lock table's
     * rows stay as they are. Stored only while $2 holds the row
     * exclusively (an owner starting with '~' is the mark of shared
     * holds); FOR SHARE keeps a takeover of the row waiting until this
     * commits. */
    q[PG_CREATE_VALUES] = sql_format("CREATE TABLE IF NOT EXISTS \"%s_values\" (\n"
                                     "  name bytea PRIMARY KEY, term bigint NOT NULL, value bytea NOT NULL)",
                                     t);
    q[PG_VALUE_PUT] = sql_format(
        "WITH h AS (SELECT 1 FROM \"%s\" WHERE name = $1 AND owner = $2 AND left(owner, 1) <> '~'\n"
        "  AND fence = $3::bigint AND expires_at >= now() FOR SHARE),\n"
        "v AS (INSERT INTO \"%s_values\" AS v (name, term, value) SELECT $1, $3::bigint, $4 FROM h\n"
        "  ON CONFLICT (name) DO UPDATE SET term = excluded.term, value = excluded.value RETURNING 1)\n"
        "SELECT pg_notify($5, '') FROM v",
        t, t);
    q[PG_LEADER_GET] = sql_format(
        "SELECT (SELECT fence FROM \"%s\" WHERE name = $1 AND owner IS NOT NULL AND left(owner, 1) <> '~'\n"
        "          AND expires_at >= now()),\n"
        "       v.term, v.value\n"
        "FROM (SELECT 1) AS one LEFT JOIN \"%s_values\" AS v ON v.name = $1",
        t, t);
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
