/* tests/support/async_result.h - one non-blocking operation's result, as
 * its callback saw it: pass async_record as the dlock_done_fn and a struct
 * async_result (zeroed) as its argument. */
#ifndef TEST_ASYNC_RESULT_H
#define TEST_ASYNC_RESULT_H

#include "test_time.h"

#include <dlock.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>

struct async_result {
    int calls;              /* how many times the callback came (1 is right) */
    int rc;                 /* its result */
    int64_t at_ms;          /* when, on the test clock (now_ms) */
    char detail[256];       /* dlock_errmsg() in the callback */
};

static inline void async_record(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    struct async_result *r = arg;
    r->calls++;
    r->rc = rc;
    r->at_ms = now_ms();
    snprintf(r->detail, sizeof r->detail, "%s", dlock_errmsg());
}

/* One turn of the caller's loop: waits up to poll_ms for c's descriptor,
 * then runs dlock_client_process. Its result (< 0: it failed). */
static inline int async_loop_turn(dlock_client *c, int poll_ms)
{
    struct pollfd p = { .fd = dlock_client_fd(c), .events = POLLIN };
    poll(&p, 1, poll_ms);
    return dlock_client_process(c);
}

/* dlock_acquire_start on l, then the caller's loop (poll on
 * dlock_client_fd, dlock_client_process) until its callback or limit_ms:
 * the callback's result, or DLOCK_EINTERNAL when it did not come in time
 * or the start or a process step failed (r says what was seen). */
static inline int async_acquire_looping(dlock_client *c, dlock_lock *l, int64_t wait_ms, int64_t limit_ms,
                                        struct async_result *r)
{
    if (dlock_acquire_start(l, wait_ms, async_record, r) != DLOCK_OK)
        return DLOCK_EINTERNAL;
    int64_t end = now_ms() + limit_ms;
    while (r->calls == 0 && now_ms() < end)
        if (async_loop_turn(c, 20) < 0)
            return DLOCK_EINTERNAL;
    return r->calls == 1 ? r->rc : DLOCK_EINTERNAL;
}

#endif
