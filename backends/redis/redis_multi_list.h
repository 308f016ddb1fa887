/* backends/redis/redis_multi_list.h - one page of a listing over several
 * masters: Redlock's independent ones (the names a majority holds, by one
 * owner), or a Redis Cluster's (each name on the master of its slot). */
#ifndef DLOCK_REDIS_MULTI_LIST_H
#define DLOCK_REDIS_MULTI_LIST_H

#include "redis_conn.h"

#include <dlock/provider.h>

/* Lists master after master (the cursor says which, and where in it).
 * With quorum > 0 (Redlock) each name a master holds is looked up on the
 * other masters, and it is reported when a quorum of them hold it for the
 * same owner and no master listed before this one does (so each name
 * once); a master that cannot be reached counts as not holding. With
 * quorum 0 (a Cluster) each name is reported from the one master that has
 * it. A master that cannot be reached has its own page skipped with a
 * warning on log_handle. DLOCK_OK, DLOCK_EINVAL (a bad cursor), what emit
 * returned, DLOCK_ENOMEM. */
int redis_multi_list_page(struct redis_pool *const *pools, int n, int quorum, const char *prefix, void *log_handle,
                          struct dlock_provider_list *req);

#endif
