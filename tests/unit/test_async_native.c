/* tests/unit/test_async_native.c - the non-blocking API's native round
 * trips, in the core: a provider that sends its attempts (acquire_send)
 * and releases (release_send) has them parked on descriptors, so many are in flight at once on the
 * engine's few threads; an answer that never comes is dropped at its
 * deadline; a cancel does not lose a grant that is on its way. The
 * provider is the in-process fake ("fakesend"), whose answers the test
 * gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fake_provider.h"
#include "../support/test_client.h"
#include "../support/async_result.h"
#include "../support/test_time.h"

#include <dlock.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HANDLES 32 /* eight times the engine's threads */

static int setup(void **state)
{
    (void)state;
    fake_reset();
    return 0;
}

static dlock_client *open_client(void)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, "backend = \"fakesend\"; lease_ms = 3000; retry_base_ms = 5; "
                                          "retry_cap_ms = 20;");
    if (rc != DLOCK_OK)
        fail_msg("open: %s (%s)", dlock_strerror(rc), dlock_errmsg());
    return c;
}

/* One turn of the caller's loop. */
static void turn(dlock_client *c)
{
    struct pollfd p = { .fd = dlock_client_fd(c), .events = POLLIN };
    assert_true(p.fd >= 0);
    poll(&p, 1, 20);
    assert_true(dlock_client_process(c) >= 0);
}

/* A handle of NAME in c whose acquire (wait_ms) has been started and is
 * now in flight, its answer not given yet. */
static dlock_lock *start_in_flight(dlock_client *c, const char *name, int64_t wait_ms, struct async_result *r)
{
    dlock_lock *l;
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire_start(l, wait_ms, async_record, r), DLOCK_OK);
    int64_t end = now_ms() + slack_ms(5000);
    while (fake_get(&fake.in_flight) < 1 && now_ms() < end)
        turn(c);
    assert_int_equal(fake_get(&fake.in_flight), 1);
    return l;
}

static int callbacks(const struct async_result *r, int n)
{
    int calls = 0;
    for (int i = 0; i < n; i++)
        calls += r[i].calls;
    return calls;
}

static void attempts_in_flight_hold_no_thread(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *l[HANDLES];
    struct async_result r[HANDLES];
    memset(r, 0, sizeof r);
    for (int i = 0; i < HANDLES; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
        assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l[i]), DLOCK_OK);
        assert_int_equal(dlock_acquire_start(l[i], 0, async_record, &r[i]), DLOCK_OK);
    }
    /* No answer is given until every attempt is out: on a thread each, at
     * most four could be, and the rest would wait behind them forever. */
    int64_t end = now_ms() + slack_ms(5000);
    while (fake_get(&fake.in_flight) < HANDLES && now_ms() < end)
        turn(c);
    assert_int_equal(fake_get(&fake.most_in_flight), HANDLES);
    assert_int_equal(callbacks(r, HANDLES), 0);
    fake_answer_all();
    end = now_ms() + slack_ms(5000);
    while (callbacks(r, HANDLES) < HANDLES && now_ms() < end)
        turn(c);
    for (int i = 0; i < HANDLES; i++) {
        assert_int_equal(r[i].calls, 1);
        assert_int_equal(r[i].rc, DLOCK_OK);
    }
    assert_int_equal(fake_get(&fake.acquires), HANDLES); /* each answer read once */
    assert_int_equal(test_client_metric(c, "dlock_acquire_attempts_parked_total"), HANDLES);
    for (int i = 0; i < HANDLES; i++) {
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
        dlock_lock_free(l[i]);
    }
    dlock_client_close(c);
}

/* The answer is read, and the grant delivered, by the caller's own
 * dlock_client_process(): no worker is between the socket and the
 * callback. */
static void the_answer_is_read_on_the_callers_thread(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    struct async_result r = { 0 };
    dlock_lock *l = start_in_flight(c, "mine", 0, &r);
    assert_int_equal(r.calls, 0);
    fake_answer_all();
    struct pollfd p = { .fd = dlock_client_fd(c), .events = POLLIN };
    assert_int_equal(poll(&p, 1, (int)slack_ms(5000)), 1); /* the answer itself makes it readable */
    assert_int_equal(dlock_client_process(c), 1);          /* read and delivered in this call */
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_OK);
    pthread_mutex_lock(&fake.mu);
    bool here = pthread_equal(fake.recv_thread, pthread_self());
    pthread_mutex_unlock(&fake.mu);
    assert_true(here);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* An answer that waits to be read is work for the caller: the timeout
 * says so, for a loop that goes by it rather than by the descriptor. */
