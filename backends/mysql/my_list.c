/* backends/mysql/my_list.c - see my_list.h.
 *
 * A held name is a row whose owner is set and whose lease has not run out
 * on the server's clock. One page is one SELECT of at most `limit` such
 * rows joined with their shared holders (one result row per holder; owner
 * is then a kind marker, "~s" or "~p<N>"). The statement is text: its only
 * values are the key prefix and the cursor written as hex literals, and
 * numbers. */
#include "config.h"

#include "my_list.h"
#include "../common/cursor.h"

#include "../common/sql_text.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MY_LIST_HOLDERS_MAX 256
#define NOW_MS "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

/* The page's SELECT (malloc'd), or NULL when out of memory. */
static char *page_query(const char *table, const char *key_prefix, size_t key_prefix_len, const char *after_hex,
                        size_t limit)
{
    char *prefix_hex = malloc(2 * key_prefix_len + 1);
    if (!prefix_hex)
        return NULL;
    *sql_hex(prefix_hex, key_prefix, key_prefix_len) = '\0';
    char *q = sql_format(
        "SELECT t.name, t.owner, t.fence, GREATEST(t.expires_at - " NOW_MS ", 0), j.k,\n"
        "  CAST(JSON_EXTRACT(t.holders, CONCAT('$.\"', j.k, '\"')) AS SIGNED) - " NOW_MS "\n"
        "FROM (SELECT name, owner, fence, expires_at, holders FROM `%s`\n"
        "      WHERE name > X'%s' AND LEFT(name, %zu) = X'%s' AND owner IS NOT NULL\n"
        "        AND expires_at >= " NOW_MS " ORDER BY name LIMIT %zu) AS t\n"
        "  LEFT JOIN JSON_TABLE(IF(LEFT(t.owner, 1) = '~', JSON_KEYS(t.holders), NULL),\n"
        "                       '$[*]' COLUMNS (k VARCHAR(100) PATH '$')) AS j ON TRUE\n"
        "ORDER BY t.name, j.k",
        table, after_hex, key_prefix_len, prefix_hex, limit);
    free(prefix_hex);
    return q;
}

struct page {
    struct dlock_provider_list *req;
    size_t plen;                /* the configured key prefix's length */
    dlock_list_entry e;
    char name[DLOCK_NAME_MAX + 1];
    char owner[128];
    dlock_list_holder holders[MY_LIST_HOLDERS_MAX];
    char holder_ids[MY_LIST_HOLDERS_MAX][104];
    size_t names;               /* names emitted */
};

/* Starts the entry of a row's name. */
static void begin(struct page *pg, MYSQL_ROW row, const unsigned long *len)
{
    size_t n = len[0] - pg->plen;
    memcpy(pg->name, row[0] + pg->plen, n);
    pg->name[n] = '\0';
    snprintf(pg->owner, sizeof pg->owner, "%s", row[1]);
    dlock_list_entry *e = &pg->e;
    *e = (dlock_list_entry){ .name = pg->name, .name_len = n, .holders = pg->holders };
    e->fence = strtoull(row[2], NULL, 10);
    e->lease_left_ms = strtoll(row[3], NULL, 10);
    e->age_ms = -1;
    e->waiters = -1; /* waiters poll; the server keeps no list of them */
    if (pg->owner[0] != '~') {
        e->kind = DLOCK_MODE_EXCLUSIVE;
        e->holder_count = e->n_holders = 1;
        pg->holders[0] = (dlock_list_holder){ pg->owner, -1, "", e->fence, e->lease_left_ms, -1 };
        return;
    }
    e->kind = pg->owner[1] == 'p' ? DLOCK_MODE_SEMAPHORE : DLOCK_MODE_SHARED;
    e->permits = pg->owner[1] == 'p' ? (unsigned)strtoul(pg->owner + 2, NULL, 10) : 0;
}

/* Adds a row's shared holder, if it is one and still live. */
static void add_holder(struct page *pg, MYSQL_ROW row)
{
    if (!row[4] || !row[5] || strtoll(row[5], NULL, 10) <= 0)
        return;
    dlock_list_entry *e = &pg->e;
    if (e->n_holders < MY_LIST_HOLDERS_MAX) {
        snprintf(pg->holder_ids[e->n_holders], sizeof pg->holder_ids[0], "%s", row[4]);
        pg->holders[e->n_holders] =
            (dlock_list_holder){ pg->holder_ids[e->n_holders], -1, "", 0, strtoll(row[5], NULL, 10), -1 };
        e->n_holders++;
    }
    e->holder_count++;
}

/* Emits every name of res (rows grouped by name); the last name's key
 * becomes the next cursor when the page was full. */
static int emit_rows(struct page *pg, MYSQL_RES *res)
{
    MYSQL_ROW row;
    char last[1024];
    size_t last_len = 0;
    int rc = DLOCK_OK;
    bool open = false;
    while (rc == DLOCK_OK && (row = mysql_fetch_row(res))) {
        unsigned long *len = mysql_fetch_lengths(res);
        if (!row[0] || len[0] <= pg->plen || len[0] - pg->plen > DLOCK_NAME_MAX || len[0] > sizeof last || !row[1] ||
            !row[2] || !row[3])
            continue;
        if (!open || len[0] != last_len || memcmp(row[0], last, last_len) != 0) {
            if (open && (rc = pg->req->emit(&pg->e, pg->req->emit_arg)) != DLOCK_OK)
                break;
            begin(pg, row, len);
            memcpy(last, row[0], len[0]);
            last_len = len[0];
            open = true;
            pg->names++;
        }
        if (pg->e.kind != DLOCK_MODE_EXCLUSIVE)
            add_holder(pg, row);
    }
    if (rc == DLOCK_OK && open)
        rc = pg->req->emit(&pg->e, pg->req->emit_arg);
    if (rc == DLOCK_OK && open && pg->names == pg->req->limit) {
        pg->req->next_cursor = malloc(2 * last_len + 1);
        if (!pg->req->next_cursor)
            return dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory listing locks");
        *sql_hex(pg->req->next_cursor, last, last_len) = '\0';
    }
    return rc;
}

int my_list_page(struct my_pool *pool, const struct my_server *srv, const char *table, const char *prefix,
                 struct dlock_provider_list *req)
{
    size_t plen = strlen(prefix);
    size_t cursor_len;
    if (req->cursor && !cursor_decode(req->cursor, NULL, plen + DLOCK_NAME_MAX, &cursor_len))
        return dlock_seterr(DLOCK_EINVAL, "mysql: '%s' is not a cursor of this backend's listing", req->cursor);
    char *key_prefix = malloc(plen + req->prefix_len + 1);
    struct page *pg = calloc(1, sizeof *pg);
    char *q = NULL;
    if (key_prefix && pg) {
        memcpy(key_prefix, prefix, plen);
        memcpy(key_prefix + plen, req->prefix, req->prefix_len);
        q = page_query(table, key_prefix, plen + req->prefix_len, req->cursor ? req->cursor : "", req->limit);
    }
    int rc = q ? DLOCK_OK : dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory listing locks");
    struct my_conn *c = NULL;
    if (rc == DLOCK_OK)
        rc = my_pool_get(pool, &c);
    MYSQL_RES *res = NULL;
    if (rc == DLOCK_OK)
        rc = my_query_rows(srv, c, q, &res);
    if (c)
        my_pool_put(pool, c);
    if (rc == DLOCK_OK) {
        pg->req = req;
        pg->plen = plen;
        rc = emit_rows(pg, res);
    }
    if (res)
        mysql_free_result(res);
    free(q);
    free(key_prefix);
    free(pg);
    return rc;
}
