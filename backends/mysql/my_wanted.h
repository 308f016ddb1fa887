/*
 * backends/mysql/my_wanted.h - telling a client that keeps released holds
 * (lock caching, lease mode) when another owner asks for one of their
 * names.
 *
 * MySQL has no way to tell a client of a write, so the keeper asks: a
 * request that finds a name held leaves a mark in the row's waker column
 * (a waiting head's id, or 0 for a busy answer or a head that left; see
 * my_sql.c), and a thread per client reads, once per poll_ms, which of
 * the names it holds carry one. The mark stays in the row until the hold
 * ends, so a request made before a watch is read by the next poll, and no
 * watch waits for the server. A poll that fails (the server or the
 * poll's own connection refused, after one reconnect) tells every held
 * name: requests would go unread for as long as it keeps failing.
 *
 * The poll runs only while the client holds a watched name (held or
 * kept): a client whose kept holds were all given back asks nothing.
 */
#ifndef DLOCK_MY_WANTED_H
#define DLOCK_MY_WANTED_H

#include "my_conn.h"

#include <dlock/provider.h>
#include <stdbool.h>
#include <stdint.h>

/* How often a keeper polls when mysql.cache_poll_ms is not set. */
#define MY_CACHE_POLL_MS 10

struct my_wanted;
struct my_wanted_watch;

/* The poller of one client (its thread and connection start at the first
 * watch). poll_start is the statement's text up to its list of names
 * (my_sql.h: wanted_poll), not copied; tell is env->wanted, called on the
 * poller's thread. DLOCK_OK with *out, or DLOCK_ENOMEM. */
int my_wanted_new(const struct my_server *srv, const char *poll_start, int64_t poll_ms,
                  void (*tell)(struct dlock_provider_lock *lk), void *log_handle, struct my_wanted **out);
/* Ends every watch, the thread and its connection, and frees w (NULL is
 * ignored). Not concurrently with the calls below. */
void my_wanted_free(struct my_wanted *w);

/* Tells lk, held now, whenever a poll finds its row (name: key_len bytes
 * of key) held and marked, until my_wanted_unwatch. Does not wait for the
 * server. DLOCK_OK with *out (for my_wanted_held and my_wanted_unwatch),
 * or DLOCK_ENOMEM. Thread-safe. */
int my_wanted_watch(struct my_wanted *w, struct dlock_provider_lock *lk, const void *key, size_t key_len,
                    struct my_wanted_watch **out);
/* Whether the client holds ww's name (a grant: true, a release: false);
 * polls run only while some watched name is held. Never waits for the
 * server. */
void my_wanted_held(struct my_wanted *w, struct my_wanted_watch *ww, bool held);
/* Ends ww's watch: after it returns, its lock is not told again, and ww
 * is not to be used. Thread-safe. */
void my_wanted_unwatch(struct my_wanted *w, struct my_wanted_watch *ww);

#endif
