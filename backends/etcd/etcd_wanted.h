/*
 * backends/etcd/etcd_wanted.h - telling a client that keeps released holds
 * (lock caching) when another owner asks for one of their names.
 *
 * Every request for a name, a try included, puts a key of its own in the
 * name's directory before it looks at the line (etcd.c), so the holder
 * needs no message from the asker: a watch of the directory's puts sees
 * each request. One thread per client runs the watches of every watched
 * name on one curl multi handle, one gateway stream per name (the gateway
 * serves one watch per HTTP request).
 */
#ifndef DLOCK_ETCD_WANTED_H
#define DLOCK_ETCD_WANTED_H

#include "etcd_http.h"

#include <dlock/provider.h>
#include <stdint.h>

struct etcd_wanted;

/* The watcher of one client: tell is env->wanted, called on the watcher's
 * thread (started at the first watch). DLOCK_OK with *out, or DLOCK_ENOMEM. */
int etcd_wanted_new(struct etcd_http *h, void (*tell)(struct dlock_provider_lock *lk), void *log_handle,
                    struct etcd_wanted **out);
/* Ends every watch and the thread, and frees w (NULL is ignored). Not
 * concurrently with the calls below. */
void etcd_wanted_free(struct etcd_wanted *w);

/* Watches lk's name (dir, its directory) from revision from_revision on
 * (the revision the granting read was made at, plus one: a request made
 * since then is told even if the stream starts later) until
 * etcd_wanted_unwatch: a put of a key that does not start with own_key
 * (the start of every key of this client) and was created after *floor (our hold's key revision, read with an
 * atomic load at each event: set it with an atomic store at each grant)
 * tells lk. A stream that ends or fails tells lk too (a request may have
 * come unseen) and is started again from the last revision it delivered.
 * Does not wait for the server. DLOCK_OK, or DLOCK_ENOMEM. Thread-safe. */
int etcd_wanted_watch(struct etcd_wanted *w, struct dlock_provider_lock *lk, const char *dir, size_t dir_len,
                      const char *own_key, size_t own_key_len, const int64_t *floor, int64_t from_revision);
/* Ends lk's watch: after it returns, lk is not told again. Thread-safe. */
void etcd_wanted_unwatch(struct etcd_wanted *w, struct dlock_provider_lock *lk);

#endif
