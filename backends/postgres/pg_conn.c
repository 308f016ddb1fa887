/* backends/postgres/pg_conn.c - see pg_conn.h. */
#include "config.h"

#include "pg_conn.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- settings --------------------------------------------------------------- */

/* Appends " key='value'" to a conninfo string, quoting as libpq expects. */
static int append_param(char **buf, size_t *len, const char *key, const char *value)
{
    size_t need = strlen(key) + 2 * strlen(value) + 5;
    char *grown = realloc(*buf, *len + need + 1);
    if (!grown)
        return -1;
    *buf = grown;
    char *p = grown + *len;
    p += sprintf(p, " %s='", key);
    for (const char *v = value; *v; v++) {
        if (*v == '\'' || *v == '\\')
            *p++ = '\\';
        *p++ = *v;
    }
    *p++ = '\'';
    *p = '\0';
    *len = (size_t)(p - grown);
    return 0;
}

int pg_server_from_settings(struct pg_server *srv, const dlock_settings *s)
{
    memset(srv, 0, sizeof *srv);
    srv->connect_timeout_ms = 2000;
    srv->command_timeout_ms = 2000;
    dlock_settings_int(s, "connect_timeout_ms", &srv->connect_timeout_ms);
    dlock_settings_int(s, "command_timeout_ms", &srv->command_timeout_ms);

    static const char *const separate[][2] = {
        { "host", "host" }, { "user", "user" }, { "password", "password" }, { "database", "dbname" },
    };
    const char *conninfo = NULL, *value;
    dlock_settings_string(s, "conninfo", &conninfo);
    int64_t port = 0;
    bool any_separate = dlock_settings_int(s, "port", &port);
    for (size_t i = 0; i < sizeof separate / sizeof separate[0]; i++)
        any_separate |= dlock_settings_string(s, separate[i][0], &value);
    if (conninfo && any_separate)
        return dlock_seterr(DLOCK_ECONFIG, "%s: postgres.conninfo and host/port/user/password/database exclude each "
                            "other: put everything in conninfo or nothing",
                            dlock_settings_where(s, "conninfo"));

    size_t len = 0;
    char *info = calloc(1, 1);
    int bad = !info;
    if (conninfo && !bad) {
        /* Checked now, so a typo is a configuration error with a line. */
        char *err = NULL;
        PQconninfoOption *opts = PQconninfoParse(conninfo, &err);
        if (!opts) {
            /* libpq's reason quotes the text around the fault, which can be
             * a password: it is not repeated. */
            int rc = dlock_seterr(DLOCK_ECONFIG,
                                  "%s: postgres.conninfo is not a valid connection string (libpq's reason is not "
                                  "shown, since it may quote a password): check for a keyword without '=', a value "
                                  "with spaces that is not in single quotes, or an unknown keyword",
                                  dlock_settings_where(s, "conninfo"));
            PQfreemem(err);
            free(info);
            return rc;
        }
        PQconninfoFree(opts);
        free(info);
        info = strdup(conninfo);
        bad = !info;
        len = info ? strlen(info) : 0;
    } else if (!bad) {
        const char *host = "127.0.0.1";
        dlock_settings_string(s, "host", &host);
        char port_text[16];
        snprintf(port_text, sizeof port_text, "%lld", (long long)(port ? port : 5432));
        bad |= append_param(&info, &len, "host", host);
        bad |= append_param(&info, &len, "port", port_text);
        for (size_t i = 1; i < sizeof separate / sizeof separate[0]; i++)
            if (dlock_settings_string(s, separate[i][0], &value))
                bad |= append_param(&info, &len, separate[i][1], value);
    }
    if (!bad)
        bad = append_param(&info, &len, "fallback_application_name", "libdlock");
    if (bad) {
        free(info);
        return dlock_seterr(DLOCK_ENOMEM, "postgres: out of memory");
    }
    srv->conninfo = info;

    /* The label names the server the way the user wrote it, minus secrets. */
    PQconninfoOption *opts = PQconninfoParse(info, NULL);
    const char *h = NULL, *p = NULL, *d = NULL;
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (!o->val)
            continue;
        if (strcmp(o->keyword, "host") == 0 || (!h && strcmp(o->keyword, "hostaddr") == 0))
            h = o->val;
        else if (strcmp(o->keyword, "port") == 0)
            p = o->val;
        else if (strcmp(o->keyword, "dbname") == 0)
            d = o->val;
    }
    snprintf(srv->label, sizeof srv->label, "postgres %s:%s/%s", h ? h : "(default host)", p ? p : "5432",
             d ? d : "(default database)");
    PQconninfoFree(opts);
    return DLOCK_OK;
}

