/* backends/zookeeper/zookeeper.c - the zookeeper backend module
 * (dlock_zookeeper.so), over the multi-threaded C client.
 *
 * The lock recipe (ZooKeeper's own, as Curator's InterProcessMutex): a
 * contender creates an ephemeral sequential node under the lock's parent
 * (zk_names.h) holding its owner id; the lowest sequence holds the lock; a
 * waiter watches only the node just before its own, so a release wakes one
 * waiter, not all (no herd), and grants go in arrival order (fair). The
 * holder's node's czxid is the fencing token: zxids are assigned by the
 * leader in one total order, so a later holder, whose node was created
 * after the earlier holder's, always has a larger one (a downgraded hold
 * keeps its own: see below).
 *
 * The hold lives as long as the session (zk_session.h), whose timeout is
 * the lease: if the holder dies or is cut off, the server deletes its node
 * when the session expires. A renewal checks the node is still ours;
 * connection loss answers "unavailable" (suspended: the core's validity
 * keeps counting down from the last renewal) and an expired session "lost".
 *
 * Shared holds and semaphores queue among the same nodes; a node's kind is
 * marked before "-lock-": "~s" shared, "~p<N>" a permit of a semaphore of
 * N, nothing for exclusive (owner tags never contain '~'). As Curator's
 * read/write lock: a shared node holds when no exclusive node is below it
 * and watches the nearest exclusive one below; an exclusive node holds when
 * it is the lowest of all, so a waiting writer keeps later readers out. A
 * permit node holds when fewer than N nodes are below it, all of them
 * permits, and watches the parent's children (any holder may let go); a
 * permit node with another N in the queue is an error for both. A name is
 * a lock or a semaphore, never both at once: a permit node below a shared
 * one keeps it out as an exclusive node would, and so does any lock node
 * below a permit.
 *
 * A downgrade replaces the holder's exclusive node by a shared one of the
 * same session with the same name but for the "~s" mark, so the same
 * sequence number and place in line, in one multi (zk_downgrade). The
 * hold keeps its fence, the exclusive node's czxid, which the new node
 * carries in its data after the owner id (the new node's own czxid is
 * above the nodes that queued behind it, so it could not be the token).
 *
 * The listing (zk_list.c) reads the same tree back: a name per parent,
 * holders and waiters from the sequence numbers and kinds; the status
 * describes one name the same way.
 *
 * A contender only ever deletes a node that carries its own owner tag, and
 * one whose create may have happened without a reply (connection loss) is
 * found again by that tag, or remembered and deleted later: no orphan of
 * ours is left queued in front of everyone else. */
#include "config.h"

#include "zk_backend.h"
#include "zk_break.h"
#include "zk_list.h"
#include "zk_names.h"
#include "zk_session.h"
#include "../common/lock_kind.h"

#include <dlock/provider.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

static const struct dlock_setting_spec zk_settings[] = {
    { "hosts", DLOCK_SETTING_STRING, 0, 0 },
    { "root", DLOCK_SETTING_STRING, 0, 0 },
    { "session_timeout_ms", DLOCK_SETTING_INT, 100, 600000 },
    { "connect_timeout_ms", DLOCK_SETTING_INT, 100, 600000 },
    { "auth", DLOCK_SETTING_STRING, 0, 0 },
    { NULL, 0, 0, 0 },
};

/* ---- small helpers --------------------------------------------------------------------- */

/* ---- the tree --------------------------------------------------------------------------- */

/* ---- the provider ---------------------------------------------------------------------- */

static int ensure_names(struct zk_instance *inst, struct dlock_provider_lock *lk)
{
    struct zk_lock *zl = lk->priv;
    if (!zl->parent && !(zl->parent = zk_parent_path(inst->root, lk->name, lk->name_len)))
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    return DLOCK_OK;
}

/* Where our node stands (zk_standing_among), the parent's children read
 * now; DLOCK_ENOTOWNER also when the parent is gone. */
static int standing(struct zk_instance *inst, zhandle_t *zh, uint64_t generation,
                    const struct dlock_provider_lock *lk, struct zk_lock *zl)
{
    struct String_vector children = { 0, NULL };
    struct Stat st;
    int zrc = zk_wanted_read_children(inst, zh, generation, zl, &children, &st);
    if (zrc != ZOK)
        return zrc == ZNONODE ? DLOCK_ENOTOWNER : zk_error(&inst->session, zrc, "listing", zl->parent);
    int rc = zk_standing_among(lk, zl, &children);
    deallocate_String_vector(&children);
    zl->held_cversion = st.cversion;
    return rc;
}

