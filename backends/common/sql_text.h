/* backends/common/sql_text.h - what the SQL backends (postgres, mysql) share
 * to build their statements: the check that a configured table name can be
 * quoted into SQL safely, and a formatting helper. Names, owners and leases
 * never go through here: they are always bound parameters. */
#ifndef DLOCK_SQL_TEXT_H
#define DLOCK_SQL_TEXT_H

#include <dlock/provider.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when name is 1..max_len letters, digits and underscores, not
 * starting with a digit: quoted, it is one identifier in every dialect. */
bool sql_valid_table(const char *name, size_t max_len);

/* A malloc'ed printf result, or NULL when out of memory. */
char *sql_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The settings both SQL groups share, read and checked (the table, the
 * mode, the key prefix, create_table, pool_size). Strings point into the
 * settings: valid during open() only. group names the backend in messages. */
struct sql_settings {
    const char *table;
    bool session_mode;
    const char *prefix;
    bool create_table;
    int64_t pool_size;
};
/* The longest key prefix, in bytes. */
#define SQL_PREFIX_MAX 64

int sql_settings_read(const dlock_settings *s, const char *group, const char *default_prefix, size_t table_max,
                      size_t prefix_max, struct sql_settings *out);

/* A lock's key (prefix + name, the row's name) and the digest that stands
 * for it where a short identifier is needed: tag is "dlock_" + 16 hex digits
 * (a PostgreSQL channel, a MySQL GET_LOCK name), digest the 64-bit value (a
 * PostgreSQL advisory key). */
struct sql_lock_key {
    char *key;                  /* NULL until initialised */
    size_t key_len;
    uint64_t digest;
    char tag[24];
};
int sql_lock_key_init(struct sql_lock_key *k, const char *prefix, const char *name, size_t len);
void sql_lock_key_free(struct sql_lock_key *k);

/* The holds of one renewal batch as parallel arrays, for a statement that
 * renews them all at once. Every lock's priv must begin with its
 * initialised struct sql_lock_key (the backends' per-lock state does). */
struct sql_renew_batch {
    size_t n;
    const struct sql_lock_key **keys;
    const char **owners;
    int64_t *leases;
};
/* DLOCK_OK, or DLOCK_ENOMEM with the detail set (nothing to free). */
int sql_renew_batch_init(struct sql_renew_batch *b, struct dlock_provider_lock *const *locks, size_t n);
void sql_renew_batch_free(struct sql_renew_batch *b);

/* Writes the len bytes at p as 2 * len lowercase hex digits at out (no
 * NUL); returns the end. */
char *sql_hex(char *out, const char *p, size_t len);

#endif