static void an_answer_waiting_makes_the_timeout_zero(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    struct async_result r = { 0 };
    dlock_lock *l = start_in_flight(c, "timeout", 0, &r);
    assert_int_equal(dlock_client_timeout_ms(c), -1); /* nothing to do yet */
    fake_answer_all();
    struct pollfd p = { .fd = dlock_client_fd(c), .events = POLLIN };
    assert_int_equal(poll(&p, 1, (int)slack_ms(5000)), 1);
    assert_int_equal(dlock_client_timeout_ms(c), 0);
    assert_int_equal(dlock_client_process(c), 1);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* The answer came in time, but the loop did not read it before the
 * attempt's deadline (a long callback): the grant is read, not dropped
 * unread and left on the server for its lease. */
static void an_answer_unread_at_the_deadline_is_read_not_dropped(void **state)
{
    (void)state;
    FAKE_SET(send_timeout_ms, 200);
    dlock_client *c = open_client();
    struct async_result r = { 0 };
    dlock_lock *l = start_in_flight(c, "late", 0, &r);
    int64_t end;
    fake_answer_all();
    sleep_ms(400); /* the loop busy past the deadline */
    end = now_ms() + slack_ms(5000);
    while (r.calls == 0 && now_ms() < end)
        turn(c);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(fake_get(&fake.drops), 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* A cancel that comes while the attempt is in flight, whose answer is
 * busy: the acquire ends with DLOCK_ECANCELLED at once, not after the
 * pause a busy answer is followed by. */
static void a_cancel_in_flight_ends_a_busy_acquire_at_once(void **state)
{
    (void)state;
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, "backend = \"fakesend\"; lease_ms = 3000; retry_base_ms = 5000; "
                                          "retry_cap_ms = 5000;");
    assert_int_equal(rc, DLOCK_OK);
    fake_hold_externally("busy", true);
    FAKE_SET(busy_hint_ms, 5000);
    struct async_result r = { 0 };
    dlock_lock *l = start_in_flight(c, "busy", -1, &r);
    int64_t end;
    assert_int_equal(dlock_cancel(l), DLOCK_OK);
    for (int i = 0; i < 3; i++)
        turn(c);
    int64_t answered_at = now_ms();
    fake_answer_all();
    end = now_ms() + 4000;
    while (r.calls == 0 && now_ms() < end)
        turn(c);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_ECANCELLED);
    assert_true(r.at_ms - answered_at < slack_ms(1000));
    dlock_lock_free(l);
    dlock_client_close(c);
    fake_hold_externally("busy", false);
}

static void an_answer_that_never_comes_is_dropped(void **state)
{
    (void)state;
    FAKE_SET(send_timeout_ms, 200);
    dlock_client *c = open_client();
    dlock_lock *l;
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    assert_int_equal(dlock_lock_new(c, "silent", 6, &o, &l), DLOCK_OK);
    struct async_result r = { 0 };
    int64_t start = now_ms();
    assert_int_equal(dlock_acquire_start(l, 0, async_record, &r), DLOCK_OK);
    int64_t end = now_ms() + slack_ms(5000);
    while (r.calls == 0 && now_ms() < end)
        turn(c);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_EUNAVAILABLE);
    assert_true(r.at_ms - start >= 200);
    assert_int_equal(fake_get(&fake.drops), 1);
    assert_int_equal(fake_get(&fake.in_flight), 0);
    assert_int_equal(fake_get(&fake.acquires), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void a_cancel_keeps_a_grant_in_flight(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    struct async_result r = { 0 };
    dlock_lock *l = start_in_flight(c, "racing", -1, &r);
    int64_t end;
    assert_int_equal(dlock_cancel(l), DLOCK_OK);
    for (int i = 0; i < 5; i++)
        turn(c); /* the cancel does not end the round trip */
    assert_int_equal(r.calls, 0);
    assert_int_equal(fake_get(&fake.in_flight), 1);
    fake_answer_all();
    end = now_ms() + slack_ms(5000);
    while (r.calls == 0 && now_ms() < end)
        turn(c);
    /* The server granted it: the grant is reported, and held, not lost
     * on the server until its lease ran out. */
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void close_waits_for_the_answers_in_flight(void **state)
{
    (void)state;
    FAKE_SET(send_timeout_ms, 300);
    dlock_client *c = open_client();
    dlock_lock *l[4];
    struct async_result r[4];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
        assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l[i]), DLOCK_OK);
        assert_int_equal(dlock_acquire_start(l[i], 0, async_record, &r[i]), DLOCK_OK);
    }
    int64_t end = now_ms() + slack_ms(5000);
    while (fake_get(&fake.in_flight) < 4 && now_ms() < end)
        turn(c);
    assert_int_equal(fake_get(&fake.in_flight), 4);
    /* Nobody answers: the close ends them at their deadline, each with a
     * callback, and nothing is left in flight. */
    dlock_client_close(c);
    assert_int_equal(callbacks(r, 4), 4);
    for (int i = 0; i < 4; i++)
        assert_true(r[i].rc == DLOCK_EUNAVAILABLE || r[i].rc == DLOCK_ECANCELLED);
    assert_int_equal(fake_get(&fake.in_flight), 0);
    assert_int_equal(fake_get(&fake.drops), 4);
}

