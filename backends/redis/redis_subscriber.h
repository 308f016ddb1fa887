/* backends/redis/redis_subscriber.h - one Pub/Sub connection per client,
 * served by one thread, shared by every waiting lock. A lock subscribes to
 * its release channel on demand (the call returns once the server has
 * confirmed, so a release published after that is delivered), and a message
 * on a channel signals that lock's eventfd: one waiter, not all. When the
 * connection breaks, the thread reconnects with backoff and subscribes again;
 * waiters meanwhile fall back on the holder's remaining lease. */
#ifndef DLOCK_REDIS_SUBSCRIBER_H
#define DLOCK_REDIS_SUBSCRIBER_H

#include "redis_conn.h"

struct redis_subscriber;

/* Starts the thread (it connects lazily, on the first subscription).
 * sharded: SSUBSCRIBE on a cluster node (Redis 7.0+) instead of SUBSCRIBE. */
int redis_subscriber_start(struct redis_subscriber **out, const struct redis_server *srv, bool sharded,
                           void *log_handle);
void redis_subscriber_stop(struct redis_subscriber *sub);

/* Subscribes channel (len bytes) and arranges for notify_fd (an eventfd) to
 * be written on each message; up to 16 fds may share one channel (each is
 * written). Blocks until confirmed or timeout_ms passes.
 * DLOCK_OK or DLOCK_EUNAVAILABLE (then nothing is registered). */
int redis_subscriber_add(struct redis_subscriber *sub, const char *channel, size_t len, int notify_fd,
                         int64_t timeout_ms);
/* Called, under the subscriber's mutex, on each message on a watched
 * channel and whenever one may have been missed (the subscription made
 * again on a new connection, or dropped by a cluster node). Must not block
 * nor call the subscriber. */
typedef void (*redis_watch_fn)(struct dlock_provider_lock *lk);

/* Subscribes channel (len bytes) for fn(lk), waiting up to timeout_ms for
 * the server's confirmation (no wait when the channel is already
 * subscribed): a message published before it would be missed. DLOCK_OK,
 * DLOCK_ENOMEM, or DLOCK_EUNAVAILABLE (not confirmed in time, or too many
 * watchers of the channel). */
int redis_subscriber_watch(struct redis_subscriber *sub, const char *channel, size_t len, redis_watch_fn fn,
                           struct dlock_provider_lock *lk, int64_t timeout_ms);
/* Ends redis_subscriber_watch(channel, lk); after it returns, fn is not
 * called for lk. */
void redis_subscriber_unwatch(struct redis_subscriber *sub, const char *channel, size_t len,
                              struct dlock_provider_lock *lk);

/* Stops notifying notify_fd for channel (the channel is unsubscribed when
 * no fd is left for it); after it returns the fd is no longer written to
 * and may be closed. */
void redis_subscriber_remove(struct redis_subscriber *sub, const char *channel, size_t len, int notify_fd);

/* A provider's wait on a subscription: blocks until notify_fd (as given to
 * redis_subscriber_add; -1 when not subscribed) is signalled, wake_fd
 * becomes readable or timeout_ms passes. Consumes the signals it woke on
 * and, when messages is not NULL, stores how many there were (0 when it
 * woke for wake_fd or the timeout). DLOCK_OK, DLOCK_ETIMEDOUT, or
 * DLOCK_EUNAVAILABLE when poll fails (who names the backend in the
 * message). */
int redis_subscriber_wait(int notify_fd, int wake_fd, int64_t timeout_ms, const char *who, uint64_t *messages);

/* The same wait cut in two (a provider's wait_disarm; wait_arm hands the
 * core notify_fd itself): consumes the signals when fired and, when
 * messages is not NULL, stores how many there were. DLOCK_OK when fired,
 * else DLOCK_ETIMEDOUT. Never blocks. */
int redis_subscriber_disarm(int notify_fd, int fired, uint64_t *messages);

#endif
