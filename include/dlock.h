/*
 * dlock.h - libdlock application API: named distributed locks over pluggable
 * backends (local, redis, redlock, zookeeper, etcd, postgres, mysql).
 *
 * Two handles:
 *   dlock_client  one configured backend instance: its connections, its
 *                 watchdog thread, its metrics. Safe to share between threads.
 *   dlock_lock    a named lock of one client. Safe to share between threads;
 *                 holds belong to (client, thread), as in Redisson: the thread
 *                 that acquired must release, and may acquire again (reentry).
 *
 * Errors are negative int codes (DLOCK_E*), with dlock_strerror() for the
 * generic text and dlock_errmsg() for a per-thread detail message that says
 * what went wrong and what to do about it.
 *
 * Every call that takes a dlock_client or a dlock_lock must be made in the
 * process that opened the client: after fork() the child gets DLOCK_EINVAL and
 * must open its own client (the parent's connections and holds are not its own).
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DLOCK_VERSION_MAJOR, _MINOR and _PATCH: the version these headers
 * are of (generated from configure.ac; dlock_version() is the library's). */
#include <dlock/version.h>

/* Longest lock name in bytes (names are byte strings without NUL). */
#define DLOCK_NAME_MAX 512

/*
 * The error codes, generated from one list so the enum, dlock_strerror() and
 * dlock_errname() cannot drift apart. X(NAME, value, text).
 */
#define DLOCK_ERROR_LIST(X)                                                            \
    X(OK,             0, "success")                                                    \
    X(EBUSY,         -1, "the lock is held by another owner")                          \
    X(ETIMEDOUT,     -2, "the wait budget ran out before the lock was granted")        \
    X(ELOST,         -3, "the hold was lost (expired, taken over or its session ended)") \
    X(ENOTOWNER,     -4, "the calling thread does not hold this lock")                 \
    X(EUNAVAILABLE,  -5, "the backend could not be reached or failed")                 \
    X(ENOQUORUM,     -6, "too few servers answered to reach a quorum")                 \
    X(ECONFIG,       -7, "the configuration is invalid")                               \
    X(EINVAL,        -8, "invalid argument")                                           \
    X(ENOTSUP,       -9, "the backend does not support this operation")                \
    X(ECANCELLED,   -10, "the wait was cancelled")                                     \
    X(ENOMEM,       -11, "out of memory")                                              \
    X(EPROTOCOL,    -12, "the backend answered something unexpected")                  \
    X(EINTERNAL,    -13, "internal error in libdlock (please report it)")              \
    X(ESTALE,       -14, "a newer lock holder has written: this fencing token is stale") \
    X(EDEADLK,      -15, "the calling thread's own hold stands in the way of this one")

typedef enum dlock_error {
#define DLOCK__ERROR_ENUM(name, value, text) DLOCK_##name = value,
    DLOCK_ERROR_LIST(DLOCK__ERROR_ENUM)
#undef DLOCK__ERROR_ENUM
} dlock_error;

/* Capability bits, reported by dlock_client_capabilities(). */
#define DLOCK_CAP_RENEW              (1u << 0) /* holds can be extended (dlock_renew, watchdog) */
#define DLOCK_CAP_FENCE              (1u << 1) /* grants carry a fencing token */
#define DLOCK_CAP_FENCE_LINEARIZABLE (1u << 2) /* tokens never go back, even across failover */
#define DLOCK_CAP_NATIVE_WAIT        (1u << 3) /* waiters are woken by a release notification */
#define DLOCK_CAP_FAIR               (1u << 4) /* first come, first served */
#define DLOCK_CAP_SERVER_EXPIRY      (1u << 5) /* the server frees a hold whose lease ran out */
#define DLOCK_CAP_MULTI_HOST         (1u << 6) /* processes on different hosts exclude each other */
#define DLOCK_CAP_SHARED             (1u << 7) /* shared holds (DLOCK_MODE_SHARED) beside exclusive ones */
#define DLOCK_CAP_SEMAPHORE          (1u << 8) /* semaphores (DLOCK_MODE_SEMAPHORE) */
#define DLOCK_CAP_DOWNGRADE          (1u << 9) /* an exclusive hold turns shared in place (dlock_downgrade) */
#define DLOCK_CAP_ELECTION           (1u << 10) /* leader election (dlock_campaign): a value beside a hold */
#define DLOCK_CAP_IN_PROCESS         (1u << 11) /* no call waits for a network or another process's answer */
#define DLOCK_CAP_CACHE              (1u << 12) /* a released hold can be kept for this client (cache.idle_ms) */

typedef struct dlock_client dlock_client;
typedef struct dlock_lock dlock_lock;

/* ---- errors -------------------------------------------------------------- */

/* Generic text for an error code ("unknown error" for codes not in the list).
 * Returns a static string; thread-safe. */
const char *dlock_strerror(int code);

/* Symbolic name of an error code, e.g. "DLOCK_EBUSY"; static; thread-safe. */
const char *dlock_errname(int code);

