/* core/fence.c - the in-process fence guard. */
#include "config.h"

#include "internal.h"

int dlock_fence_admit(uint64_t *highest, uint64_t token)
{
    if (!highest)
        return dlock_seterr(DLOCK_EINVAL, "dlock_fence_admit: highest is NULL");
    uint64_t seen = __atomic_load_n(highest, __ATOMIC_ACQUIRE);
    for (;;) {
        if (token < seen)
            return dlock_seterr(DLOCK_ESTALE,
                                "fencing token %llu is older than %llu, already written by a newer holder; "
                                "drop this write", (unsigned long long)token, (unsigned long long)seen);
        if (token == seen ||
            __atomic_compare_exchange_n(highest, &seen, token, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return DLOCK_OK;
    }
}
