/* backends/redis/redis_script_text.h - the text of the lock's Lua scripts,
 * apart from running them (redis_scripts.h), so that a program that talks
 * to Redis directly can send the very scripts the backend sends (the
 * benchmark's plain Redlock loop does). Names, owners and numbers travel
 * only in KEYS and ARGV, never in the script text. */
#ifndef DLOCK_REDIS_SCRIPT_TEXT_H
#define DLOCK_REDIS_SCRIPT_TEXT_H

enum redis_script {
    /* KEYS: lock, fence, queue, timeouts; ARGV: owner, lease, queue timeout,
     * "1" if this owner registered as a waiter[, the clock's unit in the
     * fence in microseconds, 1 if left out[, the name's wanted-channel
     * prefix and the publish command: a busy answer publishes "wanted" to
     * the prefix .. the holder's client id]] -> {1, fence, 1 if others are queued else 0} | {0, retry in
     * ms} */
    SCRIPT_ACQUIRE,
    /* same, first come first served; ARGV: owner, lease, queue timeout[,
     * wanted-channel prefix, publish command] */
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
     * prefix, publish command[, wanted-channel prefix, publish command, as
     * SCRIPT_ACQUIRE's] -> {1, fence} | {0, retry in ms} | {2, the
     * name's permits (0: it is a shared lock)} when held in another kind */
    SCRIPT_ACQUIRE_SHARED,
    /* KEYS: lock, queue, timeouts, holders; ARGV: owner, channel prefix,
     * publish command, permits ("0" for shared) -> 0, -1 not owner (or the
     * hold had run out) */
    SCRIPT_RELEASE_SHARED,
    /* KEYS: (lock, holders)...; ARGV: (owner, lease)... -> {1|0, ...} */
    SCRIPT_RENEW_SHARED,
    /* KEYS: lock, fence, holders, queue, timeouts; ARGV: channel prefix,
     * publish command, the prefix of the channels that tell a holder it is
     * asked for, publish command -> {1 if it was held, the fence counter} */
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

/* The Lua source of a script: a static string, NULL for a value out of
 * range. Thread-safe. */
const char *redis_script_text(enum redis_script which);

#endif
