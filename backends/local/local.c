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
#include "local_backend.h"
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
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- descriptors across fork() -------------------------------------------------- */

static const struct dlock_setting_spec local_settings[] = {
    { "dir", DLOCK_SETTING_STRING, 0, 0 },
    { NULL, 0, 0, 0 },
};

/* ---- names -------------------------------------------------------------------- */

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

/* The line's steps, defined with the provider's members below. */
static const struct line_ops local_line_ops;

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
    inst->line = (struct line_host){ &local_line_ops, "local", env->log_handle };
    inst->tell_wanted = env->wanted;
    pthread_mutex_init(&inst->wanted_mu, NULL);
    local_install_fork_handlers();
    dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "local: lock directory %s", inst->dir);
    *instance = inst;
    return DLOCK_OK;
}

static void local_close(void *instance)
{
    struct local_instance *inst = instance;
    local_wanted_close(inst);
    pthread_mutex_destroy(&inst->wanted_mu);
    close(inst->dirfd);
    free(inst);
}

/* ---- the lock file ---------------------------------------------------------------- */

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
    if (local_queue_join(inst->dirfd, ll->file, lk->mode == DLOCK_MODE_SHARED, &ll->waiter) == 0)
        local_wanted_joined(inst, ll);
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
    if (ll->waiter.place.state != LINE_OUT) {
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

/* One try at a range, with the watch set up before a second look when the
 * first finds it busy (so a release between the two is seen by wait()).
 * DLOCK_OK with *busy set, or a failure. */
static int try_range(struct local_instance *inst, struct dlock_provider_lock *lk, short type, off_t start,
                     off_t len, bool *busy)
{
    struct local_lock *ll = lk->priv;
    for (int look = 0; look < 2; look++) {
        if (local_set_range(ll->fd, type, start, len, busy) != 0)
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
        local_set_range(ll->fd, F_UNLCK, TURNSTILE_BYTE, 1, NULL);
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
    if ((rc = local_mode_mismatch(ll->map, lk)) != DLOCK_OK) {
        local_set_range(ll->fd, F_UNLCK, HOLD_BYTE, 1, NULL);
        return rc;
    }
    stop_watch(inst, lk, true);
    if ((rc = local_header_is_ours(ll->map, inst->dir, lk)) != DLOCK_OK) {
        local_set_range(ll->fd, F_UNLCK, HOLD_BYTE, 1, NULL);
        return rc;
    }
    ll->held = true;
    grant->fence = local_raise_fence(ll->map);
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
    if (local_set_range(ll->fd, F_WRLCK, SLOT_BASE, permits, &busy) != 0 || busy)
        return;
    uint32_t expected = permits;
    __atomic_compare_exchange_n(&ll->map->permits, &expected, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    local_set_range(ll->fd, F_UNLCK, SLOT_BASE, permits, NULL);
}

/* A semaphore hold: the first free one of the name's permits. */
static int acquire_permit(struct local_instance *inst, struct dlock_provider_lock *lk, struct dlock_grant *grant)
{
    struct local_lock *ll = lk->priv;
    int rc = local_header_is_ours(ll->map, inst->dir, lk);
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
            if (local_set_range(ll->fd, F_WRLCK, SLOT_BASE + (off_t)i, 1, &busy) != 0)
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
                int met = local_lock_met_at(ll->fd, HOLD_BYTE);
                if (met != F_UNLCK) {
                    int err = errno;
                    local_set_range(ll->fd, F_UNLCK, SLOT_BASE + (off_t)i, 1, NULL);
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
                grant->fence = local_raise_fence(ll->map);
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
 * nobody in the line it looks at once. */
static int fair_turn(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *grant, bool *turn)
{
    (void)grant;
    struct local_instance *inst = instance;
    struct local_lock *ll = lk->priv;
    *turn = true;
    if (!ll->map)
        return DLOCK_OK; /* no count to tell whether anyone waits: as without fair mode */
    if (!ll->watching && __atomic_load_n(&ll->map->waiting, __ATOMIC_SEQ_CST) > 0)
        start_watch(inst, lk);
    if (ll->waiter.place.state == LINE_OUT || ll->waiter.wakes > 0)
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
    *turn = false;
    return DLOCK_OK;
}

/* The lock file, open and of the request's kind, before every look. */
static int prepare_look(void *instance, struct dlock_provider_lock *lk)
{
    struct local_instance *inst = instance;
    struct local_lock *ll = lk->priv;
    int rc = local_open_lock_file(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    if (lk->mode != DLOCK_MODE_EXCLUSIVE && !ll->map)
        return dlock_seterr(DLOCK_EUNAVAILABLE,
                            "local: shared holds and semaphores need the lock file of '%s' in %s mapped "
                            "into memory, and it could not be", lk->name, inst->dir);
    if (ll->map && (rc = local_mode_mismatch(ll->map, lk)) != DLOCK_OK)
        return rc;
    ll->look_again_at = 0; /* only this attempt's fair turn may ask for another look */
    return DLOCK_OK;
}

static int attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *grant)
{
    struct local_instance *inst = instance;
    struct local_lock *ll = lk->priv;
    int rc;
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
        if (!ll->turnstile && local_set_range(ll->fd, F_WRLCK, TURNSTILE_BYTE, 1, &taken) == 0 && !taken)
            ll->turnstile = true;
        grant->retry_hint_ms = -1;
        return DLOCK_EBUSY;
    }
    if (ll->turnstile) {
        /* Granted: the hold keeps readers out now. The turnstile lies
         * outside its range and would otherwise stay shut after it. */
        local_set_range(ll->fd, F_UNLCK, TURNSTILE_BYTE, 1, NULL);
        ll->turnstile = false;
    }
    stop_watch(inst, lk, true);
    if (ll->map) {
        rc = local_grant_in_memory(ll->map, inst->dir, lk);
        if (rc != DLOCK_OK) {
            local_set_lock(ll->fd, F_UNLCK, NULL);
            return rc;
        }
        ll->held = true;
        local_wanted_granted(inst, ll);
        grant->fence = ll->map->fence;
        grant->has_fence = 1;
        return DLOCK_OK;
    }
    struct lock_file_header h;
    rc = local_read_header(ll->fd, &h, inst->dir, lk->name);
    if (rc == DLOCK_OK) {
        memcpy(h.magic, HEADER_MAGIC, 8);
        if (h.fence == 0)
            h.fence = local_first_fence();
        h.fence++;
        h.holder_pid = getpid();
        snprintf(h.owner, sizeof h.owner, "%s", lk->owner);
        rc = local_write_header(ll->fd, &h, inst->dir);
    }
    if (rc != DLOCK_OK) {
        local_set_lock(ll->fd, F_UNLCK, NULL);
        return rc;
    }
    ll->held = true;
    local_wanted_granted(inst, ll);
    grant->fence = h.fence;
    grant->has_fence = 1;
    return DLOCK_OK;
}


/* Whether an exclusive request would still find the lock taken: one
 * F_OFD_GETLK, no attempt (our own locks never conflict with us). */
static bool exclusive_range_taken(int fd)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = EXCLUSIVE_LEN, .l_pid = 0 };
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

/* The longest a wait may last: without a place in the line or a watch, or
 * uncounted (so releases may skip the line), a release or a holder's death
 * may pass unseen, so it polls in short steps. */
static int64_t wake_timeout(const struct local_lock *ll, int64_t timeout_ms)
{
    if ((ll->waiter.place.state == LINE_OUT || !ll->watch_fd || !ll->counted) && timeout_ms > 25)
        return 25;
    return timeout_ms;
}

/* Takes in what woke a wait: the FIFO's wake-ups (true when there were
 * any) and the watch's events. */
static bool consume_wakes(struct local_lock *ll, bool fifo_ready, bool watch_ready)
{
    bool called = false;
    if (ll->waiter.place.state != LINE_OUT && fifo_ready && local_queue_drain(&ll->waiter) > 0)
        called = true;
    if (ll->watch_fd && watch_ready) {
        char events[4096];
        while (read(ll->watch_fd - 1, events, sizeof events) > 0)
            ;
    }
    return called;
}

/* Waits for a wake-up in the FIFO, a change of the file, or wake_fd. */
static int wait_for_wake(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    (void)instance;
    struct local_lock *ll = lk->priv;
    timeout_ms = wake_timeout(ll, timeout_ms);
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
                               { .fd = ll->waiter.place.state != LINE_OUT ? ll->waiter.fd : -1, .events = POLLIN },
                               { .fd = ll->watch_fd - 1, .events = POLLIN } };
        int n = poll(p, 3, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno != EINTR)
            return dlock_seterr(DLOCK_EUNAVAILABLE, "local: poll failed: %s", strerror(errno));
        if (n <= 0)
            return n == 0 && timeout_ms >= 0 ? DLOCK_ETIMEDOUT : DLOCK_OK;
        bool called = consume_wakes(ll, (p[1].revents & POLLIN) != 0, (p[2].revents & POLLIN) != 0);
        called = called || (p[0].revents & POLLIN) != 0;
        /* Only the watch fired (some descriptor of the file was closed,
         * its times touched): every waiter sees that, so an exclusive one
         * looks only when the lock is free, and a close or touch that
         * freed nothing makes no herd. */
        if (called || lk->mode != DLOCK_MODE_EXCLUSIVE || !ll->fd_open || !exclusive_range_taken(ll->fd))
            return DLOCK_OK;
    }
}

/* The FIFO and the watch, both in one epoll set, so that a parked wait
 * hands the core one descriptor. */
static int arm_for_wake(void *instance, struct dlock_provider_lock *lk, bool in_line, int64_t *timeout_ms, int *fd)
{
    (void)instance;
    (void)in_line;
    struct local_lock *ll = lk->priv;
    *timeout_ms = wake_timeout(ll, *timeout_ms);
    ll->parked_look_again = false;
    int64_t now = dlock_provider_now_ms();
    if (ll->look_again_at && ll->look_again_at < now + *timeout_ms) {
        *timeout_ms = ll->look_again_at > now ? ll->look_again_at - now : 0;
        ll->parked_look_again = true;
    }
    if (!ll->park_fd) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0)
            return DLOCK_ENOTSUP; /* out of descriptors: the core waits by blocking */
        ll->park_fd = ep + 1;
    }
    int ep = ll->park_fd - 1;
    ll->parked_fifo = ll->waiter.place.state != LINE_OUT ? ll->waiter.fd : -1;
    ll->parked_watch = ll->watch_fd - 1;
    struct epoll_event ev = { .events = EPOLLIN };
    if (ll->parked_fifo >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, ll->parked_fifo, &ev) < 0)
        ll->parked_fifo = -1;
    if (ll->parked_watch >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, ll->parked_watch, &ev) < 0)
        ll->parked_watch = -1;
    *fd = ep;
    return DLOCK_OK;
}

