/* backends/common/name_escape.h - a lock name's bytes in a key or a path,
 * and back again for a listing.
 *
 * A backend chooses the bytes a name keeps as they are (its `plain`
 * predicate, never true for '%'); every other byte is written %XX with
 * uppercase hex digits. The escape is reversible and has one form per
 * name, so two names never share a key, and the unescape of a key gives
 * back exactly the bytes of the name it was made for. */
#ifndef DLOCK_NAME_ESCAPE_H
#define DLOCK_NAME_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>

/* Which bytes a backend writes as they are. */
typedef bool (*name_plain_fn)(unsigned char c);

/* Writes the escape of the len bytes of name into out (room for 3 * len
 * bytes; no NUL is added) and returns its length. */
size_t name_escape(const char *name, size_t len, name_plain_fn plain, char *out);

/* The name whose escape (with the same plain) is the len bytes of text,
 * into out (room for DLOCK_NAME_MAX + 1 bytes, NUL-terminated) and
 * *out_len. False when text is not such an escape: a byte that should
 * have been escaped, an escape of a byte that should not have been, a
 * malformed %XX, a NUL, an empty name or one over DLOCK_NAME_MAX bytes;
 * a listing then skips it as a key it did not make. */
bool name_unescape(const char *text, size_t len, name_plain_fn plain, char *out, size_t *out_len);

#endif
