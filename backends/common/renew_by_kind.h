/* backends/common/renew_by_kind.h - a renewal batch split by kind of hold,
 * for backends that renew exclusive holds and shared holds or permits with
 * different requests. */
#ifndef DLOCK_RENEW_BY_KIND_H
#define DLOCK_RENEW_BY_KIND_H

#include <dlock/provider.h>
#include <stdbool.h>
#include <stddef.h>

/* True for a shared hold or a permit. */
bool kind_is_shared(const struct dlock_provider_lock *lk);

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
