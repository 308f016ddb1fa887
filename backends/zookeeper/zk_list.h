/* backends/zookeeper/zk_list.h - one page of the zookeeper backend's
 * listing of the names held or waited for under its root. */
#ifndef DLOCK_ZK_LIST_H
#define DLOCK_ZK_LIST_H

#include "zk_session.h"

#include <dlock/provider.h>

struct queued_contender;

/* The line of one parent: its contender nodes (children) in q (room for
 * children->count) in sequence order, the holders marked; returns how many
 * contenders, and the semaphore's N in *permits. */
size_t zk_line_of(const struct String_vector *children, struct queued_contender *q, unsigned *permits);

/* Describes the name NAME (name_len bytes), whose parent node is parent,
 * as a listing entry (holders, fence, waiters) and hands it to use(e, arg)
 * if anyone holds or waits for it; DLOCK_OK without a call if no one does.
 * Returns use()'s result or a failure. */
int zk_describe_name(struct zk_session *s, zhandle_t *zh, const char *parent, const char *name, size_t name_len,
                     int (*use)(const dlock_list_entry *e, void *arg), void *arg);

/* Reads one page of req (see zk_list.c) from the children of root. */
int zk_list_page(struct zk_session *s, const char *root, struct dlock_provider_list *req);

#endif
