/* core/exporter.c - finds and loads the metrics exporter module (see
 * exporter.h), once per process; like backend modules it is never
 * unloaded. */
#include "config.h"

#include "exporter.h"
#include "internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t exporter_mu = PTHREAD_MUTEX_INITIALIZER;
static const struct dlock_exporter_table *exporter;

struct exporter_search {
    const struct dlock_exporter_table *found;
    char why[1200];
};

static int try_exporter_in(const char *dir, void *arg)
{
    struct exporter_search *search = arg;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, DLOCK_EXPORTER_FILE) >= sizeof path ||
        access(path, F_OK) != 0)
        return DLOCK_EUNAVAILABLE;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        snprintf(search->why, sizeof search->why, "cannot load %s: %s", path, dlerror());
        return DLOCK_EINVAL;
    }
    dlock_exporter_entry_fn entry;
    *(void **)&entry = dlsym(handle, DLOCK_EXPORTER_ENTRY);
    const struct dlock_exporter_table *table = entry ? entry(DLOCK_EXPORTER_VERSION) : NULL;
    if (!table || table->version != DLOCK_EXPORTER_VERSION || !table->start || !table->stop) {
        snprintf(search->why, sizeof search->why,
                 "%s is not the metrics exporter of this libdlock (%s): install the one of the same version",
                 path, PACKAGE_VERSION);
        dlclose(handle);
        return DLOCK_EINVAL;
    }
    search->found = table;
    return DLOCK_OK;
}

int dlock__exporter_load(const struct dlock_exporter_table **out)
{
    pthread_mutex_lock(&exporter_mu);
    int rc = DLOCK_OK;
    struct exporter_search search = { NULL, "" };
    char searched[2048] = "";
    if (!exporter && (rc = dlock__module_path_each(try_exporter_in, &search, searched, sizeof searched)) == DLOCK_OK)
        exporter = search.found;
    *out = exporter;
    pthread_mutex_unlock(&exporter_mu);
    if (rc == DLOCK_OK)
        return DLOCK_OK;
    if (search.why[0])
        return dlock_seterr(DLOCK_EUNAVAILABLE, "%s", search.why);
    return dlock_seterr(DLOCK_EUNAVAILABLE,
                        "no module %s in %s: the metrics exporter is not installed (it is built when configure "
                        "finds libmicrohttpd; $DLOCK_MODULE_PATH adds directories)",
                        DLOCK_EXPORTER_FILE, searched);
}
