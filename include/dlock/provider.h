/*
 * dlock/provider.h - libdlock backend-author API.
 *
 * A backend is a `struct dlock_provider`: a versioned table of operations in
 * the manner of sqlite3_vfs. The core owns everything that is not protocol:
 * the acquire loop and its deadlines, backoff, waiting and cancellation,
 * reentrancy, the watchdog, validity and the lost path, metrics. A provider
 * only performs single operations against its coordination system.
 *
 * A backend is shipped as a module, dlock_<name>.so, in libdlock's module
 * directory (or a directory listed in $DLOCK_MODULE_PATH). It exports one
 * function, DLOCK_MODULE_ENTRY, which returns its provider. A provider can
 * also be registered in-process with dlock_provider_register().
 *
 * Versioning: members are only ever appended. A provider states the version
 * it was written against in `version`; the core reads no member past what
 * that version defines and refuses versions it does not know.
 *
 * The rules the versions follow from now on:
 *   - A version is an ABI epoch, not a feature counter: it is bumped at
 *     most once per release, however many members that release appends.
 *     Versions 2 to 4 came before the first release and stay as they are.
 *   - A struct the core allocates and the provider fills (dlock_grant,
 *     dlock_status_info through DLOCK_CTL_STATUS), or an array the core
 *     walks by its stride (dlock_setting_spec), grows only with a bump: an
 *     older provider was compiled with the shorter layout. (dlock_grant's
 *     lease_ms and valid_ms were appended without one, before any module
 *     was published; the core zero-fills the struct, so a provider that
 *     never writes them reads as "the whole lease".)
 *   - A struct the provider allocates and the core only reads up to what
 *     the provider's version defines (this table) grows by appending.
 *   - A capability that needs a member is refused at load without it, with
 *     a message that names the module (dlock__provider_check): RENEW needs
 *     renew, NATIVE_WAIT wait, DOWNGRADE downgrade. A member without its
 *     capability is allowed and never called (an instance may claim less
 *     than its module, through DLOCK_CTL_CAPABILITIES).
 */
#ifndef DLOCK_PROVIDER_H
#define DLOCK_PROVIDER_H

#include <dlock.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLOCK_PROVIDER_VERSION_1 1
/* Version 2: shared holds and semaphores (dlock_provider_lock.mode and
 * .permits, DLOCK_CAP_SHARED and DLOCK_CAP_SEMAPHORE). A version 1
 * provider is never asked for them. */
#define DLOCK_PROVIDER_VERSION_2 2
/* Version 3: listing the names that are held or waited for
 * (dlock_provider.list). A version 1 or 2 provider is reported as unable
 * to list. */
#define DLOCK_PROVIDER_VERSION_3 3
/* Version 4: turning an exclusive hold into a shared one in place
 * (dlock_provider.downgrade, DLOCK_CAP_DOWNGRADE). A provider before it is
 * reported as unable to downgrade. */
#define DLOCK_PROVIDER_VERSION_4 4
/* Version 5: waiting without a thread, for the non-blocking API
 * (dlock_provider.wait_arm and .wait_disarm). A provider before it, or one
 * without them, waits through wait on one of the core's pool threads, a
 * slice at a time. */
#define DLOCK_PROVIDER_VERSION_5 5
/* Version 6: leader election (dlock_provider.value_put and .leader_get,
 * DLOCK_CAP_ELECTION; .watch_open, .watch_consume and .watch_close for
 * observers), and an attempt's round trip without a thread
 * (.acquire_send, .acquire_recv and .acquire_drop). A provider before it
 * is reported as unable to elect, and its attempts take a pool thread. */
#define DLOCK_PROVIDER_VERSION_6 6
/* Version 7: a release's round trip without a thread (.release_send,
 * .release_recv and .release_drop), and DLOCK_CAP_IN_PROCESS. A provider
 * before it releases on one of the core's pool threads, and the bit is
 * ignored. */
