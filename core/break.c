/* core/break.c - dlock_break(): an operator's forced release. The provider
 * removes the holds and raises the fence in one step on its backend; the
 * core checks the arguments and leaves a trace in the client's log, since
 * taking a lock from a holder that may still be running is an act someone
 * will want to find later. */
#include "config.h"

#include "entry.h"

#include <stdio.h>
#include <string.h>

/* The name for a log line: printable ASCII as is, any other byte as \xHH,
 * so that a name cannot forge log lines. */
static void shown_name(const char *name, size_t len, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < size; i++) {
        unsigned char b = (unsigned char)name[i];
        if (b >= 0x20 && b < 0x7f && b != '\\')
            out[o++] = (char)b;
        else
            o += (size_t)snprintf(out + o, size - o, "\\x%02x", b);
    }
    out[o] = 0;
}

int dlock_break(dlock_client *c, const char *name, size_t name_len, int *broken, uint64_t *fence)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    if (!name || name_len == 0 || name_len > DLOCK_NAME_MAX || memchr(name, 0, name_len))
        return dlock_seterr(DLOCK_EINVAL, "dlock_break: the name must be 1..%d bytes without NUL", DLOCK_NAME_MAX);
    int was_held = 0;
    uint64_t after = 0;
    rc = dlock__p_break(c, name, name_len, &was_held, &after);
    if (rc != DLOCK_OK)
        return rc;
    char shown[4 * DLOCK_NAME_MAX + 1];
    shown_name(name, name_len, shown, sizeof shown);
    if (was_held)
        dlock__logf(&c->log, DLOCK_LOG_WARN,
                    "lock '%s' broken by an operator: its holders lose it at their next renewal; fence now %llu",
                    shown, (unsigned long long)after);
    else
        dlock__logf(&c->log, DLOCK_LOG_INFO, "lock '%s': asked to break it, but nobody held it", shown);
    if (broken)
        *broken = was_held;
    if (fence)
        *fence = after;
    return DLOCK_OK;
}
