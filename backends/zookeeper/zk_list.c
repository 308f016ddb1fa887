/* backends/zookeeper/zk_list.c - see zk_list.h.
 *
 * The names are the root's children (one parent node per name, its name
 * escaped: zk_names.h), taken in the order of their node names; the cursor
 * is the node name to start from, printable as every escaped name is. A
 * page reads the root's children once (ZooKeeper returns a node's children
 * whole: there is no paged read), then, for at most EXAMINE_MAX parents
 * from the cursor on, the parent's children, and each holder's node for
 * its owner (the node's data) and fence (its czxid). Who holds follows
 * from the sequence numbers, as a grant decides (queue_list.h). A parent
 * without contenders (a container the server has not reaped yet) is
 * passed over.
 *
 * Lease left is -1: a hold lives as long as its holder's session, which
 * the holder's heartbeats keep alive, and no client can read another
 * session's deadline (nor, with heartbeats, is there a fixed one). Age is
 * -1: a node's ctime is on the leader's clock, and ZooKeeper offers no
 * read of the server's time to measure it against without writing a node,
 * which a listing must not do. */
#include "config.h"

#include "zk_list.h"
#include "zk_names.h"
#include "../common/queue_list.h"

#include <stdlib.h>
#include <string.h>

#define EXAMINE_MAX 256     /* parents one page reads */
#define HOLDERS_MAX 256     /* holders of one entry described */
#define OWNER_MAX 128

static int by_node_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t zk_line_of(const struct String_vector *children, struct queued_contender *q, unsigned *permits)
{
    size_t n = 0;
    *permits = 0;
    for (int i = 0; i < children->count; i++) {
        const char *child = children->data[i];
        int64_t seq = zk_sequence_of(child);
        if (seq < 0)
            continue;
        unsigned p;
        char kind = zk_kind_of(child, &p);
        if (kind == 'p' && !*permits)
            *permits = p;
        unsigned mode = kind == 's' ? DLOCK_MODE_SHARED : kind == 'p' ? DLOCK_MODE_SEMAPHORE : DLOCK_MODE_EXCLUSIVE;
        q[n++] = (struct queued_contender){ mode, seq, false, { "", -1, "", 0, -1, -1 }, child };
    }
    queue_decide(q, n, *permits);
    return n;
}

/* Reads the first HOLDERS_MAX holders' nodes: owner and fence. A holder
 * whose node is gone since its parent was read stays with neither. */
static int describe_holders(struct zk_session *s, zhandle_t *zh, const char *parent, struct queued_contender *q, size_t n,
                            char (*owners)[OWNER_MAX])
{
    size_t described = 0;
    for (size_t i = 0; i < n && described < HOLDERS_MAX; i++) {
        if (!q[i].holds)
            continue;
        char *path = zk_join(parent, q[i].ref);
        if (!path)
            return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory listing locks");
        int len = OWNER_MAX - 1;
        struct Stat st;
        int zrc = zoo_get(zh, path, 0, owners[described], &len, &st);
        if (zrc != ZOK && zrc != ZNONODE) {
            int rc = zk_error(s, zrc, "reading", path);
            free(path);
            return rc;
        }
        free(path);
        owners[described][zrc == ZOK && len > 0 ? len : 0] = 0;
        /* A node made shared by a downgrade keeps the fence of the node it
         * replaced, written after the owner id. */
        uint64_t kept = zk_data_fence(owners[described]);
        q[i].holder.owner = owners[described++];
        q[i].holder.fence = zrc != ZOK ? 0 : kept ? kept : (uint64_t)st.czxid;
    }
    return DLOCK_OK;
}