#define DLOCK_PROVIDER_VERSION_7 7
/* Version 8: lock caching (DLOCK_CAP_CACHE): a holder is told that
 * another owner asks for its name (.watch_wanted and .unwatch_wanted,
 * dlock_provider_env.wanted). A provider before it keeps no released
 * holds: the bit is ignored. */
#define DLOCK_PROVIDER_VERSION_8 8
#define DLOCK_PROVIDER_VERSION DLOCK_PROVIDER_VERSION_8

/* Name of the function a module exports; see dlock_module_entry_fn. */
#define DLOCK_MODULE_ENTRY "dlock_module_provider"

struct dlock_provider;

/* The module entry point. core_version is the highest DLOCK_PROVIDER_VERSION
 * the loading core understands; return NULL to refuse. */
typedef const struct dlock_provider *(*dlock_module_entry_fn)(unsigned core_version);

/* Declares a module's entry point for its provider table, in one line at
 * file scope:  DLOCK_MODULE(my_provider)
 * It offers the table to any core that understands the version the table
 * was written for (core_version >= table.version) and refuses older ones. */
#define DLOCK_MODULE(provider_table)                                                  \
    const struct dlock_provider *dlock_module_provider(unsigned core_version);        \
    const struct dlock_provider *dlock_module_provider(unsigned core_version)         \
    {                                                                                 \
        return core_version >= (provider_table).version ? &(provider_table) : NULL;   \
    }

/* ---- settings: a backend's configuration group ----------------------------- */

enum dlock_setting_type {
    DLOCK_SETTING_STRING = 1,
    DLOCK_SETTING_INT = 2,         /* 64-bit integer */
    DLOCK_SETTING_BOOL = 3,
    DLOCK_SETTING_STRING_LIST = 4  /* ( "a", "b" ) or [ "a", "b" ] */
};

/* One setting a provider accepts in its group. The core rejects unknown
 * settings and wrong types (with file and line) before open() is called. */
struct dlock_setting_spec {
    const char *name;
    enum dlock_setting_type type;
    int64_t min, max;   /* inclusive range for DLOCK_SETTING_INT; both 0 = any */
};

/* A read-only view of one backend group, valid during open() only. */
typedef struct dlock_settings dlock_settings;

/* Each getter returns 1 and stores the value when the setting is present, 0
 * when absent (the out value is left untouched, so preset the default).
 * Types were checked against the provider's spec before open(). Strings are
 * valid during open() only: copy what you keep. */
int dlock_settings_string(const dlock_settings *s, const char *name, const char **out);
int dlock_settings_int(const dlock_settings *s, const char *name, int64_t *out);
int dlock_settings_bool(const dlock_settings *s, const char *name, int *out);
/* Number of elements of a string list (0 if absent); element i, NULL past the end. */
size_t dlock_settings_list_count(const dlock_settings *s, const char *name);
const char *dlock_settings_list_item(const dlock_settings *s, const char *name, size_t i);
/* "file:line" of a setting (or of the group when name is NULL), for error
 * messages about values; static per thread, valid until the next call. */
const char *dlock_settings_where(const dlock_settings *s, const char *name);

/* What open() receives besides its group. */
struct dlock_provider_lock;

struct dlock_provider_env {
    const dlock_settings *settings; /* the backend's group; empty if absent */
    const char *prefix;             /* top-level `prefix`, e.g. "dlock:" */
    int64_t default_lease_ms;       /* top-level `lease_ms` */
    void *log_handle;               /* pass to dlock_provider_log() */
    /* Version 8 (DLOCK_CAP_CACHE): tells the core that another owner asks
     * for lk's name, busy or waiting, while lk->owner holds it, or that
     * such a request may have gone unheard (a lost connection or
     * subscription). Only for a lock between watch_wanted and
     * unwatch_wanted. Thread-safe, never blocks, never calls the provider,
     * and may be called with the provider's own mutexes held. */
    void (*wanted)(struct dlock_provider_lock *lk);
};

/* ---- per-lock state --------------------------------------------------------- */

