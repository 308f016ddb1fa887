/* tests/modules/testmod.c - backend modules for the loader tests, built in
 * four variants: 0 well-formed, 1 from a future provider version, 2 missing
 * the required release member, 3 without the entry point. */
#include <dlock/provider.h>

#include <stdlib.h>

static int open_(void **instance, const struct dlock_provider_env *env)
{
    (void)env;
    *instance = NULL;
    return DLOCK_OK;
}
static void close_(void *instance) { (void)instance; }
static int acquire_(void *i, struct dlock_provider_lock *lk, struct dlock_grant *g)
{
    (void)i; (void)lk;
    g->fence = 42;
    g->has_fence = 1;
    return DLOCK_OK;
}
__attribute__((unused)) static int release_(void *i, struct dlock_provider_lock *lk) { (void)i; (void)lk; return DLOCK_OK; }

#if TESTMOD_VARIANT == 0
#define NAME "testmod"
#define VERSION DLOCK_PROVIDER_VERSION
#define RELEASE release_
#elif TESTMOD_VARIANT == 1
#define NAME "testmod_future"
#define VERSION (DLOCK_PROVIDER_VERSION + 1)
#define RELEASE release_
#elif TESTMOD_VARIANT == 2
#define NAME "testmod_partial"
#define VERSION DLOCK_PROVIDER_VERSION
#define RELEASE NULL
#else
#define NAME "testmod_noentry"
#define VERSION DLOCK_PROVIDER_VERSION
#define RELEASE release_
#endif

static const struct dlock_provider provider = {
    .version = VERSION,
    .name = NAME,
    .capabilities = DLOCK_CAP_FENCE,
    .open = open_,
    .close = close_,
    .acquire = acquire_,
    .release = RELEASE,
};

#if TESTMOD_VARIANT != 3
const struct dlock_provider *dlock_module_provider(unsigned core_version);
const struct dlock_provider *dlock_module_provider(unsigned core_version)
{
    (void)core_version;
    return &provider;
}
#else
const struct dlock_provider *not_the_entry(void);
const struct dlock_provider *not_the_entry(void) { return &provider; }
#endif