/*
 * Detail message of the last error returned to the calling thread, e.g.
 * "local: cannot create lock directory /x: Permission denied". Like errno it
 * is only meaningful right after a call returned an error; successful calls do
 * not clear it. The string belongs to the thread and stays valid until its
 * next libdlock call. Never NULL.
 */
const char *dlock_errmsg(void);

/* ---- client -------------------------------------------------------------- */

/*
 * Opens a client from the libconfig file at config_path (see dlock.conf(5)).
 * config_path NULL means: the file named by $DLOCK_CONFIG if that is set and
 * non-empty, otherwise the built-in default, the `local` backend with its
 * default lock directory.
 *
 * On success *out owns a new client; close it with dlock_client_close().
 * Errors: DLOCK_EINVAL (out NULL), DLOCK_ECONFIG (unreadable or invalid file;
 * dlock_errmsg() gives file:line), DLOCK_EUNAVAILABLE (backend module missing
 * or its server unreachable, or the metrics.listen address cannot be
 * listened on), DLOCK_ENOMEM. On error *out is set to NULL.
 * Thread-safe (clients are independent).
 */
int dlock_client_open(dlock_client **out, const char *config_path);

/* Like dlock_client_open() but reads the configuration from a string; errors
 * name the file as "<string>". The string is not retained. */
int dlock_client_open_string(dlock_client **out, const char *config_text);

/*
 * Closes a client: stops its metrics server (metrics.listen) and its
 * watchdog, releases every hold it still has on the
 * backend (a service that forgets a release does not block others until the
 * lease runs out) and frees everything, including lock handles not yet freed.
 * NULL is ignored. No other thread may use the client or its locks during or
 * after the call.
 */
void dlock_client_close(dlock_client *client);

/* Name of the client's backend, e.g. "local"; owned by the client. */
const char *dlock_client_backend(const dlock_client *client);

/* DLOCK_CAP_* bits of this client (0 for NULL): its backend's, less any
 * the configured mode cannot keep (postgres session mode: no SHARED or
 * SEMAPHORE). Thread-safe. */
unsigned dlock_client_capabilities(const dlock_client *client);

/* Log levels for dlock_client_set_log(). */
enum dlock_log_level {
    DLOCK_LOG_ERROR = 0,
    DLOCK_LOG_WARN = 1,
    DLOCK_LOG_INFO = 2,
    DLOCK_LOG_DEBUG = 3
};

/* A log sink. Called from any thread of the client (including the watchdog);
 * msg is valid only during the call. Must not call back into the client. */
typedef void (*dlock_log_fn)(int level, const char *msg, void *arg);

/*
 * Sends the client's log messages at max_level or more severe to fn (NULL
 * turns logging off). The default sink writes to stderr when $DLOCK_LOG is
 * set to error, warn, info or debug, and is silent otherwise. Thread-safe,
 * but messages already being formatted may still reach the old sink.
 */
void dlock_client_set_log(dlock_client *client, dlock_log_fn fn, void *arg, int max_level);

/*
 * Writes the client's metrics in the Prometheus text exposition format into a
 * new NUL-terminated string: attempts, grants, busy answers, timeouts,
 * cancellations, releases, renewals, renewal failures, losses, and histograms
 * of wait time and hold time; then grants, timeouts, releases, losses and the
 * two histograms of each lock name listed in the configuration's
 * metrics.names, labelled name="...". With metrics.listen set the client
 * serves the same text over HTTP at /metrics from open to close (see
 * dlock.conf(5)). *out is malloc()ed and owned by the caller (free() it).
 * Thread-safe. Errors: DLOCK_EINVAL, DLOCK_ENOMEM.
 */
int dlock_client_metrics(dlock_client *client, char **out);

/* ---- locks --------------------------------------------------------------- */

/* Called once when a hold is lost: renewal found it gone or taken, its
 * validity ran out (renewals did not get through, an explicit lease ended,
 * the host was suspended past it), or the backend session ended. A validity
 * end is signalled at that moment by the client's expiry thread, however
 * long a renewal in flight takes; other losses on the watchdog thread (or
 * the thread that found them). No libdlock lock is held; it may call any
 * libdlock function except dlock_client_close() and dlock_lock_free() on
 * this lock, and should return quickly. A dlock_lock_free() of this lock on
 * another thread waits until the callback has returned. After the callback
 * the client gives the hold back to the backend (owner-checked, best
 * effort), so a server that still keeps it frees it. */
typedef void (*dlock_lost_fn)(dlock_lock *lock, void *arg);

#define DLOCK_LOCK_OPTIONS_VERSION 2

/* What a handle's holds are (dlock_lock_options.mode). */
#define DLOCK_MODE_EXCLUSIVE 0u /* one holder at a time: an ordinary lock */
#define DLOCK_MODE_SHARED    1u /* any number of shared holders together, or one
                                 * exclusive holder of the same name (flock -s / -x) */
#define DLOCK_MODE_SEMAPHORE 2u /* at most `permits` holders of the name at a time */

/* Per-lock options. Initialise with DLOCK_LOCK_OPTIONS_INIT so that fields
 * added in later versions get their defaults. */
