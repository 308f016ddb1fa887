/* backends/mysql/my_sql.c - see my_sql.h.
 *
 * Lease mode keeps one row per name: (name, owner, fence, expires_at in UTC
 * milliseconds of the server's clock). As in the postgres backend, release
 * frees the row instead of deleting it, because the row carries the name's
 * fence and MySQL has no sequence to draw a higher one from after a delete.
 *
 * The acquire is one INSERT ... ON DUPLICATE KEY UPDATE. InnoDB locks the
 * row for the update, so two contenders cannot both take it, and the fence
 * is raised under that lock. MySQL evaluates the SET list left to right
 * with each assignment seeing the ones before it, so the order matters:
 * fence and owner are decided from the old owner and expiry, and expires_at
 * last, from the owner just written. The statement cannot return a row, so
 * it reports through LAST_INSERT_ID(expr), which the OK packet carries:
 * the fence on a grant, MY_BUSY_MARK + the holder's remaining ms when busy.
 *
 * Shared holds and permits live in the same row, as in the postgres
 * backend: owner is the kind ("~s", "~p<N>"), expires_at the latest
 * holder's expiry, holders a JSON object of owner -> expiry in ms. A
 * permit request that finds none free is told the earliest holder's
 * expiry, when the first permit comes free if nobody lets go. Their
 * acquire is one UPDATE of the row (made first if missing) that decides
 * once, into @dlock_take, from the row InnoDB has locked for the update,
 * and every later assignment follows that decision. A writer kept waiting,
 * by holders of any kind, registers in the row (writer, writer_until,
 * writer_fence), and shared requests after it are busy until a grant
 * raises the fence, it gives up, or two of its leases pass unrenewed.
 *
 * A downgrade is one UPDATE that finds the row still ours (by owner and
 * server time, under InnoDB's row lock) and makes it the shared row of a
 * single holder, us, with the expiry we had, so the name is never free or
 * anyone else's in between. The fence stays (the same hold), and with it
 * a waiting writer's registration, so the writer keeps its place.
 *
 * Waiting (mysql.c): the waiter at the head of a name's line writes the
 * server's id of its waiting connection into the row's waker column, but
 * only while the row is still busy for it (MY_ARM, MY_SHARED_ARM, under
 * InnoDB's row lock, so no release slips between its look and this), then
 * sleeps in the server. Every statement that frees the row, or a place in
 * it, takes the waker out in the same UPDATE and reports it through
 * LAST_INSERT_ID (TAKE_WAKER), and the client ends that sleep with KILL
 * QUERY; with no waker the id is 0 and a release costs nothing more. A
 * grant of a free or expired row clears a waker left behind by a head whose
 * sleep ran out. A table without the column gets statements without it.
 *
 * The waker column also says that a holder was asked for its name: a busy
 * answer leaves 0 in it when it is empty (0 wakes nobody), and a head that
 * leaves while armed, or a writer that stops waiting, puts 0 back in place
 * of the id it takes out. A client that keeps
 * released holds polls its names for a waker (my_wanted.c); whatever frees
 * the row, or grants it anew, clears the mark with the rest. */
#include "config.h"

#include "my_sql.h"

#include "../common/sql_text.h"

#include <dlock/provider.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The server's clock, UTC (the session's time_zone is +00:00), in ms. */
#define NOW_MS "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
#define FREE_OR_EXPIRED "(owner IS NULL OR expires_at < " NOW_MS ")"
/* Free or expired for MY_LATE_MS already (a release leaves expires_at at
 * the time it ran): a live head of the line would have taken it by then. */
#define FREE_FOR_LONG "(" FREE_OR_EXPIRED " AND expires_at < " NOW_MS " - " MY_LATE_MS ")"
/* The holders of the row as (j.k), with their expiry HOLDER_EXPIRY. */
#define HOLDER_KEYS "JSON_TABLE(JSON_KEYS(COALESCE(holders, '{}')), '$[*]' COLUMNS (k VARCHAR(100) PATH '$')) AS j"
#define HOLDER_EXPIRY "JSON_EXTRACT(holders, CONCAT('$.\"', j.k, '\"'))"
#define OWNER_PATH "CONCAT('$.\"', ?, '\"')"
/* Reads the waker out of the row into LAST_INSERT_ID (0: none) and leaves
 * NULL in its place: an assignment to waker. */
