/* contrib/bench/bench_sql_baselines.c - the plain client loops of the SQL
 * backends, written the way a careful user of libpq or libmariadb would
 * lock a row or take a named lock, measured in the same run as libdlock.
 *
 *   postgres lease    "BEGIN; SELECT .. FOR UPDATE NOWAIT" (one round
 *                     trip) + "COMMIT" on a one-row table
 *   postgres session  pg_try_advisory_lock + pg_advisory_unlock
 *   mysql lease       "START TRANSACTION; SELECT .. FOR UPDATE NOWAIT"
 *                     (one round trip, multi-statement) + "COMMIT"
 *   mysql session     GET_LOCK(name, 0) + RELEASE_LOCK
 *
 * Each compares with libdlock's acquire+release of the same backend, mode
 * and server (same durability: both commit a transaction per operation). */
#include "config.h"

#include "bench.h"

#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef BENCH_POSTGRES
#include <libpq-fe.h>
#endif
#ifdef BENCH_MYSQL
#include <mysql.h>
#endif

/* The backend group's mode ("lease" unless the file says otherwise). */
static bool session_mode(config_t *c, const char *group)
{
    char path[64];
    snprintf(path, sizeof path, "%s.mode", group);
    const char *mode = NULL;
    return config_lookup_string(c, path, &mode) && strcmp(mode, "session") == 0;
}

static const char *lookup(config_t *c, const char *group, const char *key, const char *def)
{
    char path[64];
    snprintf(path, sizeof path, "%s.%s", group, key);
    const char *v;
    return config_lookup_string(c, path, &v) ? v : def;
}

static int lookup_int(config_t *c, const char *group, const char *key, int def)
{
    char path[64];
    snprintf(path, sizeof path, "%s.%s", group, key);
    int v;
    return config_lookup_int(c, path, &v) ? v : def;
}

#ifdef BENCH_POSTGRES
static void pg_expect(PGconn *c, const char *sql, ExecStatusType want, const char *value)
{
    PGresult *r = PQexec(c, sql);
    bool ok = PQresultStatus(r) == want && (!value || (PQntuples(r) == 1 && !strcmp(PQgetvalue(r, 0, 0), value)));
    if (!ok) {
        fprintf(stderr, "dlock-bench: postgres baseline: %s: %s\n", sql, PQresultErrorMessage(r));
        exit(1);
    }
    PQclear(r);
}

static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message; /* "relation ... already exists, skipping" */
}

static void pg_row_lock_cycle(void *arg)
{
    PGconn *c = arg;
    pg_expect(c, "BEGIN; SELECT id FROM dlock_bench_baseline WHERE id = 1 FOR UPDATE NOWAIT", PGRES_TUPLES_OK, "1");
    pg_expect(c, "COMMIT", PGRES_COMMAND_OK, NULL);
}

static void pg_advisory_cycle(void *arg)
{
    PGconn *c = arg;
    pg_expect(c, "SELECT pg_try_advisory_lock(4242)", PGRES_TUPLES_OK, "t");
    pg_expect(c, "SELECT pg_advisory_unlock(4242)", PGRES_TUPLES_OK, "t");
}

static bool pg_loop(const struct bench_config *cfg, config_t *c, int64_t *samples)
{
    char info[1024], port[16];
    snprintf(port, sizeof port, "%d", lookup_int(c, "postgres", "port", 5432));
    const char *conninfo = lookup(c, "postgres", "conninfo", NULL);
    if (conninfo)
        snprintf(info, sizeof info, "%s", conninfo);
    else
        snprintf(info, sizeof info, "host='%s' port=%s user='%s' dbname='%s' password='%s'",
                 lookup(c, "postgres", "host", "127.0.0.1"), port, lookup(c, "postgres", "user", "postgres"),
                 lookup(c, "postgres", "database", "postgres"), lookup(c, "postgres", "password", ""));
    PGconn *db = PQconnectdb(info);
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "dlock-bench: postgres baseline: %s", PQerrorMessage(db));
        PQfinish(db);
        return false;
    }
    PQsetNoticeProcessor(db, quiet_notice, NULL);
    bool session = session_mode(c, "postgres");
    if (!session) {
        pg_expect(db, "CREATE TABLE IF NOT EXISTS dlock_bench_baseline (id int PRIMARY KEY)", PGRES_COMMAND_OK, NULL);
        pg_expect(db, "INSERT INTO dlock_bench_baseline VALUES (1) ON CONFLICT DO NOTHING", PGRES_COMMAND_OK, NULL);
    }
    double secs;
    size_t n = bench_timed_cycles(session ? pg_advisory_cycle : pg_row_lock_cycle, db, samples, &secs);
    bench_record_cycles(cfg->label, "baseline-uncontended", samples, n, secs);
    PQfinish(db);
    return true;
}
#endif

