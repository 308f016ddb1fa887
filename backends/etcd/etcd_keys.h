/* backends/etcd/etcd_keys.h - the parts of the etcd backend's key layout
 * (see etcd.c) that the lock operations and the listing both read. */
#ifndef DLOCK_ETCD_KEYS_H
#define DLOCK_ETCD_KEYS_H

#include <stdbool.h>
#include <string.h>

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

/* A downgrade makes an exclusive hold shared where it stands: its key
 * keeps its name (so its place in line, its create revision, and its
 * lease), and its value, the owner, gets ETCD_SHARED_MARK in front. An
 * exclusive key whose value starts with the mark is a shared hold. Such a
 * key was the oldest of its name when it was made shared (an exclusive
 * hold is the oldest key), so it stays the oldest, and a name has at most
 * one. */
static inline bool etcd_value_made_shared(const char *value, int len)
{
    return len >= (int)strlen(ETCD_SHARED_MARK) && memcmp(value, ETCD_SHARED_MARK, strlen(ETCD_SHARED_MARK)) == 0;
}

/* Beside a semaphore's directory, "<prefix><escaped name>" + this: its N. */
#define ETCD_PERMITS_SUFFIX "#permits"

#endif
