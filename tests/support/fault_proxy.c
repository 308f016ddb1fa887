/* tests/support/fault_proxy.c - see fault_proxy.h. */
#define _GNU_SOURCE 1 /* accept4, pipe2 */
#include "fault_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAIRS 64

/* Bytes read from one side, to be written to the other at due_ms. */
struct chunk {
    struct chunk *next;
    int64_t due_ms;
    size_t len;
    char data[];
};

struct pair {
    int client, server;        /* -1 when closed */
    bool half_closed;          /* the client has been sent FIN */
    bool draining;             /* the client closed: what it sent still goes on, at its time */
    struct chunk *queue[2];    /* [0] client -> server, [1] server -> client, oldest first */
};

struct fault_proxy {
    int listen_fd;
    int target_port;
    int wake[2];               /* a pipe: the control side pokes the loop */
    pthread_t thread;
    pthread_mutex_t mu;
    enum fault_mode mode;
    int64_t delay_ms;
    bool stop;
    uint64_t client_reads;     /* chunks read from clients (atomic) */
    struct pair pairs[MAX_PAIRS];
};

static void free_queue(struct chunk **q)
{
    while (*q) {
        struct chunk *c = *q;
        *q = c->next;
        free(c);
    }
}

static void close_pair(struct pair *p)
{
    free_queue(&p->queue[0]);
    free_queue(&p->queue[1]);
    if (p->client >= 0)
        close(p->client);
    if (p->server >= 0)
        close(p->server);
    p->client = p->server = -1;
    p->half_closed = p->draining = false;
}

static void half_close(struct pair *p)
{
    if (!p->half_closed && p->client >= 0)
        shutdown(p->client, SHUT_WR);
    p->half_closed = true;
}

static int connect_target(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool write_all(int fd, const char *buf, size_t n)
{
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w <= 0)
            return false;
        off += (size_t)w;
    }
    return true;
}

/* Reads one chunk from `from` and queues it to leave at now + delay_ms:
 * each connection and direction keeps its own order and its own delay, so
 * a delay is a latency, not a queue behind every other connection. False
 * when the side is done. */
static bool take(struct pair *p, int dir, int from, int64_t delay_ms)
{
    char buf[16384];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0)
        return false;
    struct chunk *c = malloc(sizeof *c + (size_t)n);
    if (!c)
        return false;
    c->next = NULL;
    c->due_ms = now_ms() + delay_ms;
    c->len = (size_t)n;
    memcpy(c->data, buf, (size_t)n);
    struct chunk **tail = &p->queue[dir];
    while (*tail)
        tail = &(*tail)->next;
    *tail = c;
    return true;
}

/* Writes every chunk that is due; returns false when a write failed, and
 * lowers *next_due_ms to the earliest chunk still waiting. */
static bool flush_due(struct pair *p, int64_t now, int64_t *next_due_ms)
{
    for (int dir = 0; dir < 2; dir++) {
        int to = dir == 0 ? p->server : p->client;
        while (p->queue[dir] && p->queue[dir]->due_ms <= now) {
            struct chunk *c = p->queue[dir];
            p->queue[dir] = c->next;
            /* Towards a half-closed or gone client nothing can go: drop it. */
            bool ok = (dir == 1 && (p->half_closed || p->client < 0)) || write_all(to, c->data, c->len);
            free(c);
            if (!ok)
                return false;
        }
        if (p->queue[dir] && p->queue[dir]->due_ms < *next_due_ms)
            *next_due_ms = p->queue[dir]->due_ms;
    }
    return true;
}

/* Writes every chunk that is due, across all connections, oldest first:
 * with one latency for all, bytes sent earlier on one connection arrive
 * before bytes sent later on another, as on a network (a proxy that fell
 * behind must not reorder them by its own table order). */
