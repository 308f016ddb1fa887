/* contrib/cli/top.c - dlock top: the listed names as a table that is drawn
 * again every few seconds, oldest holds (or most waiters) first. On a
 * terminal the screen is cleared and stale holds are in red; into a pipe or
 * file it prints one table, without escape sequences, and ends. */
#include "config.h"

#include "cli.h"
#include "entry.h"
#include "seen.h"
#include "view.h"

#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define CLEAR "\033[H\033[2J"
#define RED "\033[1;31m"
#define YELLOW "\033[33m"
#define RESET "\033[0m"

enum sort_key { BY_AGE, BY_WAITERS };

struct top {
    dlock_client *client;
    enum sort_key sort;
    int64_t stale_ms;
    bool tty;    /* colours */
    bool redraw; /* clear the screen before each table */
};

/* Descending; what the backend does not know (-1) goes last. */
static int compare_desc(int64_t a, int64_t b)
{
    return a < b ? 1 : a > b ? -1 : 0;
}

static int by_age(const void *x, const void *y)
{
    const dlock_list_entry *a = x, *b = y;
    int c = compare_desc(a->age_ms, b->age_ms);
    return c ? c : compare_desc(a->waiters, b->waiters);
}

static int by_waiters(const void *x, const void *y)
{
    const dlock_list_entry *a = x, *b = y;
    int c = compare_desc(a->waiters, b->waiters);
    return c ? c : compare_desc(a->age_ms, b->age_ms);
}

/* Rows the terminal has room for below the header lines; all when not a
 * terminal. */
static size_t room(const struct top *t)
{
    struct winsize ws;
    if (!t->tty || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 6)
        return (size_t)-1;
    return (size_t)ws.ws_row - 5;
}

static void draw(const struct top *t, struct view *v)
{
    time_t now = (time_t)(v->generated_ms / 1000);
    char clock[16];
    strftime(clock, sizeof clock, "%H:%M:%S", localtime(&now));
    if (t->redraw)
        fputs(CLEAR, stdout);
    printf("dlock top - backend %s - %s", dlock_client_backend(t->client), clock);
    if (v->rc != DLOCK_OK) {
        printf("\n%sbackend unreachable: %s%s\n", t->tty ? RED : "", v->error, t->tty ? RESET : "");
        return;
    }
    struct view_summary s = view_summarize(v, t->stale_ms);
    printf(" - %zu names%s, %zu held, %zu waited for, %zu stale", v->n, v->truncated ? " (cap reached)" : "",
           s.held, s.with_waiters, s.stale);
    if (s.oldest_age_ms >= 0)
        printf(", oldest hold %.1f s", (double)s.oldest_age_ms / 1000.0);
    printf("\n\n");
    if (v->n) /* an empty view has no array, and qsort wants one */
        qsort(v->entries, v->n, sizeof *v->entries, t->sort == BY_AGE ? by_age : by_waiters);
    entry_header(stdout);
    size_t shown = v->n < room(t) ? v->n : room(t);
    for (size_t i = 0; i < shown; i++) {
        const dlock_list_entry *e = &v->entries[i];
        const char *color = !t->tty ? NULL : view_is_stale(e, t->stale_ms) ? RED : e->waiters > 0 ? YELLOW : NULL;
        if (color)
            fputs(color, stdout);
        entry_row(stdout, e);
        if (color)
            fputs(RESET, stdout);
    }
    if (shown < v->n)
        printf("... and %zu more\n", v->n - shown);
}

/* Waits interval_ms, or less when SIGINT or SIGTERM comes: true then. */
static bool interrupted_within(const sigset_t *sigs, int64_t interval_ms)
{
    struct timespec ts = { interval_ms / 1000, (interval_ms % 1000) * 1000000 };
    return sigtimedwait(sigs, NULL, &ts) > 0;
}

static bool parse_interval(const char *s, int64_t *ms)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= 0.1 && v <= 3600))
        return false;
    *ms = (int64_t)(v * 1000);
    return true;
}

int cmd_top(const char *config, int argc, char **argv)
{
    struct top t = { NULL, BY_AGE, 300000, isatty(STDOUT_FILENO) == 1, false };
    int64_t interval_ms = 2000;
    bool once = false;
    size_t stale_s;
    static const struct option opts[] = {
        { "interval", required_argument, NULL, 'i' },
        { "sort", required_argument, NULL, 's' },
        { "stale-after", required_argument, NULL, 'a' },
        { "once", no_argument, NULL, '1' },
        { NULL, 0, NULL, 0 },
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "+i:s:a:1", opts, NULL)) != -1) {
        switch (c) {
        case '1': once = true; break;
        case 'i':
            if (!parse_interval(optarg, &interval_ms))
                return fprintf(stderr, "%s: --interval takes seconds, 0.1 to 3600, not '%s'\n", progname, optarg),
                       EXIT_USAGE;
            break;
        case 's':
            if (strcmp(optarg, "age") == 0)
                t.sort = BY_AGE;
            else if (strcmp(optarg, "waiters") == 0)
                t.sort = BY_WAITERS;
            else
                return fprintf(stderr, "%s: --sort takes age or waiters, not '%s'\n", progname, optarg),
                       EXIT_USAGE;
            break;
        case 'a':
            if (!parse_count(optarg, 365 * 86400, &stale_s))
                return fprintf(stderr, "%s: --stale-after takes seconds, 1 or more, not '%s'\n", progname, optarg),
                       EXIT_USAGE;
            t.stale_ms = (int64_t)stale_s * 1000;
            break;
        default: return EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "%s: top takes no NAME, only options\n", progname);
        return EXIT_USAGE;
    }
    /* Not a terminal: one table for a pipe or a file, as with --once. */
    if (!t.tty)
        once = true;
    t.redraw = !once;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    if (!once)
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    int code = open_client(&t.client, config);
    if (code != 0)
        return code;
    struct seen seen;
    seen_init(&seen);
    for (;;) {
        struct view v;
        view_take(&v, t.client, "", 0, VIEW_MAX);
        seen_apply(&seen, &v);
        draw(&t, &v);
        fflush(stdout);
        code = v.rc == DLOCK_OK ? 0 : exit_code_for(v.rc);
        view_free(&v);
        if (once || interrupted_within(&sigs, interval_ms))
            break;
    }
    seen_free(&seen);
    dlock_client_close(t.client);
    return once ? code : 0;
}
