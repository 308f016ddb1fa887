/* tests/support/campaigner.h - a candidate campaigning on a thread of its
 * own, for the election tests: start it with pthread_create(&t, NULL,
 * campaigner_run, &c); c.rc is -99 while the campaign waits (read it with
 * __atomic_load_n until the thread is joined). */
#ifndef DLOCK_TEST_CAMPAIGNER_H
#define DLOCK_TEST_CAMPAIGNER_H

#include "test_time.h"

#include <dlock.h>
#include <stdint.h>

struct campaigner {
    dlock_election *e;
    int64_t wait_ms;
    int rc;          /* dlock_campaign's result, -99 until it returns */
    int64_t done_at; /* now_ms() when it returned */
};

static inline void *campaigner_run(void *arg)
{
    struct campaigner *c = arg;
    int rc = dlock_campaign(c->e, c->wait_ms);
    c->done_at = now_ms();
    __atomic_store_n(&c->rc, rc, __ATOMIC_RELEASE);
    return NULL;
}

#endif