typedef struct dlock_lock_options {
    unsigned version;      /* DLOCK_LOCK_OPTIONS_VERSION */
    /* 0: the watchdog keeps the configured default lease (lease_ms, 30 s)
     * alive, renewing at lease/3, until release. >0: a fixed lease in ms,
     * never renewed by the watchdog; the hold expires after it (DLOCK_ELOST). */
    int64_t lease_ms;
    dlock_lost_fn on_lost; /* optional */
    void *on_lost_arg;
    unsigned flags;        /* DLOCK_LOCK_* */
    /* --- version 2 --- */
    /* DLOCK_MODE_*. A shared or semaphore hold belongs to its handle: each
     * handle is one holder (with its own lease and fence), reentrant per
     * calling thread, and threads that hold together use a handle each.
     * Needs DLOCK_CAP_SHARED / DLOCK_CAP_SEMAPHORE (else DLOCK_ENOTSUP). */
    unsigned mode;
    /* DLOCK_MODE_SEMAPHORE: the number of permits, 1..65535. It is part of
     * the name's state: asking with another number fails with
     * DLOCK_EINVAL. 0 in other modes. */
    unsigned permits;
} dlock_lock_options;

/* Fair mode: first come, first served across all clients, and a release
 * wakes only the next waiter. Needs DLOCK_CAP_FAIR (else DLOCK_ENOTSUP). */
#define DLOCK_LOCK_FAIR (1u << 0)
/* Lock caching for this handle's holds (see `cache` in dlock.conf(5)),
 * even when the configuration has no cache group: its outermost release
 * keeps an exclusive watchdog hold on the server for the client, for at
 * most cache.idle_ms without use (1000 ms without the group). Needs
 * DLOCK_CAP_CACHE (else DLOCK_ENOTSUP); DLOCK_EINVAL beside
 * DLOCK_LOCK_FAIR, DLOCK_LOCK_NOCACHE, a fixed lease_ms or a mode other
 * than DLOCK_MODE_EXCLUSIVE, since such holds are never kept. */
#define DLOCK_LOCK_CACHE (1u << 1)
/* Never keep this handle's holds after their release, whatever the
 * configuration says: each release goes to the server. */
#define DLOCK_LOCK_NOCACHE (1u << 2)

#define DLOCK_LOCK_OPTIONS_INIT { DLOCK_LOCK_OPTIONS_VERSION, 0, NULL, NULL, 0, DLOCK_MODE_EXCLUSIVE, 0 }

/*
 * Creates a handle for the lock NAME of client. name is name_len bytes (no
 * NUL, 1..DLOCK_NAME_MAX); the bytes are copied. Handles of the same name in
 * one client share one hold, so reentry works across them. options may be
 * NULL (defaults); it is copied.
 *
 * *out owns the handle; free it with dlock_lock_free(). Errors: DLOCK_EINVAL
 * (bad name, options or version, unknown flags), DLOCK_ENOTSUP (a flag the
 * backend cannot honour, e.g. DLOCK_LOCK_FAIR), DLOCK_ENOMEM. Thread-safe.
 */
int dlock_lock_new(dlock_client *client, const char *name, size_t name_len,
                   const dlock_lock_options *options, dlock_lock **out);

/*
 * Frees a handle. If the calling thread still holds the lock through it and
 * no other handle of that name is left, the hold is released first; a hold
 * the handle took with dlock_acquire_start() is always released first. Its
 * pending non-blocking operations are cancelled and waited for, and their
 * callbacks are called on the calling thread, with DLOCK_ECANCELLED for an
 * acquire, before the handle is freed. NULL is ignored. The handle must not
 * be in use by another thread.
 */
void dlock_lock_free(dlock_lock *lock);

/* The lock's name (not NUL-terminated: see *len); owned by the handle. */
const char *dlock_lock_name(const dlock_lock *lock, size_t *len);

/*
 * Acquires the lock for the calling thread. If the thread already holds it,
 * the hold count goes up and the call returns at once (reentry).
 *
 * wait_ms: 0 = one attempt; > 0 = retry for up to wait_ms milliseconds
 * (measured on CLOCK_MONOTONIC); < 0 = wait until granted or cancelled.
 * While busy the client waits for the backend's release notification when it
 * has one, and otherwise backs off exponentially with full jitter between
 * retry_base_ms and retry_cap_ms; other threads of the same client queue
 * locally and do not add load on the backend.
 *
 * Returns DLOCK_OK; DLOCK_EBUSY (wait_ms == 0 and held elsewhere);
 * DLOCK_ETIMEDOUT; DLOCK_ECANCELLED (dlock_cancel()); DLOCK_ELOST (the
 * thread's current hold is lost: release it first); DLOCK_EUNAVAILABLE,
 * DLOCK_ENOQUORUM, DLOCK_EPROTOCOL (backend failures are returned at once);
 * DLOCK_EDEADLK (an exclusive acquire by a thread that holds the name
 * shared: two such upgraders would wait for each other forever; or a
 * shared acquire by a thread that holds the name exclusively: use
 * dlock_downgrade() to keep it as a shared hold); DLOCK_EINVAL (a semaphore asked
 * with another number of permits than the name has). Thread-safe.
 *
 * Shared and exclusive holds of one name wait in one line where the backend
 * is DLOCK_CAP_FAIR; otherwise a waiting exclusive request still keeps
 * shared requests that come after it out (the backend's docs say how), so
 * a stream of readers cannot starve a writer.
 */
