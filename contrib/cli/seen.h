/* contrib/cli/seen.h - how long a long-running view (dlock serve, dlock
 * top) has seen each hold, for backends that keep no time of grant. */
#ifndef DLOCK_CLI_SEEN_H
#define DLOCK_CLI_SEEN_H

#include "view.h"

#include <pthread.h>
#include <stdint.h>

struct seen_item;

/* Holds seen so far: first and last time each was in a view. */
struct seen {
    pthread_mutex_t mu;
    struct seen_item **buckets;
    size_t nbuckets;
};

void seen_init(struct seen *s);
void seen_free(struct seen *s);

/* For every held entry of v whose age the backend does not know (age -1),
 * sets its age, and each described holder's, to how long this process has
 * seen that same hold (name, owner, fence): a lower bound of its real age,
 * 0 at the first sighting. Holds not seen for a minute are forgotten (a
 * hold that comes back after that starts again at 0). Thread-safe; out of
 * memory leaves the ages unknown. */
void seen_apply(struct seen *s, struct view *v);

#endif
