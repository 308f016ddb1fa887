/* backends/zookeeper/zk_nodes.c - our nodes in the tree: the root and a
 * name's parent made when missing, our sequential node created, found
 * again by its owner tag after a create whose reply was lost, replaced and
 * deleted; and the orphans, nodes of ours that may exist without our
 * knowing their names, deleted at the next chance. */
#include "config.h"

#include "zk_backend.h"
#include "zk_names.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void zk_forget_node(struct zk_lock *zl)
{
    free(zl->node);
    zl->node = NULL;
    free(zl->predecessor);
    zl->predecessor = NULL;
}

void zk_add_orphan(struct zk_instance *inst, const char *parent, const char *prefix)
{
    struct zk_orphan *o = calloc(1, sizeof *o);
    if (!o || !(o->parent = strdup(parent))) {
        free(o);
        return; /* the session's end will still remove it */
    }
    snprintf(o->prefix, sizeof o->prefix, "%s", prefix);
    pthread_mutex_lock(&inst->orphan_mu);
    o->next = inst->orphans;
    inst->orphans = o;
    pthread_mutex_unlock(&inst->orphan_mu);
}

/* Deletes remembered orphans; keeps those it could not reach. */
void zk_sweep_orphans(struct zk_instance *inst, zhandle_t *zh)
{
    pthread_mutex_lock(&inst->orphan_mu);
    struct zk_orphan *list = inst->orphans;
    inst->orphans = NULL;
    pthread_mutex_unlock(&inst->orphan_mu);
    while (list) {
        struct zk_orphan *o = list;
        list = o->next;
        struct String_vector children = { 0, NULL };
        int zrc = zoo_get_children(zh, o->parent, 0, &children);
        bool done = zrc == ZOK || zrc == ZNONODE;
        for (int i = 0; zrc == ZOK && i < children.count; i++) {
            if (strncmp(children.data[i], o->prefix, strlen(o->prefix)) != 0)
                continue;
            char *path = zk_join(o->parent, children.data[i]);
            int drc = path ? zoo_delete(zh, path, -1) : ZSYSTEMERROR;
            done &= drc == ZOK || drc == ZNONODE;
            free(path);
        }
        deallocate_String_vector(&children);
        if (done) {
            free(o->parent);
            free(o);
        } else {
            pthread_mutex_lock(&inst->orphan_mu);
            o->next = inst->orphans;
            inst->orphans = o;
            pthread_mutex_unlock(&inst->orphan_mu);
        }
    }
}

/* Creates every level of the root that is missing (persistent nodes). */
int zk_ensure_root(struct zk_instance *inst, zhandle_t *zh)
{
    /* Atomic: threads contending for different names reach here together;
     * two that both see it unset both create the levels, which is harmless
     * (ZNODEEXISTS). */
    if (__atomic_load_n(&inst->root_ready, __ATOMIC_ACQUIRE))
        return DLOCK_OK;
    char path[sizeof inst->root];
    for (const char *p = inst->root + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        size_t n = (size_t)(p - inst->root);
        memcpy(path, inst->root, n);
        path[n] = '\0';
        int zrc = zoo_create(zh, path, NULL, -1, inst->acl, ZOO_PERSISTENT, NULL, 0);
        if (zrc != ZOK && zrc != ZNODEEXISTS)
            return zk_error(&inst->session, zrc, "creating", path);
        if (*p == '\0')
            break;
    }
    __atomic_store_n(&inst->root_ready, true, __ATOMIC_RELEASE);
    return DLOCK_OK;
}

/* The lock's parent, a container node: the server removes it once its last
 * child is gone, so the names of past locks do not pile up. */