/* Turns the loop until r's callback came (or a generous deadline passed). */
static void turn_until_called(dlock_client *c, const struct async_result *r)
{
    int64_t end = now_ms() + slack_ms(5000);
    while (r->calls == 0 && now_ms() < end)
        turn(c);
    assert_int_equal(r->calls, 1);
}

/* A handle of "r" in c, held by a blocking acquire. */
static dlock_lock *held(dlock_client *c)
{
    dlock_lock *l;
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    assert_int_equal(dlock_lock_new(c, "r", 1, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    return l;
}

static bool is_this_thread(pthread_t *t)
{
    pthread_mutex_lock(&fake.mu);
    bool here = pthread_equal(*t, pthread_self());
    pthread_mutex_unlock(&fake.mu);
    return here;
}

/* A release is sent by dlock_release_start() itself and its answer read by
 * dlock_client_process(): a hand-off starts without waking a worker. */
static void a_release_goes_out_from_the_calling_thread(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    dlock_lock *l = held(c);
    struct async_result r = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_OK);
    /* Sent before the call returned, from this thread. */
    assert_int_equal(fake_get(&fake.release_sends), 1);
    assert_true(is_this_thread(&fake.release_send_thread));
    assert_int_equal(fake_get(&fake.releases), 0);
    assert_int_equal(dlock_hold_count(l), 1); /* still held until the answer is read */
    fake_answer_all();
    turn_until_called(c, &r);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_true(is_this_thread(&fake.recv_thread));
    assert_int_equal(dlock_hold_count(l), 0);
    /* Free again at once, for anyone. */
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void *answer_later(void *arg)
{
    (void)arg;
    sleep_ms(100);
    fake_answer_all();
    return NULL;
}

/* A blocking acquire that waits for the handle's own release in flight,
 * made on the thread that runs the loop: the release's answer is read by
 * a worker, not left for the loop that is waiting, so the acquire goes on
 * as soon as it comes rather than at the release's deadline. */
static void a_blocking_call_on_the_loop_does_not_wait_for_its_own_answer(void **state)
{
    (void)state;
    FAKE_SET(send_timeout_ms, 10000);
    dlock_client *c = open_client();
    dlock_lock *l = held(c);
    struct async_result r = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_OK);
    pthread_t t;
    pthread_create(&t, NULL, answer_later, NULL);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 20000), DLOCK_OK); /* a new hold, after the release */
    int64_t took = now_ms() - t0;
    pthread_join(t, NULL);
    assert_true(took < 5000); /* not the 10 s deadline */
    turn_until_called(c, &r);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* A release whose answer never comes ends at its deadline: the hold is
 * the client's no more, and the caller is told it was not confirmed. */
