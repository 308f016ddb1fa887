/* core/registry.c - finds providers: registered in-process, built in (local),
 * or loaded from a module. This table is the library's only global mutable
 * state. Modules are never unloaded: a provider's code may still be on some
 * thread's stack, and a process rarely loads more than one or two. */
#include "config.h"

#include "internal.h"
#include "../backends/local/local.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PROVIDERS 32

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static const struct dlock_provider *registry[MAX_PROVIDERS];
static size_t registry_len;

static bool valid_backend_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 32)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

int dlock__provider_check(const struct dlock_provider *p, const char *origin)
{
    if (!p)
        return dlock_seterr(DLOCK_EINVAL, "%s: no provider table", origin);
    if (p->version < DLOCK_PROVIDER_VERSION_1 || p->version > DLOCK_PROVIDER_VERSION)
        return dlock_seterr(DLOCK_EINVAL,
                            "%s: provider version %u is not supported by this libdlock "
                            "(it knows versions %d..%d); rebuild the backend against this libdlock",
                            origin, p->version, DLOCK_PROVIDER_VERSION_1, DLOCK_PROVIDER_VERSION);
    if (!p->name || !valid_backend_name(p->name))
        return dlock_seterr(DLOCK_EINVAL, "%s: provider name must be 1-32 characters of [a-z0-9_]",
                            origin);
    const char *missing = !p->open ? "open" : !p->close ? "close" : !p->acquire ? "acquire"
                        : !p->release ? "release"
                        : ((p->capabilities & DLOCK_CAP_RENEW) && !p->renew) ? "renew (it claims DLOCK_CAP_RENEW)"
                        : ((p->capabilities & DLOCK_CAP_NATIVE_WAIT) && !p->wait) ? "wait (it claims DLOCK_CAP_NATIVE_WAIT)"
                        : ((p->capabilities & DLOCK_CAP_DOWNGRADE) &&
                           (p->version < DLOCK_PROVIDER_VERSION_4 || !p->downgrade))
                            ? "downgrade (it claims DLOCK_CAP_DOWNGRADE)"
                        : (p->version >= DLOCK_PROVIDER_VERSION_5 && !p->wait_arm != !p->wait_disarm)
                            ? (p->wait_arm ? "wait_disarm (it has wait_arm)" : "wait_arm (it has wait_disarm)")
                        : ((p->capabilities & DLOCK_CAP_ELECTION) &&
                           (p->version < DLOCK_PROVIDER_VERSION_6 || !p->value_put || !p->leader_get))
                            ? "value_put and leader_get (it claims DLOCK_CAP_ELECTION)"
                        : (p->version >= DLOCK_PROVIDER_VERSION_6 &&
                           !(!p->watch_open == !p->watch_consume && !p->watch_open == !p->watch_close))
                            ? "watch_open, watch_consume and watch_close (all three or none)"
                        : (p->version >= DLOCK_PROVIDER_VERSION_6 &&
                           !(!p->acquire_send == !p->acquire_recv && !p->acquire_send == !p->acquire_drop))
                            ? "acquire_send, acquire_recv and acquire_drop (all three or none)"
                        : (p->version >= DLOCK_PROVIDER_VERSION_7 &&
                           !(!p->release_send == !p->release_recv && !p->release_send == !p->release_drop))
                            ? "release_send, release_recv and release_drop (all three or none)"
                        : ((p->capabilities & DLOCK_CAP_CACHE) && p->version >= DLOCK_PROVIDER_VERSION_8 &&
                           (!p->watch_wanted || !p->unwatch_wanted))
                            ? "watch_wanted and unwatch_wanted (it claims DLOCK_CAP_CACHE)"
                        : NULL;
    if (missing)
        return dlock_seterr(DLOCK_EINVAL, "%s: provider '%s' lacks the required member %s", origin,
                            p->name, missing);
    if (p->settings)
        for (const struct dlock_setting_spec *s = p->settings; s->name; s++)
            if (s->type < DLOCK_SETTING_STRING || s->type > DLOCK_SETTING_STRING_LIST)
                return dlock_seterr(DLOCK_EINVAL, "%s: provider '%s' declares setting '%s' with unknown type %d",
                                    origin, p->name, s->name, (int)s->type);
    return DLOCK_OK;
}

static const struct dlock_provider *lookup_locked(const char *name)
{
    for (size_t i = 0; i < registry_len; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    if (strcmp(name, dlock__local_provider.name) == 0)
        return &dlock__local_provider;
    return NULL;
}

static int add_locked(const struct dlock_provider *p)
{
    const struct dlock_provider *existing = lookup_locked(p->name);
    if (existing == p)
        return DLOCK_OK;
    if (existing)
        return dlock_seterr(DLOCK_EINVAL, "a different provider named '%s' is already registered", p->name);
    if (registry_len == MAX_PROVIDERS)
        return dlock_seterr(DLOCK_EINVAL, "too many providers registered (limit %d)", MAX_PROVIDERS);
    registry[registry_len++] = p;
    return DLOCK_OK;
}

int dlock_provider_register(const struct dlock_provider *p)
{
    int rc = dlock__provider_check(p, "dlock_provider_register");
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&registry_mu);
    rc = add_locked(p);
    pthread_mutex_unlock(&registry_mu);
    return rc;
}

