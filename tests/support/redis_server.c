/* tests/support/redis_server.c - see redis_server.h */
#include "redis_server.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0 };
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int ping(const struct test_redis *r)
{
    struct timeval tv = { 0, 200000 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisReply *rep = redisCommand(c, "PING");
        ok = rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
        if (rep)
            freeReplyObject(rep);
    }
    if (c)
        redisFree(c);
    return ok;
}

int test_redis_start(struct test_redis *r)
{
    if (!r->dir[0]) {
        snprintf(r->dir, sizeof r->dir, "/tmp/dlock-test-redis-XXXXXX");
        if (!mkdtemp(r->dir)) {
            perror("mkdtemp");
            return -1;
        }
        snprintf(r->socket, sizeof r->socket, "%s/redis.sock", r->dir);
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        if (!r->port || attempt > 0)
            r->port = test_free_port();
        char port[16];
        snprintf(port, sizeof port, "%d", r->port);
        const char *argv[32] = { "redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", r->dir,
                                 "--save", "", "--appendonly", "no", "--unixsocket", r->socket,
                                 "--unixsocketperm", "700", "--logfile", "redis.log", "--daemonize", "no" };
        int n = 19;
        for (int i = 0; r->extra[i] && n < 31; i++)
            argv[n++] = r->extra[i];
        argv[n] = NULL;
        pid_t pid = fork();
        if (pid == 0) {
            execvp("redis-server", (char **)argv);
            fprintf(stderr, "cannot run redis-server: %s (install redis-server)\n", strerror(errno));
            _exit(127);
        }
        r->pid = pid;
        for (int i = 0; i < 100; i++) {
            if (ping(r))
                return 0;
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid) {
                r->pid = 0;
                if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                    return -1;
                break; /* port taken meanwhile: try another */
            }
            struct timespec ts = { 0, 50 * 1000000L };
            nanosleep(&ts, NULL);
        }
        if (r->pid)
            test_redis_kill(r, 1);
    }
    fprintf(stderr, "redis-server did not come up; see %s/redis.log\n", r->dir);
    return -1;
}

void test_redis_kill(struct test_redis *r, int hard)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, hard ? SIGKILL : SIGTERM);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
}

void test_redis_stop(struct test_redis *r)
{
    test_redis_kill(r, 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
    if (r->dir[0] && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", r->dir);
    r->dir[0] = 0;
}

redisReply *test_redis_vcmd_at(int port, const char *fmt, va_list ap)
{
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisReply *rep = redisvCommand(c, fmt, ap);
    redisFree(c);
    return rep;
}

redisReply *test_redis_cmd_at(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = test_redis_vcmd_at(port, fmt, ap);
    va_end(ap);
    return rep;
}

redisReply *test_redis_cmd(const struct test_redis *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = test_redis_vcmd_at(r->port, fmt, ap);
    va_end(ap);
    return rep;
}
