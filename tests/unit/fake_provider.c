/* tests/unit/fake_provider.c - see fake_provider.h */
#include "fake_provider.h"
#include "../support/test_time.h"

#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct fake_server fake = { .mu = PTHREAD_MUTEX_INITIALIZER };
_Static_assert(offsetof(struct fake_server, mu) == 0, "fake_reset keeps the mutex: it must come first");

void fake_reset(void)
{
    pthread_mutex_lock(&fake.mu);
    for (int i = 0; i < fake.nanswer_fds; i++)
        close(fake.answer_fds[i]);
    /* Everything but the mutex: a thread of a client that a failed test left
     * open may be taking it right now, and a mutex must not be rewritten
     * under its users. */
    size_t state = offsetof(struct fake_server, slots);
    memset((char *)&fake + state, 0, sizeof fake - state);
    fake.busy_hint_ms = -1;
    pthread_mutex_unlock(&fake.mu);
}

int fake_get(int *counter)
{
    pthread_mutex_lock(&fake.mu);
    int v = *counter;
    pthread_mutex_unlock(&fake.mu);
    return v;
}

static struct fake_slot *slot(const char *name, bool create)
{
    struct fake_slot *free_slot = NULL;
    for (int i = 0; i < FAKE_SLOTS; i++) {
        if (strcmp(fake.slots[i].name, name) == 0)
            return &fake.slots[i];
        if (!free_slot && fake.slots[i].name[0] == 0)
            free_slot = &fake.slots[i];
    }
    if (create && free_slot)
        snprintf(free_slot->name, sizeof free_slot->name, "%s", name);
    return create ? free_slot : NULL;
}

void fake_hold_externally(const char *name, bool held)
{
    pthread_mutex_lock(&fake.mu);
    struct fake_slot *s = slot(name, true);
    snprintf(s->holder, sizeof s->holder, "%s", held ? "someone-else:1" : "");
    if (!held)
        fake.release_seq++;
    pthread_mutex_unlock(&fake.mu);
}

void fake_expire(const char *name)
{
    pthread_mutex_lock(&fake.mu);
    struct fake_slot *s = slot(name, false);
    if (s)
        s->holder[0] = 0;
    fake.release_seq++;
    pthread_mutex_unlock(&fake.mu);
}

static const struct dlock_setting_spec fake_settings[] = {
    { "label", DLOCK_SETTING_STRING, 0, 0 },
    { "delay_ms", DLOCK_SETTING_INT, 0, 1000 },
    { "flag", DLOCK_SETTING_BOOL, 0, 0 },
    { "servers", DLOCK_SETTING_STRING_LIST, 0, 0 },
    { NULL, 0, 0, 0 },
};

static int fake_open(void **instance, const struct dlock_provider_env *env)
{
    int64_t delay = 0;
    dlock_settings_int(env->settings, "delay_ms", &delay);
    const char *label = "";
    dlock_settings_string(env->settings, "label", &label);
    if (strcmp(label, "refuse") == 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "fake: refusing to open as asked by %s",
                            dlock_settings_where(env->settings, "label"));
    pthread_mutex_lock(&fake.mu);
    fake.opens++;
    fake.wanted = env->wanted;
    pthread_mutex_unlock(&fake.mu);
    *instance = &fake;
    return DLOCK_OK;
}

static void fake_close(void *instance)
{
    (void)instance;
    pthread_mutex_lock(&fake.mu);
    fake.closes++;
    pthread_mutex_unlock(&fake.mu);
}

/* Blocks as a slow server would, without holding fake.mu. */
static void delay(const int64_t *field)
{
    pthread_mutex_lock(&fake.mu);
    int64_t ms = *field;
    pthread_mutex_unlock(&fake.mu);
    if (ms > 0)
        sleep_ms(ms);
}

static int fake_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    (void)instance;
    delay(&fake.acquire_delay_ms);
    pthread_mutex_lock(&fake.mu);
    fake.acquires++;
    fake.acquire_thread = pthread_self();
    if (fake.passing_failures > 0) {
        fake.passing_failures--;
        g->retry_hint_ms = 20;
        pthread_mutex_unlock(&fake.mu);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "fake: between two states, try again");
    }
    int rc = fake.acquire_rc;
    if (rc) {
        pthread_mutex_unlock(&fake.mu);
        return dlock_seterr(rc, "fake: acquire failing as configured");
    }
    struct fake_slot *s = slot(lk->name, true);
    if (s->holder[0] && strcmp(s->holder, lk->owner) != 0) {
        g->retry_hint_ms = fake.busy_hint_ms;
        if (s->watched && fake.wanted) { /* as a server that pushes to the holder */
            fake.wanted_calls++;
            fake.wanted(s->watched);
        }
        pthread_mutex_unlock(&fake.mu);
        return DLOCK_EBUSY;
    }
    snprintf(s->holder, sizeof s->holder, "%s", lk->owner);
    fake.grants_made++;
    if (fake.asked_at_grant && s->watched && fake.wanted) {
        fake.wanted_calls++;
        fake.wanted(s->watched);
    }
    g->fence = ++fake.fence;
    g->has_fence = 1;
    if (fake.granted_lease_ms > 0)
        g->lease_ms = fake.granted_lease_ms;
    g->valid_ms = fake.granted_valid_ms;
    pthread_mutex_unlock(&fake.mu);
    return DLOCK_OK;
}

