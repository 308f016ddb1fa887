/* backends/postgres/pg_backend.h - what the files of the postgres module
 * share: the instance and the per-lock state, and its two modes.
 *
 * A mode (postgres.mode: lease in pg_lease.c, session in pg_session.c) is
 * how a hold is kept on the server; it is chosen once, at open, as SQLite's
 * unix VFS picks one locking method table per file. postgres.c dispatches
 * the provider's members to it, and keeps what the two modes share: the
 * waiting (LISTEN and the line), the per-lock names, open and close. */
#ifndef DLOCK_PG_BACKEND_H
#define DLOCK_PG_BACKEND_H

#include "../common/sql_mode.h"
#include "../common/sql_text.h"
#include "pg_conn.h"
#include "pg_line.h"
#include "pg_sql.h"
#include "pg_wanted.h"

#include <dlock/provider.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <string.h>

_Static_assert(PG_STATEMENT_COUNT <= PG_MAX_STATEMENTS, "raise PG_MAX_STATEMENTS");

struct pg_instance {
    struct sql_instance_head head; /* first: the mode, chosen at open, and the label */
    struct pg_server server;
    struct pg_sql sql;
    struct pg_pool pool;         /* lease-mode statements, status */
    struct pg_pool listeners;    /* connections that LISTEN while a lock is waited for */
    struct pg_wanted *wanted;    /* the listener of names whose holds may be kept (pg_wanted.c) */
    void (*tell_wanted)(struct dlock_provider_lock *lk); /* env->wanted */
    PGconn *holder;
    void *log_handle;
    int native_in_flight;        /* connections carrying attempts sent without a thread (pg_native.c) */
};

struct pg_lock {
    struct sql_lock_key k;       /* the row's name; k.tag is the NOTIFY channel */
    char advisory[24];           /* the session-mode key (k.digest), as decimal text */
    PGconn *listener;            /* a shared request's, while LISTENing on channel */
    struct pg_line line;         /* an exclusive or permit request's place in the line */
    bool last_busy;              /* the last attempt found the lock held */
    bool writer_registered;      /* an exclusive request kept waiting said so in the row */
    uint64_t generation;         /* session mode: holder connection the hold was taken on */
    PGconn *native_conn;         /* an attempt in flight without a thread (pg_native.c), else NULL */
    PGresult *native_answer;     /* its statement's answer, while the rest of it is read */
    int native_step;             /* which statement of the attempt is in flight */
    int64_t native_hint_ms;      /* its busy answer's retry hint, while the registration is in flight */
    bool release_sent_before;    /* a release went out on a connection that died with it (pg_native.c) */
    int native_release_rc;       /* a release's result, while the gate is passed on after it */
    bool watched;                /* between watch_wanted and unwatch_wanted (lock caching) */
};
/* sql_renew_batch_init reads the key at the start of each lock's state. */
_Static_assert(offsetof(struct pg_lock, k) == 0, "the sql_lock_key comes first");

/* The two modes (see sql_mode.h). */
extern const struct sql_mode pg_lease_mode;
extern const struct sql_mode pg_session_mode;

/* The parameters of lease mode's acquire statements: key, owner, lease
 * (exclusive: n = 3), then kind and permits, then the name's wanted
 * channel (shared holds and permits: n = 6). PG_ACQUIRE takes the wanted
 * channel as its fourth (n_acquire = 4): its busy answer notifies a
 * client that keeps the name (pg_wanted.h). Points into lk's state,
 * which must outlive it. */
struct pg_attempt_args {
    char lease[24], kind[16], permits[16], wanted[32];
    const char *values[6];
    int lengths[6], formats[6];
    int n, n_acquire;
};

/* The channel a request that finds lk's name held notifies: the name's
 * NOTIFY channel with a 'w' after it. */
void pg_wanted_channel(const struct dlock_provider_lock *lk, char out[32]);
void pg_attempt_args(struct pg_attempt_args *a, const struct dlock_provider_lock *lk);

/* Lease mode's answers, read the same way whether the statement went
 * through the pool (pg_lease.c) or without a thread (pg_native.c):
 * pg_answer_take, to PG_TAKE: DLOCK_OK with *taken and *g filled, DLOCK_OK
 * without *taken (held, or no row yet), or the failure;
 * pg_answer_acquire, to PG_ACQUIRE: DLOCK_OK (*g filled), DLOCK_EBUSY
 * (g->retry_hint_ms), or the failure; pg_answer_shared, to
 * PG_SHARED_ACQUIRE with a's kind: the same, or the kind's mismatch;
 * pg_answer_register_writer, to PG_REGISTER_WRITER. None of them frees res. */
int pg_answer_take(struct pg_instance *inst, struct dlock_provider_lock *lk, const PGresult *res,
                   struct dlock_grant *g, bool *taken);
int pg_answer_acquire(struct pg_instance *inst, struct dlock_provider_lock *lk, const PGresult *res,
                      struct dlock_grant *g);
int pg_answer_shared(struct pg_instance *inst, struct dlock_provider_lock *lk, const struct pg_attempt_args *a,
                     const PGresult *res, struct dlock_grant *g);
void pg_answer_register_writer(struct pg_instance *inst, struct dlock_provider_lock *lk, const PGresult *res);

/* An attempt's or a release's statements without a thread, for the
 * non-blocking API (pg_native.c): the provider's acquire_send,
 * acquire_recv, acquire_drop and their release twins (dlock_provider(3)). */
int pg_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int pg_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                    struct dlock_grant *g);
void pg_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int pg_release_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int pg_release_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
void pg_release_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
/* The release statement's answer: DLOCK_OK, DLOCK_ENOTOWNER (no row of
 * ours), or a failure; sent_before says the release went out before on a
 * connection that died with it, so a hold found gone was its work. */
int pg_answer_release(struct pg_instance *inst, const PGresult *res, bool sent_before);

/* Makes sure the table and its fence sequence exist, creating them (and
 * the columns of shared holds, in a table made before them) when create
 * is set; sets inst->head.no_shared_columns. Both modes need them: session mode
 * draws fences from the sequence (pg_schema.c). */
int pg_prepare_schema(struct pg_instance *inst, bool create);

/* Elections (pg_election.c): lease mode's value_put and leader_get, and
 * the provider's watch_* (LISTEN on the name's channel). */
int pg_lease_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len);
int pg_lease_leader_get(void *instance, const struct sql_lock_key *k, struct dlock_provider_leader *out);
int pg_watch_open(void *instance, const char *name, size_t name_len, void **watch, int *fd);
int pg_watch_consume(void *instance, void *watch);
void pg_watch_close(void *instance, void *watch);

#endif
