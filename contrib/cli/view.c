/* contrib/cli/view.c - see view.h. */
#include "view.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Entries asked for per page: big enough that a local listing of a few
 * thousand names takes a handful of calls. */
#define PAGE 512

struct taker {
    struct view *v;
    size_t limit;
    bool failed;   /* out of memory while copying */
};

static char *copy_string(const char *s, bool *failed)
{
    char *c = strdup(s ? s : "");
    if (!c)
        *failed = true;
    return c;
}

static void free_entry(dlock_list_entry *e)
{
    free((char *)e->name);
    for (size_t i = 0; i < e->n_holders; i++) {
        free((char *)e->holders[i].owner);
        free((char *)e->holders[i].host);
    }
    free((dlock_list_holder *)e->holders);
}

/* A deep copy, since dlock_list()'s pointers last only for the callback. */
static bool copy_entry(dlock_list_entry *to, const dlock_list_entry *from)
{
    bool failed = false;
    *to = *from;
    to->holders = NULL;
    to->n_holders = 0;
    char *name = malloc(from->name_len + 1);
    to->name = name;
    if (!name)
        return false;
    memcpy(name, from->name, from->name_len);
    name[from->name_len] = 0;
    if (from->n_holders) {
        dlock_list_holder *h = calloc(from->n_holders, sizeof *h);
        if (!h)
            return false;
        to->holders = h;
        to->n_holders = from->n_holders;
        for (size_t i = 0; i < from->n_holders; i++) {
            h[i] = from->holders[i];
            h[i].owner = copy_string(from->holders[i].owner, &failed);
            h[i].host = copy_string(from->holders[i].host, &failed);
        }
    }
    return !failed;
}

static int keep_entry(const dlock_list_entry *e, void *arg)
{
    struct taker *t = arg;
    struct view *v = t->v;
    if (v->n == t->limit) {
        v->truncated = true;
        return DLOCK_EBUSY; /* stops the listing: the view is full */
    }
    if (v->n % 64 == 0) {
        dlock_list_entry *grown = realloc(v->entries, (v->n + 64) * sizeof *grown);
        if (!grown) {
            t->failed = true;
            return DLOCK_ENOMEM;
        }
        v->entries = grown;
    }
    if (!copy_entry(&v->entries[v->n], e)) {
        free_entry(&v->entries[v->n]);
        t->failed = true;
        return DLOCK_ENOMEM;
    }
    v->n++;
    return DLOCK_OK;
}

static void clear_entries(struct view *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free_entry(&v->entries[i]);
        if (v->elections)
            entry_election_free(&v->elections[i]);
    }
    free(v->entries);
    free(v->elections);
    v->entries = NULL;
    v->elections = NULL;
    v->n = 0;
}

int view_take(struct view *v, dlock_client *client, const char *prefix, size_t prefix_len, size_t limit)
{
    memset(v, 0, sizeof *v);
    struct taker t = { v, limit, false };
    char *cursor = NULL, *next = NULL;
    int rc;
    do {
        rc = dlock_list(client, prefix, prefix_len, cursor, PAGE, keep_entry, &t, &next);
        free(cursor);
        cursor = next;
    } while (rc == DLOCK_OK && cursor);
    free(cursor);
    v->generated_ms = wall_ms();
    if (v->truncated && !t.failed)
        rc = DLOCK_OK;
    /* After the listing (its callback must not use the client). Without
     * memory for them the names are shown without their leaders. */
    if (rc == DLOCK_OK && v->n > 0 && (v->elections = calloc(v->n, sizeof *v->elections)))
        for (size_t i = 0; i < v->n; i++)
            entry_election_read(client, &v->entries[i], &v->elections[i]);
    v->rc = rc;
    if (rc != DLOCK_OK) {
        if (t.failed)
            snprintf(v->error, sizeof v->error, "out of memory while copying the listing");
        else
            snprintf(v->error, sizeof v->error, "%s (%s)", dlock_strerror(rc), dlock_errmsg());
        clear_entries(v);
    }
    return rc;
}

void view_free(struct view *v)
{
    clear_entries(v);
}

/* holder_count is -1 where the backend cannot count; a described holder
 * still shows the name is held. */
static bool is_held(const dlock_list_entry *e)
{
    return e->holder_count > 0 || e->n_holders > 0;
}

bool view_is_stale(const dlock_list_entry *e, int64_t stale_ms)
{
    return is_held(e) && e->age_ms > stale_ms;
}

struct view_summary view_summarize(const struct view *v, int64_t stale_ms)
{
    struct view_summary s = { 0, 0, 0, -1, 0 };
    for (size_t i = 0; i < v->n; i++) {
        const dlock_list_entry *e = &v->entries[i];
        if (is_held(e)) {
            s.held++;
            if (e->age_ms > s.oldest_age_ms)
                s.oldest_age_ms = e->age_ms;
        }
        if (e->waiters > 0) {
            s.with_waiters++;
            s.waiters += e->waiters;
        }
        if (view_is_stale(e, stale_ms))
            s.stale++;
    }
    return s;
}
