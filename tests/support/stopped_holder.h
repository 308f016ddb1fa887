/* tests/support/stopped_holder.h - a holder that hangs: a child process
 * takes a lock and is then stopped (SIGSTOP), so its lease runs out on the
 * server while its sessions stay open, and it never lets go. */
#ifndef DLOCK_TEST_STOPPED_HOLDER_H
#define DLOCK_TEST_STOPPED_HOLDER_H

#include <dlock.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks a child that opens a client from config, takes name with the
 * options o (NULL: the defaults) and then waits; returns its pid once it
 * holds the lock and is stopped, or fails the test. */
static inline pid_t stopped_holder_start_with(const char *config, const char *name, const dlock_lock_options *o)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        dlock_client *c = NULL;
        dlock_lock *l = NULL;
        if (dlock_client_open_string(&c, config) != DLOCK_OK || dlock_lock_new(c, name, strlen(name), o, &l) != DLOCK_OK ||
            dlock_acquire(l, 0) != DLOCK_OK)
            _exit(3);
        if (write(ready[1], "H", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    close(ready[1]);
    char ch;
    ssize_t n = read(ready[0], &ch, 1);
    close(ready[0]);
    if (n != 1) {
        waitpid(pid, NULL, 0);
        fail_msg("the holder to be stopped could not take '%s'", name);
    }
    kill(pid, SIGSTOP);
    return pid;
}

/* The same, for an exclusive lock with lock_flags in its options. */
static inline pid_t stopped_holder_start(const char *config, const char *name, unsigned lock_flags)
{
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.flags = lock_flags;
    return stopped_holder_start_with(config, name, &o);
}

/* Ends the stopped holder (SIGKILL) and reaps it. */
static inline void stopped_holder_end(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

#endif
