/* backends/mysql/my_native.c - an attempt's statements without a thread,
 * for the non-blocking API, over MariaDB's non-blocking calls
 * (mysql_stmt_execute_start/_cont): acquire_send starts lease mode's
 * MY_ACQUIRE on an idle connection of the pool and hands the core its
 * socket; acquire_recv continues it when the socket is readable and, after
 * a busy answer, sends the waiting writer's registration on the same
 * connection, as the blocking attempt does; acquire_drop closes a
 * connection whose answer never came. A statement whose answer is already
 * there when it is sent (a server on the same host can be that quick) is
 * kept, and the core is pointed at an eventfd of the lock's, made
 * readable.
 *
 * Only what the blocking attempt (my_lease.c) does by statements alone,
 * with no step of the line around it that makes a round trip, goes this
 * way: lease mode, an exclusive request outside fair mode and out of the
 * name's line (a request at the head of the line gives its gate back
 * after the attempt, a round trip), an idle connection where the
 * statements are prepared. Anything else answers DLOCK_ENOTSUP, and the
 * core makes the attempt with acquire. */
#include "config.h"

#include "../common/line.h"
#include "../common/native_room.h"
#include "my_backend.h"

#include <sys/eventfd.h>
#include <unistd.h>

enum native_step { STEP_NONE, STEP_ACQUIRE, STEP_REGISTER };

/* The attempt is over: its connection goes back (closed when broken). */
static void finish(struct my_instance *inst, struct my_lock *ml, bool broken)
{
    if (broken) {
        my_conn_close(ml->native_conn);
        my_pool_put(&inst->pool, NULL);
        conn_pool_drop_idle(&inst->pool.pool); /* the others to that server most likely broke as well */
    } else {
        my_pool_put(&inst->pool, ml->native_conn);
    }
    ml->native_conn = NULL;
    ml->native_step = STEP_NONE;
    ml->native_ready = false;
    native_room_given_back(&inst->native_in_flight);
}

/* Starts statement `step` on the attempt's connection. In flight: true,
 * with io->fd the connection's socket; answered at once: true, the answer
 * kept in ml and io->fd the lock's eventfd, readable; not sent: false
 * (*rc says why; DLOCK_ENOTSUP when it is not prepared there). */
static bool start_step(struct my_instance *inst, struct dlock_provider_lock *lk, enum native_step step,
                       struct dlock_provider_io *io, int *rc)
{
    struct my_lock *ml = lk->priv;
    struct my_param p[4];
    ml->native_step = step;
    ml->native_ready = false;
    enum my_async a;
    if (step == STEP_ACQUIRE) {
        my_acquire_params(lk, p);
        a = my_exec_start(&inst->server, ml->native_conn, MY_ACQUIRE, p, 3, &ml->native_outcome, rc);
    } else {
        my_writer_params(lk, p);
        a = my_exec_start(&inst->server, ml->native_conn, MY_REGISTER_WRITER, p, 4, &ml->native_outcome, rc);
    }
    if (a == MY_ASYNC_WAIT) {
        io->fd = mysql_get_socket(ml->native_conn->db);
        return true;
    }
    if (a == MY_ASYNC_FAILED)
        return false;
    if (!ml->ready_fd && (ml->ready_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) + 1) <= 0) {
        ml->ready_fd = 0;
        return false; /* no descriptor to wake the core with: acquire does it again */
    }
    ml->native_ready = true;
    ml->native_rc = *rc;
    uint64_t one = 1;
    ssize_t w = write(ml->ready_fd - 1, &one, sizeof one);
    (void)w; /* a counter this far from its limit takes it */
    io->fd = ml->ready_fd - 1;
    return true;
}

int my_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    if (inst->head.mode != &my_lease_mode || lk->mode != DLOCK_MODE_EXCLUSIVE || (lk->flags & DLOCK_LOCK_FAIR) ||
        ml->line.place.state != LINE_OUT || ml->line.conn)
        return DLOCK_ENOTSUP;
    int rc = line_attempt_begin(inst, lk);
    if (rc != DLOCK_OK) {
        struct dlock_grant unused = { 0 };
        return line_attempt_end(inst, lk, &unused, rc); /* a failure: the line is left, as acquire leaves it */
    }
    /* No idle connection, or one where the statement was never prepared:
     * acquire connects or prepares, on a worker (this call must not block:
     * the core may make it on the caller's loop). */
    if (my_pool_take_idle(&inst->pool, &ml->native_conn) != DLOCK_OK)
        return DLOCK_ENOTSUP;
    if (!native_room_try_take(&inst->native_in_flight, inst->pool.pool.max)) {
        my_pool_put(&inst->pool, ml->native_conn);
        ml->native_conn = NULL;
        return DLOCK_ENOTSUP;
    }
    if (!ml->native_conn->stmt[MY_ACQUIRE] || !start_step(inst, lk, STEP_ACQUIRE, io, &rc)) {
        /* Not sent, or failed at once (a dead connection): acquire sends
         * it on a fresh one. */
        finish(inst, ml, my_conn_broken(ml->native_conn) || (rc != DLOCK_OK && rc != DLOCK_ENOTSUP));
        return DLOCK_ENOTSUP;
    }
    /* Two statements at most (the attempt, a writer's registration),
     * each bounded by the command timeout in the blocking attempt. */
    io->timeout_ms = 2 * inst->server.command_timeout_ms;
    io->priv = ml;
    return DLOCK_OK;
}

