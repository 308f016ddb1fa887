/* backends/redis/redis_script_text.c - see redis_script_text.h
 *
 * The layout is Redisson's: the lock is a hash whose field "<client
 * id>:<thread>" holds the reentry count, with a TTL; the fence is a plain
 * counter that never expires; releases are published on a channel. */
#include "redis_script_text.h"

#include <stddef.h>

/* Server time in ms, for the waiters' deadlines (never the client's clock). */
#define LUA_NOW                                                               \
    "local t = redis.call('time')\n"                                          \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

/* Puts the owner in the waiter queue: at the tail if new, with its deadline
 * pushed out (needs LUA_NOW). */
#define LUA_ENQUEUE                                                           \
    "if not redis.call('zscore', KEYS[4], ARGV[1]) then\n"                    \
    "  redis.call('rpush', KEYS[3], ARGV[1])\n"                               \
    "end\n"                                                                   \
    "redis.call('zadd', KEYS[4], now + tonumber(ARGV[3]), ARGV[1])\n"         \
    "redis.call('pexpire', KEYS[3], 2 * tonumber(ARGV[3]))\n"                 \
    "redis.call('pexpire', KEYS[4], 2 * tonumber(ARGV[3]))\n"

/* A busy answer registers the owner as a waiter; the retry hint is the
 * holder's TTL but at most half the queue timeout, so a live waiter always
 * renews its place. */
#define LUA_REGISTER_WAITER                                                   \
    LUA_NOW                                                                   \
    LUA_ENQUEUE                                                               \
    "local ttl = redis.call('pttl', KEYS[1])\n"                               \
    "local most = math.floor(tonumber(ARGV[3]) / 2)\n"                        \
    "if ttl < 0 or ttl > most then ttl = most end\n"                          \
    "return {0, ttl}\n"

/* The next fence token: max(counter + 1, the server's clock in
 * microseconds), written back when the clock is ahead. The counter alone
 * can go back: a restart from an older RDB snapshot or an AOF that lost its
 * last second, a FLUSHALL, a failover to a replica that lagged. Every token
 * issued before such a loss was at most the clock of its grant (or one more
 * per grant within a microsecond), so taking the clock now keeps tokens
 * strictly increasing as long as the server's clock does not go back.
 * Microseconds since 1970 stay exact in Lua's doubles until about 2255.
 *
 * LUA_NEXT_FENCE_IN(unit) rounds the clock down to a multiple of unit
 * microseconds (a Lua expression) first. Redlock asks for 10 ms: masters
 * whose counters agree then hand out the same token for a grant unless
 * their clocks fall on two sides of a 10 ms mark, so the round that raises
 * a majority's counters to the token is rarely due; read to the
 * microsecond, the masters' clocks always differ, and it was due at every
 * grant. The price is that a counter lost less than 10 ms after a grant
 * can repeat that master's token, which the other masters of a majority
 * still cover. */
#define LUA_NEXT_FENCE_IN(unit)                                               \
    "local fence = redis.call('incr', KEYS[2])\n"                             \
    "local t = redis.call('time')\n"                                          \
    "local unit = " unit "\n"                                                 \
    "local clock = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / unit) * unit\n" \
    "if fence < clock then\n"                                                 \
    "  fence = clock\n"                                                       \
    "  redis.call('set', KEYS[2], string.format('%d', fence))\n"              \
    "end\n"
#define LUA_NEXT_FENCE LUA_NEXT_FENCE_IN("1")

/* A busy answer for an exclusive hold tells its holder that someone asks
 * (a holder that keeps released holds gives it back): "wanted" on
 * ARGV[at] (the name's channel prefix) .. the holder's client id, with the
 * publish command ARGV[at + 1]. Without ARGV[at], nobody is told. (HGETALL,
 * not HKEYS: the commands a least-privilege user needs stay the same.) */
#define LUA_TELL_HOLDER(at)                                                   \
    "if ARGV[" at "] and ARGV[" at "] ~= '' then\n"                           \
    "  local h = redis.call('hgetall', KEYS[1])\n"                             \
    "  for i = 1, #h, 2 do\n"                                                 \
    "    local id = string.match(h[i], '^(%x+):')\n"                          \
    "    if id then redis.call(ARGV[" at " + 1], ARGV[" at "] .. id, 'wanted') end\n" \
    "  end\n"                                                                 \
    "end\n"

