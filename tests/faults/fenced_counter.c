/* tests/faults/fenced_counter.c - see fenced_counter.h */
#include "fenced_counter.h"

#include <dlock.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

struct state {
    uint64_t highest;   /* the highest token admitted */
    int64_t value;
    int64_t writes;     /* admitted writes */
    int64_t seq;        /* operations logged */
    uint64_t highest_exclusive; /* the highest token admitted to an exclusive holder */
};

int64_t fenced_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void path_of(char *out, size_t size, const char *dir, const char *file)
{
    snprintf(out, size, "%s/%s", dir, file);
}

static int load(int fd, struct state *st)
{
    char buf[160];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return sscanf(buf, "%" SCNu64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNu64, &st->highest, &st->value,
                  &st->writes, &st->seq, &st->highest_exclusive) == 5
               ? 0
               : -1;
}

static int store(int fd, const struct state *st)
{
    char buf[160];
    int n = snprintf(buf, sizeof buf, "%" PRIu64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRIu64 "\n", st->highest,
                     st->value, st->writes, st->seq, st->highest_exclusive);
    if (pwrite(fd, buf, (size_t)n, 0) != n || ftruncate(fd, n) != 0)
        return -1;
    return 0;
}

int fenced_counter_init(const char *dir)
{
    char path[512];
    path_of(path, sizeof path, dir, "state");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    struct state st = { 0, 0, 0, 0, 0 };
    int rc = store(fd, &st);
    close(fd);
    return rc;
}

enum operation { OP_READ, OP_WRITE, OP_SHARED_READ };

/* One operation under the file lock: admit the token, apply, log. An
 * exclusive holder's read or write is admitted by dlock_fence_admit on the
 * highest token seen; a shared holder's read only needs a token no lower
 * than every exclusive holder's (readers that hold together read in any
 * order), and still raises the highest, so that a writer older than the
 * reader can no longer write. */
static int operate(const char *dir, int worker, uint64_t token, enum operation op, int64_t new_value,
                   int64_t *value)
{
    bool write = op == OP_WRITE;
    static const char *const names[] = { "read", "write", "sread" };
    char path[512], log_path[512];
    path_of(path, sizeof path, dir, "state");
    path_of(log_path, sizeof log_path, dir, "resource.log");
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = -1;
    if (flock(fd, LOCK_EX) == 0) {
        struct state st;
        if (load(fd, &st) == 0) {
            bool admitted;
            if (op == OP_SHARED_READ) {
                admitted = token >= st.highest_exclusive;
                if (admitted && token > st.highest)
                    st.highest = token;
            } else {
                admitted = dlock_fence_admit(&st.highest, token) == DLOCK_OK;
                if (admitted)
                    st.highest_exclusive = token;
            }
            int64_t before = st.value;
            if (admitted && write) {
                st.value = new_value;
                st.writes++;
            }
            st.seq++;
            FILE *log = fopen(log_path, "a");
            if (log) {
                fprintf(log, "%" PRId64 " %" PRId64 " %s %d %" PRIu64 " %s %" PRId64 " %" PRId64 "\n", st.seq,
                        fenced_now_us(), names[op], worker, token, admitted ? "ok" : "stale",
                        before, st.value);
                if (fclose(log) == 0 && store(fd, &st) == 0) {
                    rc = admitted ? 1 : 0;
                    if (value)
                        *value = before;
                }
            }
        }
        flock(fd, LOCK_UN);
    }
    close(fd);
    return rc;
}

int fenced_counter_read(const char *dir, int worker, uint64_t token, int64_t *value)
{
    return operate(dir, worker, token, OP_READ, 0, value);
}

int fenced_counter_read_shared(const char *dir, int worker, uint64_t token, int64_t *value)
{
    return operate(dir, worker, token, OP_SHARED_READ, 0, value);
}

int fenced_counter_write(const char *dir, int worker, uint64_t token, int64_t new_value)
{
    return operate(dir, worker, token, OP_WRITE, new_value, NULL);
}

int fenced_counter_peek(const char *dir, int64_t *value, int64_t *writes)
{
    char path[512];
    path_of(path, sizeof path, dir, "state");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct state st;
    int rc = flock(fd, LOCK_SH) == 0 ? load(fd, &st) : -1;
    close(fd);
    if (rc == 0) {
        *value = st.value;
        *writes = st.writes;
    }
    return rc;
}
