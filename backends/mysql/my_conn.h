/* backends/mysql/my_conn.h - connections to one MySQL or MariaDB server
 * (over libmariadb): settings, connect with timeouts, UTC session time,
 * statements prepared once per connection and run with bound parameters,
 * and a small thread-safe pool with reconnection backoff. */
#ifndef DLOCK_MY_CONN_H
#define DLOCK_MY_CONN_H

#include "../common/conn_pool.h"

#include <dlock/provider.h>
#include <mysql.h>
#include <pthread.h>
#include <stdbool.h>

#define MY_POOL_MAX CONN_POOL_MAX
#define MY_MAX_STATEMENTS 32
#define MY_MAX_PARAMS 16            /* bound parameters of one statement */

struct my_server {
    char host[256];
    unsigned port;
    char socket[256];           /* used instead of host:port when set */
    char user[128];
    char password[256];
    char database[128];
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    int64_t wait_timeout_s;     /* > 0: SET SESSION wait_timeout on every connection */
    const char *statements[MY_MAX_STATEMENTS]; /* SQL of each statement id; set by the caller */
    char label[300];            /* "mysql 127.0.0.1:3306/db", for messages */
};

/* Reads host, port, socket, user, password, database and the timeouts. */
int my_server_from_settings(struct my_server *srv, const dlock_settings *s);

struct my_conn {
    MYSQL *db;
    MYSQL_STMT *stmt[MY_MAX_STATEMENTS]; /* prepared on first use */
    unsigned last_errno;        /* of the last failure, 0 if none */
    bool untimed;               /* a waiter's: the server's statement time limit is off */
    long long values[MY_MAX_PARAMS]; /* integer parameters, until the statement is sent */
};

/* Opens one connection. NULL on failure with the detail set and *rc the code. */
struct my_conn *my_connect(const struct my_server *srv, int *rc);
void my_conn_close(struct my_conn *c);

/* One parameter: an integer, or bytes (text or binary). */
struct my_param {
    const void *bytes;          /* NULL: an integer */
    unsigned long len;
    long long value;
};

/* What a statement answered: rows affected (found, for UPDATE), the
 * LAST_INSERT_ID the statement set, and for a query its first row. */
struct my_outcome {
    uint64_t affected;
    uint64_t insert_id;
    bool has_row;
    long long ints[4];          /* integer columns of the first row */
    bool nulls[4];
    char text[128];             /* the first row's string column, if asked */
    unsigned long blob_len;     /* my_pool_run_blob: the bytes its column had */
    unsigned server_errno;      /* on failure: the server's (or client's) error number, else 0 */
};

/* Runs statement `which` with params on c. For a query, the first row's
 * columns are read into out: column text_column (or -1) as text, the
 * others as integers. DLOCK_OK, or a failure; a connection that failed is
 * marked broken (my_conn_broken) and should be closed. */
int my_run(const struct my_server *srv, struct my_conn *c, int which, const struct my_param *params, int n,
           int text_column, struct my_outcome *out);

/* Runs sql (text: only for statements whose values are written as hex
 * literals or numbers, never user strings) and stores its rows in *out
 * (mysql_free_result it). DLOCK_OK, or a failure as my_run reports it. */
int my_query_rows(const struct my_server *srv, struct my_conn *c, const char *sql, MYSQL_RES **out);

/* A statement sent without waiting (MariaDB's non-blocking calls): the
 * client waits for the answer (MY_ASYNC_WAIT: poll the connection's
 * socket, mysql_get_socket, for input, then call my_exec_cont), or is done
 * (MY_ASYNC_DONE: *rc and *out as my_run reports a statement without
 * rows), or nothing could be sent as asked (MY_ASYNC_FAILED: *rc;
 * DLOCK_ENOTSUP when the statement is not prepared on c, and nothing
 * ran). Only for statements without rows (INSERT, UPDATE). */
enum my_async { MY_ASYNC_WAIT, MY_ASYNC_DONE, MY_ASYNC_FAILED };
enum my_async my_exec_start(const struct my_server *srv, struct my_conn *c, int which, const struct my_param *params,
                            int n, struct my_outcome *out, int *rc);
enum my_async my_exec_cont(const struct my_server *srv, struct my_conn *c, int which, struct my_outcome *out, int *rc);

/* True when the connection can no longer be used. */
bool my_conn_broken(const struct my_conn *c);

/* Connections for lock statements (common/conn_pool.h, with libmariadb's). */
struct my_pool {
    const struct my_server *server;
    struct conn_pool pool;
};

void my_pool_init(struct my_pool *pool, const struct my_server *srv, int max);
void my_pool_destroy(struct my_pool *pool);
int my_pool_get(struct my_pool *pool, struct my_conn **out);
void my_pool_put(struct my_pool *pool, struct my_conn *c);
/* An idle connection, or DLOCK_EBUSY at once: never connects or waits. */
int my_pool_take_idle(struct my_pool *pool, struct my_conn **out);
/* As my_pool_get, but DLOCK_EBUSY at once when every connection is in use. */
int my_pool_try_get(struct my_pool *pool, struct my_conn **out);

/* my_run on a pooled connection; an idle connection found dead is replaced
 * and the statement sent once more. */
int my_pool_run(struct my_pool *pool, int which, const struct my_param *params, int n, int text_column,
                struct my_outcome *out);
/* my_pool_run, with column blob_column read as bytes into blob (blob_cap
 * bytes; a longer value is cut), its length in out->blob_len. */
int my_pool_run_blob(struct my_pool *pool, int which, const struct my_param *params, int n, int blob_column,
                     char *blob, unsigned long blob_cap, struct my_outcome *out);
/* True when the calling thread's last my_pool_run sent its statement a
 * second time after the connection died under the first, which may have
 * run: a release that then finds the hold gone did it. */
bool my_pool_last_resent(void);


#endif
