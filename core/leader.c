/* core/leader.c - who leads an election, read by anyone: dlock_leader()
 * and the observers of dlock_observe().
 *
 * A leader is reported only when the name's current exclusive hold and
 * the stored value carry the same term (the provider reads both at once):
 * a value left behind by a deposed or resigned leader, or a hold whose
 * value is not published yet, is "nobody leads". An observer keeps the
 * greatest term it has reported and never reports a smaller one, so a
 * read that raced a change (or a lagging replica) cannot show an older
 * leader after a newer one. */
#include "config.h"

#include "entry.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* The leader now: *term 0 when nobody leads; the value (malloc()ed) in
 * *value and *len otherwise. */
static int read_leader(dlock_client *c, const char *name, size_t name_len, uint64_t *term, void **value,
                       size_t *len)
{
    struct dlock_provider_leader got;
    *term = 0;
    *value = NULL;
    *len = 0;
    int rc = dlock__p_leader_get(c, name, name_len, &got);
    if (rc != DLOCK_OK)
        return rc;
    if (got.holder_term != 0 && got.holder_term == got.value_term) {
        *term = got.holder_term;
        *value = got.value;
        *len = got.value_len;
    } else {
        free(got.value);
    }
    return DLOCK_OK;
}

static int check_name(const char *fn, const char *name, size_t name_len)
{
    if (!name || name_len == 0 || name_len > DLOCK_NAME_MAX || memchr(name, 0, name_len))
        return dlock_seterr(DLOCK_EINVAL, "%s: need a name of 1..%d bytes without NUL", fn, DLOCK_NAME_MAX);
    return DLOCK_OK;
}

int dlock_leader(dlock_client *c, const char *name, size_t name_len, void *buf, size_t cap, size_t *value_len,
                 uint64_t *term)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    if ((rc = check_name("dlock_leader", name, name_len)) != DLOCK_OK)
        return rc;
    if (cap > 0 && !buf)
        return dlock_seterr(DLOCK_EINVAL, "dlock_leader: buf is NULL but cap is %zu", cap);
    uint64_t t;
    void *value;
    size_t len;
    if ((rc = read_leader(c, name, name_len, &t, &value, &len)) != DLOCK_OK)
        return rc;
    if (len > 0 && cap > 0)
        memcpy(buf, value, len < cap ? len : cap);
    free(value);
    if (value_len)
        *value_len = len;
    if (term)
        *term = t;
    return DLOCK_OK;
}

/* ---- observers ------------------------------------------------------------ */

struct dlock_observer {
    dlock_client *client;
    char *name;
    size_t name_len;
    dlock_observe_fn fn;
    void *arg;
    int stop_fd;                    /* eventfd: dlock_observe_stop() */
    pthread_t thread;
    struct dlock__leader_seen seen; /* the last state reported (the thread's own) */
};

bool dlock__leader_news(struct dlock__leader_seen *s, uint64_t term, void *value, size_t len)
{
    bool same = s->reported && term == s->term && len == s->value_len &&
                (len == 0 || memcmp(value, s->value, len) == 0);
    /* A smaller term is a stale read; so is a term seen to end, read again
     * after "nobody" (a grant caught before its fence moved). */
    bool older = term != 0 && (term < s->highest || term <= s->ended);
    if (same || older) {
        free(value);
        return false;
    }
    free(s->value);
    s->value = value;
    s->value_len = len;
    if (term == 0 && s->term != 0)
        s->ended = s->highest;
    s->term = term;
    if (term > s->highest)
        s->highest = term;
    s->reported = true;
    return true;
}

void dlock__leader_seen_free(struct dlock__leader_seen *s)
{
    free(s->value);
    memset(s, 0, sizeof *s);
}

/* How long to sleep between reads: with a watch, a read at least once a
 * lease third in case a notification was lost; without, every retry cap. */
