/* tests/fuzz/fuzz_names.c - libFuzzer target: every backend's mapping of a
 * lock name to what it names on its system. Any name (1..DLOCK_NAME_MAX bytes
 * without NUL) must map to
 *   local: a single file name inside the lock directory (no '/', not
 *          hidden, not "." or "..", at most NAME_MAX bytes, ending in .lock
 *          or .hlock), and short names must round-trip (so two never share
 *          a file);
 *   redis: a key with exactly one hash tag, which decodes back to the name
 *          (so every key of a lock shares one slot, and two names never
 *          share a key);
 *   postgres, mysql: the row key is the name's bytes themselves (a bound
 *          parameter); the digest that names the channel, advisory key and
 *          GET_LOCK name is 16 lowercase hex digits (a safe identifier),
 *          stable, and depends on every byte. */
#include "config.h"

#include "../../backends/local/local.h"
#include "../../backends/common/name_digest.h"
#include "../../backends/redis/redis_keys.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Undoes %XX escapes; returns the decoded length or -1. */
static long decode(const char *in, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (in[i] != '%') {
            out[o++] = in[i];
            continue;
        }
        if (i + 2 >= len + 0 || hexval(in[i + 1]) < 0 || hexval(in[i + 2]) < 0)
            return -1;
        out[o++] = (char)(hexval(in[i + 1]) * 16 + hexval(in[i + 2]));
        i += 2;
    }
    return (long)o;
}

static void check_local(const char *name, size_t len)
{
    char file[NAME_MAX + 1];
    memset(file, 0x7f, sizeof file);
    dlock__local_file_name(name, len, file);
    size_t n = strnlen(file, sizeof file);
    if (n == 0 || n > NAME_MAX || strchr(file, '/') || file[0] == '.')
        abort();
    bool hashed = n > 6 && !strcmp(file + n - 6, ".hlock");
    if (!hashed && !(n > 5 && !strcmp(file + n - 5, ".lock")))
        abort();
    if (!hashed) {
        char back[DLOCK_NAME_MAX + 1];
        if (decode(file, n - 5, back) != (long)len || memcmp(back, name, len) != 0)
            abort();
    }
}

static void check_redis(const char *name, size_t len)
{
    size_t klen;
    char *key = redis_key_for("dlock:", name, len, ":fence", &klen);
    if (!key)
        return;
    const char *open = strchr(key, '{'), *close = strchr(key, '}');
    if (open != key + 6 || !close || strchr(open + 1, '{') || strchr(close + 1, '}') ||
        strcmp(close, "}:fence") != 0)
        abort();
    char back[DLOCK_NAME_MAX + 1];
    if (decode(open + 1, (size_t)(close - open - 1), back) != (long)len || memcmp(back, name, len) != 0)
        abort();
    free(key);
}

static void check_digest(const char *name, size_t len)
{
    char hex[17], again[17];
    memset(hex, 0x7f, sizeof hex);
    uint64_t d = name_digest("dlock:", 6, name, len);
    name_digest_hex(d, hex);
    if (strlen(hex) != 16 || strspn(hex, "0123456789abcdef") != 16)
        abort();
    /* The prefix and the name are one byte string: where it splits does
     * not matter, so the same key always gets the same digest. */
    char key[6 + DLOCK_NAME_MAX];
    memcpy(key, "dlock:", 6);
    memcpy(key + 6, name, len);
    name_digest_hex(name_digest(key, 6 + len, NULL, 0), again);
    if (strcmp(hex, again) != 0)
        abort();
    /* Flipping any one byte changes it (FNV-1a is a bijection per byte). */
    key[6 + len - 1] ^= 1;
    if (name_digest(key, 6 + len, NULL, 0) == d)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > DLOCK_NAME_MAX || memchr(data, 0, size))
        return 0; /* not a lock name: dlock_lock_new refuses these */
    check_local((const char *)data, size);
    check_redis((const char *)data, size);
    check_digest((const char *)data, size);
    return 0;
}
