/* backends/common/fnv1a.h - the one FNV-1a (64-bit) of the tree: lock file
 * names and key digests in the backends, the name table in the core, the
 * hold table of dlock serve. Header-only so that each of those compiles it
 * in without an exported symbol; its values are written on disk and on
 * servers (file names, advisory keys), so it never changes. */
#ifndef DLOCK_COMMON_FNV1A_H
#define DLOCK_COMMON_FNV1A_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A_64_OFFSET 0xcbf29ce484222325ull

/* Continues the hash h over the n bytes at p; start with FNV1A_64_OFFSET. */
static inline uint64_t fnv1a_64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