int dlock_acquire(dlock_lock *lock, int64_t wait_ms);

/*
 * Undoes one acquire of the calling thread. When the count reaches 0 the hold
 * is released on the backend, which deletes it only if the owner still
 * matches. Returns DLOCK_OK; DLOCK_ENOTOWNER (the thread does not hold it);
 * DLOCK_ELOST (the hold had been lost: nothing was deleted, and the local
 * hold is now cleared); DLOCK_EUNAVAILABLE (the backend could not be told:
 * the local hold is cleared, and the server-side hold ends at its lease;
 * zookeeper and etcd, whose session or lease the client's other holds keep
 * alive, remember it and delete it at the client's next renewal round or
 * acquire, and a later acquire of the same handle is a new hold with a new
 * fence). Thread-safe.
 */
int dlock_release(dlock_lock *lock);

/*
 * Turns the calling thread's exclusive hold of the lock into a shared hold,
 * atomically on the backend: at no moment is the name free or held by
 * another, and from then on other shared requests may come in (writers
 * of other clients that were waiting keep their place; this client's own
 * threads that wait for it exclusively wait inside the client until it is
 * released). It is the same hold: it keeps its
 * lease, watchdog, on_lost and fencing token (dlock_fence), and holds that
 * come after it get greater tokens. dlock_release() then ends it. Taking the
 * lock exclusively again while it is held shared is refused (DLOCK_EDEADLK);
 * a second downgrade is DLOCK_OK.
 * Returns DLOCK_OK; DLOCK_ENOTOWNER (the thread does not hold it);
 * DLOCK_EINVAL (a shared or semaphore handle, or a hold the thread took
 * more than once: the outer holds count on exclusivity); DLOCK_ENOTSUP (the
 * backend lacks DLOCK_CAP_DOWNGRADE, or cannot downgrade this hold: it
 * stays exclusive); DLOCK_ENOMEM (the same); DLOCK_ELOST (the hold was lost, or
 * the backend's answer did not come: the hold may be either kind, so it is
 * given up and on_lost fires; release it). Thread-safe.
 */
int dlock_downgrade(dlock_lock *lock);

/*
 * Extends the calling thread's hold by its lease now, from the time of the
 * request. Watchdog holds are renewed automatically; this is for explicit
 * leases. Returns DLOCK_OK; DLOCK_ENOTOWNER; DLOCK_ELOST (the backend no
 * longer has the hold; on_lost fires); DLOCK_ENOTSUP (the backend cannot
 * renew); backend errors. Thread-safe.
 */
int dlock_renew(dlock_lock *lock);

/*
 * Stores the fencing token of the calling thread's current hold in *out:
 * strictly greater than every token granted before for this name (see
 * DLOCK_CAP_FENCE_LINEARIZABLE for how strong that promise is). Pass it to
 * the resource you protect so it can reject writes from a stale holder.
 * Returns DLOCK_OK, DLOCK_ENOTOWNER, DLOCK_ELOST, DLOCK_ENOTSUP, DLOCK_EINVAL.
 */
int dlock_fence(dlock_lock *lock, uint64_t *out);

/*
 * Milliseconds for which the calling thread's hold is still known to be valid
 * (grant or last renewal time + lease - clock drift allowance, on
 * CLOCK_BOOTTIME, which counts time the host was suspended), 0 if it just
 * ran out. The lease is the one the server granted, which a backend may
 * report as shorter than asked (ZooKeeper's negotiated session). Negative: DLOCK_ENOTOWNER,
 * DLOCK_ELOST, DLOCK_EINVAL.
 */
int64_t dlock_validity_ms(dlock_lock *lock);

/* How many times the calling thread holds the lock (0: not at all); negative:
 * DLOCK_ELOST (held but lost) or DLOCK_EINVAL. */
int dlock_hold_count(dlock_lock *lock);

/*
 * Makes every dlock_acquire() that is waiting on this lock's name in this
 * client, in any thread, and every pending dlock_acquire_start() of the
 * name, return (or complete with) DLOCK_ECANCELLED promptly. Acquires that
 * start after the call are not affected. Returns DLOCK_OK or DLOCK_EINVAL.
 * Async-signal-unsafe; thread-safe.
 */
int dlock_cancel(dlock_lock *lock);

/* ---- the non-blocking API -------------------------------------------------- */

