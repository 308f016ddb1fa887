/* backends/common/queue_list.h - a listing's entry for a name whose
 * contenders queue in arrival order, each with a node or key of its own
 * (etcd: keys by create revision; zookeeper: sequential nodes).
 *
 * Who holds follows from the order alone, by the rules both backends grant
 * by: an exclusive contender holds when it is first in line, a shared one
 * when no exclusive one is before it, a permit when fewer than the
 * semaphore's N are before it. Everyone else waits. */
#ifndef DLOCK_QUEUE_LIST_H
#define DLOCK_QUEUE_LIST_H

#include <dlock.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct queued_contender {
    unsigned mode;            /* DLOCK_MODE_* the contender asked for */
    int64_t order;            /* its place in line: lower came first */
    bool holds;               /* set by queue_decide() */
    dlock_list_holder holder; /* what the backend can tell of it */
    const void *ref;          /* the backend's own: the key or node it came from */
};

/* Sorts q[0..n) into arrival order and marks those that hold under the
 * rules above (permits: the semaphore's N, used for permit contenders);
 * returns how many hold. */
size_t queue_decide(struct queued_contender *q, size_t n, unsigned permits);

/* Fills e's kind (the first contender's), permits, holder_count, holders
 * (those that hold, the first cap of them, copied into holders[]), fence
 * (the highest holder's), lease_left_ms (the longest), age_ms (the
 * oldest) and waiters from a q that queue_decide() has ordered.
 * e's name is the caller's. */
void queue_entry(const struct queued_contender *q, size_t n, unsigned permits, dlock_list_entry *e,
                       dlock_list_holder *holders, size_t cap);

#endif
