/* tests/backends/local/test_checked_local.c - the fault suite on the local
 * backend with lock caching: two worker processes take one name in turns
 * and increment the fenced counter (fault_worker), keeping their released
 * holds, with no fault and with a keeper SIGKILLed. The checker proves no
 * overlap, growing fences, stale writes refused, no lost increment, and
 * that every grant of a kept token was one continuous hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../faults/fault_run.h"
#include "../../support/temp_dir.h"
#include "../../../backends/local/local_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEASE_MS 1500

static char dir[128];

static void start(struct fault_run *run)
{
    char config[512];
    snprintf(config, sizeof config,
             "backend = \"local\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = 100;\n"
             "local = { dir = \"%s\"; };\n%s",
             LEASE_MS, dir, fault_run_cache_group());
    /* Two workers, so that the name is often free of waiters when a
     * worker comes back for it (a hold granted while others wait is not
     * kept). */
    fault_run_start(run, config, 2, 4000 * fault_run_scale(), 40);
}

static void kept_holds_no_fault(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run);
    fault_run_finish_kept_holds(&run, "local, kept holds, no fault");
}

/* Whether the name's file still carries the stopped worker's last
 * grant's fence and is held exclusively: the keeper's kernel lock (a
 * grant to anyone else would have raised the fence). */
static bool still_kept(uint64_t fence)
{
    DIR *d = opendir(dir);
    bool kept = false;
    struct dirent *de;
    while (d && !kept && (de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".lock") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct lock_file_header h;
        /* A write lock on the hold's byte is what an exclusive request would
         * ask for: F_GETLK names the hold that stands in its way. */
        struct flock probe = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = HOLD_BYTE, .l_len = 1 };
        kept = fd >= 0 && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && h.fence == fence &&
               fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type == F_WRLCK;
        if (fd >= 0)
            close(fd);
    }
    if (d)
        closedir(d);
    return kept;
}

/* A worker SIGKILLed just after its release, while its client keeps the
 * hold (the file's fence is its grant's, under its write lock): the
 * kernel drops the dead keeper's lock, so the other worker is granted at
 * once (well within the lease the helper allows). */
static void kept_holds_and_a_keeper_killed(void **state)
{
    (void)state;
    struct fault_run run;
    start(&run);
    fault_run_keep_going(&run, true); /* a kill late in the run still meets the other worker */
    fault_run_kill_a_keeper(&run, fault_run_keeper(&run, 5000, still_kept), "local, kept holds, a keeper SIGKILLed",
                            LEASE_MS);
}

int main(void)
{
    if (temp_dir_make(dir, sizeof dir, "checked-local") != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] no temp dir for the lock files\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(kept_holds_no_fault, fault_run_caching_on, fault_run_caching_off),
        cmocka_unit_test_setup_teardown(kept_holds_and_a_keeper_killed, fault_run_caching_on, fault_run_caching_off),
    };
    int failed = cmocka_run_group_tests_name("checked faults (local)", tests, NULL, NULL);
    temp_dir_remove(dir);
    return failed ? 1 : 0;
}
