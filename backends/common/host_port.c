/* backends/common/host_port.c - see host_port.h */
#include "config.h"

#include "host_port.h"

#include <stdlib.h>
#include <string.h>

bool host_port_split(const char *text, char *host, size_t host_len, int *port)
{
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || (size_t)(colon - text) >= host_len)
        return false;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (colon[1] == 0 || *end || p < 1 || p > 65535)
        return false;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = 0;
    *port = (int)p;
    return true;
}
