/* backends/postgres/pg_conn.h - connections to one PostgreSQL server: the
 * connection settings, a small thread-safe pool with reconnection backoff,
 * and statements bounded by a client-side deadline (libpq's blocking calls
 * would wait forever on a server that stopped answering). */
#ifndef DLOCK_PG_CONN_H
#define DLOCK_PG_CONN_H

#include "../common/conn_pool.h"

#include <dlock/provider.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>

#define PG_POOL_MAX CONN_POOL_MAX
#define PG_MAX_STATEMENTS 32

struct pg_server {
    char *conninfo;             /* what PQconnectdb gets: a key=value string or a URI */
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms; /* client deadline and the server's statement_timeout */
    char label[300];            /* "postgres 127.0.0.1:5432/db", for messages */
    const char *statements[PG_MAX_STATEMENTS]; /* SQL of each prepared statement id */
};

/* Reads conninfo, or host/port/user/password/database, and the timeouts
 * from the backend group. The caller frees with pg_server_free. */
int pg_server_from_settings(struct pg_server *srv, const dlock_settings *s);
void pg_server_free(struct pg_server *srv);

/* Opens one connection: connect, statement_timeout, quiet notices. NULL on
 * failure with the detail set (dlock_seterr) and *rc the code. */
PGconn *pg_connect(const struct pg_server *srv, int *rc);

/* Connections for lock statements (common/conn_pool.h, with libpq's). */
struct pg_pool {
    const struct pg_server *server;
    struct conn_pool pool;
    uint32_t prepared_at_connect; /* statement ids (bits) prepared on each new connection (atomic) */
};

void pg_pool_init(struct pg_pool *pool, const struct pg_server *srv, int max);
void pg_pool_destroy(struct pg_pool *pool);
/* Takes a connection (idle, new, or waits for one to come back). */
int pg_pool_get(struct pg_pool *pool, PGconn **out);
/* As pg_pool_get, but DLOCK_EBUSY at once when every connection is in use. */
int pg_pool_try_get(struct pg_pool *pool, PGconn **out);
/* An idle connection, or DLOCK_EBUSY at once: never connects or waits. */
int pg_pool_take_idle(struct pg_pool *pool, PGconn **out);
/* Gives one back; a connection that is not CONNECTION_OK and idle is closed. */
void pg_pool_put(struct pg_pool *pool, PGconn *conn);
/* From now on prepares the statements whose ids are set in `statements`
 * (bit 1 << id) on every connection the pool opens, and on those idle in
 * it now, in one round trip each (pipeline mode). For statements that are
 * sent without a thread (pg_send_prepared_now), which cannot prepare on
 * demand: a connection where one is not prepared makes the caller send it
 * again, prepared, on a worker. Call it once the tables they name exist;
 * a statement the server refuses is left to be prepared on demand, as
 * before. Thread-safe. */
void pg_pool_prepare_at_connect(struct pg_pool *pool, uint32_t statements);

/* One statement with text parameters (lengths/formats may be NULL: all text;
 * formats[i] = 1 sends parameter i as binary bytes). Waits at most the
 * command timeout; a connection that timed out or broke is closed and
 * *conn set to NULL. Returns the result (PQclear it) when the server
 * answered, even with an SQL error; NULL with *rc set otherwise. */
PGresult *pg_exec(const struct pg_server *srv, PGconn **conn, const char *sql, int n, const char *const *values,
                  const int *lengths, const int *formats, int *rc);

/* Runs prepared statement `which` (srv->statements[which]), preparing it
 * on this connection the first time: the server parses and plans the lock
 * statements once per connection, not once per call. Otherwise as pg_exec. */
PGresult *pg_exec_prepared(const struct pg_server *srv, PGconn **conn, int which, int n, const char *const *values,
                           const int *lengths, const int *formats, int *rc);

/* pg_exec_prepared on a pooled connection. A connection that turns out to be dead
 * before anything was answered (an idle one the server closed) is
 * replaced and the statement sent once more. */
PGresult *pg_pool_exec(struct pg_pool *pool, int which, int n, const char *const *values, const int *lengths,
                       const int *formats, int *rc);
/* True when the calling thread's last pg_pool_exec sent its statement a
 * second time after the connection died under the first, which may have
 * run: a release that then finds the hold gone did it. */
bool pg_pool_last_resent(void);

/* Sends prepared statement `which` (as pg_exec_prepared names it) on conn
 * without waiting: true when the whole request left for the socket. It
 * does not prepare it: a connection where it was never prepared answers
 * SQLSTATE 26000, and nothing ran. */
bool pg_send_prepared_now(PGconn *conn, int which, int n, const char *const *values, const int *lengths,
                          const int *formats);
/* Reads what has come on conn without waiting, towards the answer of the
 * query sent last: 1 when it is not whole yet (*first may hold its first
 * result already: pass it back unchanged), 0 when it is (*first is the
 * result: PQclear it), -1 when the connection broke (PQclear *first). */
int pg_read_answer(PGconn *conn, PGresult **first);

/* DLOCK_OK for a command or rows, else the SQL error as DLOCK_EUNAVAILABLE
 * (or DLOCK_ECONFIG for privilege and missing-object errors), naming what. */
int pg_result_check(const struct pg_server *srv, const PGresult *res, const char *what);

/* Waits until conn's socket is readable, wake_fd is, or timeout_ms passes:
 * 1 socket, 2 wake_fd, 0 timeout, -1 error. */
int pg_wait_socket(PGconn *conn, int wake_fd, int64_t timeout_ms);

/* One step of a wait for what the server sends on conn (a NOTIFY, the
 * answer to a query sent without waiting), until deadline on
 * dlock_provider_now_ms: 1 when input was read into conn (look at it), 0
 * when the wait ends with *rc (DLOCK_ETIMEDOUT at the deadline, DLOCK_OK
 * when wake_fd is readable or poll was interrupted), -1 when the
 * connection broke (PQerrorMessage says why). */
int pg_await_input(PGconn *conn, int wake_fd, int64_t deadline, int *rc);


#endif