#define TAKE_WAKER "NULLIF(0 * LAST_INSERT_ID(COALESCE(waker, 0)), 0)"
/* The same for a row that stays held: a waker taken out leaves the mark
 * of a request (0) in its place, and a mark stays. */
#define TAKE_WAKER_MARKED "IF(LAST_INSERT_ID(COALESCE(waker, 0)) = 0 AND waker IS NULL, NULL, 0)"
/* Whether a shared or permit request may take the row now. Parameters:
 * kind, kind, owner, permits, permits, permits, owner. */
#define SHARED_TAKE "(owner IS NULL OR expires_at < " NOW_MS " OR owner = ?)\n" \
    "      AND (SELECT COUNT(*) FROM " HOLDER_KEYS "\n" \
    "           WHERE owner = ? AND j.k <> ? AND " HOLDER_EXPIRY " > " NOW_MS ") < IF(? = 0, 4294967296, ?)\n" \
    "      AND (? <> 0 OR writer IS NULL OR writer = ? OR writer_until < " NOW_MS " OR writer_fence <> fence)"

/* The exclusive acquire (see the top of this file), granting when the
 * row's state is free (an SQL condition on owner and expires_at). */
static char *acquire_text(const char *t, const char *free_cond, bool waker)
{
    return sql_format(
        "INSERT INTO `%s` (name, owner, fence, expires_at)\n"
        "VALUES (?, ?, LAST_INSERT_ID(1), " NOW_MS " + ?)\n"
        "ON DUPLICATE KEY UPDATE\n"
        "%s%s%s"
        "  fence = IF(%s, LAST_INSERT_ID(fence + 1),\n"
        "             IF(owner = VALUES(owner), LAST_INSERT_ID(fence),\n"
        "                fence + 0 * LAST_INSERT_ID(%llu + GREATEST(expires_at - " NOW_MS ", 0)))),\n"
        "  owner = IF(%s OR owner = VALUES(owner), VALUES(owner), owner),\n"
        "  expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)",
        t, waker ? "  waker = IF(" : "", waker ? free_cond : "",
        waker ? ", NULL, IF(owner = VALUES(owner), waker, COALESCE(waker, 0))),\n" : "", free_cond,
        (unsigned long long)MY_BUSY_MARK, free_cond);
}

