/* backends/zookeeper/zk_break.c - see zk_break.h.
 *
 * Who holds follows from the line as a grant decides it (zk_line_of). The
 * holders' nodes go in one multi: a holder whose node vanished meanwhile
 * makes the whole fail, and nothing is half-done. */
#include "config.h"

#include "zk_break.h"
#include "zk_list.h"
#include "zk_names.h"
#include "../common/queue_list.h"

#include <stdlib.h>
#include <string.h>

int zk_break_holders(struct zk_session *s, const char *root, const char *name, size_t name_len, int *broken,
                     uint64_t *fence)
{
    *broken = 0;
    *fence = 0;
    char *parent = zk_parent_path(root, name, name_len);
    if (!parent)
        return dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory breaking a hold");
    zhandle_t *zh;
    uint64_t generation;
    int rc = zk_session_get(s, &zh, &generation);
    if (rc != DLOCK_OK) {
        free(parent);
        return rc;
    }
    struct String_vector line = { 0, NULL };
    int zrc = zoo_get_children(zh, parent, 0, &line);
    rc = zrc == ZOK || zrc == ZNONODE ? DLOCK_OK : zk_error(s, zrc, "listing", parent);
    size_t n = 0, holding = 0;
    unsigned permits = 0;
    struct queued_contender *q = line.count ? calloc((size_t)line.count, sizeof *q) : NULL;
    zoo_op_t *ops = line.count ? calloc((size_t)line.count, sizeof *ops) : NULL;
    zoo_op_result_t *results = line.count ? calloc((size_t)line.count, sizeof *results) : NULL;
    char **paths = line.count ? calloc((size_t)line.count, sizeof *paths) : NULL;
    if (rc == DLOCK_OK && line.count && (!q || !ops || !results || !paths))
        rc = dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory breaking a hold");
    if (rc == DLOCK_OK && line.count)
        n = zk_line_of(&line, q, &permits);
    for (size_t i = 0; rc == DLOCK_OK && i < n; i++) {
        if (!q[i].holds)
            continue;
        if (!(paths[holding] = zk_join(parent, q[i].ref)))
            rc = dlock_seterr(DLOCK_ENOMEM, "zookeeper: out of memory breaking a hold");
        else
            zoo_delete_op_init(&ops[holding], paths[holding], -1);
        holding++;
    }
    if (rc == DLOCK_OK && holding > 0) {
        zrc = zoo_multi(zh, (int)holding, ops, results);
        if (zrc == ZNONODE)
            rc = dlock_seterr(DLOCK_EUNAVAILABLE, "zookeeper: the holders of '%s' changed while it was being broken; "
                              "run it again", parent);
        else if (zrc != ZOK)
            rc = zk_error(s, zrc, "breaking the holds under", parent);
        else
            *broken = 1;
    }
    zk_session_put(s);
    for (size_t i = 0; paths && i < holding; i++)
        free(paths[i]);
    free(paths);
    free(results);
    free(ops);
    free(q);
    deallocate_String_vector(&line);
    free(parent);
    return rc;
}
