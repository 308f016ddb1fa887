/* contrib/cli/escape.c - see escape.h. The JSON writer is our own rather
 * than json-c's: json-c is only in the build with the etcd backend, and it
 * copies bytes that are not UTF-8 into its output, which makes the document
 * invalid JSON. */
#include "escape.h"

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF), 0 if none starts
 * there. */
static size_t utf8_sequence(const unsigned char *s, size_t left)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || n > left)
        return 0;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

bool escape_json(FILE *f, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    bool exact = true;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned char c = u[i];
        size_t n = utf8_sequence(u + i, len - i);
        if (n == 0) {
            fputs("\\ufffd", f);
            exact = false;
            i++;
            continue;
        }
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20 || c == 0x7F || c == '<' || c == '>' || c == '&')
            fprintf(f, "\\u%04x", c);
        else
            fwrite(u + i, 1, n, f);
        i += n;
    }
    fputc('"', f);
    return exact;
}

void escape_text(FILE *f, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        unsigned char c = u[i];
        size_t n = utf8_sequence(u + i, len - i);
        if (c == '\\')
            fputs("\\\\", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (n == 0 || c < 0x20 || c == 0x7F)
            fprintf(f, "\\x%02x", c);
        else
            fwrite(u + i, 1, n, f);
        i += n ? n : 1;
    }
}

bool escape_label(FILE *f, const char *s, size_t len)
{
    bool exact = true;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        unsigned char c = u[i];
        size_t n = utf8_sequence(u + i, len - i);
        if (n == 0) {
            fputs("\xef\xbf\xbd", f);
            exact = false;
        }
        else if (c == '\\' || c == '"')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else
            fwrite(u + i, 1, n, f);
        i += n ? n : 1;
    }
    return exact;
}

void escape_hex(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        fprintf(f, "%02x", (unsigned char)s[i]);
}
