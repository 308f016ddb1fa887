/* backends/zookeeper/zk_election.c - elections on zookeeper: the leader is
 * the holder of the name's lowest exclusive node (the lock recipe, as
 * Curator's LeaderLatch), its term that node's czxid, and its value a
 * persistent node beside the name's parent, "<root>/<escaped name>.value"
 * (an escaped name has no '.', so it is never a lock's parent), holding
 * "<term>:<bytes>".
 *
 * The value is written in one multi with a check of the leader's own
 * ephemeral node, so it is stored only while that node exists: a leader
 * whose session expired (its node is gone, a successor may lead) cannot.
 * A reader takes the parent's children, the holder's node and the value;
 * the core trusts the value only when its term is the holder's czxid.
 * Observers watch the parent's children (a holder's node going or coming)
 * and the value node, through the session's watcher. */
#include "config.h"

#include "zk_backend.h"
#include "zk_list.h"
#include "zk_names.h"
#include "../common/queue_list.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static char *value_path(const char *parent)
{
    size_t n = strlen(parent);
    char *p = malloc(n + sizeof ".value");
    if (p) {
        memcpy(p, parent, n);
        memcpy(p + n, ".value", sizeof ".value");
    }
    return p;
}

int zk_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len)
{
    struct zk_instance *inst = instance;
    struct zk_lock *zl = lk->priv;
    if (!zl->node || !zl->parent || (uint64_t)zl->czxid != term)
        return dlock_seterr(DLOCK_ELOST, "zookeeper: this owner has no node of term %" PRIu64 " for the election",
                            term);
    char *path = value_path(zl->parent);
    char *data = malloc(24 + len);
    if (!path || !data) {
        free(path);
        free(data);
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    }
    int head = snprintf(data, 24, "%" PRIu64 ":", term);
    if (len)
        memcpy(data + head, value, len);
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(&inst->session, &zh, &generation);
    if (rc == DLOCK_OK) {
        if (generation != zl->generation) {
            /* The node belonged to a session that ended: it is gone. */
            rc = dlock_seterr(DLOCK_ELOST, "zookeeper: the session that held the election ended");
        } else {
            int zrc = zoo_create(zh, path, NULL, -1, inst->acl, 0, NULL, 0);
            if (zrc != ZOK && zrc != ZNODEEXISTS) {
                rc = zk_error(&inst->session, zrc, "creating", path);
            } else {
                zoo_op_t ops[2];
                zoo_op_result_t results[2];
                zoo_check_op_init(&ops[0], zl->node, -1);
                zoo_set_op_init(&ops[1], path, data, head + (int)len, -1, NULL);
                zrc = zoo_multi(zh, 2, ops, results);
                if (zrc == ZOK)
                    rc = DLOCK_OK;
                else if (results[0].err == ZNONODE)
                    rc = dlock_seterr(DLOCK_ELOST, "zookeeper: this owner's node %s is gone (its session expired "
                                      "or it was broken): the value was not stored", zl->node);
                else
                    rc = zk_error(&inst->session, zrc, "storing the election value in", path);
            }
        }
        zk_session_put(&inst->session);
    }
    free(path);
    free(data);
    return rc;
}

/* The czxid of parent's exclusive holder's node, 0 if none. */
static int holder_term(struct zk_instance *inst, zhandle_t *zh, const char *parent, uint64_t *term)
{
    *term = 0;
    struct String_vector children = { 0, NULL };
    int zrc = zoo_get_children(zh, parent, 0, &children);
    if (zrc == ZNONODE)
        return DLOCK_OK;
    if (zrc != ZOK)
        return zk_error(&inst->session, zrc, "listing", parent);
    int rc = DLOCK_OK;
    struct queued_contender *q = children.count ? malloc((size_t)children.count * sizeof *q) : NULL;
    if (children.count && !q)
        rc = dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    unsigned permits = 0;
    size_t n = q ? zk_line_of(&children, q, &permits) : 0;
    for (size_t i = 0; rc == DLOCK_OK && i < n; i++) {
        if (!q[i].holds || q[i].mode != DLOCK_MODE_EXCLUSIVE)
            continue;
        char *node = zk_join(parent, q[i].ref);
        struct Stat st;
        zrc = node ? zoo_exists(zh, node, 0, &st) : ZSYSTEMERROR;
        if (!node)
            rc = dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
        else if (zrc == ZOK)
            *term = (uint64_t)st.czxid;
        else if (zrc != ZNONODE) /* gone since: nobody, as far as this read goes */
            rc = zk_error(&inst->session, zrc, "reading", node);
        free(node);
        break;
    }
    free(q);
    deallocate_String_vector(&children);
    return rc;
}

