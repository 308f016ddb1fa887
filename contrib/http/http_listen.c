/* contrib/http/http_listen.c - binding a listening address and starting
 * libmicrohttpd on it (see http_listen.h). */
#include "http_listen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* What to do when the address cannot be listened on, by errno. */
static void advice(int err, const char *option, char *buf, size_t size)
{
    switch (err) {
    case EADDRINUSE:
        snprintf(buf, size, "another process, or another client in this one, already listens there: give each "
                 "client its own port in %s, or stop the other", option);
        break;
    case EADDRNOTAVAIL:
        snprintf(buf, size, "that address is not one of this host's: use 127.0.0.1 (this host only), 0.0.0.0 "
                 "(every interface) or an address of this host");
        break;
    case EACCES:
        snprintf(buf, size, "ports below 1024 need privileges: use a port of 1024 or above");
        break;
    case EAFNOSUPPORT:
        snprintf(buf, size, "this host has no network stack for that address family: use an IPv4 address");
        break;
    default:
        snprintf(buf, size, "check the address in %s", option);
    }
}

int http_listen_bind(const struct http_address *a, unsigned backlog, const char *option, char *why,
                     size_t why_len)
{
    int fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0) {
        /* A service restarted at once binds again, while connections of
         * its last run are still in TIME_WAIT. A second listener on the
         * port is still refused: that would take SO_REUSEPORT. */
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (const struct sockaddr *)&a->ss, a->len) == 0 && listen(fd, (int)backlog) == 0)
            return fd;
    }
    int err = errno;
    if (fd >= 0)
        close(fd);
    char what[256];
    advice(err, option, what, sizeof what);
    snprintf(why, why_len, "cannot listen there: %s; %s", strerror(err), what);
    return -1;
}

struct MHD_Daemon *http_listen_start(int fd, const struct http_address *a, unsigned flags,
                                     MHD_AccessHandlerCallback answer, void *answer_cls, MHD_LogCallback log,
                                     void *log_cls, const struct http_limits *limits)
{
    flags |= MHD_USE_ERROR_LOG;
    if (a->ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *daemon = NULL;
    int given = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (given >= 0)
        daemon = MHD_start_daemon(flags, 0, NULL, NULL, answer, answer_cls,
                                  /* the logger first, so that nothing said while
                                   * starting goes to stderr behind the caller's back */
                                  MHD_OPTION_EXTERNAL_LOGGER, log, log_cls,
                                  MHD_OPTION_LISTEN_SOCKET, given,
                                  MHD_OPTION_CONNECTION_LIMIT, limits->connections,
                                  MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits->per_address,
                                  MHD_OPTION_CONNECTION_TIMEOUT, limits->idle_timeout_s,
                                  MHD_OPTION_END);
    close(fd);
    return daemon;
}
