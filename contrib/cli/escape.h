/* contrib/cli/escape.h - lock names (arbitrary bytes but NUL) as text. */
#ifndef DLOCK_CLI_ESCAPE_H
#define DLOCK_CLI_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Writes s as a JSON string, quotes included: '"', '\\' and control
 * characters escaped, and '<', '>' and '&' as \u escapes too, so that a
 * name such as "</script>" cannot end a script or make markup wherever the
 * document is pasted into HTML (dlock serve's /api/locks); the code points
 * a terminal acts on or that reorder text (C1 controls U+0080..U+009F,
 * U+2028/U+2029, the bidirectional controls U+202A..U+202E and
 * U+2066..U+2069) as \u escapes too, so the document is safe to print;
 * other well-formed UTF-8 as it is, and each byte that is not
 * part of well-formed UTF-8 as U+FFFD. Returns false when such a byte was
 * replaced, so the caller can add the exact bytes (see escape_hex). */
bool escape_json(FILE *f, const char *s, size_t len);

/* Writes s for a terminal, on one line: '\\', control characters (C0,
 * DEL, and C1 as UTF-8), the separators and bidirectional controls that
 * escape_json escapes, and bytes that are not part of well-formed UTF-8 as
 * C escapes (\n, \xHH for each byte). */
void escape_text(FILE *f, const char *s, size_t len);

/* Writes s as the value of a Prometheus label, without the quotes: '\\',
 * '"' and newline escaped as the text format wants, well-formed UTF-8 as
 * it is, and each other byte as U+FFFD (the format is UTF-8 only). Returns
 * false when such a byte was replaced: two names can then look alike, and
 * the caller adds the exact bytes in a label of their own (escape_hex). */
bool escape_label(FILE *f, const char *s, size_t len);

/* Writes s as lower-case hex digits, two per byte. */
void escape_hex(FILE *f, const char *s, size_t len);

#endif
