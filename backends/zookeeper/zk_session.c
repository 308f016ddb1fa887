/* backends/zookeeper/zk_session.c - see zk_session.h. */
#include "config.h"

#include "zk_session.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The C client's log has no per-handle context and would otherwise write
 * to the host process's stderr; what matters reaches the caller as an
 * error value with a message instead. */
static void discard_log(const char *message)
{
    (void)message;
}

static void wake(int fd)
{
    uint64_t one = 1;
    ssize_t ignored = write(fd, &one, sizeof one);
    (void)ignored;
}

void zk_session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    struct zk_session *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (type == ZOO_SESSION_EVENT) {
        s->state = state;
        if (state == ZOO_EXPIRED_SESSION_STATE) {
            s->expired = true;
            /* Every waiter's predecessor may be gone with the session:
             * let them all look again. */
            for (struct zk_waiter *w = s->waiters; w; w = w->next)
                wake(w->fd);
        }
        pthread_cond_broadcast(&s->cv);
    } else if (path) {
        for (struct zk_waiter *w = s->waiters; w; w = w->next)
            if (strcmp(w->path, path) == 0)
                wake(w->fd);
    }
    pthread_mutex_unlock(&s->mu);
}

static void auth_done(int rc, const void *data)
{
    struct zk_session *s = (struct zk_session *)data;
    pthread_mutex_lock(&s->mu);
    s->auth_rc = rc;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits on s->cv until pred() or the deadline. Called with s->mu held. */
static bool wait_until(struct zk_session *s, int64_t deadline, bool (*pred)(const struct zk_session *))
{
    while (!pred(s)) {
        int64_t left = deadline - dlock_provider_now_ms();
        if (left <= 0)
            return false;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += left / 1000;
        ts.tv_nsec += (left % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    return true;
}

static bool settled(const struct zk_session *s)
{
    return s->state == ZOO_CONNECTED_STATE || s->state == ZOO_EXPIRED_SESSION_STATE ||
           s->state == ZOO_AUTH_FAILED_STATE;
}

static bool auth_answered(const struct zk_session *s)
{
    return s->auth_rc != 1 || s->state == ZOO_AUTH_FAILED_STATE || s->state == ZOO_EXPIRED_SESSION_STATE;
}

/* Creates a handle and waits for the session; called with handle_lock
 * held for writing (or before anyone else can see s). */
static int connect_session(struct zk_session *s)
{
    pthread_mutex_lock(&s->mu);
    s->state = ZOO_CONNECTING_STATE;
    s->expired = false;
    s->auth_rc = 1;
    pthread_mutex_unlock(&s->mu);
    zhandle_t *zh = zookeeper_init2(s->hosts, zk_session_watcher, s->timeout_ms, NULL, s, 0, discard_log);
    if (!zh)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "zookeeper %s: cannot create a session handle: %s", s->hosts,
                            strerror(errno));
    int64_t deadline = dlock_provider_now_ms() + s->connect_timeout_ms;
    pthread_mutex_lock(&s->mu);
    bool up = wait_until(s, deadline, settled) && s->state == ZOO_CONNECTED_STATE;
    pthread_mutex_unlock(&s->mu);
    int rc = DLOCK_OK;
    if (!up) {
        rc = dlock_seterr(DLOCK_EUNAVAILABLE,
                          "zookeeper %s: no server established a session within %lld ms "
                          "(check zookeeper.hosts; raise zookeeper.connect_timeout_ms?)",
                          s->hosts, (long long)s->connect_timeout_ms);
    } else if (s->auth[0]) {
        int zrc = zoo_add_auth(zh, "digest", s->auth, (int)strlen(s->auth), auth_done, s);
        pthread_mutex_lock(&s->mu);
        bool answered = zrc == ZOK && wait_until(s, deadline, auth_answered);
        int auth_rc = s->auth_rc;
        pthread_mutex_unlock(&s->mu);
        if (!answered || auth_rc != ZOK)
            rc = dlock_seterr(answered ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE,
                              "zookeeper %s: digest authentication %s (check zookeeper.auth)", s->hosts,
                              answered ? "was refused" : "got no answer");
    }
    if (rc != DLOCK_OK) {
        zookeeper_close(zh);
        return rc;
    }
    s->zh = zh;
    s->generation++;
    return DLOCK_OK;
}

static void quiet_client_log(void)
{
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
}

int zk_session_open(struct zk_session *s)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, quiet_client_log);
    pthread_rwlock_init(&s->handle_lock, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = connect_session(s);
    if (rc != DLOCK_OK) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        pthread_rwlock_destroy(&s->handle_lock);
    }
    return rc;
}

