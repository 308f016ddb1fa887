/* backends/zookeeper/zk_wanted.c - telling a holder that another owner asks
 * for its name (lock caching: watch_wanted and unwatch_wanted).
 *
 * Every request for a name, a try included, creates a node under the
 * name's parent; a dlock break deletes the holder's node. So a child watch
 * on the parent, left by the very read of the children that granted our
 * hold, sees every request that comes after the grant: nothing can come
 * unseen between the read and the watch.
 *
 * What a change means: while we hold, our node does not change (our
 * release forgets the hold before it deletes the node), so an event while
 * we hold is someone else's change, and the holder is told at once. A
 * watch fires once and is not left again then: once told, the hold ends
 * for real, and the next grant's read leaves a new watch (between holds a
 * watch would only cost every watching client a read at each change).
 * The first watch of a name is left after its grant, by a read of its
 * own: the parent's cversion, which counts every change of the children,
 * tells whether anyone came between the granting read and that one.
 * Between our holds nothing is told: the core ignores calls then, and a
 * request already queued at our next grant is reported by the grant
 * itself (others_waiting). A lost connection may have hidden a change:
 * the holder is told too. After an expired session the watch is gone;
 * the next grant's read leaves it again on the new session.
 *
 * Lifetime: the client library may still call a watcher or a completion
 * after the lock stopped watching, so the state is its own allocation,
 * freed when nothing of the client library refers to it any more (or at
 * close); unwatch only forgets the lock. */
#include "config.h"

#include "zk_backend.h"

#include <stdlib.h>
#include <string.h>

struct zk_wanted {
    struct zk_wanted *next;          /* the instance's list (inst->wanted_mu) */
    struct zk_instance *inst;
    struct dlock_provider_lock *lk;  /* NULL once unwatched */
    char *parent;
    bool held;                       /* we hold the name (our node stands first) */
    int32_t held_cversion;           /* the parent's cversion read by the granting read */
    int pending;                     /* watches left and completions due, not yet called */
};

static void child_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* Tells the holder (inst->wanted_mu held); nothing between holds. */
static void tell(struct zk_wanted *w)
{
    if (w->lk && w->held)
        w->inst->tell_wanted(w->lk);
}

/* Unlinks and frees w once it is unwatched and nothing refers to it
 * (inst->wanted_mu held). */
static void free_if_done(struct zk_wanted *w)
{
    if (w->lk || w->pending > 0)
        return;
    for (struct zk_wanted **p = &w->inst->wanted_list; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    free(w->parent);
    free(w);
}

static void child_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    struct zk_wanted *w = ctx;
    struct zk_instance *inst = w->inst;
    pthread_mutex_lock(&inst->wanted_mu);
    if (type == ZOO_SESSION_EVENT) {
        /* Every watcher hears the session's events and stays left, but
         * an expired session takes its watches with it. */
        if (state == ZOO_EXPIRED_SESSION_STATE) {
            /* The watches went with the session; how many were left is not
             * known, so w stays until close. */
            tell(w);
        } else if (state != ZOO_CONNECTED_STATE) {
            tell(w); /* the connection is gone: a change may not reach us */
        }
        free_if_done(w);
        pthread_mutex_unlock(&inst->wanted_mu);
        return;
    }
    w->pending--; /* one call for every watch left on this path */
    /* While we hold, our node does not change: the change is someone
     * else's, told at once. Not proven: the client library answers a
     * synchronous read on its IO thread and runs watchers on its
     * completion thread, so the event of a request made just after our
     * granting read can run here before the grant is ours, and is then
     * not told (telling every event between holds instead made holds
     * granted after a wait unkeepable: the predecessor's delete comes
     * late). The watch is not left again here: once told, this hold ends
     * for real, and the next grant's read leaves a new one; between holds
     * a watch would only cost every watching client a read at each
     * change. */
    tell(w);
    free_if_done(w);
    pthread_mutex_unlock(&inst->wanted_mu);
}

