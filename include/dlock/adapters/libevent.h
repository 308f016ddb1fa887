/*
 * dlock/adapters/libevent.h - drives a libdlock client's non-blocking API
 * from a libevent (2.x) event base: the client's descriptor is watched, and
 * its results are delivered (dlock_client_process) on the loop's thread.
 *
 *     dlock_libevent adapter;
 *     dlock_libevent_attach(&adapter, base, client);
 *     dlock_acquire_start(lock, -1, on_granted, NULL);
 *     event_base_dispatch(base);
 *     ...
 *     dlock_libevent_detach(&adapter);  (before dlock_client_close)
 *
 * The caller owns the struct. Header-only; link libevent yourself.
 */
#ifndef DLOCK_ADAPTERS_LIBEVENT_H
#define DLOCK_ADAPTERS_LIBEVENT_H

#include <dlock.h>
#include <event2/event.h>

typedef struct dlock_libevent {
    struct event *readable;
    struct event *timer;
    dlock_client *client;
} dlock_libevent;

static inline void dlock_libevent__run(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    dlock_libevent *a = (dlock_libevent *)arg;
    dlock_client_process(a->client);
    int64_t ms = dlock_client_timeout_ms(a->client);
    if (ms >= 0) {
        struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
        evtimer_add(a->timer, &tv);
    } else {
        evtimer_del(a->timer);
    }
}

/* Starts watching client on base. DLOCK_OK, DLOCK_ENOMEM or
 * DLOCK_EINTERNAL (libevent refused). */
static inline int dlock_libevent_attach(dlock_libevent *a, struct event_base *base, dlock_client *client)
{
    int fd = dlock_client_fd(client);
    if (fd < 0)
        return fd;
    a->client = client;
    a->readable = event_new(base, fd, EV_READ | EV_PERSIST, dlock_libevent__run, a);
    a->timer = evtimer_new(base, dlock_libevent__run, a);
    if (!a->readable || !a->timer) {
        if (a->readable)
            event_free(a->readable);
        if (a->timer)
            event_free(a->timer);
        a->readable = a->timer = NULL;
        return DLOCK_ENOMEM;
    }
    if (event_add(a->readable, NULL) != 0)
        return DLOCK_EINTERNAL;
    dlock_libevent__run(fd, 0, a); /* results that came before */
    return DLOCK_OK;
}

/* Stops watching and frees the events; the struct may then be freed. */
static inline void dlock_libevent_detach(dlock_libevent *a)
{
    if (a->readable)
        event_free(a->readable);
    if (a->timer)
        event_free(a->timer);
    a->readable = a->timer = NULL;
}

#endif
