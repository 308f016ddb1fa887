/* core/loopback_host.h - whether an HTTP request names this host's
 * loopback, for the HTTP servers that are bound to it (a client's
 * metrics.listen, dlock serve without a secret). A page on any web site
 * can make a visitor's browser send requests to 127.0.0.1 under the site's
 * own name, by pointing that name there after the page loaded (DNS
 * rebinding); the browser then lets the page read the answers. Such a
 * request carries the site's name in Host, which a loopback server refuses.
 * Header-only: the library and the dlock program both use it, and the
 * library exports no internal function. */
#ifndef DLOCK_LOOPBACK_HOST_H
#define DLOCK_LOOPBACK_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

/* True when host (a Host header's value: a name or address and an optional
 * ":port"; NULL when the request had none, as HTTP/1.0 allows) is
 * "localhost", an address in 127.0.0.0/8, or "[::1]". */
static inline bool dlock__host_is_loopback(const char *host)
{
    if (!host)
        return true; /* no name to rebind: a browser always sends Host */
    size_t n;
    if (host[0] == '[') {
        const char *end = strchr(host, ']');
        if (!end)
            return false;
        n = (size_t)(end - host) + 1;
        return n == 5 && memcmp(host, "[::1]", 5) == 0 && (host[n] == 0 || host[n] == ':');
    }
    n = strcspn(host, ":");
    if (host[n] != 0 && strspn(host + n + 1, "0123456789") != strlen(host + n + 1))
        return false;
    if (n == 9 && strncasecmp(host, "localhost", 9) == 0)
        return true;
    /* 127.a.b.c: four dot-separated numbers, the first 127. */
    if (n < 7 || strncmp(host, "127.", 4) != 0)
        return false;
    int dots = 0;
    for (size_t i = 0; i < n; i++) {
        if (host[i] == '.')
            dots++;
        else if (host[i] < '0' || host[i] > '9')
            return false;
    }
    return dots == 3;
}

#endif