int zk_standing_among(const struct dlock_provider_lock *lk, struct zk_lock *zl,
                      const struct String_vector *list)
{
    const struct String_vector children = *list;
    const char *own = strrchr(zl->node, '/') + 1;
    int64_t own_seq = zk_sequence_of(own), best_below = -1;
    const char *pred = NULL;
    bool found = false, lock_below = false, any_above = false;
    unsigned below = 0, other_n = 0;
    for (int i = 0; i < children.count; i++) {
        int64_t seq = zk_sequence_of(children.data[i]);
        unsigned n = 0;
        char kind = zk_kind_of(children.data[i], &n);
        if (kind == 'p' && lk->mode == DLOCK_MODE_SEMAPHORE && n != lk->permits)
            other_n = n;
        if (strcmp(children.data[i], own) == 0)
            found = true;
        else if (seq > own_seq)
            any_above = true;
        else if (seq >= 0 && seq < own_seq) {
            below++;
            /* A lock request's node below a permit keeps it out, as it
             * would keep out a writer. */
            if (kind != 'p')
                lock_below = true;
            /* A shared node is kept out by an exclusive node or a permit
             * below it (a name is a lock or a semaphore, not both). */
            if ((lk->mode != DLOCK_MODE_SHARED || kind != 's') && seq > best_below) {
                best_below = seq;
                pred = children.data[i];
            }
        }
    }
    zl->wait_children = false;
    zl->others_after = any_above;
    int rc;
    if (!found)
        rc = DLOCK_ENOTOWNER;
    else if (other_n)
        rc = dlock_seterr(DLOCK_EINVAL, "zookeeper: '%s' is a semaphore of %u permits, not %u", lk->name, other_n,
                          lk->permits);
    else if (lk->mode == DLOCK_MODE_SEMAPHORE) {
        rc = below < lk->permits && !lock_below ? DLOCK_OK : DLOCK_EBUSY;
        zl->wait_children = rc == DLOCK_EBUSY;
        pred = NULL;
    } else
        rc = pred ? DLOCK_EBUSY : DLOCK_OK;
    free(zl->predecessor);
    zl->predecessor = NULL;
    if (rc == DLOCK_EBUSY && pred && !(zl->predecessor = zk_join(zl->parent, pred)))
        rc = dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    return rc;
}

static int zk_acquire(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    int rc = ensure_names(inst, lk);
    if (rc != DLOCK_OK)
        return rc;
    zhandle_t *zh;
    uint64_t generation;
    if ((rc = zk_session_get(&inst->session, &zh, &generation)) != DLOCK_OK)
        return rc;
    zk_sweep_orphans(inst, zh);
    if (zl->node && (zl->generation != generation || !zk_node_of_owner(zl, lk))) {
        /* Queued by an earlier session (gone with it) or another thread. */
        if (zl->generation == generation)
            zk_delete_own_node(inst, zh, zl);
        zk_forget_node(zl);
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!zl->node) {
            if ((rc = zk_create_own_node(inst, zh, lk)) != DLOCK_OK)
                break;
            zl->generation = generation;
        }
        rc = standing(inst, zh, generation, lk, zl);
        if (rc != DLOCK_ENOTOWNER)
            break;
        zk_forget_node(zl); /* deleted behind our back: queue again */
    }
    if (rc == DLOCK_OK) {
        g->fence = (uint64_t)zl->czxid;
        g->has_fence = 1;
        /* The hold lives as long as the session, and the server clamps the
         * session timeout asked for to [2, 20] x tickTime: what it granted
         * is the lease, however long a lease the lock asked for. */
        int negotiated = zoo_recv_timeout(zh);
        if (negotiated > 0)
            g->lease_ms = negotiated;
        g->others_waiting = zl->others_after;
        zk_wanted_held(inst, zl, true);
    } else if (rc == DLOCK_EBUSY) {
        g->retry_hint_ms = -1;
    } else if (zl->node) {
        /* Failing, not queued: our node must not stay in front of others. */
        struct dlock_saved_error saved;
        dlock_error_save(&saved);
        zk_delete_own_node(inst, zh, zl);
        rc = dlock_error_restore(&saved, rc);
    }
    zk_session_put(&inst->session);
    return rc;
}