void pg_server_free(struct pg_server *srv)
{
    free(srv->conninfo);
    srv->conninfo = NULL;
}

/* ---- one connection ------------------------------------------------------------ */

static void quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message; /* e.g. "you don't own a lock": the result says it already */
}

int pg_wait_socket(PGconn *conn, int wake_fd, int64_t timeout_ms)
{
    struct pollfd p[2] = { { .fd = PQsocket(conn), .events = POLLIN }, { .fd = wake_fd, .events = POLLIN } };
    if (p[0].fd < 0)
        return -1;
    int n = poll(p, wake_fd >= 0 ? 2 : 1, timeout_ms > INT_MAX ? INT_MAX : timeout_ms < 0 ? 0 : (int)timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : -1;
    if (n == 0)
        return 0;
    if (wake_fd >= 0 && (p[1].revents & POLLIN))
        return 2;
    return 1;
}

int pg_await_input(PGconn *conn, int wake_fd, int64_t deadline, int *rc)
{
    int w = pg_wait_socket(conn, wake_fd, deadline - dlock_provider_now_ms());
    *rc = DLOCK_OK;
    if (w == 0 && dlock_provider_now_ms() >= deadline)
        *rc = DLOCK_ETIMEDOUT;
    if (w == 0 || w == 2)
        return 0;
    return w < 0 || !PQconsumeInput(conn) ? -1 : 1;
}

/* Waits for the socket to be readable or writable until deadline. */
static int wait_io(PGconn *conn, bool for_write, int64_t deadline)
{
    int64_t left = deadline - dlock_provider_now_ms();
    if (left <= 0)
        return 0;
    struct pollfd p = { .fd = PQsocket(conn), .events = for_write ? POLLOUT : POLLIN };
    if (p.fd < 0)
        return -1;
    int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
    if (n < 0 && errno == EINTR)
        return 1; /* look again; the deadline still holds */
    return n;
}

static void one_line(char *msg)
{
    /* libpq messages end in a newline and sometimes hold several lines. */
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = (p[1] ? ' ' : '\0');
}

PGconn *pg_connect(const struct pg_server *srv, int *rc)
{
    PGconn *conn = PQconnectStart(srv->conninfo);
    if (!conn) {
        *rc = dlock_seterr(DLOCK_ENOMEM, "%s: out of memory", srv->label);
        return NULL;
    }
    int64_t deadline = dlock_provider_now_ms() + srv->connect_timeout_ms;
    PostgresPollingStatusType st = PQstatus(conn) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
    while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
        int w = wait_io(conn, st == PGRES_POLLING_WRITING, deadline);
        if (w <= 0) {
            *rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: %s", srv->label,
                               w == 0 ? "connection timed out (raise postgres.connect_timeout_ms?)" : strerror(errno));
            PQfinish(conn);
            return NULL;
        }
        st = PQconnectPoll(conn);
    }
    if (st == PGRES_POLLING_FAILED) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(conn));
        one_line(msg);
        /* A refused password or an unknown role or database will not heal by
         * retrying: that is the configuration's to fix. */
        bool config = strstr(msg, "password") || strstr(msg, "does not exist") || strstr(msg, "no pg_hba.conf");
        *rc = dlock_seterr(config ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE, "%s: cannot connect: %s", srv->label, msg);
        PQfinish(conn);
        return NULL;
    }
    PQsetNoticeProcessor(conn, quiet_notices, NULL);
    /* The server's TCP keepalive on this session: a client that vanished
     * (a partition, a host that died) leaves a half-open connection, and a
     * session-mode advisory lock lives as long as the server thinks the
     * session does: by default the OS's two hours. With these the server
     * drops it after about 5 + 3 x 2 = 11 s of silence. (Ignored on a
     * unix socket, where there is no such half-open state.) */
    char sql[320];
    snprintf(sql, sizeof sql,
             "SELECT set_config('statement_timeout', '%lld', false), set_config('tcp_keepalives_idle', '5', false), "
             "set_config('tcp_keepalives_interval', '2', false), set_config('tcp_keepalives_count', '3', false)",
             (long long)srv->command_timeout_ms);
    PGresult *res = pg_exec(srv, &conn, sql, 0, NULL, NULL, NULL, rc);
    if (!res)
        return NULL;
    *rc = pg_result_check(srv, res, "session settings");
    PQclear(res);
    if (*rc != DLOCK_OK) {
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

static PGresult *fail_conn(const struct pg_server *srv, PGconn **conn, int *rc, const char *why)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", why ? why : PQerrorMessage(*conn));
    one_line(msg);
    *rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s: %s", srv->label, msg[0] ? msg : "connection lost");
    PQfinish(*conn);
    *conn = NULL;
    return NULL;
}

