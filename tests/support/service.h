/* tests/support/service.h - a server started for a test program through one
 * of the tests/support/<name>.sh scripts (start DIR PORT prints the PID,
 * stop DIR stops it), in a fresh temp dir on a private port. A missing
 * server or one that does not come up is a test failure, never a skip. */
#ifndef TEST_SERVICE_H
#define TEST_SERVICE_H

#include <sys/types.h>

struct test_service {
    const char *script;     /* "postgres", "mariadb" or "zookeeper" */
    int nodes;              /* servers to start where the script can (0: 1) */
    const char *variant;    /* passed to the script after the count ("tls"), or NULL */
    char dir[128];          /* the temp dir, removed at stop */
    char data[160];         /* the server's own dir inside it */
    int port;
    pid_t pid;              /* the first server's */
};

/* Starts it; port 0 picks one from the process id. 0, or -1 with the
 * script's message on stderr. Call before the process has threads. */
int test_service_start(struct test_service *s);
/* Sends sig to the server and to every process it started (PostgreSQL
 * serves each connection from a child process). For SIGSTOP, returns once
 * the server shows as stopped. */
void test_service_signal(const struct test_service *s, int sig);
/* Stops it by PID and removes its directory. 0, or -1 when the stop
 * script failed (said on stderr); 0 for a service not running. */
int test_service_stop(struct test_service *s);

#endif
