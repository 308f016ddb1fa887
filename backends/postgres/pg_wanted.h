/*
 * backends/postgres/pg_wanted.h - telling a client that keeps released
 * holds (lock caching, lease mode) when another owner asks for one of
 * their names.
 *
 * A request that finds a name held (the busy answer of the acquire
 * statements) notifies the name's "wanted" channel, the name's NOTIFY
 * channel with a 'w' after it, in the same statement. The keeper LISTENs
 * on the channels of the names it watches, on one connection of its own
 * read by one thread per client.
 */
#ifndef DLOCK_PG_WANTED_H
#define DLOCK_PG_WANTED_H

#include "pg_conn.h"

#include <dlock/provider.h>

struct pg_wanted;

/* The listener of one client (its thread and connection start at the first
 * watch); tell is env->wanted, called on the listener's thread. DLOCK_OK
 * with *out, or DLOCK_ENOMEM. */
int pg_wanted_new(const struct pg_server *srv, void (*tell)(struct dlock_provider_lock *lk), void *log_handle,
                  struct pg_wanted **out);
/* Ends every watch, the thread and its connection, and frees w (NULL is
 * ignored). Not concurrently with the calls below. */
void pg_wanted_free(struct pg_wanted *w);

/* Tells lk when a notification comes on channel (a NUL-terminated
 * identifier of at most 31 bytes), until pg_wanted_unwatch. Waits until
 * the LISTEN is in effect on the server (a NOTIFY committed before it
 * would reach nobody), at most the server's connect and command timeouts
 * together. A lost
 * connection tells every watched lock, since a notification may have gone
 * unheard, and the listener connects and LISTENs again; one that the
 * network dropped without a word is found by TCP keepalive probes within
 * about 11 s. DLOCK_OK, or
 * DLOCK_EUNAVAILABLE / DLOCK_ENOMEM with the detail set. Thread-safe. */
int pg_wanted_watch(struct pg_wanted *w, struct dlock_provider_lock *lk, const char *channel);
/* Ends lk's watch: after it returns, lk is not told again. Thread-safe. */
void pg_wanted_unwatch(struct pg_wanted *w, struct dlock_provider_lock *lk);

#endif