/*
 * For event loops (libuv, libevent, libev, epoll): an operation is started
 * without blocking, and its result comes to a callback. The client's
 * descriptor (dlock_client_fd) becomes readable when results wait; the loop
 * then calls dlock_client_process(), which runs their callbacks on the
 * calling thread. Adapters that do this for libuv, libevent and libev are
 * in <dlock/adapters/libuv.h>, <dlock/adapters/libevent.h> and
 * <dlock/adapters/libev.h>.
 *
 * The client does the work on threads of its own: a fixed pool of
 * DLOCK_ASYNC_WORKERS that make the backend's round trips and take turns
 * at keeping every waiting operation on the backend's wake-up descriptor
 * (or a timer), so thousands may wait at once without a thread each, on
 * every backend. docs/design.md says which backend waits on what.
 *
 * A hold taken with dlock_acquire_start() belongs to the handle, not to a
 * thread: any thread may release it (dlock_release_start(),
 * dlock_release()), and dlock_fence(), dlock_renew(), dlock_downgrade(),
 * dlock_validity_ms() and dlock_hold_count() answer for it from any thread.
 * The watchdog renews it, and on_lost is called for it as for any hold, on
 * the client's watchdog or expiry thread (not inside
 * dlock_client_process()). The blocking and non-blocking calls may be
 * mixed on one client, and on one name: each waits for the other's hold.
 */

/* Called with an operation's result: lock is the handle it was started on,
 * rc its result (dlock_errmsg() gives the detail during the call), arg the
 * caller's. Runs inside dlock_client_process() on the thread that calls it,
 * or inside dlock_lock_free() or dlock_client_close() for the operations
 * those end. It may call any libdlock function, including
 * dlock_release_start(), dlock_acquire_start() and dlock_lock_free() on
 * lock, but not dlock_client_close(); called by lock's own
 * dlock_lock_free(), a dlock_lock_free() of lock does nothing and a start
 * on lock is refused (DLOCK_EINVAL), and called by dlock_client_close(),
 * so is every start. Free a handle with operations pending on the thread
 * that calls dlock_client_process(), or once their callbacks came: a free
 * on another thread does not wait for a callback already being called. */
typedef void (*dlock_done_fn)(dlock_lock *lock, int rc, void *arg);

/* The size of the pool of threads that make non-blocking operations'
 * round trips in each client (started with the first operation). */
#define DLOCK_ASYNC_WORKERS 4

/*
 * Starts acquiring the lock for the handle, and returns at once. done is
 * called exactly once with the result dlock_acquire() would have returned:
 * DLOCK_OK (the handle holds the lock), DLOCK_EBUSY, DLOCK_ETIMEDOUT,
 * DLOCK_ECANCELLED (dlock_cancel(), or the handle freed or the client
 * closed first), backend failures. wait_ms means what it does for
 * dlock_acquire(), measured from this call.
 *
 * Returns DLOCK_OK (started: done follows); otherwise done is never
 * called: DLOCK_EINVAL (no handle or no done, a client that is closing),
 * DLOCK_EDEADLK (the handle, or the calling thread, already holds the
 * name: these holds are not reentrant), DLOCK_ENOMEM, DLOCK_EINTERNAL (the
 * client's threads could not be started). Thread-safe.
 */
int dlock_acquire_start(dlock_lock *lock, int64_t wait_ms, dlock_done_fn done, void *arg);

/*
 * Starts releasing the handle's hold (or the calling thread's: one level of
 * a reentered hold is given up at once), and returns at once; done gets
 * what dlock_release() would have returned. Returns DLOCK_OK (started);
 * otherwise done is never called: DLOCK_ENOTOWNER (neither the handle nor
 * the calling thread holds it, or its release is already under way),
 * DLOCK_EINVAL, DLOCK_ENOMEM. Thread-safe.
 */
int dlock_release_start(dlock_lock *lock, dlock_done_fn done, void *arg);

/*
 * A descriptor that is readable while results wait for
 * dlock_client_process(), or an answer from the backend that it reads
 * itself on the caller's thread (an epoll descriptor: poll it for
 * reading). Owned by the client (do not close or read it); the same for
 * the client's life. Returns it, or a negative DLOCK_E* code.
 * Thread-safe.
 */
int dlock_client_fd(dlock_client *client);

/*
 * Reads the answers that have come for attempts sent without a thread
 * (see libdlock(3)), then calls the callbacks of the operations that have
 * finished, on the calling thread, in the order they finished, and never
 * blocks. Results that come
 * while it runs are left for the next call (the descriptor stays
 * readable). Returns how many callbacks it called, or a negative DLOCK_E*
 * code. Call it from one thread at a time.
 */
int dlock_client_process(dlock_client *client);

/*
 * When the loop must call dlock_client_process() at the latest, in ms: 0
 * when results wait, -1 when there is no deadline (the client's threads
 * keep every wait's deadline and signal its end through the descriptor).
 * Other negative values are DLOCK_E* codes. Thread-safe.
 */
int64_t dlock_client_timeout_ms(dlock_client *client);

/* ---- leader election --------------------------------------------------------- */