static int zk_release(void *instance, struct dlock_provider_lock *lk)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    /* Forgotten before our node goes: its deletion is no one's request. */
    zk_wanted_held(inst, zl, false);
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(&inst->session, &zh, &generation);
    if (rc != DLOCK_OK) {
        zk_forget_node(zl); /* a new session cannot be had; the old one's end frees it */
        return rc;
    }
    zk_sweep_orphans(inst, zh);
    if (!zl->node || zl->generation != generation) {
        zk_forget_node(zl);
        rc = DLOCK_ENOTOWNER;
    } else {
        rc = zk_delete_own_node(inst, zh, zl);
    }
    zk_session_put(&inst->session);
    return rc;
}

/* The path of our node marked shared ("~s" before "-lock-"), with the
 * same attempt tag and sequence number, into *path, and its prefix (the
 * new zl->prefix) into prefix. DLOCK_OK, or a failure with its detail. */
static int shared_twin(const struct zk_lock *zl, char prefix[static 128], char **path)
{
    const char *own = strrchr(zl->node, '/') + 1;
    const char *mark = strstr(own, "-lock-");
    char child[256];
    int n = snprintf(prefix, 128, "%.*s~s-lock-", (int)(mark - own), own);
    if (n < 0 || n >= 128 || snprintf(child, sizeof child, "%s%s", prefix, mark + 6) >= (int)sizeof child)
        return dlock_seterr(DLOCK_EINTERNAL, "zookeeper: the shared form of node %s is too long a name", zl->node);
    if (!(*path = zk_join(zl->parent, child)))
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    return DLOCK_OK;
}

/* Replaces our exclusive node by its shared twin: DLOCK_OK (zl names the
 * twin now), DLOCK_ELOST (our node is gone, and no twin of ours is there),
 * or a failure. */
static int make_shared(struct zk_instance *inst, zhandle_t *zh, const struct dlock_provider_lock *lk,
                       struct zk_lock *zl)
{
    char prefix[128];
    char *twin;
    int rc = shared_twin(zl, prefix, &twin);
    if (rc != DLOCK_OK)
        return rc;
    bool gone;
    char data[sizeof zl->prefix + 96];
    zk_downgraded_data(data, sizeof data, lk->owner, (uint64_t)zl->czxid);
    int zrc = zk_replace_own_node(zh, zl, data, inst->acl, twin, &gone);
    if (gone) {
        /* The twin is there if an earlier request made it and its answer
         * was lost; then it is the hold, no orphan. */
        if ((rc = zk_node_is_ours(inst, zh, twin)) == DLOCK_OK)
            zk_drop_orphan(inst, zl->parent, prefix);
    } else if (zrc != ZOK) {
        rc = zk_error(&inst->session, zrc, "making shared", zl->node);
        /* No answer: the twin may have been made. The core gives the hold
         * up as the exclusive one it knows (our node), so the twin must
         * be deleted too. */
        if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT)
            zk_add_orphan(inst, zl->parent, prefix);
    }
    if (rc == DLOCK_OK) {
        free(zl->node);
        zl->node = twin;
        twin = NULL;
        memcpy(zl->prefix, prefix, sizeof zl->prefix);
    }
    free(twin);
    return rc;
}

/* The exclusive node becomes its shared twin in one multi
 * (zk_replace_own_node): the same sequence number, so the same place in line,
 * marked "~s". Readers waiting for it watch the exclusive node, whose
 * deletion wakes them, and find no exclusive node below them any more; a
 * writer waiting behind it is woken too, finds the twin in the same place
 * below it and waits on that. The twin is an ephemeral of the same
 * session, so the hold keeps its lease; renewal, release and the listing
 * go by the node, whatever lk->mode says. The hold keeps its fence, the
 * old node's czxid, written in the twin's data for the listing. */
static int zk_downgrade(void *instance, struct dlock_provider_lock *lk)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(&inst->session, &zh, &generation);
    if (rc != DLOCK_OK)
        return rc;
    unsigned permits;
    if (!zl->node || zl->generation != generation) {
        rc = dlock_seterr(DLOCK_ELOST, "zookeeper: the lock is no longer held: the session that held it has ended");
    } else if (zk_kind_of(strrchr(zl->node, '/') + 1, &permits) == 's') {
        /* Made shared before, by a request whose answer was lost. */
        rc = zk_node_is_ours(inst, zh, zl->node);
    } else if (permits > 0) {
        rc = dlock_seterr(DLOCK_EINVAL, "zookeeper: the lock is held as a permit, not exclusively");
    } else {
        rc = make_shared(inst, zh, lk, zl);
    }
    zk_session_put(&inst->session);
    return rc;
}

