/* backends/redis/redlock_list.h - one page of the redlock backend's
 * listing: the names a majority of its masters hold, by one owner. */
#ifndef DLOCK_REDLOCK_LIST_H
#define DLOCK_REDLOCK_LIST_H

#include "redis_conn.h"

#include <dlock/provider.h>

/* Lists master after master (the cursor says which, and where in it):
 * each name a master holds is looked up on the other masters, and it is
 * reported when a quorum of them hold it for the same owner and no master
 * listed before this one does (so each name once). A master that cannot
 * be reached counts as not holding; its own page is skipped with a
 * warning on log_handle. DLOCK_OK, DLOCK_EINVAL (a bad cursor), what emit
 * returned, DLOCK_ENOMEM. */
int redlock_list_page(struct redis_pool *pools, int n, int quorum, const char *prefix, void *log_handle,
                      struct dlock_provider_list *req);

#endif