/*
 * One lock name as the core presents it to the provider. The core allocates
 * it, zero-fills priv (lock_priv_size bytes) before the first call, and
 * guarantees that at most one operation on a given dlock_provider_lock runs
 * at a time (a holder's release and the watchdog's renewal never overlap).
 * acquire is always the first call on a lock: release, renew, renew_batch,
 * fence, wait, abandon and lock_fini are only ever called for a lock that
 * acquire was called on, so per-lock state can be set up there once
 * (lock_fini must still cope with an acquire that failed part-way).
 * Different locks may be operated on concurrently from different threads.
 */
struct dlock_provider_lock {
    const char *name;     /* name bytes, NUL-terminated for convenience */
    size_t name_len;      /* the name may contain any byte but NUL */
    const char *owner;    /* printable id of the owning (client, thread):
                           * "<32 hex digits of 128 random bits>:<thread no>",
                           * and "/<holder no>" after it for a shared or
                           * semaphore hold (one per handle); set before
                           * acquire, constant during a hold */
    int64_t lease_ms;     /* lease to grant or renew, > 0 */
    void *priv;           /* lock_priv_size bytes of provider state */
    unsigned flags;       /* DLOCK_LOCK_* of the acquiring handle (set before acquire) */
    /* --- version 2 (the core sets them for every provider; only a version 2
     * provider with the capability is ever asked for more than exclusive) --- */
    unsigned mode;        /* DLOCK_MODE_* of this hold: set before acquire;
                           * DLOCK_MODE_SHARED after a successful downgrade
                           * for the rest of that hold (renew, release, fence
                           * and give-back then treat it as shared), and
                           * DLOCK_MODE_EXCLUSIVE again before the next acquire */
    unsigned permits;     /* DLOCK_MODE_SEMAPHORE: the name's number of permits */
};

/* What a successful or busy acquire reports. */
struct dlock_grant {
    uint64_t fence;         /* on grant: the fencing token, if has_fence */
    int has_fence;
    int64_t retry_hint_ms;  /* on busy: holder's remaining lease if known, else -1.
                             * On DLOCK_EUNAVAILABLE: >= 0 says the failure is
                             * a passing state of the server (a cluster between
                             * two states) and the core may try again after
                             * that many ms, within the caller's wait budget
                             * and cancellably; leave it -1 otherwise. */
    /* On grant, optional: the lease the server really grants when it is
     * shorter than lk->lease_ms (a ZooKeeper session the server clamped,
     * say). The core then measures validity, renews and declares loss by
     * this lease, never by the longer one asked for. 0 (the core's preset)
     * means lk->lease_ms was granted. Appended after version 1 was
     * published: the core zero-fills the struct, so older providers that
     * never write it are unaffected. */
    int64_t lease_ms;
    /* On grant, optional: how much of the lease is known to be left, when
     * the grant rides on a server lease this attempt did not refresh (one
     * lease shared by many holds, last refreshed by a request whose
     * dlock_provider_stamp_ms() was S: report S + the server's TTL - now).
     * The core then counts this hold valid for that long from the attempt's
     * start, renews it sooner, and goes back to the full lease after the
     * first renewal. 0 (the core's preset) means the whole lease is left;
     * a negative value means nothing is. Appended like lease_ms. */
    int64_t valid_ms;
    /* On grant, optional (DLOCK_CAP_CACHE): nonzero when other owners are
     * known to be waiting for the name already, so that the core does not
     * keep this hold after its release: a waiter's request may have been
     * answered before this grant, and a kept hold would let this client
     * take the name again and again while it waits. Appended like
     * lease_ms. */
    int others_waiting;
};

/* Arguments of DLOCK_CTL_STATUS. out arrives zeroed, with held,
 * holder_pid and ttl_ms at -1 (unknown): the provider sets what it knows
 * (held to 0 or 1 at least). */
struct dlock_ctl_status {
    const char *name;
    size_t name_len;
    dlock_status_info *out;
};