static void flush_in_order(struct fault_proxy *p, int64_t now, int64_t *next_due_ms)
{
    for (;;) {
        struct pair *oldest = NULL;
        int64_t oldest_due = INT64_MAX;
        for (int i = 0; i < MAX_PAIRS; i++) {
            struct pair *pr = &p->pairs[i];
            if (pr->server < 0 || (pr->client < 0 && !pr->draining))
                continue;
            for (int dir = 0; dir < 2; dir++)
                if (pr->queue[dir] && pr->queue[dir]->due_ms <= now && pr->queue[dir]->due_ms < oldest_due) {
                    oldest = pr;
                    oldest_due = pr->queue[dir]->due_ms;
                }
        }
        if (!oldest)
            break;
        /* flush_due writes that pair's due chunks; the one found is among
         * them, and any others of that pair were due no later. */
        int64_t ignored = INT64_MAX;
        if (!flush_due(oldest, oldest_due, &ignored))
            close_pair(oldest);
    }
    for (int i = 0; i < MAX_PAIRS; i++) /* a closed client's last bytes are out */
        if (p->pairs[i].draining && !p->pairs[i].queue[0])
            close_pair(&p->pairs[i]);
    for (int i = 0; i < MAX_PAIRS; i++)
        for (int dir = 0; dir < 2; dir++)
            if (p->pairs[i].client >= 0 && p->pairs[i].server >= 0 && p->pairs[i].queue[dir] &&
                p->pairs[i].queue[dir]->due_ms < *next_due_ms)
                *next_due_ms = p->pairs[i].queue[dir]->due_ms;
}

static void *serve(void *arg)
{
    struct fault_proxy *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        bool stop = p->stop;
        enum fault_mode mode = p->mode;
        int64_t delay = p->delay_ms;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        /* Reset closes everything; outside a black hole, connections it
         * accepted but never connected are closed (their clients retry). */
        for (int i = 0; i < MAX_PAIRS; i++) {
            if (mode == FAULT_RESET || (mode != FAULT_BLACKHOLE && p->pairs[i].client >= 0 && p->pairs[i].server < 0))
                close_pair(&p->pairs[i]);
            else if (mode == FAULT_HALF_CLOSE && p->pairs[i].client >= 0)
                half_close(&p->pairs[i]);
        }
        struct pollfd fds[2 + 2 * MAX_PAIRS];
        int idx[2 + 2 * MAX_PAIRS];
        int n = 0;
        fds[n] = (struct pollfd){ .fd = p->wake[0], .events = POLLIN };
        idx[n++] = -1;
        fds[n] = (struct pollfd){ .fd = p->listen_fd, .events = POLLIN };
        idx[n++] = -2;
        /* A black hole reads nothing: the bytes wait in the kernel, as they
         * would behind a partition, and flow again when it heals. */
        for (int i = 0; mode != FAULT_BLACKHOLE && i < MAX_PAIRS; i++) {
            if (p->pairs[i].client < 0 || p->pairs[i].server < 0)
                continue;
            fds[n] = (struct pollfd){ .fd = p->pairs[i].client, .events = POLLIN };
            idx[n++] = 2 * i;
            fds[n] = (struct pollfd){ .fd = p->pairs[i].server, .events = POLLIN };
            idx[n++] = 2 * i + 1;
        }
        /* Chunks whose time has come leave first; poll no longer than
         * until the next one is due. */
        int64_t now = now_ms(), next_due = now + 100;
        flush_in_order(p, now, &next_due);
        if (poll(fds, (nfds_t)n, (int)(next_due > now ? next_due - now : 0)) <= 0)
            continue;
        /* Woken by a change of mode: read it again before anything else is
         * handled (a connection accepted just after a reset ended must not
         * be closed by the reset; the events left are polled again). */
        if (fds[0].revents & POLLIN) {
            char c[64];
            ssize_t ignored = read(p->wake[0], c, sizeof c);
            (void)ignored;
            continue;
        }
        for (int k = 1; k < n; k++) {
            if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (idx[k] == -2) {
                int c = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                    continue;
                if (mode == FAULT_RESET) {
                    close(c);
                    continue;
                }
                int slot = -1;
                for (int i = 0; i < MAX_PAIRS && slot < 0; i++)
                    if (p->pairs[i].client < 0 && p->pairs[i].server < 0)
                        slot = i;
                int s = slot >= 0 && mode != FAULT_BLACKHOLE ? connect_target(p->target_port) : -1;
                if (slot < 0 || (s < 0 && mode != FAULT_BLACKHOLE)) {
                    close(c);
                    continue;
                }
                p->pairs[slot].client = c;
                p->pairs[slot].server = s; /* -1 in a black hole: never connected */
                if (mode == FAULT_HALF_CLOSE)
                    half_close(&p->pairs[slot]);
            } else {
                struct pair *pr = &p->pairs[idx[k] / 2];
                if (pr->client < 0 || pr->server < 0)
                    continue;
                if (idx[k] % 2 == 1 && mode == FAULT_DROP_REPLY_RESET) {
                    /* The answer of a request that ran: dropped, and the
                     * connection cut; the next one passes. */
                    close_pair(pr);
                    pthread_mutex_lock(&p->mu);
                    p->mode = mode = FAULT_PASS;
                    pthread_mutex_unlock(&p->mu);
                    continue;
                }
                if (mode == FAULT_DROP) {
                    /* Lost on the way: read and thrown away. */
                    char sink[16384];
                    ssize_t got = read(idx[k] % 2 == 0 ? pr->client : pr->server, sink, sizeof sink);
                    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
                        close_pair(pr);
                    continue;
                }
                bool ok = idx[k] % 2 == 0 ? take(pr, 0, pr->client, delay) : take(pr, 1, pr->server, delay);
                if (ok && idx[k] % 2 == 0)
                    __atomic_add_fetch(&p->client_reads, 1, __ATOMIC_RELAXED);
                if (!ok && idx[k] % 2 == 0 && pr->queue[0] && mode != FAULT_RESET) {
                    /* The client closed with bytes still on their way: as on
                     * a network, they arrive at their time all the same. */
                    close(pr->client);
                    pr->client = -1;
                    pr->draining = true;
                } else if (!ok) {
                    close_pair(pr);
                }
            }
        }
    }
    for (int i = 0; i < MAX_PAIRS; i++)
        close_pair(&p->pairs[i]);
    return NULL;
}