/* What a wait has to watch, once watch_begin has run. */
enum zk_watch { ZK_WATCH_NOTHING, ZK_WATCH_SET, ZK_WATCH_LOOK_NOW };

/* Sets the watch a wait waits on: the predecessor's deletion, or any change
 * of the children for a permit. The waiter is registered before the watch
 * is set, so its event cannot slip by. */
static int watch_begin(struct zk_instance *inst, struct zk_lock *zl, enum zk_watch *out)
{
    *out = ZK_WATCH_NOTHING;
    if (!zl->notify_fd) {
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0)
            return dlock_seterr(DLOCK_EUNAVAILABLE, "zookeeper: cannot create an eventfd: %s", strerror(errno));
        zl->notify_fd = fd + 1;
    }
    zl->waiter = (struct zk_waiter){ .path = zl->wait_children ? zl->parent : zl->predecessor,
                                     .fd = zl->notify_fd - 1 };
    if (!zl->waiter.path)
        return DLOCK_OK;
    zk_session_add_waiter(&inst->session, &zl->waiter);
    zhandle_t *zh;
    uint64_t generation;
    int zrc = ZSYSTEMERROR;
    if (zk_session_get(&inst->session, &zh, &generation) == DLOCK_OK) {
        struct Stat st;
        if (zl->wait_children) {
            /* A permit may come back from any holder: any change of the
             * children (a herd among a semaphore's waiters). */
            struct String_vector children = { 0, NULL };
            zrc = zoo_wget_children(zh, zl->parent, zk_session_watcher, &inst->session, &children);
            deallocate_String_vector(&children);
        } else {
            zrc = zoo_wexists(zh, zl->predecessor, zk_session_watcher, &inst->session, &st);
        }
        zk_session_put(&inst->session);
    }
    if (zrc != ZOK) {
        /* Gone already (look again now), or the server is out of reach
         * (the next attempt reports it). */
        zk_session_remove_waiter(&inst->session, &zl->waiter);
        *out = ZK_WATCH_LOOK_NOW;
        return DLOCK_OK;
    }
    zl->watching = true;
    *out = ZK_WATCH_SET;
    return DLOCK_OK;
}

/* Ends a wait: the waiter unregistered, the signals read. */
static void watch_end(struct zk_instance *inst, struct zk_lock *zl)
{
    if (zl->watching)
        zk_session_remove_waiter(&inst->session, &zl->waiter);
    zl->watching = false;
    uint64_t v;
    while (read(zl->notify_fd - 1, &v, sizeof v) > 0)
        ;
}

static int zk_wait(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    enum zk_watch watch;
    int rc = watch_begin(inst, zl, &watch);
    if (rc != DLOCK_OK || watch == ZK_WATCH_LOOK_NOW)
        return rc;
    struct pollfd p[2] = { { .fd = wake_fd, .events = POLLIN }, { .fd = zl->notify_fd - 1, .events = POLLIN } };
    int n = poll(p, watch == ZK_WATCH_SET ? 2 : 1, timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms);
    int err = errno;
    watch_end(inst, zl);
    if (n < 0 && err != EINTR)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "zookeeper: poll failed: %s", strerror(err));
    return n == 0 ? DLOCK_ETIMEDOUT : DLOCK_OK;
}

/* The same wait, parked on the eventfd the session's watcher writes. */
static int zk_wait_arm(void *instance, struct dlock_provider_lock *lk, int64_t *timeout_ms, int *fd)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    enum zk_watch watch;
    int rc = watch_begin(inst, zl, &watch);
    if (rc != DLOCK_OK)
        return rc;
    if (watch == ZK_WATCH_LOOK_NOW)
        *timeout_ms = 0;
    *fd = watch == ZK_WATCH_SET ? zl->notify_fd - 1 : -1;
    return DLOCK_OK;
}

static int zk_wait_disarm(void *instance, struct dlock_provider_lock *lk, int fired, int64_t *timeout_ms)
{
    (void)timeout_ms;
    watch_end(instance, lk->priv);
    return fired ? DLOCK_OK : DLOCK_ETIMEDOUT;
}

