/* tests/backends/local/test_local.c - the local backend with real processes: two
 * processes contend; a holder killed with SIGKILL frees the lock at once;
 * two clients of one process exclude each other; fences increase across
 * holders; names cannot escape the lock directory or collide; status; a fixed
 * lease expires and frees the kernel lock; 10,000 cycles leak no fds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlock.h>
#include "../../conformance/conformance.h"
#include "../../support/temp_dir.h"
#include "../../support/test_client.h"
#include "../../support/test_time.h"
#include "../../support/waiters.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

static int make_dir(void **state)
{
    (void)state;
    return temp_dir_make(dir, sizeof dir, "local");
}

static int remove_dir(void **state)
{
    (void)state;
    return temp_dir_remove(dir);
}

/* retry_base/cap are huge so that a prompt hand-off can only come from the
 * native wait (inotify), never from a lucky backoff. */
static dlock_client *open_local_with(const char *more)
{
    char text[512];
    snprintf(text, sizeof text,
             "backend = \"local\";\nretry_base_ms = 10000;\nretry_cap_ms = 10000;\n"
             "local = { dir = \"%s\"; };\n%s", dir, more);
    dlock_client *c;
    int rc = dlock_client_open_string(&c, text);
    if (rc != DLOCK_OK)
        fail_msg("open: %s", dlock_errmsg());
    return c;
}

static dlock_client *open_local(void)
{
    return open_local_with("");
}

static dlock_lock *lock_of(dlock_client *c, const char *name, int64_t lease_ms)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, name, strlen(name), &o, &l), DLOCK_OK);
    return l;
}

/* Forks a child that opens its own client, takes NAME, writes 'H' to the
 * pipe, then sleeps until killed or hold_ms passes, releases, and writes
 * the monotonic time (ms, an int64_t) at which its release returned. */
static pid_t child_holding(const char *name, int64_t hold_ms, int *ready_fd)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        dlock_client *c = open_local();
        dlock_lock *l = lock_of(c, name, 0);
        if (dlock_acquire(l, 5000) != DLOCK_OK)
            _exit(3);
        if (write(p[1], "H", 1) != 1)
            _exit(4);
        struct timespec ts = { hold_ms / 1000, (hold_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        int rc = dlock_release(l);
        int64_t released_at = now_ms();
        if (write(p[1], &released_at, sizeof released_at) != sizeof released_at)
            _exit(4);
        dlock_lock_free(l);
        dlock_client_close(c);
        _exit(rc == DLOCK_OK ? 0 : 5);
    }
    close(p[1]);
    char b;
    assert_int_equal(read(p[0], &b, 1), 1);
    *ready_fd = p[0];
    return pid;
}