static void a_release_unanswered_is_dropped(void **state)
{
    (void)state;
    FAKE_SET(send_timeout_ms, 100);
    dlock_client *c = open_client();
    dlock_lock *l = held(c);
    struct async_result r = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_OK);
    turn_until_called(c, &r);
    assert_int_equal(r.rc, DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(r.detail, "did not answer a release"));
    assert_int_equal(fake_get(&fake.drops), 1);
    assert_int_equal(fake_get(&fake.in_flight), 0);
    assert_int_equal(dlock_hold_count(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* An answer the backend cannot read this way (a connection lost with the
 * release in flight) is made again with the blocking release. */
static void a_release_answer_unreadable_is_sent_again(void **state)
{
    (void)state;
    FAKE_SET(release_answer_unreadable, true);
    dlock_client *c = open_client();
    dlock_lock *l = held(c);
    struct async_result r = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &r), DLOCK_OK);
    fake_answer_all();
    turn_until_called(c, &r);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1); /* by release, on a worker */
    assert_false(is_this_thread(&fake.release_thread));
    assert_int_equal(dlock_hold_count(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static dlock_client *open_in_process(void)
{
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, "backend = \"fakequick\"; lease_ms = 3000;"), DLOCK_OK);
    return c;
}

/* A backend whose calls never wait is called on the thread that starts the
 * operation: the attempt and the release are made before the start
 * returns, and only the callback waits for dlock_client_process(). */
static void an_in_process_backend_is_called_on_the_callers_thread(void **state)
{
    (void)state;
    dlock_client *c = open_in_process();
    assert_true(dlock_client_capabilities(c) & DLOCK_CAP_IN_PROCESS);
    dlock_lock *l;
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    assert_int_equal(dlock_lock_new(c, "q", 1, &o, &l), DLOCK_OK);
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(l, 1000, async_record, &r), DLOCK_OK);
    assert_int_equal(fake_get(&fake.acquires), 1);
    assert_true(is_this_thread(&fake.acquire_thread));
    assert_int_equal(r.calls, 0);
    assert_int_equal(dlock_client_process(c), 1);
    assert_int_equal(r.rc, DLOCK_OK);
    struct async_result rr = { 0 };
    assert_int_equal(dlock_release_start(l, async_record, &rr), DLOCK_OK);
    assert_int_equal(fake_get(&fake.releases), 1);
    assert_true(is_this_thread(&fake.release_thread));
    assert_int_equal(dlock_client_process(c), 1);
    assert_int_equal(rr.rc, DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* Handle `holder` of "h" held through the non-blocking API, and `next`
 * queued behind it in the same client, its acquire started. */
static void hold_and_queue(dlock_client *c, dlock_lock **holder, dlock_lock **next, struct async_result *r)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    assert_int_equal(dlock_lock_new(c, "h", 1, &o, holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "h", 1, &o, next), DLOCK_OK);
    struct async_result first = { 0 };
    assert_int_equal(dlock_acquire_start(*holder, 1000, async_record, &first), DLOCK_OK);
    assert_int_equal(dlock_client_process(c), 1);
    assert_int_equal(first.rc, DLOCK_OK);
    assert_int_equal(dlock_acquire_start(*next, slack_ms(5000), async_record, r), DLOCK_OK);
    assert_int_equal(fake_get(&fake.acquires), 1); /* queued in the client, not asked */
}

/* A hand-off inside the client on an in-process backend is stepped by the
 * loop: the next acquire's attempt is made by dlock_client_process(), and
 * its grant delivered in the same call. */
static void an_in_process_hand_off_is_stepped_by_the_loop(void **state)
{
    (void)state;
    dlock_client *c = open_in_process();
    dlock_lock *holder, *next;
    struct async_result r = { 0 }, released = { 0 };
    hold_and_queue(c, &holder, &next, &r);
    assert_int_equal(dlock_release_start(holder, async_record, &released), DLOCK_OK);
    struct pollfd p = { .fd = dlock_client_fd(c), .events = POLLIN };
    assert_int_equal(poll(&p, 1, 0), 1); /* work for the loop, signalled at once */
    assert_int_equal(dlock_client_process(c), 2);
    assert_int_equal(released.rc, DLOCK_OK);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(fake_get(&fake.acquires), 2);
    assert_true(is_this_thread(&fake.acquire_thread));
    dlock_lock_free(holder);
    dlock_lock_free(next);
    dlock_client_close(c);
}

/* A backend that sends its attempts natively: the acquire queued behind a
 * hold of the same client, kicked by its release, is stepped by the loop,
 * which sends its attempt itself (no worker wakes for a hand-off inside
 * the client). */
