/* backends/local/local.c - the embedded default backend: one file per lock
 * name in a lock directory, held with an open file description (OFD) lock.
 *
 * Why OFD locks: the kernel drops them when the last descriptor of the open
 * file description closes, which includes the holder dying by any signal, so
 * a crashed holder never blocks the others. Unlike classic POSIX record locks
 * they belong to the open file, not the process, so two threads (two opens)
 * of one process exclude each other, and closing some unrelated descriptor of
 * the same file does not silently drop the lock. Files are opened O_CLOEXEC
 * so a program started by the holder (dlock run) does not inherit the lock.
 *
 * Each file starts with a small header: magic, the fence counter (raised on
 * every grant while the lock is held, so it is strictly increasing for as
 * long as the file exists; lock files are never deleted for that reason, and
 * a new one starts from the wall clock in microseconds), and
 * the pid and owner id of the latest holder for `dlock status` (which shows
 * them only while the file is locked).
 *
 * The header is mapped into memory (MAP_SHARED, so every process sees the
 * same page), so a grant raises the fence and notes its holder without a
 * system call: an uncontended grant and release are one fcntl each, as a
 * bare fcntl loop is. Where the file cannot be mapped, pread and pwrite do
 * the same.
 *
 * Waiting is native, and a release wakes one waiter: each waiter has a
 * place in the lock's line of waiters (local_queue.h: a FIFO per waiter, in
 * arrival order), and a release writes into the first live one. A holder
 * that dies runs no release; the kernel closes its descriptor, which the
 * waiters see on an inotify watch of the file (IN_CLOSE_WRITE), so that
 * wakes all of them at once, as do the two rarer moments that let several
 * readers in together (a downgrade, a waiting writer giving up), which touch
 * the file's times (IN_ATTRIB). The line and the watch exist only while a
 * lock is contended, since inotify instances are a scarce per-user resource
 * (128 by default). A waiter that cannot have either (no inotify instance,
 * a folder it may not write) waits in short polls instead. Waiters count
 * themselves in the header (after they joined the line, before they look
 * again), and a release looks at the line only when the count is not zero;
 * a waiter that died without taking itself off only costs releases that
 * look again.
 *
 * It protects processes of one host only. A lease is kept by the client
 * itself (the core expires a fixed lease and drops the kernel lock), since no
 * server exists to expire it: a holder that is stopped (SIGSTOP) keeps its
 * lock, and one that dies frees it at once. */
#include "config.h"

#include "local.h"
#include "local_file.h"
#include "local_queue.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>


struct local_instance {
    char dir[PATH_MAX];
    int dirfd;
};

struct local_lock {
    int fd;                   /* valid when fd_open */
    bool fd_open;
    bool held;
    bool turnstile;           /* an exclusive request holds the turnstile while it waits */
    int slot;                 /* a semaphore hold: the permit it has */
    struct lock_file_header *map; /* the header in memory while fd_open, or NULL */
    bool watching;            /* set up to wait (the line, the watch, the count) */
    int watch_fd;             /* inotify fd + 1 while contending, 0 if none */
    struct local_waiter waiter; /* the place in the line while contending */
    int64_t look_again_at;    /* fair mode: when a stuck waiter ahead stops counting
                               * (dlock_provider_now_ms), 0 for none */
    char file[NAME_MAX + 1];  /* the lock file's name in the directory, once it was opened */
    bool counted;             /* counted in the header's waiting */
    struct local_lock *prev, *next; /* in open_files while fd_open */
};

/* ---- descriptors across fork() -------------------------------------------------- */

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
        if (ll->waiter.joined)
            close(ll->waiter.fd); /* the parent's place in the line stays */
        ll->waiter.joined = false;
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

static void track_open(struct local_lock *ll)
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
static void close_lock_file(struct local_lock *ll)
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

static const struct dlock_setting_spec local_settings[] = {
    { "dir", DLOCK_SETTING_STRING, 0, 0 },
    { NULL, 0, 0, 0 },
};

/* ---- names -------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s, size_t n, uint64_t basis)
{
    uint64_t h = basis;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
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

static bool is_long_form(const char *file)
{
    size_t n = strlen(file);
    return n > 6 && strcmp(file + n - 6, ".hlock") == 0;
}

/* ---- instance ------------------------------------------------------------------ */

