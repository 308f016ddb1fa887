/* tests/unit/test_modules.c - the module loader: a module is found through
 * $DLOCK_MODULE_PATH and used by config alone; a module from an unknown
 * version, one missing a required member, one without the entry point are
 * refused with a message that says why; provider tables are checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlock/provider.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void module_is_loaded_by_config(void **state)
{
    (void)state;
    dlock_client *c;
    int rc = dlock_client_open_string(&c, "backend = \"testmod\";");
    if (rc != DLOCK_OK)
        fail_msg("%s: %s (DLOCK_MODULE_PATH=%s)", dlock_strerror(rc), dlock_errmsg(),
                 getenv("DLOCK_MODULE_PATH"));
    assert_string_equal(dlock_client_backend(c), "testmod");
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "m", 1, NULL, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    uint64_t fence;
    assert_int_equal(dlock_fence(l, &fence), DLOCK_OK);
    assert_int_equal(fence, 42);
    /* No DLOCK_CAP_RENEW: the default lease is kept without renewal. */
    assert_int_equal(dlock_renew(l), DLOCK_ENOTSUP);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_status_info info = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(c, "m", 1, &info), DLOCK_ENOTSUP);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void refuses(const char *backend, const char *why)
{
    dlock_client *c;
    char text[128];
    snprintf(text, sizeof text, "backend = \"%s\";", backend);
    c = (dlock_client *)1;
    /* A module that is missing or refused: this host cannot serve the
     * backend, which dlock.h calls unavailable (not a configuration error). */
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_EUNAVAILABLE);
    assert_null(c);
    if (!strstr(dlock_errmsg(), why))
        fail_msg("message for %s lacks '%s': %s", backend, why, dlock_errmsg());
}

static void bad_modules_are_refused_with_reasons(void **state)
{
    (void)state;
    char future[96];
    snprintf(future, sizeof future, "provider version %d is not supported by this libdlock",
             DLOCK_PROVIDER_VERSION + 1);
    refuses("testmod_future", future);
    refuses("testmod_partial", "lacks the required member release");
    refuses("testmod_noentry", "does not export dlock_module_provider()");
    refuses("testmod_absent", "no module dlock_testmod_absent.so in");
    /* A value that is not a backend name at all (a path, say) is a
     * mistake in the configuration, not a host that lacks a module. */
    const char *not_names[] = { "../../lib/evil", "Redis", "a/b", "" };
    for (size_t i = 0; i < sizeof not_names / sizeof not_names[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "backend = \"%s\";", not_names[i]);
        dlock_client *c = (dlock_client *)1;
        int rc = dlock_client_open_string(&c, text);
        if (rc != DLOCK_ECONFIG || !strstr(dlock_errmsg(), "not a backend name"))
            fail_msg("backend \"%s\": %s: %s", not_names[i], dlock_strerror(rc), dlock_errmsg());
        assert_null(c);
    }
}

static int dummy_open(void **i, const struct dlock_provider_env *e) { (void)i; (void)e; return 0; }
static void dummy_close(void *i) { (void)i; }
static int dummy_acquire(void *i, struct dlock_provider_lock *l, struct dlock_grant *g) { (void)i; (void)l; (void)g; return 0; }
static int dummy_release(void *i, struct dlock_provider_lock *l) { (void)i; (void)l; return 0; }

static int dummy_wait_arm(void *i, struct dlock_provider_lock *lk, int64_t *timeout_ms, int *fd)
{
    (void)i;
    (void)lk;
    (void)timeout_ms;
    *fd = -1;
    return DLOCK_OK;
}

static int dummy_wait_disarm(void *i, struct dlock_provider_lock *lk, int fired, int64_t *timeout_ms)
{
    (void)i;
    (void)lk;
    (void)fired;
    (void)timeout_ms;
    return DLOCK_OK;
}

