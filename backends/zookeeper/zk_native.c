/* backends/zookeeper/zk_native.c - an attempt without a thread, for the
 * non-blocking API. The blocking attempt (zk_acquire) is two calls: create
 * our ephemeral sequential node when we have none, then list the parent's
 * children to see where it stands. Here each is sent with the client's
 * asynchronous call (zoo_acreate2, zoo_aget_children); the client's
 * completion thread copies the answer and writes an eventfd, which the
 * core polls; acquire_recv reads the answer, sends the listing after a
 * create, and reads the standing from the list as the blocking attempt
 * does (zk_standing_among).
 *
 * Only what those two calls settle goes this way. Anything that needs
 * more (a parent or root to create, a node of an earlier session or
 * another thread, orphans to sweep, a session being replaced, a lost
 * answer, a node that vanished, a failure after which our node must be
 * deleted) answers DLOCK_ENOTSUP, and the core makes the attempt with
 * acquire, which does those steps. */
#include "config.h"

#include "zk_backend.h"

#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum call_step { STEP_CREATE = 1, STEP_CHILDREN };

/* One asynchronous call's answer. The completion thread fills it and the
 * attempt reads it; each holds a reference, and whichever lets go last
 * frees it (an attempt dropped at its deadline does not wait for the
 * completion, which the client calls in any case, with an error at the
 * latest when the session closes). */
struct zk_call {
    int refs;
    int fd;                          /* eventfd the completion writes */
    bool answered;                   /* set (release) once the fields below are */
    int zrc;
    char *created;                   /* a create's node path */
    int64_t czxid;                   /* and its creation zxid */
    struct String_vector children;   /* a listing's copy */
};

static struct zk_call *call_new(void)
{
    struct zk_call *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (k->fd < 0) {
        free(k);
        return NULL;
    }
    k->refs = 1;
    return k;
}

