/* backends/zookeeper/zk_break.h - an operator's forced release. */
#ifndef DLOCK_ZK_BREAK_H
#define DLOCK_ZK_BREAK_H

#include "zk_session.h"

#include <stdint.h>

/* Deletes the nodes of every holder of NAME under root in one multi (all
 * or none), so the next in line is granted and the holders' checks find
 * their node gone. *broken: 1 if anyone held, 0 if not; *fence: 0 (a
 * fence is the next holder's node's czxid, which is already above every
 * holder's). DLOCK_OK, DLOCK_EUNAVAILABLE (also when the line changed
 * under the multi: run it again), DLOCK_ECONFIG (the nodes' ACL forbids). */
int zk_break_holders(struct zk_session *s, const char *root, const char *name, size_t name_len, int *broken,
                     uint64_t *fence);

#endif
