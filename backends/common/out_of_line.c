/* backends/common/out_of_line.c - see out_of_line.h. */
#include "config.h"

#include "out_of_line.h"

#include <dlock/provider.h>
#include <poll.h>

int out_of_line_wait(int wake_fd, int64_t timeout_ms)
{
    if (timeout_ms > OUT_OF_LINE_MS)
        timeout_ms = OUT_OF_LINE_MS;
    struct pollfd p = { .fd = wake_fd, .events = POLLIN };
    int n = poll(&p, wake_fd >= 0 ? 1 : 0, timeout_ms > 0 ? (int)timeout_ms : 0);
    return n == 0 ? DLOCK_ETIMEDOUT : DLOCK_OK;
}
