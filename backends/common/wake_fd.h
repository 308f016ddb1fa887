/* backends/common/wake_fd.h - an eventfd that wakes a backend's own
 * thread out of poll(): other threads signal it, the thread drains it
 * before it looks at what changed. */
#ifndef DLOCK_COMMON_WAKE_FD_H
#define DLOCK_COMMON_WAKE_FD_H

#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A non-blocking, close-on-exec eventfd, or -1 with errno set. */
static inline int wake_fd_open(void)
{
    return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

/* Makes fd readable. Never blocks: a count at its limit is readable
 * already, so a failed write loses nothing. */
static inline void wake_fd_signal(int fd)
{
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof one);
    (void)n;
}

/* Makes fd unreadable again (the thread is awake). */
static inline void wake_fd_drain(int fd)
{
    uint64_t n;
    while (read(fd, &n, sizeof n) == (ssize_t)sizeof n)
        ;
}

#endif
