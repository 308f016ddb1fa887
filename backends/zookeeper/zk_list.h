/* backends/zookeeper/zk_list.h - one page of the zookeeper backend's
 * listing of the names held or waited for under its root. */
#ifndef DLOCK_ZK_LIST_H
#define DLOCK_ZK_LIST_H

#include "zk_session.h"

#include <dlock/provider.h>

/* Reads one page of req (see zk_list.c) from the children of root. */
int zk_list_page(struct zk_session *s, const char *root, struct dlock_provider_list *req);

#endif