/* The answer to the statement in flight: DLOCK_PROVIDER_AGAIN while it
 * has not come, else the statement's result with *o filled. */
static int answer_of(struct my_instance *inst, struct my_lock *ml, struct my_outcome *o, bool *broken)
{
    int rc;
    *broken = false;
    if (ml->native_ready) {
        uint64_t n;
        ssize_t r = read(ml->ready_fd - 1, &n, sizeof n);
        (void)r;
        ml->native_ready = false;
        *o = ml->native_outcome;
        /* An idle connection the server had closed answers at once too:
         * with a lost connection, as one that dies in flight. */
        *broken = my_conn_broken(ml->native_conn);
        return ml->native_rc;
    }
    int which = ml->native_step == STEP_ACQUIRE ? MY_ACQUIRE : MY_REGISTER_WRITER;
    enum my_async a = my_exec_cont(&inst->server, ml->native_conn, which, o, &rc);
    if (a == MY_ASYNC_WAIT)
        return DLOCK_PROVIDER_AGAIN;
    *broken = a == MY_ASYNC_FAILED || my_conn_broken(ml->native_conn);
    return rc;
}

int my_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                    struct dlock_grant *g)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    struct my_outcome o;
    bool broken;
    int rc = answer_of(inst, ml, &o, &broken);
    if (rc == DLOCK_PROVIDER_AGAIN)
        return rc;
    if (ml->native_step == STEP_ACQUIRE) {
        if (broken) {
            /* The connection failed with the attempt in flight: acquire
             * sends it again on a fresh one (an owner's attempt is safe to
             * repeat: it takes its own row again), as it does when this
             * happens in it. */
            io->priv = NULL;
            finish(inst, ml, true);
            return DLOCK_ENOTSUP;
        }
        if (rc == DLOCK_OK)
            rc = my_answer_acquire(inst, lk, &o, g);
        if (rc == DLOCK_EBUSY && !inst->head.no_shared_columns) {
            /* Kept waiting: say so in the row, on the same connection (the
             * busy answer's hint kept for the answer that ends it). */
            ml->native_hint_ms = g->retry_hint_ms;
            int src;
            if (start_step(inst, lk, STEP_REGISTER, io, &src))
                return ml->native_ready ? my_acquire_recv(instance, lk, io, g) : DLOCK_PROVIDER_AGAIN;
            /* Not started: never prepared here (below), or failed part of
             * the way (it may have written part of the request), which
             * leaves the connection unusable. */
            broken = my_conn_broken(ml->native_conn) || src != DLOCK_ENOTSUP;
            if (src == DLOCK_ENOTSUP && !broken) {
                /* Never prepared on this connection: acquire makes the
                 * attempt again on a worker, which prepares and sends it
                 * (once per connection); the attempt is safe to repeat. */
                io->priv = NULL;
                finish(inst, ml, false);
                return DLOCK_ENOTSUP;
            }
        }
    } else {
        /* The registration: best effort, as in the blocking attempt (the
         * request waits either way). */
        if (rc == DLOCK_OK)
            ml->writer_registered = true;
        g->retry_hint_ms = ml->native_hint_ms;
        rc = DLOCK_EBUSY;
    }
    io->priv = NULL;
    finish(inst, ml, broken);
    return line_attempt_end(inst, lk, g, rc);
}

void my_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct my_instance *inst = instance;
    struct my_lock *ml = lk->priv;
    io->priv = NULL;
    if (!ml->native_conn)
        return;
    /* Closed: an answer may still come on it. A grant it made runs out
     * with its lease, as after a command timeout in acquire. */
    finish(inst, ml, true);
    struct dlock_grant unused = { 0 };
    line_attempt_end(inst, lk, &unused, DLOCK_EUNAVAILABLE);
}

void my_native_forget(struct my_lock *ml)
{
    if (ml->ready_fd > 0)
        close(ml->ready_fd - 1);
    ml->ready_fd = 0;
}
