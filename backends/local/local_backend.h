/* backends/local/local_backend.h - what the files of the local backend
 * share: the instance and the per-lock state, and the lock file's
 * operations (local_file.c) that the lock operations (local.c) use. */
#ifndef DLOCK_BACKEND_LOCAL_BACKEND_H
#define DLOCK_BACKEND_LOCAL_BACKEND_H

#include "local_file.h"
#include "local_queue.h"

#include <dlock/provider.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct local_wanted;

struct local_instance {
    struct line_host line; /* first: the provider's acquire and wait are the line's */
    char dir[PATH_MAX];
    int dirfd;
    /* Lock caching (local_wanted.c): the core's "another owner asks", and
     * the watches of the watched names' lines, under wanted_mu. */
    void (*tell_wanted)(struct dlock_provider_lock *lk);
    pthread_mutex_t wanted_mu;
    struct local_wanted *wanted_list;
    int wanted_ifd;           /* the inotify instance + 1, once a name is watched */
    int wanted_stop_fd;       /* an eventfd + 1 that ends the listener */
    pthread_t wanted_thread;  /* reads wanted_ifd */
    bool wanted_thread_started;
};

struct local_lock {
    int fd;                   /* valid when fd_open */
    bool fd_open;
    bool held;
    bool turnstile;           /* an exclusive request holds the turnstile while it waits */
    int slot;                 /* a semaphore hold: the permit it has */
    struct lock_file_header *map; /* the header in memory while fd_open, or NULL */
    bool watching;            /* set up to wait (the line, the watch, the count) */
    int watch_fd;             /* inotify fd + 1 while contending, 0 if none */
    struct local_waiter waiter; /* the place in the line while contending */
    int64_t look_again_at;    /* fair mode: when a stuck waiter ahead stops counting
                               * (dlock_provider_now_ms), 0 for none */
    char file[NAME_MAX + 1];  /* the lock file's name in the directory, once it was opened */
    bool counted;             /* counted in the header's waiting */
    int park_fd;              /* epoll fd + 1 over the FIFO and the watch, for a parked wait; 0 if none */
    int parked_fifo, parked_watch; /* the descriptors an armed wait put in it, -1 for none */
    int parked_fifo_was, parked_watch_was; /* the same, kept by a disarm that goes on waiting */
    bool parked_look_again;   /* the armed wait ends at look_again_at, as if called */
    bool published;           /* this hold stored an election value (local_value.c) */
    struct local_lock *prev, *next; /* in open_files while fd_open */
    struct local_wanted *wanted;  /* while watched for requests (watch_wanted) */
};

/* Lock caching (local_wanted.c). local_wanted_watch watches lk's line
 * (lk held) and tells the core (inst->tell_wanted) of every request that
 * joins it, until local_wanted_unwatch. local_wanted_joined notes the
 * name of our own place in the line, just joined, whose event is not a
 * request of anyone else. local_wanted_granted, right after an exclusive
 * grant, tells of a live waiter already in the line. local_wanted_close
 * stops the listener and frees what is left. Thread-safe under
 * inst->wanted_mu; the listener has its own thread. */
int local_wanted_watch(struct local_instance *inst, struct dlock_provider_lock *lk);
void local_wanted_unwatch(struct local_instance *inst, struct dlock_provider_lock *lk);
void local_wanted_joined(struct local_instance *inst, struct local_lock *ll);
void local_wanted_granted(struct local_instance *inst, struct local_lock *ll);
void local_wanted_close(struct local_instance *inst);

/* Once per process: a child of fork() closes its copies of every lock file. */
void local_install_fork_handlers(void);

/* Adds ll, whose file is open, to the files a child of fork() closes. */
void local_track_open(struct local_lock *ll);

/* Closes ll's lock file and forgets it. */
void local_close_lock_file(struct local_lock *ll);

/* True for a hashed long file name (".hlock"), whose name follows the header. */
bool local_is_long_form(const char *file);

/* The header of an open lock file in memory, or NULL (then pread and
 * pwrite do). A new, empty file is first given its header's length; a file
 * with less than a header (damaged) is left as it is. */
struct lock_file_header *local_map_header(int fd);

/* Opens (creating it if missing) lk's lock file, once; maps its header. */
int local_open_lock_file(struct local_instance *inst, struct dlock_provider_lock *lk);

/* One non-blocking lock or unlock of len bytes at start (len 0: to the end
 * of the file, and beyond). Returns 0 and sets *busy (when given) to whether
 * another open file description holds a conflicting lock, or -1 on error. */
int local_set_range(int fd, short type, off_t start, off_t len, bool *busy);

/* The kind of lock another open file holds on byte at that a write lock
 * there would meet: F_RDLCK (a shared hold), F_WRLCK (an exclusive one),
 * F_UNLCK (none), or -1 with errno set. */
int local_lock_met_at(int fd, off_t at);

/* An exclusive hold's range (local_file.h). */
int local_set_lock(int fd, short type, bool *busy);

/* Reads the header of fd (name and dir for messages); a new, empty file
 * reads as all zero. */
int local_read_header(int fd, struct lock_file_header *h, const char *dir, const char *name);

/* Writes h as the header of fd. */
int local_write_header(int fd, const struct lock_file_header *h, const char *dir);

/* The first fence of a new file: the wall clock in microseconds, not 1.
 * The default directory is in /tmp, often a tmpfs that a reboot empties;
 * every token the old file issued was at most its own start plus one per
 * grant, below the clock now, so tokens keep growing across the loss (as
 * long as the clock does not go back), as a resource that kept the highest
 * one needs. */
uint64_t local_first_fence(void);

/* The mapped header is ours (or new, and made ours now), else an error. */
int local_header_is_ours(struct lock_file_header *h, const char *dir, const struct dlock_provider_lock *lk);

/* Raises the mapped fence and returns it: atomically, since shared and
 * semaphore holders grant at the same time. */
uint64_t local_raise_fence(struct lock_file_header *h);

/* A grant's bookkeeping in the mapped header, under the kernel lock: the
 * fence raised, the holder noted. The waiting count is not touched. */
int local_grant_in_memory(struct lock_file_header *h, const char *dir, const struct dlock_provider_lock *lk);

/* A lock name used as a semaphore, or the other way round: an error. */
int local_mode_mismatch(struct lock_file_header *h, const struct dlock_provider_lock *lk);

/* DLOCK_CTL_STATUS: from the kernel's locks and the header (local_list.c). */
int local_status(struct local_instance *inst, struct dlock_ctl_status *arg);
/* Elections (local_value.c): the provider's value_put, leader_get and
 * watch_*; local_value_withdraw deletes the value a hold published, just
 * before the hold lets go (which also tells the name's observers). */
int local_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len);
void local_value_withdraw(struct local_instance *inst, struct local_lock *ll);
int local_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out);
int local_watch_open(void *instance, const char *name, size_t name_len, void **watch, int *fd);
int local_watch_consume(void *instance, void *watch);
void local_watch_close(void *instance, void *watch);

#endif
