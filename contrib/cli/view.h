/* contrib/cli/view.h - the operator's view: every listed name at one time,
 * copied out of dlock_list()'s pages, for dlock serve and dlock top. */
#ifndef DLOCK_CLI_VIEW_H
#define DLOCK_CLI_VIEW_H

#include "election_view.h"

#include <dlock.h>
#include <stdbool.h>
#include <stddef.h>

/* The most entries a view keeps: a panel of more names than this is not
 * read by a person, and the cap bounds the memory of one request. */
#define VIEW_MAX 10000

struct view {
    dlock_list_entry *entries; /* n entries, each with its own copies of name and holders */
    struct entry_election *elections; /* n: which of them are elections, and their leaders */
    size_t n;
    bool truncated;            /* more names were listed than the limit kept */
    int64_t generated_ms;      /* wall clock when the listing ended */
    int rc;                    /* DLOCK_OK, or why the listing failed */
    char error[512];           /* that failure for a person, "" when rc is DLOCK_OK */
};

/* What a view says about the holds, for the gauges and the footer. */
struct view_summary {
    size_t held;               /* names with at least one holder */
    size_t with_waiters;       /* names that someone waits for */
    int64_t waiters;           /* requests waiting, over all names */
    int64_t oldest_age_ms;     /* age of the oldest hold, -1 when nothing is held */
    size_t stale;              /* held names whose oldest hold is older than stale_ms */
};

/* Lists the names under prefix, all pages, keeping at most limit entries
 * (1..VIEW_MAX), and reads the leader of each that is an election (one
 * more read per held exclusive name, on backends that hold elections).
 * Returns v->rc; on a failure v holds no entries and
 * v->error says what went wrong. */
int view_take(struct view *v, dlock_client *client, const char *prefix, size_t prefix_len, size_t limit);

void view_free(struct view *v);

struct view_summary view_summarize(const struct view *v, int64_t stale_ms);

/* Whether an entry's oldest hold is older than stale_ms. */
bool view_is_stale(const dlock_list_entry *e, int64_t stale_ms);

#endif
