/* backends/redis/redis_keys.c - see redis_keys.h */
#include "redis_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *redis_key_for(const char *prefix, const char *name, size_t len, const char *suffix, size_t *out_len)
{
    size_t plen = strlen(prefix), slen = strlen(suffix);
    char *k = malloc(plen + 2 + 3 * len + slen + 1);
    if (!k)
        return NULL;
    size_t o = 0;
    memcpy(k, prefix, plen);
    o += plen;
    k[o++] = '{';
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (c == '{' || c == '}' || c == '%')
            o += (size_t)sprintf(k + o, "%%%02X", (unsigned char)c);
        else
            k[o++] = c;
    }
    k[o++] = '}';
    memcpy(k + o, suffix, slen);
    o += slen;
    k[o] = 0;
    *out_len = o;
    return k;
}
