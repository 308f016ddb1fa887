/* backends/zookeeper/zk_wanted.c - telling a holder that another owner asks
 * for its name (lock caching: watch_wanted and unwatch_wanted).
 *
 * Every request for a name, a try included, creates a node under the
 * name's parent; a dlock break deletes the holder's node. So a child watch
 * on the parent, left by the very read of the children that granted our
 * hold, sees every request that comes after the grant: nothing can come
 * unseen between the read and the watch.
 *
 * Each read of a watched name leaves a watch of its own (its own context,
 * which the client library keeps apart from the others), numbered in the
 * order of the reads. The client library answers a synchronous read on its
 * IO thread but runs watchers on its completion thread, so the event of a
 * request made just after our granting read may run before the attempt
 * has said that the read granted. The number tells what the event follows:
 * - a watch left by the granting read (or a later one) fires for a change
 *   after the grant, which is someone else's: our node does not change
 *   while we hold, and our release forgets the hold before it deletes the
 *   node. The holder is told, at once or, where the event ran first, when
 *   the grant is said (zk_wanted_held);
 * - a watch left by an earlier read fires for a change before the grant
 *   (the predecessor's going, most often), which that read's successor
 *   has seen; others queued then are reported by the grant itself
 *   (others_waiting). It is not told.
 * A watch is not left again by its event: once told, the hold ends for
 * real, and the next grant's read leaves a new one.
 *
 * The first watch of a name is left after its grant, by a read of its
 * own: the parent's cversion, which counts every change of the children,
 * tells whether anyone came between the granting read and that one. A
 * lost connection may have hidden a change: the holder is told too.
 *
 * Lifetime: the client library may still call a watcher after the lock
 * stopped watching, so the state is its own allocation, freed once every
 * watch it left has fired (or at close); unwatch only forgets the lock.
 * The watches of an expired session never fire: they are freed at the
 * next read of the name on a new session, or when a name is next watched,
 * or at close. */
#include "config.h"

#include "zk_backend.h"

#include <stdlib.h>
#include <string.h>

struct zk_wanted;

/* The watch one read left; its event is this context's, once. */
struct zk_read_watch {
    struct zk_read_watch *next;      /* w->watches */
    struct zk_wanted *w;
    uint64_t read_no;                /* the read that left it */
    uint64_t generation;             /* the session it was left on */
};

struct zk_wanted {
    struct zk_wanted *next;          /* the instance's list (inst->wanted_mu) */
    struct zk_instance *inst;
    struct dlock_provider_lock *lk;  /* NULL once unwatched */
    char *parent;
    bool held;                       /* we hold the name (our node stands first) */
    int32_t held_cversion;           /* the parent's cversion read by the granting read */
    uint64_t reads;                  /* reads that left a watch, numbered from 1 */
    uint64_t granting_read;          /* the read that granted the hold (or left its first watch) */
    uint64_t latest_fired;           /* the latest read whose watch has fired */
    struct zk_read_watch *watches;   /* left and not fired yet */
};

static void child_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* Tells the holder (inst->wanted_mu held); nothing between holds. */
static void tell(struct zk_wanted *w)
{
    if (w->lk && w->held)
        w->inst->tell_wanted(w->lk);
}

/* Unlinks and frees w once it is unwatched and no watch of it is left
 * (inst->wanted_mu held). */
static void free_if_done(struct zk_wanted *w)
{
    if (w->lk || w->watches)
        return;
    for (struct zk_wanted **p = &w->inst->wanted_list; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    free(w->parent);
    free(w);
}

static void forget_watch(struct zk_wanted *w, struct zk_read_watch *rw)
{
    for (struct zk_read_watch **p = &w->watches; *p; p = &(*p)->next)
        if (*p == rw) {
            *p = rw->next;
            break;
        }
    free(rw);
}

/* The watches left on a session before this one never fire: that session
 * was closed, and its handle with them (inst->wanted_mu held). */
static void forget_older_sessions(struct zk_wanted *w, uint64_t generation)
{
    struct zk_read_watch **p = &w->watches;
    while (*p) {
        struct zk_read_watch *rw = *p;
        if (rw->generation != generation) {
            *p = rw->next;
            free(rw);
        } else
            p = &rw->next;
    }
}

/* Frees the states of names no longer watched whose watches were all
 * left on sessions before this one (generation), so that they do not pile
 * up until close across expiries. */
static void forget_unwatched_of_older_sessions(struct zk_instance *inst, uint64_t generation)
{
    pthread_mutex_lock(&inst->wanted_mu);
    struct zk_wanted *w = inst->wanted_list;
    while (w) {
        struct zk_wanted *next = w->next;
        if (!w->lk) {
            forget_older_sessions(w, generation);
            free_if_done(w);
        }
        w = next;
    }
    pthread_mutex_unlock(&inst->wanted_mu);
}

static void child_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    struct zk_read_watch *rw = ctx;
    struct zk_wanted *w = rw->w;
    struct zk_instance *inst = w->inst;
    pthread_mutex_lock(&inst->wanted_mu);
    if (type == ZOO_SESSION_EVENT) {
        /* Every watcher hears the session's events and stays left (an
         * expired session's watches never fire: see the lifetime above). */
        if (state != ZOO_CONNECTED_STATE)
            tell(w); /* the connection is gone: a change may not reach us */
        pthread_mutex_unlock(&inst->wanted_mu);
        return;
    }
    uint64_t read_no = rw->read_no;
    forget_watch(w, rw);
    if (read_no > w->latest_fired)
        w->latest_fired = read_no;
    if (read_no >= w->granting_read)
        tell(w); /* a change after the grant: someone else's */
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
    w->granting_read = 1; /* the read below: its watch is the hold's */
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
    forget_unwatched_of_older_sessions(inst, generation);
    struct String_vector children = { 0, NULL };
    struct Stat st;
    int zrc = zk_wanted_read_children(inst, zh, generation, zl, &children, &st);
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

int zk_wanted_read_children(struct zk_instance *inst, zhandle_t *zh, uint64_t generation, struct zk_lock *zl,
                            struct String_vector *children, struct Stat *st)
{
    struct zk_wanted *w = zl->wanted;
    if (!w)
        return zoo_get_children2(zh, zl->parent, 0, children, st);
    struct zk_read_watch *rw = calloc(1, sizeof *rw);
    if (!rw)
        return ZSYSTEMERROR;
    rw->w = w;
    rw->generation = generation;
    pthread_mutex_lock(&inst->wanted_mu);
    forget_older_sessions(w, generation);
    rw->read_no = ++w->reads;
    rw->next = w->watches;
    w->watches = rw;
    pthread_mutex_unlock(&inst->wanted_mu);
    int zrc = zoo_wget_children2(zh, zl->parent, child_watch_fired, rw, children, st);
    if (zrc != ZOK) {
        pthread_mutex_lock(&inst->wanted_mu);
        forget_watch(w, rw); /* the read failed: it left no watch */
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
    if (held) {
        /* The attempt's last read granted. Its watch may have fired
         * already, before this: someone asked after the grant. */
        w->granting_read = w->reads;
        if (w->latest_fired >= w->granting_read)
            tell(w);
    }
    pthread_mutex_unlock(&inst->wanted_mu);
}

void zk_wanted_close(struct zk_instance *inst)
{
    /* After the session's end: no watcher or completion runs any more. */
    while (inst->wanted_list) {
        struct zk_wanted *w = inst->wanted_list;
        inst->wanted_list = w->next;
        while (w->watches) {
            struct zk_read_watch *rw = w->watches;
            w->watches = rw->next;
            free(rw);
        }
        free(w->parent);
        free(w);
    }
}
