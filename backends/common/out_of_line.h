/* backends/common/out_of_line.h - how the SQL backends' waiters wait when
 * they are not in the server's line of waiters (it could not be joined:
 * no free connection, or the join failed; or a request in it failed). */
#ifndef DLOCK_OUT_OF_LINE_H
#define DLOCK_OUT_OF_LINE_H

#include <stdint.h>

/* How long such a waiter waits before it looks again, in ms. */
#define OUT_OF_LINE_MS 50

/* Waits until wake_fd is readable (DLOCK_OK) or the smaller of timeout_ms
 * and OUT_OF_LINE_MS has passed (DLOCK_ETIMEDOUT): the core's timeout for
 * a native wait is the holder's remaining lease, which can be long, and
 * nothing would end the wait sooner. Thread-safe; wake_fd < 0 is none. */
int out_of_line_wait(int wake_fd, int64_t timeout_ms);

#endif