#ifdef BENCH_MYSQL
static void my_expect(MYSQL *db, const char *sql, const char *value)
{
    bool ok = mysql_query(db, sql) == 0;
    /* Read every result of a multi-statement query; the last one with rows
     * must hold value. */
    do {
        MYSQL_RES *res = mysql_store_result(db);
        if (res) {
            MYSQL_ROW row = mysql_fetch_row(res);
            ok = ok && row && row[0] && (!value || !strcmp(row[0], value));
            mysql_free_result(res);
        }
    } while (ok && mysql_next_result(db) == 0);
    if (!ok || mysql_errno(db)) {
        fprintf(stderr, "dlock-bench: mysql baseline: %s: %s\n", sql, mysql_error(db));
        exit(1);
    }
}

static void my_row_lock_cycle(void *arg)
{
    MYSQL *db = arg;
    my_expect(db, "START TRANSACTION; SELECT id FROM dlock_bench_baseline WHERE id = 1 FOR UPDATE NOWAIT", "1");
    my_expect(db, "COMMIT", NULL);
}

static void my_named_lock_cycle(void *arg)
{
    MYSQL *db = arg;
    my_expect(db, "SELECT GET_LOCK('dlock-bench-baseline', 0)", "1");
    my_expect(db, "SELECT RELEASE_LOCK('dlock-bench-baseline')", "1");
}

static bool my_loop(const struct bench_config *cfg, config_t *c, int64_t *samples)
{
    MYSQL *db = mysql_init(NULL);
    const char *socket = lookup(c, "mysql", "socket", NULL);
    if (!mysql_real_connect(db, lookup(c, "mysql", "host", "127.0.0.1"), lookup(c, "mysql", "user", "root"),
                            lookup(c, "mysql", "password", ""), lookup(c, "mysql", "database", NULL),
                            (unsigned)lookup_int(c, "mysql", "port", 3306), socket, CLIENT_MULTI_STATEMENTS)) {
        fprintf(stderr, "dlock-bench: mysql baseline: %s\n", mysql_error(db));
        mysql_close(db);
        return false;
    }
    bool session = session_mode(c, "mysql");
    if (!session) {
        my_expect(db, "CREATE TABLE IF NOT EXISTS dlock_bench_baseline (id INT PRIMARY KEY) ENGINE=InnoDB", NULL);
        my_expect(db, "INSERT IGNORE INTO dlock_bench_baseline VALUES (1)", NULL);
    }
    double secs;
    size_t n = bench_timed_cycles(session ? my_named_lock_cycle : my_row_lock_cycle, db, samples, &secs);
    bench_record_cycles(cfg->label, "baseline-uncontended", samples, n, secs);
    mysql_close(db);
    return true;
}
#endif

bool run_sql_baseline_uncontended(const struct bench_config *cfg, int64_t *samples)
{
    bool pg = !strcmp(cfg->backend, "postgres"), my = !strcmp(cfg->backend, "mysql");
    if ((!pg && !my) || !cfg->path)
        return false;
    config_t c;
    config_init(&c);
    bool ran = false;
    if (config_read_file(&c, cfg->path) == CONFIG_TRUE) {
#ifdef BENCH_POSTGRES
        if (pg)
            ran = pg_loop(cfg, &c, samples);
#endif
#ifdef BENCH_MYSQL
        if (my)
            ran = my_loop(cfg, &c, samples);
#endif
    }
    config_destroy(&c);
    (void)samples;
    return ran;
}