int zk_describe_name(struct zk_session *s, zhandle_t *zh, const char *parent, const char *name, size_t name_len,
                     int (*use)(const dlock_list_entry *e, void *arg), void *arg)
{
    struct String_vector line = { 0, NULL };
    int zrc = zoo_get_children(zh, parent, 0, &line);
    int rc = zrc == ZOK || zrc == ZNONODE ? DLOCK_OK : zk_error(s, zrc, "listing", parent);
    struct queued_contender *q = line.count ? malloc((size_t)line.count * sizeof *q) : NULL;
    char(*owners)[OWNER_MAX] = line.count ? malloc(HOLDERS_MAX * sizeof *owners) : NULL;
    dlock_list_holder *holders = line.count ? malloc(HOLDERS_MAX * sizeof *holders) : NULL;
    if (rc == DLOCK_OK && line.count && (!q || !owners || !holders))
        rc = dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory describing locks");
    unsigned permits = 0;
    size_t n = rc == DLOCK_OK && line.count ? zk_line_of(&line, q, &permits) : 0;
    if (n)
        rc = describe_holders(s, zh, parent, q, n, owners);
    if (rc == DLOCK_OK && n) {
        dlock_list_entry e = { .name = name, .name_len = name_len };
        queue_entry(q, n, permits, &e, holders, HOLDERS_MAX);
        rc = use(&e, arg);
    }
    free(q);
    free(owners);
    free(holders);
    deallocate_String_vector(&line);
    return rc;
}

/* One page's emitting: the request, and how many entries it got so far. */
struct page {
    struct dlock_provider_list *req;
    size_t emitted;
};

static int emit_entry(const dlock_list_entry *e, void *arg)
{
    struct page *page = arg;
    page->emitted++;
    return page->req->emit(e, page->req->emit_arg);
}

/* Describes and emits the name of one parent node, if anyone holds or
 * waits for it; page->emitted counts it. */
static int list_parent(struct zk_session *s, zhandle_t *zh, const char *root, const char *child, struct page *page)
{
    char name[DLOCK_NAME_MAX + 1];
    size_t name_len;
    if (!zk_name_of_parent(child, name, &name_len))
        return DLOCK_OK; /* not a lock's parent */
    char *parent = zk_join(root, child);
    if (!parent)
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory listing locks");
    int rc = zk_describe_name(s, zh, parent, name, name_len, emit_entry, page);
    free(parent);
    return rc;
}

int zk_list_page(struct zk_session *s, const char *root, struct dlock_provider_list *req)
{
    char name[DLOCK_NAME_MAX + 1];
    size_t name_len;
    if (req->cursor && !zk_name_of_parent(req->cursor, name, &name_len))
        return dlock_seterr(DLOCK_EINVAL, "zookeeper: '%s' is not a cursor of the zookeeper backend's listing",
                            req->cursor);
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(s, &zh, &generation);
    if (rc != DLOCK_OK)
        return rc;
    /* A name starts with the listed prefix exactly when its escape starts
     * with the prefix's escape (bytes are escaped one by one): those
     * parents lie together in node name order. */
    char *escaped = zk_parent_path("", req->prefix, req->prefix_len);
    if (!escaped) {
        zk_session_put(s);
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory listing locks");
    }
    const char *from = escaped + 1;
    size_t from_len = strlen(from);
    if (req->cursor && strcmp(req->cursor, from) > 0)
        from = req->cursor;
    struct String_vector names = { 0, NULL };
    int zrc = zoo_get_children(zh, root, 0, &names);
    if (zrc != ZOK && zrc != ZNONODE)
        rc = zk_error(s, zrc, "listing", root);
    if (rc == DLOCK_OK && names.count > 1)
        qsort(names.data, (size_t)names.count, sizeof *names.data, by_node_name);
    int i = 0;
    while (i < names.count && strcmp(names.data[i], from) < 0)
        i++;
    int end = i;
    while (end < names.count && strncmp(names.data[end], escaped + 1, from_len) == 0)
        end++;
    struct page page = { req, 0 };
    for (int examined = 0; rc == DLOCK_OK && i < end && examined < EXAMINE_MAX && page.emitted < req->limit;
         i++, examined++)
        rc = list_parent(s, zh, root, names.data[i], &page);
    free(escaped);
    if (rc == DLOCK_OK && i < end && !(req->next_cursor = strdup(names.data[i])))
        rc = dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory listing locks");
    deallocate_String_vector(&names);
    zk_session_put(s);
    return rc;
}
