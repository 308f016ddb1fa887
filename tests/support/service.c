/* tests/support/service.c - see service.h. */
#include "service.h"

#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *srcdir(void)
{
    const char *d = getenv("DLOCK_TEST_SRCDIR");
    return d ? d : "tests";
}

/* Services this process started: the next one starts from other ports. */
static int started;

int test_service_start(struct test_service *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/dlock-test-%s-XXXXXX", s->script);
    if (!mkdtemp(s->dir)) {
        perror("mkdtemp");
        return -1;
    }
    chmod(s->dir, 0755); /* PostgreSQL runs as its own user when we are root */
    /* Below the kernel's ephemeral range (32768 up), so that no client
     * socket of this machine can be sitting on the port; a port that is
     * taken anyway is retried with the next candidate. */
    bool chosen = s->port != 0;
    int got = 0, status = -1;
    long pid = 0;
    char cmd[512];
    for (int attempt = 0; attempt < (chosen ? 1 : 4) && (got != 1 || status != 0 || pid <= 0); attempt++) {
        if (!chosen)
            s->port = 20000 + (int)((getpid() * 7 + (attempt + started * 4) * 1009) % 12000);
        snprintf(s->data, sizeof s->data, "%s/%d", s->dir, attempt);
        snprintf(cmd, sizeof cmd, "bash '%s/support/%s.sh' start '%s' %d %d %s", srcdir(), s->script, s->data, s->port,
                 s->nodes > 0 ? s->nodes : 1, s->variant ? s->variant : "");
        FILE *p = popen(cmd, "r");
        if (!p) {
            perror("popen");
            return -1;
        }
        got = fscanf(p, "%ld", &pid);
        status = pclose(p);
    }
    if (got != 1 || status != 0 || pid <= 0) {
        fprintf(stderr, "test: %s did not start (%s)\n", s->script, cmd);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test: cannot remove %s\n", s->dir);
        return -1;
    }
    s->pid = (pid_t)pid;
    started++;
    return 0;
}

int test_service_stop(struct test_service *s)
{
    if (!s->pid)
        return 0;
    char cmd[512];
    /* The stop script's status, not that of the rm after it. */
    snprintf(cmd, sizeof cmd, "bash '%s/support/%s.sh' stop '%s'; st=$?; rm -rf '%s'; exit $st", srcdir(), s->script,
             s->data, s->dir);
    int failed = system(cmd) != 0;
    if (failed)
        fprintf(stderr, "test: stopping %s failed\n", s->script);
    s->pid = 0;
    return failed ? -1 : 0;
}

/* The parent PID of pid, from /proc/PID/stat (field 4, after the command
 * name in parentheses, which may itself hold spaces). */
static long parent_of(long pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long ppid = -1;
    if (fgets(line, sizeof line, f)) {
        char *close = strrchr(line, ')');
        if (close)
            sscanf(close + 1, " %*c %ld", &ppid);
    }
    fclose(f);
    return ppid;
}

/* The state letter of pid (field 3 of /proc/PID/stat), '?' if gone. */
static char state_of(long pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    char state = '?';
    if (f && fgets(line, sizeof line, f)) {
        char *close = strrchr(line, ')');
        if (close)
            sscanf(close + 1, " %c", &state);
    }
    if (f)
        fclose(f);
    return state;
}

void test_service_signal(const struct test_service *s, int sig)
{
    if (!s->pid)
        return;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long pid = atol(e->d_name);
        if (pid > 0 && parent_of(pid) == (long)s->pid)
            kill((pid_t)pid, sig);
    }
    if (d)
        closedir(d);
    kill(s->pid, sig);
    /* kill() returns before the target has stopped: a request sent at once
     * could still be served. Wait (up to 2 s) until it shows as stopped. */
    for (int i = 0; sig == SIGSTOP && i < 400 && state_of(s->pid) != 'T' && state_of(s->pid) != 't'; i++)
        usleep(5000);
}
