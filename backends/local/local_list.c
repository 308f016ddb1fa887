/* backends/local/local_list.c - the local backend's operator's view: one
 * name's status (local_status), and the listing, the lock directory's files in file name order, each reported while the kernel says
 * it is locked or its header counts waiters.
 *
 * The kernel's locks are the state: byte 0 is locked only by an exclusive
 * hold (bytes 0 to EXCLUSIVE_LEN - 1), HOLD_BYTE by each shared hold, SLOT_BASE + i by
 * the holder of permit i. F_OFD_GETLK tells whether a range is locked but
 * shows one lock only, so the shared holders and permits are counted in
 * /proc/locks, where every OFD lock has a line of its own (with pid -1:
 * an OFD lock belongs to an open file, not a process). Without /proc the
 * count of those is unknown (-1).
 *
 * Lock files are never deleted (their fence must keep growing), so the
 * directory holds every name ever used; a page examines at most
 * EXAMINE_MAX files and its cursor is the last file name examined. */
#include "config.h"

#include "local.h"
#include "local_backend.h"
#include "local_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define EXAMINE_MAX 4096

struct file_list {
    char **names;
    size_t n, cap;
};

static void file_list_free(struct file_list *fl)
{
    for (size_t i = 0; i < fl->n; i++)
        free(fl->names[i]);
    free(fl->names);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether c could be a file name this backend makes: the bytes that
 * dlock__local_file_name keeps or writes, so every cursor is printable. */
static bool valid_cursor(const char *c)
{
    size_t n = strlen(c);
    if (n == 0 || n > NAME_MAX || c[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.%", c[i]))
            return false;
    return true;
}

/* The lock files after `after` (NULL: all), sorted. */
static int read_directory(int dirfd, const char *dir, const char *after, struct file_list *out)
{
    /* An open file description of its own: the instance's dirfd is shared
     * by every thread, and a directory stream moves its offset. */
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot read lock directory %s: %s", dir, strerror(err));
    }
    int rc = DLOCK_OK;
    struct dirent *de;
    while (rc == DLOCK_OK && (errno = 0, de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (!valid_cursor(n) || !(ends_with(n, ".lock") || ends_with(n, ".hlock")) ||
            (after && strcmp(n, after) <= 0))
            continue; /* not a file this backend makes (its names are cursors), or before the page */
        if (out->n == out->cap) {
            size_t cap = out->cap ? 2 * out->cap : 64;
            char **grown = realloc(out->names, cap * sizeof *grown);
            if (!grown) {
                rc = dlock_seterr(DLOCK_ENOMEM, "local: out of memory listing %s", dir);
                break;
            }
            out->names = grown;
            out->cap = cap;
        }
        if (!(out->names[out->n] = strdup(n)))
            rc = dlock_seterr(DLOCK_ENOMEM, "local: out of memory listing %s", dir);
        else
            out->n++;
    }
    if (rc == DLOCK_OK && errno != 0)
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot read lock directory %s: %s", dir, strerror(errno));
    closedir(d);
    if (rc == DLOCK_OK && out->n > 1)
        qsort(out->names, out->n, sizeof *out->names, by_name);
    return rc;
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The name of a short-form file ("<escaped>.lock"); false if it is not one
 * that dlock__local_file_name makes. */
static bool unescape_file_name(const char *file, char *name, size_t *len)
{
    size_t n = strlen(file) - strlen(".lock"), o = 0;
    for (size_t i = 0; i < n; i++) {
        if (file[i] != '%') {
            name[o++] = file[i];
            continue;
        }
        int hi = i + 2 < n ? hex_value(file[i + 1]) : -1, lo = hi >= 0 ? hex_value(file[i + 2]) : -1;
        if (lo < 0 || (hi == 0 && lo == 0))
            return false;
        name[o++] = (char)(hi * 16 + lo);
        i += 2;
    }
    name[o] = 0;
    *len = o;
    return o > 0 && o <= DLOCK_NAME_MAX;
}

/* The name stored after the header of a long-form file; false if none is
 * (a file made before names were stored there). */
static bool stored_name(int fd, char *name, size_t *len)
{
    ssize_t n = pread(fd, name, DLOCK_NAME_MAX, NAME_OFFSET);
    if (n <= 0 || memchr(name, 0, (size_t)n))
        return false;
    name[n] = 0;
    *len = (size_t)n;
    return true;
}

/* ---- /proc/locks ---------------------------------------------------------------- */

/* The text of /proc/locks, read at most once per page; NULL where it
 * cannot be read. */
struct proc_locks {
    char *text;
    bool read;
};

static const char *proc_locks_text(struct proc_locks *pl)
{
    if (pl->read)
        return pl->text;
    pl->read = true;
    FILE *f = fopen("/proc/locks", "re");
    if (!f)
        return NULL;
    size_t cap = 0, len = 0;
    char *buf = NULL;
    for (;;) {
        if (cap - len < 4096) {
            char *grown = realloc(buf, cap + 65536);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
            cap += 65536;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[len] = 0;
    return pl->text = buf;
}

/* Locks of type kind ("READ" or "WRITE") on the file st, each within
 * [first, last]; -1 if /proc/locks cannot be read. */
static int64_t count_locks(struct proc_locks *pl, const struct stat *st, const char *kind, long long first,
                           long long last)
{
    const char *text = proc_locks_text(pl);
    if (!text)
        return -1;
    char id[64];
    snprintf(id, sizeof id, "%02x:%02x:%llu", major(st->st_dev), minor(st->st_dev),
             (unsigned long long)st->st_ino);
    int64_t count = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char copy[256], type[16], file[64], endtext[32];
        long long start;
        if (len < sizeof copy) {
            memcpy(copy, line, len);
            copy[len] = 0;
            /* "N: OFDLCK ADVISORY  READ -1 fe:00:123 128 128"; lines of
             * waiters ("-> ...") have an extra field and never match. */
            if (sscanf(copy, "%*s OFDLCK %*s %15s %*s %63s %lld %31s", type, file, &start, endtext) == 4 &&
                strcmp(type, kind) == 0 && strcmp(file, id) == 0 && start >= first && start <= last)
                count++;
        }
        line += len + (end ? 1 : 0);
    }
    return count;
}

/* ---- one file ------------------------------------------------------------------- */

/* Is the range locked by anyone (with the type it is locked with)? */
static int locked_as(int fd, off_t start, off_t len, short *type)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len, .l_pid = 0 };
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return -1;
    *type = fl.l_type;
    return 0;
}

/* Fills e (and *holder, which points into h) from an open lock file;
 * *report says whether the name is held or waited for. */
static int describe(int fd, const char *dir, const char *file, struct proc_locks *pl, struct lock_file_header *hp,
                    dlock_list_entry *e, dlock_list_holder *holder, bool *report)
{
    struct stat st;
    struct lock_file_header h;
    short whole, shared, slots = F_UNLCK;
    *report = false;
    if (fstat(fd, &st) != 0 || locked_as(fd, 0, 1, &whole) != 0 || locked_as(fd, HOLD_BYTE, 1, &shared) != 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot query the lock on %s/%s: %s", dir, file,
                            strerror(errno));
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h.magic, HEADER_MAGIC, 8) != 0)
        return DLOCK_OK; /* never granted, or not a libdlock lock file: nothing to report */
    h.owner[OWNER_MAX - 1] = 0;
    *hp = h;
    uint32_t waiting = h.waiting;
    if (h.permits && locked_as(fd, SLOT_BASE, (off_t)h.permits, &slots) != 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot query the lock on %s/%s: %s", dir, file,
                            strerror(errno));
    e->fence = h.fence;
    e->waiters = waiting;
    e->permits = h.permits;
    e->lease_left_ms = -1; /* the kernel lock has no lease: the holder's client keeps it */
    e->age_ms = -1;
    if (whole != F_UNLCK) {
        e->kind = DLOCK_MODE_EXCLUSIVE;
        e->holder_count = 1;
        *holder = (dlock_list_holder){ hp->owner, h.holder_pid > 0 ? h.holder_pid : -1, "", h.fence, -1, -1 };
        e->holders = holder;
        e->n_holders = 1;
    } else if (h.permits) {
        e->kind = DLOCK_MODE_SEMAPHORE;
        e->holder_count = slots == F_UNLCK ? 0
                                           : count_locks(pl, &st, "WRITE", SLOT_BASE, SLOT_BASE + h.permits - 1);
    } else {
        e->kind = shared != F_UNLCK ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
        e->holder_count = shared == F_UNLCK ? 0 : count_locks(pl, &st, "READ", HOLD_BYTE, HOLD_BYTE);
    }
    *report = e->holder_count != 0 || waiting > 0;
    return DLOCK_OK;
}

/* Reports file if it is a name under the prefix that is held or waited
 * for. *emitted counts the entries. */
static int list_file(int dirfd, const char *dir, const char *file, struct dlock_provider_list *req,
                     struct proc_locks *pl, size_t *emitted)
{
    char name[DLOCK_NAME_MAX + 1];
    size_t name_len = 0;
    bool long_form = ends_with(file, ".hlock");
    if (!long_form && !unescape_file_name(file, name, &name_len))
        return DLOCK_OK; /* not a file this backend made */
    if (!long_form && (name_len < req->prefix_len || memcmp(name, req->prefix, req->prefix_len) != 0))
        return DLOCK_OK;
    int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? DLOCK_OK
                               : dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot open %s/%s: %s", dir, file,
                                              strerror(errno));
    int rc = DLOCK_OK;
    if (long_form && (!stored_name(fd, name, &name_len) || name_len < req->prefix_len ||
                      memcmp(name, req->prefix, req->prefix_len) != 0)) {
        close(fd);
        return DLOCK_OK;
    }
    /* Only the file this name maps to: a planted file whose name decodes
     * to a name held elsewhere (a %XX of a byte kept as it is) or whose
     * stored name belongs to another file would list that name twice. */
    char canonical[NAME_MAX + 1];
    dlock__local_file_name(name, name_len, canonical);
    if (strcmp(canonical, file) != 0) {
        close(fd);
        return DLOCK_OK;
    }
    dlock_list_entry e = { .name = name, .name_len = name_len };
    struct lock_file_header h;
    dlock_list_holder holder;
    bool report;
    rc = describe(fd, dir, file, pl, &h, &e, &holder, &report);
    close(fd);
    if (rc != DLOCK_OK || !report)
        return rc;
    (*emitted)++;
    return req->emit(&e, req->emit_arg);
}

int dlock__local_list(int dirfd, const char *dir, struct dlock_provider_list *req)
{
    if (req->cursor && !valid_cursor(req->cursor))
        return dlock_seterr(DLOCK_EINVAL, "local: '%s' is not a cursor of the local backend's listing",
                            req->cursor);
    struct file_list files = { NULL, 0, 0 };
    int rc = read_directory(dirfd, dir, req->cursor, &files);
    struct proc_locks pl = { NULL, false };
    size_t emitted = 0, i = 0;
    for (; rc == DLOCK_OK && i < files.n && i < EXAMINE_MAX && emitted < req->limit; i++)
        rc = list_file(dirfd, dir, files.names[i], req, &pl, &emitted);
    /* i files were examined: the next page starts after the last of them. */
    if (rc == DLOCK_OK && i < files.n && !(req->next_cursor = strdup(files.names[i - 1])))
        rc = dlock_seterr(DLOCK_ENOMEM, "local: out of memory listing %s", dir);
    free(pl.text);
    file_list_free(&files);
    return rc;
}

int local_status(struct local_instance *inst, struct dlock_ctl_status *arg)
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
        rc = local_read_header(fd, &h, inst->dir, name);
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
