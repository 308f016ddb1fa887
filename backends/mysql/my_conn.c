/* backends/mysql/my_conn.c - see my_conn.h. */
#include "config.h"

#include "my_conn.h"

#include <errmsg.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- settings --------------------------------------------------------------------- */

static int copy_setting(const dlock_settings *s, const char *name, char *dst, size_t size, const char *fallback)
{
    const char *v = fallback;
    dlock_settings_string(s, name, &v);
    if (strlen(v) >= size)
        return dlock_seterr(DLOCK_ECONFIG, "%s: mysql.%s is longer than %zu bytes", dlock_settings_where(s, name),
                            name, size - 1);
    snprintf(dst, size, "%s", v);
    return DLOCK_OK;
}

int my_server_from_settings(struct my_server *srv, const dlock_settings *s)
{
    memset(srv, 0, sizeof *srv);
    int64_t port = 3306;
    dlock_settings_int(s, "port", &port);
    srv->port = (unsigned)port;
    srv->connect_timeout_ms = 2000;
    srv->command_timeout_ms = 2000;
    dlock_settings_int(s, "connect_timeout_ms", &srv->connect_timeout_ms);
    dlock_settings_int(s, "command_timeout_ms", &srv->command_timeout_ms);
    int rc = copy_setting(s, "host", srv->host, sizeof srv->host, "127.0.0.1");
    if (rc == DLOCK_OK)
        rc = copy_setting(s, "socket", srv->socket, sizeof srv->socket, "");
    if (rc == DLOCK_OK)
        rc = copy_setting(s, "user", srv->user, sizeof srv->user, "root");
    if (rc == DLOCK_OK)
        rc = copy_setting(s, "password", srv->password, sizeof srv->password, "");
    if (rc == DLOCK_OK)
        rc = copy_setting(s, "database", srv->database, sizeof srv->database, "");
    if (rc == DLOCK_OK && !srv->database[0])
        rc = dlock_seterr(DLOCK_ECONFIG, "%s: mysql.database is required (the database that holds the lock table)",
                          dlock_settings_where(s, NULL));
    if (srv->socket[0])
        snprintf(srv->label, sizeof srv->label, "mysql unix:%s/%s", srv->socket, srv->database);
    else
        snprintf(srv->label, sizeof srv->label, "mysql %s:%u/%s", srv->host, srv->port, srv->database);
    return rc;
}

/* ---- connections ---------------------------------------------------------------------- */

/* A connection is broken once a client-side error dropped its handle. */
bool my_conn_broken(const struct my_conn *c)
{
    return !c || !c->db;
}

void my_conn_close(struct my_conn *c)
{
    if (!c)
        return;
    for (int i = 0; i < MY_MAX_STATEMENTS; i++)
        if (c->stmt[i])
            mysql_stmt_close(c->stmt[i]);
    if (c->db)
        mysql_close(c->db);
    free(c);
}

/* A client-side error (2000-2999: connection refused, gone, lost, timed
 * out) leaves the connection unusable; a server error does not. */
static bool is_client_error(unsigned err)
{
    return err >= 2000 && err < 3000;
}

/* Wrong credentials, database, table or privileges: the configuration's to fix. */
static bool is_config_error(unsigned err)
{
    return err == ER_ACCESS_DENIED_ERROR || err == ER_DBACCESS_DENIED_ERROR || err == ER_BAD_DB_ERROR ||
           err == ER_NO_SUCH_TABLE || err == ER_TABLEACCESS_DENIED_ERROR || err == ER_COLUMNACCESS_DENIED_ERROR ||
           err == ER_SPECIFIC_ACCESS_DENIED_ERROR;
}

static int fail(const struct my_server *srv, struct my_conn *c, unsigned err, const char *msg, const char *what)
{
    int code = is_config_error(err) ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE;
    int rc = dlock_seterr(code, "%s: %s: %s (error %u)", srv->label, what, msg, err);
    if (c)
        c->last_errno = err;
    if (is_client_error(err) && c && c->db) {
        for (int i = 0; i < MY_MAX_STATEMENTS; i++)
            if (c->stmt[i]) {
                mysql_stmt_close(c->stmt[i]);
                c->stmt[i] = NULL;
            }
        mysql_close(c->db);
        c->db = NULL;
    }
    return rc;
}

static unsigned seconds_of(int64_t ms)
{
    return (unsigned)((ms + 999) / 1000);
}

