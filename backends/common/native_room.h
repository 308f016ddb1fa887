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

/* Whether one more attempt may go out, *in_flight counting those that did
 * (read and changed atomically), from a pool of pool_max connections. */
static inline bool native_room_for_one_more(const int *in_flight, int pool_max)
{
    int cap = pool_max / 2;
    return __atomic_load_n(in_flight, __ATOMIC_RELAXED) < (cap > 0 ? cap : 1);
}

static inline void native_room_taken(int *in_flight)
{
    __atomic_add_fetch(in_flight, 1, __ATOMIC_RELAXED);
}

static inline void native_room_given_back(int *in_flight)
{
    __atomic_sub_fetch(in_flight, 1, __ATOMIC_RELAXED);
}

#endif
