/* tests/modules/outoftree/run_conformance.c - the conformance suite against
 * a backend chosen by configuration alone: backend = "flockdir", a module
 * built out of tree and found through $DLOCK_MODULE_PATH. Built against the
 * installed library (pkg-config libdlock), like any application. */
#include "../../conformance/conformance.h"

#include <dlock.h>
#include <stdio.h>
#include <stdlib.h>

static const char *dir;

static void config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    snprintf(buf, size,
             "backend = \"flockdir\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\n"
             "flockdir = { dir = \"%s\"; };\n",
             lease_ms, retry_cap_ms, dir);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: run_conformance LOCKDIR\n");
        return 2;
    }
    dir = argv[1];
    static const struct conformance_target target = { "out-of-tree module conformance (flockdir)", config, NULL,
                                                      NULL, 0, 0, 0, 0 };
    return conformance_run(&target) ? 1 : 0;
}
