/* backends/redis/redis_list.h - one page of the redis backend's listing of
 * the names held or waited for, on one server (or the sentinels' master). */
#ifndef DLOCK_REDIS_LIST_H
#define DLOCK_REDIS_LIST_H

#include "redis_conn.h"

#include <dlock/provider.h>

/* The holders of a shared name or semaphore described in one entry; the
 * count goes on past them. */
#define REDIS_LIST_HOLDERS_MAX 256

/* One SCAN for the fence counters under prefix whose name starts with
 * req->prefix, and one pipeline reading those names (see redis_list.c). */
int redis_list_page(struct redis_pool *pool, const char *prefix, struct dlock_provider_list *req);

#endif