/*
 * An election of one leader among candidates of one name, built on an
 * exclusive hold of that name: the leader is its holder, with the hold's
 * lease, watchdog and loss detection, and publishes a value (its address,
 * say) beside the hold. The leader's term is the hold's fencing token, so
 * it is strictly greater than every earlier leader's term of the name (as
 * strong a promise as the backend's fences: DLOCK_CAP_FENCE_LINEARIZABLE)
 * and a resource that checks it (dlock_fence_admit) refuses a deposed
 * leader's late writes. Needs DLOCK_CAP_ELECTION (else DLOCK_ENOTSUP).
 */
typedef struct dlock_election dlock_election;

/* Called once when this candidate stops being the leader without resigning
 * (its hold was lost: see dlock_lost_fn, whose path this is): on one of the
 * client's own threads (the watchdog's when a renewal or a publication
 * finds the hold gone, the expiry thread's at the validity end), before
 * the lease the backend keeps for it runs
 * out, so before another candidate can be elected, on backends whose
 * server frees an expired hold (DLOCK_CAP_SERVER_EXPIRY); libdlock(3) says
 * where that cannot be promised. It may call dlock_election_term() and
 * dlock_resign(); not dlock_election_free() or dlock_campaign(). */
typedef void (*dlock_leadership_lost_fn)(dlock_election *election, void *arg);

/*
 * Creates a candidate for the election NAME (name_len bytes, as a lock
 * name) of client, that will publish value (value_len bytes, 0 to
 * DLOCK_VALUE_MAX, any bytes; copied) when elected. *out owns it; free it
 * with dlock_election_free(). Errors: DLOCK_EINVAL (bad name, value too
 * long, NULL out), DLOCK_ENOTSUP (the backend lacks DLOCK_CAP_ELECTION),
 * DLOCK_ENOMEM. Thread-safe.
 */
int dlock_election_new(dlock_client *client, const char *name, size_t name_len, const void *value,
                       size_t value_len, dlock_election **out);

/* The largest published value, in bytes. */
#define DLOCK_VALUE_MAX 4096

/* Sets the callback for a leadership lost (NULL for none). Call it before
 * dlock_campaign(). Returns DLOCK_OK or DLOCK_EINVAL. */
int dlock_election_on_lost(dlock_election *election, dlock_leadership_lost_fn fn, void *arg);

/*
 * Resigns if leading, then frees the candidate. NULL is ignored. Not
 * while another thread campaigns on it, nor from its own on_lost.
 */
void dlock_election_free(dlock_election *election);

/*
 * Campaigns to lead: waits for the election's hold as dlock_acquire() waits
 * for a lock (wait_ms the same: 0 one attempt, > 0 a budget, < 0 until
 * elected or cancelled with dlock_election_cancel()), then publishes the
 * value with the new term. Returns DLOCK_OK (the caller leads: the hold
 * belongs to the election object, not to the calling thread, so any
 * thread may resign); DLOCK_OK at once when it already leads, but
 * DLOCK_ELOST when that leadership was lost (resign first);
 * DLOCK_EBUSY, DLOCK_ETIMEDOUT, DLOCK_ECANCELLED (not elected); DLOCK_ELOST
 * (elected, but the hold was lost before the value was published: nothing
 * was published, and the candidate does not lead); DLOCK_ENOTOWNER
 * (another thread resigned it before its value was published); backend
 * failures (not elected; a hold taken was given back). Thread-safe, one
 * campaign per candidate at a time (another is DLOCK_EINVAL).
 */
int dlock_campaign(dlock_election *election, int64_t wait_ms);

/* Ends a dlock_campaign() that waits (it returns DLOCK_ECANCELLED). From
 * any thread; DLOCK_OK or DLOCK_EINVAL. */
int dlock_election_cancel(dlock_election *election);

/*
 * Stores the current term in *term. Returns DLOCK_OK while leading;
 * DLOCK_ENOTOWNER (not leading); DLOCK_ELOST (the leadership was lost:
 * resign); DLOCK_EINVAL. Thread-safe.
 */
int dlock_election_term(dlock_election *election, uint64_t *term);

/*
 * Milliseconds for which the leadership is still known to be valid, as
 * dlock_validity_ms() says of the election's hold: act as the leader only
 * within it. Negative: DLOCK_ENOTOWNER (not leading), DLOCK_ELOST,
 * DLOCK_EINVAL. Thread-safe.
 */
int64_t dlock_election_validity_ms(dlock_election *election);

/*
 * Publishes value (value_len bytes, at most DLOCK_VALUE_MAX; copied) as the
 * leader's, keeping the term: observers see it, and later campaigns of this
 * candidate publish it. Refused on the server unless this candidate still
 * holds the election. Returns DLOCK_OK; DLOCK_ENOTOWNER (not leading: the
 * new value is kept for the next campaign); DLOCK_ELOST (the leadership was
 * lost); DLOCK_EINVAL; backend failures. Thread-safe.
 */
int dlock_proclaim(dlock_election *election, const void *value, size_t value_len);

/*
 * Gives the leadership up (releases the hold; observers see no leader
 * until the next one is elected). Returns DLOCK_OK; DLOCK_ENOTOWNER (not
 * leading); DLOCK_ELOST (it had been lost; now cleared); backend failures
 * as dlock_release() (the hold then ends at its lease). Thread-safe.
 */
