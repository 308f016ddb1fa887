/* backends/mysql/my_sql.h - the statements of the mysql backend, built once
 * per instance around the (quoted) table name. Names, owners and leases are
 * always bound parameters, never SQL text. */
#ifndef DLOCK_MY_SQL_H
#define DLOCK_MY_SQL_H

#include "../common/sql_text.h"

#include <stdbool.h>
#include <stdint.h>

#define MY_TABLE_MAX 50

/* A busy acquire reports the holder's remaining lease through
 * LAST_INSERT_ID as MY_BUSY_MARK + ms; fences stay far below it. */
#define MY_BUSY_MARK (UINT64_C(1) << 62)
/* A shared or permit request on a name held in another kind reports
 * MY_KIND_MARK + that kind's permits (0: shared). */
#define MY_KIND_MARK (UINT64_C(1) << 61)
/* How long a row must have been free before a fair request that is not at
 * the head of the line may take it (the head may hang), in ms. */
#define MY_LATE_MS "2000"

enum my_statement {
    MY_ACQUIRE,          /* key, owner, lease ms -> insert id: fence, or MY_BUSY_MARK + ms */
    MY_ACQUIRE_LATE,     /* the same, granting only a row free or expired for MY_LATE_MS */
    MY_RENEW,            /* lease ms, key, owner -> 1 row found when still ours */
    MY_RENEW_BATCH,      /* JSON [[hex key, owner, lease ms], ...] -> rows found still ours
                          * (needs JSON_TABLE: MariaDB >= 10.6, MySQL >= 8.0.4) */
    MY_RELEASE,          /* key, owner -> 1 row found when released; insert id: the waker taken out, 0 none
                          * (likewise MY_SHARED_RELEASE, MY_UNREGISTER_WRITER and MY_DOWNGRADE) */
    MY_STATUS,           /* key -> owner, fence, ms left, valid */
    /* shared holds and permits (lease mode) */
    MY_ENSURE_ROW,       /* key: the name's row exists (free) */
    MY_SHARED_ACQUIRE,   /* see my_sql.c -> rows found 0: no row; insert id: fence, MY_KIND_MARK + N,
                          * or MY_BUSY_MARK + ms */
    MY_SHARED_RENEW,     /* owner, lease, lease, key, owner -> 1 row found when still ours */
    MY_SHARED_RELEASE,   /* owner, key, owner -> 1 row found when released */
    MY_REGISTER_WRITER,  /* owner, lease, key, owner: an exclusive request kept waiting */
    MY_UNREGISTER_WRITER,/* key, owner */
    MY_DOWNGRADE,        /* owner, owner, key, owner, owner -> 1 row found when made (or already)
                          * shared */
    MY_SHARED_STATUS,    /* key -> live holders */
    MY_HAS_SHARED_COLUMNS, /* table name -> 1 when the table has the shared columns */
    MY_BREAK,            /* key -> 1 row found when it was held; insert id: the new fence */
    /* waiting (lease mode; with the waker column only) */
    MY_ARM,              /* waker, key, owner -> 1 row found when armed (still busy for an exclusive request) */
    MY_SHARED_ARM,       /* waker, key, kind, kind, owner, permits x3, owner -> 1 row found when armed */
    MY_DISARM,           /* key, waker: the waker cleared if it is still that one */
    MY_BREAK_WAKER,      /* -> the waker the last MY_BREAK on this connection took out, 0 none */
    MY_HAS_WAKER,        /* table name -> 1 when the table has the waker column */
    /* elections (lease mode), beside the lock table in `<table>_values` */
    MY_VALUE_PUT,        /* term, value, key, owner, term -> 1 row found when stored (owner holds key
                          * exclusively, with that fence) */
    MY_LEADER_GET,       /* key, key -> (the exclusive holder's fence or NULL, stored term or NULL,
                          * stored value or NULL) */
    MY_SESSION_ACQUIRE,  /* lock name -> 1 granted, 0 busy */
    MY_SESSION_FENCE,    /* key, lock name -> rows > 0 while held here; insert id: fence */
    MY_SESSION_CHECK,    /* lock name -> 1 while this connection holds it */
    MY_SESSION_CHECK_BATCH, /* JSON [lock name, ...] -> how many this connection holds */
    MY_SESSION_RELEASE,  /* lock name -> 1 released, 0 not ours, NULL not held */
    MY_SESSION_STATUS,   /* lock name -> holder connection id or NULL */
    MY_STATEMENT_COUNT
};

struct my_sql {
    char table[MY_TABLE_MAX + 1];
    char *create_table;
    char *add_shared_columns;   /* for a table made before shared holds existed */
    char *add_waker_column;     /* for a table made before lease-mode waiting existed */
    char *create_values;        /* the table of election values */
    char *wanted_poll;          /* the start of a keeper's poll (my_wanted.c) */
    char *text[MY_STATEMENT_COUNT];
};


/* Builds the statements for table; waker says whether the table has the
 * waker column (without it, no statement names it and lease-mode waiters
 * cannot arm). DLOCK_OK, or DLOCK_ENOMEM with the detail set. */
int my_sql_init(struct my_sql *sql, const char *table, bool waker);
void my_sql_free(struct my_sql *sql);

/* The JSON parameter of MY_RENEW_BATCH for the holds of b: keys in hex,
 * owners (printable, no quote or backslash), leases. malloc'd (free it),
 * or NULL with DLOCK_ENOMEM set. */
char *my_sql_renew_batch_json(const struct sql_renew_batch *b);

/* The JSON parameter of MY_SESSION_CHECK_BATCH: the n lock names (tags of
 * struct sql_lock_key, which need no escaping). malloc'd, or NULL with
 * DLOCK_ENOMEM set. */
char *my_sql_tags_json(const char *const *tags, size_t n);

#endif
