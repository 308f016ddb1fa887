/* tests/adapters/test_adapters.c - each adapter in <dlock/adapters/> drives
 * a client on its real loop: an acquire that waits for another client's
 * hold is granted when a loop timer releases that hold, then released
 * from its own callback, which ends the loop. The local backend needs no
 * server; the adapters see only the client's descriptor. */
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
    snprintf(dir, sizeof dir, "/tmp/dlock-test-adapters-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    DIR *d = opendir(dir);
    struct dirent *ent;
    while (d && (ent = readdir(d))) {
        char path[512];
        if (ent->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
    return 0;
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

int main(void)
{
    const struct CMUnitTest cases[] = {
        cmocka_unit_test(libuv_adapter_delivers),
        cmocka_unit_test(libevent_adapter_delivers),
        cmocka_unit_test(libev_adapter_delivers),
    };
    return cmocka_run_group_tests_name("event-loop adapters", cases, make_dir, remove_dir);
}