int my_sql_init(struct my_sql *sql, const char *table, bool waker)
{
    memset(sql, 0, sizeof *sql);
    snprintf(sql->table, sizeof sql->table, "%s", table);
    const char *t = table; /* checked to be [A-Za-z0-9_]: backquoting is enough */
    sql->create_table = sql_format("CREATE TABLE IF NOT EXISTS `%s` (\n"
                               "  name VARBINARY(600) NOT NULL PRIMARY KEY,\n"
                               "  owner VARCHAR(100) NULL,\n"
                               "  fence BIGINT UNSIGNED NOT NULL,\n"
                               "  expires_at BIGINT NOT NULL,\n"
                               "  holders JSON NULL,\n"
                               "  writer VARCHAR(100) NULL,\n"
                               "  writer_until BIGINT NULL,\n"
                               "  writer_fence BIGINT UNSIGNED NULL,\n"
                               "  waker BIGINT UNSIGNED NULL\n"
                               ") ENGINE=InnoDB",
                               t);
    sql->add_shared_columns = sql_format("ALTER TABLE `%s` ADD COLUMN holders JSON NULL,\n"
                                         "  ADD COLUMN writer VARCHAR(100) NULL,\n"
                                         "  ADD COLUMN writer_until BIGINT NULL,\n"
                                         "  ADD COLUMN writer_fence BIGINT UNSIGNED NULL",
                                         t);
    sql->add_waker_column = sql_format("ALTER TABLE `%s` ADD COLUMN waker BIGINT UNSIGNED NULL", t);
    /* An election's value, in a table of its own so that the lock table's
     * rows stay as they are; stored only while the owner holds the row
     * exclusively (an owner starting with '~' marks shared holds). */
    sql->create_values = sql_format("CREATE TABLE IF NOT EXISTS `%s_values` (\n"
                                    "  name VARBINARY(600) NOT NULL PRIMARY KEY,\n"
                                    "  term BIGINT UNSIGNED NOT NULL,\n"
                                    "  value BLOB NOT NULL\n"
                                    ") ENGINE=InnoDB",
                                    t);
    sql->text[MY_VALUE_PUT] = sql_format(
        "INSERT INTO `%s_values` (name, term, value)\n"
        "SELECT name, ?, ? FROM `%s` WHERE name = ? AND owner = ? AND LEFT(owner, 1) <> '~'\n"
        "  AND fence = ? AND expires_at >= " NOW_MS " LOCK IN SHARE MODE\n"
        "ON DUPLICATE KEY UPDATE term = VALUES(term), value = VALUES(value)",
        t, t);
    sql->text[MY_LEADER_GET] = sql_format(
        "SELECT (SELECT fence FROM `%s` WHERE name = ? AND owner IS NOT NULL AND LEFT(owner, 1) <> '~'\n"
        "          AND expires_at >= " NOW_MS "),\n"
        "       v.term, v.value\n"
        "FROM (SELECT 1) AS one LEFT JOIN `%s_values` AS v ON v.name = ?",
        t, t);
    /* The waker assignments, or nothing for a table without the column. */
    const char *take = waker ? ",\n  waker = " TAKE_WAKER : "";
    sql->text[MY_ACQUIRE] = acquire_text(t, FREE_OR_EXPIRED, waker);
    sql->text[MY_ACQUIRE_LATE] = acquire_text(t, FREE_FOR_LONG, waker);
    sql->text[MY_ENSURE_ROW] = sql_format("INSERT INTO `%s` (name, owner, fence, expires_at) VALUES (?, NULL, 0, 0)\n"
                                          "ON DUPLICATE KEY UPDATE name = name",
                                          t);
    /* Parameters: kind, kind, owner, permits, permits, permits, owner, kind,
     * kind, owner, lease, kind, lease, kind, key. */
    sql->text[MY_SHARED_ACQUIRE] = sql_format(
        "UPDATE `%s` SET\n"
        "  fence = IF((@dlock_take := " SHARED_TAKE "),\n"
        "    LAST_INSERT_ID(fence + 1),\n"
        "    IF(owner <> ? AND LEFT(owner, 1) = '~' AND expires_at >= " NOW_MS ",\n"
        "       fence + 0 * LAST_INSERT_ID(%llu + CAST(CONCAT('0', SUBSTRING(owner, 3)) AS UNSIGNED)),\n"
        "       fence + 0 * LAST_INSERT_ID(%llu + GREATEST(IF(LEFT(owner, 2) = '~p',\n"
        "         COALESCE((SELECT MIN(CAST(" HOLDER_EXPIRY " AS SIGNED)) FROM " HOLDER_KEYS "\n"
        "                   WHERE " HOLDER_EXPIRY " > " NOW_MS "), expires_at),\n"
        "         expires_at) - " NOW_MS ", 0)))),\n"
        "%s"
        "  holders = IF(@dlock_take, JSON_SET(COALESCE((SELECT JSON_OBJECTAGG(j.k, " HOLDER_EXPIRY ")\n"
        "      FROM " HOLDER_KEYS " WHERE owner = ? AND " HOLDER_EXPIRY " > " NOW_MS "), JSON_OBJECT()),\n"
        "    " OWNER_PATH ", " NOW_MS " + ?), holders),\n"
        "  expires_at = IF(@dlock_take, GREATEST(IF(owner = ?, expires_at, 0), " NOW_MS " + ?), expires_at),\n"
        "  owner = IF(@dlock_take, ?, owner),\n"
        "  writer = IF(@dlock_take, NULL, writer)\n"
        "WHERE name = ?",
        t, (unsigned long long)MY_KIND_MARK, (unsigned long long)MY_BUSY_MARK,
        waker ? "  waker = IF(@dlock_take, IF(" FREE_OR_EXPIRED ", NULL, waker), COALESCE(waker, 0)),\n" : "");
    /* owner, lease, lease, key, owner */
    sql->text[MY_SHARED_RENEW] = sql_format(
        "UPDATE `%s` SET holders = JSON_SET(holders, " OWNER_PATH ", " NOW_MS " + ?),\n"
        "  expires_at = GREATEST(expires_at, " NOW_MS " + ?)\n"
        "WHERE name = ? AND LEFT(owner, 1) = '~' AND expires_at >= " NOW_MS "\n"
        "  AND JSON_EXTRACT(holders, " OWNER_PATH ") > " NOW_MS,
        t);
    /* owner, key, owner: the others still live stay; the last one out frees
     * the row (holders is assigned first, so the later ones see the rest).
     * Any release takes the waker: a permit came free, the name did, or
     * the row's expiry moved closer (the holder left was due sooner), and a
     * writer armed against the readers sleeps no longer than that. */
    sql->text[MY_SHARED_RELEASE] = sql_format(
        "UPDATE `%s` SET\n"
        "  holders = COALESCE((SELECT JSON_OBJECTAGG(j.k, " HOLDER_EXPIRY ") FROM " HOLDER_KEYS "\n"
        "                      WHERE j.k <> ? AND " HOLDER_EXPIRY " > " NOW_MS "), JSON_OBJECT()),\n"
        "  expires_at = COALESCE((SELECT MAX(CAST(" HOLDER_EXPIRY " AS SIGNED)) FROM " HOLDER_KEYS "), " NOW_MS "),\n"
        "  owner = IF(JSON_LENGTH(holders) = 0, NULL, owner)%s\n"
        "WHERE name = ? AND LEFT(owner, 1) = '~' AND JSON_EXTRACT(holders, " OWNER_PATH ") > " NOW_MS,
        t, take);
    /* owner, lease, key, owner */
    sql->text[MY_REGISTER_WRITER] = sql_format(
        "UPDATE `%s` SET writer = ?, writer_until = " NOW_MS " + 2 * ?, writer_fence = fence\n"
        "WHERE name = ? AND owner IS NOT NULL AND expires_at >= " NOW_MS "\n"
        "  AND (writer IS NULL OR writer = ? OR writer_until < " NOW_MS " OR writer_fence <> fence)",
        t);
    sql->text[MY_UNREGISTER_WRITER] = sql_format("UPDATE `%s` SET writer = NULL%s WHERE name = ? AND writer = ?", t,
                                                 waker ? ",\n  waker = " TAKE_WAKER_MARKED : "");
    /* owner, owner, key, owner, owner: our own exclusive row becomes shared
     * (holders: us alone, with our expiry); or, sent again after the
     * answer to the first was lost, our entry is already in the shared
     * row. Either way the fence stays. Each assignment sees the ones
     * before it: holders reads owner before it changes. */
    sql->text[MY_DOWNGRADE] = sql_format(
        "UPDATE `%s` SET\n"
        "  holders = IF(owner = ?, JSON_SET(JSON_OBJECT(), " OWNER_PATH ", expires_at), holders),\n"
        "  owner = '~s'%s\n"
        "WHERE name = ? AND expires_at >= " NOW_MS "\n"
        "  AND (owner = ? OR (owner = '~s' AND JSON_EXTRACT(holders, " OWNER_PATH ") > " NOW_MS "))",
        t, take);
    sql->text[MY_SHARED_STATUS] = sql_format(
        "SELECT COUNT(*) FROM `%s` AS t, " HOLDER_KEYS " WHERE t.name = ? AND " HOLDER_EXPIRY " > " NOW_MS, t);
    /* key: an operator's break (holders and a waiting writer's registration
     * are void once owner is NULL and the fence moved). */
    /* The fence takes LAST_INSERT_ID, so the waker goes into @dlock_waker,
     * read on the same connection (MY_BREAK_WAKER). */
    sql->text[MY_BREAK] = sql_format("UPDATE `%s` SET fence = LAST_INSERT_ID(fence + 1), owner = NULL,\n"
                                     "  expires_at = " NOW_MS "%s\n"
                                     "WHERE name = ? AND owner IS NOT NULL AND expires_at >= " NOW_MS,
                                     t, waker ? ",\n  waker = NULLIF(0 * (@dlock_waker := COALESCE(waker, 0)), 0)" : "");
    sql->text[MY_BREAK_WAKER] = sql_format("SELECT CAST(COALESCE(@dlock_waker, 0) AS UNSIGNED)");
    sql->text[MY_HAS_SHARED_COLUMNS] = sql_format(
        "SELECT COUNT(*) FROM information_schema.columns\n"
        "WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'writer_fence'");
    sql->text[MY_RENEW] = sql_format("UPDATE `%s` SET expires_at = " NOW_MS " + ?\n"
                                 "WHERE name = ? AND owner = ? AND expires_at >= " NOW_MS,
                                 t);
    /* Every watchdog hold due together in one statement, the holds given as
     * a JSON array joined through JSON_TABLE; the rows found are the holds
     * still ours (the client counts found rows, not changed ones). */
    sql->text[MY_RENEW_BATCH] = sql_format(
        "UPDATE `%s` AS t JOIN JSON_TABLE(?, '$[*]' COLUMNS (\n"
        "    k VARCHAR(1200) PATH '$[0]', o VARCHAR(100) PATH '$[1]', ms BIGINT PATH '$[2]')) AS u\n"
        "  ON t.name = UNHEX(u.k) AND t.owner = u.o\n"
        "SET t.expires_at = " NOW_MS " + u.ms\n"
        "WHERE t.expires_at >= " NOW_MS,
        t);
    sql->text[MY_RELEASE] = sql_format("UPDATE `%s` SET owner = NULL, expires_at = " NOW_MS "%s\n"
                                   "WHERE name = ? AND owner = ? AND expires_at >= " NOW_MS,
                                   t, take);
    /* waker, key, owner: armed while an exclusive request would be busy. */
    sql->text[MY_ARM] = sql_format("UPDATE `%s` SET waker = ?\n"
                                   "WHERE name = ? AND owner IS NOT NULL AND expires_at >= " NOW_MS " AND owner <> ?",
                                   t);
    /* waker, key, then SHARED_TAKE's parameters: armed while that request
     * would be busy; a take that cannot be decided (NULL) is busy, as the
     * acquire's IF sees it. */
    sql->text[MY_SHARED_ARM] = sql_format("UPDATE `%s` SET waker = ?\nWHERE name = ? AND NOT COALESCE(" SHARED_TAKE
                                          ", FALSE)",
                                          t);
    /* key, waker: a head that leaves while armed takes its own id out,
     * and leaves the mark of a request in its place (the holder was asked
     * for the name, and a keeper looks for that). */
    sql->text[MY_DISARM] = sql_format("UPDATE `%s` SET waker = 0 WHERE name = ? AND waker = ?", t);
    sql->text[MY_HAS_WAKER] = sql_format(
        "SELECT COUNT(*) FROM information_schema.columns\n"
        "WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'waker'");
    /* The names asked for while held exclusively (see my_wanted.h);
     * followed by the names as hex literals, comma-separated, and ')'.
     * Only run with the waker column: without it nothing keeps holds. */
    sql->wanted_poll = sql_format("SELECT HEX(name) FROM `%s`\n"
                                  "WHERE waker IS NOT NULL AND owner IS NOT NULL AND LEFT(owner, 1) <> '~'\n"
                                  "  AND expires_at >= " NOW_MS " AND name IN (",
                                  t);
    sql->text[MY_STATUS] = sql_format("SELECT owner, fence, GREATEST(expires_at - " NOW_MS ", 0),\n"
                                  "       owner IS NOT NULL AND expires_at >= " NOW_MS "\n"
                                  "FROM `%s` WHERE name = ?",
                                  t);
    /* Session mode: the server's named lock is the hold. The row only counts
     * fences, raised when a holder asks for one, and only while this
     * connection holds the named lock: the last holder raised its own
     * before releasing, so the tokens of those who ask strictly increase. */
    sql->text[MY_SESSION_ACQUIRE] = sql_format("SELECT GET_LOCK(?, 0)");
    sql->text[MY_SESSION_FENCE] = sql_format("INSERT INTO `%s` (name, owner, fence, expires_at)\n"
                                         "SELECT ?, NULL, LAST_INSERT_ID(1), 0 FROM DUAL\n"
                                         "  WHERE IS_USED_LOCK(?) = CONNECTION_ID()\n"
                                         "ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)",
                                         t);
    sql->text[MY_SESSION_CHECK] = sql_format("SELECT IS_USED_LOCK(?) = CONNECTION_ID()");
    sql->text[MY_SESSION_CHECK_BATCH] = sql_format(
        "SELECT COUNT(*) FROM JSON_TABLE(?, '$[*]' COLUMNS (n VARCHAR(64) PATH '$')) AS u\n"
        "WHERE IS_USED_LOCK(u.n) = CONNECTION_ID()");
    sql->text[MY_SESSION_RELEASE] = sql_format("SELECT RELEASE_LOCK(?)");
    sql->text[MY_SESSION_STATUS] = sql_format("SELECT IS_USED_LOCK(?)");
    bool ok = sql->create_table != NULL && sql->add_shared_columns != NULL && sql->add_waker_column != NULL &&
              sql->create_values != NULL && sql->wanted_poll != NULL;
    for (int i = 0; i < MY_STATEMENT_COUNT; i++)
        ok &= sql->text[i] != NULL;
    if (!ok) {
        my_sql_free(sql);
        return dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory");
    }
    return DLOCK_OK;
}

