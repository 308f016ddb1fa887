/* backends/postgres/pg_line.h - the line of exclusive waiters (and permit
 * waiters) of one name, kept by the server, so that a release wakes one.
 *
 * The line is PostgreSQL's own lock queue: a waiter asks, on a connection
 * of its own, for a session advisory lock on the name's "gate" key (the
 * two-integer form, a key space apart from session mode's holds) and is
 * granted it in turn. Only the waiter at the head, the one with the gate,
 * LISTENs on the name's channel, so a release's NOTIFY wakes it alone; the
 * others sit in the server's queue, making no request. The join is one
 * query sent without waiting for its answer ("SELECT pg_advisory_lock(..);
 * LISTEN .."): its answer comes when the waiter reaches the head, and
 * pg_line_wait then returns so that the core looks once at the lock (a
 * release before the LISTEN is seen by that look, one after it by the
 * NOTIFY).
 *
 * An exclusive holder that came through the line keeps the gate (and its
 * connection) until it releases, so the next waiter's first look comes when
 * the lock is free; a permit holder passes it on at once (another permit
 * may be free). A waiter or holder whose session ends (the process died)
 * leaves the line with it: the server frees its advisory locks. A waiter
 * that finds every connection of the pool in use polls instead of joining. */
#ifndef DLOCK_PG_LINE_H
#define DLOCK_PG_LINE_H

#include "../common/line.h"
#include "pg_conn.h"

#include <stdbool.h>
#include <stdint.h>

/* One lock's place in its line; all zero is "out of it, no connection". */
struct pg_line {
    PGconn *conn;          /* from the listeners' pool while in use */
    struct line_place place; /* LINE_OUT, LINE_ASKED or LINE_HEAD (line.h) */
    bool answer_pending;   /* a query sent without waiting is not fully answered */
    bool failed;           /* part of the join's answer was an error */
    char gate[2][12];      /* the gate key as two int4 texts */
    struct pg_pool *ctl;   /* the statement pool, for cancelling a join in flight */
};

/* Joins the line of the name whose 64-bit digest and NOTIFY channel are
 * given: takes a connection from pool (DLOCK_EBUSY when none is free: the
 * caller then polls) and sends the join; ctl is the pool that a cancel of
 * the join is sent through. DLOCK_OK, or a failure with the detail set (the
 * caller then waits by polling). Not for a line already joined. */
int pg_line_join(struct pg_pool *pool, struct pg_pool *ctl, struct pg_line *l, uint64_t digest, const char *channel);

/* For fair mode, before a first look: takes the head at once when nobody
 * is in the line (the gate is free: a blocking round trip for the gate and
 * one for the LISTEN; l->place.state is then LINE_HEAD and the caller looks),
 * else joins it as pg_line_join does (LINE_ASKED: the caller must not
 * look before its turn). DLOCK_OK, or a failure with the detail set. */
int pg_line_enter(struct pg_pool *pool, struct pg_pool *ctl, struct pg_line *l, uint64_t digest, const char *channel);

/* Blocks until the line moves for us (we reached the head: DLOCK_OK, the
 * caller looks at the lock), a NOTIFY comes while we are at the head
 * (DLOCK_OK), wake_fd is readable (DLOCK_OK), or timeout_ms passes
 * (DLOCK_ETIMEDOUT). A broken connection or a refused join takes us out of
 * the line and answers DLOCK_OK, so the caller's next look joins again. */
int pg_line_wait(struct pg_pool *pool, struct pg_line *l, int64_t timeout_ms, int wake_fd, void *log_handle,
                 const char *label);

/* pg_line_wait cut in two, for a parked wait: arm hands back the waiter's
 * socket (or a timeout of 0 when the line moved already), disarm takes in
 * what came on it without blocking. Both answer as pg_line_wait, and
 * disarm DLOCK_EBUSY when what came does not end the wait. */
int pg_line_arm(struct pg_pool *pool, struct pg_line *l, int64_t *timeout_ms, int *fd, void *log_handle,
                const char *label);
int pg_line_disarm(struct pg_pool *pool, struct pg_line *l, int fired, void *log_handle, const char *label);

/* Forgets NOTIFYs received so far (they tell of releases before the look
 * about to be made). */
void pg_line_drain(struct pg_line *l);

/* Whether another session waits for the gate l holds (one query on the
 * control pool; a failure answers true). For a grant through the line:
 * those waiters make no request until the gate is theirs, so a hold they
 * wait behind must not be kept (lock caching). A place given back at the
 * grant (LINE_ASKED) answers true, one out of the line false. */
bool pg_line_others_queued(const struct pg_line *l);

/* The caller was granted the lock. keep_gate: an exclusive hold keeps the
 * head (the next waiter may look when it is released); otherwise it is
 * passed on. A grant while the join is still unanswered (a look at a timer
 * found the lock free) takes the place back: the connection is cancelled
 * and closed, which the server answers by freeing the gate. */
void pg_line_granted(struct pg_pool *pool, struct pg_line *l, bool keep_gate);

/* The hold that kept the gate ended: the gate goes to the next waiter,
 * and the connection back to the pool once the server has answered. */
void pg_line_pass(struct pg_pool *pool, struct pg_line *l);

/* pg_line_pass cut in two around its round trip, for a release made
 * without a thread. pass_send sends the gate's release without waiting:
 * true when its answer is to be read (from PQsocket(l->conn)); false when
 * there was no gate, or the connection could not take it and was closed,
 * which frees the gate as well. pass_recv reads what came: 1 when more is
 * to come, 0 when done (the connection back in the pool), -1 when the
 * connection broke (closed). pass_drop closes it, its answer unread. */
bool pg_line_pass_send(struct pg_pool *pool, struct pg_line *l);
int pg_line_pass_recv(struct pg_pool *pool, struct pg_line *l);
void pg_line_pass_drop(struct pg_pool *pool, struct pg_line *l);

/* Out of the line altogether, and the connection back to pool (abandon,
 * lock_fini). */
void pg_line_leave(struct pg_pool *pool, struct pg_line *l);

#endif