static int default_dir(char *out, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || tmp[0] != '/')
        tmp = "/tmp";
    if ((size_t)snprintf(out, len, "%s/dlock-%ld", tmp, (long)getuid()) >= len)
        return dlock_seterr(DLOCK_ECONFIG, "local: $TMPDIR is too long for a lock directory path");
    return DLOCK_OK;
}

/* Creates every missing component of path (like mkdir -p). */
static int make_dirs(char *path, mode_t mode)
{
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char saved = *p;
            *p = 0;
            int rc = mkdir(path, mode);
            int err = errno;
            *p = saved;
            if (rc != 0 && err != EEXIST)
                return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot create lock directory %s: %s",
                                    path, strerror(err));
            if (saved == 0)
                return DLOCK_OK;
        }
    }
}

static int local_open(void **instance, const struct dlock_provider_env *env)
{
    struct local_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "local: out of memory");
    const char *dir = NULL;
    bool is_default = !dlock_settings_string(env->settings, "dir", &dir);
    int rc;
    if (is_default) {
        rc = default_dir(inst->dir, sizeof inst->dir);
    } else if (dir[0] == 0 || strlen(dir) >= sizeof inst->dir - NAME_MAX - 2) {
        rc = dlock_seterr(DLOCK_ECONFIG, "%s: local.dir must be a non-empty path shorter than %d bytes",
                          dlock_settings_where(env->settings, "dir"), (int)(sizeof inst->dir - NAME_MAX - 2));
    } else {
        snprintf(inst->dir, sizeof inst->dir, "%s", dir);
        rc = DLOCK_OK;
    }
    /* The default lives in a shared /tmp: private to the user, so nobody else
     * can plant files or links in it; a configured one is the admin's choice. */
    if (rc == DLOCK_OK)
        rc = make_dirs(inst->dir, is_default ? 0700 : 0777);
    if (rc == DLOCK_OK) {
        /* The default is never followed through a symbolic link: one that
         * someone planted (a non-sticky or unprotected TMPDIR) and swapped
         * later would split this user's processes across two directories,
         * each granting the same name. */
        inst->dirfd = open(inst->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (is_default ? O_NOFOLLOW : 0));
        struct stat link;
        if (inst->dirfd < 0 && is_default && lstat(inst->dir, &link) == 0 && S_ISLNK(link.st_mode))
            rc = dlock_seterr(DLOCK_EUNAVAILABLE,
                              "local: %s is a symbolic link, which the default lock directory must not be; "
                              "remove it or set local.dir", inst->dir);
        else if (inst->dirfd < 0)
            rc = dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot open lock directory %s: %s", inst->dir,
                              strerror(errno));
    }
    if (rc == DLOCK_OK && is_default) {
        struct stat st;
        if (fstat(inst->dirfd, &st) != 0 || st.st_uid != getuid() || (st.st_mode & 022)) {
            rc = dlock_seterr(DLOCK_EUNAVAILABLE,
                              "local: %s is not a directory owned by uid %ld and closed to others; "
                              "remove it or set local.dir", inst->dir, (long)getuid());
            close(inst->dirfd);
        }
    }
    if (rc != DLOCK_OK) {
        free(inst);
        return rc;
    }
    pthread_once(&fork_handlers_once, install_fork_handlers);
    dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "local: lock directory %s", inst->dir);
    *instance = inst;
    return DLOCK_OK;
}

static void local_close(void *instance)
{
    struct local_instance *inst = instance;
    close(inst->dirfd);
    free(inst);
}

/* ---- the lock file ---------------------------------------------------------------- */

/* The header of an open lock file in memory, or NULL (then pread and
 * pwrite do). A new, empty file is first given its header's length; a file
 * with less than a header (damaged) is left as it is. */
static struct lock_file_header *map_header(int fd)
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

static int open_lock_file(struct local_instance *inst, struct dlock_provider_lock *lk)
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
    ll->map = map_header(fd);
    if (is_long_form(file)) {
        /* The listing reads the name back from here. Every opener writes
         * the same bytes after its own map_header (which may have cut an
         * earlier opener's copy off a new file), so one copy stays. */
        (void)!pwrite(fd, lk->name, lk->name_len, NAME_OFFSET);
    }
    track_open(ll);
    return DLOCK_OK;
}

/* One non-blocking lock or unlock of len bytes at start (len 0: to the end
 * of the file, and beyond). Returns 0 and sets *busy (when given) to whether
 * another open file description holds a conflicting lock, or -1 on error. */
