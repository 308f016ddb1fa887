/* backends/mysql/my_list.h - one page of dlock_list in lease mode. */
#ifndef DLOCK_MY_LIST_H
#define DLOCK_MY_LIST_H

#include "my_conn.h"

#include <dlock/provider.h>

/* Emits the held names of table under prefix (the configured key prefix)
 * that start with req->prefix, one page in key order: one SELECT, no row
 * locks. The cursor is the hex of the last key reported. Waiters and ages
 * are not kept in lease mode (-1). DLOCK_OK, DLOCK_EINVAL (a bad cursor),
 * what emit returned, backend failures. */
int my_list_page(struct my_pool *pool, const struct my_server *srv, const char *table, const char *prefix,
                 struct dlock_provider_list *req);

#endif
