/* backends/postgres/pg_native.c - an attempt's statements, and a release's
 * statement, without a thread, for the non-blocking API: acquire_send sends lease mode's first
 * acquire statement on an idle connection of the pool and hands the core
 * its socket; acquire_recv reads what has come and, where the blocking
 * attempt would run a second statement (the upsert after a fast path that
 * found no row, the registration of a writer kept waiting), sends it on
 * the same connection and waits again; acquire_drop closes a connection
 * whose answer never came.
 *
 * Only what the blocking attempt (pg_lease.c) does by statements alone
 * goes this way: lease mode, exclusive holds and permits outside fair
 * mode, out of the name's line or (exclusive) at its head, on an idle
 * connection where the statements are prepared. Anything else (session
 * mode, shared holds, whose busy answer LISTENs first, fair mode's turn,
 * a permit or a request still queued in the line, a connection that is
 * new, broken, or has not prepared the statement) answers DLOCK_ENOTSUP,
 * and the core makes the attempt with acquire. The line's steps around
 * the attempt (line_attempt_begin and line_attempt_end) are the blocking
 * attempt's own, and for these requests make no round trip. release_send,
 * release_recv and release_drop do the same for a release, and pass the
 * name's gate on after it (a second statement, on the line's connection)
 * when the hold kept it. */
#include "config.h"

#include "../common/line.h"
#include "../common/lock_kind.h"
#include "../common/native_room.h"
#include "pg_backend.h"

#include <string.h>

enum native_step {
    STEP_NONE,
    STEP_TAKE,     /* PG_TAKE: the row taken, or none (held, or not made yet) */
    STEP_ACQUIRE,  /* PG_ACQUIRE: the upsert, granted or busy */
    STEP_REGISTER, /* PG_REGISTER_WRITER after a busy answer; the attempt's result is EBUSY */
    STEP_PERMIT,   /* PG_SHARED_ACQUIRE for a permit */
    STEP_RELEASE,  /* PG_RELEASE or PG_SHARED_RELEASE: a release, not an attempt */
    STEP_PASS,     /* after the release, the name's gate passed on (pg_line_pass_send) */
};

/* The attempt is over: its connection goes back to the pool (closed when
 * broken, by pg_pool_put), and what was read of its answer is freed. */
static void finish(struct pg_instance *inst, struct pg_lock *pl, bool broken)
{
    PQclear(pl->native_answer);
    pl->native_answer = NULL;
    if (broken) {
        PQfinish(pl->native_conn);
        pg_pool_put(&inst->pool, NULL);
        /* The others to that server most likely broke as well. */
        conn_pool_drop_idle(&inst->pool.pool);
    } else {
        pg_pool_put(&inst->pool, pl->native_conn);
    }
    pl->native_conn = NULL;
    pl->native_step = STEP_NONE;
    native_room_given_back(&inst->native_in_flight);
}

static int statement_of(enum native_step step)
{
    switch (step) {
    case STEP_TAKE:
        return PG_TAKE;
    case STEP_ACQUIRE:
        return PG_ACQUIRE;
    case STEP_REGISTER:
        return PG_REGISTER_WRITER;
    default:
        return PG_SHARED_ACQUIRE;
    }
}

static bool send_step(struct pg_lock *pl, struct dlock_provider_lock *lk, enum native_step step)
{
    struct pg_attempt_args a;
    pg_attempt_args(&a, lk);
    pl->native_step = step;
    int n = step == STEP_ACQUIRE ? a.n_acquire : a.n;
    return pg_send_prepared_now(pl->native_conn, statement_of(step), n, a.values, a.lengths, a.formats);
}

static int take_connection(struct pg_instance *inst, struct pg_lock *pl);

/* Where in the name's line an attempt may go without a thread: out of
 * it, or an exclusive request at its head (granted, it keeps the gate;
 * busy, it stays; a failure is made again by acquire, below). A permit's
 * grant passes the gate on, and a request still asked (queued for the
 * gate) is cancelled by a grant: round trips on the line's connection,
 * left to acquire. */
static bool attempt_native_in_line(const struct dlock_provider_lock *lk, const struct pg_line *line)
{
    if (line->place.state == LINE_OUT)
        return !line->conn;
    return line->place.state == LINE_HEAD && lk->mode == DLOCK_MODE_EXCLUSIVE && line->conn &&
           !line->answer_pending;
}

