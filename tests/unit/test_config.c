/* tests/unit/test_config.c - configuration errors are found, all of them,
 * with file and line; defaults apply; backend groups are checked against the
 * provider's declared settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fake_provider.h"

#include <dlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct findings {
    int errors, warnings;
    char text[4096];
};

static void collect(int is_error, const char *file, int line, const char *msg, void *arg)
{
    struct findings *f = arg;
    if (is_error)
        f->errors++;
    else
        f->warnings++;
    size_t used = strlen(f->text);
    snprintf(f->text + used, sizeof f->text - used, "%s|%s:%d: %s\n", is_error ? "E" : "W", file, line, msg);
}

static char tmpl[64];

static const char *write_file(const void *data, size_t len)
{
    snprintf(tmpl, sizeof tmpl, "/tmp/dlock-test-config-XXXXXX");
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    return tmpl;
}

static int check_text(const char *text, struct findings *f)
{
    memset(f, 0, sizeof *f);
    const char *path = write_file(text, strlen(text));
    int rc = dlock_config_check(path, collect, f);
    unlink(path);
    return rc;
}

/* A secret in a file others can read is a warning, with what to do. */
static void secret_in_a_readable_file_is_a_warning(void **state)
{
    (void)state;
    struct findings f;
    const char *text = "backend = \"local\";\nredis = { password = \"s3cret\"; };\n";
    memset(&f, 0, sizeof f);
    const char *path = write_file(text, strlen(text));
    chmod(path, 0644);
    assert_int_equal(dlock_config_check(path, collect, &f), DLOCK_OK);
    assert_int_equal(f.warnings, 1);
    assert_non_null(strstr(f.text, "W|"));
    assert_non_null(strstr(f.text, ":2: this file holds redis.password and is open to group or others (mode 644)"));
    assert_null(strstr(f.text, "s3cret"));
    chmod(path, 0600);
    memset(&f, 0, sizeof f);
    assert_int_equal(dlock_config_check(path, collect, &f), DLOCK_OK);
    assert_int_equal(f.warnings, 0);
    unlink(path);
}

static void good_file_passes(void **state)
{
    (void)state;
    struct findings f;
    assert_int_equal(check_text("# comment\nbackend = \"local\";\nlease_ms = 10000;\nwatchdog = true;\n"
                                "retry_base_ms = 5; retry_cap_ms = 500; prefix = \"app:\";\n"
                                "local = { dir = \"/tmp/x\"; };\n", &f), DLOCK_OK);
    assert_int_equal(f.errors, 0);
}

static void misspelt_setting_names_file_and_line(void **state)
{
    (void)state;
    struct findings f;
    assert_int_equal(check_text("backend = \"local\";\n\nleas_ms = 100;\n", &f), DLOCK_ECONFIG);
    assert_int_equal(f.errors, 1);
    assert_non_null(strstr(f.text, ":3: unknown setting 'leas_ms' (did you mean 'lease_ms'?)"));
    assert_non_null(strstr(f.text, "/tmp/dlock-test-config-"));
}

static void every_error_is_reported(void **state)
{
    (void)state;
    struct findings f;
    assert_int_equal(check_text("backend = \"local\";\n"
                                "lease_ms = \"long\";\n"          /* 2: type */
                                "watchdog = 1;\n"                 /* 3: type */
                                "retry_base_ms = 0;\n"            /* 4: range */
                                "prefix = \"has space\";\n"       /* 5: value */
                                "local = { dir = 5; colour = \"red\"; };\n" /* 6: type, unknown */
                                "reddis = { };\n",                /* 7: unknown group, a typo */
                                &f), DLOCK_ECONFIG);
    assert_int_equal(f.errors, 7);
    for (int line = 2; line <= 7; line++) {
        char needle[16];
        snprintf(needle, sizeof needle, ":%d: ", line);
        assert_non_null(strstr(f.text, needle));
    }
    assert_non_null(strstr(f.text, "'local.dir' must be a string"));
    assert_non_null(strstr(f.text, "unknown setting 'colour' in group 'local'"));
    assert_non_null(strstr(f.text, "unknown group 'reddis' (did you mean 'redis'?)"));
    /* A group for a backend this host has no module for, and that is no
     * near miss of one this tree knows (an out-of-tree module's, say), is
     * not checked here: a warning, since one file serves many hosts. */
    assert_int_equal(check_text("backend = \"local\";\nacme_locks = { endpoint = \"x\"; };\n", &f), DLOCK_OK);
    assert_int_equal(f.warnings, 1);
    assert_non_null(strstr(f.text, ":2: group 'acme_locks' not checked: that backend is not available here"));
}

static void syntax_error_has_a_line(void **state)
{
    (void)state;
    struct findings f;
    assert_int_equal(check_text("backend = \"local\";\nlease_ms = ;\n", &f), DLOCK_ECONFIG);
    assert_int_equal(f.errors, 1);
    assert_non_null(strstr(f.text, ":2: syntax error"));
}

static void empty_binary_and_missing_files(void **state)
{
    (void)state;
    struct findings f;
    assert_int_equal(check_text("", &f), DLOCK_OK); /* empty = all defaults */
    memset(&f, 0, sizeof f);
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 131 + 7);
    const char *path = write_file(junk, sizeof junk);
    assert_int_equal(dlock_config_check(path, collect, &f), DLOCK_ECONFIG);
    unlink(path);
    assert_true(f.errors >= 1);
    memset(&f, 0, sizeof f);
    assert_int_equal(dlock_config_check("/nonexistent/dlock.conf", collect, &f), DLOCK_ECONFIG);
    assert_non_null(strstr(f.text, "/nonexistent/dlock.conf:0: cannot open"));
    assert_int_equal(dlock_config_check(NULL, collect, &f), DLOCK_EINVAL);
}

