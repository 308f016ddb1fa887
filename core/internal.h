/*
 * core/internal.h - declarations shared by the core's modules. Nothing here
 * is exported from libdlock.so: only symbols matching ^dlock_[a-z] are, and
 * every internal symbol is prefixed dlock__.
 */
#ifndef DLOCK_CORE_INTERNAL_H
#define DLOCK_CORE_INTERNAL_H

#include <dlock.h>
#include <dlock/provider.h>
#include <libconfig.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define DLOCK__INFINITE INT64_MAX

/* ---- errors.c ---------------------------------------------------------------- */
int dlock__seterrv(int code, const char *fmt, va_list ap);

/* ---- clock.c ----------------------------------------------------------------- */
/* Milliseconds on CLOCK_MONOTONIC; never the wall clock. For deadlines and
 * timers, which stop while the host is suspended. */
int64_t dlock__now_ms(void);
int64_t dlock__now_us(void);
/* Milliseconds on CLOCK_BOOTTIME, which counts suspended time too: every
 * validity (lease end) is measured on it, since servers keep expiring
 * leases while a client's host sleeps. */
int64_t dlock__boot_ms(void);
/* For tests only: makes dlock__boot_ms() run ms ahead of CLOCK_BOOTTIME, as
 * if the host had been suspended that long. */
void dlock__clock_test_suspend(int64_t ms);
/* Adds without overflowing past DLOCK__INFINITE. */
int64_t dlock__deadline_after(int64_t now_ms, int64_t wait_ms);
/* Converts an absolute CLOCK_MONOTONIC ms time to a timespec for
 * pthread_cond_timedwait on a condition variable using CLOCK_MONOTONIC. */
void dlock__abstime(int64_t at_ms, struct timespec *ts);
/* Initialises a condition variable that waits on CLOCK_MONOTONIC. */
int dlock__cond_init_monotonic(pthread_cond_t *cv);

/* ---- random.c ------------------------------------------------------------------ */
/* Fills buf with len bytes from getrandom(). DLOCK_OK or DLOCK_EINTERNAL. */
int dlock__random_bytes(void *buf, size_t len);
/* A fast per-thread PRNG (xoshiro-style), seeded from getrandom(); for jitter. */
uint64_t dlock__random_u64(void);

/* ---- backoff.c ----------------------------------------------------------------- */
/* Exponential backoff with full jitter: uniform in [0, min(cap, base * 2^attempt)],
 * attempt counting from 0. Never negative; 0 when base or cap is <= 0. */
int64_t dlock__backoff_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms);
int64_t dlock__backoff_ceiling_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms);

/* ---- timer_heap.c -------------------------------------------------------------- */
/* A binary min-heap of (due, item) with O(log n) removal through an index
 * the heap keeps in each item's slot. Not thread-safe: the owner locks it. */
struct dlock__timer {
    int64_t due_ms;
    int64_t early_ms;     /* may run this much before due_ms, with a batch due then */
    size_t heap_index;    /* SIZE_MAX when not in the heap */
};
struct dlock__timer_heap {
    struct dlock__timer **items;
    size_t len, cap;
};
void dlock__timer_heap_init(struct dlock__timer_heap *h);
void dlock__timer_heap_free(struct dlock__timer_heap *h);
int dlock__timer_heap_push(struct dlock__timer_heap *h, struct dlock__timer *t); /* OK/ENOMEM */
struct dlock__timer *dlock__timer_heap_peek(const struct dlock__timer_heap *h);
struct dlock__timer *dlock__timer_heap_pop(struct dlock__timer_heap *h);
void dlock__timer_heap_remove(struct dlock__timer_heap *h, struct dlock__timer *t);
bool dlock__timer_in_heap(const struct dlock__timer *t);

/* ---- config.c / settings.c ----------------------------------------------------- */
struct dlock__config {
    config_t cfg;                   /* kept alive: settings point into it */
    const char *source;             /* file name or "<string>" (points into cfg or static) */
    char *source_copy;
    const struct dlock_provider *provider;
    const config_setting_t *backend_group;  /* may be NULL */
    int64_t lease_ms;
    bool watchdog;
    int64_t retry_base_ms;
    int64_t retry_cap_ms;
    char prefix[65];
    /* The `metrics` group. listen is NULL when metrics are not served over
     * HTTP (checked with http_address_parse()). names (point into cfg)
     * are the lock names that get series of their own. */
    const char *metrics_listen;
    const char **metrics_names;
    size_t metrics_nnames;
    /* The `cache` group: how long a released hold is kept for this client
     * (0: caching off, the default), and how long a name whose kept holds
     * keep being asked for is not kept (0: always kept). */
    int64_t cache_idle_ms;
    int64_t cache_cooldown_ms;
};