static bool readable(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static int disarm_for_wake(void *instance, struct dlock_provider_lock *lk, bool in_line, int fired)
{
    (void)instance;
    (void)in_line;
    struct local_lock *ll = lk->priv;
    int ep = ll->park_fd - 1;
    bool fifo = readable(ll->parked_fifo), watch = readable(ll->parked_watch);
    if (ll->parked_fifo >= 0)
        epoll_ctl(ep, EPOLL_CTL_DEL, ll->parked_fifo, NULL);
    if (ll->parked_watch >= 0)
        epoll_ctl(ep, EPOLL_CTL_DEL, ll->parked_watch, NULL);
    ll->parked_fifo_was = ll->parked_fifo;
    ll->parked_watch_was = ll->parked_watch;
    ll->parked_fifo = ll->parked_watch = -1;
    bool called = consume_wakes(ll, fifo, watch);
    if (!fired)
        return ll->parked_look_again ? DLOCK_OK : DLOCK_ETIMEDOUT;
    /* Only the watch fired for an exclusive request while the lock is
     * still taken (a close or touch that freed nothing): the wait goes on,
     * as in wait_for_wake, and makes no herd. */
    if (!called && lk->mode == DLOCK_MODE_EXCLUSIVE && ll->fd_open && exclusive_range_taken(ll->fd)) {
        if (ll->parked_fifo_was >= 0)
            epoll_ctl(ep, EPOLL_CTL_ADD, ll->parked_fifo_was, &(struct epoll_event){ .events = EPOLLIN });
        if (ll->parked_watch_was >= 0)
            epoll_ctl(ep, EPOLL_CTL_ADD, ll->parked_watch_was, &(struct epoll_event){ .events = EPOLLIN });
        ll->parked_fifo = ll->parked_fifo_was;
        ll->parked_watch = ll->parked_watch_was;
        return DLOCK_EBUSY;
    }
    return DLOCK_OK;
}

static struct line_place *place_of(struct dlock_provider_lock *lk)
{
    return &((struct local_lock *)lk->priv)->waiter.place;
}

/* Shared holds are granted together: fair mode is not for them, though
 * they wait in the line too. */
static bool fair_kind(const struct dlock_provider_lock *lk)
{
    return lk->mode != DLOCK_MODE_SHARED;
}

/* A request gives up its place when it leaves (stop_watch), or its place
 * would keep the wake-ups meant for the waiters behind it. */
static void leave_line(void *instance, struct dlock_provider_lock *lk)
{
    stop_watch(instance, lk, false);
}

/* The attempt joins the line between its two looks (try_range), and takes
 * itself out of it when granted; a poll that is not in the line polls in
 * short steps (wait_for_wake). */
static const struct line_ops local_line_ops = {
    .place = place_of,
    .in_line = fair_kind,
    .prepare = prepare_look,
    .turn = fair_turn,
    .attempt = attempt,
    .leave = leave_line,
    .wait_in_line = wait_for_wake,
    .wait_outside = wait_for_wake,
    .arm = arm_for_wake,
    .disarm = disarm_for_wake,
};

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
    local_value_withdraw(inst, ll);
    int unlocked = lk->mode == DLOCK_MODE_SHARED      ? local_set_range(ll->fd, F_UNLCK, HOLD_BYTE, 1, NULL)
                   : lk->mode == DLOCK_MODE_SEMAPHORE ? local_set_range(ll->fd, F_UNLCK, SLOT_BASE + ll->slot, 1, NULL)
                                                      : local_set_lock(ll->fd, F_UNLCK, NULL);
    if (unlocked != 0) {
        /* Closing the descriptor drops the lock whatever went wrong (and
         * tells the watchers with IN_CLOSE_WRITE). */
        local_close_lock_file(ll);
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
    if (local_set_range(ll->fd, F_RDLCK, HOLD_BYTE, 1, NULL) != 0 || local_set_range(ll->fd, F_UNLCK, 0, HOLD_BYTE, NULL) != 0 ||
        local_set_range(ll->fd, F_UNLCK, HOLD_BYTE + 1, EXCLUSIVE_LEN - HOLD_BYTE - 1, NULL) != 0)
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
    local_close_lock_file(ll);
    if (ll->park_fd)
        close(ll->park_fd - 1);
    ll->park_fd = 0;
    ll->held = false;
}

/* Gave up waiting: the inotify instance goes (they are scarce: 128 per
 * user by default); a later wait makes a new one. */
static void local_abandon(void *instance, struct dlock_provider_lock *lk)
{
    struct local_lock *ll = lk->priv;
    if (ll->turnstile && ll->fd_open) {
        /* The shared requests it kept out may go now: wake them. */
        local_set_range(ll->fd, F_UNLCK, TURNSTILE_BYTE, 1, NULL);
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

/* See local_wanted.c. */
static int local_watch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    return local_wanted_watch(instance, lk);
}

static void local_unwatch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    local_wanted_unwatch(instance, lk);
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
    .version = DLOCK_PROVIDER_VERSION_8,
    .name = "local",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_FENCE_LINEARIZABLE | DLOCK_CAP_NATIVE_WAIT | DLOCK_CAP_FAIR |
                    DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE | DLOCK_CAP_ELECTION |
                    DLOCK_CAP_IN_PROCESS | DLOCK_CAP_CACHE,
    .lock_priv_size = sizeof(struct local_lock),
    .settings = local_settings,
    .open = local_open,
    .close = local_close,
    .acquire = line_acquire,
    .release = local_release,
    .renew = local_renew,
    .wait = line_wait,
    .lock_fini = local_lock_fini,
    .ctl = local_ctl,
    .abandon = local_abandon,
    .list = local_list,
    .break_hold = local_break,
    .downgrade = local_downgrade,
    .wait_arm = line_wait_arm,
    .wait_disarm = line_wait_disarm,
    .value_put = local_value_put,
    .leader_get = local_leader_get,
    .watch_open = local_watch_open,
    .watch_consume = local_watch_consume,
    .watch_close = local_watch_close,
    .watch_wanted = local_watch_wanted,
    .unwatch_wanted = local_unwatch_wanted,
};
