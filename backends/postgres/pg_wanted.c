/* backends/postgres/pg_wanted.c - see pg_wanted.h
 *
 * The listener's thread owns its connection: it connects, sends every
 * LISTEN (a watch waits for its own), and reads the notifications. Other
 * threads only add and mark watches under the mutex and wake it through
 * an eventfd. PostgreSQL delivers a notification only to sessions that
 * were listening when the notifying statement committed, and a session
 * that ends loses its LISTENs: so a lost connection tells every watched
 * lock at once, and again once the LISTENs are in place on the new one
 * (a hold kept since the first tell was told nothing). */
#include "config.h"

#include "pg_wanted.h"
#include "../common/quiet_thread.h"
#include "../common/reconnect_pause.h"
#include "../common/wake_fd.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A listener that cannot connect tries again after a pause
 * (reconnect_pause.h). */
enum { POLL_CAP_MS = 1000 };

struct channel_watch {
    struct channel_watch *next;
    struct dlock_provider_lock *lk; /* NULL once unwatched (under mu) */
    char channel[32];
    uint64_t listened_on;           /* the connection generation its LISTEN is in effect on, 0: none */
    bool answered;                  /* its first LISTEN was answered (answer_rc) */
    int answer_rc;
};

struct pg_wanted {
    const struct pg_server *srv;
    void (*tell)(struct dlock_provider_lock *lk);
    void *log_handle;
    pthread_mutex_t mu;             /* everything below but conn */
    pthread_cond_t answered_cv;     /* a first LISTEN was answered */
    struct channel_watch *watches;
    bool started, stopping;
    pthread_t thread;
    int wake_fd;
    uint64_t generation;            /* of the connection, 0 before the first */
    char last_error[256];           /* why the last connection failed, for a waiting watch */
    PGconn *conn;                   /* the thread's */
};

int pg_wanted_new(const struct pg_server *srv, void (*tell)(struct dlock_provider_lock *lk), void *log_handle,
                  struct pg_wanted **out)
{
    *out = NULL;
    struct pg_wanted *w = calloc(1, sizeof *w);
    if (!w)
        return dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory for the listener of kept holds");
    w->wake_fd = wake_fd_open();
    if (w->wake_fd < 0) {
        free(w);
        return dlock_seterr(DLOCK_ENOMEM, "postgres: no eventfd for the listener of kept holds: %s",
                            strerror(errno));
    }
    w->srv = srv;
    w->tell = tell;
    w->log_handle = log_handle;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->answered_cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = w;
    return DLOCK_OK;
}

static void wake(struct pg_wanted *w)
{
    wake_fd_signal(w->wake_fd);
}

/* Under mu: keeps why the connection failed (one line), for a watch
 * that waits for its LISTEN. */
static void note_error(struct pg_wanted *w, const char *why)
{
    snprintf(w->last_error, sizeof w->last_error, "%s", why ? why : "");
    w->last_error[strcspn(w->last_error, "\n")] = 0;
}

/* Under mu: tells every watched lock (a notification may have been lost). */
static void tell_all(struct pg_wanted *w)
{
    for (struct channel_watch *cw = w->watches; cw; cw = cw->next)
        if (cw->lk)
            w->tell(cw->lk);
}

/* Under mu: answers the watches waiting for their first LISTEN. */
static void answer_waiting(struct pg_wanted *w, int rc)
{
    for (struct channel_watch *cw = w->watches; cw; cw = cw->next)
        if (cw->lk && !cw->answered) {
            cw->answered = true;
            cw->answer_rc = rc;
        }
    pthread_cond_broadcast(&w->answered_cv);
}

/* Under mu: frees the unwatched, UNLISTENing a channel nobody else still
 * watches (mu is dropped around the statement). */
