/* backends/postgres/pg_sql.h - the statements of the postgres backend, built
 * once per instance around the (quoted) table name. User strings never
 * enter SQL text: names, owners and leases are always parameters. */
#ifndef DLOCK_PG_SQL_H
#define DLOCK_PG_SQL_H

#include <stdbool.h>

#define PG_TABLE_MAX 50

struct pg_sql {
    char table[PG_TABLE_MAX + 1];    /* as configured */
    char *exists;         /* $1 table, $2 sequence (as text) -> two booleans */
    char *create_table;
    char *create_sequence;
    /* lease mode: $1 key (bytea), $2 owner, $3 lease ms */
    char *acquire;        /* -> (fence or NULL when busy, holder's ms left or NULL) */
    char *renew;          /* -> command, 1 row updated when still ours */
    char *release;        /* $3 channel -> one row when released */
    char *status;         /* $1 key -> owner, fence, ms left, valid */
    /* session mode: $1 advisory key (bigint) */
    char *session_acquire; /* -> fence, or NULL when busy */
    char *session_release; /* $2 channel -> unlocked? */
    char *session_status;  /* -> holder backend pid, or no row */
};

/* True when name can be a table name here: 1..PG_TABLE_MAX letters, digits
 * and underscores, not starting with a digit. */
bool pg_sql_valid_table(const char *name);

/* Builds every statement for table. DLOCK_OK or DLOCK_ENOMEM. */
int pg_sql_init(struct pg_sql *sql, const char *table);
void pg_sql_free(struct pg_sql *sql);

#endif