int pg_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (inst->head.mode != &pg_lease_mode || lk->mode == DLOCK_MODE_SHARED || (lk->flags & DLOCK_LOCK_FAIR) ||
        !attempt_native_in_line(lk, &pl->line))
        return DLOCK_ENOTSUP;
    int rc = line_attempt_begin(inst, lk);
    if (rc != DLOCK_OK) {
        struct dlock_grant unused = { 0 };
        return line_attempt_end(inst, lk, &unused, rc); /* a failure: the line is left, as acquire leaves it */
    }
    /* No idle connection: acquire connects, or waits for one, on a worker
     * (this call must not block: the core may make it on the caller's loop). */
    if (take_connection(inst, pl) != DLOCK_OK)
        return DLOCK_ENOTSUP;
    enum native_step first = lk->mode == DLOCK_MODE_SEMAPHORE ? STEP_PERMIT
                             : pl->last_busy                  ? STEP_ACQUIRE
                                                              : STEP_TAKE;
    if (!send_step(pl, lk, first)) {
        finish(inst, pl, true); /* acquire sends it on a fresh one */
        return DLOCK_ENOTSUP;
    }
    io->fd = PQsocket(pl->native_conn);
    /* An attempt is at most three statements (take, upsert, registration),
     * each bounded by the command timeout in the blocking attempt. */
    io->timeout_ms = 3 * inst->server.command_timeout_ms;
    io->priv = pl;
    return DLOCK_OK;
}

/* The answer to the statement of pl->native_step, whole: the attempt's
 * result, or DLOCK_PROVIDER_AGAIN when its next statement was sent. */
static int next_step(struct pg_instance *inst, struct dlock_provider_lock *lk, const PGresult *res,
                     struct dlock_grant *g)
{
    struct pg_lock *pl = lk->priv;
    bool taken;
    int rc;
    switch (pl->native_step) {
    case STEP_TAKE:
        rc = pg_answer_take(inst, lk, res, g, &taken);
        if (rc != DLOCK_OK || taken)
            return rc;
        return send_step(pl, lk, STEP_ACQUIRE) ? DLOCK_PROVIDER_AGAIN : DLOCK_ENOTSUP;
    case STEP_ACQUIRE:
        rc = pg_answer_acquire(inst, lk, res, g);
        if (rc != DLOCK_EBUSY || inst->head.no_shared_columns)
            return rc;
        /* Kept waiting: say so in the row, as the blocking attempt does
         * (best effort: a registration that cannot be sent is skipped),
         * keeping the busy answer's hint for the answer that ends it. */
        pl->native_hint_ms = g->retry_hint_ms;
        return send_step(pl, lk, STEP_REGISTER) ? DLOCK_PROVIDER_AGAIN : DLOCK_EBUSY;
    case STEP_REGISTER:
        pg_answer_register_writer(inst, lk, res);
        g->retry_hint_ms = pl->native_hint_ms;
        return DLOCK_EBUSY;
    default: {
        struct pg_attempt_args a;
        pg_attempt_args(&a, lk);
        return pg_answer_shared(inst, lk, &a, res, g);
    }
    }
}

/* Statement `res` was never prepared on this connection (SQLSTATE 26000):
 * nothing ran. */
static bool not_prepared(const PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return state && strcmp(state, "26000") == 0;
}

int pg_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                    struct dlock_grant *g)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    int r = pg_read_answer(pl->native_conn, &pl->native_answer);
    if (r > 0)
        return DLOCK_PROVIDER_AGAIN;
    if (r < 0) {
        /* The connection failed with the attempt in flight: acquire sends
         * it again on a fresh one (an owner's attempt is safe to repeat:
         * it takes its own row again), as it does when this happens in it. */
        io->priv = NULL;
        finish(inst, pl, true);
        return DLOCK_ENOTSUP;
    }
    PGresult *res = pl->native_answer;
    pl->native_answer = NULL;
    if (not_prepared(res)) {
        PQclear(res);
        io->priv = NULL;
        finish(inst, pl, false); /* acquire prepares it on the connection it takes */
        return DLOCK_ENOTSUP;
    }
    struct dlock_grant step_grant = *g;
    int rc = next_step(inst, lk, res, &step_grant);
    PQclear(res);
    if (rc == DLOCK_PROVIDER_AGAIN)
        return rc;
    io->priv = NULL;
    finish(inst, pl, rc == DLOCK_ENOTSUP);
    if (rc == DLOCK_ENOTSUP)
        return rc;
    /* A failure at the line's head leaves the line, a round trip on its
     * connection: acquire makes the attempt again (an owner's attempt is
     * safe to repeat), and leaves the line if it fails too. */
    if (rc != DLOCK_OK && rc != DLOCK_EBUSY && pl->line.place.state != LINE_OUT)
        return DLOCK_ENOTSUP;
    *g = step_grant;
    return line_attempt_end(inst, lk, g, rc);
}

void pg_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    io->priv = NULL;
    if (!pl->native_conn)
        return;
    /* Closed: an answer may still come on it. A grant it made runs out
     * with its lease, as after a command timeout in acquire. The line's
     * place (none for a request that is not at its head) is left as
     * acquire leaves it after a failure. */
    finish(inst, pl, true);
    struct dlock_grant unused = { 0 };
    line_attempt_end(inst, lk, &unused, DLOCK_EUNAVAILABLE);
}