static int set_range(int fd, short type, off_t start, off_t len, bool *busy)
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
static int lock_met_at(int fd, off_t at)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1, .l_pid = 0 };
    while (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        if (errno != EINTR)
            return -1;
    return fl.l_type;
}

/* An exclusive hold's range (local_file.h). */
static int set_lock(int fd, short type, bool *busy)
{
    return set_range(fd, type, 0, EXCLUSIVE_LEN, busy);
}

static int read_header(int fd, struct lock_file_header *h, const char *dir, const char *name)
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

static int write_header(int fd, const struct lock_file_header *h, const char *dir)
{
    ssize_t n = pwrite(fd, h, sizeof *h, 0);
    if (n != (ssize_t)sizeof *h)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot write lock file in %s: %s", dir,
                            n < 0 ? strerror(errno) : "short write");
    return DLOCK_OK;
}

/* Sets up what a waiter needs before it looks a second time: its place
 * in the line (so a release wakes it) and a watch of the file (so a holder
 * that dies, or a downgrade, does). Failure is not an error: waiting then
 * polls. */
static void start_watch(struct local_instance *inst, struct dlock_provider_lock *lk)
{
    struct local_lock *ll = lk->priv;
    if (ll->watching)
        return;
    ll->watching = true;
    char path[PATH_MAX + NAME_MAX + 2];
    (void)local_queue_join(inst->dirfd, ll->file, lk->mode == DLOCK_MODE_SHARED, &ll->waiter);
    int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd >= 0) {
        snprintf(path, sizeof path, "%s/%s", inst->dir, ll->file);
        if (inotify_add_watch(fd, path, IN_ATTRIB | IN_CLOSE_WRITE) < 0)
            close(fd);
        else
            ll->watch_fd = fd + 1;
    }
    if (ll->map) {
        /* After joining, before the caller looks again: a release that saw
         * no waiter came before that look, which then finds it free. */
        __atomic_add_fetch(&ll->map->waiting, 1, __ATOMIC_SEQ_CST);
        ll->counted = true;
    }
}

/* Out of the line and the watch. granted: what the waiter came for was
 * given, so a wake-up it did not use is handed on only where it may be
 * another's (a semaphore's releases free a permit each); a waiter that
 * gives up hands on one (or, for a semaphore, each). */
static void stop_watch(struct local_instance *inst, struct dlock_provider_lock *lk, bool granted)
{
    struct local_lock *ll = lk->priv;
    if (ll->waiter.joined) {
        int hand_on = lk->mode == DLOCK_MODE_SEMAPHORE ? INT_MAX : granted ? 0 : 1;
        local_queue_leave(inst->dirfd, ll->file, &ll->waiter, hand_on);
    }
    if (ll->counted && ll->map) {
        /* Never below zero: a file given to a process that counted before
         * the header was (re)made by an older version. */
        uint32_t n = __atomic_load_n(&ll->map->waiting, __ATOMIC_SEQ_CST);
        while (n > 0 && !__atomic_compare_exchange_n(&ll->map->waiting, &n, n - 1, false, __ATOMIC_SEQ_CST,
                                                     __ATOMIC_SEQ_CST))
            ;
    }
    ll->counted = false;
    if (ll->watch_fd)
        close(ll->watch_fd - 1);
    ll->watch_fd = 0;
    ll->watching = false;
}

/* Wakes the first waiter of lk's line, when the header says someone waits
 * (or cannot say). */
