/* tests/faults/test_history_check.c - the fault suite's checker on
 * histories written by hand: each kind of violation it must find, and a
 * correct read/write run it must pass. A checker that finds nothing would
 * make every checked fault run pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "history_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/dlock-history-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_file(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Worker 0 writes (read at 1100, write at 1400: 0 -> 1); workers 1 and 2
 * read (their logs empty unless the case writes them). Times in us; each
 * hold is valid until 10 s unless released. */
static void write_writer(void)
{
    write_file("worker-0.log", "1000 invoke\n1000 grant 10 10000000\n1500 releasing\n1500 release 0\n");
    write_file("worker-1.log", "");
    write_file("worker-2.log", "");
}

/* The checker's verdict on the resource log text after write_writer(). */
static int check_resource_log(const char *text, struct history_report *r)
{
    write_file("resource.log", text);
    return history_check_rw(dir, 3, 1, r);
}

static void a_correct_run_passes(void **state)
{
    (void)state;
    write_writer();
    write_file("worker-1.log", "2000 grant 11 10000000\n3000 releasing\n3000 release 0\n");
    write_file("worker-2.log", "2500 grant 12 10000000\n3500 releasing\n3500 release 0\n");
    write_file("resource.log", "1 1100 read 0 10 ok 0 0\n2 1400 write 0 10 ok 0 1\n"
                               "3 2600 sread 2 12 ok 1 1\n4 2700 sread 1 11 ok 1 1\n");
    struct history_report r;
    assert_int_equal(history_check_rw(dir, 3, 1, &r), 0);
    assert_int_equal(r.most_at_once, 2);   /* the readers held together */
    assert_int_equal(r.shared_reads, 2);   /* in any order of their tokens */
    assert_int_equal(r.writes_admitted, 1);
    assert_int_equal(r.counter, 1);
}

static void a_reader_inside_a_writers_hold_is_an_overlap(void **state)
{
    (void)state;
    write_writer();
    write_file("worker-1.log", "1200 grant 11 10000000\n3000 releasing\n3000 release 0\n");
    struct history_report r;
    assert_true(check_resource_log("1 1100 read 0 10 ok 0 0\n2 1400 write 0 10 ok 0 1\n", &r) > 0);
    assert_int_equal(r.overlaps, 1);
    assert_non_null(strstr(r.first_violation, "reader 1"));
}

static void a_shared_read_inside_an_increment_is_found(void **state)
{
    (void)state;
    write_writer();
    /* The reader's token is one the guard should have kept out of the
     * writer's increment; the writer's write is admitted all the same. */
    struct history_report r;
    assert_true(check_resource_log("1 1100 read 0 10 ok 0 0\n2 1200 sread 1 10 ok 0 0\n3 1400 write 0 10 ok 0 1\n", &r) > 0);
    assert_int_equal(r.reader_saw_partial, 1);
}

static void a_stale_shared_read_admitted_is_found(void **state)
{
    (void)state;
    write_writer();
    struct history_report r;
    assert_true(check_resource_log("1 1100 read 0 10 ok 0 0\n2 1400 write 0 10 ok 0 1\n3 1600 sread 1 9 ok 1 1\n", &r) > 0);
    assert_int_equal(r.stale_admitted, 1);
}

static void a_late_write_after_a_newer_reader_must_be_refused(void **state)
{
    (void)state;
    write_writer();
    /* Writer 0 (token 10) read, a reader with 11 read, then 0's write went
     * in: the guard should have refused it. */
    struct history_report r;
    assert_true(check_resource_log("1 1100 read 0 10 ok 0 0\n2 1200 sread 1 11 ok 0 0\n3 1400 write 0 10 ok 0 1\n", &r) > 0);
    assert_true(r.stale_admitted >= 1);
    /* Refused, it is correct. */
    write_file("resource.log", "1 1100 read 0 10 ok 0 0\n2 1200 sread 1 11 ok 0 0\n3 1400 write 0 10 stale 0 0\n");
    write_file("worker-0.log", "1000 invoke\n1000 grant 10 1150\n1500 releasing\n1500 release -3\n");
    write_file("worker-1.log", "1190 grant 11 10000000\n1300 releasing\n1300 release 0\n");
    assert_int_equal(history_check_rw(dir, 3, 1, &r), 0);
    assert_int_equal(r.writes_refused, 1);
}