enum dlock_ctl_op {
    DLOCK_CTL_STATUS = 1,       /* arg: struct dlock_ctl_status * */
    /* arg: unsigned *, the module's capabilities on entry: clear the bits
     * this instance lacks (a mode chosen in the configuration that cannot
     * keep them). Asked once, right after open. */
    DLOCK_CTL_CAPABILITIES = 2,
    /* arg: int64_t *, 0 on entry: how long after another owner's request
     * a keeper hears of it, on average, in microseconds, beyond what the
     * core measures itself (which starts at env->wanted): a backend that
     * polls for requests reports half its interval. The core counts it in
     * what a request for a kept hold costs (lock caching). Asked once,
     * right after open; DLOCK_ENOTSUP, or 0, for a backend told by push. */
    DLOCK_CTL_HEARING_DELAY = 3
};

/* What dlock_provider.list receives: one page of a listing. */
struct dlock_provider_list {
    const char *prefix;     /* names starting with these bytes; "" (len 0) for all */
    size_t prefix_len;
    const char *cursor;     /* NULL: from the start; else a next_cursor this provider made */
    size_t limit;           /* emit at most this many entries, >= 1 */
    /* Hands one entry to the caller; everything e points to need only live
     * during the call. A non-zero result means stop: return it at once. */
    int (*emit)(const dlock_list_entry *e, void *emit_arg);
    void *emit_arg;
    /* Set by the provider: a malloc()ed NUL-terminated printable cursor for
     * the next page, or NULL (the core's preset) when the listing is done. */
    char *next_cursor;
};

/* What dlock_provider.leader_get reads: arrives zeroed. */
struct dlock_provider_leader {
    uint64_t holder_term;   /* fencing token of the current exclusive hold, 0 if none */
    uint64_t value_term;    /* term stored with the value, 0 if none */
    void *value;            /* malloc()ed bytes of the value, NULL if value_len is 0 */
    size_t value_len;
};

/* What acquire_recv answers while an attempt's answer is not whole yet:
 * not an error code (those are negative), never returned to a caller. */
#define DLOCK_PROVIDER_AGAIN 1

/* An attempt in flight (dlock_provider.acquire_send): filled by the
 * provider, kept by the core until acquire_recv or acquire_drop. */
struct dlock_provider_io {
    int fd;                 /* readable when the answer may have come */
    int64_t timeout_ms;     /* how long to wait for it, > 0 */
    void *priv;             /* the provider's, for the calls that follow */
};

/* ---- the provider table ---------------------------------------------------- */

struct dlock_provider {
    /* --- version 1 --- */
    unsigned version;          /* DLOCK_PROVIDER_VERSION the provider was written for */
    const char *name;          /* backend name, [a-z0-9_]+, as used in `backend = "..."` */
    unsigned capabilities;     /* DLOCK_CAP_* */
    size_t lock_priv_size;     /* bytes of per-lock state (priv), may be 0 */
    const struct dlock_setting_spec *settings; /* accepted settings, {NULL} terminated */

    /* Required. Creates an instance from the configuration. *instance is
     * passed to every other call. May connect now or lazily. Errors:
     * DLOCK_ECONFIG (a value is wrong: say which, with dlock_settings_where),
     * DLOCK_EUNAVAILABLE, DLOCK_ENOMEM; set the detail with dlock_seterr(). */
    int (*open)(void **instance, const struct dlock_provider_env *env);

    /* Required. Frees the instance; every lock has been through lock_fini. */
    void (*close)(void *instance);

    /* Required. ONE attempt to grant lk to lk->owner for lk->lease_ms: a
     * bounded number of round trips, never a sleep and never a retry of a
     * failed request. The round trips an attempt may take beside its
     * request: setting up the notification it will wait for and looking
     * once more after it (so a release in between is not missed: redis
     * SUBSCRIBE, postgres LISTEN), and what keeps its state honest (an etcd
     * keepalive, deleting a key of its own it finds in the way). It may
     * also answer DLOCK_EBUSY without a request at all, when it is not this
     * request's turn in a fair line. The core counts every call as one
     * attempt (dlock_attempts_total).
     * DLOCK_OK: granted (fill grant->fence where the backend has fences).
     * DLOCK_EBUSY: held by another owner, or not our turn (fill
     * grant->retry_hint_ms if known).
     * Anything else: a failure the core returns to the caller.
     * The core never calls acquire for a name this owner already holds. */
    int (*acquire)(void *instance, struct dlock_provider_lock *lk, struct dlock_grant *grant);