static void drop_unwatched(struct pg_wanted *w)
{
    for (struct channel_watch **p = &w->watches; *p;) {
        struct channel_watch *cw = *p;
        if (cw->lk) {
            p = &cw->next;
            continue;
        }
        *p = cw->next;
        bool still = false;
        for (struct channel_watch *o = w->watches; o; o = o->next)
            still = still || (o->lk && strcmp(o->channel, cw->channel) == 0);
        /* Not while the client closes: the session ends with it. */
        if (!still && !w->stopping && w->conn && cw->listened_on == w->generation) {
            char sql[64];
            snprintf(sql, sizeof sql, "UNLISTEN \"%s\"", cw->channel);
            pthread_mutex_unlock(&w->mu);
            PQclear(PQexec(w->conn, sql));
            pthread_mutex_lock(&w->mu);
        }
        free(cw);
        p = &w->watches; /* the list may have changed while mu was dropped */
    }
}

/* Under mu: LISTENs on every watched channel not yet listened to on this
 * connection (mu is dropped around each statement). False when the
 * connection broke. */
static bool listen_all(struct pg_wanted *w)
{
    for (;;) {
        struct channel_watch *cw = w->watches;
        while (cw && (!cw->lk || cw->listened_on == w->generation))
            cw = cw->next;
        if (!cw)
            return true;
        char sql[64];
        snprintf(sql, sizeof sql, "LISTEN \"%s\"", cw->channel);
        pthread_mutex_unlock(&w->mu);
        PGresult *res = PQexec(w->conn, sql);
        bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        pthread_mutex_lock(&w->mu);
        if (!ok) {
            note_error(w, PQerrorMessage(w->conn));
            return false;
        }
        /* Only this thread frees a watch: cw is still in the list. */
        cw->listened_on = w->generation;
        if (cw->lk && !cw->answered) {
            cw->answered = true;
            cw->answer_rc = DLOCK_OK;
            pthread_cond_broadcast(&w->answered_cv);
        }
    }
}

/* Under mu: the connection is gone (or never came): every watch is told,
 * the ones waiting for their first LISTEN fail. */
static void lost(struct pg_wanted *w)
{
    if (w->conn) {
        dlock_provider_log(w->log_handle, DLOCK_LOG_WARN,
                           "%s: the connection that listens for requests of kept holds broke; they are given back",
                           w->srv->label);
        PQfinish(w->conn);
        w->conn = NULL;
    }
    tell_all(w);
    answer_waiting(w, DLOCK_EUNAVAILABLE);
}

/* Under mu: tells the watches of each channel notified in what the
 * connection has read (a LISTEN's answer may have carried some too). */
static void dispatch_notifications(struct pg_wanted *w)
{
    PGnotify *n;
    while ((n = PQnotifies(w->conn)) != NULL) {
        for (struct channel_watch *cw = w->watches; cw; cw = cw->next)
            if (cw->lk && strcmp(cw->channel, n->relname) == 0)
                w->tell(cw->lk);
        PQfreemem(n);
    }
}

/* Under mu: reads what came on the connection and tells the watches of
 * each channel notified. False when the connection broke. */
static bool read_notifications(struct pg_wanted *w)
{
    pthread_mutex_unlock(&w->mu);
    bool ok = PQconsumeInput(w->conn) == 1;
    pthread_mutex_lock(&w->mu);
    dispatch_notifications(w);
    if (!ok)
        note_error(w, PQerrorMessage(w->conn));
    return ok;
}

/* The listening connection is idle for as long as nobody asks, and
 * libpq's keepalives follow the system's (the first probe after two
 * hours): a connection the network dropped would go unnoticed, its
 * LISTENs gone on the server, and every kept hold deaf. Probes from 5 s
 * of silence, 3 of them 2 s apart, end it within about 11 s; a LISTEN
 * sent into a dead connection fails once unacknowledged for 10 s. */
