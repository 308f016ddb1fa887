/* backends/common/cursor.h - a listing's cursor: the last key (or row name)
 * a page examined, as lowercase hex, which every backend that lists by key
 * order hands out and takes back (postgres, mysql, etcd). */
#ifndef DLOCK_COMMON_CURSOR_H
#define DLOCK_COMMON_CURSOR_H

#include <stdbool.h>
#include <stddef.h>

/* The key's len bytes as 2 * len lowercase hex digits, malloc'd; NULL when
 * out of memory. */
char *cursor_encode(const char *key, size_t len);

/* The bytes of a cursor made by cursor_encode into out (room for max), and
 * their number into *len; out may be NULL to check only. False, with out
 * and *len undefined, when text is not lowercase hex of 1..max bytes. */
bool cursor_decode(const char *text, char *out, size_t max, size_t *len);

#endif
