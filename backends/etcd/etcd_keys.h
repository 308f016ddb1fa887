/* backends/etcd/etcd_keys.h - the parts of the etcd backend's key layout
 * (see etcd.c) that the lock operations and the listing both read. */
#ifndef DLOCK_ETCD_KEYS_H
#define DLOCK_ETCD_KEYS_H

#include <stdbool.h>

/* A name's bytes that would let one name's keys fall in another's range
 * ('/', which ends a name's directory) are escaped (name_escape.h), and so
 * is '%'; every other byte is kept. */
static inline bool etcd_name_plain(unsigned char c)
{
    return c != '/' && c != '%';
}

/* After "<prefix><escaped name>/": a shared key, a permit key; an
 * exclusive key starts with the owner's id (hex) instead. */
#define ETCD_SHARED_MARK "~s~"
#define ETCD_PERMIT_MARK "~p~"

/* Beside a semaphore's directory, "<prefix><escaped name>" + this: its N. */
#define ETCD_PERMITS_SUFFIX "#permits"

#endif