    /* Required. Releases lk's hold if lk->owner still owns it; never deletes
     * another owner's hold. DLOCK_OK, DLOCK_ENOTOWNER (gone or taken). */
    int (*release)(void *instance, struct dlock_provider_lock *lk);

    /* Required with DLOCK_CAP_RENEW. Extends lk's hold to lk->lease_ms from
     * now if lk->owner still owns it. DLOCK_OK, DLOCK_ELOST, other failures. */
    int (*renew)(void *instance, struct dlock_provider_lock *lk);

    /* Optional. Reads the fencing token of lk's current hold from the backend
     * (the core normally keeps the one acquire returned). */
    int (*fence)(void *instance, struct dlock_provider_lock *lk, uint64_t *out);

    /* Optional. Renews n holds in as few round trips as possible; results[i]
     * gets what renew would have returned for locks[i]. Returns DLOCK_OK when
     * results were filled, DLOCK_ENOTSUP when this server cannot batch (the
     * core then calls renew for each), otherwise a failure that applies to
     * all. */
    int (*renew_batch)(void *instance, struct dlock_provider_lock *const *locks, size_t n,
                       int *results);

    /* Optional (native waiting). Blocks until a release of lk is signalled,
     * timeout_ms passes, or wake_fd becomes readable (the core's cancel
     * signal: poll it, never read it). Returns DLOCK_OK (woken or notified:
     * the core retries), DLOCK_ETIMEDOUT, or a failure. Called only after an
     * acquire of lk returned DLOCK_EBUSY; arrange in acquire that a release
     * between that answer and this call is not missed. */
    int (*wait)(void *instance, struct dlock_provider_lock *lk, int64_t timeout_ms, int wake_fd);

    /* Optional. Frees whatever lk->priv refers to (connections, fds). Called
     * once per lock, after its last operation. */
    void (*lock_fini)(void *instance, struct dlock_provider_lock *lk);

    /* Optional escape hatch: DLOCK_CTL_* operations. Return DLOCK_ENOTSUP for
     * operations you do not implement. */
    int (*ctl)(void *instance, int op, void *arg);

    /* Optional. The core stopped trying to acquire lk without a grant
     * (timeout, cancel, failure) after acquire had answered busy: leave a
     * wait queue, drop a subscription. Errors are ignored. */
    void (*abandon)(void *instance, struct dlock_provider_lock *lk);

    /* --- version 3 --- */

    /* Optional. One page of the names under env->prefix that are held or
     * waited for and start with req->prefix: at most req->limit calls of
     * req->emit, then req->next_cursor. One bounded request sequence that
     * neither blocks the backend (no KEYS, no locks taken) nor waits; fewer
     * entries than the limit, even none, with a next cursor is fine. A name
     * is emitted in one page only over a listing whose names stay put.
     * DLOCK_OK, DLOCK_EINVAL (a cursor this provider did not make), the
     * emit's non-zero result, DLOCK_ENOTSUP (this deployment cannot list:
     * say why), backend failures. */
    int (*list)(void *instance, struct dlock_provider_list *req);

    /* Optional. An operator's forced release of NAME (see dlock_break):
     * remove every hold of the name in one atomic step, raise its fence
     * counter by at least one, wake a waiter. *broken: 1 if it was held, 0
     * if free; *fence: the counter afterwards, 0 if unknown. DLOCK_OK,
     * DLOCK_ENOTSUP (this deployment cannot do it safely: say why),
     * backend failures. */
    int (*break_hold)(void *instance, const char *name, size_t name_len, int *broken, uint64_t *fence);

    /* --- version 4 --- */

