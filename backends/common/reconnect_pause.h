/* backends/common/reconnect_pause.h - how long a backend's own listening
 * connection (a subscriber, a watch stream, a poller) waits before it is
 * made again after a failure: 50 ms, doubling while it keeps failing, up
 * to 2 s. Only for those connections: the lock loop's backoff is the
 * core's. */
#ifndef DLOCK_COMMON_RECONNECT_PAUSE_H
#define DLOCK_COMMON_RECONNECT_PAUSE_H

#include <stdint.h>

enum { RECONNECT_PAUSE_FIRST_MS = 50, RECONNECT_PAUSE_CAP_MS = 2000 };

/* The pause after one more failure, given the last pause (0: none yet;
 * the caller sets it back to 0 once the connection works). */
static inline int64_t reconnect_pause_next(int64_t last_ms)
{
    if (last_ms <= 0)
        return RECONNECT_PAUSE_FIRST_MS;
    return last_ms >= RECONNECT_PAUSE_CAP_MS / 2 ? RECONNECT_PAUSE_CAP_MS : last_ms * 2;
}

#endif
