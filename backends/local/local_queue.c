/* backends/local/local_queue.c - see local_queue.h.
 *
 * Why FIFOs: a wake-up has to reach one process of the host, chosen by the
 * releaser, and be something the waiter can poll beside the core's cancel
 * descriptor. A FIFO is a name in a folder (so the releaser can find it and
 * the folder orders the line), pollable, and the kernel tells a writer
 * whether anyone still has it open: a waiter that died leaves no reader,
 * so a dead waiter never swallows the wake-up meant for the line.
 *
 * A waiter's FIFO appears under its final name only once the waiter has it
 * open (it is made under a name starting with '.' and renamed), so a
 * releaser never takes a waiter that is still joining for a dead one.
 *
 * No wake-up is lost to a waiter that is going away: the leaver removes its
 * name, takes an exclusive flock on its FIFO, empties it and hands on what
 * it did not use; a releaser writes under a shared flock. So a byte is
 * written either before the leaver empties the FIFO (and is handed on) or
 * after it closed it (the write fails with EPIPE: nobody reads it any more,
 * and the releaser wakes the next waiter instead); a releaser that opens
 * the FIFO before the name goes cannot write in between. */
#include "config.h"

#include "local_queue.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LINES_DIR ".q"

/* dirfd(3), which the parameters named dirfd below would hide. */
static int dirfd_of(DIR *d)
{
    return dirfd(d);
}

/* The folder of FILE's line, opened; made first when create is set (with
 * the lock directory's own permissions, so that whoever may lock there may
 * wait there). -1 when it does not exist or cannot be made. */