/* Receives each finding; is_error 0 = warning. */
struct dlock__diag {
    dlock_config_report_fn report;
    void *arg;
    int errors;
    int warnings;
    char first_error[512];          /* "file:line: message" of the first error */
    bool backend_unavailable;       /* one error was: the backend's module is missing or refused */
};

#define DLOCK__DEFAULT_LEASE_MS 30000
#define DLOCK__DEFAULT_RETRY_BASE_MS 10
/* Lock caching: the idle limit of a handle with DLOCK_LOCK_CACHE when the
 * configuration has no cache group, and how long a name whose kept holds
 * keep being asked for is not kept at first. */
#define DLOCK__DEFAULT_CACHE_IDLE_MS 1000
#define DLOCK__DEFAULT_CACHE_COOLDOWN_MS 10000
/* The caching switch counts at most this many hits between two requests
 * of other owners. */
#define DLOCK__CACHE_HITS_WEIGHED 64
/* A name whose watch_wanted failed (its holds are then not kept) is
 * watched again at a grant this much later at the soonest: each try may
 * wait for the server. */
#define DLOCK__WATCH_RETRY_MS 30000
#define DLOCK__DEFAULT_RETRY_CAP_MS 1000
#define DLOCK__DEFAULT_PREFIX "dlock:"

/* Loads and validates a configuration from a file (path) or a string (text,
 * when path is NULL). Every finding goes to diag. Returns DLOCK_OK, or
 * DLOCK_ECONFIG (and diag->first_error) / DLOCK_ENOMEM. On success *cfg must
 * be freed with dlock__config_free(); on failure it is already freed. */
int dlock__config_load(struct dlock__config *cfg, const char *path, const char *text,
                       struct dlock__diag *diag);
void dlock__config_free(struct dlock__config *cfg);

/* The group view handed to providers. */
struct dlock_settings {
    const config_setting_t *group;  /* NULL: empty group */
    const char *source;
};
/* Checks group against spec: unknown names (with a suggestion), types and
 * ranges. Reports to diag; returns the number of errors found. */
int dlock__settings_validate(const config_setting_t *group, const char *source,
                             const struct dlock_setting_spec *spec, const char *group_name,
                             struct dlock__diag *diag);