static void huge_file_is_handled(void **state)
{
    (void)state;
    /* 1 MiB in one value, then 2,000 unknown settings: every one reported. */
    size_t big = 1u << 20, n = 2000;
    char *text = malloc(big + n * 24 + 64);
    size_t o = (size_t)sprintf(text, "prefix = \"");
    memset(text + o, 'a', big);
    o += big;
    o += (size_t)sprintf(text + o, "\";\n");
    for (size_t i = 0; i < n; i++)
        o += (size_t)sprintf(text + o, "x%zu = %zu;\n", i, i);
    struct findings f;
    int rc = check_text(text, &f);
    free(text);
    assert_int_equal(rc, DLOCK_ECONFIG);
    assert_int_equal(f.errors, (int)n + 1);
    assert_non_null(strstr(f.text, ":1: 'prefix' must be a string of at most 64"));
}

static void retry_cap_below_base_is_an_error(void **state)
{
    (void)state;
    struct findings f;
    assert_int_equal(check_text("retry_base_ms = 100; retry_cap_ms = 50;\n", &f), DLOCK_ECONFIG);
    assert_non_null(strstr(f.text, "retry_cap_ms (50) is below retry_base_ms (100)"));
}

static void unknown_backend_is_an_error_and_absent_module_group_a_warning(void **state)
{
    (void)state;
    struct findings f;
    assert_int_equal(check_text("backend = \"nosuch\";\n", &f), DLOCK_ECONFIG);
    assert_non_null(strstr(f.text, ":1: backend 'nosuch' is not available: no module dlock_nosuch.so"));
    /* A group for a known backend whose module is not found here: checked
     * where it is. (The test environment's module path holds the modules
     * of this build: hide them.) */
    const char *saved = getenv("DLOCK_MODULE_PATH");
    char *copy = saved ? strdup(saved) : NULL;
    setenv("DLOCK_MODULE_PATH", "/nonexistent", 1);
    assert_int_equal(check_text("backend = \"local\";\nmysql = { host = \"db\"; };\n", &f), DLOCK_OK);
    if (copy)
        setenv("DLOCK_MODULE_PATH", copy, 1);
    else
        unsetenv("DLOCK_MODULE_PATH");
    free(copy);
    assert_int_equal(f.warnings, 1);
    assert_non_null(strstr(f.text, "W|"));
    assert_int_equal(check_text("backend = \"../../etc\";\n", &f), DLOCK_ECONFIG);
}

static void provider_groups_are_checked_against_its_spec(void **state)
{
    (void)state;
    struct findings f;
    assert_int_equal(check_text("backend = \"fake\";\nfake = {\n label = \"x\";\n delay_ms = 5000;\n"
                                " flag = \"yes\";\n servers = ( \"a\", 3 );\n};\n", &f), DLOCK_ECONFIG);
    assert_int_equal(f.errors, 3);
    assert_non_null(strstr(f.text, ":4: 'fake.delay_ms' is 5000, outside 0..1000"));
    assert_non_null(strstr(f.text, ":5: 'fake.flag' must be a boolean"));
    assert_non_null(strstr(f.text, ":6: 'fake.servers' must be a list of strings"));
    assert_int_equal(check_text("backend = \"fake\";\nfake = { servers = [ \"a:1\", \"b:2\" ]; delay_ms = 3; };\n",
                                &f), DLOCK_OK);
}

static void open_uses_dlock_config_then_default(void **state)
{
    (void)state;
    const char *path = write_file("backend = \"fake\";\n", 18);
    char saved[64];
    snprintf(saved, sizeof saved, "%s", path);
    setenv("DLOCK_CONFIG", saved, 1);
    dlock_client *c;
    assert_int_equal(dlock_client_open(&c, NULL), DLOCK_OK);
    assert_string_equal(dlock_client_backend(c), "fake");
    dlock_client_close(c);
    unsetenv("DLOCK_CONFIG");
    unlink(saved);
    setenv("TMPDIR", "/tmp", 1);
    assert_int_equal(dlock_client_open(&c, NULL), DLOCK_OK);
    assert_string_equal(dlock_client_backend(c), "local");
    assert_int_equal(dlock_client_capabilities(c) & DLOCK_CAP_MULTI_HOST, 0);
    dlock_client_close(c);
    /* A bad file makes open fail with the first error and its line. */
    assert_int_equal(dlock_client_open_string(&c, "backend = \"fake\";\nwatchdog = 3;\n"), DLOCK_ECONFIG);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), "<string>:2: 'watchdog' must be true or false"));
    c = (dlock_client *)1;
    assert_int_equal(dlock_client_open_string(&c, NULL), DLOCK_EINVAL);
    assert_null(c); /* errors set *out to NULL, as documented */
    assert_int_equal(dlock_client_open(NULL, NULL), DLOCK_EINVAL);
}

int main(void)
{
    if (dlock_provider_register(&fake_provider) != DLOCK_OK)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_file_passes),
        cmocka_unit_test(secret_in_a_readable_file_is_a_warning),
        cmocka_unit_test(misspelt_setting_names_file_and_line),
        cmocka_unit_test(every_error_is_reported),
        cmocka_unit_test(syntax_error_has_a_line),
        cmocka_unit_test(empty_binary_and_missing_files),
        cmocka_unit_test(huge_file_is_handled),
        cmocka_unit_test(retry_cap_below_base_is_an_error),
        cmocka_unit_test(unknown_backend_is_an_error_and_absent_module_group_a_warning),
        cmocka_unit_test(provider_groups_are_checked_against_its_spec),
        cmocka_unit_test(open_uses_dlock_config_then_default),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