static void provider_tables_are_checked_on_register(void **state)
{
    (void)state;
    struct dlock_provider p = {
        .version = DLOCK_PROVIDER_VERSION, .name = "dummy", .open = dummy_open, .close = dummy_close,
        .acquire = dummy_acquire, .release = dummy_release,
    };
    struct dlock_provider bad = p;
    bad.version = 0;
    assert_int_equal(dlock_provider_register(&bad), DLOCK_EINVAL);
    bad = p;
    bad.name = "Bad Name";
    assert_int_equal(dlock_provider_register(&bad), DLOCK_EINVAL);
    bad = p;
    bad.capabilities = DLOCK_CAP_RENEW; /* claims renew without the member */
    assert_int_equal(dlock_provider_register(&bad), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "renew"));
    bad = p;
    bad.capabilities = DLOCK_CAP_NATIVE_WAIT;
    assert_int_equal(dlock_provider_register(&bad), DLOCK_EINVAL);
    /* Every capability that needs a member is refused without it, in the
     * same words, naming the provider: none is cleared in silence. */
    bad = p;
    bad.capabilities = DLOCK_CAP_SHARED | DLOCK_CAP_DOWNGRADE;
    assert_int_equal(dlock_provider_register(&bad), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "provider 'dummy' lacks the required member downgrade"));
    /* The two halves of a parked wait come together or not at all. */
    bad = p;
    bad.wait_arm = dummy_wait_arm;
    assert_int_equal(dlock_provider_register(&bad), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "provider 'dummy' lacks the required member wait_disarm"));
    bad = p;
    bad.wait_disarm = dummy_wait_disarm;
    assert_int_equal(dlock_provider_register(&bad), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "provider 'dummy' lacks the required member wait_arm"));
    assert_int_equal(dlock_provider_register(NULL), DLOCK_EINVAL);
    static struct dlock_provider good;
    good = p;
    assert_int_equal(dlock_provider_register(&good), DLOCK_OK);
    assert_int_equal(dlock_provider_register(&good), DLOCK_OK); /* idempotent */
    static struct dlock_provider twin;
    twin = p;
    assert_int_equal(dlock_provider_register(&twin), DLOCK_EINVAL); /* name taken */
    static struct dlock_provider local_again;
    local_again = p;
    local_again.name = "local";
    assert_int_equal(dlock_provider_register(&local_again), DLOCK_EINVAL);
}

static int list_must_not_be_called(void *i, struct dlock_provider_list *req)
{
    (void)i;
    (void)req;
    fail_msg("the core called list of a provider that predates version 3");
    return DLOCK_EINTERNAL;
}

static int never_called(const dlock_list_entry *e, void *arg)
{
    (void)e;
    (void)arg;
    return DLOCK_EINTERNAL;
}

/* A version 2 provider's table ends before list: whatever lies there is
 * never read, and listing is reported as not supported. */
static void a_version_2_provider_cannot_list(void **state)
{
    (void)state;
    static struct dlock_provider v2 = {
        .version = DLOCK_PROVIDER_VERSION_2, .name = "dummyv2", .open = dummy_open, .close = dummy_close,
        .acquire = dummy_acquire, .release = dummy_release, .list = list_must_not_be_called,
    };
    assert_int_equal(dlock_provider_register(&v2), DLOCK_OK);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, "backend = \"dummyv2\";"), DLOCK_OK);
    char *next = (char *)"untouched";
    assert_int_equal(dlock_list(c, NULL, 0, NULL, 10, never_called, NULL, &next), DLOCK_ENOTSUP);
    assert_null(next);
    assert_non_null(strstr(dlock_errmsg(), "predates provider version 3"));
    dlock_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(module_is_loaded_by_config),
        cmocka_unit_test(bad_modules_are_refused_with_reasons),
        cmocka_unit_test(provider_tables_are_checked_on_register),
        cmocka_unit_test(a_version_2_provider_cannot_list),
    };
    return cmocka_run_group_tests_name("modules", tests, NULL, NULL);
}
