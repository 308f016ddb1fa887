/* backends/common/line.h - the waiting line's protocol, written once: when
 * a request enters the line, when it may look at the lock, what a grant,
 * a failure and a wait do to its place. The backends that keep a line
 * (postgres, mysql, local) drive it through a table of their own
 * mechanism's steps, as SQLite's VFS drives a file through its methods.
 *
 * The protocol. A waiter that was answered busy joins the name's line when
 * it waits (or, for local, between its two looks), and looks again when
 * the line moves for it: at the head, or woken. In fair mode a request
 * enters the line before its first look and looks only in its turn; a
 * request whose wait ran out may look out of turn where the backend offers
 * a late look (one that takes only a hold free for a while, so that a live
 * head looks first), which keeps a stopped head from holding the line for
 * good. A failure takes the request out of the line (no abandon follows
 * it); a grant does too, except where the backend keeps the turn for the
 * hold's length (postgres, for an exclusive hold: see granted below); a
 * busy answer keeps its place.
 *
 * The words: a request is "in the line" (LINE_ASKED) when it waits for its
 * turn, "at the head" (LINE_HEAD) when the turn is its, and "watching"
 * (LINE_WATCHING) when, at the head, it waits in the server for the holder
 * to let go. What each state means on the wire is the backend's. */
#ifndef DLOCK_COMMON_LINE_H
#define DLOCK_COMMON_LINE_H

#include <dlock/provider.h>
#include <stdbool.h>
#include <stdint.h>

enum line_state {
    LINE_OUT = 0,  /* not in the line */
    LINE_ASKED,    /* in the line, waiting for the turn */
    LINE_HEAD,     /* the turn is ours, nothing in flight */
    LINE_WATCHING, /* the turn is ours, waiting in the server for the holder */
};

/* One lock's place, as the protocol sees it; all zero is "out of the
 * line". The backend's line keeps state; this file keeps timer_look. A
 * backend clears the whole place when the request leaves its line, and so
 * the late look with it: the late look is for a request in the line whose
 * wait ran out, and line_acquire reads it before any backend step runs. */
struct line_place {
    int state;        /* enum line_state */
    bool timer_look;  /* the last wait ran out: the next fair look may be late */
    bool armed_in_line; /* the armed wait (line_wait_arm) waits in the line */
    bool armed_over;    /* it was over when armed (nothing to poll, no time): a look, not a timeout */
};


/* A backend's steps. Every member gets the caller's instance; the ones
 * marked "may be NULL" have the default said beside them. */
struct line_ops {
    struct line_place *(*place)(struct dlock_provider_lock *lk);
    /* Whether the request's kind waits in the line (fair mode refuses the
     * others). NULL: every kind does. */
    bool (*in_line)(const struct dlock_provider_lock *lk);
    /* Before every look: keys, files, wake-ups that tell of the past.
     * May be NULL. */
    int (*prepare)(void *instance, struct dlock_provider_lock *lk);
    /* Fair mode, before a look: enters the line when out of it, and says
     * whether it is our turn (*turn). A failure to enter is not an error:
     * the request then looks out of turn (the backend logs why). */
    int (*turn)(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, bool *turn);
    int (*attempt)(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g);
    /* A look out of turn (see above). May be NULL, and may answer
     * DLOCK_EBUSY with retry_hint_ms -1 where the mode has none: the
     * request then waits for its turn. */
    int (*attempt_late)(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g);
    /* After a busy answer of a kind not in the line: rc is that answer,
     * and what this returns is the acquire's. May be NULL. */
    int (*busy)(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, int rc);
    /* Granted: the place is given up, or kept where the hold keeps the
     * turn until it ends; g is the grant, whose others_waiting this may
     * set (a round trip allowed), or NULL for a grant read without a
     * thread (line_attempt_end: never blocks; the non-blocking API's
     * holds are never kept). May be NULL (the attempt did it). */
    void (*granted)(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g);
    /* Out of the line, the turn passed on: after a failure, and at
     * abandon. */
    void (*leave)(void *instance, struct dlock_provider_lock *lk);
    /* Joins the line after a busy answer (a try-once never gets here).
     * A failure (detail set) is logged, and the request then polls. May be
     * NULL (the attempt joins). */
    int (*join)(void *instance, struct dlock_provider_lock *lk);
    /* Before a wait, whatever the place. May be NULL. */
    void (*before_wait)(void *instance, struct dlock_provider_lock *lk);
    /* Waits in the line: as the provider's wait member. When it answers
     * DLOCK_OK and the place is out of the line, a request in it failed
     * (logged), and the wait goes on outside it. */
    int (*wait_in_line)(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd);
    /* Waits out of the line (it could not be joined, or the kind is not
     * in it). NULL: out_of_line_wait. */
    int (*wait_outside)(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd);
    /* The wait cut in two, as the provider's wait_arm and wait_disarm
     * (in_line: the place is in the line, so it is wait_in_line's half,
     * else wait_outside's). Both NULL: the backend waits only by blocking,
     * and line_wait_arm answers DLOCK_ENOTSUP. */
    int (*arm)(void *instance, struct dlock_provider_lock *lk, bool in_line, int64_t *timeout_ms, int *fd);
    int (*disarm)(void *instance, struct dlock_provider_lock *lk, bool in_line, int fired);
};

/* The start of an instance whose provider's acquire and wait members are
 * line_acquire and line_wait: its steps, and what messages need. */
struct line_host {
    const struct line_ops *ops;
    const char *label;     /* "postgres 127.0.0.1:5432/db" */
    void *log_handle;      /* for dlock_provider_log */
};

/* The provider's acquire member over the line: prepare, the fair turn, one
 * attempt (or a late one), and the place told of the answer. instance
 * starts with a struct line_host. */
int line_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g);

/* line_acquire cut around its attempt, for a backend that sends the
 * attempt without a thread: line_attempt_begin runs the steps before it
 * (the preparation; a request in fair mode must go through line_acquire,
 * since its turn may make round trips), and line_attempt_end those after
 * its answer rc, returning the acquire's result. The line's own steps then
 * make no round trip for a kind in the line; ops->busy, for the kinds
 * outside it, may. */
int line_attempt_begin(void *instance, struct dlock_provider_lock *lk);
int line_attempt_end(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, int rc);

/* The provider's wait member over the line: joins it when out of it, waits
 * in it or, when it cannot, outside it. Sets timer_look when the wait in
 * the line ran out. instance starts with a struct line_host. */
int line_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd);
/* The provider's wait_arm and wait_disarm over the line: line_wait's join,
 * then the backend's arm; timer_look set as line_wait sets it.
 * DLOCK_ENOTSUP when the backend has no arm. */
int line_wait_arm(void *instance, struct dlock_provider_lock *lk, int64_t *timeout_ms, int *fd);
int line_wait_disarm(void *instance, struct dlock_provider_lock *lk, int fired, int64_t *timeout_ms);

#endif