void zk_session_close(struct zk_session *s)
{
    if (s->zh)
        zookeeper_close(s->zh); /* ends the session: the server deletes its nodes */
    s->zh = NULL;
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    pthread_rwlock_destroy(&s->handle_lock);
}

int zk_session_get(struct zk_session *s, zhandle_t **zh, uint64_t *generation)
{
    for (;;) {
        pthread_rwlock_rdlock(&s->handle_lock);
        pthread_mutex_lock(&s->mu);
        bool expired = s->expired || !s->zh;
        pthread_mutex_unlock(&s->mu);
        if (!expired) {
            *zh = s->zh;
            *generation = s->generation;
            return DLOCK_OK;
        }
        pthread_rwlock_unlock(&s->handle_lock);
        /* The session is over: every hold of it is lost (the holders learn
         * it from the generation). Start a new one. */
        pthread_rwlock_wrlock(&s->handle_lock);
        int rc = DLOCK_OK;
        pthread_mutex_lock(&s->mu);
        expired = s->expired || !s->zh;
        pthread_mutex_unlock(&s->mu);
        if (expired) {
            if (s->zh) {
                dlock_provider_log(s->log_handle, DLOCK_LOG_WARN,
                                   "zookeeper %s: the session expired; its locks are lost; starting a new one",
                                   s->hosts);
                zookeeper_close(s->zh);
                s->zh = NULL;
            }
            rc = connect_session(s);
        }
        pthread_rwlock_unlock(&s->handle_lock);
        if (rc != DLOCK_OK)
            return rc;
    }
}

int zk_session_try_get(struct zk_session *s, zhandle_t **zh, uint64_t *generation)
{
    if (pthread_rwlock_tryrdlock(&s->handle_lock) != 0)
        return DLOCK_EBUSY;
    pthread_mutex_lock(&s->mu);
    bool expired = s->expired || !s->zh;
    pthread_mutex_unlock(&s->mu);
    if (expired) {
        pthread_rwlock_unlock(&s->handle_lock);
        return DLOCK_EBUSY;
    }
    *zh = s->zh;
    *generation = s->generation;
    return DLOCK_OK;
}

void zk_session_put(struct zk_session *s)
{
    pthread_rwlock_unlock(&s->handle_lock);
}

void zk_session_add_waiter(struct zk_session *s, struct zk_waiter *w)
{
    pthread_mutex_lock(&s->mu);
    w->next = s->waiters;
    s->waiters = w;
    pthread_mutex_unlock(&s->mu);
}

void zk_session_remove_waiter(struct zk_session *s, struct zk_waiter *w)
{
    pthread_mutex_lock(&s->mu);
    for (struct zk_waiter **p = &s->waiters; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&s->mu);
}

int zk_error(const struct zk_session *s, int zrc, const char *what, const char *path)
{
    int code = DLOCK_EUNAVAILABLE;
    const char *hint = "";
    if (zrc == ZNOAUTH || zrc == ZAUTHFAILED) {
        code = DLOCK_ECONFIG;
        hint = " (the ACL of the lock root refuses this identity: check zookeeper.auth)";
    } else if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT) {
        hint = " (connection lost: the session is suspended, its holds count down)";
    } else if (zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE) {
        hint = " (the session expired: its holds are lost)";
    }
    return dlock_seterr(code, "zookeeper %s: %s %s: %s%s", s->hosts, what, path ? path : "", zerror(zrc), hint);
}