/* The clock unit of SCRIPT_ACQUIRE: its optional fifth argument. */
#define ACQUIRE_UNIT "(tonumber(ARGV[5]) or 1)"

/* Our own field already there. The core counts reentry itself and never
 * asks the server again for a hold it has, so this is either this very
 * acquire sent twice (its first answer was lost with the connection) or a
 * hold the client declared lost whose give-back did not get through. Both
 * are one hold, not two: the count stays 1 (one release frees it), and it
 * is a new grant with a new, higher fence. */
#define LUA_OWN_FIELD_IN(unit)                                                \
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then\n"                  \
    "  redis.call('hset', KEYS[1], ARGV[1], 1)\n"                             \
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"                             \
    LUA_NEXT_FENCE_IN(unit)                                                   \
    "  return {1, fence}\n"                                                   \
    "end\n"
#define LUA_OWN_FIELD LUA_OWN_FIELD_IN("1")

static const char *const script_text[SCRIPT_COUNT] = {
    /* acquire: a free lock goes to whoever asks (barging allowed); a waiter
     * that gets it leaves the queue. The grant says whether others are
     * queued (1) or not (0), so that a client that keeps holds does not keep
     * this one (LINDEX, not LLEN: the commands a least-privilege user needs
     * stay the same). */
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  redis.call('hset', KEYS[1], ARGV[1], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  if ARGV[4] == '1' then\n"
    "    redis.call('lrem', KEYS[3], 0, ARGV[1])\n"
    "    redis.call('zrem', KEYS[4], ARGV[1])\n"
    "  end\n"
    LUA_NEXT_FENCE_IN(ACQUIRE_UNIT)
    "  return {1, fence, redis.call('lindex', KEYS[3], 0) and 1 or 0}\n"
    "end\n"
    LUA_OWN_FIELD_IN(ACQUIRE_UNIT)
    LUA_TELL_HOLDER("6")
    LUA_REGISTER_WAITER,

    /* fair acquire (Redisson's fair lock, with the server's clock): waiters
     * whose deadline passed are dropped from the head; only the head (or
     * anyone, if nobody waits) may take a free lock. */
    LUA_NOW
    "while true do\n"
    "  local head = redis.call('lindex', KEYS[3], 0)\n"
    "  if not head then break end\n"
    "  local dl = redis.call('zscore', KEYS[4], head)\n"
    "  if dl and tonumber(dl) > now then break end\n"
    "  redis.call('lpop', KEYS[3])\n"
    "  redis.call('zrem', KEYS[4], head)\n"
    "end\n"
    LUA_OWN_FIELD
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  local head = redis.call('lindex', KEYS[3], 0)\n"
    "  if (not head) or head == ARGV[1] then\n"
    "    if head then\n"
    "      redis.call('lpop', KEYS[3])\n"
    "      redis.call('zrem', KEYS[4], ARGV[1])\n"
    "    end\n"
    "    redis.call('hset', KEYS[1], ARGV[1], 1)\n"
    "    redis.call('pexpire', KEYS[1], ARGV[2])\n"
    LUA_NEXT_FENCE
    "    return {1, fence}\n"
    "  end\n"
    "end\n"
    LUA_TELL_HOLDER("4")
    LUA_REGISTER_WAITER,

    /* release: only the owner's field; at zero, delete and wake the first
     * live waiter on its own channel, nobody else (no herd). Waiters whose
     * deadline passed (dead, or gone) are dropped on the way. The last
     * release with nobody waiting costs HGET, DEL, LINDEX. */
    "local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]))\n"
    "if not count then\n"
    "  return -1\n"
    "end\n"
    "if count > 1 then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[1], -1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[3])\n"
    "  return count - 1\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "local head = redis.call('lindex', KEYS[2], 0)\n"
    "if not head then\n"
    "  return 0\n"
    "end\n"
    LUA_NOW
    "while head do\n"
    "  local dl = redis.call('zscore', KEYS[3], head)\n"
    "  if dl and tonumber(dl) > now then\n"
    "    redis.call(ARGV[4], ARGV[2] .. head, 'released')\n"
    "    return 0\n"
    "  end\n"
    "  redis.call('lpop', KEYS[2])\n"
    "  redis.call('zrem', KEYS[3], head)\n"
    "  head = redis.call('lindex', KEYS[2], 0)\n"
    "end\n"
    "return 0\n",

    /* renew, for one lock or a batch: extend only holds whose field is ours. */
    "local out = {}\n"
    "for i = 1, #KEYS do\n"
    "  if redis.call('hexists', KEYS[i], ARGV[2 * i - 1]) == 1 then\n"
    "    redis.call('pexpire', KEYS[i], ARGV[2 * i])\n"
    "    out[i] = 1\n"
    "  else\n"
    "    out[i] = 0\n"
    "  end\n"
    "end\n"
    "return out\n",

    /* leave the queue (gave up); if that makes a new head that may come in
     * (the lock is free, or held shared or as permits), wake it. */
    "local was_head = redis.call('lindex', KEYS[2], 0) == ARGV[1]\n"
    "redis.call('lrem', KEYS[2], 0, ARGV[1])\n"
    "redis.call('zrem', KEYS[3], ARGV[1])\n"
    "if was_head and (redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], '') == 1) then\n"
    "  local head = redis.call('lindex', KEYS[2], 0)\n"
    "  if head then redis.call(ARGV[3], ARGV[2] .. head, 'released') end\n"
    "end\n"
    "return 0\n",

    /* raise the fence counter to at least ARGV[1] (never lower it) */
    "local v = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "if v < tonumber(ARGV[1]) then\n"
    "  redis.call('set', KEYS[1], ARGV[1])\n"
    "  v = tonumber(ARGV[1])\n"
    "end\n"
    "return v\n",

    /* acquire shared or a permit: expired holders go first; a name held in
     * another kind (or with another number of permits) is refused; a name
     * held exclusively, or out of permits, or with a waiter ahead that this
     * request must not pass (any waiter, for permits; an exclusive one, for
     * shared) is busy. A grant passes the turn on to the first live waiter
     * when it could come in as well, so a run of readers wakes one by one. */
    LUA_NOW
    "local lease = tonumber(ARGV[2])\n"
    "local limit = tonumber(ARGV[6])\n"
    "redis.call('zremrangebyscore', KEYS[5], '-inf', now)\n"
    "local kind = redis.call('hget', KEYS[1], '')\n"
    "if kind and redis.call('zcard', KEYS[5]) == 0 then\n"
    "  redis.call('del', KEYS[1])\n"
    "  kind = false\n"
    "end\n"
    "if not kind then\n"
    "  redis.call('del', KEYS[5])\n"
    "end\n"
    "if kind and kind ~= ARGV[5] then\n"
    "  return {2, tonumber(string.sub(kind, 2)) or 0}\n"
    "end\n"
    "local function hold()\n"
    "  redis.call('zadd', KEYS[5], now + lease, ARGV[1])\n"
    "  redis.call('hset', KEYS[1], '', ARGV[5])\n"
    "  local ttl = redis.call('pttl', KEYS[1])\n"
    "  if ttl < lease then ttl = lease end\n"
    "  redis.call('pexpire', KEYS[1], ttl)\n"
    "  redis.call('pexpire', KEYS[5], ttl)\n"
    "end\n"
    /* Our own live hold: this very request sent twice. One hold, new fence. */
    "if redis.call('zscore', KEYS[5], ARGV[1]) then\n"
    "  hold()\n"
    LUA_NEXT_FENCE
    "  return {1, fence}\n"
    "end\n"
    "local busy = redis.call('exists', KEYS[1]) == 1 and not kind\n"
    "if not busy and limit > 0 and redis.call('zcard', KEYS[5]) >= limit then\n"
    "  busy = true\n"
    "end\n"
    "if not busy then\n"
    "  for _, w in ipairs(redis.call('lrange', KEYS[3], 0, -1)) do\n"
    "    if w == ARGV[1] then break end\n"
    "    local dl = redis.call('zscore', KEYS[4], w)\n"
    "    if dl and tonumber(dl) > now and (limit > 0 or not string.find(w, '/', 1, true)) then\n"
    "      busy = true\n"
    "      break\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if not busy then\n"
    "  hold()\n"
    "  if ARGV[4] == '1' then\n"
    "    redis.call('lrem', KEYS[3], 0, ARGV[1])\n"
    "    redis.call('zrem', KEYS[4], ARGV[1])\n"
    "  end\n"
    LUA_NEXT_FENCE
    "  local head = redis.call('lindex', KEYS[3], 0)\n"
    "  while head do\n"
    "    local dl = redis.call('zscore', KEYS[4], head)\n"
    "    if dl and tonumber(dl) > now then\n"
    "      if (limit == 0 and string.find(head, '/', 1, true)) or\n"
    "         (limit > 0 and redis.call('zcard', KEYS[5]) < limit) then\n"
    "        redis.call(ARGV[8], ARGV[7] .. head, 'released')\n"
    "      end\n"
    "      break\n"
    "    end\n"
    "    redis.call('lpop', KEYS[3])\n"
    "    redis.call('zrem', KEYS[4], head)\n"
    "    head = redis.call('lindex', KEYS[3], 0)\n"
    "  end\n"
    "  return {1, fence}\n"
    "end\n"
    /* Busy: out of permits, the earliest holder's expiry is when one may
     * come back; otherwise the exclusive holder's TTL. */
    LUA_TELL_HOLDER("9")
    "local hint\n"
    "if limit > 0 then\n"
    "  local first = redis.call('zrange', KEYS[5], 0, 0, 'withscores')\n"
    "  if first[2] then hint = tonumber(first[2]) - now end\n"
    "end\n"
    LUA_ENQUEUE
    "if not hint then hint = redis.call('pttl', KEYS[1]) end\n"
    "local most = math.floor(tonumber(ARGV[3]) / 2)\n"
    "if hint < 0 or hint > most then hint = most end\n"
    "return {0, hint}\n",

    /* release shared or a permit: only the owner's own live entry. The name
     * is free when the last holder goes; otherwise its TTL follows the
     * latest holder's expiry. A freed permit, or the last shared hold,
     * wakes the first live waiter. */
    LUA_NOW
    "local mine = redis.call('zscore', KEYS[4], ARGV[1])\n"
    "if not mine then\n"
    "  return -1\n"
    "end\n"
    "redis.call('zrem', KEYS[4], ARGV[1])\n"
    "redis.call('zremrangebyscore', KEYS[4], '-inf', now)\n"
    "local left = redis.call('zcard', KEYS[4])\n"
    "if left == 0 then\n"
    "  redis.call('del', KEYS[1], KEYS[4])\n"
    "else\n"
    "  local last = redis.call('zrange', KEYS[4], -1, -1, 'withscores')\n"
    "  local ttl = math.max(1, math.ceil(tonumber(last[2]) - now))\n"
    "  redis.call('pexpire', KEYS[1], ttl)\n"
    "  redis.call('pexpire', KEYS[4], ttl)\n"
    "end\n"
    "local result = 0\n"
    "if tonumber(mine) <= now then result = -1 end\n"
    "if tonumber(ARGV[4]) == 0 and left > 0 then\n"
    "  return result\n"
    "end\n"
    "local head = redis.call('lindex', KEYS[2], 0)\n"
    "while head do\n"
    "  local dl = redis.call('zscore', KEYS[3], head)\n"
    "  if dl and tonumber(dl) > now then\n"
    "    redis.call(ARGV[3], ARGV[2] .. head, 'released')\n"
    "    break\n"
    "  end\n"
    "  redis.call('lpop', KEYS[2])\n"
    "  redis.call('zrem', KEYS[3], head)\n"
    "  head = redis.call('lindex', KEYS[2], 0)\n"
    "end\n"
    "return result\n",

    /* renew shared holds and permits: extend only live entries that are
     * ours, on a name still marked as held that way. */
    LUA_NOW
    "local out = {}\n"
    "for i = 1, #KEYS / 2 do\n"
    "  local h, z = KEYS[2 * i - 1], KEYS[2 * i]\n"
    "  local owner, lease = ARGV[2 * i - 1], tonumber(ARGV[2 * i])\n"
    "  local s = redis.call('zscore', z, owner)\n"
    "  if s and tonumber(s) > now and redis.call('hexists', h, '') == 1 then\n"
    "    redis.call('zadd', z, now + lease, owner)\n"
    "    local ttl = redis.call('pttl', h)\n"
    "    if ttl < lease then ttl = lease end\n"
    "    redis.call('pexpire', h, ttl)\n"
    "    redis.call('pexpire', z, ttl)\n"
    "    out[i] = 1\n"
    "  else\n"
    "    if s then redis.call('zrem', z, owner) end\n"
    "    out[i] = 0\n"
    "  end\n"
    "end\n"
    "return out\n",

    /* break: every hold of the name goes at once, the fence counter moves
     * past every token handed out, and the first live waiter is woken. A
     * client that kept the hold after its release is told, as by a busy
     * answer, so that it stops taking it over at once rather than at its
     * next renewal. A free name is left as it is. */
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  return {0, tonumber(redis.call('get', KEYS[2]) or '0')}\n"
    "end\n"
    LUA_TELL_HOLDER("3")
    "redis.call('del', KEYS[1], KEYS[3])\n"
    LUA_NEXT_FENCE
    LUA_NOW
    "local head = redis.call('lindex', KEYS[4], 0)\n"
    "while head do\n"
    "  local dl = redis.call('zscore', KEYS[5], head)\n"
    "  if dl and tonumber(dl) > now then\n"
    "    redis.call(ARGV[2], ARGV[1] .. head, 'released')\n"
    "    break\n"
    "  end\n"
    "  redis.call('lpop', KEYS[4])\n"
    "  redis.call('zrem', KEYS[5], head)\n"
    "  head = redis.call('lindex', KEYS[4], 0)\n"
    "end\n"
    "return {1, fence}\n",

    /* downgrade: the owner's exclusive field becomes a shared holder with
     * the TTL the hold had left (and the fence it had), in one script, so
     * the name is never free or anyone else's. The queue is left as it is: a waiting writer keeps
     * its place and readers behind it stay behind it; a reader at the head
     * is woken (and passes the turn on to readers after it). */
    LUA_NOW
    "if redis.call('hget', KEYS[1], '') == 's' then\n"
    "  local s = redis.call('zscore', KEYS[5], ARGV[1])\n"
    "  if s and tonumber(s) > now then return 1 end\n"
    "  return 0\n"
    "end\n"
    "local ttl = redis.call('pttl', KEYS[1])\n"
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 or ttl <= 0 then\n"
    "  return 0\n"
    "end\n"
    "redis.call('hdel', KEYS[1], ARGV[1])\n"
    "redis.call('hset', KEYS[1], '', 's')\n"
    "redis.call('del', KEYS[5])\n"
    "redis.call('zadd', KEYS[5], now + ttl, ARGV[1])\n"
    "redis.call('pexpire', KEYS[1], ttl)\n"
    "redis.call('pexpire', KEYS[5], ttl)\n"
    "local head = redis.call('lindex', KEYS[3], 0)\n"
    "while head do\n"
    "  local dl = redis.call('zscore', KEYS[4], head)\n"
    "  if dl and tonumber(dl) > now then\n"
    "    if string.find(head, '/', 1, true) then redis.call(ARGV[3], ARGV[2] .. head, 'released') end\n"
    "    break\n"
    "  end\n"
    "  redis.call('lpop', KEYS[3])\n"
    "  redis.call('zrem', KEYS[4], head)\n"
    "  head = redis.call('lindex', KEYS[3], 0)\n"
    "end\n"
    "return 1\n",

    /* value put: only by the exclusive holder (its own field, and no ""
     * field, which marks a name held shared or as a semaphore), and only
     * for the hold of that term: the fence counter is the current hold's
     * token, so a late put of an earlier hold of the same owner fails. */
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 or redis.call('hexists', KEYS[1], '') == 1 or\n"
    "   redis.call('get', KEYS[3]) ~= ARGV[2] then\n"
    "  return 0\n"
    "end\n"
    "redis.call('set', KEYS[2], ARGV[2] .. ':' .. ARGV[3])\n"
    "redis.call(ARGV[5], ARGV[4], 'value')\n"
    "return 1\n",

    /* leader get: while the name is held exclusively, the fence counter
     * is its holder's token (a grant raises it; nothing else does while
     * the hold lasts). */
    "local term = '0'\n"
    "if redis.call('exists', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], '') == 0 then\n"
    "  term = redis.call('get', KEYS[2]) or '0'\n"
    "end\n"
    "return {term, redis.call('get', KEYS[3])}\n",
};

const char *redis_script_text(enum redis_script which)
{
    return (unsigned)which < SCRIPT_COUNT ? script_text[which] : NULL;
}
