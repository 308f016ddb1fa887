/* backends/redis/redis_keys.c - see redis_keys.h */
#include "redis_keys.h"
#include "../common/name_escape.h"

#include <dlock/provider.h>

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
    o += name_escape(name, len, redis_name_plain, k + o);
    k[o++] = '}';
    memcpy(k + o, suffix, slen);
    o += slen;
    k[o] = 0;
    *out_len = o;
    return k;
}

int redis_lock_keys_init(struct redis_lock_keys *k, const char *prefix, const char *name, size_t len)
{
    k->key = redis_key_for(prefix, name, len, "", &k->key_len);
    k->fence_key = redis_key_for(prefix, name, len, ":fence", &k->fence_key_len);
    k->queue_key = redis_key_for(prefix, name, len, ":queue", &k->queue_key_len);
    k->timeouts_key = redis_key_for(prefix, name, len, ":timeouts", &k->timeouts_key_len);
    k->channel_prefix = redis_key_for(prefix, name, len, ":ch:", &k->channel_prefix_len);
    k->holders_key = redis_key_for(prefix, name, len, ":holders", &k->holders_key_len);
    k->wanted_prefix = redis_key_for(prefix, name, len, ":cw:", &k->wanted_prefix_len);
    if (!k->key || !k->fence_key || !k->queue_key || !k->timeouts_key || !k->channel_prefix || !k->holders_key ||
        !k->wanted_prefix) {
        redis_lock_keys_free(k);
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory for key names");
    }
    return DLOCK_OK;
}

void redis_break_args(const struct redis_lock_keys *k, const char *publish, const char *args[9], size_t lens[9])
{
    const char *a[9] = { k->key, k->fence_key, k->holders_key, k->queue_key, k->timeouts_key, k->channel_prefix,
                         publish, k->wanted_prefix, publish };
    size_t l[9] = { k->key_len, k->fence_key_len, k->holders_key_len, k->queue_key_len, k->timeouts_key_len,
                    k->channel_prefix_len, strlen(publish), k->wanted_prefix_len, strlen(publish) };
    memcpy(args, a, sizeof a);
    memcpy(lens, l, sizeof l);
}

void redis_lock_keys_free(struct redis_lock_keys *k)
{
    free(k->key);
    free(k->fence_key);
    free(k->queue_key);
    free(k->timeouts_key);
    free(k->channel_prefix);
    free(k->holders_key);
    free(k->wanted_prefix);
    memset(k, 0, sizeof *k);
}
