/* backends/common/cursor.c - see cursor.h. */
#include "config.h"

#include "cursor.h"

#include <stdlib.h>
#include <string.h>

static int lower_hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

char *cursor_encode(const char *key, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char *out = malloc(2 * len + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = hex[(unsigned char)key[i] >> 4];
        out[2 * i + 1] = hex[(unsigned char)key[i] & 15];
    }
    out[2 * len] = '\0';
    return out;
}

bool cursor_decode(const char *text, char *out, size_t max, size_t *len)
{
    size_t n = strlen(text);
    if (n == 0 || n % 2 || n / 2 > max)
        return false;
    for (size_t i = 0; i < n; i += 2) {
        int hi = lower_hex_digit(text[i]), lo = lower_hex_digit(text[i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        if (out)
            out[i / 2] = (char)(hi * 16 + lo);
    }
    *len = n / 2;
    return true;
}