static void two_processes_contend(void **state)
{
    (void)state;
    int fd;
    /* Long enough (with the build's slack) that the child still holds
     * when this process has opened its client. */
    int64_t hold = slack_ms(300);
    pid_t pid = child_holding("shared", hold, &fd);
    dlock_client *c = open_local();
    dlock_lock *l = lock_of(c, "shared", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(l, 5000), DLOCK_OK); /* after the child releases */
    int64_t granted_at = now_ms();
    int64_t released_at = 0;
    assert_int_equal(read(fd, &released_at, sizeof released_at), sizeof released_at);
    /* The child holds for `hold`, and its release wakes us at once: not at
     * the next retry of a backoff, which grows towards a second. */
    assert_true(granted_at - t0 >= hold / 2);
    if (granted_at - released_at > slack_ms(100))
        fail_msg("granted %lld ms after the child's release returned", (long long)(granted_at - released_at));
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    close(fd);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* When the child died: the moment it became a zombie (SIGCHLD), which the
 * kernel marks only after it has closed the child's files and so freed its
 * locks. A process under valgrind or a sanitizer can take a second to die
 * after SIGKILL (its big shadow memory is unmapped first), so a wake-up is
 * timed from here, not from the kill. A signal handler and not a thread:
 * the cases after this one fork, which TSan wants done with no thread ever
 * started. */
static volatile int64_t child_died_ms = -1;

static void note_child_death(int sig)
{
    (void)sig;
    child_died_ms = now_ms();
}

static void killed_holder_frees_the_lock_at_once(void **state)
{
    (void)state;
    int fd;
    pid_t pid = child_holding("victim", 60000, &fd);
    dlock_client *c = open_local();
    dlock_lock *l = lock_of(c, "victim", 0);
    assert_int_equal(dlock_acquire(l, 100), DLOCK_ETIMEDOUT);
    /* A struct left uninitialised (version 0), or of a version this
     * library does not know, is refused and left as it was. */
    dlock_status_info bad;
    memset(&bad, 0x5a, sizeof bad);
    bad.version = 0;
    assert_int_equal(dlock_status(c, "victim", 6, &bad), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(), "DLOCK_STATUS_INFO_INIT"));
    bad.version = DLOCK_STATUS_INFO_VERSION + 1;
    assert_int_equal(dlock_status(c, "victim", 6, &bad), DLOCK_EINVAL);
    assert_int_equal(bad.held, 0x5a5a5a5a);
    dlock_status_info info = DLOCK_STATUS_INFO_INIT;
    assert_int_equal(dlock_status(c, "victim", 6, &info), DLOCK_OK);
    assert_int_equal(info.version, DLOCK_STATUS_INFO_VERSION);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.holder_pid, pid);
    struct sigaction on_child = { .sa_handler = note_child_death, .sa_flags = SA_RESTART }, before;
    sigemptyset(&on_child.sa_mask);
    child_died_ms = -1;
    assert_int_equal(sigaction(SIGCHLD, &on_child, &before), 0);
    kill(pid, SIGKILL);
    assert_int_equal(dlock_acquire(l, 5000), DLOCK_OK);
    int64_t granted_ms = now_ms();
    int status;
    waitpid(pid, &status, 0);
    assert_int_equal(sigaction(SIGCHLD, &before, NULL), 0);
    /* The kernel frees it when the process dies (no lease to wait out), and
     * the close wakes the waiter at once. */
    assert_true(child_died_ms > 0);
    assert_true(granted_ms - child_died_ms < slack_ms(200));
    assert_true(WIFSIGNALED(status));
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_status(c, "victim", 6, &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    close(fd);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void two_clients_of_one_process_exclude_each_other(void **state)
{
    (void)state;
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock *la = lock_of(a, "x", 0), *lb = lock_of(b, "x", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A child forked now, while this process has no threads of ours yet (after
 * fork() a multi-threaded parent's child may only exec or call
 * async-signal-safe functions; ASan's allocator deadlocks otherwise), that
 * takes and releases NAME once when told to. */
struct deferred_child {
    pid_t pid;
    int go_fd;
};

static struct deferred_child fork_deferred_holder(const char *name)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[1]);
        char go;
        if (read(p[0], &go, 1) != 1)
            _exit(2);
        dlock_client *c = open_local();
        dlock_lock *l = lock_of(c, name, 0);
        int rc = dlock_acquire(l, 5000);
        if (rc == DLOCK_OK)
            rc = dlock_release(l);
        dlock_lock_free(l);
        dlock_client_close(c);
        _exit(rc == DLOCK_OK ? 0 : 3);
    }
    close(p[0]);
    struct deferred_child child = { pid, p[1] };
    return child;
}

static void run_deferred(struct deferred_child *child)
{
    assert_int_equal(write(child->go_fd, "G", 1), 1);
    close(child->go_fd);
    int status;
    waitpid(child->pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The lock directory is emptied (a reboot of a tmpfs /tmp): the new file's
 * tokens must still be above every token the old one issued. */
static void fences_keep_growing_when_the_lock_file_is_gone(void **state)
{
    (void)state;
    dlock_client *c = open_local();
    dlock_lock *l = lock_of(c, "reboot", 0);
    uint64_t before = 0, after = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(dlock_fence(l, &before), DLOCK_OK);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    dlock_lock_free(l);
    dlock_client_close(c);
    char path[512];
    snprintf(path, sizeof path, "%s/reboot.lock", dir);
    assert_int_equal(unlink(path), 0);
    c = open_local();
    l = lock_of(c, "reboot", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_fence(l, &after), DLOCK_OK);
    if (after <= before)
        fail_msg("token %llu after the file was lost, %llu before", (unsigned long long)after,
                 (unsigned long long)before);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static void fences_increase_across_holders(void **state)
{
    (void)state;
    struct deferred_child other_process = fork_deferred_holder("fenced");
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock *la = lock_of(a, "fenced", 0), *lb = lock_of(b, "fenced", 0);
    uint64_t last = 0, f;
    for (int i = 0; i < 20; i++) {
        dlock_lock *l = i % 2 ? la : lb;
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* reentry keeps the fence */
        assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
        assert_true(f > last);
        last = f;
        dlock_release(l);
        assert_int_equal(dlock_fence(l, &f), DLOCK_OK);
        assert_int_equal(f, last);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    /* In another process too. */
    run_deferred(&other_process);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_fence(la, &f), DLOCK_OK);
    assert_int_equal(f, last + 2);
    dlock_release(la);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static int count_entries(const char *path, int *subdirs)
{
    DIR *d = opendir(path);
    int n = 0;
    *subdirs = 0;
    if (!d)
        return 0; /* not made yet */
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        n++;
        if (ent->d_type == DT_DIR)
            (*subdirs)++;
    }
    closedir(d);
    return n;
}

static void names_stay_inside_the_directory_and_apart(void **state)
{
    (void)state;
    char longest[DLOCK_NAME_MAX + 1], longest2[DLOCK_NAME_MAX + 1];
    memset(longest, '/', DLOCK_NAME_MAX);
    longest[DLOCK_NAME_MAX] = 0;
    memcpy(longest2, longest, sizeof longest);
    longest2[DLOCK_NAME_MAX - 1] = '.'; /* differs only at the end */
    const char *names[] = { "a/b", "../escape", ".", "..", ".hidden", "x.lock", "x%2Flock", "with space",
                            "ключ", "semi;colon'quote\"", "a%2Fb", longest, longest2 };
    size_t n = sizeof names / sizeof names[0];
    dlock_client *c = open_local(), *other = open_local();
    dlock_lock *held[16];
    for (size_t i = 0; i < n; i++) {
        held[i] = lock_of(c, names[i], 0);
        assert_int_equal(dlock_acquire(held[i], 0), DLOCK_OK);
    }
    int subdirs;
    assert_int_equal(count_entries(dir, &subdirs), (int)n); /* one file each, no collisions */
    assert_int_equal(subdirs, 0);
    struct stat st;
    assert_int_not_equal(stat("/tmp/escape.lock", &st), 0);
    for (size_t i = 0; i < n; i++) {
        dlock_lock *o = lock_of(other, names[i], 0);
        assert_int_equal(dlock_acquire(o, 0), DLOCK_EBUSY);
        dlock_lock_free(o);
        assert_int_equal(dlock_release(held[i]), DLOCK_OK);
        dlock_lock_free(held[i]);
    }
    dlock_client_close(c);
    dlock_client_close(other);
}

static void fixed_lease_expiry_frees_the_kernel_lock(void **state)
{
    (void)state;
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock *la = lock_of(a, "leased", 100), *lb = lock_of(b, "leased", 0);
    /* From before the grant: the lease runs from there, and a slow busy
     * answer in between (a sanitizer) must not look like an early expiry. */
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_acquire(lb, 2000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    assert_true(took >= 80 && took < slack_ms(300)); /* the 100 ms lease, with a sanitizer's slack */
    assert_int_equal(dlock_release(la), DLOCK_ELOST);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* Two processes taking turns on one lock many times: every hand-off must
 * come from the release notification. The retry cap is 10 s, so one missed
 * wake-up (or a second look that took the lock and still answered busy, as
 * a bug once did) shows as a wait of seconds. The random pause before each
 * acquire makes first looks land anywhere in the other's hold, including the
 * moment just before its release. */
static void random_pause(unsigned *seed)
{
    struct timespec ts = { 0, (long)(rand_r(seed) % 1500) * 1000L };
    nanosleep(&ts, NULL);
}

static void hand_offs_between_processes_are_never_missed(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dlock_client *c = open_local();
        dlock_lock *l = lock_of(c, "turns", 0);
        int64_t worst = 0;
        unsigned seed = 7;
        for (int i = 0; i < 300; i++) {
            random_pause(&seed);
            int64_t t0 = now_ms();
            if (dlock_acquire(l, 20000) != DLOCK_OK)
                _exit(2);
            worst = now_ms() - t0 > worst ? now_ms() - t0 : worst;
            sleep_ms(1);
            dlock_release(l);
        }
        ssize_t ignored = write(p[1], &worst, sizeof worst);
        (void)ignored;
        /* Closed before the exit: valgrind checks the child's heap too. */
        dlock_lock_free(l);
        dlock_client_close(c);
        _exit(0);
    }
    close(p[1]);
    dlock_client *c = open_local();
    dlock_lock *l = lock_of(c, "turns", 0);
    int64_t worst = 0;
    unsigned seed = 11;
    for (int i = 0; i < 300; i++) {
        random_pause(&seed);
        int64_t t0 = now_ms();
        assert_int_equal(dlock_acquire(l, 20000), DLOCK_OK);
        worst = now_ms() - t0 > worst ? now_ms() - t0 : worst;
        sleep_ms(1);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    int64_t child_worst = -1;
    assert_int_equal(read(p[0], &child_worst, sizeof child_worst), (ssize_t)sizeof child_worst);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(worst < slack_ms(500));
    assert_true(child_worst >= 0 && child_worst < slack_ms(500));
    close(p[0]);
    dlock_lock_free(l);
    dlock_client_close(c);
}

static int open_fds(void)
{
    int subdirs;
    return count_entries("/proc/self/fd", &subdirs);
}

static void many_cycles_leak_no_descriptors(void **state)
{
    (void)state;
    dlock_client *c = open_local();
    char name[32];
    for (int i = 0; i < 100; i++) { /* warm up: thread, eventfd */
        dlock_lock *l = lock_of(c, "cycle", 0);
        dlock_acquire(l, 0);
        dlock_release(l);
        dlock_lock_free(l);
    }
    int fds = open_fds();
    for (int i = 0; i < 10000; i++) {
        snprintf(name, sizeof name, "cycle-%d", i % 50);
        dlock_lock *l = lock_of(c, name, 0);
        assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        dlock_lock_free(l);
    }
    assert_int_equal(open_fds(), fds);
    dlock_client_close(c);
}

static void unusable_directories_are_clear_errors(void **state)
{
    (void)state;
    dlock_client *c;
    assert_int_equal(dlock_client_open_string(&c, "local = { dir = \"/proc/no/such\"; };"), DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), "cannot create lock directory /proc/no"));
    /* The default directory must be private: a world-writable one is refused. */
    char tmp[300], def[400];
    snprintf(tmp, sizeof tmp, "%s/tmpdir", dir);
    mkdir(tmp, 0700);
    snprintf(def, sizeof def, "%s/dlock-%ld", tmp, (long)getuid());
    mkdir(def, 0777);
    chmod(def, 0777);
    char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    setenv("TMPDIR", tmp, 1);
    assert_int_equal(dlock_client_open(&c, NULL), DLOCK_EUNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), "closed to others"));
    chmod(def, 0700);
    assert_int_equal(dlock_client_open(&c, NULL), DLOCK_OK);
    dlock_client_close(c);
    if (saved) {
        setenv("TMPDIR", saved, 1);
        free(saved);
    } else {
        unsetenv("TMPDIR");
    }
    rmdir(def);
    rmdir(tmp);
}


/* The default directory is a symbolic link someone planted (to a directory
 * that passes the owner and mode checks): refused, never followed, since a
 * link swapped later would split processes across two directories. */
static void default_directory_through_a_symlink_is_refused(void **state)
{
    (void)state;
    char tmp[300], def[400], target[400];
    snprintf(tmp, sizeof tmp, "%s/tmpdir", dir);
    mkdir(tmp, 0700);
    snprintf(target, sizeof target, "%s/elsewhere", dir);
    mkdir(target, 0700);
    snprintf(def, sizeof def, "%s/dlock-%ld", tmp, (long)getuid());
    assert_int_equal(symlink(target, def), 0);
    char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    setenv("TMPDIR", tmp, 1);
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, NULL);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_errmsg());
    if (saved) {
        setenv("TMPDIR", saved, 1);
        free(saved);
    } else {
        unsetenv("TMPDIR");
    }
    if (rc == DLOCK_OK)
        dlock_client_close(c);
    unlink(def);
    rmdir(target);
    rmdir(tmp);
    assert_int_equal(rc, DLOCK_EUNAVAILABLE);
    if (!strstr(why, "symbolic link"))
        fail_msg("not refused for the link: %s", why);
}

