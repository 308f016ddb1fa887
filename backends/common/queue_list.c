/* backends/common/queue_list.c - see queue_list.h. */
#include "config.h"

#include "queue_list.h"

#include <stdlib.h>

static int by_order(const void *a, const void *b)
{
    const struct queued_contender *x = a, *y = b;
    return (x->order > y->order) - (x->order < y->order);
}

size_t queue_decide(struct queued_contender *q, size_t n, unsigned permits)
{
    if (n > 1)
        qsort(q, n, sizeof *q, by_order);
    size_t holding = 0;
    bool exclusive_before = false;
    for (size_t i = 0; i < n; i++) {
        if (q[i].mode == DLOCK_MODE_SHARED)
            q[i].holds = !exclusive_before;
        else if (q[i].mode == DLOCK_MODE_SEMAPHORE)
            q[i].holds = i < permits;
        else
            q[i].holds = i == 0;
        exclusive_before |= q[i].mode == DLOCK_MODE_EXCLUSIVE;
        holding += q[i].holds;
    }
    return holding;
}

void queue_entry(const struct queued_contender *q, size_t n, unsigned permits, dlock_list_entry *e,
                       dlock_list_holder *holders, size_t cap)
{
    e->kind = n ? q[0].mode : DLOCK_MODE_EXCLUSIVE;
    e->permits = e->kind == DLOCK_MODE_SEMAPHORE ? permits : 0;
    e->holder_count = 0;
    e->holders = holders;
    e->n_holders = 0;
    e->fence = 0;
    e->lease_left_ms = -1;
    e->age_ms = -1;
    for (size_t i = 0; i < n; i++) {
        if (!q[i].holds)
            continue;
        const dlock_list_holder *h = &q[i].holder;
        e->holder_count++;
        if (e->n_holders < cap)
            holders[e->n_holders++] = *h;
        if (h->fence > e->fence)
            e->fence = h->fence;
        if (h->lease_left_ms > e->lease_left_ms)
            e->lease_left_ms = h->lease_left_ms;
        if (h->age_ms > e->age_ms)
            e->age_ms = h->age_ms;
    }
    e->waiters = (int64_t)n - e->holder_count;
}
