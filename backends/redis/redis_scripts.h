/* backends/redis/redis_scripts.h - the lock's Lua scripts and running them
 * with EVALSHA. Scripts are loaded once per server (SCRIPT LOAD) and loaded
 * again when the server answers NOSCRIPT (after SCRIPT FLUSH or a restart).
 * Names, owners and numbers travel only in KEYS and ARGV, never in the
 * script text. */
#ifndef DLOCK_REDIS_SCRIPTS_H
#define DLOCK_REDIS_SCRIPTS_H

#include "redis_conn.h"

enum redis_script {
    /* KEYS: lock, fence, queue, timeouts; ARGV: owner, lease, queue timeout,
     * "1" if this owner registered as a waiter[, the clock's unit in the
     * fence in microseconds, 1 if left out] -> {1, fence} | {0, retry in ms} */
    SCRIPT_ACQUIRE,
    /* same, first come first served */
    SCRIPT_ACQUIRE_FAIR,
    /* KEYS: lock, queue, timeouts; ARGV: owner, channel prefix, lease, publish
     * command ("publish", or "spublish" in a sharded cluster) -> count left,
     * -1 not owner; at zero, wakes the first live waiter only */
    SCRIPT_RELEASE,
    /* KEYS: lock...; ARGV: (owner, lease)... -> {1|0, ...} */
    SCRIPT_RENEW,
    /* KEYS: lock, queue, timeouts; ARGV: owner, channel prefix, publish
     * command: stop waiting */
    SCRIPT_LEAVE,
    /* KEYS: fence; ARGV: value -> the counter, raised to value if lower
     * (Redlock: a majority agrees on the highest token handed out) */
    SCRIPT_FENCE_RAISE,
    /* Shared holds and permits. The lock hash's field "" names the kind the
     * name is held in ("s", or "p<N>" for N permits); each holder is a
     * member of the holders set scored by its expiry on the server's clock.
     * KEYS: lock, fence, queue, timeouts, holders; ARGV: owner, lease, queue
     * timeout, "1" if registered, kind, permits ("0" for shared), channel
     * prefix, publish command -> {1, fence} | {0, retry in ms} | {2, the
     * name's permits (0: it is a shared lock)} when held in another kind */
    SCRIPT_ACQUIRE_SHARED,
    /* KEYS: lock, queue, timeouts, holders; ARGV: owner, channel prefix,
     * publish command, permits ("0" for shared) -> 0, -1 not owner (or the
     * hold had run out) */
    SCRIPT_RELEASE_SHARED,
    /* KEYS: (lock, holders)...; ARGV: (owner, lease)... -> {1|0, ...} */
    SCRIPT_RENEW_SHARED,
    /* KEYS: lock, fence, holders, queue, timeouts; ARGV: channel prefix,
     * publish command -> {1 if it was held, the fence counter} */
    SCRIPT_BREAK,
    /* KEYS: lock, fence, queue, timeouts, holders; ARGV: owner, channel
     * prefix, publish command -> 1 (the owner's exclusive hold is now
     * shared, or already was) | 0 (the owner does not hold it) */
    SCRIPT_DOWNGRADE,
    /* Elections. KEYS: lock, value, fence; ARGV: owner, term, value, watch
     * channel, publish command -> 1 (stored, watchers told) | 0 (the owner
     * does not hold the name exclusively, or its hold is not the one of
     * that term: nothing stored) */
    SCRIPT_VALUE_PUT,
    /* KEYS: lock, fence, value -> {the fence counter while the name is
     * held exclusively, else "0"; the stored "term:value" or nil} */
    SCRIPT_LEADER_GET,
    SCRIPT_COUNT
};

struct redis_scripts {
    pthread_mutex_t mu;
    char sha[SCRIPT_COUNT][41];     /* "" until loaded */
};

void redis_scripts_init(struct redis_scripts *s);
void redis_scripts_destroy(struct redis_scripts *s);

/* Loads every script on pool's server (SCRIPT LOAD), so that their SHA1s
 * are known before a caller sends EVALSHA itself (Redlock's fan-out). */
int redis_scripts_preload(struct redis_pool *pool, struct redis_scripts *s);

/* "EVALSHA sha numkeys args...", ready for redisCommandArgv or
 * redisAppendCommandArgv (the fan-outs of redlock and WAIT pipelines send
 * it themselves). argv points into args and into the struct. */
struct redis_evalsha {
    char sha[41];               /* "" when the script is not loaded yet */
    char numkeys[16];
    int argc;
    const char **argv;
    size_t *lens;
    const char *small_argv[16];
    size_t small_lens[16];
};

/* Builds it; DLOCK_OK or DLOCK_ENOMEM. Free with redis_evalsha_free. */
int redis_evalsha_build(struct redis_evalsha *e, struct redis_scripts *s, enum redis_script which, int nkeys,
                        int nargs, const char **args, const size_t *lens);
void redis_evalsha_free(struct redis_evalsha *e);

/* EVALSHA script with nkeys keys then the remaining args. Returns the reply
 * (caller frees) or NULL with *rc; an error reply other than NOSCRIPT is
 * turned into DLOCK_EPROTOCOL with the server's text. */
redisReply *redis_script_run(struct redis_pool *pool, struct redis_scripts *s, enum redis_script which,
                             int nkeys, int nargs, const char **args, const size_t *lens, int *rc);

/* Turns a script's error reply into a code with the detail set:
 * DLOCK_EUNAVAILABLE for the "try again later" answers (LOADING, READONLY,
 * MASTERDOWN, BUSY, NOAUTH, TRYAGAIN, CLUSTERDOWN, a redirection),
 * DLOCK_EPROTOCOL otherwise. label names the server. */
int redis_script_error(const char *label, const char *text);

#endif