/* A name held exclusively cannot be taken as a semaphore meanwhile: the
 * exclusive hold keeps out the permit bytes too. */
static void an_exclusive_hold_keeps_permits_out(void **state)
{
    (void)state;
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock *x = lock_of(a, "both", 0);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = DLOCK_MODE_SEMAPHORE;
    o.permits = 2;
    dlock_lock *permit;
    assert_int_equal(dlock_lock_new(b, "both", 4, &o, &permit), DLOCK_OK);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(permit, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_acquire(permit, 0), DLOCK_OK);
    assert_int_equal(dlock_release(permit), DLOCK_OK);
    dlock_lock_free(permit);
    dlock_lock_free(x);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A reader waiting behind an exclusive hold is woken by the release, not
 * by polling: counted in attempts, a few, not one per 25 ms step. */
static void a_reader_behind_a_writer_waits_on_a_watch(void **state)
{
    (void)state;
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock *x = lock_of(a, "watched", 0);
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.mode = DLOCK_MODE_SHARED;
    dlock_lock *reader;
    assert_int_equal(dlock_lock_new(b, "watched", 7, &o, &reader), DLOCK_OK);
    assert_int_equal(dlock_acquire(x, 0), DLOCK_OK);
    long long before = test_client_metric(b, "dlock_acquire_attempts_total");
    assert_int_equal(dlock_acquire(reader, 400), DLOCK_ETIMEDOUT);
    long long polls = test_client_metric(b, "dlock_acquire_attempts_total") - before;
    if (polls > 4)
        fail_msg("a reader waiting 400 ms behind an exclusive hold made %lld attempts", polls);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_lock_free(reader);
    dlock_lock_free(x);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A handle that gave up waiting keeps no inotify instance (128 per user). */
static void timed_out_waiters_keep_no_inotify_instance(void **state)
{
    (void)state;
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock *held = lock_of(a, "watched", 0);
    assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
    int fds = open_fds();
    dlock_lock *w[40];
    for (int i = 0; i < 40; i++) {
        w[i] = lock_of(b, "watched", 0);
        assert_int_equal(dlock_acquire(w[i], 5), DLOCK_ETIMEDOUT);
    }
    assert_true(open_fds() <= fds + 1); /* the lock file's descriptor at most */
    for (int i = 0; i < 40; i++)
        dlock_lock_free(w[i]);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    dlock_lock_free(held);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* The holder forks a child (that does not exec) and is killed: the child's
 * copy of the descriptor must not keep the lock. */
static void forked_child_does_not_keep_a_killed_holders_lock(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        close(p[0]);
        dlock_client *c = open_local();
        dlock_lock *l = lock_of(c, "forked", 0);
        if (dlock_acquire(l, 5000) != DLOCK_OK)
            _exit(3);
        pid_t grandchild = fork();
        if (grandchild == 0) {
            sleep(30); /* a worker that outlives its parent */
            _exit(0);
        }
        char msg[16];
        int n = snprintf(msg, sizeof msg, "%ld\n", (long)grandchild);
        if (write(p[1], msg, (size_t)n) != n)
            _exit(4);
        pause();
        _exit(0);
    }
    close(p[1]);
    char buf[32] = { 0 };
    assert_true(read(p[0], buf, sizeof buf - 1) > 0);
    close(p[0]);
    pid_t grandchild = (pid_t)atol(buf);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    dlock_client *c = open_local();
    dlock_lock *l = lock_of(c, "forked", 0);
    int rc = dlock_acquire(l, 1000);
    kill(grandchild, SIGKILL);
    if (rc == DLOCK_OK)
        dlock_release(l);
    dlock_lock_free(l);
    dlock_client_close(c);
    assert_int_equal(rc, DLOCK_OK);
}

static void foreign_file_is_not_trampled(void **state)
{
    (void)state;
    char path[400];
    snprintf(path, sizeof path, "%s/foreign.lock", dir);
    FILE *f = fopen(path, "w");
    fputs("this is somebody else's file, keep it\n", f);
    fclose(f);
    dlock_client *c = open_local();
    dlock_lock *l = lock_of(c, "foreign", 0);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EPROTOCOL);
    assert_non_null(strstr(dlock_errmsg(), "not a libdlock lock file"));
    assert_int_equal(dlock_hold_count(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* IN_ATTRIB events (a release's touch) on NAME's lock file since the last call. */
struct timed_waiter {
    dlock_lock *lock;
    int rc;
    int64_t granted_at;
};

static void *wait_and_take(void *arg)
{
    struct timed_waiter *w = arg;
    w->rc = dlock_acquire(w->lock, 8000);
    w->granted_at = now_ms();
    if (w->rc == DLOCK_OK)
        dlock_release(w->lock);
    return NULL;
}

/* inotify events of the kinds in mask that are waiting on inotify_fd. */
static int events_of(int inotify_fd, uint32_t mask)
{
    char buf[4096];
    int n = 0;
    ssize_t got;
    while ((got = read(inotify_fd, buf, sizeof buf)) > 0) {
        for (char *p = buf; p < buf + got;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            if (ev->mask & mask)
                n++;
            p += sizeof *ev + ev->len;
        }
    }
    return n;
}

/* A release looks at the line of waiters only when someone waits, so
 * uncontended cycles cost nothing more than the unlock; with a waiter it
 * wakes it through its place in the line, without touching the lock file
 * (whose watch every waiter has: a touch would wake them all), and the
 * waiter is granted at once (its client would otherwise look again only
 * after 10 s). */
static void releases_look_at_the_line_only_when_someone_waits(void **state)
{
    (void)state;
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock *la = lock_of(a, "touch", 0), *lb = lock_of(b, "touch", 0);
    /* One contended round first, so that the line's folder exists. */
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 50), DLOCK_ETIMEDOUT);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    char file[400], line[400];
    snprintf(file, sizeof file, "%s/touch.lock", dir);
    snprintf(line, sizeof line, "%s/.q/touch.lock", dir);
    int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    assert_true(in >= 0);
    assert_true(inotify_add_watch(in, file, IN_ATTRIB) >= 0);
    int in_line = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    assert_true(in_line >= 0);
    assert_true(inotify_add_watch(in_line, line, IN_OPEN) >= 0);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
        assert_int_equal(dlock_release(la), DLOCK_OK);
    }
    assert_int_equal(events_of(in, IN_ATTRIB), 0);
    assert_int_equal(events_of(in_line, IN_OPEN), 0);

    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    struct timed_waiter w = { lb, -1, 0 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_and_take, &w), 0);
    int64_t t0 = now_ms();
    while (test_client_metric(b, "dlock_busy_total") < 2 && now_ms() - t0 < 5000)
        sleep_ms(2);
    sleep_ms(20); /* past its busy answer, into its wait */
    events_of(in_line, IN_OPEN); /* its own joining */
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.granted_at - released_at < slack_ms(1000));
    assert_int_equal(events_of(in, IN_ATTRIB), 0);
    assert_true(events_of(in_line, IN_OPEN) >= 1);
    close(in);
    close(in_line);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* Waiters are woken in the order they came, one per release: three
 * waiters, each in the line before the next, each granted only after the
 * one before it released, and granted in that order. */
struct turn_waiter {
    dlock_lock *lock;
    int *turns;
    int turn;
};

static void *take_a_turn(void *arg)
{
    struct turn_waiter *w = arg;
    if (dlock_acquire(w->lock, 20000) == DLOCK_OK) {
        __atomic_store_n(&w->turn, __atomic_fetch_add(w->turns, 1, __ATOMIC_SEQ_CST), __ATOMIC_SEQ_CST);
        sleep_ms(30);
        dlock_release(w->lock);
    }
    return NULL;
}

static void waiters_are_woken_in_the_order_they_came(void **state)
{
    (void)state;
    dlock_client *a = open_local();
    dlock_lock *la = lock_of(a, "turns-in-order", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    enum { N = 3 };
    dlock_client *c[N];
    struct turn_waiter w[N];
    pthread_t t[N];
    int turns = 0;
    for (int i = 0; i < N; i++) {
        c[i] = open_local();
        w[i] = (struct turn_waiter){ lock_of(c[i], "turns-in-order", 0), &turns, -1 };
        assert_int_equal(pthread_create(&t[i], NULL, take_a_turn, &w[i]), 0);
        int64_t t0 = now_ms();
        while (test_client_metric(c[i], "dlock_busy_total") < 1 && now_ms() - t0 < 5000)
            sleep_ms(2);
        sleep_ms(20);
    }
    assert_int_equal(dlock_release(la), DLOCK_OK);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        assert_int_equal(w[i].turn, i);
        /* One busy answer and one grant each: no waiter was woken for
         * nothing while another one held. */
        assert_int_equal(test_client_metric(c[i], "dlock_acquire_attempts_total"), 2);
        dlock_lock_free(w[i].lock);
        dlock_client_close(c[i]);
    }
    dlock_lock_free(la);
    dlock_client_close(a);
}

/* A waiter that dies in the line is passed over at the next release, and
 * its FIFO is removed. */
static void a_dead_waiter_is_passed_over_and_removed(void **state)
{
    (void)state;
    /* Forked before this process has a client (and its threads); it
     * starts waiting when told. */
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(go[1]);
        close(ready[0]);
        char ch;
        if (read(go[0], &ch, 1) != 1)
            _exit(2);
        dlock_client *c = open_local();
        dlock_lock *l = lock_of(c, "dead-in-line", 0);
        if (dlock_acquire(l, 0) != DLOCK_EBUSY)
            _exit(3);
        if (write(ready[1], "R", 1) != 1)
            _exit(4);
        dlock_acquire(l, -1);
        _exit(0);
    }
    close(go[0]);
    close(ready[1]);
    dlock_client *a = open_local();
    dlock_lock *la = lock_of(a, "dead-in-line", 0);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(write(go[1], "G", 1), 1);
    close(go[1]);
    char ch;
    assert_int_equal(read(ready[0], &ch, 1), 1);
    close(ready[0]);
    char line[400];
    snprintf(line, sizeof line, "%s/.q/dead-in-line.lock", dir);
    int64_t t0 = now_ms();
    int subdirs;
    while (count_entries(line, &subdirs) < 1 && now_ms() - t0 < 5000)
        sleep_ms(2);
    assert_int_equal(count_entries(line, &subdirs), 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dlock_client *b = open_local();
    struct timed_waiter w = { lock_of(b, "dead-in-line", 0), -1, 0 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_and_take, &w), 0);
    t0 = now_ms();
    while (test_client_metric(b, "dlock_busy_total") < 1 && now_ms() - t0 < 5000)
        sleep_ms(2);
    /* Until b waits: its look after joining the line is made (a release
     * before it would let that look take the name, passing over nobody). */
    sleep_ms(slack_ms(100));
    assert_int_equal(count_entries(line, &subdirs), 2);
    int64_t released_at = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.granted_at - released_at < slack_ms(1000));
    assert_int_equal(count_entries(line, &subdirs), 0); /* the dead one's removed, the granted one left */
    assert_int_equal(test_client_metric(b, "dlock_acquire_attempts_total"), 2);
    dlock_lock_free(la);
    dlock_lock_free(w.lock);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* Forks a child that, once told (*go), opens its own client, finds NAME
 * busy in fair mode (and so joins the line), says so (*ready), waits up to
 * wait_ms for it, says it was granted (*done, when not NULL) and releases.
 * Its exit status is 0 when all went so. */
