/* contrib/cli/cli.h - what the dlock command's subcommands share. */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <dlock.h>
#include <stdbool.h>
#include <stddef.h>

/* Exit statuses from sysexits.h, so shell scripts can tell outcomes apart. */
enum {
    EXIT_USAGE = 64,       /* EX_USAGE */
    EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: backend unreachable */
    EXIT_SOFTWARE = 70,    /* EX_SOFTWARE: lock lost while the command ran, other failures */
    EXIT_TEMPFAIL = 75,    /* EX_TEMPFAIL: lock not had within the wait */
    EXIT_CONFIG = 78,      /* EX_CONFIG */
};

extern const char *progname;

/* The exit status for a libdlock result. */
int exit_code_for(int rc);

/* Reports a failed call on stderr ("dlock: WHAT: text (detail)") and
 * returns its exit status. */
int fail(int rc, const char *what);

/* Opens the client of config (NULL: the default); 0, or the exit status
 * after reporting the failure. */
int open_client(dlock_client **client, const char *config);

/* Parses a count of at least 1 and at most max, digits only. */
bool parse_count(const char *s, size_t max, size_t *out);

/* Milliseconds of the monotonic clock, and of the wall clock since 1970. */
int64_t monotonic_ms(void);
int64_t wall_ms(void);

/* dlock list (list.c), dlock serve (serve.c), dlock top (top.c). */
int cmd_list(const char *config, int argc, char **argv);
int cmd_serve(const char *config, int argc, char **argv);
int cmd_top(const char *config, int argc, char **argv);

/* dlock leader (leader.c). */
int cmd_leader(const char *config, int argc, char **argv);
/* dlock break (break.c). */
int cmd_break(const char *config, int argc, char **argv);

#endif
