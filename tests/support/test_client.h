/* tests/support/test_client.h - opening clients and lock handles in cmocka
 * cases: a failure fails the case with the library's own message. Include
 * after <cmocka.h>. */
#ifndef TEST_CLIENT_H
#define TEST_CLIENT_H

#include <dlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A client for config_text; fails the case if it cannot be opened. */
static inline dlock_client *test_client_open(const char *config_text)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open_string(&c, config_text);
    if (rc != DLOCK_OK)
        fail_msg("open: %s: %s", dlock_strerror(rc), dlock_errmsg());
    return c;
}

/* A handle for the lock NAME (a C string) with default options. */
static inline dlock_lock *test_lock_named(dlock_client *c, const char *name)
{
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), NULL, &l), DLOCK_OK);
    return l;
}

/* The value of the client's metric NAME (e.g. "dlock_renewals_total") from
 * dlock_client_metrics(), -1 if it is not there. */
static inline long long test_client_metric(dlock_client *c, const char *name)
{
    char *text = NULL;
    assert_int_equal(dlock_client_metrics(c, &text), DLOCK_OK);
    char needle[128];
    snprintf(needle, sizeof needle, "\n%s{", name);
    const char *at = strstr(text, needle);
    const char *value = at ? strstr(at, "} ") : NULL;
    long long v = value ? atoll(value + 2) : -1;
    free(text);
    return v;
}

#endif