static int open_line(int dirfd, const char *file, bool create)
{
    int qfd = openat(dirfd, LINES_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (qfd < 0 && create && errno == ENOENT) {
        struct stat st;
        mode_t mode = fstat(dirfd, &st) == 0 ? (st.st_mode & 07777) : 0700;
        if (mkdirat(dirfd, LINES_DIR, mode) != 0 && errno != EEXIST)
            return -1;
        qfd = openat(dirfd, LINES_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    }
    if (qfd < 0)
        return -1;
    int lfd = openat(qfd, file, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (lfd < 0 && create && errno == ENOENT) {
        struct stat st;
        mode_t mode = fstat(qfd, &st) == 0 ? (st.st_mode & 07777) : 0700;
        if (mkdirat(qfd, file, mode) == 0 || errno == EEXIST)
            lfd = openat(qfd, file, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    }
    int err = errno;
    close(qfd);
    errno = err;
    return lfd;
}

int local_queue_join(int dirfd, const char *file, bool shared, struct local_waiter *w)
{
    static unsigned joins; /* tells apart two joins of one process in one nanosecond */
    int lfd = open_line(dirfd, file, true);
    if (lfd < 0)
        return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    unsigned n = __atomic_add_fetch(&joins, 1, __ATOMIC_RELAXED);
    char joining[sizeof w->entry + 1];
    snprintf(w->entry, sizeof w->entry, "%016llx-%08x-%08x.%c", (unsigned long long)ns, (unsigned)getpid(), n,
             shared ? 's' : 'x');
    snprintf(joining, sizeof joining, ".%s", w->entry);
    int fd = -1;
    if (mkfifoat(lfd, joining, 0666) == 0) {
        fd = openat(lfd, joining, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 || renameat(lfd, joining, lfd, w->entry) != 0) {
            int err = errno;
            if (fd >= 0)
                close(fd);
            unlinkat(lfd, joining, 0);
            errno = err;
            fd = -1;
        }
    }
    int err = errno;
    close(lfd);
    if (fd < 0) {
        errno = err;
        return -1;
    }
    w->fd = fd;
    w->place.state = LINE_ASKED;
    w->wakes = 0;
    return 0;
}

int local_queue_drain(struct local_waiter *w)
{
    int got = 0;
    char buf[64];
    ssize_t n;
    while (w->place.state != LINE_OUT && (n = read(w->fd, buf, sizeof buf)) > 0)
        got += (int)n;
    w->wakes += got;
    return got;
}

void local_queue_leave(int dirfd, const char *file, struct local_waiter *w, int hand_on)
{
    if (w->place.state == LINE_OUT)
        return;
    /* By path from the lock directory: needs no descriptor, so it cannot
     * fail for want of one, and must not (the releaser relies on it). */
    char path[sizeof LINES_DIR + NAME_MAX + sizeof w->entry + 2];
    snprintf(path, sizeof path, "%s/%s/%s", LINES_DIR, file, w->entry);
    unlinkat(dirfd, path, 0);
    while (flock(w->fd, LOCK_EX) != 0 && errno == EINTR)
        ;
    local_queue_drain(w);
    int owed = w->wakes < hand_on ? w->wakes : hand_on;
    close(w->fd);
    w->place.state = LINE_OUT;
    w->wakes = 0;
    if (owed > 0)
        local_queue_wake_next(dirfd, file, owed);
}

int local_queue_watch(int ifd, int dirfd, const char *dir, const char *file)
{
    int lfd = open_line(dirfd, file, true);
    if (lfd < 0)
        return -1;
    close(lfd);
    char path[PATH_MAX + sizeof LINES_DIR + NAME_MAX + 3];
    if ((size_t)snprintf(path, sizeof path, "%s/%s/%s", dir, LINES_DIR, file) >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* A waiter appears by its creation under a hidden name, then a rename. */
    return inotify_add_watch(ifd, path, IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
}

bool local_queue_is_own(const char *name, const char *entry)
{
    if (name[0] == '.')
        name++; /* still joining */
    return entry[0] && strcmp(name, entry) == 0;
}

/* One byte into a FIFO open for writing. The reader may close it between
 * our open and this write, which raises SIGPIPE: that signal is held back
 * for this thread meanwhile and taken away again, unless one was already
 * pending, so a library call never kills or surprises the program. Returns
 * whether the FIFO holds a wake-up now (a full one already does). */
static bool write_wake(int fd)
{
    sigset_t pipe_only, old, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    sigemptyset(&pending);
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE) == 1;
    ssize_t n = write(fd, "w", 1);
    int err = errno;
    if (n < 0 && err == EPIPE && !was_pending) {
        static const struct timespec at_once = { 0, 0 };
        sigtimedwait(&pipe_only, NULL, &at_once);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return n == 1 || (n < 0 && err == EAGAIN);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_shared_entry(const char *name)
{
    size_t n = strlen(name);
    return n > 2 && strcmp(name + n - 2, ".s") == 0;
}

/* The waiters' names of the line open as d (hidden ones, still joining,
 * left out), in name order: the line. *count of them; free with
 * free_names. */
static char **read_line(DIR *d, size_t *countp)
{
    char **names = NULL;
    size_t count = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue; /* ".", "..", and waiters still joining */
        if (count == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            char **grown = realloc(names, ncap * sizeof *names);
            if (!grown)
                break;
            names = grown;
            cap = ncap;
        }
        if (!(names[count] = strdup(de->d_name)))
            break;
        count++;
    }
    if (count > 1)
        qsort(names, count, sizeof *names, by_name);
    *countp = count;
    return names;
}

static void free_names(char **names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

/* FILE's line, read: its folder open as *d (closedir it) and its names in
 * order (free_names them). False when there is no folder to read. */
static bool list_line(int dirfd, const char *file, DIR **d, char ***names, size_t *count)
{
    int lfd = open_line(dirfd, file, false);
    if (lfd < 0)
        return false;
    if (!(*d = fdopendir(lfd))) {
        close(lfd);
        return false;
    }
    *names = read_line(*d, count);
    return true;
}

/* The FIFO of waiter NAME in the line's folder lfd, open for writing when
 * a waiter still has it open; -1 otherwise. One that nobody has open (the
 * waiter died) is removed; something that is not a FIFO (planted in a
 * shared directory) is left alone and never written. */
static int open_live(int lfd, const char *name)
{
    int fd = openat(lfd, name, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENXIO)
            unlinkat(lfd, name, 0);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
        close(fd);
        return -1;
    }
    return fd;
}

bool local_queue_anyone(int dirfd, const char *file)
{
    DIR *d;
    char **names;
    size_t count = 0;
    if (!list_line(dirfd, file, &d, &names, &count))
        return false;
    bool anyone = false;
    for (size_t i = 0; i < count && !anyone; i++) {
        int fd = open_live(dirfd_of(d), names[i]);
        if (fd >= 0) {
            anyone = true;
            close(fd);
        }
    }
    free_names(names, count);
    closedir(d);
    return anyone;
}

int local_queue_wake_next(int dirfd, const char *file, int n)
{
    DIR *d;
    char **names;
    size_t count = 0;
    if (!list_line(dirfd, file, &d, &names, &count))
        return 0;
    int live = 0, woken = 0;
    for (size_t i = 0; i < count; i++) {
        int fd = open_live(dirfd_of(d), names[i]);
        if (fd < 0)
            continue;
        int unread = 0;
        live++;
        if (woken >= n) {
            close(fd);
            break;
        }
        (void)ioctl(fd, FIONREAD, &unread);
        while (flock(fd, LOCK_SH) != 0 && errno == EINTR)
            ;
        bool written = write_wake(fd);
        close(fd); /* and the flock with it */
        if (!written)
            continue; /* it left meanwhile, without this one: the next one gets it */
        if (unread > 0)
            continue; /* it has not taken the last one yet: it may be stopped */
        if (!is_shared_entry(names[i]))
            woken++;
    }
    free_names(names, count);
    closedir(d);
    return live;
}

/* How long ago the FIFO fd was last written to (a wake-up), in ms. The
 * kernel stamps a FIFO's modification time from the wall clock at every
 * write, so the comparison is with that clock. */
static int64_t ms_since_write(int fd)
{
    struct stat st;
    struct timespec now;
    if (fstat(fd, &st) != 0 || clock_gettime(CLOCK_REALTIME, &now) != 0)
        return 0;
    return (int64_t)(now.tv_sec - st.st_mtim.tv_sec) * 1000 + (now.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
}

bool local_queue_is_first(int dirfd, const char *file, const struct local_waiter *w, int64_t *look_again_ms)
{
    DIR *d;
    char **names;
    size_t count = 0;
    *look_again_ms = -1;
    if (w->place.state == LINE_OUT || !list_line(dirfd, file, &d, &names, &count))
        return true;
    bool first = true;
    for (size_t i = 0; first && i < count && strcmp(names[i], w->entry) < 0; i++) {
        int fd = open_live(dirfd_of(d), names[i]);
        if (fd < 0)
            continue;
        int unread = 0;
        (void)ioctl(fd, FIONREAD, &unread);
        int64_t since = unread > 0 ? ms_since_write(fd) : 0;
        close(fd);
        if (unread > 0 && since >= LOCAL_STUCK_WAKE_MS)
            continue; /* woken long ago and not taking its turn: stopped, or hung */
        first = false; /* a live waiter came before us */
        /* If it is stopped, the release that wakes it wakes nobody else:
         * look again within half the grace, or when its wake-up is old. */
        *look_again_ms = unread > 0 ? LOCAL_STUCK_WAKE_MS - since : LOCAL_STUCK_WAKE_MS / 2;
    }
    free_names(names, count);
    closedir(d);
    return first;
}
