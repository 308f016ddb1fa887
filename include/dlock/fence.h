/*
 * dlock/fence.h - fence guards for resources outside this process.
 *
 * A lock cannot stop a holder that was paused past its lease from writing
 * after the next holder did; the resource can, by refusing writes whose
 * fencing token (dlock_fence()) is lower than the highest it has seen.
 */
#ifndef DLOCK_FENCE_H
#define DLOCK_FENCE_H

/*
 * Redis: set a value only if the fencing token is the highest seen.
 *   EVAL DLOCK_FENCE_REDIS_SET_SCRIPT 2 <data key> <fence key> <token> <value>
 * Returns 1 if written (the fence key is raised to the token), 0 if the
 * token is stale (nothing written). Put both keys in one hash tag for
 * Cluster, e.g. "{account:7}" and "{account:7}:fence".
 */
#define DLOCK_FENCE_REDIS_SET_SCRIPT                                            \
    "local high = tonumber(redis.call('get', KEYS[2]) or '0')\n"               \
    "local token = tonumber(ARGV[1])\n"                                       \
    "if token < high then return 0 end\n"                                     \
    "redis.call('set', KEYS[2], ARGV[1])\n"                                   \
    "redis.call('set', KEYS[1], ARGV[2])\n"                                   \
    "return 1\n"

/*
 * SQL needs no helper: keep the highest fence in the row and write only
 * when the token is not older, in one statement (0 rows updated = stale):
 *   UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
 */

#endif
