/* tests/adapters/test_adapters.c - each adapter in <dlock/adapters/> drives
 * a client on its real loop: an acquire that waits for another client's
 * hold is granted when a loop timer releases that hold, then released
 * from its own callback, which ends the loop; and on libuv and libevent,
 * 200 handles on one loop thread keep a counter under one lock, each hold
 * lasting a turn of the loop, never two at once. The local backend needs
 * no server; the adapters see only the client's descriptor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlock.h>
#include <dlock/adapters/libev.h>
#include <dlock/adapters/libevent.h>
#include <dlock/adapters/libuv.h>

#include "../support/test_client.h"
#include "../support/temp_dir.h"
#include "../support/test_time.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    return temp_dir_make(dir, sizeof dir, "adapters");
}

static int remove_dir(void **state)
{
    (void)state;
    return temp_dir_remove(dir);
}

static dlock_client *open_local(void)
{
    char text[512];
    snprintf(text, sizeof text, "backend = \"local\";\nlocal = { dir = \"%s\"; };\n", dir);
    dlock_client *c = NULL;
    if (dlock_client_open_string(&c, text) != DLOCK_OK)
        fail_msg("open: %s", dlock_errmsg());
    return c;
}


/* What one run of a loop went through, in order. */
struct story {
    dlock_client *holder_client, *waiter_client;
    dlock_lock *held, *waiting;
    int granted, released, stops;
    int64_t let_go_at, granted_at;
    void (*stop)(struct story *);
    void *loop;
};

static void on_released(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    struct story *s = arg;
    assert_int_equal(rc, DLOCK_OK);
    s->released++;
    s->stop(s);
}

static void on_granted(dlock_lock *lock, int rc, void *arg)
{
    struct story *s = arg;
    assert_int_equal(rc, DLOCK_OK);
    s->granted++;
    s->granted_at = now_ms();
    assert_int_equal(dlock_release_start(lock, on_released, s), DLOCK_OK);
}

/* The loop timer's part: the other client lets go. */
static void let_go(struct story *s)
{
    assert_int_equal(s->granted, 0); /* still waiting until now */
    s->let_go_at = now_ms();
    assert_int_equal(dlock_release(s->held), DLOCK_OK);
}

