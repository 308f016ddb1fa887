/* backends/redis/redis_keys.h - the key names of a lock. */
#ifndef DLOCK_REDIS_KEYS_H
#define DLOCK_REDIS_KEYS_H

#include <stdbool.h>
#include <stddef.h>

/* The bytes of a name a key keeps as they are (name_escape.h): all but
 * '{', '}' and '%'. */
static inline bool redis_name_plain(unsigned char c)
{
    return c != '{' && c != '}' && c != '%';
}

/* Returns "<prefix>{<escaped name>}<suffix>" (malloc()ed, NUL-terminated,
 * its length in *out_len), or NULL when out of memory. '{', '}' and '%' in
 * the name are written %7B, %7D, %25, so the hash tag is always exactly the
 * escaped name: every key of a lock lands in one Cluster slot, and a name
 * cannot pin or split slots. The prefix must not contain braces. */
char *redis_key_for(const char *prefix, const char *name, size_t len, const char *suffix, size_t *out_len);

/* Every key of one lock (the redis and redlock backends share the layout). */
struct redis_lock_keys {
    char *key;                  /* <prefix>{name}: the hash, owner -> reentry count */
    char *fence_key;            /* <prefix>{name}:fence */
    char *queue_key;            /* <prefix>{name}:queue: waiters in arrival order */
    char *timeouts_key;         /* <prefix>{name}:timeouts: each waiter's deadline */
    char *channel_prefix;       /* <prefix>{name}:ch: + owner: a waiter's own channel */
    char *wanted_prefix;        /* <prefix>{name}:cw: + client id: a caching holder's channel */
    char *holders_key;          /* <prefix>{name}:holders: shared or permit holders by expiry */
    size_t key_len, fence_key_len, queue_key_len, timeouts_key_len, channel_prefix_len, holders_key_len;
    size_t wanted_prefix_len;
};

/* Fills k for a name (k->key NULL before); DLOCK_OK or DLOCK_ENOMEM with
 * the detail set. */
int redis_lock_keys_init(struct redis_lock_keys *k, const char *prefix, const char *name, size_t len);
void redis_lock_keys_free(struct redis_lock_keys *k);

/* The arguments of SCRIPT_BREAK for k (5 keys, then the channel prefix,
 * the publish command, the prefix of the channels that tell a holder it is
 * asked for, and the publish command again), into args/lens. */
void redis_break_args(const struct redis_lock_keys *k, const char *publish, const char *args[9], size_t lens[9]);

#endif
