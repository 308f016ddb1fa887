/* backends/redis/redis_election.c - elections on redis (single, sentinel,
 * cluster): the leader's value and the observers' channel.
 *
 * The value is the string "<term>:<bytes>" at <prefix>{NAME}:value, in the
 * name's slot. Only the name's exclusive holder may set it, for its
 * current hold (a script checks its field in the hold's hash and that the
 * fence counter is the term), so neither a deposed leader whose hold
 * expired or was broken nor a late put of an earlier hold can. The leader's term is its fence,
 * which the fence counter equals while the hold lasts; a reader gets both
 * in one script, so it never pairs one leader's term with another's
 * value.
 *
 * Observers subscribe to <prefix>{NAME}:watch. The value script publishes
 * there, and a release of a hold that published publishes there after it
 * (one more round trip, only for leaders). A leader that dies is not
 * announced: the key's expiry makes no message (keyspace notifications
 * are off by default), so observers see it at their next read, at most a
 * third of their lease later. The subscriber's reconnect wakes them too,
 * since messages may have been lost meanwhile. */
#include "config.h"

#include "redis_backend.h"
#include "redis_keys.h"
#include "redis_scripts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static const char WATCH_SUFFIX[] = ":watch";

int redis_value_put(void *instance, struct dlock_provider_lock *lk, uint64_t term, const void *value, size_t len)
{
    struct redis_instance *inst = instance;
    struct redis_lock *rl = lk->priv;
    size_t value_key_len, watch_len;
    char *value_key = redis_key_for(inst->prefix, lk->name, lk->name_len, ":value", &value_key_len);
    char *watch = redis_key_for(inst->prefix, lk->name, lk->name_len, WATCH_SUFFIX, &watch_len);
    char term_text[24];
    int term_len = snprintf(term_text, sizeof term_text, "%llu", (unsigned long long)term);
    int rc = DLOCK_OK;
    if (!value_key || !watch || !rl->k.key) {
        rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory");
    } else {
        const char *args[8] = { rl->k.key, value_key, rl->k.fence_key, lk->owner, term_text, len ? value : "", watch,
                                inst->publish };
        size_t lens[8] = { rl->k.key_len, value_key_len, rl->k.fence_key_len, strlen(lk->owner), (size_t)term_len, len,
                           watch_len, strlen(inst->publish) };
        redisReply *r = inst->route->script(inst, SCRIPT_VALUE_PUT, 3, 8, args, lens, &rc, NULL);
        if (r) {
            if (r->type != REDIS_REPLY_INTEGER)
                rc = redis_unexpected(inst, "storing an election value");
            else if (r->integer != 1)
                rc = dlock_seterr(DLOCK_ELOST, "%s: this owner no longer holds the election (it expired or was "
                                  "broken): the value was not stored", inst->route->label(inst));
            else
                rl->published = true;
            freeReplyObject(r);
        }
    }
    free(value_key);
    free(watch);
    return rc;
}

void redis_value_released(struct redis_instance *inst, struct dlock_provider_lock *lk)
{
    struct redis_lock *rl = lk->priv;
    if (!rl->published)
        return;
    rl->published = false;
    size_t watch_len;
    char *watch = redis_key_for(inst->prefix, lk->name, lk->name_len, WATCH_SUFFIX, &watch_len);
    if (!watch)
        return; /* observers see it at their next read */
    const char *argv[3] = { inst->publish, watch, "released" };
    size_t lens[3] = { strlen(inst->publish), watch_len, 8 };
    int argc = 3;
    const char **argvs[1] = { argv };
    const size_t *lenses[1] = { lens };
    redisReply *reply = NULL;
    struct dlock_saved_error saved;
    dlock_error_save(&saved);
    if (inst->route->pipeline(inst, rl->k.key, rl->k.key_len, 1, &argc, argvs, lenses, &reply) == DLOCK_OK &&
        reply)
        freeReplyObject(reply);
    dlock_error_restore(&saved, DLOCK_OK);
    free(watch);
}

/* "<term>:<bytes>" into out; false if it is not that. */
static bool parse_value(const redisReply *v, struct dlock_provider_leader *out)
{
    const char *colon = memchr(v->str, ':', v->len);
    if (!colon || colon == v->str)
        return false;
    char *end;
    errno = 0;
    unsigned long long term = strtoull(v->str, &end, 10);
    if (end != colon || errno != 0)
        return false;
    out->value_term = term;
    out->value_len = v->len - (size_t)(colon + 1 - v->str);
    if (out->value_len > 0) {
        if (!(out->value = malloc(out->value_len)))
            return false;
        memcpy(out->value, colon + 1, out->value_len);
    }
    return true;
}

int redis_leader_get(void *instance, const char *name, size_t name_len, struct dlock_provider_leader *out)
{
    struct redis_instance *inst = instance;
    size_t kl, fl, vl;
    char *key = redis_key_for(inst->prefix, name, name_len, "", &kl);
    char *fence = redis_key_for(inst->prefix, name, name_len, ":fence", &fl);
    char *value = redis_key_for(inst->prefix, name, name_len, ":value", &vl);
    int rc = DLOCK_OK;
    if (!key || !fence || !value) {
        rc = dlock_seterr(DLOCK_ENOMEM, "redis: out of memory");
    } else {
        const char *args[3] = { key, fence, value };
        size_t lens[3] = { kl, fl, vl };
        redisReply *r = inst->route->script(inst, SCRIPT_LEADER_GET, 3, 3, args, lens, &rc, NULL);
        if (r) {
            bool ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING;
            if (ok) {
                out->holder_term = strtoull(r->element[0]->str, NULL, 10);
                if (r->element[1]->type == REDIS_REPLY_STRING)
                    ok = parse_value(r->element[1], out);
                else
                    ok = r->element[1]->type == REDIS_REPLY_NIL;
            }
            if (!ok)
                rc = redis_unexpected(inst, "reading an election's leader");
            freeReplyObject(r);
        }
    }
    free(key);
    free(fence);
    free(value);
    return rc;
}

struct redis_watch {
    struct redis_subscriber *sub;
    char *channel;
    size_t channel_len;
    int fd; /* eventfd the subscriber writes */
};

int redis_watch_open(void *instance, const char *name, size_t name_len, void **watch, int *fd)
{
    struct redis_instance *inst = instance;
    struct redis_watch *w = calloc(1, sizeof *w);
    if (!w || !(w->channel = redis_key_for(inst->prefix, name, name_len, WATCH_SUFFIX, &w->channel_len))) {
        free(w);
        return dlock_seterr(DLOCK_ENOMEM, "redis: out of memory");
    }
    if ((w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        int saved = errno;
        free(w->channel);
        free(w);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "redis: cannot create an eventfd: %s", strerror(saved));
    }
    int rc = inst->route->subscribe(inst, w->channel, w->channel_len, w->fd, &w->sub);
    if (rc != DLOCK_OK) {
        close(w->fd);
        free(w->channel);
        free(w);
        return rc;
    }
    *watch = w;
    *fd = w->fd;
    return DLOCK_OK;
}

int redis_watch_consume(void *instance, void *watch)
{
    (void)instance;
    struct redis_watch *w = watch;
    uint64_t n;
    while (read(w->fd, &n, sizeof n) == (ssize_t)sizeof n)
        ;
    return DLOCK_OK;
}

void redis_watch_close(void *instance, void *watch)
{
    (void)instance;
    struct redis_watch *w = watch;
    redis_subscriber_remove(w->sub, w->channel, w->channel_len, w->fd);
    close(w->fd);
    free(w->channel);
    free(w);
}
