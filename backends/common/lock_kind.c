/* backends/common/lock_kind.c - see lock_kind.h. */
#include "config.h"

#include "lock_kind.h"

#include <stdio.h>
#include <stdlib.h>

bool kind_is_shared(const struct dlock_provider_lock *lk)
{
    return lk->mode == DLOCK_MODE_SHARED || lk->mode == DLOCK_MODE_SEMAPHORE;
}

int kind_mismatch(const char *label, const struct dlock_provider_lock *lk, unsigned long long held_permits)
{
    if (lk->mode == DLOCK_MODE_SEMAPHORE && held_permits > 0)
        return dlock_seterr(DLOCK_EINVAL, "%s: '%s' is a semaphore of %llu permits, not %u", label, lk->name,
                            held_permits, lk->permits);
    if (lk->mode == DLOCK_MODE_SEMAPHORE)
        return dlock_seterr(DLOCK_EINVAL, "%s: '%s' is held as a shared lock, not as a semaphore", label, lk->name);
    return dlock_seterr(DLOCK_EINVAL, "%s: '%s' is a semaphore of %llu permits, not a shared lock", label, lk->name,
                        held_permits);
}

void kind_holders_text(char *out, size_t size, long long holders, unsigned long permits)
{
    if (permits > 0)
        snprintf(out, size, "%lld of %lu permits held", holders, permits);
    else
        snprintf(out, size, "%lld shared holder%s", holders, holders == 1 ? "" : "s");
}

int renew_by_kind(void *ctx, renew_kind_fn renew, struct dlock_provider_lock *const *locks, size_t n, int *results)
{
    size_t shared = 0;
    for (size_t i = 0; i < n; i++)
        shared += kind_is_shared(locks[i]);
    if (shared == 0 || shared == n)
        return renew(ctx, shared > 0, locks, n, results);
    struct dlock_provider_lock **sorted = malloc(n * sizeof *sorted);
    size_t *from = malloc(n * sizeof *from);
    int *sorted_results = malloc(n * sizeof *sorted_results);
    if (!sorted || !from || !sorted_results) {
        free(sorted);
        free(from);
        free(sorted_results);
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for a renewal batch of %zu holds", n);
    }
    /* Exclusive holds first, then the others; from[] maps back. */
    size_t exclusive = n - shared, x = 0, y = exclusive;
    for (size_t i = 0; i < n; i++) {
        size_t at = kind_is_shared(locks[i]) ? y++ : x++;
        sorted[at] = locks[i];
        from[at] = i;
    }
    int rc = renew(ctx, false, sorted, exclusive, sorted_results);
    for (size_t i = 0; rc != DLOCK_OK && i < exclusive; i++)
        sorted_results[i] = rc;
    rc = renew(ctx, true, sorted + exclusive, shared, sorted_results + exclusive);
    for (size_t i = exclusive; rc != DLOCK_OK && i < n; i++)
        sorted_results[i] = rc;
    for (size_t i = 0; i < n; i++)
        results[from[i]] = sorted_results[i];
    free(sorted);
    free(from);
    free(sorted_results);
    return DLOCK_OK;
}