struct fault_proxy *fault_proxy_start(int target_port, int *port)
{
    struct fault_proxy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    for (int i = 0; i < MAX_PAIRS; i++)
        p->pairs[i].client = p->pairs[i].server = -1;
    p->target_port = target_port;
    p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(p->listen_fd, 64) != 0 || getsockname(p->listen_fd, (struct sockaddr *)&a, &len) != 0 ||
        pipe2(p->wake, O_CLOEXEC) != 0) {
        if (p->listen_fd >= 0)
            close(p->listen_fd);
        free(p);
        return NULL;
    }
    *port = ntohs(a.sin_port);
    pthread_mutex_init(&p->mu, NULL);
    pthread_create(&p->thread, NULL, serve, p);
    return p;
}

void fault_proxy_set(struct fault_proxy *p, enum fault_mode mode, int64_t delay_ms)
{
    pthread_mutex_lock(&p->mu);
    p->mode = mode;
    p->delay_ms = mode == FAULT_DELAY ? delay_ms : 0;
    pthread_mutex_unlock(&p->mu);
    ssize_t ignored = write(p->wake[1], "x", 1);
    (void)ignored;
}

uint64_t fault_proxy_client_reads(struct fault_proxy *p)
{
    return __atomic_load_n(&p->client_reads, __ATOMIC_RELAXED);
}

void fault_proxy_stop(struct fault_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_mutex_unlock(&p->mu);
    ssize_t ignored = write(p->wake[1], "x", 1);
    (void)ignored;
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