    /* Required with DLOCK_CAP_DOWNGRADE. lk (mode DLOCK_MODE_EXCLUSIVE) is
     * held by lk->owner: in ONE atomic step on the server, turn that hold
     * into a shared hold of the same owner, so that there is no moment when
     * the name is free or held by anyone else, and other shared requests may
     * come in from then on (wake the waiters that now can). The hold keeps
     * its lease, its place and its fencing token (draw no new one: where
     * tokens are places in a queue, a new one would be above the tokens of
     * writers already waiting, whose turn comes later); waiting exclusive
     * requests keep their places. On DLOCK_OK the core sets lk->mode to
     * DLOCK_MODE_SHARED. A hold of lk->owner that is already shared (a
     * resent request whose first answer was lost) is answered DLOCK_OK too.
     * DLOCK_ELOST: lk->owner no longer holds the name (nothing was
     * changed). DLOCK_ENOTSUP, DLOCK_EINVAL, DLOCK_ENOMEM, DLOCK_EINTERNAL:
     * refused before anything was sent (the hold stays exclusive, the core
     * keeps it). Other failures: the core cannot tell whether the change
     * was made, and gives the hold up. */
    int (*downgrade)(void *instance, struct dlock_provider_lock *lk);

    /* --- version 5 --- */

    /* Optional, both or neither: wait cut in two so that no thread blocks
     * while a request waits (the non-blocking API parks the request on a
     * descriptor instead). Called where wait would be, never with wait for
     * the same request in between.
     *
     * wait_arm does what wait does before it blocks (registers for the
     * notification, sets a watch, keeps a waiter's lease alive, joins a
     * line: bounded round trips, never a sleep) and stores in *fd a
     * descriptor that becomes readable (POLLIN) when wait would have
     * returned DLOCK_OK, and stays readable until wait_disarm; -1 when
     * there is nothing to watch (the core then looks again after
     * *timeout_ms). *timeout_ms arrives as the timeout wait would have had;
     * lower it to be called back sooner. The core polls *fd and never reads
     * it. Returns DLOCK_OK (armed: wait_disarm follows, exactly once),
     * DLOCK_ENOTSUP (this request cannot be parked now: the core calls wait
     * instead, nothing to disarm), or a failure as wait's (nothing to
     * disarm).
     *
     * wait_disarm ends an armed wait: after *fd polled readable (fired 1),
     * after the timeout or when the core stopped waiting (fired 0). It
     * waits for nothing: it consumes what fired, undoes what arm set up,
     * and returns what wait would have: DLOCK_OK (look again),
     * DLOCK_ETIMEDOUT (nothing came), or a failure; or, only when fired,
     * DLOCK_EBUSY: what came does not end the wait (a part of a message,
     * a change that frees nothing, one of several messages it gathers), so
     * the wait stays armed and the core polls the same descriptor again
     * for *timeout_ms more, then calls wait_disarm again (with fired 0 when
     * that time is over or the core must end the wait, a cancel: at fired
     * 0 it ends the wait, and may still answer DLOCK_OK to have the core
     * look). *timeout_ms arrives as the time left of the armed wait; lower
     * it to end the continued wait sooner. */
    int (*wait_arm)(void *instance, struct dlock_provider_lock *lk, int64_t *timeout_ms, int *fd);
    int (*wait_disarm)(void *instance, struct dlock_provider_lock *lk, int fired, int64_t *timeout_ms);

    /* --- version 6 --- */

    /* Required with DLOCK_CAP_ELECTION (which also needs DLOCK_CAP_FENCE):
     * the value a leader publishes beside its exclusive hold.
     *
     * value_put stores term and the len bytes of value (len may be 0) as
     * lk's name's value, replacing the one before, if and only if
     * lk->owner holds the name exclusively, with the hold whose fencing
     * token is term, when the server applies it (one atomic step: a
     * script, a transaction, a conditional write; a late put of an
     * earlier hold of the same owner must fail), and wakes the name's
     * watchers (watch_open). The core calls it only while that hold is in
     * place, with op_mu held. Returns DLOCK_OK; DLOCK_ELOST (lk->owner does not hold the
     * name: nothing was stored); other failures (it may or may not have
     * been stored; the core reads the term back before trusting it). */
    int (*value_put)(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value,
                     size_t len);
    /* leader_get reads, in one consistent read where the backend has one,
     * the fencing token of the name's current exclusive hold into
     * out->holder_term (0 when it is not held exclusively) and its stored
     * value: out->value_term (0 when there is none), out->value (malloc()ed,
     * NULL when value_len is 0; the core frees it). The core reports a
     * leader only when both terms are equal and not 0, so a value left by
     * an earlier holder is never shown as the current one's. Returns
     * DLOCK_OK or a failure (out->value then NULL). */
    int (*leader_get)(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out);

