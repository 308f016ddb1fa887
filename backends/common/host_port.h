/*
 * backends/common/host_port.h - "host:port" as the backends' settings write
 * it, split one way everywhere: the port after the last ':', a whole number
 * from 1 to 65535 with nothing after it, and a host that is not empty.
 */
#ifndef DLOCK_HOST_PORT_H
#define DLOCK_HOST_PORT_H

#include <stdbool.h>
#include <stddef.h>

/* Splits text into host (at most host_len - 1 bytes) and *port. False when
 * text is not "host:port" by the rules above (host and port untouched). */
bool host_port_split(const char *text, char *host, size_t host_len, int *port);

#endif
