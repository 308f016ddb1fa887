/* tests/support/redis_server.h - a real redis-server owned by a test: started
 * on a free private port in a temp dir, stopped by its PID. A missing binary
 * or a server that does not come up is a test failure, never a skip. */
#ifndef TEST_REDIS_SERVER_H
#define TEST_REDIS_SERVER_H

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <sys/types.h>

struct test_redis {
    pid_t pid;
    int port;
    char dir[128];
    char socket[200];
    const char *extra[8];   /* extra redis-server arguments, NULL-terminated */
};

/* A port on 127.0.0.1 that was free a moment ago (-1 if none). */
int test_free_port(void);
/* Starts it (port 0: pick one). Returns 0, or -1 with a message on stderr. */
int test_redis_start(struct test_redis *r);
/* SIGKILL (hard) or SIGTERM, then waitpid. Keeps the dir for a restart. */
void test_redis_kill(struct test_redis *r, int hard);
/* Stops it and removes its directory. */
void test_redis_stop(struct test_redis *r);
/* Runs a command on a fresh connection; the caller frees the reply. */
redisReply *test_redis_cmd(const struct test_redis *r, const char *fmt, ...);
/* The same on any server (a sentinel, a cluster node) by its port on
 * 127.0.0.1; NULL if it cannot be reached. */
redisReply *test_redis_cmd_at(int port, const char *fmt, ...);
redisReply *test_redis_vcmd_at(int port, const char *fmt, va_list ap);

#endif