/* Sends what was queued (send() already called) and reads the answer by
 * the deadline; see pg_exec. */
static PGresult *await_result(const struct pg_server *srv, PGconn **conn, int64_t deadline, int *rc)
{
    PGconn *c = *conn;
    for (;;) {
        int f = PQflush(c);
        if (f < 0)
            return fail_conn(srv, conn, rc, NULL);
        if (f == 0)
            break;
        int w = wait_io(c, true, deadline);
        if (w == 0)
            return fail_conn(srv, conn, rc, "no answer within postgres.command_timeout_ms");
        if (w < 0)
            return fail_conn(srv, conn, rc, strerror(errno));
    }
    PGresult *first = NULL;
    for (;;) {
        while (PQisBusy(c)) {
            int w = wait_io(c, false, deadline);
            if (w == 0) {
                PQclear(first);
                return fail_conn(srv, conn, rc, "no answer within postgres.command_timeout_ms");
            }
            if (w < 0 || !PQconsumeInput(c)) {
                PQclear(first);
                return fail_conn(srv, conn, rc, w < 0 ? strerror(errno) : NULL);
            }
        }
        PGresult *res = PQgetResult(c);
        if (!res)
            break;
        if (!first)
            first = res;
        else
            PQclear(res);
    }
    if (!first || PQstatus(c) != CONNECTION_OK) {
        PQclear(first);
        return fail_conn(srv, conn, rc, NULL);
    }
    *rc = DLOCK_OK;
    return first;
}

static bool ready_to_send(PGconn *c)
{
    return PQstatus(c) == CONNECTION_OK && PQsetnonblocking(c, 1) == 0;
}

PGresult *pg_exec(const struct pg_server *srv, PGconn **conn, const char *sql, int n, const char *const *values,
                  const int *lengths, const int *formats, int *rc)
{
    int64_t deadline = dlock_provider_now_ms() + srv->command_timeout_ms;
    if (!ready_to_send(*conn) || !PQsendQueryParams(*conn, sql, n, NULL, values, lengths, formats, 0))
        return fail_conn(srv, conn, rc, NULL);
    return await_result(srv, conn, deadline, rc);
}

