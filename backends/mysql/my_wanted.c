/* backends/mysql/my_wanted.c - see my_wanted.h
 *
 * The poller's thread owns its connection: it connects, runs the poll for
 * the held names, tells the locks whose rows carry a mark, and sleeps
 * poll_ms, or until woken (a name held again while nothing was, or the
 * client closing). Other threads only add, mark and drop watches under the
 * mutex and wake it through an eventfd. */
#include "config.h"

#include "my_wanted.h"
#include "../common/quiet_thread.h"
#include "../common/reconnect_pause.h"
#include "../common/wake_fd.h"
#include "../common/sql_text.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Names per statement, so that a client holding thousands asks in
 * statements of a sane size. A poller that cannot connect tries again
 * after a pause (reconnect_pause.h). */
enum { NAMES_PER_POLL = 200 };

struct my_wanted_watch {
    struct my_wanted_watch *next;
    struct dlock_provider_lock *lk; /* NULL once unwatched (under mu) */
    bool held;                      /* under mu */
    char *hex;                      /* the name, as hex digits */
};

struct my_wanted {
    const struct my_server *srv;
    const char *poll_start;
    int64_t poll_ms;
    void (*tell)(struct dlock_provider_lock *lk);
    void *log_handle;
    pthread_mutex_t mu;             /* everything below but conn */
    struct my_wanted_watch *watches;
    bool started, stopping, down_told;
    pthread_t thread;
    int wake_fd;
    struct my_conn *conn;           /* the thread's */
};

int my_wanted_new(const struct my_server *srv, const char *poll_start, int64_t poll_ms,
                  void (*tell)(struct dlock_provider_lock *lk), void *log_handle, struct my_wanted **out)
{
    *out = NULL;
    struct my_wanted *w = calloc(1, sizeof *w);
    if (!w)
        return dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory for the poller of kept holds");
    w->wake_fd = wake_fd_open();
    if (w->wake_fd < 0) {
        free(w);
        return dlock_seterr(DLOCK_ENOMEM, "mysql: no eventfd for the poller of kept holds: %s", strerror(errno));
    }
    w->srv = srv;
    w->poll_start = poll_start;
    w->poll_ms = poll_ms;
    w->tell = tell;
    w->log_handle = log_handle;
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return DLOCK_OK;
}

static void wake(struct my_wanted *w)
{
    wake_fd_signal(w->wake_fd);
}

/* Under mu: waits up to ms (-1: until woken) for a wake-up, mu dropped
 * meanwhile. */
static void pause_ms(struct my_wanted *w, int64_t ms)
{
    pthread_mutex_unlock(&w->mu);
    struct pollfd p = { .fd = w->wake_fd, .events = POLLIN };
    poll(&p, 1, (int)ms);
    wake_fd_drain(w->wake_fd);
    pthread_mutex_lock(&w->mu);
}

/* Under mu: frees the unwatched. */
static void drop_unwatched(struct my_wanted *w)
{
    for (struct my_wanted_watch **p = &w->watches; *p;) {
        struct my_wanted_watch *ww = *p;
        if (ww->lk) {
            p = &ww->next;
            continue;
        }
        *p = ww->next;
        free(ww->hex);
        free(ww);
    }
}

/* Under mu: the poll statement for up to NAMES_PER_POLL held names from
 * *from on (moved past them), or NULL when none is left or out of memory
 * (*oom set). */
static char *next_poll(struct my_wanted *w, struct my_wanted_watch **from, bool *oom)
{
    size_t size = strlen(w->poll_start) + 2, n = 0;
    struct my_wanted_watch *ww = *from;
    for (; ww && n < NAMES_PER_POLL; ww = ww->next)
        if (ww->lk && ww->held) {
            size += strlen(ww->hex) + 4; /* X'...', */
            n++;
        }
    if (n == 0)
        return NULL;
    char *sql = malloc(size);
    if (!sql) {
        *oom = true;
        return NULL;
    }
    char *p = sql + sprintf(sql, "%s", w->poll_start);
    n = 0;
    for (ww = *from; ww && n < NAMES_PER_POLL; ww = ww->next)
        if (ww->lk && ww->held)
            p += sprintf(p, "%sX'%s'", n++ ? "," : "", ww->hex);
    strcpy(p, ")");
    *from = ww;
    return sql;
}

/* Under mu: tells the watches of each name the poll returned. */
static void tell_marked(struct my_wanted *w, MYSQL_RES *res)
{
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        if (!row[0])
            continue;
        for (struct my_wanted_watch *ww = w->watches; ww; ww = ww->next)
            if (ww->lk && ww->held && strcasecmp(ww->hex, row[0]) == 0)
                w->tell(ww->lk);
    }
}

/* Runs sql on the thread's connection (connected first if there is none),
 * once more on a new one if an existing one turned out dead: one left idle
 * past the server's wait_timeout is no reason to give holds back. */
