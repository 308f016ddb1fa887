/* backends/etcd/etcd_orphans.c - see etcd_orphans.h. */
#include "config.h"

#include "etcd_orphans.h"

#include <dlock/provider.h>
#include <stdlib.h>
#include <string.h>

struct etcd_orphan {
    struct etcd_orphan *next;
    int64_t create_rev;
    bool sweeping;   /* a sweep is deleting it: not to be adopted */
    unsigned visited; /* the last sweep that looked at it */
    int64_t added_ms; /* dlock_provider_now_ms() when it was remembered */
    size_t key_len;
    char key[];
};

void etcd_orphans_init(struct etcd_orphans *o)
{
    pthread_mutex_init(&o->mu, NULL);
    o->head = NULL;
    o->count = 0;
    o->sweeps = 0;
}

void etcd_orphans_destroy(struct etcd_orphans *o)
{
    for (struct etcd_orphan *e = o->head, *next; e; e = next) {
        next = e->next;
        free(e);
    }
    o->head = NULL;
    pthread_mutex_destroy(&o->mu);
}

int etcd_orphans_add(struct etcd_orphans *o, const char *key, size_t key_len, int64_t create_rev)
{
    struct etcd_orphan *e = malloc(sizeof *e + key_len);
    if (!e)
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory remembering a key to delete");
    e->create_rev = create_rev;
    e->sweeping = false;
    e->visited = 0;
    e->added_ms = dlock_provider_now_ms();
    e->key_len = key_len;
    memcpy(e->key, key, key_len);
    pthread_mutex_lock(&o->mu);
    /* One entry per key: a key has one owner, who adopts it before it
     * queues again, so an older entry of the same key is the same key. */
    for (struct etcd_orphan *old = o->head; old; old = old->next)
        if (old->key_len == key_len && memcmp(old->key, key, key_len) == 0 && !old->sweeping) {
            old->create_rev = create_rev; /* the latest word on it */
            old->added_ms = e->added_ms;
            pthread_mutex_unlock(&o->mu);
            free(e);
            return DLOCK_OK;
        }
    e->next = o->head;
    o->head = e;
    __atomic_store_n(&o->count, o->count + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&o->mu);
    return DLOCK_OK;
}

static void unlink_entry(struct etcd_orphans *o, struct etcd_orphan *gone)
{
    for (struct etcd_orphan **p = &o->head; *p; p = &(*p)->next)
        if (*p == gone) {
            *p = gone->next;
            __atomic_store_n(&o->count, o->count - 1, __ATOMIC_RELAXED);
            free(gone);
            return;
        }
}

int etcd_orphans_adopt(struct etcd_orphans *o, const char *key, size_t key_len, bool *found)
{
    *found = false;
    if (!etcd_orphans_any(o))
        return DLOCK_OK;
    int rc = DLOCK_OK;
    pthread_mutex_lock(&o->mu);
    for (struct etcd_orphan *e = o->head; e; e = e->next)
        if (e->key_len == key_len && memcmp(e->key, key, key_len) == 0) {
            if (e->sweeping) {
                rc = DLOCK_EBUSY;
            } else {
                *found = true;
                unlink_entry(o, e);
            }
            break;
        }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

void etcd_orphans_sweep(struct etcd_orphans *o, etcd_orphan_delete_fn del, void *arg)
{
    if (!etcd_orphans_any(o))
        return;
    pthread_mutex_lock(&o->mu);
    unsigned sweep = ++o->sweeps;
    pthread_mutex_unlock(&o->mu);
    for (;;) {
        /* One at a time, taken under the mutex and deleted outside it. */
        pthread_mutex_lock(&o->mu);
        struct etcd_orphan *e = o->head;
        while (e && (e->sweeping || e->visited == sweep))
            e = e->next;
        if (!e) {
            pthread_mutex_unlock(&o->mu);
            break;
        }
        e->sweeping = true;
        e->visited = sweep;
        int64_t age = dlock_provider_now_ms() - e->added_ms;
        pthread_mutex_unlock(&o->mu);
        int rc = del(arg, e->key, e->key_len, e->create_rev, age);
        pthread_mutex_lock(&o->mu);
        e->sweeping = false;
        if (rc == DLOCK_OK)
            unlink_entry(o, e);
        pthread_mutex_unlock(&o->mu);
        if (rc != DLOCK_OK && rc != DLOCK_EBUSY)
            break; /* the server does not answer: the next round tries again */
    }
}

bool etcd_orphans_any(struct etcd_orphans *o)
{
    return __atomic_load_n(&o->count, __ATOMIC_RELAXED) != 0;
}