/* "<term>:<bytes>" into out. */
static int parse_value(const char *data, int len, const char *path, struct dlock_provider_leader *out)
{
    const char *colon = memchr(data, ':', (size_t)len);
    char *end;
    errno = 0;
    unsigned long long term = colon ? strtoull(data, &end, 10) : 0;
    if (!colon || end != colon || errno)
        return dlock_seterr(DLOCK_EPROTOCOL, "zookeeper: %s is not an election value", path);
    out->value_term = term;
    out->value_len = (size_t)(data + len - (colon + 1));
    if (out->value_len && !(out->value = malloc(out->value_len)))
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    if (out->value_len)
        memcpy(out->value, colon + 1, out->value_len);
    return DLOCK_OK;
}

int zk_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out)
{
    struct zk_instance *inst = instance;
    char *parent = zk_parent_path(inst->root, name, name_len);
    char *path = parent ? value_path(parent) : NULL;
    int buf_len = 24 + DLOCK_VALUE_MAX;
    char *buf = malloc((size_t)buf_len);
    int rc = parent && path && buf ? DLOCK_OK : dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    zhandle_t *zh;
    uint64_t generation;
    if (rc == DLOCK_OK && (rc = zk_session_get(&inst->session, &zh, &generation)) == DLOCK_OK) {
        rc = holder_term(inst, zh, parent, &out->holder_term);
        if (rc == DLOCK_OK && out->holder_term) {
            struct Stat st;
            int len = buf_len;
            int zrc = zoo_get(zh, path, 0, buf, &len, &st);
            if (zrc == ZOK && len > 0)
                rc = parse_value(buf, len, path, out);
            else if (zrc != ZOK && zrc != ZNONODE)
                rc = zk_error(&inst->session, zrc, "reading", path);
        }
        zk_session_put(&inst->session);
    }
    free(parent);
    free(path);
    free(buf);
    return rc;
}

/* An observer's watch: the session's watcher writes fd for either path. */
struct zk_watch {
    char *parent, *value;
    struct zk_waiter on_parent, on_value;
    int fd;
};

/* Sets both one-shot watches again: the parent's children (or the parent's
 * coming, when it is gone) and the value node's existence and data. */
static int arm(struct zk_instance *inst, struct zk_watch *w)
{
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(&inst->session, &zh, &generation);
    if (rc != DLOCK_OK)
        return rc;
    struct String_vector children = { 0, NULL };
    struct Stat st;
    int zrc = zoo_wget_children(zh, w->parent, zk_session_watcher, &inst->session, &children);
    deallocate_String_vector(&children);
    if (zrc == ZNONODE)
        zrc = zoo_wexists(zh, w->parent, zk_session_watcher, &inst->session, &st);
    if (zrc == ZOK || zrc == ZNONODE)
        zrc = zoo_wexists(zh, w->value, zk_session_watcher, &inst->session, &st);
    zk_session_put(&inst->session);
    if (zrc != ZOK && zrc != ZNONODE)
        return zk_error(&inst->session, zrc, "watching", w->parent);
    return DLOCK_OK;
}

int zk_watch_open(void *instance, const char *name, size_t name_len, void **watch, int *fd)
{
    struct zk_instance *inst = instance;
    struct zk_watch *w = calloc(1, sizeof *w);
    if (!w || !(w->parent = zk_parent_path(inst->root, name, name_len)) || !(w->value = value_path(w->parent))) {
        if (w)
            free(w->parent);
        free(w);
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory");
    }
    if ((w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        int saved = errno;
        free(w->value);
        free(w->parent);
        free(w);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "zookeeper: cannot create an eventfd: %s", strerror(saved));
    }
    w->on_parent = (struct zk_waiter){ .path = w->parent, .fd = w->fd };
    w->on_value = (struct zk_waiter){ .path = w->value, .fd = w->fd };
    /* Registered before the watches are set, so no event slips by. */
    zk_session_add_waiter(&inst->session, &w->on_parent);
    zk_session_add_waiter(&inst->session, &w->on_value);
    int rc = arm(inst, w);
    if (rc != DLOCK_OK) {
        zk_watch_close(inst, w);
        return rc;
    }
    *watch = w;
    *fd = w->fd;
    return DLOCK_OK;
}

int zk_watch_consume(void *instance, void *watch)
{
    struct zk_watch *w = watch;
    uint64_t n;
    while (read(w->fd, &n, sizeof n) == (ssize_t)sizeof n)
        ;
    return arm(instance, w);
}

void zk_watch_close(void *instance, void *watch)
{
    struct zk_instance *inst = instance;
    struct zk_watch *w = watch;
    zk_session_remove_waiter(&inst->session, &w->on_parent);
    zk_session_remove_waiter(&inst->session, &w->on_value);
    close(w->fd);
    free(w->value);
    free(w->parent);
    free(w);
}
