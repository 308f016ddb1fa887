/* core/timer_heap.c - a binary min-heap of timers keyed by due time. Each
 * timer remembers its index so a release can take it out in O(log n)
 * without searching. */
#include "config.h"

#include "internal.h"

#include <stdlib.h>

void dlock__timer_heap_init(struct dlock__timer_heap *h)
{
    h->items = NULL;
    h->len = h->cap = 0;
}

void dlock__timer_heap_free(struct dlock__timer_heap *h)
{
    for (size_t i = 0; i < h->len; i++)
        h->items[i]->heap_index = SIZE_MAX;
    free(h->items);
    dlock__timer_heap_init(h);
}

static void place(struct dlock__timer_heap *h, size_t i, struct dlock__timer *t)
{
    h->items[i] = t;
    t->heap_index = i;
}

static void sift_up(struct dlock__timer_heap *h, size_t i)
{
    struct dlock__timer *t = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->items[parent]->due_ms <= t->due_ms)
            break;
        place(h, i, h->items[parent]);
        i = parent;
    }
    place(h, i, t);
}

static void sift_down(struct dlock__timer_heap *h, size_t i)
{
    struct dlock__timer *t = h->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && h->items[child + 1]->due_ms < h->items[child]->due_ms)
            child++;
        if (t->due_ms <= h->items[child]->due_ms)
            break;
        place(h, i, h->items[child]);
        i = child;
    }
    place(h, i, t);
}

int dlock__timer_heap_push(struct dlock__timer_heap *h, struct dlock__timer *t)
{
    if (h->len == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        struct dlock__timer **items = realloc(h->items, cap * sizeof *items);
        if (!items)
            return DLOCK_ENOMEM;
        h->items = items;
        h->cap = cap;
    }
    place(h, h->len++, t);
    sift_up(h, h->len - 1);
    return DLOCK_OK;
}

struct dlock__timer *dlock__timer_heap_peek(const struct dlock__timer_heap *h)
{
    return h->len ? h->items[0] : NULL;
}

void dlock__timer_heap_remove(struct dlock__timer_heap *h, struct dlock__timer *t)
{
    size_t i = t->heap_index;
    if (i >= h->len || h->items[i] != t)
        return;
    t->heap_index = SIZE_MAX;
    struct dlock__timer *last = h->items[--h->len];
    if (i == h->len)
        return;
    place(h, i, last);
    if (i > 0 && h->items[(i - 1) / 2]->due_ms > last->due_ms)
        sift_up(h, i);
    else
        sift_down(h, i);
}

struct dlock__timer *dlock__timer_heap_pop(struct dlock__timer_heap *h)
{
    struct dlock__timer *top = dlock__timer_heap_peek(h);
    if (top)
        dlock__timer_heap_remove(h, top);
    return top;
}

bool dlock__timer_in_heap(const struct dlock__timer *t)
{
    return t->heap_index != SIZE_MAX;
}