/* Tries dir/dlock_<name>.so. Returns DLOCK_OK with *out, DLOCK_EUNAVAILABLE
 * if there is no such file, DLOCK_EINVAL if it exists but is unusable. */
static int load_module(const char *dir, const char *name, const struct dlock_provider **out,
                       char *why, size_t why_len)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/dlock_%s.so", dir, name) >= sizeof path)
        return DLOCK_EUNAVAILABLE;
    if (access(path, F_OK) != 0)
        return DLOCK_EUNAVAILABLE;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        snprintf(why, why_len, "cannot load %s: %s", path, dlerror());
        return DLOCK_EINVAL;
    }
    dlock_module_entry_fn entry;
    *(void **)&entry = dlsym(handle, DLOCK_MODULE_ENTRY);
    if (!entry) {
        snprintf(why, why_len, "%s does not export %s(); it is not a libdlock backend module",
                 path, DLOCK_MODULE_ENTRY);
        dlclose(handle);
        return DLOCK_EINVAL;
    }
    const struct dlock_provider *p = entry(DLOCK_PROVIDER_VERSION);
    if (!p) {
        snprintf(why, why_len, "%s refused to load into this libdlock (provider version %d)", path,
                 DLOCK_PROVIDER_VERSION);
        dlclose(handle);
        return DLOCK_EINVAL;
    }
    if (dlock__provider_check(p, path) != DLOCK_OK) {
        snprintf(why, why_len, "%s", dlock_errmsg());
        dlclose(handle);
        return DLOCK_EINVAL;
    }
    if (strcmp(p->name, name) != 0) {
        snprintf(why, why_len, "%s provides backend '%s', not '%s'", path, p->name, name);
        dlclose(handle);
        return DLOCK_EINVAL;
    }
    *out = p;
    return DLOCK_OK;
}

int dlock__module_path_each(int (*try_dir)(const char *dir, void *arg), void *arg, char *searched,
                            size_t searched_len)
{
    searched[0] = 0;
    int rc = DLOCK_EUNAVAILABLE;
    const char *env = getenv("DLOCK_MODULE_PATH");
    char *paths = NULL;
    if (env && *env && asprintf(&paths, "%s:%s", env, DLOCK_MODULE_DIR) < 0)
        paths = NULL;
    char *list = paths ? paths : strdup(DLOCK_MODULE_DIR);
    char *save = NULL;
    for (char *dir = list ? strtok_r(list, ":", &save) : NULL; dir; dir = strtok_r(NULL, ":", &save)) {
        size_t used = strlen(searched);
        snprintf(searched + used, searched_len - used, "%s%s", used ? ", " : "", dir);
        rc = try_dir(dir, arg);
        if (rc != DLOCK_EUNAVAILABLE)
            break;
    }
    free(list);
    return rc;
}

struct module_search {
    const char *name;
    const struct dlock_provider *found;
    char why[1200];
};

static int try_provider_in(const char *dir, void *arg)
{
    struct module_search *search = arg;
    return load_module(dir, search->name, &search->found, search->why, sizeof search->why);
}

int dlock__provider_find(const char *name, const struct dlock_provider **out)
{
    if (!name || !valid_backend_name(name))
        return dlock_seterr(DLOCK_ECONFIG, "'%s' is not a backend name (1-32 characters of [a-z0-9_])",
                            name ? name : "(null)");
    pthread_mutex_lock(&registry_mu);
    const struct dlock_provider *p = lookup_locked(name);
    if (p) {
        pthread_mutex_unlock(&registry_mu);
        *out = p;
        return DLOCK_OK;
    }

    struct module_search search = { name, NULL, "" };
    char searched[2048] = "";
    int rc = dlock__module_path_each(try_provider_in, &search, searched, sizeof searched);
    p = search.found;
    const char *why = search.why;
    if (rc == DLOCK_OK)
        rc = add_locked(p);
    pthread_mutex_unlock(&registry_mu);

    if (rc == DLOCK_OK) {
        *out = p;
        return DLOCK_OK;
    }
    if (why[0])
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s", why);
    return dlock_seterr(DLOCK_EUNAVAILABLE,
                        "no module dlock_%s.so in %s (is the %s backend installed? "
                        "$DLOCK_MODULE_PATH adds directories)", name, searched, name);
}