int dlock_resign(dlock_election *election);

/*
 * Who leads the election NAME now, read without taking part: the leader's
 * term in *term and its value, copied into buf (cap bytes; may be NULL
 * with cap 0), its full length in *value_len (copied only up to cap: look
 * at *value_len to see that it fit). *term is 0 and *value_len 0 when
 * nobody leads (or a new leader has not published its value yet). A
 * reported leader held the election during the read, with that value.
 * term and value_len may be NULL. Returns DLOCK_OK; DLOCK_EINVAL;
 * DLOCK_ENOTSUP; backend failures. Thread-safe.
 */
int dlock_leader(dlock_client *client, const char *name, size_t name_len, void *buf, size_t cap,
                 size_t *value_len, uint64_t *term);

/* Called on each change of the leader or its value: term 0 (value NULL,
 * len 0) when nobody leads. value is valid during the call. */
typedef void (*dlock_observe_fn)(const void *value, size_t value_len, uint64_t term, void *arg);

typedef struct dlock_observer dlock_observer;

/*
 * Watches the election NAME: fn is called on a thread of the observer's
 * own with the state at the start, then on each change: a new leader (a
 * greater term), a new value of the same leader, or nobody leading. A
 * leader older than one already reported is never reported. A backend
 * that announces changes wakes it at once (local, redis, zookeeper, etcd
 * and postgres: a new value, a resignation; local, zookeeper and etcd also
 * a leader's death, when its hold is freed); it also reads the state
 * every third of the client's default lease, for changes nothing announces
 * (a redis leader's expiry) and notifications lost on a reconnect. A
 * backend without announcements is read every retry_cap_ms. Changes
 * quicker than a read may be seen only in their last state. *out owns the observer: stop it with dlock_observe_stop()
 * before the client is closed. Returns DLOCK_OK; DLOCK_EINVAL;
 * DLOCK_ENOTSUP; DLOCK_ENOMEM; DLOCK_EINTERNAL (no thread). Thread-safe.
 */
int dlock_observe(dlock_client *client, const char *name, size_t name_len, dlock_observe_fn fn, void *arg,
                  dlock_observer **out);

/* Stops an observer and frees it: when it returns, fn is not running and
 * is not called again. Not from fn itself. NULL is ignored. */
void dlock_observe_stop(dlock_observer *observer);

/* ---- inspection and configuration checks ---------------------------------- */

/* What dlock_status() reports about a name. The caller sets version
 * (DLOCK_STATUS_INFO_INIT does), and the library fills the fields that
 * version has, no more: later versions only append fields, so a program
 * built against an older header keeps working with a newer library. */
#define DLOCK_STATUS_INFO_VERSION 1
typedef struct dlock_status_info {
    unsigned version;       /* DLOCK_STATUS_INFO_VERSION, set by the caller */
    int held;               /* 1 held by someone, 0 free, -1 unknown */
    uint64_t fence;         /* last fencing token granted, 0 if unknown */
    int64_t holder_pid;     /* holder process id where the backend knows it, else -1 */
    int64_t ttl_ms;         /* remaining lease on the backend, -1 if unknown or none */
    char holder[96];        /* holder description (owner id), "" if unknown */
} dlock_status_info;

#define DLOCK_STATUS_INFO_INIT { DLOCK_STATUS_INFO_VERSION, 0, 0, 0, 0, { 0 } }

/*
 * Looks at the lock NAME on the backend without taking it, into *out,
 * whose version the caller set (DLOCK_STATUS_INFO_INIT). Returns DLOCK_OK,
 * DLOCK_ENOTSUP (the backend cannot tell), backend errors, DLOCK_EINVAL
 * (a bad name, out NULL, or a version this library does not know: 0 is
 * refused, so an uninitialised struct is caught). Thread-safe.
 */
int dlock_status(dlock_client *client, const char *name, size_t name_len,
                 dlock_status_info *out);

/* One holder of a listed name, as far as the backend knows it. */
typedef struct dlock_list_holder {
    const char *owner;      /* owner id (see dlock_provider_lock.owner), "" if unknown */
    int64_t pid;            /* holder process id, -1 if unknown */
    const char *host;       /* holder host, "" if unknown */
    uint64_t fence;         /* fencing token of this hold, 0 if unknown */
    int64_t lease_left_ms;  /* remaining lease on the backend, -1 if unknown or none */
    int64_t age_ms;         /* how long the hold has existed, -1 if unknown */
} dlock_list_holder;

/* One name that is held or waited for, as dlock_list() reports it. Every
 * pointer in it (name, holders and their strings) is valid only during the
 * callback: copy what you keep. */
