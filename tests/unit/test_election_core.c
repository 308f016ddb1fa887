/* tests/unit/test_election_core.c - the core's side of elections, on the
 * built-in local backend: a value is stored only for the hold of its term
 * (a late publication of an earlier hold is refused by the core and by the
 * backend), and what an observer reports (never a term older than one it
 * reported, nor one it saw end). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../core/entry.h"
#include "../support/temp_dir.h"

#include <dlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    return temp_dir_make(dir, sizeof dir, "election-core");
}

static int remove_dir(void **state)
{
    (void)state;
    return temp_dir_remove(dir);
}

static dlock_client *open_local(void)
{
    char text[256];
    snprintf(text, sizeof text, "backend = \"local\";\nlocal = { dir = \"%s\"; };\n", dir);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_open_string(&c, text), DLOCK_OK);
    return c;
}

/* A hold of the handle's own (as a candidate's), and its term. */
static uint64_t hold(dlock_lock *h)
{
    assert_int_equal(dlock__acquire_for(h, 0, h->async_no), DLOCK_OK);
    uint64_t term = 0;
    assert_int_equal(dlock_fence(h, &term), DLOCK_OK);
    return term;
}

static void a_late_value_of_an_earlier_hold_is_refused(void **state)
{
    (void)state;
    dlock_client *c = open_local();
    dlock_lock *h = NULL;
    assert_int_equal(dlock_lock_new(c, "late", 4, NULL, &h), DLOCK_OK);
    struct dlock__entry *e = h->entry;
    uint64_t first = hold(h);
    assert_int_equal(dlock__hold_value_put(h, first, "one", 3), DLOCK_OK);
    /* Not this hold's term: the core sends nothing. */
    assert_int_equal(dlock__hold_value_put(h, first + 1, "x", 1), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    uint64_t second = hold(h);
    assert_true(second > first);
    /* A publication of the first hold that comes late: the core refuses
     * it (another hold now), and so does the backend if it gets that far. */
    pthread_mutex_lock(&e->mu);
    uint64_t holder = e->holder;
    pthread_mutex_unlock(&e->mu);
    assert_int_equal(dlock__p_value_put(c, e, holder, first, "old", 3), DLOCK_ENOTOWNER);
    pthread_mutex_lock(&e->op_mu);
    int rc = c->provider->value_put(c->instance, &e->plock, first, "old", 3);
    pthread_mutex_unlock(&e->op_mu);
    assert_int_equal(rc, DLOCK_ELOST);
    assert_int_equal(dlock__hold_value_put(h, second, "two", 3), DLOCK_OK);
    char value[8];
    size_t len = 0;
    uint64_t term = 0;
    assert_int_equal(dlock_leader(c, "late", 4, value, sizeof value, &len, &term), DLOCK_OK);
    assert_true(term == second && len == 3 && memcmp(value, "two", 3) == 0);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    /* Released: nothing of it can publish any more. */
    assert_int_equal(dlock__hold_value_put(h, second, "gone", 4), DLOCK_ENOTOWNER);
    assert_int_equal(dlock_leader(c, "late", 4, value, sizeof value, &len, &term), DLOCK_OK);
    assert_true(term == 0);
    dlock_lock_free(h);
    dlock_client_close(c);
}

static bool news(struct dlock__leader_seen *s, uint64_t term, const char *value)
{
    size_t len = strlen(value);
    char *copy = len ? malloc(len) : NULL;
    if (len)
        memcpy(copy, value, len);
    return dlock__leader_news(s, term, copy, len);
}

static void an_observer_reports_only_news_and_never_goes_back(void **state)
{
    (void)state;
    struct dlock__leader_seen s;
    memset(&s, 0, sizeof s);
    assert_true(news(&s, 0, ""));       /* the state at the start */
    assert_false(news(&s, 0, ""));      /* the same again */
    assert_true(news(&s, 5, "a"));
    assert_false(news(&s, 5, "a"));
    assert_true(news(&s, 5, "a2"));     /* a new value, the same term */
    assert_false(news(&s, 3, "old"));   /* an older leader: a stale read */
    assert_true(news(&s, 0, ""));       /* term 5 ended */
    assert_false(news(&s, 5, "a2"));    /* seen to end: never leads again */
    assert_true(news(&s, 7, "b"));
    assert_false(news(&s, 5, "a2"));
    assert_false(news(&s, 6, "c"));     /* older than one reported */
    assert_true(news(&s, 9, ""));       /* a leader with an empty value */
    assert_true(s.term == 9 && s.highest == 9 && s.ended == 5);
    dlock__leader_seen_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_late_value_of_an_earlier_hold_is_refused),
        cmocka_unit_test(an_observer_reports_only_news_and_never_goes_back),
    };
    return cmocka_run_group_tests_name("elections in the core", tests, make_dir, remove_dir);
}
