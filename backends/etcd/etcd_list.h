/* backends/etcd/etcd_list.h - one page of the etcd backend's listing of
 * the names held or waited for under its prefix. */
#ifndef DLOCK_ETCD_LIST_H
#define DLOCK_ETCD_LIST_H

#include "etcd_http.h"

#include <dlock/provider.h>

/* Reads one page of req (see etcd_list.c) from the keys under prefix. */
int etcd_list_page(struct etcd_http *http, const char *prefix, struct dlock_provider_list *req);

/* An operator's break: deletes the keys of every holder of NAME in one txn
 * (none if the line changed since it was read: DLOCK_EUNAVAILABLE, run it
 * again), so the next in line is granted and the holders' key checks find
 * their keys gone. *broken: 1 if anyone held; *fence: 0 (a fence is the
 * next holder's key's create revision, already above every holder's). */
int etcd_break_holders(struct etcd_http *http, const char *prefix, const char *name, size_t name_len, int *broken,
                       uint64_t *fence);

/* dlock_status for NAME, from its line as the listing reads it: held, the
 * holders' highest fence, and who holds: an exclusive holder's owner, or
 * how many hold it shared or as permits; then how many wait. */
int etcd_name_status(struct etcd_http *http, const char *prefix, const char *name, size_t name_len,
                     dlock_status_info *out);

#endif