int zk_wanted_watch(struct zk_instance *inst, struct dlock_provider_lock *lk)
{
    struct zk_lock *zl = lk->priv;
    if (zl->wanted)
        return DLOCK_OK;
    if (!zl->parent || !zl->node)
        return dlock_seterr(DLOCK_EINVAL, "zookeeper: a name is watched for requests only while it is held");
    struct zk_wanted *w = calloc(1, sizeof *w);
    if (!w || !(w->parent = strdup(zl->parent))) {
        free(w);
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    }
    w->inst = inst;
    w->lk = lk;
    w->held = true;
    w->held_cversion = zl->held_cversion;
    pthread_mutex_lock(&inst->wanted_mu);
    w->next = inst->wanted_list;
    inst->wanted_list = w;
    zl->wanted = w;
    pthread_mutex_unlock(&inst->wanted_mu);
    /* The first watch: a synchronous read that leaves it, and whose
     * cversion shows whoever asked since the grant. */
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(&inst->session, &zh, &generation);
    if (rc != DLOCK_OK) {
        zk_wanted_unwatch(inst, lk);
        return rc;
    }
    struct String_vector children = { 0, NULL };
    struct Stat st;
    int zrc = zk_wanted_read_children(inst, zh, zl, &children, &st);
    zk_session_put(&inst->session);
    if (zrc != ZOK) {
        zk_wanted_unwatch(inst, lk);
        return zk_error(&inst->session, zrc, "watching the requests under", zl->parent);
    }
    deallocate_String_vector(&children);
    pthread_mutex_lock(&inst->wanted_mu);
    if (st.cversion > w->held_cversion)
        tell(w);
    pthread_mutex_unlock(&inst->wanted_mu);
    return DLOCK_OK;
}

void zk_wanted_unwatch(struct zk_instance *inst, struct dlock_provider_lock *lk)
{
    struct zk_lock *zl = lk->priv;
    struct zk_wanted *w = zl->wanted;
    if (!w)
        return;
    pthread_mutex_lock(&inst->wanted_mu);
    w->lk = NULL;
    w->held = false;
    zl->wanted = NULL;
    free_if_done(w);
    pthread_mutex_unlock(&inst->wanted_mu);
}

int zk_wanted_read_children(struct zk_instance *inst, zhandle_t *zh, struct zk_lock *zl,
                            struct String_vector *children, struct Stat *st)
{
    struct zk_wanted *w = zl->wanted;
    if (!w)
        return zoo_get_children2(zh, zl->parent, 0, children, st);
    /* Counted even where the client library keeps the one watch it has
     * for this watcher and path (and so calls it once for both): the
     * count may stay above what is due, which only keeps w until close,
     * never frees it while a watch could still call it. */
    pthread_mutex_lock(&inst->wanted_mu);
    w->pending++;
    pthread_mutex_unlock(&inst->wanted_mu);
    int zrc = zoo_wget_children2(zh, zl->parent, child_watch_fired, w, children, st);
    if (zrc != ZOK) {
        pthread_mutex_lock(&inst->wanted_mu);
        w->pending--; /* the read failed: it left no watch */
        pthread_mutex_unlock(&inst->wanted_mu);
    }
    return zrc;
}

void zk_wanted_held(struct zk_instance *inst, struct zk_lock *zl, bool held)
{
    struct zk_wanted *w = zl->wanted;
    if (!w)
        return;
    pthread_mutex_lock(&inst->wanted_mu);
    w->held = held;
    w->held_cversion = zl->held_cversion;
    pthread_mutex_unlock(&inst->wanted_mu);
}

void zk_wanted_close(struct zk_instance *inst)
{
    /* After the session's end: no watcher or completion runs any more. */
    while (inst->wanted_list) {
        struct zk_wanted *w = inst->wanted_list;
        inst->wanted_list = w->next;
        free(w->parent);
        free(w);
    }
}