static pid_t fork_fair_waiter(const char *name, int64_t wait_ms, int *go, int *ready, int *done)
{
    int g[2], r[2], d[2] = { -1, -1 };
    assert_int_equal(pipe(g), 0);
    assert_int_equal(pipe(r), 0);
    if (done)
        assert_int_equal(pipe(d), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(g[1]);
        close(r[0]);
        if (done)
            close(d[0]);
        char ch;
        if (read(g[0], &ch, 1) != 1)
            _exit(2);
        dlock_client *c = open_local();
        dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
        o.flags = DLOCK_LOCK_FAIR;
        dlock_lock *l;
        if (dlock_lock_new(c, name, strlen(name), &o, &l) != DLOCK_OK || dlock_acquire(l, 0) != DLOCK_EBUSY)
            _exit(3);
        if (write(r[1], "R", 1) != 1)
            _exit(4);
        if (dlock_acquire(l, wait_ms) != DLOCK_OK)
            _exit(5);
        if (done && write(d[1], "D", 1) != 1)
            _exit(6);
        dlock_release(l);
        dlock_lock_free(l);
        dlock_client_close(c);
        _exit(0);
    }
    close(g[0]);
    close(r[1]);
    *go = g[1];
    *ready = r[0];
    if (done) {
        close(d[1]);
        *done = d[0];
    }
    return pid;
}