typedef struct dlock_list_entry {
    const char *name;       /* name bytes; a NUL follows them, but the name is name_len bytes */
    size_t name_len;
    unsigned kind;          /* DLOCK_MODE_EXCLUSIVE, _SHARED or _SEMAPHORE */
    unsigned permits;       /* a semaphore's number of permits, else 0 */
    int64_t holder_count;   /* holders now (0: only waited for), -1 if unknown */
    const dlock_list_holder *holders; /* the n_holders holders the backend can describe */
    size_t n_holders;       /* <= holder_count; may be fewer (local shared holds are anonymous) */
    uint64_t fence;         /* latest fencing token granted on the name, 0 if unknown */
    int64_t lease_left_ms;  /* longest remaining lease of a holder, -1 if unknown or none */
    int64_t age_ms;         /* age of the oldest hold, -1 if unknown */
    int64_t waiters;        /* requests waiting for the name, -1 if unknown */
} dlock_list_entry;

/* Receives each entry of a dlock_list() page. Return DLOCK_OK to go on;
 * any other value stops the listing and dlock_list() returns it. Must not
 * call dlock_list() on the same client. */
typedef int (*dlock_list_fn)(const dlock_list_entry *entry, void *arg);

/*
 * Lists the names under the client's prefix that are held or waited for,
 * whose names start with the prefix_len bytes of prefix (NULL or 0: all),
 * one page per call, without taking or waiting for anything. fn gets each
 * entry of the page in turn, at most limit (>= 1) of them. cursor is NULL
 * for the first page and then the *next_cursor of the page before.
 *
 * *next_cursor gets a malloc()ed, NUL-terminated, printable cursor for the
 * next page (free() it), or NULL when the listing is complete. A page may
 * hold fewer than limit entries, even none, and still have a next cursor
 * (a backend reads a bounded slice per call). Over a listing, a name that
 * is held or waited for from its start to its end is reported once (redis
 * may report one twice if its keyspace is resized meanwhile); one that
 * comes or goes meanwhile may or may not be. Entries are a snapshot per
 * name, not of the whole backend.
 *
 * Returns DLOCK_OK; DLOCK_EINVAL (no fn or next_cursor, limit 0, a cursor
 * this backend did not make); DLOCK_ENOTSUP (the backend cannot list:
 * dlock_errmsg() says so); what fn returned when it stopped the listing
 * (*next_cursor is then NULL); backend errors. Thread-safe.
 */
int dlock_list(dlock_client *client, const char *prefix, size_t prefix_len, const char *cursor,
               size_t limit, dlock_list_fn fn, void *arg, char **next_cursor);

/*
 * An operator's forced release of NAME, for a lock whose holder is stuck:
 * every hold of the name (the exclusive holder, or all shared or permit
 * holders) is removed on the backend and its fence counter is raised, so
 * the next grant's token is higher than any the old holders have and a
 * fenced resource refuses their late writes once the next holder has
 * written. The old holders learn of it at their next renewal (on_lost,
 * DLOCK_ELOST). Waiters are woken. This is not a release: the old holder
 * may still be running, so use it only for holders known to be stuck, on
 * resources that check the fence.
 *
 * *broken (may be NULL) gets 1 when the name was held, 0 when it was free
 * (nothing was changed); *fence (may be NULL) the backend's fence counter
 * afterwards (0 if unknown). Logged at DLOCK_LOG_WARN on the client's log.
 * Returns DLOCK_OK; DLOCK_EINVAL; DLOCK_ENOTSUP when the backend cannot do
 * it safely (dlock_errmsg() says why: local, whose kernel locks belong to
 * the holding process); backend errors. Thread-safe.
 */
int dlock_break(dlock_client *client, const char *name, size_t name_len, int *broken, uint64_t *fence);

/* One finding of dlock_config_check(). file and msg are valid during the call. */
typedef void (*dlock_config_report_fn)(int is_error, const char *file, int line,
                                       const char *msg, void *arg);

/*
 * Checks a configuration file without connecting to anything: syntax, unknown
 * settings, wrong types and ranges, the backend name, and each backend group
 * whose module can be loaded. Every finding is passed to report (which may be
 * NULL). Returns DLOCK_OK when there are no errors (warnings allowed),
 * DLOCK_ECONFIG otherwise, DLOCK_EINVAL for a NULL path. Thread-safe.
 */
int dlock_config_check(const char *config_path, dlock_config_report_fn report, void *arg);

/* ---- fence guards ---------------------------------------------------------- */

/*
 * The guard a resource kept in this process puts in front of each write made
 * under a lock: admits a write carrying `token` (from dlock_fence()) if it is
 * at least the highest token admitted so far (one holder may write several
 * times), raising *highest; otherwise returns DLOCK_ESTALE and the write must
 * be dropped: a newer holder has written since, and this one's hold had
 * ended (a pause, an expiry) without it knowing. Start *highest at 0.
 * Atomic on *highest; thread-safe. DLOCK_EINVAL for a NULL pointer.
 *
 * For a resource in Redis, run DLOCK_FENCE_REDIS_SET_SCRIPT (dlock/fence.h);
 * in SQL, make the write `... WHERE fence <= $token` and raise the stored
 * fence in the same statement (see libdlock(3), FENCING).
 */
int dlock_fence_admit(uint64_t *highest, uint64_t token);

/* The library version as "MAJOR.MINOR.PATCH"; static. */
const char *dlock_version(void);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
