/*
 * backends/etcd/etcd_watch.h - waiting for a change of one key through the
 * gateway's /v3/watch stream (a chunked HTTP response of JSON messages),
 * with libcurl's multi interface so that the core's wake fd can end it.
 */
#ifndef DLOCK_ETCD_WATCH_H
#define DLOCK_ETCD_WATCH_H

#include "etcd_http.h"

/* Watches key for a change made at start_revision or later (so that a
 * change made since the caller looked is not missed: the watch starts at
 * the server's current revision, and if that is past start_revision the key
 * is read once to see whether it changed in between) until an event on it
 * arrives, the watch is refused
 * or cancelled by the server, timeout_ms passes, or wake_fd becomes
 * readable. DLOCK_OK (something happened: look again), DLOCK_ETIMEDOUT, or
 * DLOCK_EUNAVAILABLE when the stream could not be had. Never grants
 * anything: the caller looks again. */
int etcd_watch_change(struct etcd_http *h, const char *key, size_t key_len, int64_t start_revision,
                      int64_t timeout_ms, int wake_fd);

/* The same for every key in [key, range_end) (range_end NULL: key alone),
 * deletions only when it is a range, from start_revision. */
int etcd_watch_deletions(struct etcd_http *h, const char *key, size_t key_len, const char *range_end,
                         size_t range_end_len, int64_t start_revision, int64_t timeout_ms, int wake_fd);

#endif
