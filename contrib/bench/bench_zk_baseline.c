/* contrib/bench/bench_zk_baseline.c - the plain ZooKeeper client loop: what
 * a careful user of the C client writes to take and drop the lock recipe's
 * node by hand, measured in the same run as libdlock's zookeeper backend.
 *
 *   zoo_create(EPHEMERAL | SEQUENCE) + zoo_get_children + zoo_delete
 *   under one existing parent, on one session. */
#include "config.h"

#include "bench.h"

#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef BENCH_ZOOKEEPER
#define THREADED 1
#include <zookeeper/zookeeper.h>

static void quiet(const char *message)
{
    (void)message;
}

static void zk_cycle(void *arg)
{
    zhandle_t *zh = arg;
    char created[256];
    struct String_vector children;
    int rc = zoo_create(zh, "/dlock-bench-baseline/lock-", "owner", 5, &ZOO_OPEN_ACL_UNSAFE,
                        ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created);
    if (rc == ZOK)
        rc = zoo_get_children(zh, "/dlock-bench-baseline", 0, &children);
    if (rc == ZOK) {
        deallocate_String_vector(&children);
        rc = zoo_delete(zh, created, -1);
    }
    if (rc != ZOK) {
        fprintf(stderr, "dlock-bench: the zookeeper baseline loop failed: %s\n", zerror(rc));
        exit(1);
    }
}
#endif

bool run_zk_baseline_uncontended(const struct bench_config *cfg, int64_t *samples)
{
#ifdef BENCH_ZOOKEEPER
    if (strcmp(cfg->backend, "zookeeper") != 0 || !cfg->path)
        return false;
    config_t c;
    config_init(&c);
    const char *hosts = "127.0.0.1:2181";
    if (config_read_file(&c, cfg->path) == CONFIG_TRUE)
        config_lookup_string(&c, "zookeeper.hosts", &hosts);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zhandle_t *zh = zookeeper_init2(hosts, NULL, 10000, NULL, NULL, 0, quiet);
    config_destroy(&c);
    for (int i = 0; zh && zoo_state(zh) != ZOO_CONNECTED_STATE && i < 500; i++)
        usleep(10000);
    if (!zh || zoo_state(zh) != ZOO_CONNECTED_STATE) {
        fprintf(stderr, "dlock-bench: zookeeper baseline: no session\n");
        if (zh)
            zookeeper_close(zh);
        return false;
    }
    zoo_create(zh, "/dlock-bench-baseline", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    double secs;
    size_t n = bench_timed_cycles(zk_cycle, zh, samples, &secs);
    bench_record_cycles(cfg->label, "baseline-uncontended", samples, n, secs);
    zookeeper_close(zh);
    return true;
#else
    (void)cfg;
    (void)samples;
    return false;
#endif
}
