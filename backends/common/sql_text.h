/* backends/common/sql_text.h - what the SQL backends (postgres, mysql) share
 * to build their statements: the check that a configured table name can be
 * quoted into SQL safely, and a formatting helper. Names, owners and leases
 * never go through here: they are always bound parameters. */
#ifndef DLOCK_SQL_TEXT_H
#define DLOCK_SQL_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* True when name is 1..max_len letters, digits and underscores, not
 * starting with a digit: quoted, it is one identifier in every dialect. */
bool sql_valid_table(const char *name, size_t max_len);

/* A malloc'ed printf result, or NULL when out of memory. */
char *sql_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
