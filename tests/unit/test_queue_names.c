/* tests/unit/test_queue_names.c - the helpers the etcd and zookeeper
 * listings share (backends/common): a name's escape comes back as the
 * exact bytes and nothing else unescapes, and who holds in a line of
 * contenders follows the grant rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../backends/common/name_escape.h"
#include "../../backends/common/queue_list.h"

#include <string.h>

static bool keeps_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* Every byte but NUL, escaped and back, with the longest name. */
static void escapes_come_back_exactly(void **state)
{
    (void)state;
    char name[DLOCK_NAME_MAX], text[3 * DLOCK_NAME_MAX], back[DLOCK_NAME_MAX + 1];
    for (size_t i = 0; i < sizeof name; i++)
        name[i] = (char)(1 + i % 255);
    size_t n = name_escape(name, sizeof name, keeps_alnum, text), len = 0;
    assert_true(name_unescape(text, n, keeps_alnum, back, &len));
    assert_int_equal(len, sizeof name);
    assert_memory_equal(back, name, len);
    assert_int_equal(back[len], 0);
}

/* Text no escape makes: not a name. */
static void other_text_is_no_name(void **state)
{
    (void)state;
    char back[DLOCK_NAME_MAX + 1];
    size_t len;
    static const char *const bad[] = {
        "",      /* empty */
        "a%2",   /* cut short */
        "a%2f",  /* lowercase hex */
        "%61",   /* 'a' is kept plain, never escaped */
        "a.b",   /* '.' is always escaped */
        "a%00",  /* NUL */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(name_unescape(bad[i], strlen(bad[i]), keeps_alnum, back, &len));
    char long_name[DLOCK_NAME_MAX + 2];
    memset(long_name, 'a', sizeof long_name);
    assert_false(name_unescape(long_name, sizeof long_name, keeps_alnum, back, &len));
}

static struct queued_contender contender(unsigned mode, int64_t order, uint64_t fence, int64_t left)
{
    return (struct queued_contender){ mode, order, false, { "o", -1, "", fence, left, -1 }, NULL };
}

/* Readers before the first writer hold; the writer and everyone after it
 * wait. Given out of order, the line is sorted by arrival. */
static void shared_run_holds_until_a_writer(void **state)
{
    (void)state;
    struct queued_contender q[4] = {
        contender(DLOCK_MODE_SHARED, 40, 40, 100), contender(DLOCK_MODE_SHARED, 10, 10, 900),
        contender(DLOCK_MODE_EXCLUSIVE, 30, 30, 500), contender(DLOCK_MODE_SHARED, 20, 20, 300),
    };
    assert_int_equal(queue_decide(q, 4, 0), 2);
    dlock_list_holder holders[4];
    dlock_list_entry e = { 0 };
    queue_entry(q, 4, 0, &e, holders, 4);
    assert_int_equal(e.kind, DLOCK_MODE_SHARED);
    assert_int_equal(e.holder_count, 2);
    assert_int_equal(e.n_holders, 2);
    assert_int_equal(e.waiters, 2);
    assert_int_equal(e.fence, 20);
    assert_int_equal(e.lease_left_ms, 900);
}

/* An exclusive first holds alone; a semaphore's N lowest hold, and only
 * the first cap holders are described while all are counted. */
static void exclusive_first_and_permits(void **state)
{
    (void)state;
    struct queued_contender x[3] = {
        contender(DLOCK_MODE_EXCLUSIVE, 5, 5, -1), contender(DLOCK_MODE_SHARED, 6, 6, -1),
        contender(DLOCK_MODE_EXCLUSIVE, 7, 7, -1),
    };
    assert_int_equal(queue_decide(x, 3, 0), 1);
    dlock_list_holder holders[3];
    dlock_list_entry e = { 0 };
    queue_entry(x, 3, 0, &e, holders, 3);
    assert_int_equal(e.kind, DLOCK_MODE_EXCLUSIVE);
    assert_int_equal(e.fence, 5);
    assert_int_equal(e.waiters, 2);
    assert_int_equal(e.lease_left_ms, -1);
    struct queued_contender p[4] = {
        contender(DLOCK_MODE_SEMAPHORE, 1, 1, -1), contender(DLOCK_MODE_SEMAPHORE, 2, 2, -1),
        contender(DLOCK_MODE_SEMAPHORE, 3, 3, -1), contender(DLOCK_MODE_SEMAPHORE, 4, 4, -1),
    };
    assert_int_equal(queue_decide(p, 4, 3), 3);
    queue_entry(p, 4, 3, &e, holders, 2);
    assert_int_equal(e.kind, DLOCK_MODE_SEMAPHORE);
    assert_int_equal(e.permits, 3);
    assert_int_equal(e.holder_count, 3);
    assert_int_equal(e.n_holders, 2);
    assert_int_equal(e.fence, 3);
    assert_int_equal(e.waiters, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(escapes_come_back_exactly),
        cmocka_unit_test(other_text_is_no_name),
        cmocka_unit_test(shared_run_holds_until_a_writer),
        cmocka_unit_test(exclusive_first_and_permits),
    };
    return cmocka_run_group_tests_name("backend helpers: name escapes, queue lines", tests, NULL, NULL);
}
