/* backends/common/sql_mode.h - the variant table of the SQL backends, and
 * the provider members that only dispatch to it.
 *
 * postgres and mysql each keep holds in one of two modes, chosen once at
 * open: lease (a row per name, whose lease the server's clock ends) and
 * session (the server's own lock, held by one connection per client). A
 * mode is a const table, in the manner of SQLite's unix VFS, which picks
 * one locking method table per file; each backend has one per mode
 * (pg_lease.c, pg_session.c, my_lease.c, my_session.c). What only passes a
 * call on to the mode is written once, here. */
#ifndef DLOCK_COMMON_SQL_MODE_H
#define DLOCK_COMMON_SQL_MODE_H

#include "line.h"
#include "sql_text.h"

#include <dlock/provider.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every member is one attempt at the server, as the provider member of the
 * same name (dlock_provider(3)); instance is the backend's instance. */
struct sql_mode {
    const char *name;            /* as <backend>.mode spells it */
    unsigned capabilities_off;   /* what the module claims and this mode cannot do */
    bool lease_rows;             /* holds are rows with a lease (the lease mode) */
    int (*attempt)(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g);
    /* A fair exclusive request whose wait ran out, looking out of turn: it
     * may take only a hold free for a while, so that at a holder's expiry
     * the live head of the line looks first. NULL: such a request waits
     * for its turn. */
    int (*attempt_late)(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g);
    int (*release)(void *instance, struct dlock_provider_lock *lk);
    int (*renew)(void *instance, struct dlock_provider_lock *lk);
    int (*renew_batch)(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results);
    int (*downgrade)(void *instance, struct dlock_provider_lock *lk); /* NULL: not offered */
    int (*fence)(void *instance, struct dlock_provider_lock *lk, uint64_t *out); /* NULL: grants carry it */
    /* k is the name's key, made by the dispatcher; out is preset (nothing
     * held; the rest as DLOCK_CTL_STATUS presets it, provider.h). */
    int (*status)(void *instance, const struct sql_lock_key *k, dlock_status_info *out);
    int (*break_hold)(void *instance, const struct sql_lock_key *k, int *broken, uint64_t *fence);
    int (*list)(void *instance, struct dlock_provider_list *req);
    /* Elections (NULL: the mode has none, and lists DLOCK_CAP_ELECTION in
     * capabilities_off): the provider members of the same name, k the
     * name's key. */
    int (*value_put)(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len);
    int (*leader_get)(void *instance, const struct sql_lock_key *k, struct dlock_provider_leader *out);
    const char *why_no_break;    /* when break_hold is NULL: why, and what to do instead */
    const char *why_no_list;     /* when list is NULL: why */
};

/* The start of a SQL backend's instance, which the dispatchers below read. */
struct sql_instance_head {
    struct line_host line;       /* first: the provider's acquire and wait are the line's; its label */
    const struct sql_mode *mode;
    char prefix[SQL_PREFIX_MAX + 1]; /* the key prefix of every name (sql_lock_key_init) */
    unsigned capabilities_off;   /* what this instance's table cannot do, found at open */
    int64_t hearing_delay_us;    /* DLOCK_CTL_HEARING_DELAY's answer, 0: none (told by push, or no caching) */
    bool no_shared_columns;      /* the table has none (create_table off): writers do not register, no downgrade */
    pthread_mutex_t holder_mu;   /* session mode: one connection carries the holds */
    uint64_t holder_generation;  /* bumped at each new holder connection */
};

/* The first step of a SQL backend's open, on a zeroed head: reads the
 * settings of group (the backend's name) into *set, picks the mode (lease
 * or session), copies the key prefix, and fills the line's host with ops
 * and the log (the backend sets line.label once it has one). The holder's
 * mutex is set up even on failure: sql_instance_end undoes it either way.
 * DLOCK_OK, or DLOCK_ECONFIG with the detail set. */
int sql_instance_begin(struct sql_instance_head *h, const struct dlock_provider_env *env, const char *group,
                       size_t table_max, const struct sql_mode *lease, const struct sql_mode *session,
                       const struct line_ops *ops, struct sql_settings *set);

/* Undoes sql_instance_begin. */
void sql_instance_end(struct sql_instance_head *h);

/* Provider members that pass the call on to the instance's mode. */
int sql_mode_attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g);
/* The mode's attempt_late; where it has none, DLOCK_EBUSY with
 * retry_hint_ms -1 (the request waits for its turn). */
int sql_mode_attempt_late(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g);
int sql_mode_release(void *instance, struct dlock_provider_lock *lk);
int sql_mode_renew(void *instance, struct dlock_provider_lock *lk);
int sql_mode_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results);
int sql_mode_downgrade(void *instance, struct dlock_provider_lock *lk);
int sql_mode_fence(void *instance, struct dlock_provider_lock *lk, uint64_t *out);
int sql_mode_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence);
int sql_mode_list(void *instance, struct dlock_provider_list *req);
int sql_mode_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len);
int sql_mode_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out);
/* DLOCK_CTL_STATUS: the name's key made, held set to 0, the mode asked.
 * DLOCK_CTL_CAPABILITIES: what the mode and the instance cannot do,
 * cleared. */
int sql_mode_ctl(void *instance, int op, void *arg);

#endif
