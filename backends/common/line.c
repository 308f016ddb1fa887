/* backends/common/line.c - see line.h. */
#include "config.h"

#include "line.h"
#include "out_of_line.h"

#include <dlock/provider.h>

static bool kind_in_line(const struct line_ops *ops, const struct dlock_provider_lock *lk)
{
    return !ops->in_line || ops->in_line(lk);
}

/* Fair mode: DLOCK_OK when the request may look (*late: out of turn),
 * DLOCK_EBUSY when it must wait for its turn, or a failure. */
static int fair_turn(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, bool timer_look,
                     bool *late)
{
    const struct line_host *c = instance;
    const struct line_ops *ops = c->ops;
    if (!kind_in_line(ops, lk))
        return dlock_seterr(DLOCK_ENOTSUP, "%s: fair mode is for exclusive holds and permits; shared holds are "
                            "granted together", c->label);
    bool turn = true;
    int rc = ops->turn(instance, lk, g, &turn);
    if (rc != DLOCK_OK || turn)
        return rc;
    /* Others are before us: not our turn to look. A head that hangs would
     * hold the line for good, so an exclusive request whose wait ran out
     * looks out of turn, where the backend has a late look. */
    if (!timer_look || !ops->attempt_late || lk->mode != DLOCK_MODE_EXCLUSIVE) {
        g->retry_hint_ms = -1;
        return DLOCK_EBUSY;
    }
    *late = true;
    return DLOCK_OK;
}

/* What follows an attempt's answer rc; looked: the attempt was made
 * (a failure before it has nothing for busy to follow). */
static int after_attempt(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, int rc,
                         bool looked, bool may_block)
{
    const struct line_host *c = instance;
    const struct line_ops *ops = c->ops;
    if (rc == DLOCK_OK) {
        if (ops->granted)
            ops->granted(instance, lk, may_block ? g : NULL);
    } else if (rc != DLOCK_EBUSY) {
        ops->leave(instance, lk); /* no abandon follows a failure */
    } else if (looked && ops->busy && !kind_in_line(ops, lk)) {
        rc = ops->busy(instance, lk, g, rc);
    }
    return rc;
}

int line_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    const struct line_host *c = instance;
    const struct line_ops *ops = c->ops;
    struct line_place *p = ops->place(lk);
    bool timer_look = p->timer_look, late = false, looked = false;
    p->timer_look = false;
    int rc = ops->prepare ? ops->prepare(instance, lk) : DLOCK_OK;
    if (rc == DLOCK_OK && (lk->flags & DLOCK_LOCK_FAIR))
        rc = fair_turn(instance, lk, g, timer_look, &late);
    if (rc == DLOCK_OK) {
        rc = late ? ops->attempt_late(instance, lk, g) : ops->attempt(instance, lk, g);
        looked = true;
    }
    return after_attempt(instance, lk, g, rc, looked, true);
}

int line_attempt_begin(void *instance, struct dlock_provider_lock *lk)
{
    const struct line_host *c = instance;
    const struct line_ops *ops = c->ops;
    if (lk->flags & DLOCK_LOCK_FAIR)
        return dlock_seterr(DLOCK_ENOTSUP, "%s: a request in fair mode takes its turn first", c->label);
    ops->place(lk)->timer_look = false;
    return ops->prepare ? ops->prepare(instance, lk) : DLOCK_OK;
}

int line_attempt_end(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g, int rc)
{
    return after_attempt(instance, lk, g, rc, true, false);
}

/* Before a wait: the backend's preparation, and the join when out of the
 * line. */
static void before_waiting(void *instance, struct dlock_provider_lock *lk)
{
    const struct line_host *c = instance;
    const struct line_ops *ops = c->ops;
    struct line_place *p = ops->place(lk);
    if (ops->before_wait)
        ops->before_wait(instance, lk);
    if (ops->join && p->state == LINE_OUT && kind_in_line(ops, lk)) {
        /* Joined here, after a busy answer: the line answers once we are
         * at its head, and the look made then sees a release that came
         * before the join. */
        int rc = ops->join(instance, lk);
        if (rc != DLOCK_OK)
            dlock_provider_log(c->log_handle, rc == DLOCK_EBUSY ? DLOCK_LOG_DEBUG : DLOCK_LOG_WARN,
                               "%s: cannot wait in line (%s); polling instead", c->label, dlock_errmsg());
    }
}

int line_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    const struct line_host *c = instance;
    const struct line_ops *ops = c->ops;
    struct line_place *p = ops->place(lk);
    int64_t deadline = dlock_provider_now_ms() + timeout_ms; /* the join's connect counts */
    before_waiting(instance, lk);
    timeout_ms = deadline - dlock_provider_now_ms();
    if (timeout_ms < 0)
        timeout_ms = 0;
    if (p->state != LINE_OUT) {
        int rc = ops->wait_in_line(instance, lk, timeout_ms, wake_fd);
        p->timer_look = rc == DLOCK_ETIMEDOUT;
        if (rc != DLOCK_OK || p->state != LINE_OUT || !kind_in_line(ops, lk))
            return rc;
        /* A request in the line failed and took us out of it (logged):
         * not at once again, which would spin while the failure lasts. */
        return out_of_line_wait(wake_fd, deadline - dlock_provider_now_ms());
    }
    return ops->wait_outside ? ops->wait_outside(instance, lk, timeout_ms, wake_fd)
                             : out_of_line_wait(wake_fd, timeout_ms);
}

int line_wait_arm(void *instance, struct dlock_provider_lock *lk, int64_t *timeout_ms, int *fd)
{
    const struct line_host *c = instance;
    const struct line_ops *ops = c->ops;
    struct line_place *p = ops->place(lk);
    if (!ops->arm)
        return DLOCK_ENOTSUP;
    int64_t deadline = dlock_provider_now_ms() + *timeout_ms;
    before_waiting(instance, lk);
    *timeout_ms = deadline - dlock_provider_now_ms();
    if (*timeout_ms < 0)
        *timeout_ms = 0;
    p->armed_in_line = p->state != LINE_OUT;
    int rc = ops->arm(instance, lk, p->armed_in_line, timeout_ms, fd);
    p->armed_over = rc == DLOCK_OK && *fd < 0 && *timeout_ms == 0;
    return rc;
}

int line_wait_disarm(void *instance, struct dlock_provider_lock *lk, int fired, int64_t *timeout_ms)
{
    (void)timeout_ms;
    const struct line_host *c = instance;
    const struct line_ops *ops = c->ops;
    struct line_place *p = ops->place(lk);
    int rc = ops->disarm(instance, lk, p->armed_in_line, fired);
    if (!fired && p->armed_over && rc == DLOCK_ETIMEDOUT)
        rc = DLOCK_OK; /* the line moved while arming: look, as line_wait would */
    if (p->armed_in_line)
        p->timer_look = rc == DLOCK_ETIMEDOUT;
    return rc;
}
