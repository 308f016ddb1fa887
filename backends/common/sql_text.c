/* backends/common/sql_text.c - see sql_text.h. */
#include "config.h"

#include "sql_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool sql_valid_table(const char *name, size_t max_len)
{
    size_t n = strlen(name);
    if (n == 0 || n > max_len || (name[0] >= '0' && name[0] <= '9'))
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

char *sql_format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *out = NULL;
    if (vasprintf(&out, fmt, ap) < 0)
        out = NULL;
    va_end(ap);
    return out;
}