static int64_t read_interval_ms(const dlock_client *c, bool watching)
{
    int64_t ms = watching ? c->config.lease_ms / 3 : c->config.retry_cap_ms;
    return ms < 10 ? 10 : ms;
}

static void *observe_thread(void *arg)
{
    struct dlock_observer *o = arg;
    dlock_client *c = o->client;
    void *watch = NULL;
    int watch_fd = -1;
    int64_t pause = 0; /* after a failure, before the next try */
    for (;;) {
        if (!watch && dlock__p_can_watch(c) &&
            dlock__p_watch_open(c, o->name, o->name_len, &watch, &watch_fd) != DLOCK_OK) {
            watch = NULL;
            watch_fd = -1;
        }
        uint64_t term;
        void *value;
        size_t len;
        if (read_leader(c, o->name, o->name_len, &term, &value, &len) == DLOCK_OK) {
            if (dlock__leader_news(&o->seen, term, value, len))
                o->fn(o->seen.value, o->seen.value_len, o->seen.term, o->arg);
            pause = 0;
        } else {
            pause = dlock__backoff_ceiling_ms(pause > 0 ? 3 : 0, c->config.retry_base_ms, c->config.retry_cap_ms);
        }
        struct pollfd fds[2] = { { o->stop_fd, POLLIN, 0 }, { watch_fd, POLLIN, 0 } };
        int64_t wait = pause > 0 ? pause : read_interval_ms(c, watch != NULL);
        if (poll(fds, watch ? 2 : 1, (int)wait) < 0 && errno != EINTR) {
            /* Not expected of a poll on our own descriptors; wait a
             * moment without it rather than end the observer. */
            struct timespec ts = { 0, 100 * 1000000L };
            nanosleep(&ts, NULL);
            continue;
        }
        if (fds[0].revents)
            break;
        if (watch && fds[1].revents && dlock__p_watch_consume(c, watch) != DLOCK_OK) {
            dlock__p_watch_close(c, watch);
            watch = NULL;
            watch_fd = -1;
        }
    }
    dlock__p_watch_close(c, watch);
    return NULL;
}

int dlock_observe(dlock_client *c, const char *name, size_t name_len, dlock_observe_fn fn, void *arg,
                  dlock_observer **out)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    if ((rc = check_name("dlock_observe", name, name_len)) != DLOCK_OK)
        return rc;
    if (!fn || !out)
        return dlock_seterr(DLOCK_EINVAL, "dlock_observe: need a callback and an out pointer");
    *out = NULL;
    if (!(c->capabilities & DLOCK_CAP_ELECTION))
        return dlock_seterr(DLOCK_ENOTSUP, "the %s backend cannot hold elections", c->provider->name);
    struct dlock_observer *o = calloc(1, sizeof *o);
    if (!o || !(o->name = malloc(name_len + 1))) {
        free(o);
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for an observer");
    }
    memcpy(o->name, name, name_len);
    o->name[name_len] = 0;
    o->name_len = name_len;
    o->client = c;
    o->fn = fn;
    o->arg = arg;
    if ((o->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        rc = dlock_seterr(DLOCK_EINTERNAL, "cannot create an eventfd for an observer: %s", strerror(errno));
    } else if ((errno = pthread_create(&o->thread, NULL, observe_thread, o)) != 0) {
        rc = dlock_seterr(DLOCK_EINTERNAL, "cannot start an observer's thread: %s", strerror(errno));
        close(o->stop_fd);
    }
    if (rc != DLOCK_OK) {
        free(o->name);
        free(o);
        return rc;
    }
    *out = o;
    return DLOCK_OK;
}

void dlock_observe_stop(dlock_observer *o)
{
    if (!o)
        return;
    uint64_t one = 1;
    ssize_t ignored = write(o->stop_fd, &one, sizeof one);
    (void)ignored;
    pthread_join(o->thread, NULL);
    close(o->stop_fd);
    dlock__leader_seen_free(&o->seen);
    free(o->name);
    free(o);
}