int zk_ensure_parent(struct zk_instance *inst, zhandle_t *zh, const char *parent)
{
    int rc = zk_ensure_root(inst, zh);
    if (rc != DLOCK_OK)
        return rc;
    int zrc = zoo_create(zh, parent, NULL, -1, inst->acl, ZOO_CONTAINER, NULL, 0);
    if (zrc == ZNONODE) { /* the root was removed behind our back */
        __atomic_store_n(&inst->root_ready, false, __ATOMIC_RELEASE);
        if ((rc = zk_ensure_root(inst, zh)) != DLOCK_OK)
            return rc;
        zrc = zoo_create(zh, parent, NULL, -1, inst->acl, ZOO_CONTAINER, NULL, 0);
    }
    if (zrc != ZOK && zrc != ZNODEEXISTS)
        return zk_error(&inst->session, zrc, "creating", parent);
    return DLOCK_OK;
}

/* Finds our node among the parent's children after a create whose answer
 * was lost. DLOCK_OK with zl->node set, DLOCK_OK with it NULL (not there),
 * or a failure. */
int zk_find_own_node(struct zk_instance *inst, zhandle_t *zh, struct zk_lock *zl)
{
    struct String_vector children = { 0, NULL };
    int zrc = zoo_get_children(zh, zl->parent, 0, &children);
    if (zrc == ZNONODE)
        return DLOCK_OK;
    if (zrc != ZOK)
        return zk_error(&inst->session, zrc, "listing", zl->parent);
    int rc = DLOCK_OK;
    for (int i = 0; i < children.count && !zl->node; i++) {
        if (strncmp(children.data[i], zl->prefix, strlen(zl->prefix)) != 0)
            continue;
        zl->node = zk_join(zl->parent, children.data[i]);
        struct Stat st;
        if (!zl->node)
            rc = dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
        else if ((zrc = zoo_exists(zh, zl->node, 0, &st)) == ZOK)
            zl->czxid = st.czxid;
        else
            zk_forget_node(zl);
    }
    deallocate_String_vector(&children);
    return rc;
}

/* True when zl's node was made for lk's current owner (the same client and
 * thread), whatever the attempt. */
bool zk_node_of_owner(const struct zk_lock *zl, const struct dlock_provider_lock *lk)
{
    char tag[128];
    if (!zk_node_prefix(lk->owner, tag, sizeof tag))
        return false;
    size_t n = strlen(tag) - strlen("-lock-");
    return strncmp(zl->prefix, tag, n) == 0 && zl->prefix[n] == '_';
}

/* A new attempt's node name (see zk_backend.h). */
int zk_new_node_path(struct dlock_provider_lock *lk, char **path)
{
    struct zk_lock *zl = lk->priv;
    char tag[128];
    uint32_t nonce;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = (uint32_t)rand();
    if (!zk_node_prefix(lk->owner, tag, sizeof tag) || strlen(tag) + 9 >= sizeof zl->prefix)
        return dlock_seterr(DLOCK_EINTERNAL, "zookeeper: owner id too long");
    tag[strlen(tag) - strlen("-lock-")] = '\0';
    char kind[16] = "";
    if (lk->mode == DLOCK_MODE_SHARED)
        snprintf(kind, sizeof kind, "~s");
    else if (lk->mode == DLOCK_MODE_SEMAPHORE)
        snprintf(kind, sizeof kind, "~p%u", lk->permits);
    snprintf(zl->prefix, sizeof zl->prefix, "%s_%08x%s-lock-", tag, nonce, kind);
    *path = zk_join(zl->parent, zl->prefix);
    return *path ? DLOCK_OK : dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
}

/* Queues the owner: creates its ephemeral sequential node. The node's name
 * carries the owner and a random tag of this attempt, as Curator's
 * protected mode does: a create whose reply was lost is found, or swept
 * later, by that exact tag, so a sweep can never take a node of a later
 * attempt by the same thread (one it may hold by then). */
