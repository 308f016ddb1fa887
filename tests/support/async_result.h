/* tests/support/async_result.h - one non-blocking operation's result, as
 * its callback saw it: pass async_record as the dlock_done_fn and a struct
 * async_result (zeroed) as its argument. */
#ifndef TEST_ASYNC_RESULT_H
#define TEST_ASYNC_RESULT_H

#include "test_time.h"

#include <dlock.h>
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

#endif
