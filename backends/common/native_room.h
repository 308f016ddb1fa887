/* backends/common/native_room.h - how many of a pool's connections may
 * carry attempts sent without a thread (the provider's acquire_send): at
 * most half of them. Such a connection comes back only when the
 * application's loop reads its answer, and the blocking calls (the
 * workers' fallbacks, a release, a blocking acquire made in a callback on
 * that loop) must always find one that comes back without it: with all of
 * the pool held by answers only the loop can read, and the loop blocked
 * waiting for a connection, neither would ever end. */
#ifndef DLOCK_COMMON_NATIVE_ROOM_H
#define DLOCK_COMMON_NATIVE_ROOM_H

#include <stdbool.h>

/* Takes a place for one more attempt, *in_flight counting those out (at
 * most half of pool_max, at least one): true when it was taken (give it
 * back with native_room_given_back), false when none is free. Atomic: two
 * threads cannot both take the last place. */
static inline bool native_room_try_take(int *in_flight, int pool_max)
{
    int cap = pool_max / 2 > 0 ? pool_max / 2 : 1;
    int now = __atomic_load_n(in_flight, __ATOMIC_RELAXED);
    while (now < cap)
        if (__atomic_compare_exchange_n(in_flight, &now, now + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return true;
    return false;
}

static inline void native_room_given_back(int *in_flight)
{
    __atomic_sub_fetch(in_flight, 1, __ATOMIC_RELAXED);
}

#endif
