/* tests/backends/local/test_local_queue.c - the local backend's line of
 * waiters (backends/local/local_queue.c) on its own, in a temporary lock
 * directory: who a release wakes, counted in the waiters' FIFOs, with no
 * timing involved. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../../backends/local/local_queue.h"
#include "../../support/temp_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static int dirfd_;
static const char *const FILE_NAME = "name.lock";

static int make_dir(void **state)
{
    (void)state;
    if (temp_dir_make(dir, sizeof dir, "queue") != 0)
        return -1;
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY);
    return dirfd_ < 0 ? -1 : 0;
}

static int remove_dir(void **state)
{
    (void)state;
    close(dirfd_);
    return temp_dir_remove(dir);
}

static void join(struct local_waiter *w, bool shared)
{
    memset(w, 0, sizeof *w);
    assert_int_equal(local_queue_join(dirfd_, FILE_NAME, shared, w), 0);
    assert_int_equal(w->place.state, LINE_ASKED);
}

/* Entries in the line's folder (hidden ones too). */
static int entries(void)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/.q/%s", dir, FILE_NAME);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static void a_release_wakes_the_first_waiter_only(void **state)
{
    (void)state;
    struct local_waiter a, b, c;
    join(&a, false);
    join(&b, false);
    join(&c, false);
    assert_true(local_queue_wake_next(dirfd_, FILE_NAME, 1) > 0);
    assert_int_equal(local_queue_drain(&a), 1);
    assert_int_equal(local_queue_drain(&b), 0);
    assert_int_equal(local_queue_drain(&c), 0);
    a.wakes--; /* its attempt, granted */
    local_queue_leave(dirfd_, FILE_NAME, &a, 0);
    assert_true(local_queue_wake_next(dirfd_, FILE_NAME, 1) > 0);
    assert_int_equal(local_queue_drain(&b), 1);
    assert_int_equal(local_queue_drain(&c), 0);
    local_queue_leave(dirfd_, FILE_NAME, &b, 0);
    local_queue_leave(dirfd_, FILE_NAME, &c, 0);
    assert_int_equal(entries(), 0);
    assert_int_equal(local_queue_wake_next(dirfd_, FILE_NAME, 1), 0); /* an empty line */
}

/* Two permits freed while the first waiter is still in the line: both
 * wake-ups reach it; the one its attempt does not use goes to the next
 * waiter when it leaves. */
static void two_wake_ups_taken_by_one_waiter_reach_two(void **state)
{
    (void)state;
    struct local_waiter a, b;
    join(&a, false);
    join(&b, false);
    local_queue_wake_next(dirfd_, FILE_NAME, 1);
    assert_int_equal(local_queue_drain(&a), 1);
    local_queue_wake_next(dirfd_, FILE_NAME, 1); /* before a's attempt and leave */
    assert_int_equal(local_queue_drain(&a), 1);
    assert_int_equal(local_queue_drain(&b), 0);
    a.wakes--; /* one attempt, granted a permit */
    local_queue_leave(dirfd_, FILE_NAME, &a, INT_MAX);
    assert_int_equal(local_queue_drain(&b), 1);
    local_queue_leave(dirfd_, FILE_NAME, &b, 0);
}

/* A waiter that does not read its wake-up (stopped) does not hold up the
 * line: the next release wakes the one behind it as well. */
static void a_waiter_that_does_not_read_does_not_hold_up_the_line(void **state)
{
    (void)state;
    struct local_waiter a, b;
    join(&a, false);
    join(&b, false);
    local_queue_wake_next(dirfd_, FILE_NAME, 1);
    assert_int_equal(local_queue_drain(&b), 0);
    local_queue_wake_next(dirfd_, FILE_NAME, 1);
    assert_int_equal(local_queue_drain(&b), 1);
    local_queue_leave(dirfd_, FILE_NAME, &a, 0);
    local_queue_leave(dirfd_, FILE_NAME, &b, 0);
}

/* A waiter whose FIFO nobody has open (it died) is passed over and
 * removed. */
static void a_dead_waiter_is_passed_over_and_removed(void **state)
{
    (void)state;
    struct local_waiter dead, b;
    join(&dead, false);
    join(&b, false);
    close(dead.fd); /* as the kernel does when it dies */
    assert_int_equal(entries(), 2);
    assert_int_equal(local_queue_wake_next(dirfd_, FILE_NAME, 1), 1);
    assert_int_equal(local_queue_drain(&b), 1);
    assert_int_equal(entries(), 1);
    local_queue_leave(dirfd_, FILE_NAME, &b, 0);
}

/* A reader at the head: the readers behind it and the first writer are
 * woken too (the writer's turnstile may be what keeps them out), nobody
 * after that writer. */
