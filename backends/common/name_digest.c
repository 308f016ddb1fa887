/* backends/common/name_digest.c - see name_digest.h. */
#include "config.h"

#include "fnv1a.h"
#include "name_digest.h"


uint64_t name_digest(const void *a, size_t a_len, const void *b, size_t b_len)
{
    return fnv1a_64(fnv1a_64(FNV1A_64_OFFSET, a, a_len), b, b_len);
}

void name_digest_hex(uint64_t digest, char out[17])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        out[i] = hex[digest & 15];
        digest >>= 4;
    }
    out[16] = '\0';
}
