/* backends/local/local_queue.h - the line of waiters of one lock file, so
 * that a release wakes the first waiter instead of all of them.
 *
 * Each waiter is a FIFO (named pipe) in the lock directory's ".q/<lock file
 * name>/" folder, named by its arrival time on CLOCK_MONOTONIC (one clock
 * for the whole host), so the folder read in name order is the line in
 * arrival order. The waiter keeps its FIFO open for reading and writing
 * while it waits; a release writes one byte into the first live one. A
 * waiter that died has no open end left, which an open for writing without
 * blocking reports (ENXIO): the releaser removes it and goes on to the next.
 *
 * Who is woken by one wake_next: the first waiter; when that one wants a
 * shared hold, every waiter up to and including the first exclusive one
 * (readers share, and a reader may be kept out by the writer behind it,
 * which then has to be woken as well).
 *
 * Nothing here keeps a lost wake-up from happening on its own: a waiter
 * joins before it looks at the lock a second time (local.c), and leaves
 * with local_queue_leave, which hands a wake-up it can no longer use to the
 * next waiter. */
#ifndef DLOCK_BACKEND_LOCAL_QUEUE_H
#define DLOCK_BACKEND_LOCAL_QUEUE_H

#include "../common/line.h"

#include <stdbool.h>
#include <stdint.h>

/* A waiter's place in the line; all zero is "not in the line". */
struct local_waiter {
    struct line_place place; /* LINE_ASKED while in the line (fd is valid), else LINE_OUT */
    int fd;          /* the FIFO, open for reading and writing */
    int wakes;       /* wake-ups taken out of the FIFO that no attempt has used yet;
                      * the owner takes one off when it makes an attempt */
    char entry[48];  /* its name in the folder */
};

/* Puts w at the end of the line of lock file FILE in the lock directory
 * dirfd (creating the folders as needed); shared: it waits for a shared
 * hold (its name says so, for the releaser). Returns 0, or -1 with errno set
 * (the folder cannot be written, FIFOs are not supported): the caller then
 * waits by polling. w must not be in a line. Not thread-safe for one w. */
int local_queue_join(int dirfd, const char *file, bool shared, struct local_waiter *w);

/* Takes w out of the line (no-op when it is not in one), and hands on up
 * to hand_on of the wake-ups that reached w and that w did not use, each
 * to a waiter of its own (a semaphore's releases free a permit each; for a
 * lock one is enough, and after an exclusive grant none is needed). */
void local_queue_leave(int dirfd, const char *file, struct local_waiter *w, int hand_on);

/* Empties w's FIFO after poll said it is readable: how many wake-ups it
 * held (0 or more), which are added to w->wakes. */
int local_queue_drain(struct local_waiter *w);

/* Wakes the first n live waiters of lock file FILE (see above for shared
 * ones), removing dead waiters it meets. A waiter whose FIFO still holds
 * an earlier wake-up (it is stopped, or slow) does not count: the one after
 * it is woken as well, so one stuck waiter cannot hold up the line.
 * Returns 0 when the line had no live waiter (which lets the caller
 * correct a count that dead waiters left too high), else a positive
 * number (how many it met before it stopped). Quiet about
 * failures: a waiter it could not wake finds the lock at its next retry. */
int local_queue_wake_next(int dirfd, const char *file, int n);

/* For a holder that wants to hear of requests (lock caching): adds to the
 * inotify instance ifd a watch of the folder of FILE's line in the lock
 * directory dir (opened as dirfd), made first if need be, for the names
 * that appear in it: every request that finds the lock busy joins the
 * line, a try included. The watch descriptor, or -1 with errno set. */
int local_queue_watch(int ifd, int dirfd, const char *dir, const char *file);

/* Whether a live waiter is in FILE's line (dead ones met are removed;
 * one still joining is not counted: its joining is seen by the watch of
 * local_queue_watch). False when there is no folder, or it cannot be
 * read. */
bool local_queue_anyone(int dirfd, const char *file);

/* The name a waiter's FIFO has in the line's folder while it joins, and
 * after: whether NAME (from an inotify event) is w's. */
bool local_queue_is_own(const char *name, const char *entry);

/* How long a waiter may leave a wake-up unread in its FIFO before the
 * waiters behind it stop counting it as ahead of them in fair mode. A
 * waiter that polls takes a wake-up at once, so one left this long
 * belongs to a process that is stopped or hung. */
#define LOCAL_STUCK_WAKE_MS 2000

/* Whether w is first among the live waiters of the line (dead ones it
 * meets before w are removed): for fair mode, where only the first may
 * look. A waiter ahead whose FIFO has held a wake-up for
 * LOCAL_STUCK_WAKE_MS or longer does not count. When w is not first,
 * *look_again_ms gets when to look again: when the wake-up of the waiter
 * ahead gets that old, or half of LOCAL_STUCK_WAKE_MS when it holds none
 * (a release that wakes a stopped waiter wakes nobody else); else -1.
 * True when the folder cannot be read (the caller then looks, as without a
 * line). */
bool local_queue_is_first(int dirfd, const char *file, const struct local_waiter *w, int64_t *look_again_ms);

#endif
