/* tests/support/fault_proxy.h - a TCP proxy of the project's own that can
 * delay, black-hole and cut connections (the kernel here has no netem).
 *
 * It listens on 127.0.0.1 (a free port) and forwards each connection to one
 * target. One thread serves every connection; the fault in force applies to
 * bytes in both directions from the moment it is set:
 *   FAULT_PASS       forward at once;
 *   FAULT_DELAY      hold each chunk delay_ms before forwarding it;
 *   FAULT_BLACKHOLE  keep connections open but forward nothing (a partition
 *                    or a stopped peer, as TCP sees it), and accept new ones
 *                    without connecting them anywhere;
 *   FAULT_RESET      close every connection, and new ones at once;
 *   FAULT_HALF_CLOSE half-close every connection towards the client (it
 *                    reads end-of-file; what it sends still reaches the
 *                    server, whose answers are dropped), new ones as soon
 *                    as they are accepted;
 *   FAULT_DROP_REPLY_RESET  forward requests, but drop the first answer the
 *                    server sends and reset that connection: the request
 *                    ran, and its client only sees the connection die (a
 *                    load balancer, CLIENT KILL, a failover). Then back to
 *                    FAULT_PASS by itself: one shot;
 *   FAULT_DROP       read every byte that comes, either way, and throw it
 *                    away, connections kept open: requests lost before
 *                    they reach the server, so their answers never come. */
#ifndef TEST_FAULT_PROXY_H
#define TEST_FAULT_PROXY_H

#include <stdint.h>

enum fault_mode { FAULT_PASS, FAULT_DELAY, FAULT_BLACKHOLE, FAULT_RESET, FAULT_HALF_CLOSE, FAULT_DROP_REPLY_RESET, FAULT_DROP };

struct fault_proxy;

/* Starts a proxy to 127.0.0.1:target_port; NULL on failure. *port gets
 * the port to connect to. */
struct fault_proxy *fault_proxy_start(int target_port, int *port);
void fault_proxy_set(struct fault_proxy *p, enum fault_mode mode, int64_t delay_ms);
/* How many chunks it has taken from clients to forward (FAULT_DROP's are
 * not counted): a client that writes each request whole, and waits for its
 * answer before the next, makes one a request. */
uint64_t fault_proxy_client_reads(struct fault_proxy *p);
/* Stops it and closes every connection. */
void fault_proxy_stop(struct fault_proxy *p);

#endif