/* Fair mode: a waiter at the head of the line that is stopped (SIGSTOP)
 * when the release wakes it keeps the lock free, and the fair waiters
 * behind it out, only for LOCAL_STUCK_WAKE_MS (2 s): then the next one
 * looks out of turn. Before, it held the line for as long as it lived. */
static void a_stopped_head_of_a_fair_line_is_passed_within_3_s(void **state)
{
    (void)state;
    int go, ready;
    pid_t pid = fork_fair_waiter("fair-stuck", 30000, &go, &ready, NULL);
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    dlock_lock *la, *lb;
    assert_int_equal(dlock_lock_new(a, "fair-stuck", 10, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(b, "fair-stuck", 10, &o, &lb), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(write(go, "G", 1), 1);
    char ch;
    assert_int_equal(read(ready, &ch, 1), 1);
    sleep_ms(100); /* into its wait, in the line */
    struct timed_waiter t = { lb, -1, 0 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_and_take, &t), 0);
    sleep_ms(200); /* the second waiter is in the line, behind the first */
    kill(pid, SIGSTOP);
    int64_t released = now_ms();
    assert_int_equal(dlock_release(la), DLOCK_OK);
    pthread_join(th, NULL);
    int64_t took = t.granted_at - released;
    kill(pid, SIGCONT);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* granted too, after it went on */
    if (t.rc != DLOCK_OK || took < 1500 || took > 2000 + slack_ms(1500))
        fail_msg("the waiter behind a stopped head: %s after %lld ms (wanted 2 s)", dlock_strerror(t.rc),
                 (long long)took);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_close(a);
    dlock_client_close(b);
    close(go);
    close(ready);
}

/* Fair mode: a request that comes while the lock is free between two
 * holds does not take it ahead of a waiter in the line. The waiter is
 * stopped (SIGSTOP) across the release, so the lock is still free when the
 * newcomer tries; without fair mode the newcomer would take it. */
static void fair_mode_keeps_a_newcomer_behind_the_line(void **state)
{
    (void)state;
    int go, ready, done;
    pid_t pid = fork_fair_waiter("fair-line", 20000, &go, &ready, &done);
    dlock_client *a = open_local(), *b = open_local();
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = DLOCK_LOCK_FAIR;
    dlock_lock *la, *lb;
    assert_int_equal(dlock_lock_new(a, "fair-line", 9, &o, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(b, "fair-line", 9, &o, &lb), DLOCK_OK);
    assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
    assert_int_equal(write(go, "G", 1), 1);
    char ch;
    assert_int_equal(read(ready, &ch, 1), 1);
    sleep_ms(100); /* into its wait, in the line */
    kill(pid, SIGSTOP);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY); /* the stopped waiter's turn */
    kill(pid, SIGCONT);
    assert_int_equal(read(done, &ch, 1), 1); /* it was granted */
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(dlock_acquire(lb, 5000), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    o.mode = DLOCK_MODE_SHARED;
    dlock_lock *ls;
    assert_int_equal(dlock_lock_new(a, "fair-shared", 11, &o, &ls), DLOCK_OK);
    assert_int_equal(dlock_acquire(ls, 0), DLOCK_ENOTSUP);
    close(go);
    close(ready);
    close(done);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_lock_free(ls);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A client that keeps released holds for a minute unused. */
static dlock_client *open_caching(void)
{
    return open_local_with("cache = { idle_ms = 60000; cooldown_ms = 0; };\n");
}

/* A keeper that already watches the name waits for it behind another
 * holder, with a third client waiting behind it: the request of the
 * third joined the line while the keeper held nothing, so only a look at
 * the line when the keeper is granted shows it, and the hold is not kept
 * (kept, the third would wait for the idle limit, a minute). */
static void a_hold_granted_while_others_wait_is_not_kept(void **state)
{
    (void)state;
    dlock_client *a = open_caching(), *h = open_local(), *c = open_local();
    struct waiter wa = { .lock = test_lock_named(a, "queued-grant") };
    struct waiter wc = { .lock = test_lock_named(c, "queued-grant") };
    assert_int_equal(dlock_acquire(wa.lock, 0), DLOCK_OK);
    assert_int_equal(dlock_release(wa.lock), DLOCK_OK); /* kept: a watches the name now */
    assert_int_equal(test_client_metric(a, "dlock_cache_keeps_total"), 1);
    dlock_lock *lh = test_lock_named(h, "queued-grant");
    assert_int_equal(dlock_acquire(lh, 5000), DLOCK_OK); /* a gives it back */
    pthread_t ta, tc;
    start_waiter(&wa, &ta, a); /* queued first */
    start_waiter(&wc, &tc, c); /* then behind it */
    assert_int_equal(dlock_release(lh), DLOCK_OK);
    pthread_join(ta, NULL); /* a is granted and releases at once */
    int64_t a_done = now_ms();
    pthread_join(tc, NULL);
    assert_int_equal(wa.rc, DLOCK_OK);
    assert_int_equal(wc.rc, DLOCK_OK);
    if (wc.granted_at - a_done > slack_ms(2000))
        fail_msg("the waiter behind was granted %lld ms after the keeper's release",
                 (long long)(wc.granted_at - a_done));
    assert_int_equal(test_client_metric(a, "dlock_cache_keeps_total"), 1);
    dlock_lock_free(wa.lock);
    dlock_lock_free(wc.lock);
    dlock_lock_free(lh);
    dlock_client_close(a);
    dlock_client_close(c);
    dlock_client_close(h);
}

/* Waits until every inotify instance of this process has no event left
 * unread (the keepers' listeners have read them), then a moment for the
 * listener to tell the core of the last one it read. */
static void inotify_events_read(void)
{
    int64_t t0 = now_ms();
    for (;;) {
        int unread = 0;
        DIR *d = opendir("/proc/self/fd");
        assert_non_null(d);
        struct dirent *de;
        while ((de = readdir(d))) {
            char link[64], target[64] = "";
            snprintf(link, sizeof link, "/proc/self/fd/%s", de->d_name);
            ssize_t n = readlink(link, target, sizeof target - 1);
            int pending = 0;
            if (n > 0 && (target[n] = 0, strcmp(target, "anon_inode:inotify") == 0) &&
                ioctl(atoi(de->d_name), FIONREAD, &pending) == 0)
                unread += pending;
        }
        closedir(d);
        if (unread == 0 || now_ms() - t0 > 5000)
            break;
        sleep_ms(2);
    }
    sleep_ms(slack_ms(20));
}

/* FIFOs left in a name's line by waiters that died (one that had joined,
 * one killed while joining, under its hidden name) are nobody asking: the
 * name's holds are kept all the same. */
static void leftovers_of_dead_waiters_do_not_stop_keeping(void **state)
{
    (void)state;
    dlock_client *a = open_local_with("cache = { idle_ms = 100; cooldown_ms = 0; };\n");
    dlock_lock *l = test_lock_named(a, "leftovers");
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK); /* makes the lock file; watched from now on */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    int64_t t0 = now_ms();
    while (test_client_metric(a, "dlock_cache_givebacks_total") < 1 && now_ms() - t0 < 5000)
        sleep_ms(10); /* given back at the idle limit */
    char file[256] = "", path[1024];
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            snprintf(file, sizeof file, "%s", de->d_name);
    closedir(d);
    assert_true(file[0] != 0);
    snprintf(path, sizeof path, "%s/.q", dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/.q/%s", dir, file);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/.q/%s/00000000000000ff-00000001-00000001.x", dir, file);
    assert_int_equal(mkfifo(path, 0600), 0);
    snprintf(path, sizeof path, "%s/.q/%s/.00000000000000fe-00000001-00000002.x", dir, file);
    assert_int_equal(mkfifo(path, 0600), 0);
    /* Making them fired the folder's watch: a listener that told the core
     * only after the next attempt was sent would make that hold one asked
     * for, as any request then would. */
    inotify_events_read();
    /* A grant of the watched name looks at the line, */
    test_cycle_keeps(a, l, 2);
    dlock_lock_free(l);
    /* and so does a first watch. */
    l = test_lock_named(a, "leftovers");
    test_cycle_keeps(a, l, 3);
    dlock_lock_free(l);
    dlock_client_close(a);
}

static void conformance_config(char *buf, size_t size, int lease_ms, int retry_cap_ms)
{
    snprintf(buf, size,
             "backend = \"local\";\nlease_ms = %d;\nretry_base_ms = 5;\nretry_cap_ms = %d;\nlocal = { dir = \"%s\"; };\n",
             lease_ms, retry_cap_ms, dir);
}

int main(void)
{
    if (getenv("CMOCKA_FILTER")) /* one case by name */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(two_processes_contend, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(killed_holder_frees_the_lock_at_once, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(two_clients_of_one_process_exclude_each_other, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(fences_increase_across_holders, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(fences_keep_growing_when_the_lock_file_is_gone, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(names_stay_inside_the_directory_and_apart, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(fixed_lease_expiry_frees_the_kernel_lock, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(many_cycles_leak_no_descriptors, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(hand_offs_between_processes_are_never_missed, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(unusable_directories_are_clear_errors, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(foreign_file_is_not_trampled, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(releases_look_at_the_line_only_when_someone_waits, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(waiters_are_woken_in_the_order_they_came, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_dead_waiter_is_passed_over_and_removed, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(fair_mode_keeps_a_newcomer_behind_the_line, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_stopped_head_of_a_fair_line_is_passed_within_3_s, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(default_directory_through_a_symlink_is_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(an_exclusive_hold_keeps_permits_out, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_reader_behind_a_writer_waits_on_a_watch, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(timed_out_waiters_keep_no_inotify_instance, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(forked_child_does_not_keep_a_killed_holders_lock, make_dir, remove_dir),
    };
    /* After the cases that fork (a keeper has a thread of its own). */
    const struct CMUnitTest caching[] = {
        cmocka_unit_test_setup_teardown(a_hold_granted_while_others_wait_is_not_kept, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(leftovers_of_dead_waiters_do_not_stop_keeping, make_dir, remove_dir),
    };
    int failed = cmocka_run_group_tests_name("local", tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("local: lock caching", caching, NULL, NULL);
    /* The conformance suite after the cases that fork: a child forked once
     * this process has had library threads trips TSan's thread registry. */
    make_dir(NULL);
    static const struct conformance_target target = { "local conformance", conformance_config, NULL, NULL, 0, 1, 0, 0 };
    failed += conformance_run(&target);
    remove_dir(NULL);
    return failed ? 1 : 0;
}