PGresult *pg_exec_prepared(const struct pg_server *srv, PGconn **conn, int which, int n, const char *const *values,
                           const int *lengths, const int *formats, int *rc)
{
    char name[24];
    snprintf(name, sizeof name, "dlock_%d", which);
    int64_t deadline = dlock_provider_now_ms() + srv->command_timeout_ms;
    for (int attempt = 0;; attempt++) {
        if (!ready_to_send(*conn) || !PQsendQueryPrepared(*conn, name, n, values, lengths, formats, 0))
            return fail_conn(srv, conn, rc, NULL);
        PGresult *res = await_result(srv, conn, deadline, rc);
        const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        /* 26000: not prepared on this connection yet. Preparing on demand
         * (rather than at connect) also covers statements that name the
         * lock table before it has been created. */
        if (attempt > 0 || !state || strcmp(state, "26000") != 0)
            return res;
        PQclear(res);
        if (!PQsendPrepare(*conn, name, srv->statements[which], n, NULL))
            return fail_conn(srv, conn, rc, NULL);
        res = await_result(srv, conn, deadline, rc);
        if (!res)
            return NULL;
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            return res; /* the statement itself is refused: report that */
        PQclear(res);
    }
}

int pg_result_check(const struct pg_server *srv, const PGresult *res, const char *what)
{
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return DLOCK_OK;
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    /* 42501 insufficient privilege, 42P01 undefined table, 42703 undefined
     * column, 3D000 no database, 28xxx authorization: wrong setup, not a
     * passing fault. */
    bool config = state && (strcmp(state, "42501") == 0 || strcmp(state, "42P01") == 0 ||
                            strcmp(state, "42703") == 0 ||
                            strcmp(state, "3D000") == 0 || strncmp(state, "28", 2) == 0);
    return dlock_seterr(config ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE, "%s: %s failed: %s (SQLSTATE %s)", srv->label,
                        what, msg ? msg : PQresStatus(st), state ? state : "none");
}

/* ---- the pool ---------------------------------------------------------------------- */

/* Prepares each statement of `statements` (bits of statement ids) on
 * conn, in one round trip: pipeline mode, with a sync after each, so that
 * one the server refuses does not abort the others (a refused one is
 * prepared on demand, by pg_exec_prepared). False when the connection
 * failed or did not answer within the command timeout. */
static bool prepare_statements(const struct pg_server *srv, PGconn *conn, uint32_t statements)
{
    int64_t deadline = dlock_provider_now_ms() + srv->command_timeout_ms;
    if (!ready_to_send(conn) || !PQenterPipelineMode(conn))
        return false;
    int syncs = 0;
    for (int id = 0; id < PG_MAX_STATEMENTS; id++) {
        if (!(statements & (UINT32_C(1) << id)) || !srv->statements[id])
            continue;
        char name[24];
        snprintf(name, sizeof name, "dlock_%d", id);
        if (!PQsendPrepare(conn, name, srv->statements[id], 0, NULL) || !PQpipelineSync(conn))
            return false;
        syncs++;
    }
    for (int f; (f = PQflush(conn)) != 0;)
        if (f < 0 || wait_io(conn, true, deadline) <= 0)
            return false;
    while (syncs > 0) {
        while (PQisBusy(conn))
            if (wait_io(conn, false, deadline) <= 0 || !PQconsumeInput(conn))
                return false;
        PGresult *res = PQgetResult(conn);
        if (!res)
            continue; /* the end of one statement's results */
        if (PQresultStatus(res) == PGRES_PIPELINE_SYNC)
            syncs--;
        PQclear(res);
    }
    return PQexitPipelineMode(conn) == 1 && PQstatus(conn) == CONNECTION_OK;
}

static void *pool_connect(void *arg, int *rc)
{
    struct pg_pool *pool = arg;
    PGconn *conn = pg_connect(pool->server, rc);
    uint32_t statements = __atomic_load_n(&pool->prepared_at_connect, __ATOMIC_ACQUIRE);
    if (conn && statements && !prepare_statements(pool->server, conn, statements)) {
        fail_conn(pool->server, &conn, rc, NULL);
        return NULL;
    }
    return conn;
}

static bool pool_reusable(void *conn)
{
    return PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) == PQTRANS_IDLE;
}