/* Takes an idle connection and a place among the native round trips
 * (DLOCK_OK), or answers DLOCK_ENOTSUP: the blocking call connects or
 * waits for a connection on a worker. */
static int take_connection(struct pg_instance *inst, struct pg_lock *pl)
{
    if (pg_pool_take_idle(&inst->pool, &pl->native_conn) != DLOCK_OK)
        return DLOCK_ENOTSUP;
    if (!native_room_try_take(&inst->native_in_flight, inst->pool.pool.max)) {
        pg_pool_put(&inst->pool, pl->native_conn);
        pl->native_conn = NULL;
        return DLOCK_ENOTSUP;
    }
    return DLOCK_OK;
}

/* Whether lk's release can go without a thread: lease mode, and the line
 * either not held (out of it, no connection) or held at its head with
 * nothing unanswered (an exclusive hold that came through it keeps the
 * gate, which the release passes on once the row is freed). */
static bool release_native(const struct pg_instance *inst, const struct pg_lock *pl)
{
    if (inst->head.mode != &pg_lease_mode)
        return false;
    if (pl->line.place.state == LINE_OUT)
        return !pl->line.conn;
    return pl->line.place.state == LINE_HEAD && pl->line.conn && !pl->line.answer_pending;
}

int pg_release_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (!release_native(inst, pl) || take_connection(inst, pl) != DLOCK_OK)
        return DLOCK_ENOTSUP;
    pl->release_sent_before = false;
    pl->native_step = STEP_RELEASE;
    const char *values[3] = { pl->k.key, lk->owner, pl->k.tag };
    int lengths[3] = { (int)pl->k.key_len, 0, 0 }, formats[3] = { 1, 0, 0 };
    int statement = kind_is_shared(lk) ? PG_SHARED_RELEASE : PG_RELEASE;
    if (!pg_send_prepared_now(pl->native_conn, statement, 3, values, lengths, formats)) {
        finish(inst, pl, true); /* release sends it on a fresh one */
        return DLOCK_ENOTSUP;
    }
    io->fd = PQsocket(pl->native_conn);
    /* The release's statement, then the gate's, each bounded by the
     * command timeout in the blocking release. */
    io->timeout_ms = (pl->line.conn ? 2 : 1) * inst->server.command_timeout_ms;
    io->priv = pl;
    return DLOCK_OK;
}

/* The gate passed on after the row was freed: its answer, read here. */
static int passing_the_gate(struct pg_instance *inst, struct pg_lock *pl, struct dlock_provider_io *io)
{
    if (pg_line_pass_recv(&inst->listeners, &pl->line) > 0)
        return DLOCK_PROVIDER_AGAIN;
    /* Passed, or the connection closed, which frees the gate as well. */
    io->priv = NULL;
    pl->native_step = STEP_NONE;
    return pl->native_release_rc;
}

int pg_release_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    if (pl->native_step == STEP_PASS)
        return passing_the_gate(inst, pl, io);
    int r = pg_read_answer(pl->native_conn, &pl->native_answer);
    if (r > 0)
        return DLOCK_PROVIDER_AGAIN;
    io->priv = NULL;
    if (r < 0) {
        /* The connection failed with the release in flight: release sends
         * it again (and passes the gate on), and a hold it then finds gone
         * is this one's work. */
        finish(inst, pl, true);
        pl->release_sent_before = true;
        return DLOCK_ENOTSUP;
    }
    PGresult *res = pl->native_answer;
    pl->native_answer = NULL;
    bool unprepared = not_prepared(res);
    int rc = unprepared ? DLOCK_ENOTSUP : pg_answer_release(inst, res, false);
    PQclear(res);
    finish(inst, pl, false);
    /* After the release, as pg_release: the next waiter's look finds the
     * lock free. Also when the hold was gone: the gate goes anyway. */
    if (rc != DLOCK_ENOTSUP && pg_line_pass_send(&inst->listeners, &pl->line)) {
        pl->native_step = STEP_PASS;
        pl->native_release_rc = rc;
        io->fd = PQsocket(pl->line.conn);
        io->priv = pl;
        return DLOCK_PROVIDER_AGAIN;
    }
    return rc;
}

void pg_release_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct pg_instance *inst = instance;
    struct pg_lock *pl = lk->priv;
    io->priv = NULL;
    if (pl->native_step == STEP_PASS) {
        pl->native_step = STEP_NONE;
        pg_line_pass_drop(&inst->listeners, &pl->line); /* closing the session frees the gate */
    } else if (pl->native_conn) {
        finish(inst, pl, true); /* closed: an answer may still come on it */
    }
}