struct my_conn *my_connect(const struct my_server *srv, int *rc)
{
    struct my_conn *c = calloc(1, sizeof *c);
    MYSQL *db = c ? mysql_init(NULL) : NULL;
    if (!db) {
        free(c);
        *rc = dlock_seterr(DLOCK_ENOMEM, "%s: out of memory", srv->label);
        return NULL;
    }
    c->db = db;
    /* libmariadb takes whole seconds; the command timeout bounds each read
     * and write, so a stopped server cannot hang a caller. */
    unsigned connect_s = seconds_of(srv->connect_timeout_ms), io_s = seconds_of(srv->command_timeout_ms);
    mysql_optionsv(db, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    mysql_optionsv(db, MYSQL_OPT_READ_TIMEOUT, &io_s);
    mysql_optionsv(db, MYSQL_OPT_WRITE_TIMEOUT, &io_s);
    mysql_optionsv(db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    /* The client's non-blocking calls (my_exec_start) on the same
     * connections as its blocking ones, which work as before. */
    mysql_options(db, MYSQL_OPT_NONBLOCK, 0);
    /* Found rows, not changed rows: a renewal within the same millisecond
     * changes nothing and must still count as ours. */
    if (!mysql_real_connect(db, srv->socket[0] ? NULL : srv->host, srv->user, srv->password, srv->database,
                            srv->port, srv->socket[0] ? srv->socket : NULL, CLIENT_FOUND_ROWS)) {
        *rc = fail(srv, c, mysql_errno(db), mysql_error(db), "cannot connect");
        my_conn_close(c);
        return NULL;
    }
    /* Times are compared on the server as UTC milliseconds: no time zone
     * or daylight-saving change can shift a lease. */
    if (mysql_query(db, "SET time_zone = '+00:00'") != 0) {
        *rc = fail(srv, c, mysql_errno(db), mysql_error(db), "SET time_zone");
        my_conn_close(c);
        return NULL;
    }
    if (srv->wait_timeout_s > 0) {
        char sql[64];
        snprintf(sql, sizeof sql, "SET SESSION wait_timeout = %lld", (long long)srv->wait_timeout_s);
        if (mysql_query(db, sql) != 0) {
            *rc = fail(srv, c, mysql_errno(db), mysql_error(db), "SET wait_timeout");
            my_conn_close(c);
            return NULL;
        }
    }
    *rc = DLOCK_OK;
    return c;
}

static int prepare(const struct my_server *srv, struct my_conn *c, int which)
{
    if (c->stmt[which])
        return DLOCK_OK;
    MYSQL_STMT *st = mysql_stmt_init(c->db);
    if (!st)
        return dlock_seterr(DLOCK_ENOMEM, "%s: out of memory", srv->label);
    const char *sql = srv->statements[which];
    if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0) {
        unsigned err = mysql_stmt_errno(st);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mysql_stmt_error(st));
        mysql_stmt_close(st);
        return fail(srv, c, err, msg, "prepare");
    }
    c->stmt[which] = st;
    return DLOCK_OK;
}

/* Binds params (n <= MY_MAX_PARAMS) to st; integers are kept in c until
 * the statement is sent. False when the client refused them. */
static bool bind_params(struct my_conn *c, MYSQL_STMT *st, const struct my_param *params, int n)
{
    MYSQL_BIND bind[MY_MAX_PARAMS];
    memset(bind, 0, sizeof bind);
    for (int i = 0; i < n; i++) {
        if (params[i].bytes) {
            bind[i].buffer_type = MYSQL_TYPE_BLOB;
            bind[i].buffer = (void *)params[i].bytes;
            bind[i].buffer_length = params[i].len;
        } else {
            c->values[i] = params[i].value;
            bind[i].buffer_type = MYSQL_TYPE_LONGLONG;
            bind[i].buffer = &c->values[i];
        }
    }
    return n == 0 || mysql_stmt_bind_param(st, bind) == 0;
}

/* The end of a statement sent without waiting (my_exec_start): the
 * outcome of a statement without rows, or its failure as run reports it. */
static int exec_outcome(const struct my_server *srv, struct my_conn *c, MYSQL_STMT *st, int err,
                        struct my_outcome *out)
{
    memset(out, 0, sizeof *out);
    if (err == 0) {
        out->affected = mysql_stmt_affected_rows(st);
        out->insert_id = mysql_stmt_insert_id(st);
        return DLOCK_OK;
    }
    unsigned e = mysql_stmt_errno(st);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mysql_stmt_error(st));
    out->server_errno = e;
    return fail(srv, c, e, msg, "statement failed");
}