/* A mixed run: worker 0 writes, 1 reads, 2 and 3 hold permits of a
 * semaphore of 1. A reader beside a permit holder is found, and so are two
 * permits of a semaphore of one at once; permits one after the other are
 * not. */
/* Lock caching: worker 0 takes its kept token 10 again with nobody
 * granted in between (fine), then again after worker 1 held token 11
 * (stale: its kept hold had ended). */
static void a_kept_token_taken_after_another_grant_is_stale(void **state)
{
    (void)state;
    write_file("worker-0.log", "1000 grant 10 10000000\n1500 releasing\n1500 release 0\n"
                               "2000 grant 10 10000000\n2500 releasing\n2500 release 0\n");
    write_file("worker-1.log", "3000 grant 11 10000000\n3500 releasing\n3500 release 0\n");
    write_file("resource.log", "");
    struct history_report r;
    assert_int_equal(history_check(dir, 2, &r), 0);
    assert_int_equal(r.kept_grants, 1);
    write_file("worker-0.log", "1000 grant 10 10000000\n1500 releasing\n1500 release 0\n"
                               "4000 grant 10 10000000\n4500 releasing\n4500 release 0\n");
    assert_int_equal(history_check(dir, 2, &r), 1);
    assert_int_equal(r.stale_grants, 1);
    assert_non_null(strstr(r.first_violation, "stale grant: worker 0 took token 10 again"));
    /* Token 0 is a worker that could not read its token (the hold ended
     * first), twice: not a kept token. */
    write_file("worker-0.log", "1000 grant 0 1000\n1500 releasing\n1500 release 0\n"
                               "4000 grant 0 4000\n4500 releasing\n4500 release 0\n");
    assert_int_equal(history_check(dir, 2, &r), 0);
    assert_int_equal(r.kept_grants, 0);
}

static void a_reader_beside_a_permit_is_found(void **state)
{
    (void)state;
    write_writer();
    write_file("resource.log", "1 1100 read 0 10 ok 0 0\n2 1400 write 0 10 ok 0 1\n");
    write_file("worker-1.log", "2000 invoke\n2000 grant 11 10000000\n2500 releasing\n2500 release 0\n");
    write_file("worker-2.log", "3000 invoke\n3000 grant 12 10000000\n3500 releasing\n3500 release 0\n");
    write_file("worker-3.log", "3600 invoke\n3600 grant 13 10000000\n3900 releasing\n3900 release 0\n");
    struct history_report r;
    assert_int_equal(history_check_mixed(dir, 4, 1, 2, 1, &r), 0);
    write_file("worker-3.log", "3200 invoke\n3200 grant 13 10000000\n3900 releasing\n3900 release 0\n");
    assert_true(history_check_mixed(dir, 4, 1, 2, 1, &r) > 0);
    assert_int_equal(r.overlaps, 1);
    write_file("worker-3.log", "");
    write_file("worker-1.log", "2000 invoke\n2000 grant 11 10000000\n3100 releasing\n3100 release 0\n");
    assert_true(history_check_mixed(dir, 4, 1, 2, 1, &r) > 0);
    assert_non_null(strstr(r.first_violation, "permit holder"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_correct_run_passes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_reader_inside_a_writers_hold_is_an_overlap, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_shared_read_inside_an_increment_is_found, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_stale_shared_read_admitted_is_found, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_late_write_after_a_newer_reader_must_be_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_reader_beside_a_permit_is_found, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_kept_token_taken_after_another_grant_is_stale, make_dir, remove_dir),
    };
    return cmocka_run_group_tests_name("fault suite checker", tests, NULL, NULL);
}
