/* contrib/cli/list.c - dlock list: every name the backend has held or
 * waited for, as a table or as JSON, page by page through dlock_list(). */
#include "cli.h"
#include "escape.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Entries asked for per page when the caller set no limit. */
#define PAGE 256

struct printer {
    bool json;
    bool started;   /* the header or '[' is out */
    size_t printed;
};

static const char *kind_name(unsigned kind)
{
    return kind == DLOCK_MODE_SHARED ? "shared" : kind == DLOCK_MODE_SEMAPHORE ? "semaphore" : "exclusive";
}

/* ---- JSON ------------------------------------------------------------------------ */

/* A number, or null where the backend does not know it (negative). */
static void json_int(const char *key, int64_t v)
{
    if (v < 0)
        printf(",\"%s\":null", key);
    else
        printf(",\"%s\":%" PRId64, key, v);
}

static void json_fence(const char *key, uint64_t v)
{
    if (v == 0)
        printf(",\"%s\":null", key);
    else
        printf(",\"%s\":%" PRIu64, key, v);
}

static void json_holder(const dlock_list_holder *h)
{
    printf("{\"owner\":");
    if (h->owner && h->owner[0])
        escape_json(stdout, h->owner, strlen(h->owner));
    else
        printf("null");
    json_int("pid", h->pid);
    printf(",\"host\":");
    if (h->host && h->host[0])
        escape_json(stdout, h->host, strlen(h->host));
    else
        printf("null");
    json_fence("fence", h->fence);
    json_int("lease_left_ms", h->lease_left_ms);
    json_int("age_ms", h->age_ms);
    printf("}");
}

static void json_entry(const dlock_list_entry *e, bool first)
{
    printf("%s{\"name\":", first ? "\n" : ",\n");
    if (!escape_json(stdout, e->name, e->name_len)) {
        /* The string had to replace bytes: the exact ones as well. */
        printf(",\"name_hex\":\"");
        escape_hex(stdout, e->name, e->name_len);
        printf("\"");
    }
    printf(",\"kind\":\"%s\"", kind_name(e->kind));
    if (e->kind == DLOCK_MODE_SEMAPHORE)
        printf(",\"permits\":%u", e->permits);
    json_int("holder_count", e->holder_count);
    printf(",\"holders\":[");
    for (size_t i = 0; i < e->n_holders; i++) {
        if (i)
            printf(",");
        json_holder(&e->holders[i]);
    }
    printf("]");
    json_fence("fence", e->fence);
    json_int("lease_left_ms", e->lease_left_ms);
    json_int("age_ms", e->age_ms);
    json_int("waiters", e->waiters);
    printf("}");
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

static void text_holder(const dlock_list_holder *h)
{
    char b[32];
    printf("    holder %s", h->owner && h->owner[0] ? h->owner : "(unknown)");
    if (h->pid >= 0)
        printf(" pid %" PRId64, h->pid);
    if (h->host && h->host[0])
        printf(" host %s", h->host);
    if (h->fence)
        printf(" fence %" PRIu64, h->fence);
    if (h->lease_left_ms >= 0)
        printf(" lease-left %sms", num(b, sizeof b, h->lease_left_ms));
    if (h->age_ms >= 0)
        printf(" age %sms", num(b, sizeof b, h->age_ms));
    printf("\n");
}

static void text_entry(const dlock_list_entry *e)
{
    char kind[32], holders[32], fence[32], lease[32], age[32], waiters[32];
    if (e->kind == DLOCK_MODE_SEMAPHORE)
        snprintf(kind, sizeof kind, "semaphore/%u", e->permits);
    else
        snprintf(kind, sizeof kind, "%s", kind_name(e->kind));
    if (e->fence)
        snprintf(fence, sizeof fence, "%" PRIu64, e->fence);
    else
        snprintf(fence, sizeof fence, "-");
    /* The name is escaped into a buffer first so the column can be padded. */
    char *name = NULL;
    size_t name_size = 0;
    FILE *f = open_memstream(&name, &name_size);
    if (f) {
        escape_text(f, e->name, e->name_len);
        fclose(f);
    }
    printf(ROW, name ? name : "?", kind, num(holders, sizeof holders, e->holder_count), fence,
           num(lease, sizeof lease, e->lease_left_ms), num(age, sizeof age, e->age_ms),
           num(waiters, sizeof waiters, e->waiters));
    free(name);
    for (size_t i = 0; i < e->n_holders; i++)
        text_holder(&e->holders[i]);
}

/* The header (or '[') goes out with the first page that succeeded, so a
 * failure at once prints nothing but its message. */
static void start(struct printer *p)
{
    if (p->started)
        return;
    p->started = true;
    if (p->json)
        printf("[");
    else
        printf(ROW, "NAME", "KIND", "HOLDERS", "FENCE", "LEASE-LEFT", "AGE", "WAITERS");
}

static int print_entry(const dlock_list_entry *e, void *arg)
{
    struct printer *p = arg;
    start(p);
    if (p->json)
        json_entry(e, p->printed == 0);
    else
        text_entry(e);
    p->printed++;
    return DLOCK_OK;
}

/* ---- the command -------------------------------------------------------------------- */

static bool parse_limit(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v == 0 || s[0] == '-' || v > SIZE_MAX)
        return false;
    *out = (size_t)v;
    return true;
}

int cmd_list(const char *config, int argc, char **argv)
{
    bool json = false;
    const char *prefix = "", *cursor = NULL;
    size_t limit = 0; /* 0: everything */
    static const struct option opts[] = {
        { "json", no_argument, NULL, 'j' },
        { "prefix", required_argument, NULL, 'p' },
        { "limit", required_argument, NULL, 'n' },
        { "cursor", required_argument, NULL, 'C' },
        { NULL, 0, NULL, 0 },
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "+jp:n:C:", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = true; break;
        case 'p': prefix = optarg; break;
        case 'C': cursor = optarg; break;
        case 'n':
            if (!parse_limit(optarg, &limit))
                return fprintf(stderr, "%s: --limit takes a number of entries of at least 1, not '%s'\n",
                               progname, optarg), EXIT_USAGE;
            break;
        default: return EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "%s: list takes no NAME (use --prefix P)\n", progname);
        return EXIT_USAGE;
    }
    dlock_client *client;
    int code = open_client(&client, config);
    if (code != 0)
        return code;
    struct printer p = { json, false, 0 };
    char *held = cursor ? strdup(cursor) : NULL, *next = NULL;
    int rc;
    for (;;) {
        /* With --limit, a page never asks for more than is still wanted, so
         * its cursor is exactly where this listing stops. */
        size_t page = limit ? limit - p.printed : PAGE;
        rc = dlock_list(client, prefix, strlen(prefix), held, page, print_entry, &p, &next);
        free(held);
        held = next;
        if (rc == DLOCK_OK)
            start(&p);
        if (rc != DLOCK_OK || !next || (limit && p.printed == limit))
            break;
    }
    if (json && p.started)
        printf("%s]\n", p.printed ? "\n" : "");
    if (rc != DLOCK_OK)
        code = fail(rc, "list");
    else if (next)
        fprintf(stderr, "%s: more entries follow; go on with --cursor '%s'\n", progname, next);
    free(next);
    dlock_client_close(client);
    return code;
}