/* What a non-blocking step's status means here: the client waits to read
 * (the answer has not come), or is done (err set), or waits to write,
 * which this use (requests far smaller than a socket's buffer) does not
 * expect and treats as a failure. */
static enum my_async step_result(struct my_conn *c, MYSQL_STMT *st, int status, int err,
                                 const struct my_server *srv, struct my_outcome *out, int *rc)
{
    if (status == 0) {
        *rc = exec_outcome(srv, c, st, err, out);
        return MY_ASYNC_DONE;
    }
    if (status & MYSQL_WAIT_WRITE) {
        *rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: a statement could not be written at once", srv->label);
        return MY_ASYNC_FAILED;
    }
    return MY_ASYNC_WAIT;
}

enum my_async my_exec_start(const struct my_server *srv, struct my_conn *c, int which, const struct my_param *params,
                            int n, struct my_outcome *out, int *rc)
{
    *rc = DLOCK_OK;
    MYSQL_STMT *st = my_conn_broken(c) || n > MY_MAX_PARAMS ? NULL : c->stmt[which];
    if (!st || !bind_params(c, st, params, n)) {
        *rc = dlock_seterr(DLOCK_ENOTSUP, "%s: the statement is not prepared on this connection", srv->label);
        return MY_ASYNC_FAILED;
    }
    int err = 0;
    int status = mysql_stmt_execute_start(&err, st);
    return step_result(c, st, status, err, srv, out, rc);
}

enum my_async my_exec_cont(const struct my_server *srv, struct my_conn *c, int which, struct my_outcome *out, int *rc)
{
    *rc = DLOCK_OK;
    MYSQL_STMT *st = c->stmt[which];
    int err = 0;
    int status = mysql_stmt_execute_cont(&err, st, MYSQL_WAIT_READ);
    return step_result(c, st, status, err, srv, out, rc);
}

/* my_run, with the string column into blob (blob_cap bytes) when blob is
 * not NULL, its length in out->blob_len. */
static int run(const struct my_server *srv, struct my_conn *c, int which, const struct my_param *params, int n,
               int text_column, char *blob, unsigned long blob_cap, struct my_outcome *out)
{
    memset(out, 0, sizeof *out);
    c->last_errno = 0;
    if (my_conn_broken(c))
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: connection lost", srv->label);
    int rc = prepare(srv, c, which);
    if (rc != DLOCK_OK)
        return rc;
    MYSQL_STMT *st = c->stmt[which];
    if (n > MY_MAX_PARAMS)
        return dlock_seterr(DLOCK_EINTERNAL, "%s: a statement with %d parameters (at most %d)", srv->label, n,
                            MY_MAX_PARAMS);
    if (!bind_params(c, st, params, n) || mysql_stmt_execute(st) != 0)
        goto stmt_error;
    MYSQL_RES *meta = mysql_stmt_result_metadata(st);
    if (!meta) {
        out->affected = mysql_stmt_affected_rows(st);
        out->insert_id = mysql_stmt_insert_id(st);
        return DLOCK_OK;
    }
    unsigned columns = mysql_num_fields(meta);
    mysql_free_result(meta);
    MYSQL_BIND result[4];
    memset(result, 0, sizeof result);
    unsigned long text_len = 0;
    my_bool nulls[4] = { 0 };
    for (unsigned i = 0; i < columns && i < 4; i++) {
        if ((int)i == text_column && blob) {
            result[i].buffer_type = MYSQL_TYPE_BLOB;
            result[i].buffer = blob;
            result[i].buffer_length = blob_cap;
            result[i].length = &out->blob_len;
        } else if ((int)i == text_column) {
            result[i].buffer_type = MYSQL_TYPE_STRING;
            result[i].buffer = out->text;
            result[i].buffer_length = sizeof out->text - 1;
            result[i].length = &text_len;
        } else {
            result[i].buffer_type = MYSQL_TYPE_LONGLONG;
            result[i].buffer = &out->ints[i];
        }
        result[i].is_null = &nulls[i];
    }
    if (mysql_stmt_bind_result(st, result) != 0 || mysql_stmt_store_result(st) != 0)
        goto stmt_error;
    int f = mysql_stmt_fetch(st);
    if (f == 0 || f == MYSQL_DATA_TRUNCATED) {
        out->has_row = true;
        if (text_len >= sizeof out->text)
            text_len = sizeof out->text - 1;
        out->text[text_len] = '\0';
        for (int i = 0; i < 4; i++)
            out->nulls[i] = nulls[i] != 0;
    } else if (f == 1) {
        goto stmt_error;
    }
    mysql_stmt_free_result(st);
    return DLOCK_OK;

stmt_error:;
    unsigned err = mysql_stmt_errno(st);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mysql_stmt_error(st));
    mysql_stmt_free_result(st);
    return fail(srv, c, err, msg, "statement failed");
}