static void a_kicked_acquire_is_sent_by_the_loop(void **state)
{
    (void)state;
    dlock_client *c = open_client();
    struct async_result first = { 0 };
    dlock_lock *holder = start_in_flight(c, "r", 0, &first), *next; /* the handle's own hold */
    fake_answer_all();
    turn_until_called(c, &first);
    assert_int_equal(first.rc, DLOCK_OK);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    assert_int_equal(dlock_lock_new(c, "r", 1, &o, &next), DLOCK_OK);
    int sends = fake_get(&fake.sends);
    struct async_result r = { 0 };
    assert_int_equal(dlock_acquire_start(next, slack_ms(5000), async_record, &r), DLOCK_OK);
    int64_t end = now_ms() + slack_ms(5000); /* queued behind the hold by a worker */
    while (dlock_client_timeout_ms(c) == 0 && now_ms() < end)
        turn(c);
    assert_int_equal(fake_get(&fake.sends), sends);
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    end = now_ms() + slack_ms(5000);
    while (fake_get(&fake.sends) == sends && now_ms() < end)
        turn(c);
    assert_int_equal(fake_get(&fake.sends), sends + 1);
    assert_true(is_this_thread(&fake.send_thread));
    fake_answer_all();
    turn_until_called(c, &r);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(dlock_release(next), DLOCK_OK);
    dlock_lock_free(holder);
    dlock_lock_free(next);
    dlock_client_close(c);
}

/* A step queued for the loop is not waited for by a free on the loop's
 * own thread: the free cancels it on a worker and returns. */
static void a_free_on_the_loop_ends_a_step_queued_for_it(void **state)
{
    (void)state;
    dlock_client *c = open_in_process();
    dlock_lock *holder, *next;
    struct async_result r = { 0 }, released = { 0 };
    hold_and_queue(c, &holder, &next, &r);
    assert_int_equal(dlock_release_start(holder, async_record, &released), DLOCK_OK);
    dlock_lock_free(next); /* its step is queued for this thread, which does not process */
    assert_int_equal(r.calls, 1);
    assert_true(r.rc == DLOCK_ECANCELLED);
    assert_true(dlock_client_process(c) >= 1);
    assert_int_equal(released.calls, 1);
    dlock_lock_free(holder);
    dlock_client_close(c);
}

int main(void)
{
    if (dlock_provider_register(&fake_send_provider) != DLOCK_OK ||
        dlock_provider_register(&fake_in_process_provider) != DLOCK_OK) {
        fprintf(stderr, "cannot register the fake provider: %s\n", dlock_errmsg());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(attempts_in_flight_hold_no_thread, setup),
        cmocka_unit_test_setup(the_answer_is_read_on_the_callers_thread, setup),
        cmocka_unit_test_setup(an_answer_waiting_makes_the_timeout_zero, setup),
        cmocka_unit_test_setup(an_answer_unread_at_the_deadline_is_read_not_dropped, setup),
        cmocka_unit_test_setup(a_cancel_in_flight_ends_a_busy_acquire_at_once, setup),
        cmocka_unit_test_setup(an_answer_that_never_comes_is_dropped, setup),
        cmocka_unit_test_setup(a_cancel_keeps_a_grant_in_flight, setup),
        cmocka_unit_test_setup(close_waits_for_the_answers_in_flight, setup),
        cmocka_unit_test_setup(a_release_goes_out_from_the_calling_thread, setup),
        cmocka_unit_test_setup(a_release_unanswered_is_dropped, setup),
        cmocka_unit_test_setup(a_blocking_call_on_the_loop_does_not_wait_for_its_own_answer, setup),
        cmocka_unit_test_setup(a_release_answer_unreadable_is_sent_again, setup),
        cmocka_unit_test_setup(an_in_process_backend_is_called_on_the_callers_thread, setup),
        cmocka_unit_test_setup(an_in_process_hand_off_is_stepped_by_the_loop, setup),
        cmocka_unit_test_setup(a_free_on_the_loop_ends_a_step_queued_for_it, setup),
        cmocka_unit_test_setup(a_kicked_acquire_is_sent_by_the_loop, setup),
    };
    return cmocka_run_group_tests_name("async_native", tests, NULL, NULL);
}