static int fake_release(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    delay(&fake.release_delay_ms);
    pthread_mutex_lock(&fake.mu);
    fake.releases++;
    fake.release_thread = pthread_self();
    struct fake_slot *s = slot(lk->name, false);
    int rc = DLOCK_ENOTOWNER;
    if (s && strcmp(s->holder, lk->owner) == 0) {
        s->holder[0] = 0;
        fake.release_seq++;
        rc = DLOCK_OK;
    } else {
        fake.foreign_releases++;
    }
    pthread_mutex_unlock(&fake.mu);
    return rc;
}

/* fake.mu held */
static int renew_locked(struct dlock_provider_lock *lk)
{
    fake.renews++;
    if (fake.nrenew_at < FAKE_TIMES)
        fake.renew_at[fake.nrenew_at++] = now_ms();
    if (fake.renew_rc)
        return dlock_seterr(fake.renew_rc, "fake: renew failing as configured");
    struct fake_slot *s = slot(lk->name, false);
    return s && strcmp(s->holder, lk->owner) == 0 ? DLOCK_OK : DLOCK_ELOST;
}

static int fake_renew(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    delay(&fake.renew_delay_ms);
    pthread_mutex_lock(&fake.mu);
    int rc = renew_locked(lk);
    pthread_mutex_unlock(&fake.mu);
    return rc;
}

static int fake_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    (void)instance;
    delay(&fake.renew_delay_ms);
    pthread_mutex_lock(&fake.mu);
    fake.batches++;
    fake.batch_items += (int)n;
    fake.last_batch_n = (int64_t)n;
    for (size_t i = 0; i < n; i++)
        results[i] = renew_locked(locks[i]);
    pthread_mutex_unlock(&fake.mu);
    return DLOCK_OK;
}

static int fake_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    (void)instance;
    (void)lk;
    pthread_mutex_lock(&fake.mu);
    fake.waits++;
    uint64_t seq = fake.release_seq;
    pthread_mutex_unlock(&fake.mu);
    int64_t end = now_ms() + timeout_ms;
    for (;;) {
        struct pollfd p = { .fd = wake_fd, .events = POLLIN };
        int64_t left = end - now_ms();
        if (left <= 0)
            return DLOCK_ETIMEDOUT;
        if (poll(&p, 1, left < 2 ? (int)left : 2) > 0)
            return DLOCK_OK;
        pthread_mutex_lock(&fake.mu);
        bool released = fake.release_seq != seq;
        pthread_mutex_unlock(&fake.mu);
        if (released)
            return DLOCK_OK;
    }
}

static int fake_ctl(void *instance, int op, void *arg)
{
    (void)instance;
    if (op != DLOCK_CTL_CAPABILITIES)
        return DLOCK_ENOTSUP;
    pthread_mutex_lock(&fake.mu);
    *(unsigned *)arg &= ~fake.caps_lacking;
    pthread_mutex_unlock(&fake.mu);
    return DLOCK_OK;
}

static void fake_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    (void)lk;
    pthread_mutex_lock(&fake.mu);
    fake.finis++;
    pthread_mutex_unlock(&fake.mu);
}

/* ---- fakesend: an attempt's round trip over a socket pair ---------------------- */

struct fake_io {
    int fd;                   /* ours; the test's end is in fake.answer_fds */
};

/* Puts a request in flight over a socket pair whose far end the test answers. */
static int send_request(struct dlock_provider_io *io)
{
    int fds[2];
    struct fake_io *f = malloc(sizeof *f);
    if (!f || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) != 0) {
        free(f);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "fakesend: no socket pair");
    }
    pthread_mutex_lock(&fake.mu);
    if (fake.nanswer_fds == (int)(sizeof fake.answer_fds / sizeof fake.answer_fds[0])) {
        pthread_mutex_unlock(&fake.mu);
        close(fds[0]);
        close(fds[1]);
        free(f);
        return DLOCK_ENOTSUP;
    }
    fake.answer_fds[fake.nanswer_fds++] = fds[1];
    fake.sends++;
    if (++fake.in_flight > fake.most_in_flight)
        fake.most_in_flight = fake.in_flight;
    io->timeout_ms = fake.send_timeout_ms > 0 ? fake.send_timeout_ms : 5000;
    pthread_mutex_unlock(&fake.mu);
    f->fd = fds[0];
    io->fd = f->fd;
    io->priv = f;
    return DLOCK_OK;
}

static int fake_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    (void)instance;
    (void)lk;
    pthread_mutex_lock(&fake.mu);
    fake.send_thread = pthread_self();
    pthread_mutex_unlock(&fake.mu);
    return send_request(io);
}

