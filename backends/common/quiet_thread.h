/* backends/common/quiet_thread.h - starting a backend's own thread with
 * every signal blocked: the application's signals are for its threads,
 * and one delivered to a thread that waits in poll() or a client library
 * would interrupt work that is not the application's. */
#ifndef DLOCK_COMMON_QUIET_THREAD_H
#define DLOCK_COMMON_QUIET_THREAD_H

#include <pthread.h>
#include <signal.h>

/* pthread_create with every signal blocked in the new thread; the
 * caller's mask is as it was. 0, or pthread_create's error. */
static inline int quiet_thread_create(pthread_t *thread, void *(*run)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(thread, NULL, run, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err;
}

#endif
