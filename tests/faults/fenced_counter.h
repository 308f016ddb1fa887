/* tests/faults/fenced_counter.h - the resource the fault suite's workers
 * protect with a lock: a counter in a file, kept apart from every lock
 * server (so faults injected there cannot touch it), guarded by fence
 * tokens with dlock_fence_admit() on reads and writes alike: once a holder
 * with token F has read, no holder with a smaller token may read or write.
 * Every operation is appended, in the resource's own order (one flock), to
 * DIR/resource.log as
 *   <seq> <t_us> <read|write|sread> <worker> <token> <ok|stale> <value before> <value after>
 * (sread: a shared holder's read, see fenced_counter_read_shared)
 * for the checker. t_us is CLOCK_MONOTONIC, shared by every process here. */
#ifndef TEST_FENCED_COUNTER_H
#define TEST_FENCED_COUNTER_H

#include <stdint.h>

/* Creates DIR/state (counter 0, highest token 0). 0, or -1 with errno. */
int fenced_counter_init(const char *dir);

/* Reads the counter with token: 1 admitted (*value set), 0 refused as
 * stale, -1 on an I/O error. */
int fenced_counter_read(const char *dir, int worker, uint64_t token, int64_t *value);

/* A shared holder's read: admitted when token is no lower than every
 * token admitted to an exclusive holder (readers holding together may read
 * in any order), raising the highest token so that an older writer's late
 * write is refused. 1 admitted, 0 refused, -1 on an I/O error. */
int fenced_counter_read_shared(const char *dir, int worker, uint64_t token, int64_t *value);

/* Writes new_value with token: 1 admitted, 0 refused as stale, -1 on an
 * I/O error. The log keeps the value it replaced, so that the checker can
 * see a lost update (a write whose read was not of the value it replaced). */
int fenced_counter_write(const char *dir, int worker, uint64_t token, int64_t new_value);

/* The counter and the number of admitted writes, read without a token. */
int fenced_counter_peek(const char *dir, int64_t *value, int64_t *writes);

int64_t fenced_now_us(void);

#endif