static void io_end(struct dlock_provider_io *io, bool dropped)
{
    struct fake_io *f = io->priv;
    close(f->fd);
    free(f);
    io->priv = NULL;
    pthread_mutex_lock(&fake.mu);
    fake.in_flight--;
    if (dropped)
        fake.drops++;
    pthread_mutex_unlock(&fake.mu);
}

static int fake_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                             struct dlock_grant *g)
{
    struct fake_io *f = io->priv;
    char b;
    if (read(f->fd, &b, 1) != 1)
        return DLOCK_PROVIDER_AGAIN; /* woken with nothing to read: not yet */
    pthread_mutex_lock(&fake.mu);
    fake.recv_thread = pthread_self();
    pthread_mutex_unlock(&fake.mu);
    io_end(io, false);
    return fake_acquire(instance, lk, g);
}

static void fake_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    (void)instance;
    (void)lk;
    io_end(io, true);
}

static int fake_release_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    (void)instance;
    (void)lk;
    pthread_mutex_lock(&fake.mu);
    fake.release_sends++;
    fake.release_send_thread = pthread_self();
    pthread_mutex_unlock(&fake.mu);
    return send_request(io);
}

static int fake_release_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct fake_io *f = io->priv;
    char b;
    if (read(f->fd, &b, 1) != 1)
        return DLOCK_PROVIDER_AGAIN;
    pthread_mutex_lock(&fake.mu);
    fake.recv_thread = pthread_self();
    bool unreadable = fake.release_answer_unreadable;
    pthread_mutex_unlock(&fake.mu);
    io_end(io, false);
    if (unreadable)
        return DLOCK_ENOTSUP; /* as a connection lost with the release in flight */
    return fake_release(instance, lk);
}

void fake_answer_all(void)
{
    pthread_mutex_lock(&fake.mu);
    for (int i = 0; i < fake.nanswer_fds; i++) {
        ssize_t ignored = send(fake.answer_fds[i], "a", 1, MSG_NOSIGNAL); /* fails once dropped */
        (void)ignored;
        close(fake.answer_fds[i]);
    }
    fake.nanswer_fds = 0;
    pthread_mutex_unlock(&fake.mu);
}

static int fake_watch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    pthread_mutex_lock(&fake.mu);
    struct fake_slot *s = slot(lk->name, true);
    if (s)
        s->watched = lk;
    fake.watches++;
    pthread_mutex_unlock(&fake.mu);
    return s ? DLOCK_OK : dlock_seterr(DLOCK_ENOMEM, "fake: out of slots");
}

static void fake_unwatch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    (void)instance;
    pthread_mutex_lock(&fake.mu);
    struct fake_slot *s = slot(lk->name, false);
    if (s && s->watched == lk)
        s->watched = NULL;
    pthread_mutex_unlock(&fake.mu);
}

/* What "fake" and "fakecache" share: every call, renewals in batches. */
#define FAKE_BATCHING_MEMBERS                                                                               \
    .version = DLOCK_PROVIDER_VERSION, .lock_priv_size = 24, .settings = fake_settings, .open = fake_open, \
    .close = fake_close, .acquire = fake_acquire, .release = fake_release, .renew = fake_renew,            \
    .renew_batch = fake_renew_batch, .lock_fini = fake_lock_fini, .ctl = fake_ctl

const struct dlock_provider fake_provider = {
    FAKE_BATCHING_MEMBERS,
    .name = "fake",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE,
};

const struct dlock_provider fake_cache_provider = {
    FAKE_BATCHING_MEMBERS,
    .name = "fakecache",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_CACHE,
    .watch_wanted = fake_watch_wanted,
    .unwatch_wanted = fake_unwatch_wanted,
};

const struct dlock_provider fake_wait_provider = {
    .version = DLOCK_PROVIDER_VERSION,
    .name = "fakewait",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_NATIVE_WAIT,
    .settings = fake_settings,
    .open = fake_open,
    .close = fake_close,
    .acquire = fake_acquire,
    .release = fake_release,
    .renew = fake_renew,
    .wait = fake_wait,
    .lock_fini = fake_lock_fini,
};

const struct dlock_provider fake_send_provider = {
    .version = DLOCK_PROVIDER_VERSION,
    .name = "fakesend",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE,
    .settings = fake_settings,
    .open = fake_open,
    .close = fake_close,
    .acquire = fake_acquire,
    .release = fake_release,
    .renew = fake_renew,
    .lock_fini = fake_lock_fini,
    .acquire_send = fake_acquire_send,
    .acquire_recv = fake_acquire_recv,
    .acquire_drop = fake_acquire_drop,
    .release_send = fake_release_send,
    .release_recv = fake_release_recv,
    .release_drop = fake_acquire_drop,
};

const struct dlock_provider fake_in_process_provider = {
    .version = DLOCK_PROVIDER_VERSION,
    .name = "fakequick",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_IN_PROCESS,
    .settings = fake_settings,
    .open = fake_open,
    .close = fake_close,
    .acquire = fake_acquire,
    .release = fake_release,
    .renew = fake_renew,
    .lock_fini = fake_lock_fini,
};
