/* contrib/cli/leader.c - dlock leader: who leads an election, once or as
 * it changes. The value is whatever the leader published (any bytes), so
 * it reaches the terminal escaped, as names do. */
#include "config.h"

#include "cli.h"
#include "escape.h"

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

struct leader_view {
    const char *name;
    bool json;
};

static void print_leader(const struct leader_view *v, const void *value, size_t len, uint64_t term)
{
    if (v->json) {
        printf("{\"name\":");
        bool exact_name = escape_json(stdout, v->name, strlen(v->name));
        printf(",\"term\":%llu,\"value\":", (unsigned long long)term);
        bool exact_value = true;
        if (term == 0)
            printf("null");
        else
            exact_value = escape_json(stdout, value, len);
        if (!exact_name) {
            printf(",\"name_hex\":\"");
            escape_hex(stdout, v->name, strlen(v->name));
            printf("\"");
        }
        if (!exact_value) {
            printf(",\"value_hex\":\"");
            escape_hex(stdout, value, len);
            printf("\"");
        }
        printf("}\n");
    } else {
        escape_text(stdout, v->name, strlen(v->name));
        if (term == 0) {
            printf(": no leader\n");
        } else {
            printf(": term %llu, value ", (unsigned long long)term);
            escape_text(stdout, value, len);
            printf("\n");
        }
    }
    fflush(stdout);
}

static void on_change(const void *value, size_t len, uint64_t term, void *arg)
{
    print_leader(arg, value, len, term);
}

int cmd_leader(const char *config, int argc, char **argv)
{
    bool json = false, watch = false;
    static const struct option opts[] = {
        { "json", no_argument, NULL, 'j' },
        { "watch", no_argument, NULL, 'w' },
        { NULL, 0, NULL, 0 },
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "+jw", opts, NULL)) != -1) {
        if (c == 'j')
            json = true;
        else if (c == 'w')
            watch = true;
        else
            return EXIT_USAGE;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "%s: leader takes one election NAME (and --json, --watch)\n", progname);
        return EXIT_USAGE;
    }
    struct leader_view view = { argv[optind], json };
    /* Blocked before any thread starts, so that only sigwait takes them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    if (watch)
        pthread_sigmask(SIG_BLOCK, &stop, NULL);
    dlock_client *client;
    int code = open_client(&client, config);
    if (code != 0)
        return code;
    if (watch) {
        dlock_observer *observer;
        int rc = dlock_observe(client, view.name, strlen(view.name), on_change, &view, &observer);
        if (rc != DLOCK_OK) {
            code = fail(rc, "leader --watch");
        } else {
            int sig;
            sigwait(&stop, &sig);
            dlock_observe_stop(observer);
        }
    } else {
        char value[DLOCK_VALUE_MAX];
        size_t len = 0;
        uint64_t term = 0;
        int rc = dlock_leader(client, view.name, strlen(view.name), value, sizeof value, &len, &term);
        if (rc != DLOCK_OK) {
            code = fail(rc, "leader");
        } else {
            print_leader(&view, value, len, term);
            code = term == 0 ? 1 : 0;
        }
    }
    dlock_client_close(client);
    return code;
}
