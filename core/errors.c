/* core/errors.c - error texts and the per-thread detail message. */
#include "config.h"

#include "internal.h"

#include <stdio.h>
#include <string.h>

/* One buffer per thread: a detail must survive until the caller reads it,
 * and threads must not see each other's. */
static __thread char detail[1024];

const char *dlock_strerror(int code)
{
    switch (code) {
#define DLOCK__ERROR_TEXT(name, value, text) case value: return text;
        DLOCK_ERROR_LIST(DLOCK__ERROR_TEXT)
#undef DLOCK__ERROR_TEXT
    }
    return "unknown error";
}

const char *dlock_errname(int code)
{
    switch (code) {
#define DLOCK__ERROR_NAME(name, value, text) case value: return "DLOCK_" #name;
        DLOCK_ERROR_LIST(DLOCK__ERROR_NAME)
#undef DLOCK__ERROR_NAME
    }
    return "DLOCK_UNKNOWN";
}

const char *dlock_errmsg(void)
{
    return detail[0] ? detail : "no detail recorded";
}

int dlock__seterrv(int code, const char *fmt, va_list ap)
{
    vsnprintf(detail, sizeof detail, fmt, ap);
    return code;
}

int dlock_seterr(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dlock__seterrv(code, fmt, ap);
    va_end(ap);
    return code;
}

void dlock_error_save(struct dlock_saved_error *saved)
{
    _Static_assert(sizeof saved->text == sizeof detail, "a saved detail holds a whole one");
    /* What dlock_errmsg() would say, so that a message quoting the saved
     * text never quotes nothing. */
    snprintf(saved->text, sizeof saved->text, "%s", dlock_errmsg());
}

int dlock_error_restore(const struct dlock_saved_error *saved, int code)
{
    memcpy(detail, saved->text, sizeof detail);
    return code;
}
