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

/* Whether the well-formed sequence of n bytes at s is a code point that a
 * terminal acts on or that reorders what is read: the C1 controls
 * U+0080..U+009F (an xterm takes U+009B as CSI and U+009D as OSC), the
 * line and paragraph separators U+2028/U+2029, and the bidirectional
 * embeddings, overrides and isolates U+202A..U+202E, U+2066..U+2069. */
static bool acts_on_terminal(const unsigned char *s, size_t n)
{
    if (n == 2)
        return s[0] == 0xC2 && s[1] <= 0x9F;
    if (n == 3 && s[0] == 0xE2 && s[1] == 0x80)
        return s[2] >= 0xA8 && s[2] <= 0xAE;
    if (n == 3 && s[0] == 0xE2 && s[1] == 0x81)
        return s[2] >= 0xA6 && s[2] <= 0xA9;
    return false;
}

/* The code point of a well-formed sequence of up to 3 bytes. */
static unsigned code_point(const unsigned char *s, size_t n)
{
    if (n == 2)
        return (unsigned)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    return (unsigned)(s[0] & 0x0F) << 12 | (unsigned)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
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
        else if (acts_on_terminal(u + i, n)) /* the same code point, but not raw on a terminal */
            fprintf(f, "\\u%04x", code_point(u + i, n));
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
        else if (acts_on_terminal(u + i, n))
            for (size_t k = 0; k < n; k++)
                fprintf(f, "\\x%02x", u[i + k]);
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
