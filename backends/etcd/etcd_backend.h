/* backends/etcd/etcd_backend.h - what the files of the etcd module share:
 * the instance and the per-lock state, and the functions each file offers
 * the others. etcd.c is the provider's table, acquire, wait, downgrade and
 * open; etcd_txn.c the keys of a name and the transactions on them;
 * etcd_lease.c the client's leases and the renewal of holds; etcd_release.c
 * deleting our keys, and the orphans whose delete got no answer. */
#ifndef DLOCK_ETCD_BACKEND_H
#define DLOCK_ETCD_BACKEND_H

#include "etcd_http.h"
#include "etcd_keys.h"
#include "etcd_orphans.h"

#include <dlock/provider.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_LEASES 16
#define KEY_MAX 2048

struct etcd_lease {
    int64_t ttl_s;      /* the TTL asked for */
    int64_t id;         /* 0: none (granted on the next acquire) */
    int64_t alive_until; /* dlock_provider_stamp_ms() before the last grant or
                          * keepalive that answered, plus the TTL it gave */
};

struct etcd_native;
struct etcd_channel;

struct etcd_instance {
    struct etcd_http http;
    char prefix[128];
    pthread_mutex_t lease_mu;   /* leases */
    struct etcd_lease leases[MAX_LEASES];
    struct etcd_orphans orphans; /* our keys that a delete could not reach */
    void *log_handle;
    struct etcd_native *native;  /* channels for attempts without a thread (etcd_native.c) */
    struct etcd_wanted *wanted;  /* the watches of names whose holds may be kept (etcd_wanted.c) */
};

struct etcd_lock {
    char *dir;                  /* <prefix><escaped name>/ */
    size_t dir_len;
    char *key;                  /* dir + owner */
    size_t key_len;
    char *key_b64;              /* key in base64, as the lease's key list has it */
    char owner[64];             /* the owner the key was made for */
    int64_t create_rev;         /* our key's create_revision, 0 when we have none */
    int64_t granted_rev;        /* the create_revision a grant was made on, until released */
    int64_t wanted_floor;       /* the same, set at each grant and kept after (atomic: the
                                 * watcher's thread reads it to tell a request from an older key) */
    int64_t read_at_rev;        /* the revision the last queueing's answer was read at */
    bool others_queued;         /* that answer had other keys of the name than ours */
    int64_t lease_id;           /* the lease our key is on */
    char *pred;                 /* while busy: the key just before ours */
    size_t pred_len;
    bool wait_any;              /* while busy (a permit): wait for any deletion in the name */
    bool permits_checked;       /* a semaphore: its N matches the name's */
    bool queue_unanswered;      /* our last queueing got no answer: our key may exist unknown to us */
    bool make_key_anew;         /* our key was an orphan we adopted: delete it and make a new one */
    bool key_unsettled;         /* the last queueing failed after an adoption, or got no answer */
    bool sweep_in_the_way;      /* busy because a sweep deletes our old key: wait a moment */
    bool looking;               /* the last queueing txn built only reads: our key was there */
    int64_t watch_from;         /* the revision to watch pred from */
    struct etcd_watch *watch;   /* a parked wait's watch, between wait_arm and wait_disarm */
    struct etcd_channel *native; /* an attempt in flight without a thread (etcd_native.c) */
    int native_step;            /* which of its requests */
    int64_t native_lease;       /* the lease its transaction puts our key on */
    bool release_sent_before;   /* a release's delete went out and got no answer (etcd_native.c) */
};

/* Builds (or rebuilds, when the contending thread changed) lk's keys. */
int etcd_ensure_keys(struct etcd_instance *inst, struct dlock_provider_lock *lk);

/* {"key": dir, "range_end": dir with its last byte + 1}: every key of a name. */
struct json_object *etcd_dir_range(const struct etcd_lock *el);

/* {"key": dir, "range_end": dir + "~s"}: the name's keys that keep a
 * shared request out, its exclusive keys and its permit keys (ETCD_PERMIT_MARK
 * sorts before ETCD_SHARED_MARK, and every exclusive key before both). */
struct json_object *etcd_reader_blocking_range(const struct etcd_lock *el);

