/* core/backoff.c - exponential backoff with full jitter ("Exponential Backoff
 * And Jitter", AWS architecture blog): the delay is uniform in
 * [0, min(cap, base * 2^attempt)], which spreads contenders out instead of
 * letting them retry in lock step. */
#include "config.h"

#include "internal.h"

int64_t dlock__backoff_ceiling_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms)
{
    if (base_ms <= 0 || cap_ms <= 0)
        return 0;
    int64_t ceiling = base_ms;
    for (unsigned i = 0; i < attempt && ceiling < cap_ms; i++)
        ceiling *= 2;
    return ceiling < cap_ms ? ceiling : cap_ms;
}

int64_t dlock__backoff_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms)
{
    int64_t ceiling = dlock__backoff_ceiling_ms(attempt, base_ms, cap_ms);
    if (ceiling <= 0)
        return 0;
    return (int64_t)(dlock__random_u64() % (uint64_t)(ceiling + 1));
}
