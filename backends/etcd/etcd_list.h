/* backends/etcd/etcd_list.h - one page of the etcd backend's listing of
 * the names held or waited for under its prefix. */
#ifndef DLOCK_ETCD_LIST_H
#define DLOCK_ETCD_LIST_H

#include "etcd_http.h"

#include <dlock/provider.h>

/* Reads one page of req (see etcd_list.c) from the keys under prefix. */
int etcd_list_page(struct etcd_http *http, const char *prefix, struct dlock_provider_list *req);

#endif
