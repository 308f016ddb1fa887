/*
 * dlock/adapters/libuv.h - drives a libdlock client's non-blocking API from
 * a libuv loop: the client's descriptor is polled, and its results are
 * delivered (dlock_client_process) on the loop's thread.
 *
 *     dlock_uv adapter;
 *     dlock_uv_attach(&adapter, uv_default_loop(), client);
 *     dlock_acquire_start(lock, -1, on_granted, NULL);
 *     uv_run(uv_default_loop(), UV_RUN_DEFAULT);
 *     ...
 *     dlock_uv_detach(&adapter, NULL);  (before dlock_client_close)
 *
 * The caller owns the struct; it must stay where it is while attached and
 * until libuv has run the close callback. Header-only; link libuv yourself.
 */
#ifndef DLOCK_ADAPTERS_LIBUV_H
#define DLOCK_ADAPTERS_LIBUV_H

#include <dlock.h>
#include <uv.h>

typedef struct dlock_uv {
    uv_poll_t poll;
    uv_timer_t timer;
    dlock_client *client;
    uv_close_cb on_closed;
    int handles_open;
} dlock_uv;

static void dlock_uv__arm(dlock_uv *a);

static inline void dlock_uv__run(dlock_uv *a)
{
    dlock_client_process(a->client);
    dlock_uv__arm(a);
}

static inline void dlock_uv__on_readable(uv_poll_t *poll, int status, int events)
{
    (void)status;
    (void)events;
    dlock_uv__run((dlock_uv *)poll->data);
}

static inline void dlock_uv__on_timer(uv_timer_t *timer)
{
    dlock_uv__run((dlock_uv *)timer->data);
}

/* The client's deadline, if it has one, on the loop's timer. */
static void dlock_uv__arm(dlock_uv *a)
{
    int64_t ms = dlock_client_timeout_ms(a->client);
    if (ms >= 0)
        uv_timer_start(&a->timer, dlock_uv__on_timer, (uint64_t)ms, 0);
    else
        uv_timer_stop(&a->timer);
}

/* Starts watching client on loop. DLOCK_OK, or DLOCK_EINTERNAL when libuv
 * refuses (dlock_errmsg() does not say more: see libuv's own error). */
static inline int dlock_uv_attach(dlock_uv *a, uv_loop_t *loop, dlock_client *client)
{
    int fd = dlock_client_fd(client);
    if (fd < 0)
        return fd;
    a->client = client;
    a->on_closed = NULL;
    a->handles_open = 0;
    if (uv_poll_init(loop, &a->poll, fd) != 0)
        return DLOCK_EINTERNAL;
    a->handles_open++;
    if (uv_timer_init(loop, &a->timer) != 0)
        return DLOCK_EINTERNAL;
    a->handles_open++;
    a->poll.data = a;
    a->timer.data = a;
    if (uv_poll_start(&a->poll, UV_READABLE, dlock_uv__on_readable) != 0)
        return DLOCK_EINTERNAL;
    dlock_uv__arm(a);
    return DLOCK_OK;
}

static inline void dlock_uv__closed(uv_handle_t *h)
{
    dlock_uv *a = (dlock_uv *)h->data;
    if (--a->handles_open == 0 && a->on_closed)
        a->on_closed((uv_handle_t *)&a->poll);
}

/* Stops watching; on_closed (may be NULL) is called once libuv has let go
 * of both handles, after which the struct may be freed. */
static inline void dlock_uv_detach(dlock_uv *a, uv_close_cb on_closed)
{
    a->on_closed = on_closed;
    uv_poll_stop(&a->poll);
    uv_timer_stop(&a->timer);
    uv_close((uv_handle_t *)&a->poll, dlock_uv__closed);
    uv_close((uv_handle_t *)&a->timer, dlock_uv__closed);
}

#endif
