/* backends/postgres/pg_list.c - see pg_list.h.
 *
 * A held name is a row whose owner is set and whose lease has not run out
 * on the server's clock; its owner is the holder, or a kind marker ("~s",
 * "~p<N>") for shared holders and permits, which the statement reports as
 * "owner ms-left" lines from the holders column. */
#include "config.h"

#include "pg_list.h"
#include "../common/cursor.h"
#include "pg_sql.h"

#include "../common/sql_text.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Holders a listed name describes; the others are counted only. */
#define PG_LIST_HOLDERS_MAX 256

/* The cursor's key bytes into out (room for len / 2); false if it is not
 * lowercase hex of at most max bytes. */
/* Fills e's kind and holders from one row (owner in column 1, shared
 * holders as lines in column 4). holders has room for PG_LIST_HOLDERS_MAX. */
static void describe(const PGresult *res, int row, dlock_list_entry *e, dlock_list_holder *holders, char *lines)
{
    const char *owner = PQgetvalue(res, row, 1);
    e->fence = strtoull(PQgetvalue(res, row, 2), NULL, 10);
    e->lease_left_ms = strtoll(PQgetvalue(res, row, 3), NULL, 10);
    e->age_ms = -1;
    e->waiters = -1; /* waiters LISTEN, and the server does not say who listens */
    e->holders = holders;
    if (owner[0] != '~') {
        e->kind = DLOCK_MODE_EXCLUSIVE;
        e->holder_count = 1;
        e->n_holders = 1;
        holders[0] = (dlock_list_holder){ owner, -1, "", e->fence, e->lease_left_ms, -1 };
        return;
    }
    e->kind = owner[1] == 'p' ? DLOCK_MODE_SEMAPHORE : DLOCK_MODE_SHARED;
    e->permits = owner[1] == 'p' ? (unsigned)strtoul(owner + 2, NULL, 10) : 0;
    e->holder_count = 0;
    for (char *line = lines, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *space = strchr(line, ' ');
        if (!space)
            continue;
        *space = '\0';
        if (e->n_holders < PG_LIST_HOLDERS_MAX)
            holders[e->n_holders++] = (dlock_list_holder){ line, -1, "", 0, strtoll(space + 1, NULL, 10), -1 };
        e->holder_count++;
    }
}

int pg_list_page(struct pg_pool *pool, const struct pg_server *srv, const char *prefix,
                 struct dlock_provider_list *req)
{
    size_t plen = strlen(prefix), key_prefix_len = plen + req->prefix_len;
    char *key_prefix = malloc(key_prefix_len + 1), *after = malloc(plen + DLOCK_NAME_MAX + 1);
    dlock_list_holder *holders = malloc(PG_LIST_HOLDERS_MAX * sizeof *holders);
    int rc = DLOCK_OK;
    size_t after_len = 0;
    if (!key_prefix || !after || !holders)
        rc = dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory listing locks");
    else if (req->cursor && !cursor_decode(req->cursor, after, plen + DLOCK_NAME_MAX, &after_len))
        rc = dlock_seterr(DLOCK_EINVAL, "postgres: '%s' is not a cursor of this backend's listing", req->cursor);
    PGresult *res = NULL;
    if (rc == DLOCK_OK) {
        memcpy(key_prefix, prefix, plen);
        memcpy(key_prefix + plen, req->prefix, req->prefix_len);
        char limit[24];
        snprintf(limit, sizeof limit, "%zu", req->limit);
        const char *values[3] = { key_prefix, after, limit };
        int lengths[3] = { (int)key_prefix_len, (int)after_len, 0 }, formats[3] = { 1, 1, 0 };
        res = pg_pool_exec(pool, PG_LIST, 3, values, lengths, formats, &rc);
    }
    if (res)
        rc = pg_result_check(srv, res, "listing locks");
    int rows = rc == DLOCK_OK ? PQntuples(res) : 0;
    for (int r = 0; rc == DLOCK_OK && r < rows; r++) {
        /* Keys come back in text form, "\x<hex>": read them as bytes. */
        size_t key_len = 0;
        unsigned char *key = PQunescapeBytea((const unsigned char *)PQgetvalue(res, r, 0), &key_len);
        char *lines = PQgetisnull(res, r, 4) ? NULL : strdup(PQgetvalue(res, r, 4));
        if (!key || key_len <= plen || key_len > plen + DLOCK_NAME_MAX || (!PQgetisnull(res, r, 4) && !lines)) {
            rc = key ? DLOCK_OK : dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory listing locks");
        } else {
            char name[DLOCK_NAME_MAX + 1]; /* an entry's name is NUL-terminated */
            memcpy(name, key + plen, key_len - plen);
            name[key_len - plen] = '\0';
            dlock_list_entry e = { .name = name, .name_len = key_len - plen };
            describe(res, r, &e, holders, lines);
            rc = req->emit(&e, req->emit_arg);
            if (r == rows - 1 && (size_t)rows == req->limit && rc == DLOCK_OK) {
                req->next_cursor = malloc(2 * key_len + 1);
                if (!req->next_cursor)
                    rc = dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory listing locks");
                else
                    *sql_hex(req->next_cursor, (const char *)key, key_len) = '\0';
            }
        }
        free(lines);
        PQfreemem(key);
    }
    PQclear(res);
    free(key_prefix);
    free(after);
    free(holders);
    return rc;
}
