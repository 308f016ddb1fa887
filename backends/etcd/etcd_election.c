/* backends/etcd/etcd_election.c - elections on etcd, as its own election
 * recipe (concurrency.Election) has them: the leader is the oldest key of
 * the name's directory, its term that key's create revision. The value
 * lives beside the directory, at "<prefix><escaped name>#value" (outside
 * the directory, so it is no contender), holding "<term>:<bytes>".
 *
 * The value is put in a txn that compares the leader's own key's create
 * revision, so it is stored only while that key exists (its lease alive):
 * a leader whose lease expired, or whose key was broken, cannot. A reader
 * gets the oldest key and the value in one txn, one revision. Observers
 * watch every put and delete from the value key up to the end of the
 * directory, which covers both (and, harmlessly, names that sort between
 * them). */
#include "config.h"

#include "etcd_backend.h"
#include "etcd_keys.h"
#include "etcd_watch.h"
#include "../common/name_escape.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define VALUE_SUFFIX "#value"

/* "<prefix><escaped name>" + suffix, malloc()ed, its length in *len. */
static char *name_key(const struct etcd_instance *inst, const char *name, size_t name_len, const char *suffix,
                      size_t *len)
{
    size_t plen = strlen(inst->prefix), slen = strlen(suffix);
    char *k = malloc(plen + 3 * name_len + slen + 1);
    if (!k)
        return NULL;
    memcpy(k, inst->prefix, plen);
    size_t n = plen + name_escape(name, name_len, etcd_name_plain, k + plen);
    memcpy(k + n, suffix, slen + 1);
    *len = n + slen;
    return k;
}

int etcd_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len)
{
    struct etcd_instance *inst = instance;
    struct etcd_lock *el = lk->priv;
    if (!el->key || !el->create_rev || (uint64_t)el->create_rev != term)
        return dlock_seterr(DLOCK_ELOST, "%s: this owner has no key of term %" PRIu64 " for the election",
                            inst->http.label, term);
    size_t key_len;
    char *key = name_key(inst, lk->name, lk->name_len, VALUE_SUFFIX, &key_len);
    char *data = malloc(24 + len);
    if (!key || !data) {
        free(key);
        free(data);
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
    }
    int head = snprintf(data, 24, "%" PRIu64 ":", term);
    if (len)
        memcpy(data + head, value, len);
    struct json_object *ours = json_object_new_object();
    json_object_object_add(ours, "key", etcd_json_b64(el->key, el->key_len));
    json_object_object_add(ours, "target", json_object_new_string("CREATE"));
    json_object_object_add(ours, "create_revision", etcd_json_int_str(el->create_rev));
    struct json_object *compare = json_object_new_array();
    json_object_array_add(compare, ours);
    struct json_object *put = json_object_new_object();
    json_object_object_add(put, "key", etcd_json_b64(key, key_len));
    json_object_object_add(put, "value", etcd_json_b64(data, (size_t)head + len));
    struct json_object *success = json_object_new_array();
    json_object_array_add(success, etcd_op("request_put", put));
    struct json_object *reply = NULL;
    int rc = etcd_send_txn(inst, compare, success, json_object_new_array(), &reply, NULL);
    if (rc == DLOCK_OK) {
        struct json_object *ok = etcd_json_get(reply, "succeeded");
        if (!ok || !json_object_get_boolean(ok))
            rc = dlock_seterr(DLOCK_ELOST, "%s: this owner's key is gone (its lease expired or it was broken): "
                              "the value was not stored", inst->http.label);
    }
    json_object_put(reply);
    free(key);
    free(data);
    return rc;
}

static struct json_object *range_op(const char *key, size_t key_len, const char *end, size_t end_len)
{
    struct json_object *r = json_object_new_object();
    json_object_object_add(r, "key", etcd_json_b64(key, key_len));
    if (end) {
        json_object_object_add(r, "range_end", etcd_json_b64(end, end_len));
        json_object_object_add(r, "sort_order", json_object_new_string("ASCEND"));
        json_object_object_add(r, "sort_target", json_object_new_string("CREATE"));
        json_object_object_add(r, "limit", etcd_json_int_str(1));
    }
    return etcd_op("request_range", r);
}

/* The term of an exclusive hold from the oldest key of the directory (of
 * dir_len bytes), 0 when it is a shared or permit key. */
static uint64_t exclusive_term(struct json_object *kv, size_t dir_len)
{
    char key[2304], value[64]; /* the prefix, 3 bytes per name byte, a kind mark, an owner */
    int klen = etcd_json_unb64(kv, "key", key, sizeof key);
    int vlen = etcd_json_unb64(kv, "value", value, sizeof value);
    if (klen < (int)dir_len + 3)
        return 0;
    const char *member = key + dir_len;
    if (memcmp(member, ETCD_SHARED_MARK, 3) == 0 || memcmp(member, ETCD_PERMIT_MARK, 3) == 0 ||
        etcd_value_made_shared(value, vlen))
        return 0;
    return (uint64_t)etcd_json_int(kv, "create_revision");
}

