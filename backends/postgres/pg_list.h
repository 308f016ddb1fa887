/* backends/postgres/pg_list.h - one page of dlock_list in lease mode. */
#ifndef DLOCK_PG_LIST_H
#define DLOCK_PG_LIST_H

#include "pg_conn.h"

#include <dlock/provider.h>

/* Emits the held names under prefix (the configured key prefix) that start
 * with req->prefix, one page in key order: one SELECT, no row locks. The
 * cursor is the hex of the last key reported. Waiters and ages are not
 * kept in lease mode (-1). DLOCK_OK, DLOCK_EINVAL (a bad cursor), what
 * emit returned, backend failures. */
int pg_list_page(struct pg_pool *pool, const struct pg_server *srv, const char *prefix,
                 struct dlock_provider_list *req);

#endif