static void wake_next(struct local_instance *inst, struct dlock_provider_lock *lk)
{
    struct local_lock *ll = lk->priv;
    uint32_t seen = ll->map ? __atomic_load_n(&ll->map->waiting, __ATOMIC_SEQ_CST) : 1;
    if (seen == 0)
        return;
    if (local_queue_wake_next(inst->dirfd, ll->file, 1) == 0 && ll->map) {
        /* Nobody in the line: what is counted was left by waiters that
         * died. Back to zero, unless a waiter counted itself since we read
         * the count (its FIFO, visible before it counts, would then have
         * been found), so releases skip the line again. */
        __atomic_compare_exchange_n(&ll->map->waiting, &seen, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
}

/* The first fence of a new file: the wall clock in microseconds, not 1.
 * The default directory is in /tmp, often a tmpfs that a reboot empties;
 * every token the old file issued was at most its own start plus one per
 * grant, below the clock now, so tokens keep growing across the loss (as
 * long as the clock does not go back), as a resource that kept the highest
 * one needs. */
static uint64_t first_fence(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
}

/* The mapped header is ours (or new, and made ours now), else an error. */
static int header_is_ours(struct lock_file_header *h, const char *dir, const struct dlock_provider_lock *lk)
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
static uint64_t raise_fence(struct lock_file_header *h)
{
    uint64_t f = __atomic_load_n(&h->fence, __ATOMIC_SEQ_CST), next;
    do
        next = (f ? f : first_fence()) + 1;
    while (!__atomic_compare_exchange_n(&h->fence, &f, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return next;
}

/* A grant's bookkeeping in the mapped header, under the kernel lock: the
 * fence raised, the holder noted. The waiting count is not touched. */
static int grant_in_memory(struct lock_file_header *h, const char *dir, const struct dlock_provider_lock *lk)
{
    int rc = header_is_ours(h, dir, lk);
    if (rc != DLOCK_OK)
        return rc;
    raise_fence(h);
    h->holder_pid = __atomic_load_n(&my_pid, __ATOMIC_RELAXED);
    if (strncmp(h->owner, lk->owner, sizeof h->owner - 1) != 0)
        snprintf(h->owner, sizeof h->owner, "%s", lk->owner);
    return DLOCK_OK;
}

/* A lock name used as a semaphore, or the other way round: an error. */
static int mode_mismatch(struct lock_file_header *h, const struct dlock_provider_lock *lk)
{
    uint32_t permits = __atomic_load_n(&h->permits, __ATOMIC_SEQ_CST);
    if (lk->mode != DLOCK_MODE_SEMAPHORE && permits != 0)
        return dlock_seterr(DLOCK_EINVAL, "local: '%s' is a semaphore of %u permits, not a lock", lk->name,
                            permits);
    return DLOCK_OK;
}

/* One try at a range, with the watch set up before a second look when the
 * first finds it busy (so a release between the two is seen by wait()).
 * DLOCK_OK with *busy set, or a failure. */
static int try_range(struct local_instance *inst, struct dlock_provider_lock *lk, short type, off_t start,
                     off_t len, bool *busy)
{
    struct local_lock *ll = lk->priv;
    for (int look = 0; look < 2; look++) {
        if (set_range(ll->fd, type, start, len, busy) != 0)
            return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot lock the file for '%s' in %s: %s", lk->name,
                                inst->dir, strerror(errno));
        if (!*busy || ll->watching)
            return DLOCK_OK;
        start_watch(inst, lk);
    }
    return DLOCK_OK;
}

/* A shared hold: past the turnstile (no exclusive request waits or holds),
 * then a read lock on HOLD_BYTE beside the other readers'. */
static int acquire_shared(struct local_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *grant)
{
    struct local_lock *ll = lk->priv;
    bool busy;
    int rc = try_range(inst, lk, F_RDLCK, TURNSTILE_BYTE, 1, &busy);
    if (rc == DLOCK_OK && !busy) {
        /* Past the turnstile but behind an exclusive hold: wait on a watch
         * too, not in polling steps. */
        rc = try_range(inst, lk, F_RDLCK, HOLD_BYTE, 1, &busy);
        set_range(ll->fd, F_UNLCK, TURNSTILE_BYTE, 1, NULL);
    }
    if (rc != DLOCK_OK)
        return rc;
    if (busy) {
        grant->retry_hint_ms = -1;
        return DLOCK_EBUSY;
    }
    /* A semaphore request publishes the name's permits before it looks
     * for readers (acquire_permit); a reader looks at them after it
     * holds its read lock. Each orders its write before its read, so
     * at least one of the two sees the other and refuses. */
    if ((rc = mode_mismatch(ll->map, lk)) != DLOCK_OK) {
        set_range(ll->fd, F_UNLCK, HOLD_BYTE, 1, NULL);
        return rc;
    }
    stop_watch(inst, lk, true);
    if ((rc = header_is_ours(ll->map, inst->dir, lk)) != DLOCK_OK) {
        set_range(ll->fd, F_UNLCK, HOLD_BYTE, 1, NULL);
        return rc;
    }
    ll->held = true;
    grant->fence = raise_fence(ll->map);
    grant->has_fence = 1;
    return DLOCK_OK;
}

/* A semaphore request that wrote the name's N and was then refused (the
 * name is held shared) takes it back, so that a refused request leaves the
 * name as it found it. Only while no permit is held: with every permit
 * write-locked by this request, none can be taken meanwhile, and a reader
 * that still reads N refuses, which is safe. If a permit is held (another
 * request took one and will refuse too), N stays. */
static void unmake_semaphore(struct local_lock *ll, uint32_t permits)
{
    bool busy = true;
    if (set_range(ll->fd, F_WRLCK, SLOT_BASE, permits, &busy) != 0 || busy)
        return;
    uint32_t expected = permits;
    __atomic_compare_exchange_n(&ll->map->permits, &expected, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    set_range(ll->fd, F_UNLCK, SLOT_BASE, permits, NULL);
}

/* A semaphore hold: the first free one of the name's permits. */
static int acquire_permit(struct local_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *grant)
{
    struct local_lock *ll = lk->priv;
    int rc = header_is_ours(ll->map, inst->dir, lk);
    if (rc != DLOCK_OK)
        return rc;
    uint32_t permits = 0;
    bool made_semaphore =
        __atomic_compare_exchange_n(&ll->map->permits, &permits, lk->permits, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    if (!made_semaphore && permits != lk->permits)
        return dlock_seterr(DLOCK_EINVAL, "local: '%s' is a semaphore of %u permits, not %u", lk->name, permits,
                            lk->permits);
    for (int look = 0; look < 2; look++) {
        for (unsigned i = 0; i < lk->permits; i++) {
            bool busy;
            if (set_range(ll->fd, F_WRLCK, SLOT_BASE + (off_t)i, 1, &busy) != 0)
                return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot lock the file for '%s' in %s: %s",
                                    lk->name, inst->dir, strerror(errno));
            if (!busy) {
                /* A reader holds the name as a shared lock: a permit beside
                 * it would hold the name twice. Its read lock lies outside
                 * the permits, so the kernel does not keep the two apart;
                 * the test comes after the permit is taken, so it also
                 * sees an exclusive hold that was downgraded while this
                 * request looked (the downgrade read-locks the hold byte
                 * before it frees the permits). */
                int met = lock_met_at(ll->fd, HOLD_BYTE);
                if (met != F_UNLCK) {
                    int err = errno;
                    set_range(ll->fd, F_UNLCK, SLOT_BASE + (off_t)i, 1, NULL);
                    if (met < 0)
                        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot test the file for '%s' in %s: %s",
                                            lk->name, inst->dir, strerror(err));
                    if (met == F_RDLCK) {
                        if (made_semaphore)
                            unmake_semaphore(ll, lk->permits);
                        return dlock_seterr(DLOCK_EINVAL,
                                            "local: '%s' is held as a shared lock, not as a semaphore", lk->name);
                    }
                    /* F_WRLCK: an exclusive hold came in over the free
                     * permit between the two calls; it holds every permit. */
                    break;
                }
                stop_watch(inst, lk, true);
                ll->slot = (int)i;
                ll->held = true;
                grant->fence = raise_fence(ll->map);
                grant->has_fence = 1;
                return DLOCK_OK;
            }
        }
        if (ll->watching)
            break;
        start_watch(inst, lk); /* then look once more, as try_range does */
    }
    grant->retry_hint_ms = -1;
    return DLOCK_EBUSY;
}

/* Fair mode: a request looks only when it is its turn. With waiters in
 * the line it joins first, and then looks only when woken (a release
 * wakes the first) or when it finds itself first among the live ones; with
 * nobody in the line it looks at once. DLOCK_OK when it may look,
 * DLOCK_EBUSY when it must wait. */
static int fair_turn(struct local_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *grant)
{
    struct local_lock *ll = lk->priv;
    if (lk->mode == DLOCK_MODE_SHARED)
        return dlock_seterr(DLOCK_ENOTSUP, "local: fair mode is for exclusive holds and permits; shared holds are "
                            "granted together");
    if (!ll->map)
        return DLOCK_OK; /* no count to tell whether anyone waits: as without fair mode */
    if (!ll->watching && __atomic_load_n(&ll->map->waiting, __ATOMIC_SEQ_CST) > 0)
        start_watch(inst, lk);
    if (!ll->waiter.joined || ll->waiter.wakes > 0)
        return DLOCK_OK;
    int64_t look_again_ms;
    ll->look_again_at = 0;
    if (local_queue_is_first(inst->dirfd, ll->file, &ll->waiter, &look_again_ms))
        return DLOCK_OK;
    /* A waiter ahead holds a wake-up it has not taken: if it is stopped,
     * no release comes to wake us, so wake up to look when it stops
     * counting. */
    if (look_again_ms >= 0)
        ll->look_again_at = dlock_provider_now_ms() + look_again_ms + 1;
    grant->retry_hint_ms = -1;
    return DLOCK_EBUSY;
}

static int acquire_once(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *grant)
{
    struct local_instance *inst = instance;
    struct local_lock *ll = lk->priv;
    int rc = open_lock_file(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    if (lk->mode != DLOCK_MODE_EXCLUSIVE && !ll->map)
        return dlock_seterr(DLOCK_EUNAVAILABLE,
                            "local: shared holds and semaphores need the lock file of '%s' in %s mapped "
                            "into memory, and it could not be", lk->name, inst->dir);
    if (ll->map && (rc = mode_mismatch(ll->map, lk)) != DLOCK_OK)
        return rc;
    ll->look_again_at = 0; /* only this attempt's fair turn may ask for another look */
    if ((lk->flags & DLOCK_LOCK_FAIR) && (rc = fair_turn(inst, lk, grant)) != DLOCK_OK)
        return rc;
    if (ll->waiter.wakes > 0)
        ll->waiter.wakes--; /* this attempt is what one wake-up was for */
    if (lk->mode == DLOCK_MODE_SHARED)
        return acquire_shared(inst, lk, grant);
    if (lk->mode == DLOCK_MODE_SEMAPHORE)
        return acquire_permit(inst, lk, grant);
    bool busy = false;
    if ((rc = try_range(inst, lk, F_WRLCK, 0, EXCLUSIVE_LEN, &busy)) != DLOCK_OK)
        return rc;
    if (busy) {
        /* Keep shared requests that come after this one out until it is
         * granted (or gives up): they must pass the turnstile. */
        bool taken;
        if (!ll->turnstile && set_range(ll->fd, F_WRLCK, TURNSTILE_BYTE, 1, &taken) == 0 && !taken)
            ll->turnstile = true;
        grant->retry_hint_ms = -1;
        return DLOCK_EBUSY;
    }
    if (ll->turnstile) {
        /* Granted: the hold keeps readers out now. The turnstile lies
         * outside its range and would otherwise stay shut after it. */
        set_range(ll->fd, F_UNLCK, TURNSTILE_BYTE, 1, NULL);
        ll->turnstile = false;
    }
    stop_watch(inst, lk, true);
    if (ll->map) {
        rc = grant_in_memory(ll->map, inst->dir, lk);
        if (rc != DLOCK_OK) {
            set_lock(ll->fd, F_UNLCK, NULL);
            return rc;
        }
        ll->held = true;
        grant->fence = ll->map->fence;
        grant->has_fence = 1;
        return DLOCK_OK;
    }
    struct lock_file_header h;
    rc = read_header(ll->fd, &h, inst->dir, lk->name);
    if (rc == DLOCK_OK) {
        memcpy(h.magic, HEADER_MAGIC, 8);
        if (h.fence == 0)
            h.fence = first_fence();
        h.fence++;
        h.holder_pid = getpid();
        snprintf(h.owner, sizeof h.owner, "%s", lk->owner);
        rc = write_header(ll->fd, &h, inst->dir);
    }
    if (rc != DLOCK_OK) {
        set_lock(ll->fd, F_UNLCK, NULL);
        return rc;
    }
    ll->held = true;
    grant->fence = h.fence;
    grant->has_fence = 1;
    return DLOCK_OK;
}

/* A failed attempt is not followed by abandon (only a busy one is): it
 * leaves the line here, or its place would keep the wake-ups meant for
 * the waiters behind it. */
static int local_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *grant)
{
    int rc = acquire_once(instance, lk, grant);
    if (rc != DLOCK_OK && rc != DLOCK_EBUSY)
        stop_watch(instance, lk, false);
    return rc;
}

/* Whether an exclusive request would still find the lock taken: one
 * F_OFD_GETLK, no attempt (our own locks never conflict with us). */
static bool exclusive_range_taken(int fd)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = EXCLUSIVE_LEN, .l_pid = 0 };
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

static int local_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    (void)instance;
    struct local_lock *ll = lk->priv;
    /* Without a place in the line or a watch, or uncounted (so releases
     * may skip the line), a release or a holder's death may pass unseen:
     * poll in short steps. */
    if ((!ll->waiter.joined || !ll->watch_fd || !ll->counted) && timeout_ms > 25)
        timeout_ms = 25;
    int64_t deadline = dlock_provider_now_ms() + timeout_ms;
    if (ll->look_again_at && ll->look_again_at < deadline) {
        /* Fair mode, behind a waiter that may be stuck (fair_turn): the
         * wait ends then as if called, for one more look. */
        deadline = ll->look_again_at;
        timeout_ms = -1;
    }
    for (;;) {
        int64_t left = deadline - dlock_provider_now_ms();
        if (left < 0)
            left = 0;
        struct pollfd p[3] = { { .fd = wake_fd, .events = POLLIN },
                               { .fd = ll->waiter.joined ? ll->waiter.fd : -1, .events = POLLIN },
                               { .fd = ll->watch_fd - 1, .events = POLLIN } };
        int n = poll(p, 3, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno != EINTR)
            return dlock_seterr(DLOCK_EUNAVAILABLE, "local: poll failed: %s", strerror(errno));
        if (n <= 0)
            return n == 0 && timeout_ms >= 0 ? DLOCK_ETIMEDOUT : DLOCK_OK;
        bool called = (p[0].revents & POLLIN) != 0;
        if (ll->waiter.joined && (p[1].revents & POLLIN) && local_queue_drain(&ll->waiter) > 0)
            called = true;
        if (ll->watch_fd && (p[2].revents & POLLIN)) {
            char events[4096];
            while (read(ll->watch_fd - 1, events, sizeof events) > 0)
                ;
        }
        /* Only the watch fired (some descriptor of the file was closed,
         * its times touched): every waiter sees that, so an exclusive one
         * looks only when the lock is free, and a close or touch that
         * freed nothing makes no herd. */
        if (called || lk->mode != DLOCK_MODE_EXCLUSIVE || !ll->fd_open || !exclusive_range_taken(ll->fd))
            return DLOCK_OK;
    }
}

static int local_release(void *instance, struct dlock_provider_lock *lk)
{
    struct local_instance *inst = instance;
    struct local_lock *ll = lk->priv;
    if (!ll->held)
        return DLOCK_ENOTOWNER;
    /* The holder's pid and owner stay in the header: `dlock status` shows
     * them only while the kernel says the file is locked, and not rewriting
     * them saves a read and a write per release. */
    ll->held = false;
    int unlocked = lk->mode == DLOCK_MODE_SHARED      ? set_range(ll->fd, F_UNLCK, HOLD_BYTE, 1, NULL)
                   : lk->mode == DLOCK_MODE_SEMAPHORE ? set_range(ll->fd, F_UNLCK, SLOT_BASE + ll->slot, 1, NULL)
                                                      : set_lock(ll->fd, F_UNLCK, NULL);
    if (unlocked != 0) {
        /* Closing the descriptor drops the lock whatever went wrong (and
         * tells the watchers with IN_CLOSE_WRITE). */
        close_lock_file(ll);
        return DLOCK_OK;
    }
    /* After the unlock: the one woken finds the lock free. */
    wake_next(inst, lk);
    return DLOCK_OK;
}

/* The exclusive range becomes a read lock on HOLD_BYTE: that byte turns
 * from written to read in one fcntl (the kernel converts a lock of the same
 * open file description in place), so it is never unlocked, and only then
 * are the bytes on either side let go (the permits' among them). The fence
 * stays (the same hold). A writer that waits keeps the turnstile, so
 * readers stay behind it; the others are woken. */
static int local_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    struct local_instance *inst = instance;
    struct local_lock *ll = lk->priv;
    if (!ll->held)
        return dlock_seterr(DLOCK_ELOST, "local: the lock is not held through this handle");
    if (!ll->map)
        return dlock_seterr(DLOCK_ENOTSUP, "local: shared holds need the lock file in %s mapped into memory, and "
                            "it could not be: the hold stays exclusive", inst->dir);
    if (set_range(ll->fd, F_RDLCK, HOLD_BYTE, 1, NULL) != 0 || set_range(ll->fd, F_UNLCK, 0, HOLD_BYTE, NULL) != 0 ||
        set_range(ll->fd, F_UNLCK, HOLD_BYTE + 1, EXCLUSIVE_LEN - HOLD_BYTE - 1, NULL) != 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot change the lock on its file in %s: %s", inst->dir,
                            strerror(errno));
    if (__atomic_load_n(&ll->map->waiting, __ATOMIC_SEQ_CST) > 0)
        futimens(ll->fd, NULL);
    return DLOCK_OK;
}

