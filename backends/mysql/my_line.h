/* backends/mysql/my_line.h - the line of waiters of one name, kept by the
 * server with its own named locks, so that waiters block in the server
 * instead of polling and a release wakes one of them.
 *
 * A waiter asks, on a connection of its own and without waiting for the
 * answer, for GET_LOCK on the name's "gate" (the name's lock name with ".q"
 * after it): the server grants it in turn. The waiter with the gate, the
 * head, then watches the holder, and only looks when the watch answers.
 * The others sit in the server's queue for the gate, making no request. A
 * grant passes the gate on. A waiter whose process died leaves a
 * connection the server ends when it next answers it, which frees its
 * gate; one that gives up has its query killed (KILL, from another
 * connection) and its connection closed.
 *
 * The watch in session mode is SELECT GET_LOCK(name, ..), RELEASE_LOCK(name):
 * the server answers it when the holder's RELEASE_LOCK runs or its
 * connection ends (the lock is taken and let go at once, so the head's
 * client can take it on its own holder connection). In lease mode the hold
 * is a row, which nothing in the server waits on: the head first arms (the
 * caller's statement writes this connection's id into the row while the
 * row is busy for it), then sleeps in the server until the timeout; a
 * release takes the id out of the row and ends the sleep with KILL QUERY
 * (struct my_line_watch). */
#ifndef DLOCK_MY_LINE_H
#define DLOCK_MY_LINE_H

#include "../common/line.h"
#include "my_conn.h"

#include <stdbool.h>
#include <stdint.h>

/* One lock's place in its line; all zero is "out of it, no connection". */
struct my_line {
    struct my_conn *conn; /* from the waiters' pool while in use */
    struct line_place place; /* line.h; LINE_WATCHING: the watch is in flight */
    unsigned long thread_id; /* the server's id of conn, for KILL */
    char name[32];        /* the lock's GET_LOCK name */
    struct my_pool *ctl;  /* the statement pool, which KILL is sent through */
    bool armed;           /* lease mode: the row may still name thread_id as its waker */
    int reasks;           /* the gate asked for again in a row after its request was cut off */
    int64_t park_deadline; /* a parked wait's end (my_line_arm) */
};

/* How the head of a lease-mode line watches the holder. */
struct my_line_watch {
    /* Writes thread_id into the row while the row is still busy for the
     * request: 1 when armed (a release will wake thread_id), 0 when the row
     * looks free (the caller looks instead), -1 on failure (detail set). */
    int (*arm)(void *ctx, unsigned long thread_id);
    /* The statement that sleeps sleep_ms while the row still names
     * thread_id as its waker; its one value is 2 when it slept (still
     * armed), anything else when it did not or was cut short: malloc'd,
     * or NULL with DLOCK_ENOMEM set. */
    char *(*sleep_sql)(void *ctx, unsigned long thread_id, int64_t sleep_ms);
    void *ctx;
};

/* Joins the line of the lock named name (its GET_LOCK name): takes a
 * connection from pool (DLOCK_EBUSY when none is free) and sends the
 * gate's request; ctl is the pool a KILL of it is sent through (never pool
 * itself, whose connections may all be waiting). DLOCK_OK, or a failure
 * with the detail set (the caller then waits by polling). */
int my_line_join(struct my_pool *pool, struct my_pool *ctl, struct my_line *l, const char *name);

/* Fair mode: before the first look, takes the gate when nobody is in the
 * line (*head true, LINE_HEAD: the caller looks). When others are,
 * *head is false and the line is left as it was (LINE_OUT, the
 * connection back in pool): not our turn to look, and the caller joins
 * the line when it waits, which a try-once never does. A connection found
 * dead is replaced once. DLOCK_OK, or a failure with the detail set
 * (DLOCK_EBUSY: every waiting connection is in use). */
int my_line_enter(struct my_pool *pool, struct my_pool *ctl, struct my_line *l, const char *name, bool *head);

/* Blocks until the holder let go while we are at the head (DLOCK_OK: the
 * caller looks), wake_fd is readable (DLOCK_OK), or timeout_ms passes
 * (DLOCK_ETIMEDOUT); reaching the head on the way sends the watch: session
 * mode's when watch is NULL, else a lease-mode one, whose sleep ends in the
 * server at the timeout (its answer is awaited a little past it, so that
 * the connection is not lost to a sleep in flight). A broken connection or
 * a refused request takes us out of the line and answers DLOCK_OK, so the
 * caller's next look joins again. */
int my_line_wait(struct my_pool *pool, struct my_line *l, const struct my_line_watch *watch, int64_t timeout_ms,
                 int wake_fd, void *log_handle);

/* my_line_wait cut in two, for a parked wait: arm sends what the head
 * sends and hands back the waiter's socket (or a timeout of 0 when the
 * wait is over already); disarm reads the answer that came and answers as
 * my_line_wait, or DLOCK_EBUSY when the wait goes on (the gate asked for
 * again, or the watch sent once the gate came). */
int my_line_arm(struct my_pool *pool, struct my_line *l, const struct my_line_watch *watch, int64_t *timeout_ms,
                int *fd, void *log_handle);
int my_line_disarm(struct my_pool *pool, struct my_line *l, const struct my_line_watch *watch, int fired,
                   void *log_handle);

/* The caller was granted the lock, or gives up: out of the line, the gate
 * passed on, the connection back to pool (or killed and closed when a
 * request is still in flight). A lease-mode caller takes its waker out of
 * the row first when l->armed, so that no release later ends a query of
 * whoever has the connection next. */
void my_line_leave(struct my_pool *pool, struct my_line *l);

#endif
