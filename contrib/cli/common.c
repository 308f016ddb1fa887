/* contrib/cli/common.c - see cli.h. */
#include "cli.h"

#include <stdio.h>

int exit_code_for(int rc)
{
    switch (rc) {
    case DLOCK_OK: return 0;
    case DLOCK_EBUSY:
    case DLOCK_ETIMEDOUT:
    case DLOCK_ECANCELLED: return EXIT_TEMPFAIL;
    case DLOCK_EUNAVAILABLE:
    case DLOCK_ENOQUORUM:
    case DLOCK_EPROTOCOL: return EXIT_UNAVAILABLE;
    case DLOCK_ECONFIG: return EXIT_CONFIG;
    case DLOCK_EINVAL: return EXIT_USAGE;
    default: return EXIT_SOFTWARE;
    }
}

int fail(int rc, const char *what)
{
    fprintf(stderr, "%s: %s: %s (%s)\n", progname, what, dlock_strerror(rc), dlock_errmsg());
    return exit_code_for(rc);
}

int open_client(dlock_client **client, const char *config)
{
    int rc = dlock_client_open(client, config);
    if (rc != DLOCK_OK)
        return fail(rc, "cannot open client");
    return 0;
}