static int local_renew(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    struct local_lock *ll = lk->priv;
    /* The kernel lock does not expire; while the descriptor is ours, so is the lock. */
    return ll->held ? DLOCK_OK : DLOCK_ELOST;
}

static void local_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    struct local_lock *ll = lk->priv;
    stop_watch(instance, lk, false); /* before the header is unmapped: it takes itself off the count */
    close_lock_file(ll);
    ll->held = false;
}

static int local_status(struct local_instance *inst, struct dlock_ctl_status *arg)
{
    char file[NAME_MAX + 1];
    char name[DLOCK_NAME_MAX + 1];
    memcpy(name, arg->name, arg->name_len);
    name[arg->name_len] = 0;
    dlock__local_file_name(arg->name, arg->name_len, file);
    dlock_status_info *out = arg->out;
    int fd = openat(inst->dirfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno != ENOENT)
            return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot open %s/%s: %s", inst->dir, file,
                                strerror(errno));
        out->held = 0; /* never locked */
        return DLOCK_OK;
    }
    /* Byte 0 is locked only by an exclusive hold; HOLD_BYTE by shared holds
     * too; a waiting writer's turnstile is no hold. */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1, .l_pid = 0 };
    struct flock shared = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = HOLD_BYTE, .l_len = 1, .l_pid = 0 };
    int rc = DLOCK_OK;
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0 || fcntl(fd, F_OFD_GETLK, &shared) != 0) {
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot query the lock on %s/%s: %s", inst->dir, file,
                          strerror(errno));
    } else {
        struct lock_file_header h;
        rc = read_header(fd, &h, inst->dir, name);
        if (rc == DLOCK_OK) {
            out->held = fl.l_type != F_UNLCK;
            out->fence = h.fence;
            if (out->held && h.holder_pid > 0) {
                out->holder_pid = h.holder_pid;
                snprintf(out->holder, sizeof out->holder, "%s", h.owner);
            } else if (!out->held && shared.l_type != F_UNLCK) {
                out->held = 1;
                snprintf(out->holder, sizeof out->holder, "shared holders");
            } else if (!out->held && h.permits) {
                struct flock slots = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = SLOT_BASE,
                                       .l_len = (off_t)h.permits, .l_pid = 0 };
                if (fcntl(fd, F_OFD_GETLK, &slots) == 0 && slots.l_type != F_UNLCK) {
                    out->held = 1;
                    snprintf(out->holder, sizeof out->holder, "holders of a semaphore of %u permits", h.permits);
                }
            }
        }
    }
    close(fd);
    return rc;
}

