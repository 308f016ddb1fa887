/* contrib/http/http_address.c - parsing a listening address, and the
 * loopback Host check (see http_address.h). */
#include "http_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

/* 0..65535 in decimal digits only: no sign, no space, no hex. */
static bool parse_port(const char *text, unsigned *out)
{
    size_t n = strlen(text);
    if (n == 0 || n > 5 || strspn(text, "0123456789") != n)
        return false;
    unsigned long v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned long)(text[i] - '0');
    if (v > 65535)
        return false;
    *out = (unsigned)v;
    return true;
}

bool http_address_parse(const char *text, struct http_address *out)
{
    memset(out, 0, sizeof *out);
    if (!text)
        return false;
    char host[INET6_ADDRSTRLEN];
    const char *host_start = text, *host_end, *port;
    bool v6 = text[0] == '[';
    if (v6) {
        host_start = text + 1;
        host_end = strchr(host_start, ']');
        if (!host_end || host_end[1] != ':')
            return false;
        port = host_end + 2;
    } else {
        host_end = strrchr(text, ':');
        if (!host_end)
            return false;
        port = host_end + 1;
    }
    size_t host_len = (size_t)(host_end - host_start);
    if (host_len == 0 || host_len >= sizeof host || !parse_port(port, &out->port))
        return false;
    memcpy(host, host_start, host_len);
    host[host_len] = 0;
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&out->ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)out->port);
        out->len = sizeof *a;
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
            goto bad;
        out->loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
        return true;
    }
    if (strcmp(host, "localhost") == 0)
        strcpy(host, "127.0.0.1");
    struct sockaddr_in *a = (struct sockaddr_in *)&out->ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)out->port);
    out->len = sizeof *a;
    /* inet_pton takes only the dotted quad: no "0x7f.1", no "127.1". */
    if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
        goto bad;
    out->loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    return true;
bad:
    memset(out, 0, sizeof *out);
    return false;
}

bool http_host_is_loopback(const char *host)
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
