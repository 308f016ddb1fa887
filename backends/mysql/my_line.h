/* backends/mysql/my_line.h - session mode's line of waiters of one name,
 * kept by the server with its own named locks, so that waiters block in
 * the server instead of polling and a release wakes one of them.
 *
 * A waiter asks, on a connection of its own and without waiting for the
 * answer, for GET_LOCK on the name's "gate" (the name's lock name with ".q"
 * after it): the server grants it in turn. The waiter with the gate, the
 * head, then sends SELECT GET_LOCK(name, ..), RELEASE_LOCK(name): the
 * server answers it when the holder's RELEASE_LOCK runs or its connection
 * ends (the lock is taken and let go at once, so the head's client can take
 * it on its own holder connection), and only then does the head look. The
 * others sit in the server's queue for the gate, making no request. A grant
 * passes the gate on. A waiter whose process died leaves a connection the
 * server ends when it next answers it, which frees its gate; one that gives
 * up has its query killed (KILL, from another connection) and its
 * connection closed. */
#ifndef DLOCK_MY_LINE_H
#define DLOCK_MY_LINE_H

#include "my_conn.h"

#include <stdbool.h>
#include <stdint.h>

enum my_line_state {
    MY_LINE_OUT = 0,  /* not in the line */
    MY_LINE_ASKED,    /* the gate is asked for: waiting in the line */
    MY_LINE_HEAD,     /* the gate is ours, nothing in flight */
    MY_LINE_WATCHING, /* the gate is ours, waiting in the server for the holder to let go */
};

/* One lock's place in its line; all zero is "out of it, no connection". */
struct my_line {
    struct my_conn *conn; /* from the waiters' pool while in use */
    int state;            /* enum my_line_state */
    unsigned long thread_id; /* the server's id of conn, for KILL */
    char name[32];        /* the lock's GET_LOCK name */
    struct my_pool *ctl;  /* the statement pool, which KILL is sent through */
};

/* Joins the line of the lock named name (its GET_LOCK name): takes a
 * connection from pool (DLOCK_EBUSY when none is free) and sends the
 * gate's request; ctl is the pool a KILL of it is sent through (never pool
 * itself, whose connections may all be waiting). DLOCK_OK, or a failure
 * with the detail set (the caller then waits by polling). */
int my_line_join(struct my_pool *pool, struct my_pool *ctl, struct my_line *l, const char *name);

/* Blocks until the holder let go while we are at the head (DLOCK_OK: the
 * caller looks), wake_fd is readable (DLOCK_OK), or timeout_ms passes
 * (DLOCK_ETIMEDOUT); reaching the head on the way sends the watch. A broken
 * connection or a refused request takes us out of the line and answers
 * DLOCK_OK, so the caller's next look joins again. */
int my_line_wait(struct my_pool *pool, struct my_line *l, int64_t timeout_ms, int wake_fd, void *log_handle);

/* The caller was granted the lock, or gives up: out of the line, the gate
 * passed on, the connection back to pool (or killed and closed when a
 * request is still in flight). */
void my_line_leave(struct my_pool *pool, struct my_line *l);

#endif
