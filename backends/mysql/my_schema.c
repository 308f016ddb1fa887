/* backends/mysql/my_schema.c - the lock table: found, created when
 * missing and allowed to, and given the columns an earlier version's
 * table lacks (those of shared holds, the waker). */
#include "config.h"

#include "my_backend.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <string.h>

/* Columns a table of an earlier version lacks: has_columns counts them
 * (MY_HAS_*), alter adds them. With create, they are added; without, the
 * instance goes on without them (*missing) and the warning says what then
 * fails or is slower, and that dlock.conf(5) has the ALTER TABLE. */
static int add_columns(struct my_instance *inst, struct my_conn *c, bool create, int has_columns, const char *alter,
                       const char *what, const char *without, bool *missing)
{
    struct my_outcome o;
    struct my_param p[1] = { my_bytes(inst->sql.table, strlen(inst->sql.table)) };
    int rc = my_run(&inst->server, c, has_columns, p, 1, -1, &o);
    if (rc != DLOCK_OK || (o.has_row && o.ints[0] > 0))
        return rc;
    if (!create) {
        dlock_provider_log(inst->log_handle, DLOCK_LOG_WARN,
                           "%s: table `%s` has no %s; %s until it has (ALTER TABLE in dlock.conf(5))",
                           inst->server.label, inst->sql.table, what, without);
        *missing = true;
        return DLOCK_OK;
    }
    if (mysql_query(c->db, alter) != 0 && mysql_errno(c->db) != ER_DUP_FIELDNAME)
        return dlock_seterr(mysql_errno(c->db) == 1142 ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE,
                            "%s: ALTER TABLE `%s` (the %s) failed: %s", inst->server.label, inst->sql.table, what,
                            mysql_error(c->db));
    return DLOCK_OK;
}

int my_prepare_schema(struct my_instance *inst, bool create)
{
    struct my_conn *c;
    int rc = my_pool_get(&inst->pool, &c);
    if (rc != DLOCK_OK)
        return rc;
    /* Preparing a statement that names the table is the cheapest check
     * that it exists and that we may use it. */
    struct my_outcome o;
    struct my_param p[1] = { my_bytes("", 0) };
    rc = my_run(&inst->server, c, MY_STATUS, p, 1, 0, &o);
    if (rc == DLOCK_ECONFIG && create && c->last_errno == 1146 /* ER_NO_SUCH_TABLE */) {
        if (mysql_query(c->db, inst->sql.create_table) != 0)
            rc = dlock_seterr(mysql_errno(c->db) == 1142 ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE,
                              "%s: CREATE TABLE `%s` failed: %s", inst->server.label, inst->sql.table,
                              mysql_error(c->db));
        else
            rc = DLOCK_OK;
    } else if (rc == DLOCK_ECONFIG && !create) {
        rc = dlock_seterr(DLOCK_ECONFIG, "%s (mysql.create_table is false: create it with the DDL in dlock.conf(5))",
                          dlock_errmsg());
    }
    /* Shared holds and permits fail without their columns; exclusive locks
     * work. Lease-mode waiters without the waker column back off. */
    if (rc == DLOCK_OK)
        rc = add_columns(inst, c, create, MY_HAS_SHARED_COLUMNS, inst->sql.add_shared_columns,
                         "columns for shared holds and semaphores", "they will fail", &inst->head.no_shared_columns);
    if (rc == DLOCK_OK && inst->head.mode->lease_rows)
        rc = add_columns(inst, c, create, MY_HAS_WAKER, inst->sql.add_waker_column, "waker column",
                         "waiters poll with backoff instead of waiting in the server", &inst->no_waker);
    /* Elections' values (IF NOT EXISTS: one statement at open). Without
     * create_table, elections fail naming the table until it exists. */
    if (rc == DLOCK_OK && create && inst->head.mode->lease_rows && mysql_query(c->db, inst->sql.create_values) != 0)
        rc = dlock_seterr(mysql_errno(c->db) == 1142 ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE,
                          "%s: CREATE TABLE `%s_values` failed: %s", inst->server.label, inst->sql.table,
                          mysql_error(c->db));
    my_pool_put(&inst->pool, c);
    return rc;
}