int my_query_rows(const struct my_server *srv, struct my_conn *c, const char *sql, MYSQL_RES **out)
{
    *out = NULL;
    c->last_errno = 0;
    if (my_conn_broken(c))
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s: connection lost", srv->label);
    if (mysql_real_query(c->db, sql, strlen(sql)) != 0 || !(*out = mysql_store_result(c->db))) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mysql_error(c->db));
        return fail(srv, c, mysql_errno(c->db), msg, "query failed");
    }
    return DLOCK_OK;
}

/* ---- the pool ------------------------------------------------------------------------- */

static void *pool_connect(void *arg, int *rc)
{
    return my_connect(arg, rc);
}

static bool pool_reusable(void *conn)
{
    return !my_conn_broken(conn);
}

static void pool_close(void *conn)
{
    my_conn_close(conn);
}

static const struct conn_pool_ops my_pool_ops = { pool_connect, pool_reusable, pool_close };

void my_pool_init(struct my_pool *pool, const struct my_server *srv, int max)
{
    pool->server = srv;
    conn_pool_init(&pool->pool, &my_pool_ops, (void *)srv, max);
}

void my_pool_destroy(struct my_pool *pool)
{
    conn_pool_destroy(&pool->pool);
}

int my_pool_get(struct my_pool *pool, struct my_conn **out)
{
    void *conn = NULL;
    int rc = conn_pool_get(&pool->pool, &conn, NULL);
    *out = conn;
    return rc;
}

int my_pool_take_idle(struct my_pool *pool, struct my_conn **out)
{
    void *conn = NULL;
    int rc = conn_pool_take_idle(&pool->pool, &conn);
    *out = conn;
    return rc;
}

int my_pool_try_get(struct my_pool *pool, struct my_conn **out)
{
    void *conn = NULL;
    int rc = conn_pool_try_get(&pool->pool, &conn);
    *out = conn;
    return rc;
}

void my_pool_put(struct my_pool *pool, struct my_conn *c)
{
    conn_pool_put(&pool->pool, c);
}

static __thread bool last_run_resent;

bool my_pool_last_resent(void)
{
    return last_run_resent;
}

int my_run(const struct my_server *srv, struct my_conn *c, int which, const struct my_param *params, int n,
           int text_column, struct my_outcome *out)
{
    return run(srv, c, which, params, n, text_column, NULL, 0, out);
}

static int pool_run(struct my_pool *pool, int which, const struct my_param *params, int n, int text_column,
                    char *blob, unsigned long blob_cap, struct my_outcome *out)
{
    int rc = DLOCK_EUNAVAILABLE;
    last_run_resent = false;
    for (int attempt = 0; attempt < 2; attempt++) {
        last_run_resent = attempt > 0; /* the first may have run before its connection died */
        void *c = NULL;
        bool was_idle;
        if ((rc = conn_pool_get(&pool->pool, &c, &was_idle)) != DLOCK_OK)
            return rc;
        int64_t t0 = dlock_provider_now_ms();
        rc = run(pool->server, c, which, params, n, text_column, blob, blob_cap, out);
        if (rc != DLOCK_OK)
            out->server_errno = ((struct my_conn *)c)->last_errno;
        bool broken = my_conn_broken(c);
        conn_pool_put(&pool->pool, c);
        /* Only an idle connection that died at once (the server restarted
         * or dropped it) earns a second try; a timeout does not. */
        if (rc == DLOCK_OK || !broken || !was_idle || dlock_provider_now_ms() - t0 >= pool->server->command_timeout_ms)
            break;
    }
    return rc;
}

int my_pool_run(struct my_pool *pool, int which, const struct my_param *params, int n, int text_column,
                struct my_outcome *out)
{
    return pool_run(pool, which, params, n, text_column, NULL, 0, out);
}

int my_pool_run_blob(struct my_pool *pool, int which, const struct my_param *params, int n, int blob_column,
                     char *blob, unsigned long blob_cap, struct my_outcome *out)
{
    return pool_run(pool, which, params, n, blob_column, blob, blob_cap, out);
}