void dlock__diag_add(struct dlock__diag *diag, int is_error, const char *file, int line,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Closest of candidates to word within edit distance 2, or NULL. */
const char *dlock__suggest(const char *word, const char *const *candidates, size_t n);

/* ---- registry.c ---------------------------------------------------------------- */
/* Finds a provider by name: registered ones, the built-in local backend,
 * then dlock_<name>.so in $DLOCK_MODULE_PATH and the module directory.
 * Returns DLOCK_OK, DLOCK_EUNAVAILABLE (not found or refused; detail set)
 * or DLOCK_ECONFIG (not a backend name: a path, say). Providers are never
 * unloaded. */
int dlock__provider_find(const char *name, const struct dlock_provider **out);
/* Calls try_dir(dir, arg) for each directory of the module path
 * ($DLOCK_MODULE_PATH, then the installed module directory) until it
 * answers other than DLOCK_EUNAVAILABLE ("not in this one"), and returns
 * that answer (DLOCK_EUNAVAILABLE when no directory had it). searched gets
 * the directories tried, comma-separated, for messages. */
int dlock__module_path_each(int (*try_dir)(const char *dir, void *arg), void *arg, char *searched,
                            size_t searched_len);
/* Validates a provider table; DLOCK_OK or DLOCK_EINVAL with the reason. */
int dlock__provider_check(const struct dlock_provider *p, const char *origin);

/* ---- log.c ---------------------------------------------------------------------- */
struct dlock__log {
    pthread_mutex_t mu;
    dlock_log_fn fn;
    void *arg;
    int max_level;
};
void dlock__log_init(struct dlock__log *log);
void dlock__log_destroy(struct dlock__log *log);
void dlock__logf(struct dlock__log *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- metrics.c ------------------------------------------------------------------ */
#define DLOCK__HIST_BUCKETS 12
struct dlock__histogram {
    uint64_t buckets[DLOCK__HIST_BUCKETS]; /* cumulative counts are derived when written */
    uint64_t count;
    uint64_t sum_ms;
};
/* Most names `metrics.names` may list: each adds 32 series (4 counters, 2
 * histograms of 14) to every scrape, and the list is there to keep that
 * number known. */
#define DLOCK__METRICS_NAMES_MAX 100
/* The series one listed lock name has of its own (label name="..."). */
struct dlock__name_metrics {
    const char *name;               /* NUL-terminated; owned by the configuration */
    size_t name_len;
    uint64_t grants, timeouts, releases, losses;
    struct dlock__histogram wait_ms, hold_ms;
};
struct dlock__metrics {
    uint64_t attempts, grants, reentries, busy, timeouts, cancels, releases, release_failures;
    uint64_t renewals, renewal_failures, losses, backend_errors;
    uint64_t attempts_parked;                   /* round trips parked on a descriptor (acquire_send) */
    uint64_t releases_parked;                   /* the same for releases (release_send) */
    uint64_t cache_keeps, cache_hits, cache_givebacks, cache_pauses; /* lock caching (core/cache.c) */
    uint64_t renewal_rounds, renewal_round_us;  /* watchdog rounds that renewed, and their time */
    struct dlock__histogram wait_ms, hold_ms;
    struct dlock__name_metrics *names;          /* fixed once the client is open */
    size_t nnames;
};
void dlock__metric_inc(uint64_t *counter);
void dlock__histogram_observe(struct dlock__histogram *h, int64_t ms);
int dlock__metrics_format(const struct dlock__metrics *m, const char *backend, char **out);
/* Gives each of the n names (which must outlive m) series of their own.
 * DLOCK_OK or DLOCK_ENOMEM. Called before m is shared with other threads. */
int dlock__metrics_names_init(struct dlock__metrics *m, const char *const *names, size_t n);
void dlock__metrics_names_free(struct dlock__metrics *m);
/* The series of a listed name, or NULL when the name is not listed. */
struct dlock__name_metrics *dlock__metrics_name_find(struct dlock__metrics *m, const char *name, size_t len);

struct dlock_exporter_table;

/* ---- timer_thread.c: the watchdog and the expiry thread ------------------------------ */
struct dlock__entry;

/* What a timer thread is: its clock, how it batches and naps, where its
 * timer and busy flag live in an entry, and the work it runs. */
struct dlock__timer_thread_spec {
    const char *what;               /* "watchdog", for messages */
    int64_t (*now)(void);           /* the clock its timers are on */
    int64_t window_ms;              /* timers due this close together run in one call */
    int64_t max_nap_ms;             /* looks at its clock at least this often */
    size_t timer_offset;            /* offsetof(struct dlock__entry, <its timer>) */
    size_t busy_offset;             /* offsetof(struct dlock__entry, <its busy flag>) */
    void (*run)(dlock_client *client, struct dlock__entry **due, size_t n);
};

struct dlock__timer_thread {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct dlock__timer_heap heap;
    pthread_t thread;
    bool started;
    bool stopping;
    int64_t sleeping_until;         /* on its clock; when it looks again (INFINITE: no timer) */
    int64_t last_lead_ms;           /* how far ahead the last timer was scheduled */
    uint64_t scheduled;             /* timers scheduled so far */
    uint64_t wakeups;               /* returns from its waits, for the tests */
    const char *what;
    int64_t (*now)(void);
    int64_t window_ms, max_nap_ms;
    size_t timer_offset, busy_offset;
    void (*run)(dlock_client *client, struct dlock__entry **due, size_t n);
    dlock_client *client;
};

void dlock__timer_thread_init(struct dlock__timer_thread *t, const struct dlock__timer_thread_spec *spec,
                              dlock_client *client);
/* (Re)arms e's timer at due_ms (on the thread's clock), starting the thread
 * with the first timer. When the thread runs a batch up to early_ms before
 * due_ms, e's timer joins it. DLOCK_OK or an error with its detail. */
int dlock__timer_thread_schedule(struct dlock__timer_thread *t, struct dlock__entry *e, int64_t due_ms,
                                 int64_t early_ms);
/* The same, but only ever brings e's timer nearer: a timer already due at
 * or before due_ms is left as it is. */
int dlock__timer_thread_schedule_earlier(struct dlock__timer_thread *t, struct dlock__entry *e, int64_t due_ms);
/* Takes e's timer out after waiting until the thread is not working on e
 * (unless called from that thread). Returns the due time it had, or -1. */
int64_t dlock__timer_thread_cancel(struct dlock__timer_thread *t, struct dlock__entry *e);
/* The same without waiting: false, and e's timer left as it is, when the
 * thread is working on e right now. */
bool dlock__timer_thread_try_cancel(struct dlock__timer_thread *t, struct dlock__entry *e);
/* Stops the thread and waits for it; schedule and cancel stay usable (they
 * start no thread any more). Then destroy frees the heap and the mutex. A
 * client joins both its timer threads before destroying either, since each
 * may still schedule on the other until it is stopped. */
void dlock__timer_thread_join(struct dlock__timer_thread *t);
void dlock__timer_thread_destroy(struct dlock__timer_thread *t);

/* ---- async_engine.c: the non-blocking API's engine ----------------------------- */
/* Threads that run provider calls for non-blocking operations and take
 * turns at polling for the waiting ones: a fixed number, whatever the
 * number of operations pending (a waiting operation is parked on a
 * descriptor or a timer, not on a thread). */
#define DLOCK__ASYNC_WORKERS DLOCK_ASYNC_WORKERS

struct dlock__aop;

struct dlock__async {
    pthread_mutex_t mu;             /* guards everything here and every operation's state */
    pthread_cond_t work_cv;         /* workers: a ready operation, or stopping */
    pthread_cond_t done_cv;         /* an operation finished its work (lock free, close wait) */
    int done_fd;                    /* eventfd: results wait in the done queue, -1 until first needed */
    int loop_fd;                    /* epoll set behind dlock_client_fd(): done_fd and the descriptors
                                     * of the operations parked for the caller's loop (an attempt in
                                     * flight, whose answer dlock_client_process() reads) */
    int epoll_fd;                   /* parked operations' descriptors, and parker_wake_fd */
    int parker_wake_fd;             /* eventfd that wakes the poller: kicks, new timers, work, stopping */
    bool started, stopping;
    bool closing;                   /* the client is closing: no new operation */
    bool polling;                   /* a worker waits in epoll_wait (the poller) */
    int64_t poll_until;             /* while polling: when its epoll_wait ends at the latest */
    unsigned idle;                  /* workers waiting on work_cv */
    unsigned nworkers;
    pthread_t workers[DLOCK__ASYNC_WORKERS];
    struct dlock__aop *ready_head, *ready_tail;   /* to run on a worker */
    struct dlock__aop *loop_head, *loop_tail;     /* to run in dlock_client_process() (an in-process
                                                   * backend's steps) */
    struct dlock__aop *done_head, *done_tail;     /* to deliver in dlock_client_process() */
    struct dlock__aop *kick_head;                 /* parked, to be woken by the poller */
    struct dlock__timer_heap timers;              /* parked operations' deadlines */
    size_t undelivered;                           /* started and not yet delivered */
};

/* Sets up an idle engine (no thread, no fd) at client open. */
void dlock__async_init(dlock_client *client);
/* At client close: new operations are refused, every pending one is
 * completed (its callback called on the calling thread), the threads
 * stopped, the fds closed. */
void dlock__async_shutdown(dlock_client *client);
/* Last of all at close, once no thread can call in (the timer threads are
 * joined): the mutex and condition variables go. */
void dlock__async_destroy(dlock_client *client);
/* Before a handle is freed: its pending operations are cancelled, waited
 * for and completed (their callbacks called on the calling thread). */
void dlock__async_lock_freeing(dlock_client *client, dlock_lock *lock);

struct dlock_client {
    pid_t pid;                      /* the process that opened it (for messages) */
    uint64_t fork_generation;       /* dlock__fork_generation() at open (fork guard) */
    struct dlock__config config;
    const struct dlock_provider *provider;
    void *instance;
    unsigned capabilities;          /* DLOCK_CAP_* of this client: the module's, less what its instance lacks */
    int64_t cache_hearing_us;       /* DLOCK_CTL_HEARING_DELAY: a request's wait before the provider tells it */
    char client_id[33];             /* 128 random bits, hex */
    struct dlock__log log;
    struct dlock__metrics metrics;
    const struct dlock_exporter_table *exporter; /* the module serving metrics.listen, once loaded */
    void *exporter_server;  /* its server for this client, or NULL */
    struct dlock__timer_thread watchdog; /* renewals and give-backs (core/watchdog.c) */
    struct dlock__timer_thread expiry;   /* loss at the validity end (core/expiry.c) */

    pthread_mutex_t entries_mu;     /* guards the name table and handle list */
    struct dlock__entry **buckets;
    size_t nbuckets, nentries;
    unsigned own_holders;           /* entries of shared/semaphore handles now (entries_mu) */
    unsigned holders_made;          /* numbers them for their owner ids (entries_mu) */
    uint64_t cache_holder;          /* the holder number of cached holds (constant) */
    struct dlock_lock *handles;     /* every live handle, to free on close */
    struct dlock__async async;      /* the non-blocking API (core/async_engine.c) */
};

struct dlock_lock {
    struct dlock__entry *entry;
    dlock_lock_options options;
    unsigned lost_calls_running;    /* on_lost calls in flight with this handle (entry->mu) */
    uint64_t async_no;              /* holder number of this handle's non-blocking holds (constant) */
    bool freeing;                   /* dlock_lock_free() of it is under way (its thread only) */
    struct dlock_lock *prev, *next; /* in client->handles */
};

/* How many fork()s this process is removed from the one that loaded the
 * library: a pthread_atfork child handler counts them, so the fork guard
 * costs no getpid() system call per operation. */
uint64_t dlock__fork_generation(void);
/* Checks the fork guard and NULL; sets the detail. DLOCK_OK or DLOCK_EINVAL. */
int dlock__client_usable(const dlock_client *client);

/* Watchdog: renews watchdog holds and gives back lost ones. */
int dlock__watchdog_schedule(dlock_client *client, struct dlock__entry *entry, int64_t due_ms);
/* Brings entry's timer to due_ms if it is due later (or not scheduled). */
int dlock__watchdog_schedule_earlier(dlock_client *client, struct dlock__entry *entry, int64_t due_ms);
/* Schedules the renewal of a hold valid for valid_ms from sent_mono_ms: due
 * at a third of it, and taken into any renewal round from a sixth of it on,
 * so that holds granted at different times come to be renewed together. */
int dlock__watchdog_schedule_renewal(dlock_client *client, struct dlock__entry *entry, int64_t sent_mono_ms,
                                     int64_t valid_ms);
/* Takes entry's timer out, after waiting until the watchdog is not working on
 * it (unless called from the watchdog thread). Returns the due time it had,
 * or -1. After it returns the watchdog does not touch entry. */
int64_t dlock__watchdog_cancel(dlock_client *client, struct dlock__entry *entry);
/* The same, unless the watchdog is working on entry right now: false
 * then, and nothing changed. */
bool dlock__watchdog_try_cancel(dlock_client *client, struct dlock__entry *entry);
void dlock__watchdog_init(dlock_client *client);
/* Most timers handled (and renewals sent) in one go: enough for a client's
 * ten thousand holds to be renewed in one round. */
#define DLOCK__WATCHDOG_BATCH_MAX 16384
/* Releases every hold and frees every handle (client close). */
/* Ends every entry's watch_wanted (dlock_client_close, before the timer
 * threads stop: after it no provider thread calls into an entry). */
void dlock__entries_unwatch_all(dlock_client *client);
void dlock__entries_close_all(dlock_client *client);

/* ---- validity --------------------------------------------------------------------- */
/* Allowance for clock drift between client and server (the Redlock rule). */
static inline int64_t dlock__drift_ms(int64_t lease_ms) { return dlock_provider_drift_ms(lease_ms); }

/* ---- the built-in default backend ---------------------------------------------------- */
/* The one backend the core names: what a configuration without `backend`
 * gets, built into libdlock (backends/local). */
#define DLOCK__BUILTIN_BACKEND "local"

#endif
