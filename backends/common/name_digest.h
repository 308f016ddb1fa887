/* backends/common/name_digest.h - a stable 64-bit digest of a lock's key,
 * for the places where a backend needs a short fixed-size stand-in for a
 * name of up to DLOCK_NAME_MAX arbitrary bytes: PostgreSQL advisory-lock
 * keys and notification channels, MySQL GET_LOCK names.
 *
 * The digest is FNV-1a (64 bits). It is part of the on-the-wire layout:
 * processes running different libdlock versions must agree on it, so it
 * never changes. Two names with the same digest only exclude each other
 * (false contention), which is safe; FNV is not collision resistant, so a
 * user who chooses names to collide can only slow themselves down. */
#ifndef DLOCK_NAME_DIGEST_H
#define DLOCK_NAME_DIGEST_H

#include <stddef.h>
#include <stdint.h>

/* Digest of the concatenation a || b (either may be empty). */
uint64_t name_digest(const void *a, size_t a_len, const void *b, size_t b_len);

/* Writes the digest as 16 lowercase hex digits and a NUL into out[17]. */
void name_digest_hex(uint64_t digest, char out[17]);

#endif
