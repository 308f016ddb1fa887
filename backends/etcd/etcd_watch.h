/*
 * backends/etcd/etcd_watch.h - waiting for a change of one key through the
 * gateway's /v3/watch stream (a chunked HTTP response of JSON messages),
 * with libcurl's multi interface so that the core's wake fd can end it.
 */
#ifndef DLOCK_ETCD_WATCH_H
#define DLOCK_ETCD_WATCH_H

#include "etcd_http.h"

/* A watch of key for a change made at start_revision or later (so that a
 * change made since the caller looked is not missed: a watch of one key
 * starts at the server's current revision, and if that is past
 * start_revision the key is read once to see whether it changed in
 * between), or of every key in [key, range_end) for deletions from
 * start_revision (range_end NULL: key alone). It ends when an event
 * arrives, or the watch is refused or cancelled by the server. It never
 * grants anything: the caller looks again. */
struct etcd_watch;
/* DLOCK_OK with *out (nothing sent yet), or DLOCK_ENOMEM. */
int etcd_watch_open(struct etcd_http *h, const char *key, size_t key_len, const char *range_end,
                    size_t range_end_len, int64_t start_revision, struct etcd_watch **out);
/* A watch of every put and delete in [key, range_end), from the server's
 * current revision (an observer's: it reads the state once the watch is
 * created). DLOCK_OK with *out, or DLOCK_ENOMEM. */
int etcd_watch_open_changes(struct etcd_http *h, const char *key, size_t key_len, const char *range_end,
                            size_t range_end_len, struct etcd_watch **out);
/* Runs the transfer as far as it goes without waiting (and, once the watch
 * is created, the one read of what came before it). True when the wait is
 * over, with *rc: DLOCK_OK (look again) or DLOCK_EUNAVAILABLE. */
bool etcd_watch_step(struct etcd_watch *w, int *rc);
/* Sends the watch and waits, up to timeout_ms, until the server has
 * created it (and what came before it was read): one round trip. True
 * when the wait is over already (*rc as etcd_watch_step's, or
 * DLOCK_ETIMEDOUT); false when the watch is in place, with *fd the socket
 * its events come on, to poll for reading before the next step. */
bool etcd_watch_start(struct etcd_watch *w, int64_t timeout_ms, int *fd, int *rc);
/* Blocks until the watch ends, timeout_ms passes, or wake_fd becomes
 * readable. DLOCK_OK (something happened: look again), DLOCK_ETIMEDOUT, or
 * DLOCK_EUNAVAILABLE when the stream could not be had. */
int etcd_watch_wait(struct etcd_watch *w, int64_t timeout_ms, int wake_fd);
/* Frees w (NULL is ignored). */
void etcd_watch_close(struct etcd_watch *w);

#endif
