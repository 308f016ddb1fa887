/*
 * dlock/adapters/libev.h - drives a libdlock client's non-blocking API from
 * a libev loop: the client's descriptor is watched, and its results are
 * delivered (dlock_client_process) on the loop's thread.
 *
 *     dlock_libev adapter;
 *     dlock_libev_attach(&adapter, EV_DEFAULT, client);
 *     dlock_acquire_start(lock, -1, on_granted, NULL);
 *     ev_run(EV_DEFAULT, 0);
 *     ...
 *     dlock_libev_detach(&adapter);  (before dlock_client_close)
 *
 * The caller owns the struct. Header-only; link libev yourself.
 */
#ifndef DLOCK_ADAPTERS_LIBEV_H
#define DLOCK_ADAPTERS_LIBEV_H

#include <dlock.h>
#include <ev.h>

typedef struct dlock_libev {
    ev_io readable;
    ev_timer timer;
    struct ev_loop *loop;
    dlock_client *client;
} dlock_libev;

static inline void dlock_libev__run(dlock_libev *a)
{
    dlock_client_process(a->client);
    ev_timer_stop(a->loop, &a->timer);
    int64_t ms = dlock_client_timeout_ms(a->client);
    if (ms >= 0) {
        ev_timer_set(&a->timer, (ev_tstamp)ms / 1000.0, 0.);
        ev_timer_start(a->loop, &a->timer);
    }
}

static inline void dlock_libev__on_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    dlock_libev__run((dlock_libev *)w->data);
}

static inline void dlock_libev__on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    dlock_libev__run((dlock_libev *)w->data);
}

/* Starts watching client on loop. DLOCK_OK or a negative DLOCK_E* code. */
static inline int dlock_libev_attach(dlock_libev *a, struct ev_loop *loop, dlock_client *client)
{
    int fd = dlock_client_fd(client);
    if (fd < 0)
        return fd;
    a->loop = loop;
    a->client = client;
    ev_io_init(&a->readable, dlock_libev__on_readable, fd, EV_READ);
    ev_init(&a->timer, dlock_libev__on_timer);
    a->readable.data = a;
    a->timer.data = a;
    ev_io_start(loop, &a->readable);
    dlock_libev__run(a); /* results that came before */
    return DLOCK_OK;
}

/* Stops watching; the struct may then be freed. */
static inline void dlock_libev_detach(dlock_libev *a)
{
    ev_io_stop(a->loop, &a->readable);
    ev_timer_stop(a->loop, &a->timer);
}

#endif
