/* core/random.c - randomness: getrandom() for identities, a seeded per-thread
 * generator for jitter (where speed matters and secrecy does not). */
#include "config.h"

#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

int dlock__random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return dlock_seterr(DLOCK_EINTERNAL, "getrandom failed: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return DLOCK_OK;
}

static __thread uint64_t jitter_state[2];

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoroshiro128+ */
uint64_t dlock__random_u64(void)
{
    if (jitter_state[0] == 0 && jitter_state[1] == 0) {
        if (dlock__random_bytes(jitter_state, sizeof jitter_state) != DLOCK_OK ||
            (jitter_state[0] == 0 && jitter_state[1] == 0))
            jitter_state[0] = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)&jitter_state;
    }
    uint64_t s0 = jitter_state[0], s1 = jitter_state[1];
    uint64_t result = s0 + s1;
    s1 ^= s0;
    jitter_state[0] = rotl(s0, 24) ^ s1 ^ (s1 << 16);
    jitter_state[1] = rotl(s1, 37);
    return result;
}
