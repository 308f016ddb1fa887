/* core/list.c - dlock_list(): one page of the names a backend has held or
 * waited for. The provider reads its backend; the core checks the
 * arguments, holds the provider to the page's limit and to the entries'
 * shape, and keeps the caller's stop apart from the provider's failures. */
#include "config.h"

#include "entry.h"

#include <stdlib.h>
#include <string.h>

struct list_call {
    dlock_client *client;
    size_t limit, emitted;
    dlock_list_fn fn;
    void *arg;
    int stopped;            /* what fn returned to stop the listing, else DLOCK_OK */
};

static bool entry_well_formed(const dlock_list_entry *e)
{
    return e && e->name && e->name_len > 0 && e->name_len <= DLOCK_NAME_MAX && !memchr(e->name, 0, e->name_len) &&
           e->kind <= DLOCK_MODE_SEMAPHORE && (e->n_holders == 0 || e->holders) &&
           (e->holder_count < 0 || (uint64_t)e->holder_count >= e->n_holders);
}

static int emit(const dlock_list_entry *e, void *emit_arg)
{
    struct list_call *call = emit_arg;
    if (call->stopped != DLOCK_OK)
        return call->stopped;
    if (call->emitted == call->limit)
        return dlock_seterr(DLOCK_EINTERNAL, "the %s backend's list emitted more than the %zu entries asked for",
                            call->client->provider->name, call->limit);
    if (!entry_well_formed(e))
        return dlock_seterr(DLOCK_EINTERNAL, "the %s backend's list emitted a malformed entry",
                            call->client->provider->name);
    call->emitted++;
    int rc = call->fn(e, call->arg);
    if (rc != DLOCK_OK)
        call->stopped = rc;
    return rc;
}

int dlock_list(dlock_client *c, const char *prefix, size_t prefix_len, const char *cursor, size_t limit,
               dlock_list_fn fn, void *arg, char **next_cursor)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    if (!next_cursor)
        return dlock_seterr(DLOCK_EINVAL, "dlock_list: next_cursor is NULL");
    *next_cursor = NULL;
    if (!fn || limit == 0)
        return dlock_seterr(DLOCK_EINVAL, "dlock_list: need a callback and a limit of at least 1");
    if (prefix_len > 0 && (!prefix || prefix_len > DLOCK_NAME_MAX || memchr(prefix, 0, prefix_len)))
        return dlock_seterr(DLOCK_EINVAL, "dlock_list: the name prefix must be 0..%d bytes without NUL",
                            DLOCK_NAME_MAX);
    if (cursor && cursor[0] == 0)
        cursor = NULL; /* "" is where a shell passes "from the start" */
    struct list_call call = { c, limit, 0, fn, arg, DLOCK_OK };
    struct dlock_provider_list req = {
        .prefix = prefix_len ? prefix : "", .prefix_len = prefix_len, .cursor = cursor, .limit = limit,
        .emit = emit, .emit_arg = &call, .next_cursor = NULL,
    };
    rc = dlock__p_list(c, &req);
    if (call.stopped != DLOCK_OK)
        rc = call.stopped; /* the caller's stop, whatever the provider made of it */
    if (rc != DLOCK_OK) {
        free(req.next_cursor);
        return rc;
    }
    *next_cursor = req.next_cursor;
    return DLOCK_OK;
}