static void a_reader_at_the_head_wakes_readers_up_to_the_first_writer(void **state)
{
    (void)state;
    struct local_waiter r1, r2, w, r3;
    join(&r1, true);
    join(&r2, true);
    join(&w, false);
    join(&r3, true);
    local_queue_wake_next(dirfd_, FILE_NAME, 1);
    assert_int_equal(local_queue_drain(&r1), 1);
    assert_int_equal(local_queue_drain(&r2), 1);
    assert_int_equal(local_queue_drain(&w), 1);
    assert_int_equal(local_queue_drain(&r3), 0);
    local_queue_leave(dirfd_, FILE_NAME, &r1, 0);
    local_queue_leave(dirfd_, FILE_NAME, &r2, 0);
    local_queue_leave(dirfd_, FILE_NAME, &w, 0);
    local_queue_leave(dirfd_, FILE_NAME, &r3, 0);
}

/* A waiter that gives up after taking a wake-up hands it on. */
static void a_waiter_that_gives_up_hands_its_wake_up_on(void **state)
{
    (void)state;
    struct local_waiter a, b;
    join(&a, false);
    join(&b, false);
    local_queue_wake_next(dirfd_, FILE_NAME, 1);
    assert_int_equal(local_queue_drain(&a), 1); /* woken, then cancelled before its attempt */
    local_queue_leave(dirfd_, FILE_NAME, &a, 1);
    assert_int_equal(local_queue_drain(&b), 1);
    local_queue_leave(dirfd_, FILE_NAME, &b, 0);
}

/* Something in the folder that is not a FIFO (planted by someone who may
 * write a shared lock directory) is never written to. */
static void a_file_that_is_not_a_fifo_is_never_written(void **state)
{
    (void)state;
    struct local_waiter b;
    join(&b, false);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/.q/%s/0000000000000000-00000000-00000000.x", dir, FILE_NAME);
    int fd = open(path, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);
    local_queue_wake_next(dirfd_, FILE_NAME, 1);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(local_queue_drain(&b), 1);
    local_queue_leave(dirfd_, FILE_NAME, &b, 0);
}

/* A waiter that holds a wake-up it has not taken (stopped, or hung) stops
 * counting as ahead once LOCAL_STUCK_WAKE_MS have passed since it was
 * written; until then the one behind is told when to look again. The
 * FIFO's time is moved back rather than waited for. */
static void a_waiter_that_leaves_its_wake_up_unread_is_passed(void **state)
{
    (void)state;
    struct local_waiter a, b;
    int64_t look_again;
    join(&a, false);
    join(&b, false);
    assert_int_equal(local_queue_wake_next(dirfd_, FILE_NAME, 1), 2);
    assert_false(local_queue_is_first(dirfd_, FILE_NAME, &b, &look_again));
    assert_true(look_again > 0 && look_again <= LOCAL_STUCK_WAKE_MS);
    struct timespec old[2];
    assert_int_equal(clock_gettime(CLOCK_REALTIME, &old[0]), 0);
    old[0].tv_sec -= LOCAL_STUCK_WAKE_MS / 1000 + 1;
    old[1] = old[0];
    assert_int_equal(futimens(a.fd, old), 0);
    assert_true(local_queue_is_first(dirfd_, FILE_NAME, &b, &look_again));
    /* Taken at last: it counts again. */
    assert_int_equal(local_queue_drain(&a), 1);
    assert_false(local_queue_is_first(dirfd_, FILE_NAME, &b, &look_again));
    assert_int_equal(look_again, LOCAL_STUCK_WAKE_MS / 2);
    local_queue_leave(dirfd_, FILE_NAME, &a, 0);
    local_queue_leave(dirfd_, FILE_NAME, &b, 0);
    assert_int_equal(entries(), 0);
}

/* Fair mode's question: first among the live waiters, dead ones before
 * it passed over. */
static void the_first_live_waiter_is_first(void **state)
{
    (void)state;
    struct local_waiter dead, a, b;
    int64_t look_again;
    join(&dead, false);
    join(&a, false);
    join(&b, false);
    close(dead.fd);
    assert_true(local_queue_is_first(dirfd_, FILE_NAME, &a, &look_again));
    assert_false(local_queue_is_first(dirfd_, FILE_NAME, &b, &look_again));
    local_queue_leave(dirfd_, FILE_NAME, &a, 0);
    assert_true(local_queue_is_first(dirfd_, FILE_NAME, &b, &look_again));
    local_queue_leave(dirfd_, FILE_NAME, &b, 0);
    assert_int_equal(entries(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_release_wakes_the_first_waiter_only, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(two_wake_ups_taken_by_one_waiter_reach_two, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_waiter_that_does_not_read_does_not_hold_up_the_line, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_dead_waiter_is_passed_over_and_removed, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_reader_at_the_head_wakes_readers_up_to_the_first_writer, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_waiter_that_gives_up_hands_its_wake_up_on, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_file_that_is_not_a_fifo_is_never_written, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(the_first_live_waiter_is_first, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_waiter_that_leaves_its_wake_up_unread_is_passed, make_dir, remove_dir),
    };
    return cmocka_run_group_tests_name("local line of waiters", tests, NULL, NULL);
}
