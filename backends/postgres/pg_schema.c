/* backends/postgres/pg_schema.c - the lock table and its fence sequence:
 * found, created when missing and allowed to, and given the columns of
 * shared holds when it was made before them. */
#include "config.h"

#include "pg_backend.h"

#include <stdio.h>
#include <string.h>

/* A table made before shared holds existed: give it their columns, or say
 * how (exclusive locks work without them; shared and permit requests fail
 * until then). */
static int add_shared_columns(struct pg_instance *inst, bool create)
{
    if (!create) {
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                           "%s: table \"%s\" has no columns for shared holds and semaphores; they will fail "
                           "until it has them (ALTER TABLE in dlock.conf(5))",
                           inst->server.label, inst->sql.table);
        return DLOCK_OK;
    }
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_ADD_SHARED_COLUMNS, 0, NULL, NULL, NULL, &rc);
    if (res) {
        rc = pg_result_check(&inst->server, res, "ALTER TABLE (the columns of shared holds)");
        PQclear(res);
    }
    return rc;
}

/* Two processes creating one object at once: the loser's IF NOT EXISTS
 * does not save it, and it sees a duplicate of the row in pg_type (23505),
 * of the relation (42P07) or of the table's type (42710). The winner made
 * what we wanted. */
static bool lost_create_race(const PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return state && (strcmp(state, "23505") == 0 || strcmp(state, "42P07") == 0 || strcmp(state, "42710") == 0);
}

static int prepare_locks(struct pg_instance *inst, bool create);

/* The table of election values, when allowed to make it (IF NOT EXISTS:
 * one statement at open, whether or not it is there). */
static int prepare_values(struct pg_instance *inst, bool create)
{
    if (!create)
        return DLOCK_OK; /* elections fail, naming the table, until it exists */
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_CREATE_VALUES, 0, NULL, NULL, NULL, &rc);
    if (!res)
        return rc;
    if (!lost_create_race(res))
        rc = pg_result_check(&inst->server, res, "CREATE TABLE (election values)");
    PQclear(res);
    return rc;
}


/* Creates the tables and sequence when missing (and allowed to). */
int pg_prepare_schema(struct pg_instance *inst, bool create)
{
    int rc = prepare_locks(inst, create);
    return rc == DLOCK_OK ? prepare_values(inst, create) : rc;
}

/* The lock table and its sequence. */
static int prepare_locks(struct pg_instance *inst, bool create)
{
    char table[PG_TABLE_MAX + 3], sequence[PG_TABLE_MAX + 9];
    snprintf(table, sizeof table, "\"%s\"", inst->sql.table);
    snprintf(sequence, sizeof sequence, "\"%s_fence\"", inst->sql.table);
    const char *values[2] = { table, sequence };
    int rc;
    PGresult *res = pg_pool_exec(&inst->pool, PG_EXISTS, 2, values, NULL, NULL, &rc);
    if (!res)
        return rc;
    rc = pg_result_check(&inst->server, res, "looking for the lock table");
    bool have_table = rc == DLOCK_OK && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    bool have_sequence = rc == DLOCK_OK && strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    bool have_columns = rc == DLOCK_OK && strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    PQclear(res);
    if (rc == DLOCK_OK && have_table && !have_columns)
        rc = add_shared_columns(inst, create);
    inst->head.no_shared_columns = have_table && !have_columns && !create;
    if (rc != DLOCK_OK || (have_table && have_sequence))
        return rc;
    if (!create)
        return dlock_seterr(DLOCK_ECONFIG,
                            "%s: table \"%s\" or sequence \"%s_fence\" is missing and postgres.create_table is false: "
                            "create them with the DDL in dlock.conf(5)",
                            inst->server.label, inst->sql.table, inst->sql.table);
    const int ddl[2] = { have_table ? -1 : PG_CREATE_TABLE, have_sequence ? -1 : PG_CREATE_SEQUENCE };
    for (int i = 0; i < 2 && rc == DLOCK_OK; i++) {
        if (ddl[i] < 0)
            continue;
        res = pg_pool_exec(&inst->pool, ddl[i], 0, NULL, NULL, NULL, &rc);
        if (!res)
            break;
        if (!lost_create_race(res))
            rc = pg_result_check(&inst->server, res, i == 0 ? "CREATE TABLE" : "CREATE SEQUENCE");
        PQclear(res);
    }
    return rc;
}
