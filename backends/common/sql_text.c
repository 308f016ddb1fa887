/* backends/common/sql_text.c - see sql_text.h. */
#include "config.h"

#include "sql_text.h"

#include "name_digest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

int sql_settings_read(const dlock_settings *s, const char *group, const char *default_prefix, size_t table_max,
                      size_t prefix_max, struct sql_settings *out)
{
    const char *mode = "lease";
    int create = 1;
    out->table = "dlock_locks";
    out->prefix = default_prefix;
    out->pool_size = 4;
    dlock_settings_string(s, "table", &out->table);
    dlock_settings_string(s, "mode", &mode);
    dlock_settings_string(s, "prefix", &out->prefix);
    dlock_settings_bool(s, "create_table", &create);
    dlock_settings_int(s, "pool_size", &out->pool_size);
    out->create_table = create != 0;
    out->session_mode = strcmp(mode, "session") == 0;
    if (!sql_valid_table(out->table, table_max))
        return dlock_seterr(DLOCK_ECONFIG, "%s: %s.table must be 1 to %zu letters, digits or underscores, "
                            "not starting with a digit",
                            dlock_settings_where(s, "table"), group, table_max);
    if (strcmp(mode, "lease") != 0 && !out->session_mode)
        return dlock_seterr(DLOCK_ECONFIG, "%s: %s.mode must be \"lease\" or \"session\", not \"%s\"",
                            dlock_settings_where(s, "mode"), group, mode);
    if (strlen(out->prefix) > prefix_max)
        return dlock_seterr(DLOCK_ECONFIG, "%s: %s.prefix must be at most %zu bytes",
                            dlock_settings_where(s, "prefix"), group, prefix_max);
    return DLOCK_OK;
}

int sql_lock_key_init(struct sql_lock_key *k, const char *prefix, const char *name, size_t len)
{
    size_t plen = strlen(prefix);
    k->key = malloc(plen + len + 1);
    if (!k->key)
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for a lock key");
    memcpy(k->key, prefix, plen);
    memcpy(k->key + plen, name, len);
    k->key[plen + len] = '\0';
    k->key_len = plen + len;
    k->digest = name_digest(k->key, k->key_len, NULL, 0);
    char hex[17];
    name_digest_hex(k->digest, hex);
    snprintf(k->tag, sizeof k->tag, "dlock_%s", hex);
    return DLOCK_OK;
}

void sql_lock_key_free(struct sql_lock_key *k)
{
    free(k->key);
    memset(k, 0, sizeof *k);
}

int sql_renew_batch_init(struct sql_renew_batch *b, struct dlock_provider_lock *const *locks, size_t n)
{
    b->n = n;
    b->keys = malloc(n * sizeof *b->keys);
    b->owners = malloc(n * sizeof *b->owners);
    b->leases = malloc(n * sizeof *b->leases);
    if (!b->keys || !b->owners || !b->leases) {
        sql_renew_batch_free(b);
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for a renewal batch of %zu", n);
    }
    for (size_t i = 0; i < n; i++) {
        b->keys[i] = locks[i]->priv;
        b->owners[i] = locks[i]->owner;
        b->leases[i] = locks[i]->lease_ms;
    }
    return DLOCK_OK;
}

void sql_renew_batch_free(struct sql_renew_batch *b)
{
    free(b->keys);
    free(b->owners);
    free(b->leases);
    b->keys = NULL;
    b->owners = NULL;
    b->leases = NULL;
}

char *sql_hex(char *out, const char *p, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)p[i];
        *out++ = digits[b >> 4];
        *out++ = digits[b & 15];
    }
    return out;
}