/* What decides a grant, read in the same txn as the queueing: the oldest
 * key (exclusive), the N oldest keys (a permit), the two oldest keys that
 * keep a reader out, with their values (shared: the first may be a hold
 * made shared, the oldest key of the name and the only one so made, and
 * then the second is the oldest writer or permit). */
struct json_object *etcd_deciding_range(const struct dlock_provider_lock *lk, const struct etcd_lock *el);

/* {kind: request}, a txn operation; takes request. */
struct json_object *etcd_op(const char *kind, struct json_object *request);

/* The txn body of compare, success and failure (all taken). */
struct json_object *etcd_txn_of(struct json_object *compare, struct json_object *success,
                                struct json_object *failure);
/* Sends the txn of compare, success and failure (all taken). */
int etcd_send_txn(struct etcd_instance *inst, struct json_object *compare, struct json_object *success,
                    struct json_object *failure, struct json_object **reply, struct etcd_status *st);

/* The i-th response of a txn reply, of the given kind ("response_range"). */
struct json_object *etcd_txn_response(struct json_object *reply, size_t i, const char *kind);

/* The first key of a range response, or NULL when it has none. */
struct json_object *etcd_first_kv(struct json_object *range);

/* Whether an exclusive key read with its value is a hold made shared. */
bool etcd_kv_made_shared(struct json_object *kv);

/* Whether a key of lk's name (read from its range) is a permit's. */
bool etcd_kv_is_permit(const struct etcd_lock *el, struct json_object *kv);

/* The first key that keeps a reader out among a range read with values
 * (reader_blocking_range: a writer or a permit; a hold made shared is
 * neither), or NULL. */
struct json_object *etcd_first_writer(struct json_object *range);

/* A lease request whose body is one integer field ({"TTL": n}, {"ID": n}). */
int etcd_lease_call(struct etcd_instance *inst, const char *path, const char *field, int64_t value,
                      struct json_object **reply);

/* The lease for holds of lease_ms, granted now if there is none. */
int etcd_lease_for(struct etcd_instance *inst, int64_t lease_ms, int64_t *id);

/* What is left of lease id by the last answer that refreshed it (0 when
 * it is not ours or nothing is left). */
int64_t etcd_lease_left_ms(struct etcd_instance *inst, int64_t id);

/* A keepalive sent at stamp `sent` answered with ttl_s. */
void etcd_lease_refreshed(struct etcd_instance *inst, int64_t id, int64_t sent, int64_t ttl_s);

/* The lease is gone on the server (expired or revoked): forget it, so the
 * next acquire grants a new one. */
void etcd_forget_lease(struct etcd_instance *inst, int64_t id);

/* One keepalive for a lease: DLOCK_OK (alive), DLOCK_ELOST (expired or
 * revoked), or a failure. */
int etcd_keepalive(struct etcd_instance *inst, int64_t id);

/* A renewal round: for each lease the holds are on, one keepalive and one
 * look at the lease's keys, whatever the number of holds. */
int etcd_renew_batch(void *instance, struct dlock_provider_lock *const *locks, size_t n, int *results);

/* renew_batch of one hold. */
int etcd_renew(void *instance, struct dlock_provider_lock *lk);

/* Deletes key if its create_revision is create_rev (any, when 0): a
 * release sent twice, or late, never deletes a newer key of the same
 * owner. DLOCK_OK with *deleted set, or the failure (st says whether the
 * request may have reached the server). */
/* The transaction etcd_delete_key sends (the caller puts it), and
 * whether its answer says it deleted. */
struct json_object *etcd_delete_txn(const char *key, size_t key_len, int64_t create_rev);
bool etcd_txn_succeeded(struct json_object *reply);
int etcd_delete_key(struct etcd_instance *inst, const char *key, size_t key_len, int64_t create_rev, bool *deleted,
                      struct etcd_status *st);

/* Deletes our key if its create_revision is still ours. DLOCK_OK,
 * DLOCK_ENOTOWNER (no key of ours, or no longer the one we made), or the
 * failure, with el unchanged. */
int etcd_delete_own_key_reporting(struct etcd_instance *inst, struct etcd_lock *el, struct etcd_status *st);

/* Deletes the remembered orphans that are old enough (etcd_orphans.h). */
void etcd_sweep_orphans(struct etcd_instance *inst);

/* A delete that failed (not sent, not answered, or refused) leaves our key
 * on a lease that our other holds keep alive: remember it, so a sweep
 * deletes it. */