/* Gave up waiting: the inotify instance goes (they are scarce: 128 per
 * user by default); a later wait makes a new one. */
static void local_abandon(void *instance, struct dlock_provider_lock *lk)
{
    struct local_lock *ll = lk->priv;
    if (ll->turnstile && ll->fd_open) {
        /* The shared requests it kept out may go now: wake them. */
        set_range(ll->fd, F_UNLCK, TURNSTILE_BYTE, 1, NULL);
        futimens(ll->fd, NULL);
    }
    ll->turnstile = false;
    /* After the turnstile is open: a wake-up it hands on may be a reader's. */
    stop_watch(instance, lk, false);
}

static int local_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    (void)instance;
    (void)name;
    (void)name_len;
    (void)broken;
    (void)fence;
    return dlock_seterr(DLOCK_ENOTSUP, "local: a kernel lock belongs to the process holding it and cannot be "
                        "taken from it; stop that process (dlock status NAME shows its pid)");
}

static int local_list(void *instance, struct dlock_provider_list *req)
{
    struct local_instance *inst = instance;
    return dlock__local_list(inst->dirfd, inst->dir, req);
}

static int local_ctl(void *instance, int op, void *arg)
{
    if (op == DLOCK_CTL_STATUS)
        return local_status(instance, arg);
    return DLOCK_ENOTSUP;
}

const struct dlock_provider dlock__local_provider = {
    .version = DLOCK_PROVIDER_VERSION_4,
    .name = "local",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_FENCE_LINEARIZABLE | DLOCK_CAP_NATIVE_WAIT | DLOCK_CAP_FAIR |
                    DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE,
    .lock_priv_size = sizeof(struct local_lock),
    .settings = local_settings,
    .open = local_open,
    .close = local_close,
    .acquire = local_acquire,
    .release = local_release,
    .renew = local_renew,
    .wait = local_wait,
    .lock_fini = local_lock_fini,
    .ctl = local_ctl,
    .abandon = local_abandon,
    .list = local_list,
    .break_hold = local_break,
    .downgrade = local_downgrade,
};
