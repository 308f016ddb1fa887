/* backends/common/lock_kind.h - what the backends that keep shared holds
 * and permits beside exclusive ones share about the kinds: which a hold
 * is, the error and the status text for a name held in a kind, and a
 * renewal batch split by kind (for backends that renew each kind with a
 * request of its own). */
#ifndef DLOCK_LOCK_KIND_H
#define DLOCK_LOCK_KIND_H

#include <dlock/provider.h>
#include <stdbool.h>
#include <stddef.h>

/* True for a shared hold or a permit. */
bool kind_is_shared(const struct dlock_provider_lock *lk);

/* The name of lk is held in another kind than lk asks for: held_permits
 * is that kind's number of permits (0: held as a shared lock). Sets the
 * detail ("<label>: '<name>' is a semaphore of 3 permits, not 2", ...) and
 * returns DLOCK_EINVAL. */
int kind_mismatch(const char *label, const struct dlock_provider_lock *lk, unsigned long long held_permits);

/* dlock_status's holder text for a name held by `holders` shared holders
 * (permits 0) or permit holders of a semaphore of `permits`. */
void kind_holders_text(char *out, size_t size, long long holders, unsigned long permits);

/* Renews the n holds of one kind (shared: shared holds and permits; else
 * exclusive holds) as renew_batch does: DLOCK_OK with results[i] per
 * hold, or a failure for all of them. */
typedef int (*renew_kind_fn)(void *ctx, bool shared, struct dlock_provider_lock *const *locks, size_t n,
                             int *results);

/* A renew_batch made of one renew() call per kind present in locks: each
 * gets the holds of its kind, and their results are put back in the
 * caller's order (a failed call fails only its own kind's holds). With one
 * kind only, returns what renew() returned. DLOCK_ENOMEM (detail set) when
 * the mixed case cannot allocate. Thread-safe if renew() is. */
int renew_by_kind(void *ctx, renew_kind_fn renew, struct dlock_provider_lock *const *locks, size_t n, int *results);

#endif
