/* contrib/cli/entry.h - one listed name (a dlock_list_entry) as JSON or as
 * a row of the table, for dlock list, dlock serve and dlock top. */
#ifndef DLOCK_CLI_ENTRY_H
#define DLOCK_CLI_ENTRY_H

#include "election_view.h"

#include <dlock.h>
#include <stdbool.h>
#include <stdio.h>

/* "exclusive", "shared" or "semaphore". */
const char *entry_kind_name(unsigned kind);

/* The entry as a JSON object: name (and name_hex when the name is not
 * UTF-8), kind, permits, holder_count, holders, fence, lease_left_ms,
 * age_ms, waiters; null where the backend does not know a value; and
 * election when el (may be NULL) says the name is one. */
void entry_json(FILE *f, const dlock_list_entry *e, const struct entry_election *el);

/* The table's header and an entry's line (name escaped for a terminal,
 * '-' for what the backend does not know), each ending in a newline. */
void entry_header(FILE *f);
void entry_row(FILE *f, const dlock_list_entry *e);

/* One line per holder the backend describes, indented under the row. */
void entry_holders(FILE *f, const dlock_list_entry *e);

#endif