void etcd_remember_failed_delete(struct etcd_instance *inst, struct etcd_lock *el, int rc);

/* The provider's release: deletes our key; one whose delete got no answer
 * is remembered for a sweep. */
int etcd_release(void *instance, struct dlock_provider_lock *lk);

/* The provider's abandon: out of the queue now, not at the lease's end. */
void etcd_abandon(void *instance, struct dlock_provider_lock *lk);

/* An attempt's steps, shared by the blocking attempt (etcd.c) and the one
 * sent without a thread (etcd_native.c).
 *
 * etcd_queueing_txn: the txn that creates our key on lease_id unless it
 * exists, and reads what decides the grant (caller frees).
 * etcd_read_queueing: its answer read into el (our key's revision and
 * lease) and *q. */
struct etcd_queueing {
    bool created;        /* our key was made by this txn */
    bool first;          /* the deciding range grants it */
    bool consistent;     /* the answer has our key (and, but for shared requests, a first key) */
    bool stale_key;      /* our key is one that must be made anew first (etcd.c says when) */
    bool gone;           /* a look (etcd_queueing_txn) found our key gone: queue anew */
    int64_t at_revision; /* the store's revision the answer was read at */
};
struct json_object *etcd_queueing_txn(const struct dlock_provider_lock *lk, struct etcd_lock *el, int64_t lease_id);
void etcd_read_queueing(const struct dlock_provider_lock *lk, struct etcd_lock *el, struct json_object *reply,
                        int64_t lease_id, struct etcd_queueing *q);
/* A grant that the lease as last refreshed covers (two thirds of it or
 * more left): true with *g filled; false when the lease needs a keepalive
 * first. */
bool etcd_grant_if_fresh(struct etcd_instance *inst, const struct dlock_provider_lock *lk, struct etcd_lock *el,
                         struct dlock_grant *g);
/* Busy with nothing to find: a permit behind N others waits for any
 * deletion in the name (true, *g and el set); false for the others, which
 * look for their predecessor. */
bool etcd_busy_without_predecessor(const struct dlock_provider_lock *lk, struct etcd_lock *el,
                                   const struct etcd_queueing *q, struct dlock_grant *g);
/* Busy: the range request for the key just before ours that keeps us out
 * (any key for an exclusive request, an exclusive or permit one for a
 * shared request; caller frees), and the reading of its answer into
 * el->pred and el->watch_from. For a shared request the youngest older
 * exclusive key may have been made shared since the grant was decided: it
 * is then the oldest key, no writer is before us, and there is nothing to
 * wait for (el->pred NULL). */
struct json_object *etcd_predecessor_request(const struct dlock_provider_lock *lk, const struct etcd_lock *el);
void etcd_read_predecessor(const struct dlock_provider_lock *lk, struct etcd_lock *el, struct json_object *reply);
/* The lease for holds of lease_ms if the client has one, without granting
 * one: true with *id. */
bool etcd_lease_known(struct etcd_instance *inst, int64_t lease_ms, int64_t *id);

/* An attempt without a thread, for the non-blocking API (etcd_native.c):
 * the provider's acquire_send, acquire_recv and acquire_drop; and the
 * instance's channels, made at open and closed at close. */
int etcd_acquire_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int etcd_acquire_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io,
                      struct dlock_grant *g);
void etcd_acquire_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
/* A release's delete over a channel, the same way (release_send,
 * release_recv, release_drop). */
int etcd_release_send(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
int etcd_release_recv(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
void etcd_release_drop(void *instance, struct dlock_provider_lock *lk, struct dlock_provider_io *io);
void etcd_native_init(struct etcd_instance *inst);
void etcd_native_destroy(struct etcd_instance *inst);
/* Closes an attempt's channel still in flight (lock_fini). */
void etcd_native_forget(struct etcd_instance *inst, struct etcd_lock *el);

/* Elections (etcd_election.c): the provider's value_put, leader_get, and
 * watch_open, watch_consume and watch_close as etcd_observer_*. */
int etcd_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len);
int etcd_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out);
int etcd_observer_open(void *instance, const char *name, size_t name_len, void **watch, int *fd);
int etcd_observer_consume(void *instance, void *watch);
void etcd_observer_close(void *instance, void *watch);

#endif