int zk_create_own_node(struct zk_instance *inst, zhandle_t *zh, struct dlock_provider_lock *lk)
{
    struct zk_lock *zl = lk->priv;
    char *path = NULL, created[ZK_PATH_MAX];
    int rc = zk_new_node_path(lk, &path);
    if (rc != DLOCK_OK)
        return rc;
    for (int attempt = 0; attempt < 3; attempt++) {
        struct Stat st;
        int zrc = zoo_create2(zh, path, lk->owner, (int)strlen(lk->owner), inst->acl, ZOO_EPHEMERAL_SEQUENTIAL,
                              created, sizeof created, &st);
        if (zrc == ZOK) {
            zl->node = strdup(created);
            zl->czxid = st.czxid;
            rc = zl->node ? DLOCK_OK : dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
            break;
        }
        if (zrc == ZNONODE) { /* no parent yet, or the container was just reaped */
            if ((rc = zk_ensure_parent(inst, zh, zl->parent)) != DLOCK_OK)
                break;
            continue;
        }
        rc = zk_error(&inst->session, zrc, "creating a node under", zl->parent);
        if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT) {
            /* It may have been created: look for it by our tag, and if it
             * cannot be found now, delete it later. */
            if (zk_find_own_node(inst, zh, zl) != DLOCK_OK || !zl->node)
                zk_add_orphan(inst, zl->parent, zl->prefix);
            else
                rc = DLOCK_OK;
        }
        break;
    }
    free(path);
    return rc;
}

/* Leaves the queue (or gives up the hold): deletes our node, or remembers
 * it when the server cannot be told now. */
int zk_delete_own_node(struct zk_instance *inst, zhandle_t *zh, struct zk_lock *zl)
{
    if (!zl->node)
        return DLOCK_ENOTOWNER;
    int zrc = zoo_delete(zh, zl->node, -1);
    int rc = zrc == ZOK ? DLOCK_OK : zrc == ZNONODE ? DLOCK_ENOTOWNER : zk_error(&inst->session, zrc, "deleting", zl->node);
    if (rc == DLOCK_EUNAVAILABLE)
        zk_add_orphan(inst, zl->parent, zl->prefix);
    zk_forget_node(zl);
    return rc;
}

/* Puts the node new_path (a child of the same parent with our node's
 * sequence number, so the same place in line) in the place of ours, in one
 * multi: ours is deleted and new_path created as an ephemeral of this
 * session holding data. There is no moment when neither node is there,
 * and the waiters behind keep their places. Returns the multi's ZooKeeper
 * result; *own_gone says it failed because our node was no longer there. */
int zk_replace_own_node(zhandle_t *zh, const struct zk_lock *zl, const char *data, const struct ACL_vector *acl,
                            const char *new_path, bool *own_gone)
{
    zoo_op_t ops[2];
    zoo_op_result_t results[2];
    char created[ZK_PATH_MAX];
    zoo_delete_op_init(&ops[0], zl->node, -1);
    zoo_create_op_init(&ops[1], new_path, data, (int)strlen(data), acl, ZOO_EPHEMERAL, created, sizeof created);
    memset(results, 0, sizeof results);
    int zrc = zoo_multi(zh, 2, ops, results);
    *own_gone = zrc == ZNONODE && results[0].err == ZNONODE;
    return zrc;
}

/* Whether the node at path is one of this session: DLOCK_OK,
 * DLOCK_ELOST (gone, or another session's), or a failure. */
int zk_node_is_ours(struct zk_instance *inst, zhandle_t *zh, const char *path)
{
    struct Stat st;
    int zrc = zoo_exists(zh, path, 0, &st);
    if (zrc == ZOK && st.ephemeralOwner == zoo_client_id(zh)->client_id)
        return DLOCK_OK;
    if (zrc == ZOK || zrc == ZNONODE)
        return dlock_seterr(DLOCK_ELOST, "zookeeper: the lock is no longer held by this owner: its node %s is gone",
                            path);
    return zk_error(&inst->session, zrc, "checking", path);
}

/* Forgets a remembered orphan: the node it stands for turned out to be a
 * hold after all. */
void zk_drop_orphan(struct zk_instance *inst, const char *parent, const char *prefix)
{
    pthread_mutex_lock(&inst->orphan_mu);
    for (struct zk_orphan **o = &inst->orphans; *o; o = &(*o)->next) {
        if (strcmp((*o)->parent, parent) == 0 && strcmp((*o)->prefix, prefix) == 0) {
            struct zk_orphan *gone = *o;
            *o = gone->next;
            free(gone->parent);
            free(gone);
            break;
        }
    }
    pthread_mutex_unlock(&inst->orphan_mu);
}
