/* backends/local/local_file.c - a lock file: its name in the directory,
 * opening it (tracked across fork()), its header, and the byte-range OFD
 * locks on it that hold it (see local_file.h for the layout). */
#include "config.h"

#include "local.h"
#include "local_backend.h"
#include "../common/fnv1a.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every open lock file of the process. A child made by fork() shares the
 * open file descriptions, so its copies of the descriptors would keep the
 * OFD locks of a holder that died: the child closes its copies at once
 * (the parent's stay, and so do its locks). The client cannot be used in
 * the child anyway (the fork guard). */
static pthread_mutex_t open_files_mu = PTHREAD_MUTEX_INITIALIZER;
/* This process's pid for the header, without a system call per grant
 * (glibc no longer caches it); a child of fork() sets its own. */
static pid_t my_pid;
static struct local_lock *open_files;
static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;

static void before_fork(void)
{
    pthread_mutex_lock(&open_files_mu);
}

static void after_fork_in_parent(void)
{
    pthread_mutex_unlock(&open_files_mu);
}

static void after_fork_in_child(void)
{
    __atomic_store_n(&my_pid, getpid(), __ATOMIC_RELAXED);
    for (struct local_lock *ll = open_files; ll; ll = ll->next) {
        close(ll->fd);
        if (ll->map)
            munmap(ll->map, HEADER_SIZE);
        ll->map = NULL;
        ll->counted = false; /* the parent's count, not ours */
        ll->fd_open = ll->held = false;
        if (ll->watch_fd)
            close(ll->watch_fd - 1);
        ll->watch_fd = 0;
        if (ll->waiter.place.state != LINE_OUT)
            close(ll->waiter.fd); /* the parent's place in the line stays */
        ll->waiter.place.state = LINE_OUT;
        ll->watching = false;
    }
    open_files = NULL;
    pthread_mutex_unlock(&open_files_mu);
}

static void install_fork_handlers(void)
{
    __atomic_store_n(&my_pid, getpid(), __ATOMIC_RELAXED);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

void local_install_fork_handlers(void)
{
    pthread_once(&fork_handlers_once, install_fork_handlers);
}

void local_track_open(struct local_lock *ll)
{
    pthread_mutex_lock(&open_files_mu);
    ll->prev = NULL;
    ll->next = open_files;
    if (open_files)
        open_files->prev = ll;
    open_files = ll;
    pthread_mutex_unlock(&open_files_mu);
}

/* Closes ll's lock file and forgets it. */
void local_close_lock_file(struct local_lock *ll)
{
    pthread_mutex_lock(&open_files_mu);
    if (ll->fd_open) {
        if (ll->prev)
            ll->prev->next = ll->next;
        else if (open_files == ll)
            open_files = ll->next;
        if (ll->next)
            ll->next->prev = ll->prev;
        ll->prev = ll->next = NULL;
        if (ll->map)
            munmap(ll->map, HEADER_SIZE);
        ll->map = NULL;
        close(ll->fd);
    }
    ll->fd_open = false;
    pthread_mutex_unlock(&open_files_mu);
}

static uint64_t fnv1a(const char *s, size_t n, uint64_t basis)
{
    uint64_t h = fnv1a_64(basis, s, n);
    /* A finaliser so the two hashes differ in more than their start. */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static bool keep_byte(unsigned char c, size_t pos)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || (c == '.' && pos > 0);
}

/* Maps a lock name to a file name that is safe in one directory: bytes other
 * than [A-Za-z0-9_-] (and a leading '.') become %XX, so no name can reach
 * outside the directory or collide with another short name. Names whose
 * escaped form would be too long for a file name keep a readable start and
 * add a 128-bit hash. out must hold NAME_MAX + 1 bytes. */
void dlock__local_file_name(const char *name, size_t len, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0, cut = 0;
    bool long_form = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (o <= 120)
            cut = o; /* a byte boundary, never inside an escape */
        if (o > 200) {
            long_form = true;
            break;
        }
        if (keep_byte(c, i)) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (long_form)
        snprintf(out + cut, NAME_MAX + 1 - cut, ".%016llx%016llx.hlock",
                 (unsigned long long)fnv1a(name, len, 1469598103934665603ULL),
                 (unsigned long long)fnv1a(name, len, 0x84222325cbf29ce4ULL));
    else
        snprintf(out + o, NAME_MAX + 1 - o, ".lock");
}

bool local_is_long_form(const char *file)
{
    size_t n = strlen(file);
    return n > 6 && strcmp(file + n - 6, ".hlock") == 0;
}

/* The header of an open lock file in memory, or NULL (then pread and
 * pwrite do). A new, empty file is first given its header's length; a file
 * with less than a header (damaged) is left as it is. */
struct lock_file_header *local_map_header(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return NULL;
    if (st.st_size == 0 && ftruncate(fd, HEADER_SIZE) != 0)
        return NULL;
    if (st.st_size != 0 && st.st_size < HEADER_SIZE)
        return NULL;
    void *p = mmap(NULL, HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

int local_open_lock_file(struct local_instance *inst, struct dlock_provider_lock *lk)
{
    struct local_lock *ll = lk->priv;
    if (ll->fd_open)
        return DLOCK_OK;
    char *file = ll->file;
    dlock__local_file_name(lk->name, lk->name_len, file);
    int fd = openat(inst->dirfd, file, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot open %s/%s: %s", inst->dir, file,
                            strerror(errno));
    ll->fd = fd;
    ll->fd_open = true;
    ll->map = local_map_header(fd);
    if (local_is_long_form(file)) {
        /* The listing reads the name back from here. Every opener writes
         * the same bytes after its own map_header (which may have cut an
         * earlier opener's copy off a new file), so one copy stays. */
        (void)!pwrite(fd, lk->name, lk->name_len, NAME_OFFSET);
    }
    local_track_open(ll);
    return DLOCK_OK;
}

/* One non-blocking lock or unlock of len bytes at start (len 0: to the end
 * of the file, and beyond). Returns 0 and sets *busy (when given) to whether
 * another open file description holds a conflicting lock, or -1 on error. */
int local_set_range(int fd, short type, off_t start, off_t len, bool *busy)
{
    struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len, .l_pid = 0 };
    if (busy)
        *busy = false;
    for (;;) {
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (busy && (errno == EAGAIN || errno == EACCES)) {
            *busy = true;
            return 0;
        }
        return -1;
    }
}

/* The kind of lock another open file holds on byte at that a write lock
 * there would meet: F_RDLCK (a shared hold), F_WRLCK (an exclusive one),
 * F_UNLCK (none), or -1 with errno set. */
int local_lock_met_at(int fd, off_t at)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1, .l_pid = 0 };
    while (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        if (errno != EINTR)
            return -1;
    return fl.l_type;
}

/* An exclusive hold's range (local_file.h). */
int local_set_lock(int fd, short type, bool *busy)
{
    return local_set_range(fd, type, 0, EXCLUSIVE_LEN, busy);
}

int local_read_header(int fd, struct lock_file_header *h, const char *dir, const char *name)
{
    memset(h, 0, sizeof *h);
    ssize_t n = pread(fd, h, sizeof *h, 0);
    if (n < 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot read lock file for '%s' in %s: %s", name,
                            dir, strerror(errno));
    static const char zeros[8];
    if (n == 0 || ((size_t)n == sizeof *h && memcmp(h->magic, zeros, 8) == 0 && h->fence == 0)) {
        memset(h, 0, sizeof *h);
        return DLOCK_OK; /* a new file (or one given its length, never granted): fence 0 */
    }
    if ((size_t)n < sizeof *h || memcmp(h->magic, HEADER_MAGIC, 8) != 0)
        return dlock_seterr(DLOCK_EPROTOCOL,
                            "local: the lock file for '%s' in %s is not a libdlock lock file "
                            "(foreign or damaged); move it away", name, dir);
    h->owner[OWNER_MAX - 1] = 0;
    return DLOCK_OK;
}

int local_write_header(int fd, const struct lock_file_header *h, const char *dir)
{
    ssize_t n = pwrite(fd, h, sizeof *h, 0);
    if (n != (ssize_t)sizeof *h)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot write lock file in %s: %s", dir,
                            n < 0 ? strerror(errno) : "short write");
    return DLOCK_OK;
}

/* The first fence of a new file: the wall clock in microseconds, not 1.
 * The default directory is in /tmp, often a tmpfs that a reboot empties;
 * every token the old file issued was at most its own start plus one per
 * grant, below the clock now, so tokens keep growing across the loss (as
 * long as the clock does not go back), as a resource that kept the highest
 * one needs. */
uint64_t local_first_fence(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
}

/* The mapped header is ours (or new, and made ours now), else an error. */
int local_header_is_ours(struct lock_file_header *h, const char *dir, const struct dlock_provider_lock *lk)
{
    static const char zeros[8];
    if (memcmp(h->magic, HEADER_MAGIC, 8) == 0)
        return DLOCK_OK;
    if (memcmp(h->magic, zeros, 8) != 0 || __atomic_load_n(&h->fence, __ATOMIC_SEQ_CST) != 0)
        return dlock_seterr(DLOCK_EPROTOCOL,
                            "local: the lock file for '%s' in %s is not a libdlock lock file "
                            "(foreign or damaged); move it away", lk->name, dir);
    memcpy(h->magic, HEADER_MAGIC, 8); /* the same bytes from every writer */
    return DLOCK_OK;
}

/* Raises the mapped fence and returns it: atomically, since shared and
 * semaphore holders grant at the same time. */
uint64_t local_raise_fence(struct lock_file_header *h)
{
    uint64_t f = __atomic_load_n(&h->fence, __ATOMIC_SEQ_CST), next;
    do
        next = (f ? f : local_first_fence()) + 1;
    while (!__atomic_compare_exchange_n(&h->fence, &f, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return next;
}

/* A grant's bookkeeping in the mapped header, under the kernel lock: the
 * fence raised, the holder noted. The waiting count is not touched. */
int local_grant_in_memory(struct lock_file_header *h, const char *dir, const struct dlock_provider_lock *lk)
{
    int rc = local_header_is_ours(h, dir, lk);
    if (rc != DLOCK_OK)
        return rc;
    local_raise_fence(h);
    h->holder_pid = __atomic_load_n(&my_pid, __ATOMIC_RELAXED);
    if (strncmp(h->owner, lk->owner, sizeof h->owner - 1) != 0)
        snprintf(h->owner, sizeof h->owner, "%s", lk->owner);
    return DLOCK_OK;
}

/* A lock name used as a semaphore, or the other way round: an error. */
int local_mode_mismatch(struct lock_file_header *h, const struct dlock_provider_lock *lk)
{
    uint32_t permits = __atomic_load_n(&h->permits, __ATOMIC_SEQ_CST);
    if (lk->mode != DLOCK_MODE_SEMAPHORE && permits != 0)
        return dlock_seterr(DLOCK_EINVAL, "local: '%s' is a semaphore of %u permits, not a lock", lk->name,
                            permits);
    return DLOCK_OK;
}
