/* tests/modules/outoftree/flockdir.c - a backend module written the way an
 * outsider would write one: against the installed <dlock/provider.h> only,
 * built with `pkg-config --cflags libdlock`, loaded by its configuration
 * from a directory in $DLOCK_MODULE_PATH. It exists to prove the plugin
 * framework from the outside, so it is deliberately small: one flock(2)ed
 * file per lock name in a directory (processes of one host), one attempt
 * per call, no waiting, no retrying, no clock of its own, no fences.
 *
 *   backend = "flockdir";
 *   flockdir = { dir = "/run/myapp/locks"; };
 */
#include <dlock/provider.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct flockdir {
    int dirfd;
    char dir[PATH_MAX];
};

/* Per lock: the open file while the core has it, and whether we hold it. */
struct flockdir_lock {
    int fd_plus_one;
    bool held;
};

static const struct dlock_setting_spec flockdir_settings[] = {
    { "dir", DLOCK_SETTING_STRING, 0, 0 },
    { NULL, 0, 0, 0 },
};

static int flockdir_open(void **instance, const struct dlock_provider_env *env)
{
    const char *dir = NULL;
    if (!dlock_settings_string(env->settings, "dir", &dir) || !dir[0])
        return dlock_seterr(DLOCK_ECONFIG, "%s: flockdir.dir (a directory for the lock files) is required",
                            dlock_settings_where(env->settings, NULL));
    struct flockdir *fd = calloc(1, sizeof *fd);
    if (!fd)
        return dlock_seterr(DLOCK_ENOMEM, "flockdir: out of memory");
    snprintf(fd->dir, sizeof fd->dir, "%s", dir);
    mkdir(fd->dir, 0700);
    fd->dirfd = open(fd->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd->dirfd < 0) {
        int err = errno;
        free(fd);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "flockdir: cannot open %s: %s", dir, strerror(err));
    }
    *instance = fd;
    return DLOCK_OK;
}

static void flockdir_close(void *instance)
{
    struct flockdir *fd = instance;
    close(fd->dirfd);
    free(fd);
}

/* Any bytes may be in a name: hex for short names, a hash for long ones. */
static void file_name(const struct dlock_provider_lock *lk, char *out, size_t size)
{
    if (lk->name_len * 2 + 6 < size && lk->name_len * 2 + 6 < NAME_MAX) {
        for (size_t i = 0; i < lk->name_len; i++)
            snprintf(out + 2 * i, 3, "%02x", (unsigned char)lk->name[i]);
        snprintf(out + 2 * lk->name_len, size - 2 * lk->name_len, ".lock");
        return;
    }
    uint64_t h = 1469598103934665603ULL, g = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < lk->name_len; i++) {
        h = (h ^ (unsigned char)lk->name[i]) * 1099511628211ULL;
        g = (g ^ (unsigned char)lk->name[i]) * 0x100000001b3ULL + (g >> 29);
    }
    snprintf(out, size, "long-%016llx%016llx-%zu.lock", (unsigned long long)h, (unsigned long long)g,
             lk->name_len);
}

static int flockdir_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *grant)
{
    struct flockdir *fd = instance;
    struct flockdir_lock *fl = lk->priv;
    if (!fl->fd_plus_one) {
        char name[NAME_MAX + 1];
        file_name(lk, name, sizeof name);
        int f = openat(fd->dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (f < 0)
            return dlock_seterr(DLOCK_EUNAVAILABLE, "flockdir: cannot open %s/%s: %s", fd->dir, name,
                                strerror(errno));
        fl->fd_plus_one = f + 1;
    }
    if (flock(fl->fd_plus_one - 1, LOCK_EX | LOCK_NB) == 0) {
        fl->held = true;
        return DLOCK_OK;
    }
    if (errno == EWOULDBLOCK) {
        grant->retry_hint_ms = -1;
        return DLOCK_EBUSY;
    }
    return dlock_seterr(DLOCK_EUNAVAILABLE, "flockdir: flock: %s", strerror(errno));
}

static int flockdir_release(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    struct flockdir_lock *fl = lk->priv;
    if (!fl->held)
        return DLOCK_ENOTOWNER;
    fl->held = false;
    flock(fl->fd_plus_one - 1, LOCK_UN);
    return DLOCK_OK;
}

static int flockdir_renew(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    struct flockdir_lock *fl = lk->priv;
    return fl->held ? DLOCK_OK : DLOCK_ELOST; /* the kernel lock does not expire */
}

static void flockdir_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    struct flockdir_lock *fl = lk->priv;
    if (fl->fd_plus_one)
        close(fl->fd_plus_one - 1);
    fl->fd_plus_one = 0;
    fl->held = false;
}

static const struct dlock_provider flockdir_provider = {
    .version = DLOCK_PROVIDER_VERSION_1,
    .name = "flockdir",
    .capabilities = DLOCK_CAP_RENEW,
    .lock_priv_size = sizeof(struct flockdir_lock),
    .settings = flockdir_settings,
    .open = flockdir_open,
    .close = flockdir_close,
    .acquire = flockdir_acquire,
    .release = flockdir_release,
    .renew = flockdir_renew,
    .lock_fini = flockdir_lock_fini,
};

DLOCK_MODULE(flockdir_provider)
