/* backends/zookeeper/zk_wanted.c - telling a holder that another owner asks
 * for its name (lock caching: watch_wanted and unwatch_wanted).
 *
 * Every request for a name, a try included, creates a node under the
 * name's parent; a dlock break deletes the holder's node. So a child watch
 * on the parent, left by the very read of the children that granted our
 * hold, sees every request that comes after the grant: nothing can come
 * unseen between the read and the watch. A watch fires once; it is left
 * again at once (an asynchronous read of the children, from the client's
 * completion thread), and the read's answer is looked at too, since a
 * request may have come while the watch was down.
 *
 * What a change means: the parent's cversion counts every change of its
 * children. The read that granted our hold gave one; a later read (the
 * one that leaves the watch again) with a greater one, while we still
 * hold, saw a change that was not ours (our node does not change while
 * we hold; our release forgets the hold before it deletes the node), so
 * the holder is told. A try that created its node and deleted it again
 * before the read still counts twice. Between our holds nothing is told:
 * the core ignores calls then, and a request already queued at our next
 * grant is reported by the grant itself (others_waiting). A lost
 * connection may have hidden a change: the holder is told too. After an
 * expired session the watch is gone; the next grant's read of the
 * children leaves it again on the new session.
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
static void children_read(int rc, const struct String_vector *children, const struct Stat *stat,
                          const void *data);

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

/* Leaves the watch again from the completion thread (inst->wanted_mu
 * held): an asynchronous read of the children that leaves a watch. */
static void rearm(struct zk_wanted *w, zhandle_t *zh)
{
    if (!w->lk)
        return;
    w->pending += 2; /* the watch, and the read's completion */
    if (zoo_awget_children2(zh, w->parent, child_watch_fired, w, children_read, w) != ZOK) {
        w->pending -= 2;
        tell(w); /* no watch: a request could go unheard */
    }
}

static void child_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
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
    /* What changed is for the read that leaves the watch again to say. */
    rearm(w, zh);
    free_if_done(w);
    pthread_mutex_unlock(&inst->wanted_mu);
}

static void children_read(int rc, const struct String_vector *children, const struct Stat *stat,
                          const void *data)
{
    (void)children;
    struct zk_wanted *w = (struct zk_wanted *)data;
    struct zk_instance *inst = w->inst;
    pthread_mutex_lock(&inst->wanted_mu);
    w->pending--;
    if (rc != ZOK) {
        /* No watch was left: the next grant leaves one. Until then a
         * request could go unheard. */
        w->pending--;
        tell(w);
    } else if (stat && stat->cversion > w->held_cversion) {
        tell(w); /* the children changed since our grant, not by us */
    }
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
