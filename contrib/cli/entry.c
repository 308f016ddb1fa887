/* contrib/cli/entry.c - see entry.h. */
#include "entry.h"
#include "escape.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char *entry_kind_name(unsigned kind)
{
    return kind == DLOCK_MODE_SHARED ? "shared" : kind == DLOCK_MODE_SEMAPHORE ? "semaphore" : "exclusive";
}

/* ---- JSON ------------------------------------------------------------------------ */

/* A number, or null where the backend does not know it (negative). */
static void json_int(FILE *f, const char *key, int64_t v)
{
    if (v < 0)
        fprintf(f, ",\"%s\":null", key);
    else
        fprintf(f, ",\"%s\":%" PRId64, key, v);
}

static void json_fence(FILE *f, const char *key, uint64_t v)
{
    if (v == 0)
        fprintf(f, ",\"%s\":null", key);
    else
        fprintf(f, ",\"%s\":%" PRIu64, key, v);
}

static void json_string_or_null(FILE *f, const char *s)
{
    if (s && s[0])
        escape_json(f, s, strlen(s));
    else
        fputs("null", f);
}

static void json_holder(FILE *f, const dlock_list_holder *h)
{
    fputs("{\"owner\":", f);
    json_string_or_null(f, h->owner);
    json_int(f, "pid", h->pid);
    fputs(",\"host\":", f);
    json_string_or_null(f, h->host);
    json_fence(f, "fence", h->fence);
    json_int(f, "lease_left_ms", h->lease_left_ms);
    json_int(f, "age_ms", h->age_ms);
    fputs("}", f);
}

void entry_json(FILE *f, const dlock_list_entry *e, const struct entry_election *el)
{
    fputs("{\"name\":", f);
    if (!escape_json(f, e->name, e->name_len)) {
        /* The string had to replace bytes: the exact ones as well. */
        fputs(",\"name_hex\":\"", f);
        escape_hex(f, e->name, e->name_len);
        fputs("\"", f);
    }
    fprintf(f, ",\"kind\":\"%s\"", entry_kind_name(e->kind));
    if (e->kind == DLOCK_MODE_SEMAPHORE)
        fprintf(f, ",\"permits\":%u", e->permits);
    json_int(f, "holder_count", e->holder_count);
    fputs(",\"holders\":[", f);
    for (size_t i = 0; i < e->n_holders; i++) {
        if (i)
            fputs(",", f);
        json_holder(f, &e->holders[i]);
    }
    fputs("]", f);
    json_fence(f, "fence", e->fence);
    json_int(f, "lease_left_ms", e->lease_left_ms);
    json_int(f, "age_ms", e->age_ms);
    json_int(f, "waiters", e->waiters);
    entry_election_json(f, el);
    fputs("}", f);
}

/* ---- the table -------------------------------------------------------------------- */

#define ROW "%-24s  %-13s  %7s  %20s  %10s  %10s  %7s\n"

static const char *num(char *buf, size_t len, int64_t v)
{
    if (v < 0)
        return "-";
    snprintf(buf, len, "%" PRId64, v);
    return buf;
}

void entry_header(FILE *f)
{
    fprintf(f, ROW, "NAME", "KIND", "HOLDERS", "FENCE", "LEASE-LEFT", "AGE", "WAITERS");
}

void entry_row(FILE *f, const dlock_list_entry *e)
{
    char kind[32], holders[32], fence[32], lease[32], age[32], waiters[32];
    if (e->kind == DLOCK_MODE_SEMAPHORE)
        snprintf(kind, sizeof kind, "semaphore/%u", e->permits);
    else
        snprintf(kind, sizeof kind, "%s", entry_kind_name(e->kind));
    if (e->fence)
        snprintf(fence, sizeof fence, "%" PRIu64, e->fence);
    else
        snprintf(fence, sizeof fence, "-");
    /* The name is escaped into a buffer first so the column can be padded. */
    char *name = NULL;
    size_t name_size = 0;
    FILE *m = open_memstream(&name, &name_size);
    if (m) {
        escape_text(m, e->name, e->name_len);
        fclose(m);
    }
    fprintf(f, ROW, name ? name : "?", kind, num(holders, sizeof holders, e->holder_count), fence,
            num(lease, sizeof lease, e->lease_left_ms), num(age, sizeof age, e->age_ms),
            num(waiters, sizeof waiters, e->waiters));
    free(name);
}

void entry_holders(FILE *f, const dlock_list_entry *e)
{
    char b[32];
    for (size_t i = 0; i < e->n_holders; i++) {
        const dlock_list_holder *h = &e->holders[i];
        fprintf(f, "    holder ");
        if (h->owner && h->owner[0])
            escape_text(f, h->owner, strlen(h->owner));
        else
            fputs("(unknown)", f);
        if (h->pid >= 0)
            fprintf(f, " pid %" PRId64, h->pid);
        if (h->host && h->host[0]) {
            fputs(" host ", f);
            escape_text(f, h->host, strlen(h->host));
        }
        if (h->fence)
            fprintf(f, " fence %" PRIu64, h->fence);
        if (h->lease_left_ms >= 0)
            fprintf(f, " lease-left %sms", num(b, sizeof b, h->lease_left_ms));
        if (h->age_ms >= 0)
            fprintf(f, " age %sms", num(b, sizeof b, h->age_ms));
        fputc('\n', f);
    }
}
