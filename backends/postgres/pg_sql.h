/* backends/postgres/pg_sql.h - the statements of the postgres backend, built
 * once per instance around the (quoted) table name. User strings never
 * enter SQL text: names, owners and leases are always parameters. */
#ifndef DLOCK_PG_SQL_H
#define DLOCK_PG_SQL_H

#include "../common/sql_text.h"

#include <stdbool.h>

#define PG_TABLE_MAX 50

/* How long a row must have been free before a fair request that is not at
 * the head of the line may take it (the head may hang), in ms. */
#define PG_LATE_MS "2000"

enum pg_statement {
    PG_EXISTS,           /* $1 table, $2 sequence (quoted, as text) -> table?, sequence?, shared columns? */
    PG_CREATE_TABLE,
    PG_ADD_SHARED_COLUMNS,
    PG_CREATE_SEQUENCE,
    /* lease mode: $1 key (bytea), $2 owner, $3 lease ms */
    PG_TAKE,             /* the fast path: -> fence when the existing row was taken, else no row */
    PG_TAKE_LATE,        /* the same, taking only a row free or expired for PG_LATE_MS (a fair look
                          * out of turn) */
    PG_ACQUIRE,          /* -> (fence or NULL when busy, holder's ms left or NULL) */
    PG_RENEW_BATCH,      /* $1 keys (bytea[]), $2 owners (text[]), $3 leases (bigint[]) -> the
                          * 1-based positions of the holds still ours */
    PG_RELEASE,          /* $3 channel -> one row when released */
    PG_STATUS,           /* $1 key -> owner, fence, ms left, valid */
    /* shared holds and permits (lease mode): $1 key, $2 owner */
    PG_SHARED_ACQUIRE,   /* $3 lease ms, $4 kind ("~s", "~p<N>"), $5 permits (0: shared) ->
                          * (fence or NULL, ms to retry after, the kind held when busy or NULL) */
    PG_REGISTER_WRITER,  /* $3 lease ms: a busy exclusive request keeps later shared ones out */
    PG_UNREGISTER_WRITER,/* $3 channel: it gave up (wakes the readers it kept out) */
    PG_DOWNGRADE,        /* $3 channel: $2's exclusive hold made shared -> one row, or no row
                          * when $2 holds it in neither kind */
    PG_SHARED_RELEASE,   /* $3 channel -> one row when released */
    PG_SHARED_RENEW_BATCH, /* as PG_RENEW_BATCH */
    PG_SHARED_STATUS,    /* $1 key -> live holders */
    PG_BREAK,            /* $1 key, $2 channel -> the new fence when it was held, else no row */
    PG_LIST,             /* $1 key prefix, $2 after this key, $3 limit -> (key, owner, fence, ms left,
                          * shared holders as "owner ms" lines or NULL) of held names */
    /* elections (lease mode), beside the lock table in "<table>_values" */
    PG_CREATE_VALUES,
    PG_VALUE_PUT,        /* $1 key, $2 owner, $3 term, $4 value (bytea), $5 channel -> one row when
                          * stored ($2 holds $1 exclusively, with fence $3), which also notifies */
    PG_LEADER_GET,       /* $1 key -> (the exclusive holder's fence or NULL, stored term or NULL,
                          * stored value or NULL) */
    /* session mode: $1 advisory key (bigint) */
    PG_SESSION_ACQUIRE,  /* -> granted? */
    PG_SESSION_FENCE,    /* -> next fence while this session holds $1, else NULL */
    PG_SESSION_CHECK,    /* -> a row while the session lives */
    PG_SESSION_RELEASE,  /* $2 channel -> unlocked? */
    PG_SESSION_STATUS,   /* -> holder backend pid, or no row */
    PG_STATEMENT_COUNT
};

struct pg_sql {
    char table[PG_TABLE_MAX + 1];    /* as configured */
    char *text[PG_STATEMENT_COUNT];
};


/* Builds every statement for table. DLOCK_OK or DLOCK_ENOMEM. */
int pg_sql_init(struct pg_sql *sql, const char *table);
void pg_sql_free(struct pg_sql *sql);

/* The three array parameters of PG_RENEW_BATCH for the holds of b, as
 * PostgreSQL's text form of bytea[] (keys in hex), text[] (owners:
 * printable, no quote or backslash) and bigint[] (leases). Stores three
 * malloc'd strings in out (free them); DLOCK_OK or DLOCK_ENOMEM. */
int pg_sql_renew_batch_arrays(const struct sql_renew_batch *b, char *out[3]);

#endif