static void pool_close(void *conn)
{
    PQfinish(conn);
}

static const struct conn_pool_ops pg_pool_ops = { pool_connect, pool_reusable, pool_close };

void pg_pool_init(struct pg_pool *pool, const struct pg_server *srv, int max)
{
    pool->server = srv;
    pool->prepared_at_connect = 0;
    conn_pool_init(&pool->pool, &pg_pool_ops, pool, max);
}

void pg_pool_destroy(struct pg_pool *pool)
{
    conn_pool_destroy(&pool->pool);
}

int pg_pool_get(struct pg_pool *pool, PGconn **out)
{
    void *conn = NULL;
    int rc = conn_pool_get(&pool->pool, &conn, NULL);
    *out = conn;
    return rc;
}

int pg_pool_try_get(struct pg_pool *pool, PGconn **out)
{
    void *conn = NULL;
    int rc = conn_pool_try_get(&pool->pool, &conn);
    *out = conn;
    return rc;
}

int pg_pool_take_idle(struct pg_pool *pool, PGconn **out)
{
    void *conn = NULL;
    int rc = conn_pool_take_idle(&pool->pool, &conn);
    *out = conn;
    return rc;
}

bool pg_send_prepared_now(PGconn *conn, int which, int n, const char *const *values, const int *lengths,
                          const int *formats)
{
    char name[24];
    snprintf(name, sizeof name, "dlock_%d", which);
    return ready_to_send(conn) && PQsendQueryPrepared(conn, name, n, values, lengths, formats, 0) &&
           PQflush(conn) == 0;
}

int pg_read_answer(PGconn *conn, PGresult **first)
{
    if (!PQconsumeInput(conn))
        return -1;
    while (!PQisBusy(conn)) {
        PGresult *res = PQgetResult(conn);
        if (!res)
            return *first && PQstatus(conn) == CONNECTION_OK ? 0 : -1;
        if (!*first)
            *first = res;
        else
            PQclear(res);
    }
    return 1;
}

void pg_pool_put(struct pg_pool *pool, PGconn *conn)
{
    conn_pool_put(&pool->pool, conn);
}

void pg_pool_prepare_at_connect(struct pg_pool *pool, uint32_t statements)
{
    __atomic_store_n(&pool->prepared_at_connect, statements, __ATOMIC_RELEASE);
    PGconn *idle[PG_POOL_MAX];
    int n = 0;
    while (n < PG_POOL_MAX && pg_pool_take_idle(pool, &idle[n]) == DLOCK_OK)
        n++;
    for (int i = 0; i < n; i++) {
        if (!prepare_statements(pool->server, idle[i], statements)) {
            PQfinish(idle[i]); /* broken: the next caller connects anew */
            idle[i] = NULL;
        }
        pg_pool_put(pool, idle[i]);
    }
}

static __thread bool last_exec_resent;

bool pg_pool_last_resent(void)
{
    return last_exec_resent;
}

PGresult *pg_pool_exec(struct pg_pool *pool, int which, int n, const char *const *values, const int *lengths,
                       const int *formats, int *rc)
{
    last_exec_resent = false;
    for (int attempt = 0; attempt < 2; attempt++) {
        last_exec_resent = attempt > 0; /* the first may have run before its connection died */
        void *c = NULL;
        bool was_idle;
        if ((*rc = conn_pool_get(&pool->pool, &c, &was_idle)) != DLOCK_OK)
            return NULL;
        PGconn *conn = c;
        int64_t t0 = dlock_provider_now_ms();
        PGresult *res = pg_exec_prepared(pool->server, &conn, which, n, values, lengths, formats, rc);
        conn_pool_put(&pool->pool, conn);
        if (res)
            return res;
        /* Only an idle connection that died at once (the server restarted
         * or closed it) earns a second try; a timeout does not. */
        if (!was_idle || dlock_provider_now_ms() - t0 >= pool->server->command_timeout_ms)
            break;
    }
    return NULL;
}