static void call_unref(struct zk_call *k)
{
    if (__atomic_sub_fetch(&k->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    close(k->fd);
    free(k->created);
    deallocate_String_vector(&k->children);
    free(k);
}

static void call_drain(struct zk_call *k)
{
    uint64_t n;
    while (read(k->fd, &n, sizeof n) == (ssize_t)sizeof n)
        ;
}

/* Before a call is sent: the completion's reference, and a clean answer. */
static void call_arm(struct zk_call *k)
{
    call_drain(k);
    __atomic_store_n(&k->answered, false, __ATOMIC_RELAXED);
    free(k->created);
    k->created = NULL;
    deallocate_String_vector(&k->children);
    k->children = (struct String_vector){ 0, NULL };
    __atomic_add_fetch(&k->refs, 1, __ATOMIC_RELAXED);
}

/* On the completion thread: the answer is in k. */
static void call_answered(struct zk_call *k, int zrc)
{
    k->zrc = zrc;
    __atomic_store_n(&k->answered, true, __ATOMIC_RELEASE);
    uint64_t one = 1;
    ssize_t w = write(k->fd, &one, sizeof one);
    (void)w; /* an eventfd at its limit is readable already */
    call_unref(k);
}

static void created(int zrc, const char *path, const struct Stat *st, const void *data)
{
    struct zk_call *k = (struct zk_call *)data;
    if (zrc == ZOK) {
        k->created = path ? strdup(path) : NULL;
        k->czxid = st ? st->czxid : 0;
        if (!k->created)
            zrc = ZSYSTEMERROR;
    }
    call_answered(k, zrc);
}

static void listed(int zrc, const struct String_vector *v, const void *data)
{
    struct zk_call *k = (struct zk_call *)data;
    if (zrc == ZOK && v && v->count > 0) {
        k->children.data = calloc((size_t)v->count, sizeof *k->children.data);
        for (int i = 0; k->children.data && i < v->count; i++) {
            if (!(k->children.data[i] = strdup(v->data[i]))) {
                zrc = ZSYSTEMERROR;
                break;
            }
            k->children.count = i + 1;
        }
        if (!k->children.data)
            zrc = ZSYSTEMERROR;
    }
    call_answered(k, zrc);
}

static bool orphans_pending(struct zk_instance *inst)
{
    pthread_mutex_lock(&inst->orphan_mu);
    bool any = inst->orphans != NULL;
    pthread_mutex_unlock(&inst->orphan_mu);
    return any;
}

/* Sends the next call of the attempt on zh: the create when zl has no
 * node, else the listing. ZOK when it is on its way. */
static int send_call(struct zk_instance *inst, zhandle_t *zh, struct dlock_provider_lock *lk, struct zk_call *k)
{
    struct zk_lock *zl = lk->priv;
    call_arm(k);
    int zrc;
    if (!zl->node) {
        char *path = NULL;
        if (zk_new_node_path(lk, &path) != DLOCK_OK) {
            zrc = ZSYSTEMERROR;
        } else {
            zrc = zoo_acreate2(zh, path, lk->owner, (int)strlen(lk->owner), inst->acl, ZOO_EPHEMERAL_SEQUENTIAL,
                               created, k);
            free(path);
        }
        zl->call_step = STEP_CREATE;
    } else {
        zrc = zoo_aget_children(zh, zl->parent, 0, listed, k);
        zl->call_step = STEP_CHILDREN;
    }
    /* Not sent: its completion will not come, except after a marshalling
     * error, where the client may have registered it already (the
     * reference is then left to it: a record lost to an out-of-memory
     * failure rather than one freed twice). */
    if (zrc != ZOK && zrc != ZMARSHALLINGERROR)
        call_unref(k);
    return zrc;
}

int zk_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    if (!zl->parent || !__atomic_load_n(&inst->root_ready, __ATOMIC_ACQUIRE) || orphans_pending(inst))
        return DLOCK_ENOTSUP;
    zhandle_t *zh;
    uint64_t generation;
    if (zk_session_try_get(&inst->session, &zh, &generation) != DLOCK_OK)
        return DLOCK_ENOTSUP;
    int rc = DLOCK_ENOTSUP;
    struct zk_call *k = NULL;
    bool node_current = !zl->node || (zl->generation == generation && zk_node_of_owner(zl, lk));
    if (node_current && (k = call_new()) && send_call(inst, zh, lk, k) == ZOK) {
        zl->call = k;
        zl->call_generation = generation;
        zl->call_lease_ms = zoo_recv_timeout(zh);
        /* Two calls at most, each ended by the client within its session
         * timeout (a connection silent that long is given up, and its
         * calls fail). */
        io->fd = k->fd;
        io->timeout_ms = 2 * (int64_t)(zl->call_lease_ms > 0 ? zl->call_lease_ms : inst->session.timeout_ms);
        io->priv = zl;
        rc = DLOCK_OK;
    } else if (k) {
        call_unref(k);
    }
    zk_session_put(&inst->session);
    return rc;
}

/* The create's answer: the listing sent on, or DLOCK_ENOTSUP. */
static int after_create(struct zk_instance *inst, struct dlock_provider_lock *lk, struct zk_call *k)
{
    struct zk_lock *zl = lk->priv;
    if (k->zrc == ZCONNECTIONLOSS || k->zrc == ZOPERATIONTIMEOUT || k->zrc == ZCLOSING ||
        k->zrc == ZSYSTEMERROR) {
        /* It may have been created: the sweep that acquire starts with
         * deletes it by this attempt's tag. */
        zk_add_orphan(inst, zl->parent, zl->prefix);
        return DLOCK_ENOTSUP;
    }
    if (k->zrc != ZOK)
        return DLOCK_ENOTSUP; /* no parent yet, or refused: acquire creates it, or says why */
    zl->node = k->created;
    k->created = NULL;
    zl->czxid = k->czxid;
    zl->generation = zl->call_generation;
    zhandle_t *zh;
    uint64_t generation;
    if (zk_session_try_get(&inst->session, &zh, &generation) != DLOCK_OK)
        return DLOCK_ENOTSUP; /* acquire lists with the node it now knows */
    int zrc = generation == zl->generation ? send_call(inst, zh, lk, k) : ZSESSIONEXPIRED;
    zk_session_put(&inst->session);
    return zrc == ZOK ? DLOCK_PROVIDER_AGAIN : DLOCK_ENOTSUP;
}

int zk_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                    struct dlock_grant *g)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    struct zk_call *k = zl->call;
    /* Drained first: a completion that writes after this makes the
     * descriptor readable again (the create's may write after the answer
     * is read and the listing sent, which finds no answer here yet). */
    call_drain(k);
    if (!__atomic_load_n(&k->answered, __ATOMIC_ACQUIRE))
        return DLOCK_PROVIDER_AGAIN;
    int rc;
    if (zl->call_step == STEP_CREATE) {
        rc = after_create(inst, lk, k);
        if (rc == DLOCK_PROVIDER_AGAIN)
            return rc;
    } else if (k->zrc == ZOK) {
        rc = zk_standing_among(lk, zl, &k->children);
    } else {
        rc = k->zrc == ZNONODE ? DLOCK_ENOTOWNER : DLOCK_ENOTSUP;
    }
    zl->call = NULL;
    io->priv = NULL;
    call_unref(k);
    if (rc == DLOCK_OK) {
        g->fence = (uint64_t)zl->czxid;
        g->has_fence = 1;
        if (zl->call_lease_ms > 0)
            g->lease_ms = zl->call_lease_ms;
        return DLOCK_OK;
    }
    if (rc == DLOCK_EBUSY) {
        g->retry_hint_ms = -1;
        return rc;
    }
    if (rc == DLOCK_ENOTOWNER)
        zk_forget_node(zl); /* deleted behind our back: acquire queues again */
    /* Anything else acquire does itself: it lists again and, if that
     * fails, deletes our node so it does not stay in front of others. */
    return DLOCK_ENOTSUP;
}

void zk_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    io->priv = NULL;
    struct zk_call *k = zl->call;
    if (!k)
        return;
    zl->call = NULL;
    /* No answer in time: a node this attempt made (or may have made)
     * must not stay in front of others. It cannot be deleted here without
     * waiting: it is remembered, and the next acquire's sweep deletes it,
     * as after a delete that could not reach the server. */
    zk_add_orphan(inst, zl->parent, zl->prefix);
    if (zl->node)
        zk_forget_node(zl);
    call_unref(k);
}

void zk_native_forget(struct zk_lock *zl)
{
    if (zl->call) {
        call_unref(zl->call);
        zl->call = NULL;
    }
}
