/* backends/redis/redis_keys.h - the key names of a lock. */
#ifndef DLOCK_REDIS_KEYS_H
#define DLOCK_REDIS_KEYS_H

#include <stddef.h>

/* Returns "<prefix>{<escaped name>}<suffix>" (malloc()ed, NUL-terminated,
 * its length in *out_len), or NULL when out of memory. '{', '}' and '%' in
 * the name are written %7B, %7D, %25, so the hash tag is always exactly the
 * escaped name: every key of a lock lands in one Cluster slot, and a name
 * cannot pin or split slots. The prefix must not contain braces. */
char *redis_key_for(const char *prefix, const char *name, size_t len, const char *suffix, size_t *out_len);

#endif