static void zk_abandon(void *instance, struct dlock_provider_lock *lk)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    if (!zl->node)
        return;
    zhandle_t *zh;
    uint64_t generation;
    if (zk_session_get(&inst->session, &zh, &generation) != DLOCK_OK) {
        zk_forget_node(zl);
        return;
    }
    if (zl->generation == generation)
        zk_delete_own_node(inst, zh, zl); /* out of the queue: the next in line moves up */
    zk_forget_node(zl);
    zk_session_put(&inst->session);
}

/* See zk_wanted.c. */
static int zk_watch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    return zk_wanted_watch(instance, lk);
}

static void zk_unwatch_wanted(void *instance, struct dlock_provider_lock *lk)
{
    zk_wanted_unwatch(instance, lk);
}

static void zk_lock_fini(void *instance, struct dlock_provider_lock *lk)
{
    struct zk_lock *zl = lk->priv;
    zk_wanted_unwatch(instance, lk);
    zk_abandon(instance, lk);
    zk_native_forget(zl);
    if (zl->notify_fd)
        close(zl->notify_fd - 1);
    free(zl->parent);
    memset(zl, 0, sizeof *zl);
}

/* The status from the name's listing entry: an exclusive holder by its
 * owner id, shared holders and permits by their number (a downgraded hold
 * among them), with the waiters after. */
static int status_of_entry(const dlock_list_entry *e, void *arg)
{
    dlock_status_info *out = arg;
    if (e->holder_count <= 0)
        return DLOCK_OK;
    out->held = 1;
    out->fence = e->fence;
    char holders[sizeof out->holder];
    if (e->kind == DLOCK_MODE_EXCLUSIVE)
        snprintf(holders, sizeof holders, "%s", e->n_holders ? e->holders[0].owner : "");
    else
        kind_holders_text(holders, sizeof holders, e->holder_count, e->permits);
    snprintf(out->holder, sizeof out->holder, "%s (%lld waiting)", holders, (long long)e->waiters);
    return DLOCK_OK;
}

static int zk_status(struct zk_instance *inst, struct dlock_ctl_status *arg)
{
    dlock_status_info *out = arg->out;
    out->held = 0; /* the rest arrives preset (provider.h) */
    char *parent = zk_parent_path(inst->root, arg->name, arg->name_len);
    if (!parent)
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(&inst->session, &zh, &generation);
    if (rc == DLOCK_OK) {
        rc = zk_describe_name(&inst->session, zh, parent, arg->name, arg->name_len, status_of_entry, out);
        zk_session_put(&inst->session);
    }
    free(parent);
    return rc;
}

static int zk_list(void *instance, struct dlock_provider_list *req)
{
    struct zk_instance *inst = instance;
    return zk_list_page(&inst->session, inst->root, req);
}

static int zk_break(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    struct zk_instance *inst = instance;
    return zk_break_holders(&inst->session, inst->root, name, name_len, broken, fence);
}

static int zk_ctl(void *instance, int op, void *arg)
{
    if (op == DLOCK_CTL_STATUS)
        return zk_status(instance, arg);
    return DLOCK_ENOTSUP;
}

static void zk_close(void *instance)
{
    struct zk_instance *inst = instance;
    zk_session_close(&inst->session);
    zk_wanted_close(inst);
    pthread_mutex_destroy(&inst->wanted_mu);
    while (inst->orphans) {
        struct zk_orphan *o = inst->orphans;
        inst->orphans = o->next;
        free(o->parent);
        free(o);
    }
    pthread_mutex_destroy(&inst->orphan_mu);
    free(inst);
}

