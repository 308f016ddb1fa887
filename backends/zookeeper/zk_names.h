/* backends/zookeeper/zk_names.h - where a lock lives in the ZooKeeper tree.
 *
 * A lock NAME is the parent node <root>/<escaped NAME>; each contender adds
 * an ephemeral sequential child "<owner tag>-lock-<10 digits>" under it.
 * The escape keeps [A-Za-z0-9_-] and writes every other byte as %XX, so a
 * name can never add a path level, be "." or "..", or hold a byte ZooKeeper
 * refuses; it is reversible, so two names never share a parent. The owner
 * tag is the owner id with ':' as '_': a contender recognises its own node
 * by it (after a create whose reply was lost) and never touches another's. */
#ifndef DLOCK_ZK_NAMES_H
#define DLOCK_ZK_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A malloc'ed "<root>/<escaped name>", or NULL when out of memory. */
char *zk_parent_path(const char *root, const char *name, size_t name_len);

/* A malloc'ed "<parent>/<child>", or NULL when out of memory. */
char *zk_join(const char *parent, const char *child);

/* The lock name whose parent node is named child (a child of the root),
 * into name (room for DLOCK_NAME_MAX + 1 bytes) and *name_len; false for
 * a node that is no escaped name. */
bool zk_name_of_parent(const char *child, char *name, size_t *name_len);

/* Writes "<owner tag>-lock-" into out (size bytes); false if it does not fit. */
bool zk_node_prefix(const char *owner, char *out, size_t size);

/* The sequence number of a child name "...-lock-NNNNNNNNNN", or -1. */
int64_t zk_sequence_of(const char *child);

/* A contender node's kind, from the mark before "-lock-": 'x' exclusive,
 * 's' shared, 'p' a permit of a semaphore of *permits (else 0). */
char zk_kind_of(const char *child, unsigned *permits);

/* The data of a node made shared by a downgrade: the owner id, a newline,
 * and in decimal the fence the hold keeps (the czxid of the exclusive node
 * it replaced). Other nodes hold the owner id alone. */
void zk_downgraded_data(char *out, size_t size, const char *owner, uint64_t fence);

/* Cuts a node's data (NUL-terminated) after its owner id, in place, and
 * returns the fence a downgrade wrote after it, or 0 when there is none. */
uint64_t zk_data_fence(char *data);

/* True when root is an absolute ZooKeeper path without a trailing '/',
 * empty components, "." or ".." components. */
bool zk_valid_root(const char *root);

#endif