    /* Optional, all three or none: a descriptor for observers. watch_open
     * stores in *fd one that becomes readable (POLLIN) when the name's
     * holder or value may have changed (a grant, a value_put, a release,
     * a break; an expiry where the server tells of it; a reconnect, when
     * notifications may have been missed) and in *watch its state. The
     * core polls *fd, then calls watch_consume, which reads what fired
     * without blocking (DLOCK_OK, or a failure: the core closes the watch
     * and opens another), and then reads the state with leader_get; it
     * also reads it at least once a lease, in case a notification was
     * lost. watch_close undoes watch_open. Without them the core reads the
     * state every retry_cap_ms. Any thread, one call per watch at a time. */
    int (*watch_open)(void *instance, const char *name, size_t name_len, void **watch, int *fd);
    int (*watch_consume)(void *instance, void *watch);
    void (*watch_close)(void *instance, void *watch);

    /* Optional, all three or none: acquire cut in two around its round
     * trip, so that the non-blocking API parks an attempt in flight on a
     * descriptor instead of a thread. Called where acquire would be, by
     * the name's contender only, with the same guarantees.
     *
     * acquire_send does what acquire does up to the answer: it sends the
     * attempt without waiting for it, and without waiting for a
     * connection (the core may call it on the application's event loop:
     * answer DLOCK_ENOTSUP rather than block; only the write of a request
     * that fits the socket's buffer is allowed, and a connect only where
     * the client library starts one without blocking, as libcurl's multi
     * interface does). What an attempt in
     * flight holds (a connection) may come back only when the application's
     * loop reads the answer: leave the blocking calls room (redis sends
     * from at most half its pool), or a loop that blocks in one of them
     * waits for good. It fills *io: io->fd becomes readable (POLLIN, or
     * POLLHUP/POLLERR) when the answer may have come; io->timeout_ms is how
     * long the core waits for it. Returns DLOCK_OK (in flight: acquire_recv
     * or acquire_drop follows), DLOCK_ENOTSUP (this attempt cannot go so
     * now: nothing was sent, the core calls acquire instead), or a failure
     * as acquire's (nothing in flight).
     *
     * acquire_recv reads what has come without blocking and returns
     * DLOCK_PROVIDER_AGAIN when the answer is not whole yet (the core polls
     * io->fd again; an attempt of several requests may send the next one
     * here, without blocking, and change io->fd), or acquire's own result for the attempt, with *g filled as
     * acquire fills it; DLOCK_ENOTSUP when the answer cannot be had this way
     * (the connection failed, the server forgot a script): nothing is in
     * flight any more and the core makes the attempt again with acquire,
     * which sends it again as acquire does after a lost connection.
     *
     * acquire_drop gives up an attempt whose answer did not come within
     * io->timeout_ms: it closes what carried it (the attempt may have run:
     * a grant it made runs out with its lease, as after a command timeout
     * in acquire). The core then reports DLOCK_EUNAVAILABLE. */
    int (*acquire_send)(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
    int (*acquire_recv)(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                        struct dlock_grant *g);
    void (*acquire_drop)(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);

    /* --- version 7 --- */
    /* Optional, all three or none: release cut in two around its round
     * trip, as acquire_send, acquire_recv and acquire_drop cut acquire, with
     * the same rules for sending (never block, never connect, leave the
     * blocking calls room). Called where release would be.
     *
     * release_send returns DLOCK_OK (in flight: release_recv or
     * release_drop follows), DLOCK_ENOTSUP (nothing was sent: the core calls
     * release instead), or a failure as release's (nothing in flight).
     *
     * release_recv returns DLOCK_PROVIDER_AGAIN (not whole yet), release's
     * own result, or DLOCK_ENOTSUP: the answer cannot be had this way and
     * nothing is in flight any more; the core then calls release, which
     * must answer as it does after sending again on a fresh connection (a
     * hold found gone because the first sending ran is DLOCK_OK, not
     * DLOCK_ENOTOWNER).
     *
     * release_drop gives up a release whose answer did not come within
     * io->timeout_ms (the hold, if it was not released, runs out with its
     * lease); the core reports DLOCK_EUNAVAILABLE. */
    int (*release_send)(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
    int (*release_recv)(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
    void (*release_drop)(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);

    /* --- version 8 --- */
    /* Required with DLOCK_CAP_CACHE. Called after the first grant of an
     * exclusive hold of lk that the core may keep after its release: from
     * now until unwatch_wanted, across lk's later holds too, whenever the
     * backend refuses lk's name to another owner because this client holds
     * it (a busy answer, a try included), call env->wanted(lk) promptly;
     * and call it for every watched lock whenever such a request may have
     * been missed. The core ignores calls between holds. May wait for the
     * server once, for the watch to be in place (a request made before it
     * would go unheard). DLOCK_OK; anything else and the hold is released
     * as usual rather than kept. */
    int (*watch_wanted)(void *instance, struct dlock_provider_lock *lk);
    /* Ends watch_wanted's promise; after it returns, env->wanted is not
     * called for lk. Called before lock_fini (the name's last handle
     * freed, or the client closed), with no hold of lk. */
    void (*unwatch_wanted)(void *instance, struct dlock_provider_lock *lk);
};

/*
 * Registers a provider in this process, under p->name, after the same checks
 * the module loader applies. p must stay valid for the life of the process.
 * Returns DLOCK_OK, DLOCK_EINVAL (bad table: see dlock_errmsg()), or
 * DLOCK_EINVAL when a different provider of that name is already registered.
 * Thread-safe.
 */
int dlock_provider_register(const struct dlock_provider *p);

/*
 * Sets the calling thread's detail message (see dlock_errmsg()) and returns
 * code, so a provider can write `return dlock_seterr(DLOCK_EUNAVAILABLE,
 * "redis %s:%d: %s", ...)`. Thread-safe.
 */
int dlock_seterr(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The calling thread's detail message, kept across a cleanup that may set
 * one of its own (a delete after a failed create, a release after a grant
 * that cannot be kept), as libgit2's git_error_save/git_error_restore:
 *
 *     struct dlock_saved_error saved;
 *     dlock_error_save(&saved);
 *     cleanup(...);
 *     return dlock_error_restore(&saved, rc);
 *
 * saved.text may also be quoted in a new message. Both are thread-safe
 * (each thread has its own detail). */
struct dlock_saved_error {
    char text[1024];
};
void dlock_error_save(struct dlock_saved_error *saved);
/* Makes saved the calling thread's detail again; returns code. */
int dlock_error_restore(const struct dlock_saved_error *saved, int code);

/* Milliseconds on CLOCK_MONOTONIC, for the deadline of one call (a connect,
 * a command, a wait). Never for validity or expiry: those are the core's
 * (and the server's, on the server's clock). Thread-safe. */
int64_t dlock_provider_now_ms(void);

/* Milliseconds on the clock the core measures validity on (CLOCK_BOOTTIME:
 * it counts time the host spent suspended), for one purpose only: a
 * provider that shares one server lease among many holds notes the stamp
 * before each request that refreshes it, so that a later grant on it can
 * report what is left in dlock_grant.valid_ms. Thread-safe. */
int64_t dlock_provider_stamp_ms(void);

/* The allowance for clock drift between client and server that the core
 * takes off every validity (the Redlock rule), for a provider that must
 * reckon validity itself (a majority's grant). */
static inline int64_t dlock_provider_drift_ms(int64_t lease_ms)
{
    return lease_ms / 100 + 2;
}

/* Logs through the client's sink (see dlock_client_set_log()). */
void dlock_provider_log(void *log_handle, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_PROVIDER_H */