int etcd_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out)
{
    struct etcd_instance *inst = instance;
    size_t dir_len, end_len, value_len;
    char *dir = name_key(inst, name, name_len, "/", &dir_len);
    char *end = name_key(inst, name, name_len, "0", &end_len); /* '/' + 1 */
    char *value_key = name_key(inst, name, name_len, VALUE_SUFFIX, &value_len);
    char *data = malloc(24 + DLOCK_VALUE_MAX + 4);
    int rc = DLOCK_OK;
    if (!dir || !end || !value_key || !data) {
        rc = dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
    } else {
        struct json_object *success = json_object_new_array();
        json_object_array_add(success, range_op(dir, dir_len, end, end_len));
        json_object_array_add(success, range_op(value_key, value_len, NULL, 0));
        struct json_object *reply = NULL;
        rc = etcd_send_txn(inst, json_object_new_array(), success, json_object_new_array(), &reply, NULL);
        if (rc == DLOCK_OK) {
            struct json_object *holder = etcd_first_kv(etcd_txn_response(reply, 0, "response_range"));
            struct json_object *stored = etcd_first_kv(etcd_txn_response(reply, 1, "response_range"));
            out->holder_term = holder ? exclusive_term(holder, dir_len) : 0;
            int n = stored ? etcd_json_unb64(stored, "value", data, 24 + DLOCK_VALUE_MAX + 4) : -1;
            const char *colon = n > 0 ? memchr(data, ':', (size_t)n) : NULL;
            if (stored && out->holder_term) {
                char *num_end;
                errno = 0;
                unsigned long long term = colon ? strtoull(data, &num_end, 10) : 0;
                if (!colon || num_end != colon || errno) {
                    rc = dlock_seterr(DLOCK_EPROTOCOL, "%s: %s is not an election value", inst->http.label, value_key);
                } else {
                    out->value_term = term;
                    out->value_len = (size_t)(data + n - (colon + 1));
                    if (out->value_len && !(out->value = malloc(out->value_len)))
                        rc = dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
                    else if (out->value_len)
                        memcpy(out->value, colon + 1, out->value_len);
                }
            }
        }
        json_object_put(reply);
    }
    free(dir);
    free(end);
    free(value_key);
    free(data);
    return rc;
}

/* An observer's watch: the etcd watch ends at its first event, so it is
 * made again after each; an epoll descriptor over its socket stays the
 * same for the core. */
struct etcd_observer_watch {
    struct etcd_instance *inst;
    char *from, *to;
    size_t from_len, to_len;
    struct etcd_watch *w;
    int sock;       /* the watch's socket in epfd, -1 for none */
    int epfd;
};

/* Makes the watch again and waits (one round trip) until the server has
 * created it, so a change after this returns comes as an event. */
static int rewatch(struct etcd_observer_watch *ow)
{
    if (ow->sock >= 0)
        epoll_ctl(ow->epfd, EPOLL_CTL_DEL, ow->sock, NULL);
    ow->sock = -1;
    etcd_watch_close(ow->w);
    ow->w = NULL;
    int rc = etcd_watch_open_changes(&ow->inst->http, ow->from, ow->from_len, ow->to, ow->to_len, &ow->w);
    if (rc != DLOCK_OK)
        return rc;
    int fd = -1, over = DLOCK_OK;
    if (etcd_watch_start(ow->w, ow->inst->http.command_timeout_ms, &fd, &over))
        return over != DLOCK_OK ? over
                                : dlock_seterr(DLOCK_EUNAVAILABLE, "%s: an observer's watch ended as it was made",
                                               ow->inst->http.label);
    struct epoll_event ev = { .events = EPOLLIN };
    if (epoll_ctl(ow->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "etcd: cannot poll a watch: %s", strerror(errno));
    ow->sock = fd;
    return DLOCK_OK;
}

void etcd_observer_close(void *instance, void *watch)
{
    (void)instance;
    struct etcd_observer_watch *ow = watch;
    etcd_watch_close(ow->w);
    if (ow->epfd >= 0)
        close(ow->epfd);
    free(ow->from);
    free(ow->to);
    free(ow);
}

int etcd_observer_open(void *instance, const char *name, size_t name_len, void **watch, int *fd)
{
    struct etcd_instance *inst = instance;
    struct etcd_observer_watch *ow = calloc(1, sizeof *ow);
    if (!ow)
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory");
    ow->inst = inst;
    ow->sock = -1;
    ow->epfd = epoll_create1(EPOLL_CLOEXEC);
    ow->from = name_key(inst, name, name_len, VALUE_SUFFIX, &ow->from_len);
    ow->to = name_key(inst, name, name_len, "0", &ow->to_len);
    int rc = !ow->from || !ow->to ? dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory")
             : ow->epfd < 0       ? dlock_seterr(DLOCK_EUNAVAILABLE, "etcd: no epoll: %s", strerror(errno))
                                  : rewatch(ow);
    if (rc != DLOCK_OK) {
        etcd_observer_close(inst, ow);
        return rc;
    }
    *watch = ow;
    *fd = ow->epfd;
    return DLOCK_OK;
}

int etcd_observer_consume(void *instance, void *watch)
{
    (void)instance;
    struct etcd_observer_watch *ow = watch;
    int rc = DLOCK_OK;
    if (ow->w && !etcd_watch_step(ow->w, &rc))
        return DLOCK_OK; /* part of a message: the same watch goes on */
    return rewatch(ow);
}
