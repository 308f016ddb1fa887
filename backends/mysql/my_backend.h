/* backends/mysql/my_backend.h - what the files of the mysql module share:
 * the instance and the per-lock state, its two modes, and the
 * statement parameters' constructors.
 *
 * A mode (mysql.mode: lease in my_lease.c, session in my_session.c) is how
 * a hold is kept on the server; it is chosen once, at open. mysql.c
 * dispatches the provider's members to it, and keeps what the two modes
 * share: the waiting line, the per-lock names, open and close. */
#ifndef DLOCK_MY_BACKEND_H
#define DLOCK_MY_BACKEND_H

#include "../common/sql_mode.h"
#include "../common/sql_text.h"
#include "my_conn.h"
#include "my_line.h"
#include "my_sql.h"
#include "my_wanted.h"

#include <dlock/provider.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

_Static_assert(MY_STATEMENT_COUNT <= MY_MAX_STATEMENTS, "raise MY_MAX_STATEMENTS");

struct my_instance {
    struct sql_instance_head head; /* first: the mode, chosen at open, and the label */
    struct my_server server;
    struct my_sql sql;
    struct my_pool pool;
    struct my_pool waiters;      /* session mode: connections that wait in the server's line */
    struct my_conn *holder;
    void *log_handle;
    bool no_batch;               /* the server cannot run MY_RENEW_BATCH (no JSON_TABLE) */
    bool no_waker;               /* lease mode, the table has no waker column (create_table off): waiters back off */
    bool kill_denied_told;       /* the warning that KILL QUERY is refused was logged */
    int native_in_flight;        /* connections carrying attempts sent without a thread (my_native.c) */
    struct my_wanted *wanted;    /* the poller of names whose holds may be kept (my_wanted.c) */
};

struct my_lock {
    struct sql_lock_key k;       /* the row's name; k.tag the session-mode GET_LOCK name */
    uint64_t generation;         /* session mode: holder connection of the hold */
    bool writer_registered;      /* an exclusive request kept waiting said so in the row */
    struct my_line line;         /* the place in the name's line while waiting */
    bool writers_turn;           /* a shared request's last look was busy only for a waiting writer */
    struct my_conn *native_conn; /* an attempt in flight without a thread (my_native.c), else NULL */
    int native_step;             /* which statement of it is in flight */
    int64_t native_hint_ms;      /* its busy answer's retry hint, while the registration is in flight */
    bool native_ready;           /* its statement was answered as it was sent: native_rc, native_outcome */
    int native_rc;
    struct my_outcome native_outcome;
    int ready_fd;                /* eventfd + 1 that says so to the core, once made */
    struct my_wanted_watch *watch; /* between watch_wanted and unwatch_wanted (lock caching), else NULL */
};
/* sql_renew_batch_init reads the key at the start of each lock's state. */
_Static_assert(offsetof(struct my_lock, k) == 0, "the sql_lock_key comes first");

/* The two modes (see sql_mode.h). In lease mode the head of the line arms
 * the row and sleeps in the server until the holder's lease would end; in
 * session mode it waits in GET_LOCK for the holder's connection to let go. */
extern const struct sql_mode my_lease_mode;
extern const struct sql_mode my_session_mode;

static inline struct my_param my_bytes(const void *p, size_t len)
{
    return (struct my_param){ .bytes = p, .len = (unsigned long)len };
}

static inline struct my_param my_integer(long long v)
{
    return (struct my_param){ .value = v };
}

/* The row's owner for a shared or permit request ("~s", "~p<N>"), into
 * kind; returns the permits (0 for shared). */
unsigned my_kind_of(const struct dlock_provider_lock *lk, char *kind, size_t size);

/* A statement took a waiter's connection id out of the row (id; 0: none):
 * ends its sleep in the server with KILL QUERY. Best effort (my_lease.c). */
void my_wake_waker(struct my_instance *inst, uint64_t id);

/* True when a batch statement failed because the server lacks JSON_TABLE
 * (before MariaDB 10.6 / MySQL 8.0.4): renewals go one by one from now on
 * (inst->no_batch is set, and the change logged). Both modes' batches. */
bool my_batch_refused(struct my_instance *inst, const struct my_outcome *o);

/* Makes sure the table exists (creating it when create is set) and has
 * the columns of shared holds and, for a mode that arms rows, the waker
 * column; sets inst->head.no_shared_columns and inst->no_waker (my_schema.c). */
int my_prepare_schema(struct my_instance *inst, bool create);

/* Lease mode's exclusive attempt, shared by the pool (my_lease.c) and the
 * attempts sent without a thread (my_native.c): MY_ACQUIRE's parameters,
 * the reading of its outcome (DLOCK_OK with *g filled, DLOCK_EBUSY with
 * g->retry_hint_ms, or DLOCK_EPROTOCOL), and MY_REGISTER_WRITER's
 * parameters. The parameters point into lk's state. */
void my_acquire_params(const struct dlock_provider_lock *lk, struct my_param p[3]);
int my_answer_acquire(struct my_instance *inst, struct dlock_provider_lock *lk, const struct my_outcome *o,
                      struct dlock_grant *g);
void my_writer_params(const struct dlock_provider_lock *lk, struct my_param p[4]);

/* An attempt's statements without a thread, for the non-blocking API
 * (my_native.c): the provider's acquire_send, acquire_recv and
 * acquire_drop (dlock_provider(3)). */
int my_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int my_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                    struct dlock_grant *g);
void my_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
/* Closes what the lock's attempts without a thread kept (lock_fini). */
void my_native_forget(struct my_lock *ml);

/* Elections (my_election.c): lease mode's value_put and leader_get. */
int my_lease_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len);
int my_lease_leader_get(void *instance, const struct sql_lock_key *k, struct dlock_provider_leader *out);

#endif