static int zk_open(void **instance, const struct dlock_provider_env *env)
{
    const dlock_settings *s = env->settings;
    struct zk_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    const char *hosts = "127.0.0.1:2181", *root = "/dlock", *auth = NULL;
    int64_t session_timeout = env->default_lease_ms, connect_timeout = 5000;
    dlock_settings_string(s, "hosts", &hosts);
    dlock_settings_string(s, "root", &root);
    dlock_settings_string(s, "auth", &auth);
    dlock_settings_int(s, "session_timeout_ms", &session_timeout);
    dlock_settings_int(s, "connect_timeout_ms", &connect_timeout);
    int rc = DLOCK_OK;
    if (!hosts[0] || strlen(hosts) >= sizeof inst->session.hosts)
        rc = dlock_seterr(DLOCK_ECONFIG, "%s: zookeeper.hosts must be \"host:port[,host:port...]\"",
                          dlock_settings_where(s, "hosts"));
    else if (strlen(root) >= sizeof inst->root || !zk_valid_root(root))
        rc = dlock_seterr(DLOCK_ECONFIG, "%s: zookeeper.root must be an absolute path like \"/dlock\" "
                          "(no trailing '/', no empty, '.' or '..' parts)",
                          dlock_settings_where(s, "root"));
    else if (auth && (strncmp(auth, "digest:", 7) != 0 || !strchr(auth + 7, ':') ||
                      strlen(auth + 7) >= sizeof inst->session.auth))
        rc = dlock_seterr(DLOCK_ECONFIG, "%s: zookeeper.auth must be \"digest:user:password\"",
                          dlock_settings_where(s, "auth"));
    if (rc != DLOCK_OK) {
        free(inst);
        return rc;
    }
    snprintf(inst->session.hosts, sizeof inst->session.hosts, "%s", hosts);
    snprintf(inst->root, sizeof inst->root, "%s", root);
    inst->session.timeout_ms = (int)session_timeout;
    inst->session.connect_timeout_ms = connect_timeout;
    inst->session.log_handle = env->log_handle;
    inst->log_handle = env->log_handle;
    if (auth) {
        snprintf(inst->session.auth, sizeof inst->session.auth, "%s", auth + 7);
        /* Only the authenticated identity may read, queue under or delete
         * the nodes it creates (ZooKeeper checks delete on the parent). */
        inst->creator_entry.perms = ZOO_PERM_ALL;
        inst->creator_entry.id.scheme = "auth";
        inst->creator_entry.id.id = "";
        inst->creator_acl.count = 1;
        inst->creator_acl.data = &inst->creator_entry;
        inst->acl = &inst->creator_acl;
    } else {
        inst->acl = &ZOO_OPEN_ACL_UNSAFE;
    }
    pthread_mutex_init(&inst->orphan_mu, NULL);
    pthread_mutex_init(&inst->wanted_mu, NULL);
    inst->tell_wanted = env->wanted;
    rc = zk_session_open(&inst->session);
    if (rc != DLOCK_OK) {
        pthread_mutex_destroy(&inst->wanted_mu);
        pthread_mutex_destroy(&inst->orphan_mu);
        free(inst);
        return rc;
    }
    dlock_provider_log(env->log_handle, DLOCK_LOG_DEBUG, "zookeeper %s: session established, root %s", hosts, root);
    *instance = inst;
    return DLOCK_OK;
}

static const struct dlock_provider zk_provider = {
    .version = DLOCK_PROVIDER_VERSION_8,
    .name = "zookeeper",
    .capabilities = DLOCK_CAP_RENEW | DLOCK_CAP_FENCE | DLOCK_CAP_FENCE_LINEARIZABLE | DLOCK_CAP_NATIVE_WAIT |
                    DLOCK_CAP_FAIR | DLOCK_CAP_SERVER_EXPIRY | DLOCK_CAP_MULTI_HOST |
                    DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_DOWNGRADE | DLOCK_CAP_ELECTION |
                    DLOCK_CAP_CACHE,
    .lock_priv_size = sizeof(struct zk_lock),
    .settings = zk_settings,
    .open = zk_open,
    .close = zk_close,
    .acquire = zk_acquire,
    .release = zk_release,
    .renew = zk_renew,
    .renew_batch = zk_renew_batch,
    .wait = zk_wait,
    .wait_arm = zk_wait_arm,
    .wait_disarm = zk_wait_disarm,
    .lock_fini = zk_lock_fini,
    .ctl = zk_ctl,
    .abandon = zk_abandon,
    .list = zk_list,
    .break_hold = zk_break,
    .downgrade = zk_downgrade,
    .value_put = zk_value_put,
    .leader_get = zk_leader_get,
    .watch_open = zk_watch_open,
    .watch_consume = zk_watch_consume,
    .watch_close = zk_watch_close,
    .acquire_send = zk_acquire_send,
    .acquire_recv = zk_acquire_recv,
    .acquire_drop = zk_acquire_drop,
    .watch_wanted = zk_watch_wanted,
    .unwatch_wanted = zk_unwatch_wanted,
};

DLOCK_MODULE(zk_provider)
