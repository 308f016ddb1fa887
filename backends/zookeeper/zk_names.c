/* backends/zookeeper/zk_names.c - see zk_names.h. */
#include "config.h"

#include "zk_names.h"
#include "../common/name_escape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

char *zk_parent_path(const char *root, const char *name, size_t name_len)
{
    size_t root_len = strlen(root);
    char *out = malloc(root_len + 1 + 3 * name_len + 1);
    if (!out)
        return NULL;
    memcpy(out, root, root_len);
    out[root_len] = '/';
    out[root_len + 1 + name_escape(name, name_len, plain, out + root_len + 1)] = '\0';
    return out;
}

bool zk_name_of_parent(const char *child, char *name, size_t *name_len)
{
    return name_unescape(child, strlen(child), plain, name, name_len);
}

char *zk_join(const char *parent, const char *child)
{
    size_t a = strlen(parent), b = strlen(child);
    char *out = malloc(a + 1 + b + 1);
    if (out) {
        memcpy(out, parent, a);
        out[a] = '/';
        memcpy(out + a + 1, child, b + 1);
    }
    return out;
}

bool zk_node_prefix(const char *owner, char *out, size_t size)
{
    size_t n = strlen(owner);
    if (n + 7 > size)
        return false;
    for (size_t i = 0; i < n; i++)
        out[i] = plain((unsigned char)owner[i]) ? owner[i] : '_';
    memcpy(out + n, "-lock-", 7);
    return true;
}

int64_t zk_sequence_of(const char *child)
{
    const char *mark = strstr(child, "-lock-");
    if (!mark)
        return -1;
    /* The owner tag has no "-lock-" of its own (hex digits, '_'), so the
     * first mark is the one the server appended digits to. */
    const char *digits = mark + 6;
    if (strlen(digits) != 10 || strspn(digits, "0123456789") != 10)
        return -1;
    return strtoll(digits, NULL, 10);
}

bool zk_valid_root(const char *root)
{
    size_t n = strlen(root);
    if (n < 2 || root[0] != '/' || root[n - 1] == '/' || strstr(root, "//"))
        return false;
    for (const char *c = root; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return false;
    return !strstr(root, "/./") && !strstr(root, "/../") && strcmp(root + n - 2, "/.") != 0 &&
           (n < 3 || strcmp(root + n - 3, "/..") != 0);
}

char zk_kind_of(const char *child, unsigned *permits)
{
    const char *mark = strstr(child, "-lock-");
    const char *tilde = mark ? memchr(child, '~', (size_t)(mark - child)) : NULL;
    *permits = 0;
    if (!tilde)
        return 'x';
    if (tilde[1] == 'p') {
        *permits = (unsigned)strtoul(tilde + 2, NULL, 10);
        return 'p';
    }
    return 's';
}

void zk_downgraded_data(char *out, size_t size, const char *owner, uint64_t fence)
{
    snprintf(out, size, "%s\n%llu", owner, (unsigned long long)fence);
}

uint64_t zk_data_fence(char *data)
{
    char *nl = strchr(data, '\n');
    if (!nl)
        return 0;
    *nl = '\0';
    return strtoull(nl + 1, NULL, 10);
}
