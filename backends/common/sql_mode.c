/* backends/common/sql_mode.c - see sql_mode.h. */
#include "config.h"

#include "sql_mode.h"

#include <stdio.h>

static const struct sql_mode *mode_of(const void *instance)
{
    return ((const struct sql_instance_head *)instance)->mode;
}

static const char *label_of(const void *instance)
{
    return ((const struct sql_instance_head *)instance)->line.label;
}

static const char *prefix_of(const void *instance)
{
    return ((const struct sql_instance_head *)instance)->prefix;
}

int sql_mode_attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    return mode_of(instance)->attempt(instance, lk, g);
}

int sql_mode_attempt_late(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    const struct sql_mode *m = mode_of(instance);
    if (m->attempt_late)
        return m->attempt_late(instance, lk, g);
    g->retry_hint_ms = -1;
    return DLOCK_EBUSY;
}

int sql_mode_release(void *instance, struct dlock_provider_lock *lk)
{
    return mode_of(instance)->release(instance, lk);
}

int sql_mode_renew(void *instance, struct dlock_provider_lock *lk)
{
    return mode_of(instance)->renew(instance, lk);
}

int sql_mode_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    return mode_of(instance)->renew_batch(instance, locks, n, results);
}

int sql_mode_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    const struct sql_mode *m = mode_of(instance);
    if (!m->downgrade) /* the instance does not claim it: not called */
        return dlock_seterr(DLOCK_ENOTSUP, "%s: %s mode has no shared holds to downgrade to", label_of(instance),
                            m->name);
    return m->downgrade(instance, lk);
}

int sql_mode_fence(void *instance, struct dlock_provider_lock *lk, uint64_t *out)
{
    const struct sql_mode *m = mode_of(instance);
    if (!m->fence) /* every grant carried its fence */
        return dlock_seterr(DLOCK_EINTERNAL, "%s: a %s-mode hold without a fence", label_of(instance), m->name);
    return m->fence(instance, lk, out);
}

int sql_mode_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    const struct sql_mode *m = mode_of(instance);
    if (!m->break_hold)
        return dlock_seterr(DLOCK_ENOTSUP, "%s: %s mode cannot break a hold: %s", label_of(instance), m->name,
                            m->why_no_break);
    struct sql_lock_key k;
    int rc = sql_lock_key_init(&k, prefix_of(instance), name, name_len);
    if (rc == DLOCK_OK)
        rc = m->break_hold(instance, &k, broken, fence);
    sql_lock_key_free(&k);
    return rc;
}

int sql_mode_list(void *instance, struct dlock_provider_list *req)
{
    const struct sql_mode *m = mode_of(instance);
    if (!m->list)
        return dlock_seterr(DLOCK_ENOTSUP, "%s: %s mode cannot list its locks: %s", label_of(instance), m->name,
                            m->why_no_list);
    return m->list(instance, req);
}

int sql_mode_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len)
{
    const struct sql_mode *m = mode_of(instance);
    if (!m->value_put) /* the instance does not claim elections: not called */
        return dlock_seterr(DLOCK_ENOTSUP, "%s: %s mode holds no elections", label_of(instance), m->name);
    return m->value_put(instance, lk, term, value, len);
}

int sql_mode_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out)
{
    const struct sql_mode *m = mode_of(instance);
    if (!m->leader_get)
        return dlock_seterr(DLOCK_ENOTSUP, "%s: %s mode holds no elections", label_of(instance), m->name);
    struct sql_lock_key k;
    int rc = sql_lock_key_init(&k, prefix_of(instance), name, name_len);
    if (rc == DLOCK_OK)
        rc = m->leader_get(instance, &k, out);
    sql_lock_key_free(&k);
    return rc;
}

static int status(void *instance, struct dlock_ctl_status *arg)
{
    dlock_status_info *out = arg->out;
    out->held = 0; /* the rest arrives preset (provider.h) */
    struct sql_lock_key k;
    int rc = sql_lock_key_init(&k, prefix_of(instance), arg->name, arg->name_len);
    if (rc == DLOCK_OK)
        rc = mode_of(instance)->status(instance, &k, out);
    sql_lock_key_free(&k);
    return rc;
}

int sql_mode_ctl(void *instance, int op, void *arg)
{
    const struct sql_instance_head *h = instance;
    if (op == DLOCK_CTL_STATUS)
        return status(instance, arg);
    if (op == DLOCK_CTL_CAPABILITIES) {
        *(unsigned *)arg &= ~(h->mode->capabilities_off | h->capabilities_off);
        return DLOCK_OK;
    }
    if (op == DLOCK_CTL_HEARING_DELAY && h->hearing_delay_us > 0) {
        *(int64_t *)arg = h->hearing_delay_us;
        return DLOCK_OK;
    }
    return DLOCK_ENOTSUP;
}

int sql_instance_begin(struct sql_instance_head *h, const struct dlock_provider_env *env, const char *group,
                       size_t table_max, const struct sql_mode *lease, const struct sql_mode *session,
                       const struct line_ops *ops, struct sql_settings *set)
{
    pthread_mutex_init(&h->holder_mu, NULL);
    int rc = sql_settings_read(env->settings, group, env->prefix, table_max, SQL_PREFIX_MAX, set);
    if (rc != DLOCK_OK)
        return rc;
    h->mode = set->session_mode ? session : lease;
    h->line = (struct line_host){ ops, group, env->log_handle };
    snprintf(h->prefix, sizeof h->prefix, "%s", set->prefix);
    return DLOCK_OK;
}

void sql_instance_end(struct sql_instance_head *h)
{
    pthread_mutex_destroy(&h->holder_mu);
}
