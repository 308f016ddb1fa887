/* backends/common/name_escape.c - see name_escape.h. */
#include "config.h"

#include "name_escape.h"

#include <dlock.h>

static const char upper_hex[] = "0123456789ABCDEF";

size_t name_escape(const char *name, size_t len, name_plain_fn plain, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (plain(c)) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = upper_hex[c >> 4];
            out[o++] = upper_hex[c & 15];
        }
    }
    return o;
}

static int upper_hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

bool name_unescape(const char *text, size_t len, name_plain_fn plain, char *out, size_t *out_len)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (o == DLOCK_NAME_MAX)
            return false;
        if (c == '%') {
            int hi = i + 2 < len ? upper_hex_digit(text[i + 1]) : -1;
            int lo = hi >= 0 ? upper_hex_digit(text[i + 2]) : -1;
            if (lo < 0)
                return false;
            c = (unsigned char)(hi * 16 + lo);
            /* One form per name: an escaped byte the backend keeps plain
             * is not from a key this library made. */
            if (plain(c))
                return false;
            i += 2;
        } else if (!plain(c)) {
            return false;
        }
        if (c == 0)
            return false;
        out[o++] = (char)c;
    }
    out[o] = 0;
    *out_len = o;
    return o > 0;
}
