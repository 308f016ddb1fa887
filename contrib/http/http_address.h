/* contrib/http/http_address.h - the one grammar of a listening address,
 * shared by the library's metrics.listen, its metrics exporter module and
 * dlock serve; and the loopback Host check of the servers bound to
 * loopback. Pure functions, no HTTP library: the library compiles this file
 * to check its configuration, the exporter and dlock to listen. */
#ifndef DLOCK_HTTP_ADDRESS_H
#define DLOCK_HTTP_ADDRESS_H

#include <stdbool.h>
#include <sys/socket.h>

struct http_address {
    struct sockaddr_storage ss;
    socklen_t len;
    unsigned port;  /* 0: the kernel chooses */
    bool loopback;  /* 127.0.0.0/8 or ::1: requests must name the loopback */
};

/*
 * Parses "ADDRESS:PORT" into *out. ADDRESS is a numeric IPv4 address, a
 * bracketed IPv6 address ("[::1]") or "localhost", which means 127.0.0.1
 * and is never looked up: opening a client must not wait on a resolver,
 * and an address says plainly which interface is exposed. PORT is 0..65535
 * in decimal; 0 lets the kernel choose, which only a caller that reports
 * the chosen port can offer. Returns false, with *out zeroed, when text is
 * anything else. Thread-safe.
 */
bool http_address_parse(const char *text, struct http_address *out);

/*
 * True when host, a Host header's value (a name or address and an
 * optional ":port"; NULL when the request had none, as HTTP/1.0 allows),
 * is "localhost", an address in 127.0.0.0/8, or "[::1]".
 *
 * A page on any web site can make a visitor's browser send requests to
 * 127.0.0.1 under the site's own name, by pointing that name there after
 * the page loaded (DNS rebinding); the browser then lets the page read the
 * answers. Such a request carries the site's name in Host, which a server
 * bound to loopback refuses. Thread-safe.
 */
bool http_host_is_loopback(const char *host);

#endif