static void watch_the_socket(PGconn *conn)
{
    int fd = PQsocket(conn), on = 1, idle = 5, interval = 2, count = 3;
    unsigned user_timeout_ms = 10000;
    if (fd < 0)
        return;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

/* Under mu: waits up to ms for a wake-up, mu dropped meanwhile. */
static void pause_ms(struct pg_wanted *w, int64_t ms)
{
    pthread_mutex_unlock(&w->mu);
    struct pollfd p = { .fd = w->wake_fd, .events = POLLIN };
    poll(&p, 1, (int)ms);
    wake_fd_drain(w->wake_fd);
    pthread_mutex_lock(&w->mu);
}

static void *run(void *arg)
{
    struct pg_wanted *w = arg;
    int64_t backoff = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        drop_unwatched(w);
        if (!w->conn) {
            pthread_mutex_unlock(&w->mu);
            int rc;
            PGconn *conn = pg_connect(w->srv, &rc);
            pthread_mutex_lock(&w->mu);
            if (conn)
                watch_the_socket(conn);
            w->conn = conn;
            if (conn) {
                w->generation++;
                if (listen_all(w))
                    conn = w->conn;
                else
                    conn = NULL; /* a server that refuses LISTEN (a standby) is not asked in a loop */
            } else {
                note_error(w, dlock_errmsg());
            }
            if (!conn) {
                lost(w);
                backoff = reconnect_pause_next(backoff);
                pause_ms(w, backoff);
                continue;
            }
            backoff = 0;
            /* Told again: a hold kept while nothing listened was told
             * nothing. */
            if (w->generation > 1)
                tell_all(w);
        }
        if (!listen_all(w)) {
            lost(w);
            continue;
        }
        dispatch_notifications(w);
        int fd = PQsocket(w->conn);
        pthread_mutex_unlock(&w->mu);
        struct pollfd p[2] = { { .fd = w->wake_fd, .events = POLLIN }, { .fd = fd, .events = POLLIN } };
        poll(p, 2, POLL_CAP_MS);
        wake_fd_drain(w->wake_fd);
        pthread_mutex_lock(&w->mu);
        if ((p[1].revents || PQstatus(w->conn) != CONNECTION_OK) && !read_notifications(w))
            lost(w);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int pg_wanted_watch(struct pg_wanted *w, struct dlock_provider_lock *lk, const char *channel)
{
    struct channel_watch *cw = calloc(1, sizeof *cw);
    if (!cw)
        return dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory for the watch of a kept name");
    snprintf(cw->channel, sizeof cw->channel, "%s", channel);
    cw->lk = lk;
    pthread_mutex_lock(&w->mu);
    if (!w->started) {
        int err = quiet_thread_create(&w->thread, run, w);
        if (err != 0) {
            pthread_mutex_unlock(&w->mu);
            free(cw);
            return dlock_seterr(DLOCK_ENOMEM, "postgres: could not start the listener of kept holds");
        }
        w->started = true;
    }
    cw->next = w->watches;
    w->watches = cw;
    wake(w);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    int64_t ms = w->srv->command_timeout_ms + w->srv->connect_timeout_ms;
    until.tv_sec += (time_t)(ms / 1000);
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int wait_rc = 0;
    while (!cw->answered && wait_rc == 0)
        wait_rc = pthread_cond_timedwait(&w->answered_cv, &w->mu, &until);
    int rc = cw->answered ? cw->answer_rc : DLOCK_ETIMEDOUT;
    if (rc != DLOCK_OK) {
        /* Not watched: the hold is released as usual (the core tries again
         * later); the thread frees the watch. */
        cw->lk = NULL;
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: could not listen for requests of lock '%s'%s%s",
                          w->srv->label, lk->name, rc == DLOCK_ETIMEDOUT ? " in time" : ": ",
                          rc == DLOCK_ETIMEDOUT ? "" : w->last_error);
        wake(w);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void pg_wanted_unwatch(struct pg_wanted *w, struct dlock_provider_lock *lk)
{
    pthread_mutex_lock(&w->mu);
    for (struct channel_watch *cw = w->watches; cw; cw = cw->next)
        if (cw->lk == lk)
            cw->lk = NULL;
    pthread_mutex_unlock(&w->mu);
    wake(w);
}

void pg_wanted_free(struct pg_wanted *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    bool started = w->started;
    pthread_mutex_unlock(&w->mu);
    if (started) {
        wake(w);
        pthread_join(w->thread, NULL);
    }
    while (w->watches) {
        struct channel_watch *cw = w->watches;
        w->watches = cw->next;
        free(cw);
    }
    if (w->conn)
        PQfinish(w->conn);
    close(w->wake_fd);
    pthread_cond_destroy(&w->answered_cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
