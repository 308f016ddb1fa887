/* contrib/cli/list.c - dlock list: every name the backend has held or
 * waited for, as a table or as JSON, page by page through dlock_list(). */
#include "cli.h"
#include "entry.h"
#include "escape.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Entries asked for per page when the caller set no limit. */
#define PAGE 256

struct printer {
    dlock_client *reader;   /* a second client for leader reads (elections), or NULL */
    bool json;
    bool started;   /* the header or '[' is out */
    size_t printed;
};

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
        entry_header(stdout);
}

static int print_entry(const dlock_list_entry *e, void *arg)
{
    struct printer *p = arg;
    start(p);
    struct entry_election el;
    entry_election_read(p->reader, e, &el);
    if (p->json) {
        fputs(p->printed == 0 ? "\n" : ",\n", stdout);
        entry_json(stdout, e, &el);
    } else {
        entry_row(stdout, e);
        entry_holders(stdout, e);
        entry_election_line(stdout, &el);
    }
    entry_election_free(&el);
    p->printed++;
    return DLOCK_OK;
}

/* ---- the command -------------------------------------------------------------------- */

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
            if (!parse_count(optarg, SIZE_MAX, &limit))
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
    /* Leaders are read on a client of their own: the listing's callback
     * must not use the client that lists. */
    dlock_client *reader = NULL;
    if ((dlock_client_capabilities(client) & DLOCK_CAP_ELECTION) && open_client(&reader, config) != 0)
        reader = NULL; /* reported; the listing goes on without leaders */
    struct printer p = { reader, json, false, 0 };
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
    {
        /* Backends promise a printable cursor; a backend's data should
         * still not reach the terminal raw if one broke that. */
        fprintf(stderr, "%s: more entries follow; go on with --cursor '", progname);
        escape_text(stderr, next, strlen(next));
        fprintf(stderr, "'\n");
    }
    free(next);
    dlock_client_close(reader);
    dlock_client_close(client);
    return code;
}