static void story_begin(struct story *s, const char *name)
{
    s->holder_client = open_local();
    s->waiter_client = open_local();
    s->held = test_lock_named(s->holder_client, name);
    s->waiting = test_lock_named(s->waiter_client, name);
    assert_int_equal(dlock_acquire(s->held, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire_start(s->waiting, 10000, on_granted, s), DLOCK_OK);
}

static void story_end(struct story *s)
{
    assert_int_equal(s->granted, 1);
    assert_int_equal(s->released, 1);
    assert_true(s->granted_at >= s->let_go_at);
    dlock_lock_free(s->held);
    dlock_lock_free(s->waiting);
    dlock_client_close(s->holder_client);
    dlock_client_close(s->waiter_client);
}

/* ---- libuv -------------------------------------------------------------------- */

static void uv_stop_story(struct story *s)
{
    s->stops++;
    uv_stop((uv_loop_t *)s->loop);
}

static void uv_let_go(uv_timer_t *t)
{
    let_go((struct story *)t->data);
}

static void uv_closed(uv_handle_t *h)
{
    (void)h;
}

static void libuv_adapter_delivers(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct story s = { .stop = uv_stop_story, .loop = &loop };
    story_begin(&s, "adapter-uv");
    dlock_uv adapter;
    assert_int_equal(dlock_uv_attach(&adapter, &loop, s.waiter_client), DLOCK_OK);
    uv_timer_t timer;
    uv_timer_init(&loop, &timer);
    timer.data = &s;
    uv_timer_start(&timer, uv_let_go, 100, 0);
    int64_t t0 = now_ms();
    while (!s.stops && now_ms() - t0 < 10000)
        uv_run(&loop, UV_RUN_ONCE);
    dlock_uv_detach(&adapter, uv_closed);
    uv_close((uv_handle_t *)&timer, uv_closed);
    uv_run(&loop, UV_RUN_DEFAULT); /* the closes */
    assert_int_equal(uv_loop_close(&loop), 0);
    story_end(&s);
}

/* ---- libevent ----------------------------------------------------------------- */

static void event_stop_story(struct story *s)
{
    s->stops++;
    event_base_loopbreak((struct event_base *)s->loop);
}

static void event_let_go(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    let_go(arg);
}

static void libevent_adapter_delivers(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct story s = { .stop = event_stop_story, .loop = base };
    story_begin(&s, "adapter-event");
    dlock_libevent adapter;
    assert_int_equal(dlock_libevent_attach(&adapter, base, s.waiter_client), DLOCK_OK);
    struct event *timer = evtimer_new(base, event_let_go, &s);
    struct timeval tv = { 0, 100000 };
    evtimer_add(timer, &tv);
    struct timeval limit = { 10, 0 };
    event_base_loopexit(base, &limit);
    event_base_dispatch(base);
    dlock_libevent_detach(&adapter);
    event_free(timer);
    event_base_free(base);
    story_end(&s);
}

/* ---- libev ------------------------------------------------------------------- */

static void ev_stop_story(struct story *s)
{
    s->stops++;
    ev_break((struct ev_loop *)s->loop, EVBREAK_ALL);
}

static void ev_let_go(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    let_go(w->data);
}

static void ev_give_up(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void libev_adapter_delivers(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(loop);
    struct story s = { .stop = ev_stop_story, .loop = loop };
    story_begin(&s, "adapter-ev");
    dlock_libev adapter;
    assert_int_equal(dlock_libev_attach(&adapter, loop, s.waiter_client), DLOCK_OK);
    ev_timer timer, limit;
    ev_timer_init(&timer, ev_let_go, 0.1, 0.);
    timer.data = &s;
    ev_timer_start(loop, &timer);
    ev_timer_init(&limit, ev_give_up, 10., 0.);
    ev_timer_start(loop, &limit);
    ev_run(loop, 0);
    ev_timer_stop(loop, &timer);
    ev_timer_stop(loop, &limit);
    dlock_libev_detach(&adapter);
    ev_loop_destroy(loop);
    story_end(&s);
}

/* ---- 200 handles on one loop thread, a counter under the lock -------------------- */

#define CLIENTS 8
#define PER_CLIENT 25
#define HOLDERS (CLIENTS * PER_CLIENT)
#define ROUNDS 2

struct counter_run;

/* One handle: takes the lock, holds it across a turn of the loop (a timer
 * of 0 ms), adds one to the counter, lets go, and does it again. */
struct holder {
    struct counter_run *run;
    dlock_lock *lock;
    int rounds;
    void *timer;              /* the loop's timer for the hold's end */
};

struct counter_run {
    dlock_client *clients[CLIENTS];
    struct holder holders[HOLDERS];
    int inside;               /* holders inside the critical section now */
    int overlaps;             /* times a grant found another inside */
    long counter;
    int finished, failures;
    void (*hold_for_a_turn)(struct holder *);
    void (*stop)(struct counter_run *);
};

static void counter_acquire(struct holder *h);

static void counter_released(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    struct holder *h = arg;
    if (rc != DLOCK_OK)
        h->run->failures++;
    if (++h->rounds < ROUNDS) {
        counter_acquire(h);
    } else if (++h->run->finished == HOLDERS) {
        h->run->stop(h->run);
    }
}

/* The hold's end, a turn of the loop after its grant. */
static void counter_hold_ends(struct holder *h)
{
    long seen = h->run->counter;
    h->run->counter = seen + 1;
    h->run->inside--;
    assert_int_equal(dlock_release_start(h->lock, counter_released, h), DLOCK_OK);
}

static void counter_granted(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    struct holder *h = arg;
    if (rc != DLOCK_OK) {
        h->run->failures++;
        counter_released(lock, DLOCK_OK, h);
        return;
    }
    if (h->run->inside++ > 0)
        h->run->overlaps++;
    h->run->hold_for_a_turn(h);
}

static void counter_acquire(struct holder *h)
{
    assert_int_equal(dlock_acquire_start(h->lock, -1, counter_granted, h), DLOCK_OK);
}

static void counter_begin(struct counter_run *run, const char *name)
{
    for (int c = 0; c < CLIENTS; c++)
        run->clients[c] = open_local();
    for (int i = 0; i < HOLDERS; i++) {
        run->holders[i].run = run;
        run->holders[i].lock = test_lock_named(run->clients[i % CLIENTS], name);
    }
}

static void counter_end(struct counter_run *run)
{
    assert_int_equal(run->failures, 0);
    assert_int_equal(run->finished, HOLDERS);
    assert_int_equal(run->overlaps, 0);
    assert_int_equal(run->counter, (long)HOLDERS * ROUNDS);
    for (int i = 0; i < HOLDERS; i++)
        dlock_lock_free(run->holders[i].lock);
    for (int c = 0; c < CLIENTS; c++)
        dlock_client_close(run->clients[c]);
}

static void uv_hold_ends(uv_timer_t *t)
{
    counter_hold_ends((struct holder *)t->data);
}

static void uv_hold_for_a_turn(struct holder *h)
{
    uv_timer_start((uv_timer_t *)h->timer, uv_hold_ends, 0, 0);
}

static uv_loop_t *counter_uv_loop;

static void uv_stop_run(struct counter_run *run)
{
    (void)run;
    uv_stop(counter_uv_loop);
}

static void libuv_200_handles_keep_a_counter(void **state)
{
    (void)state;
    static struct counter_run run;
    memset(&run, 0, sizeof run);
    run.hold_for_a_turn = uv_hold_for_a_turn;
    run.stop = uv_stop_run;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    counter_uv_loop = &loop;
    counter_begin(&run, "adapter-uv-counter");
    static dlock_uv adapters[CLIENTS];
    static uv_timer_t timers[HOLDERS];
    for (int c = 0; c < CLIENTS; c++)
        assert_int_equal(dlock_uv_attach(&adapters[c], &loop, run.clients[c]), DLOCK_OK);
    for (int i = 0; i < HOLDERS; i++) {
        uv_timer_init(&loop, &timers[i]);
        timers[i].data = &run.holders[i];
        run.holders[i].timer = &timers[i];
        counter_acquire(&run.holders[i]);
    }
    int64_t t0 = now_ms();
    while (run.finished < HOLDERS && now_ms() - t0 < 60000)
        uv_run(&loop, UV_RUN_ONCE);
    for (int c = 0; c < CLIENTS; c++)
        dlock_uv_detach(&adapters[c], NULL);
    for (int i = 0; i < HOLDERS; i++)
        uv_close((uv_handle_t *)&timers[i], NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    counter_end(&run);
}

static void event_hold_ends(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    counter_hold_ends(arg);
}

static void event_hold_for_a_turn(struct holder *h)
{
    struct timeval now = { 0, 0 };
    evtimer_add((struct event *)h->timer, &now);
}

static struct event_base *counter_event_base;

static void event_stop_run(struct counter_run *run)
{
    (void)run;
    event_base_loopbreak(counter_event_base);
}

static void libevent_200_handles_keep_a_counter(void **state)
{
    (void)state;
    static struct counter_run run;
    memset(&run, 0, sizeof run);
    run.hold_for_a_turn = event_hold_for_a_turn;
    run.stop = event_stop_run;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    counter_event_base = base;
    counter_begin(&run, "adapter-event-counter");
    static dlock_libevent adapters[CLIENTS];
    for (int c = 0; c < CLIENTS; c++)
        assert_int_equal(dlock_libevent_attach(&adapters[c], base, run.clients[c]), DLOCK_OK);
    for (int i = 0; i < HOLDERS; i++) {
        run.holders[i].timer = evtimer_new(base, event_hold_ends, &run.holders[i]);
        assert_non_null(run.holders[i].timer);
        counter_acquire(&run.holders[i]);
    }
    struct timeval limit = { 60, 0 };
    event_base_loopexit(base, &limit);
    event_base_dispatch(base);
    for (int c = 0; c < CLIENTS; c++)
        dlock_libevent_detach(&adapters[c]);
    for (int i = 0; i < HOLDERS; i++)
        event_free((struct event *)run.holders[i].timer);
    event_base_free(base);
    counter_end(&run);
}

int main(void)
{
    const struct CMUnitTest cases[] = {
        cmocka_unit_test(libuv_adapter_delivers),
        cmocka_unit_test(libevent_adapter_delivers),
        cmocka_unit_test(libev_adapter_delivers),
        cmocka_unit_test(libuv_200_handles_keep_a_counter),
        cmocka_unit_test(libevent_200_handles_keep_a_counter),
    };
    return cmocka_run_group_tests_name("event-loop adapters", cases, make_dir, remove_dir);
}