static int run_poll(struct my_wanted *w, const char *sql, MYSQL_RES **res)
{
    int rc = DLOCK_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        bool fresh = !w->conn;
        if (fresh && !(w->conn = my_connect(w->srv, &rc)))
            return rc;
        rc = my_query_rows(w->srv, w->conn, sql, res);
        if (rc == DLOCK_OK || !my_conn_broken(w->conn))
            return rc;
        my_conn_close(w->conn);
        w->conn = NULL;
        if (fresh)
            break;
    }
    return rc;
}

/* Under mu: tells every held watch (a poll failed: requests for them may
 * go unread for as long as it keeps failing, so they are given back). */
static void tell_held(struct my_wanted *w)
{
    for (struct my_wanted_watch *ww = w->watches; ww; ww = ww->next)
        if (ww->lk && ww->held)
            w->tell(ww->lk);
}

/* Under mu: one poll of every held name. False when the connection could
 * not be had or the statement failed: every held name is told, and the
 * caller backs off. mu is dropped around each statement; the list may
 * change meanwhile, but only this thread frees a watch, so the place
 * reached stays valid. */
static bool poll_held(struct my_wanted *w)
{
    struct my_wanted_watch *from = w->watches;
    bool oom = false;
    char *sql;
    while ((sql = next_poll(w, &from, &oom)) != NULL) {
        pthread_mutex_unlock(&w->mu);
        MYSQL_RES *res = NULL;
        int rc = run_poll(w, sql, &res);
        free(sql);
        pthread_mutex_lock(&w->mu);
        if (rc != DLOCK_OK) {
            if (!w->down_told)
                dlock_provider_log(w->log_handle, DLOCK_LOG_WARN,
                                   "%s: cannot ask whether kept holds are wanted (%s); giving them back, "
                                   "and trying again",
                                   w->srv->label, dlock_errmsg());
            w->down_told = true;
            tell_held(w);
            return false;
        }
        w->down_told = false;
        tell_marked(w, res);
        mysql_free_result(res);
    }
    if (oom) {
        dlock_provider_log(w->log_handle, DLOCK_LOG_WARN, "%s: out of memory for the poll of kept holds",
                           w->srv->label);
        tell_held(w);
    }
    return !oom;
}

static bool any_held(const struct my_wanted *w)
{
    for (const struct my_wanted_watch *ww = w->watches; ww; ww = ww->next)
        if (ww->lk && ww->held)
            return true;
    return false;
}

static void *run(void *arg)
{
    struct my_wanted *w = arg;
    int64_t backoff = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        drop_unwatched(w);
        if (!any_held(w)) {
            pause_ms(w, -1);
            continue;
        }
        if (poll_held(w)) {
            backoff = 0;
            pause_ms(w, w->poll_ms);
        } else {
            backoff = reconnect_pause_next(backoff);
            pause_ms(w, backoff > w->poll_ms ? backoff : w->poll_ms);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int my_wanted_watch(struct my_wanted *w, struct dlock_provider_lock *lk, const void *key, size_t key_len,
                    struct my_wanted_watch **out)
{
    struct my_wanted_watch *ww = calloc(1, sizeof *ww);
    char *hex = malloc(2 * key_len + 1);
    if (!ww || !hex) {
        free(ww);
        free(hex);
        return dlock_seterr(DLOCK_ENOMEM, "mysql: out of memory for the watch of a kept name");
    }
    *sql_hex(hex, key, key_len) = '\0';
    ww->hex = hex;
    ww->lk = lk;
    ww->held = true;
    pthread_mutex_lock(&w->mu);
    if (!w->started) {
        if (quiet_thread_create(&w->thread, run, w) != 0) {
            pthread_mutex_unlock(&w->mu);
            free(hex);
            free(ww);
            return dlock_seterr(DLOCK_ENOMEM, "mysql: could not start the poller of kept holds");
        }
        w->started = true;
    }
    ww->next = w->watches;
    w->watches = ww;
    pthread_mutex_unlock(&w->mu);
    wake(w);
    *out = ww;
    return DLOCK_OK;
}

void my_wanted_held(struct my_wanted *w, struct my_wanted_watch *ww, bool held)
{
    pthread_mutex_lock(&w->mu);
    bool was = ww->held;
    ww->held = held;
    pthread_mutex_unlock(&w->mu);
    if (held && !was)
        wake(w); /* it may be asleep with nothing held */
}

void my_wanted_unwatch(struct my_wanted *w, struct my_wanted_watch *ww)
{
    pthread_mutex_lock(&w->mu);
    ww->lk = NULL;
    pthread_mutex_unlock(&w->mu);
    wake(w);
}

void my_wanted_free(struct my_wanted *w)
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
        struct my_wanted_watch *ww = w->watches;
        w->watches = ww->next;
        free(ww->hex);
        free(ww);
    }
    my_conn_close(w->conn);
    close(w->wake_fd);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
