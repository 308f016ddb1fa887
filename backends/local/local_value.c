/* backends/local/local_value.c - elections on the local backend: the value
 * a leader publishes, and the watch an observer waits on.
 *
 * A name's value lives in ".v/<its lock file's name>" in the lock
 * directory: the term (8 bytes, host order: the file never leaves the
 * host) and the value's bytes. The leader writes a new file beside it and
 * renames it into place, so a reader sees the old value or the new one,
 * never a mix. Only the leader writes it, and it holds the kernel lock
 * while it does, so no deposed leader can (a local holder keeps its lock
 * until it lets go or dies).
 *
 * Observers get inotify events: a rename into ".v" (a new value), the
 * value file's deletion (the leader's release deletes it before it
 * unlocks), and the lock file closed by a writer (a holder that died). */
#include "config.h"

#include "local.h"
#include "local_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define VALUES_DIR ".v"

static int values_dir(struct local_instance *inst)
{
    if (mkdirat(inst->dirfd, VALUES_DIR, 0777) != 0 && errno != EEXIST)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot make %s/%s for election values: %s", inst->dir,
                            VALUES_DIR, strerror(errno));
    return DLOCK_OK;
}

int local_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len)
{
    struct local_instance *inst = instance;
    struct local_lock *ll = lk->priv;
    if (!ll->held || !ll->fd_open || lk->mode != DLOCK_MODE_EXCLUSIVE)
        return dlock_seterr(DLOCK_ELOST, "local: the lock is not held exclusively through this handle");
    /* The hold of that term: the fence in the header is the current
     * hold's (raised at each grant, and we hold the kernel lock). */
    uint64_t fence;
    if (ll->map) {
        fence = __atomic_load_n(&ll->map->fence, __ATOMIC_ACQUIRE);
    } else {
        struct lock_file_header h;
        int hrc = local_read_header(ll->fd, &h, inst->dir, lk->name);
        if (hrc != DLOCK_OK)
            return hrc;
        fence = h.fence;
    }
    if (fence != term)
        return dlock_seterr(DLOCK_ELOST, "local: this hold is not the one of term %llu", (unsigned long long)term);
    int rc = values_dir(inst);
    if (rc != DLOCK_OK)
        return rc;
    static unsigned counter;
    char tmp[64], path[NAME_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s/.t%d-%u", VALUES_DIR, (int)getpid(), __atomic_add_fetch(&counter, 1,
                                                                                         __ATOMIC_RELAXED));
    snprintf(path, sizeof path, "%s/%s", VALUES_DIR, ll->file);
    int fd = openat(inst->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot write %s/%s: %s", inst->dir, tmp, strerror(errno));
    bool written = write(fd, &term, sizeof term) == (ssize_t)sizeof term &&
                   (len == 0 || write(fd, value, len) == (ssize_t)len);
    int saved = errno;
    if (close(fd) != 0 && written) {
        written = false;
        saved = errno;
    }
    if (!written || renameat(inst->dirfd, tmp, inst->dirfd, path) != 0) {
        if (written)
            saved = errno;
        unlinkat(inst->dirfd, tmp, 0);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot store the election value in %s/%s: %s", inst->dir,
                            path, strerror(saved));
    }
    ll->published = true;
    return DLOCK_OK;
}

void local_value_withdraw(struct local_instance *inst, struct local_lock *ll)
{
    if (!ll->published)
        return;
    ll->published = false;
    /* Before the unlock: a reader between the next grant's lock and its
     * fence's raise would otherwise pair the new hold with this value
     * (whose term is the fence still in the header). The deletion is
     * also the observers' event: an unlock makes none. */
    char path[NAME_MAX + 8];
    snprintf(path, sizeof path, "%s/%s", VALUES_DIR, ll->file);
    (void)unlinkat(inst->dirfd, path, 0);
}

/* The fence of the exclusive hold on file, 0 if none (or no file). */
static int holder_term(struct local_instance *inst, const char *file, const char *name, uint64_t *term)
{
    *term = 0;
    int fd = openat(inst->dirfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? DLOCK_OK
                               : dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot open %s/%s: %s", inst->dir, file,
                                              strerror(errno));
    /* Byte 0 is locked by an exclusive hold only (local_file.h). */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1, .l_pid = 0 };
    int rc = DLOCK_OK;
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot query the lock on %s/%s: %s", inst->dir, file,
                          strerror(errno));
    } else if (fl.l_type != F_UNLCK) {
        struct lock_file_header h;
        if ((rc = local_read_header(fd, &h, inst->dir, name)) == DLOCK_OK)
            *term = h.fence;
    }
    close(fd);
    return rc;
}

