/* contrib/cli/common.c - see cli.h. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

bool parse_count(const char *s, size_t max, size_t *out)
{
    char *end;
    errno = 0;
    /* strtoull takes "-1" as a huge number and skips leading space: only
     * digits are a count here. */
    if (s[0] < '0' || s[0] > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > max)
        return false;
    *out = (size_t)v;
    return true;
}

static int64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t monotonic_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

int64_t wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}
