/* contrib/cli/break.c - dlock break: an operator's forced release of a
 * stuck lock, through dlock_break(). It asks for --yes because the holder
 * it takes the lock from may still be running. */
#include "cli.h"
#include "escape.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int cmd_break(const char *config, int argc, char **argv)
{
    static const struct option opts[] = {
        { "yes", no_argument, NULL, 'y' },
        { NULL, 0, NULL, 0 },
    };
    bool yes = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+y", opts, NULL)) != -1) {
        if (c != 'y')
            return EXIT_USAGE;
        yes = true;
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "usage: %s break --yes NAME\n", progname);
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    if (!yes) {
        fprintf(stderr,
                "%s: break takes the lock from its holders, who may still be running: a resource that checks "
                "the fence refuses their writes once the next holder has written, others do not. Run again "
                "with --yes to break it.\n",
                progname);
        return EXIT_USAGE;
    }
    dlock_client *client;
    int code = open_client(&client, config);
    if (code)
        return code;
    int broken = 0;
    uint64_t fence = 0;
    int rc = dlock_break(client, name, strlen(name), &broken, &fence);
    dlock_client_close(client);
    if (rc != DLOCK_OK)
        return fail(rc, "break");
    printf("'");
    escape_text(stdout, name, strlen(name));
    if (broken)
        printf("' broken: its holders lose it at their next renewal; fence now %" PRIu64 "\n", fence);
    else
        printf("' was not held: nothing changed\n");
    return 0;
}