/* The stored value of file: its term (0 if none) and bytes. */
static int stored_value(struct local_instance *inst, const char *file, struct dlock_provider_leader *out)
{
    char path[NAME_MAX + 8];
    snprintf(path, sizeof path, "%s/%s", VALUES_DIR, file);
    int fd = openat(inst->dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? DLOCK_OK
                               : dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot open %s/%s: %s", inst->dir, path,
                                              strerror(errno));
    char buf[sizeof(uint64_t) + DLOCK_VALUE_MAX + 1];
    size_t got = 0;
    ssize_t n = 0;
    while (got < sizeof buf && (n = read(fd, buf + got, sizeof buf - got)) > 0)
        got += (size_t)n;
    int saved = errno;
    close(fd);
    if (n < 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot read %s/%s: %s", inst->dir, path, strerror(saved));
    if (got < sizeof(uint64_t) || got > sizeof(uint64_t) + DLOCK_VALUE_MAX)
        return dlock_seterr(DLOCK_EPROTOCOL, "local: %s/%s is not an election value (%zu bytes)", inst->dir, path,
                            got);
    memcpy(&out->value_term, buf, sizeof(uint64_t));
    out->value_len = got - sizeof(uint64_t);
    if (out->value_len > 0) {
        if (!(out->value = malloc(out->value_len)))
            return dlock_seterr(DLOCK_ENOMEM, "local: out of memory for an election value");
        memcpy(out->value, buf + sizeof(uint64_t), out->value_len);
    }
    return DLOCK_OK;
}

int local_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out)
{
    struct local_instance *inst = instance;
    char file[NAME_MAX + 1], shown[DLOCK_NAME_MAX + 1];
    dlock__local_file_name(name, name_len, file);
    memcpy(shown, name, name_len);
    shown[name_len] = 0;
    /* The hold first: a value read after it is the holder's own or newer,
     * and a newer one carries another term, which the core refuses. */
    int rc = holder_term(inst, file, shown, &out->holder_term);
    if (rc == DLOCK_OK && out->holder_term != 0)
        rc = stored_value(inst, file, out);
    return rc;
}

struct local_watch {
    int fd; /* inotify */
};

int local_watch_open(void *instance, const char *name, size_t name_len, void **watch, int *fd)
{
    struct local_instance *inst = instance;
    char file[NAME_MAX + 1], path[PATH_MAX];
    dlock__local_file_name(name, name_len, file);
    int rc = values_dir(inst);
    if (rc != DLOCK_OK)
        return rc;
    /* The lock file must exist to be watched: made empty if new, as any
     * first opener does (its header is written by the first holder). */
    int lock_fd = openat(inst->dirfd, file, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (lock_fd < 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot open %s/%s: %s", inst->dir, file, strerror(errno));
    close(lock_fd);
    struct local_watch *w = calloc(1, sizeof *w);
    if (!w)
        return dlock_seterr(DLOCK_ENOMEM, "local: out of memory for a watch");
    if ((w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
        free(w);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: no inotify instance for a watch: %s", strerror(errno));
    }
    snprintf(path, sizeof path, "%s/%s", inst->dir, file);
    char values[PATH_MAX];
    snprintf(values, sizeof values, "%s/%s", inst->dir, VALUES_DIR);
    if (inotify_add_watch(w->fd, path, IN_CLOSE_WRITE | IN_ATTRIB) < 0 ||
        inotify_add_watch(w->fd, values, IN_MOVED_TO | IN_DELETE) < 0) {
        int saved = errno;
        close(w->fd);
        free(w);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot watch %s: %s", path, strerror(saved));
    }
    *watch = w;
    *fd = w->fd;
    return DLOCK_OK;
}

int local_watch_consume(void *instance, void *watch)
{
    (void)instance;
    struct local_watch *w = watch;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    while (read(w->fd, buf, sizeof buf) > 0)
        ;
    return errno == EAGAIN ? DLOCK_OK
                           : dlock_seterr(DLOCK_EUNAVAILABLE, "local: reading a watch failed: %s", strerror(errno));
}

void local_watch_close(void *instance, void *watch)
{
    (void)instance;
    struct local_watch *w = watch;
    close(w->fd);
    free(w);
}
