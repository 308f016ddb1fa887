/* contrib/http/http_listen.h - a libmicrohttpd server on an address of
 * http_address.h, as the metrics exporter module and dlock serve start
 * theirs: the socket bound here, so that a refusal comes back with its
 * errno and advice (libmicrohttpd would only log it), then handed to
 * libmicrohttpd with limits on connections and a logger. */
#ifndef DLOCK_HTTP_LISTEN_H
#define DLOCK_HTTP_LISTEN_H

#include "http_address.h"

#include <microhttpd.h>
#include <stddef.h>

struct http_limits {
    unsigned connections;    /* at once, in all; also the listen backlog */
    unsigned per_address;    /* at once from one client address */
    unsigned idle_timeout_s; /* an idle connection is closed after this */
};

/*
 * Makes a socket, binds it to a and listens (close-on-exec, non-blocking,
 * SO_REUSEADDR). Returns the descriptor, owned by the caller; or -1 with
 * why set to "cannot listen there: <errno text>; <what to do>", where the
 * advice names option (the setting or flag the address came from).
 * Thread-safe.
 */
int http_listen_bind(const struct http_address *a, unsigned backlog, const char *option, char *why,
                     size_t why_len);

/*
 * Starts libmicrohttpd on the listening socket fd, with flags (its
 * MHD_USE_* threading flags; IPv6 and error logging are added here),
 * answer(answer_cls, ...) for each request and log(log_cls, ...) for
 * everything libmicrohttpd says, from the start on. fd is always closed
 * before this returns: libmicrohttpd gets a duplicate, since it closes what
 * it was given on most of its failure paths but not all. Returns the
 * daemon, stopped with MHD_stop_daemon(); NULL when libmicrohttpd would not
 * start (its reason went to log). Thread-safe.
 */
struct MHD_Daemon *http_listen_start(int fd, const struct http_address *a, unsigned flags,
                                     MHD_AccessHandlerCallback answer, void *answer_cls, MHD_LogCallback log,
                                     void *log_cls, const struct http_limits *limits);

#endif