void my_sql_free(struct my_sql *sql)
{
    free(sql->create_table);
    free(sql->add_shared_columns);
    free(sql->add_waker_column);
    free(sql->create_values);
    free(sql->wanted_poll);
    for (int i = 0; i < MY_STATEMENT_COUNT; i++)
        free(sql->text[i]);
    memset(sql, 0, sizeof *sql);
}

char *my_sql_renew_batch_json(const struct sql_renew_batch *b)
{
    size_t size = 3;
    for (size_t i = 0; i < b->n; i++) /* ,["<hex>","<owner>",<20 digits>] */
        size += 2 * b->keys[i]->key_len + strlen(b->owners[i]) + 32;
    char *json = malloc(size), *p = json;
    if (!json) {
        dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory for a renewal batch of %zu", b->n);
        return NULL;
    }
    *p++ = '[';
    for (size_t i = 0; i < b->n; i++) {
        p += sprintf(p, "%s[\"", i > 0 ? "," : "");
        p = sql_hex(p, b->keys[i]->key, b->keys[i]->key_len);
        p += sprintf(p, "\",\"%s\",%" PRId64 "]", b->owners[i], b->leases[i]);
    }
    strcpy(p, "]");
    return json;
}

char *my_sql_tags_json(const char *const *tags, size_t n)
{
    size_t size = 3;
    for (size_t i = 0; i < n; i++)
        size += strlen(tags[i]) + 3;
    char *json = malloc(size), *p = json;
    if (!json) {
        dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory for a renewal batch of %zu", n);
        return NULL;
    }
    *p++ = '[';
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s\"%s\"", i > 0 ? "," : "", tags[i]);
    strcpy(p, "]");
    return json;
}
