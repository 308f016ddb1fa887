/* backends/common/name_digest.c - see name_digest.h. */
#include "config.h"

#include "name_digest.h"

#define FNV64_OFFSET 0xcbf29ce484222325ull
#define FNV64_PRIME 0x100000001b3ull

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV64_PRIME;
    }
    return h;
}

uint64_t dlock_name_digest(const void *a, size_t a_len, const void *b, size_t b_len)
{
    return fnv1a(fnv1a(FNV64_OFFSET, a, a_len), b, b_len);
}

void dlock_name_digest_hex(uint64_t digest, char out[17])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        out[i] = hex[digest & 15];
        digest >>= 4;
    }
    out[16] = '\0';
}
