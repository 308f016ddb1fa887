/* contrib/cli/seen.c - see seen.h. A hash table of holds keyed by name,
 * owner and fence: a new grant (a new fence) or a new holder is a new hold,
 * so its age starts again. Ages are on CLOCK_MONOTONIC: a wall clock step
 * must not make a hold look stuck. */
#include "seen.h"
#include "../../backends/common/fnv1a.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FORGET_AFTER_MS 60000

struct seen_item {
    struct seen_item *next;
    uint64_t hash;
    char *key;
    size_t key_len;
    int64_t first_ms, last_ms;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void seen_init(struct seen *s)
{
    pthread_mutex_init(&s->mu, NULL);
    s->nbuckets = 4096;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (!s->buckets)
        s->nbuckets = 0;
}

void seen_free(struct seen *s)
{
    for (size_t b = 0; b < s->nbuckets; b++)
        for (struct seen_item *it = s->buckets[b], *next; it; it = next) {
            next = it->next;
            free(it->key);
            free(it);
        }
    free(s->buckets);
    pthread_mutex_destroy(&s->mu);
}

/* FNV-1a over the key's bytes. */
static uint64_t hash_of(const char *p, size_t n)
{
    return fnv1a_64(FNV1A_64_OFFSET, p, n);
}

/* When the hold with this key was first seen (now, if never); -1 when out
 * of memory. Called under s->mu. */
static int64_t first_seen(struct seen *s, const char *key, size_t len, int64_t now)
{
    uint64_t h = hash_of(key, len);
    struct seen_item **slot = &s->buckets[h % s->nbuckets];
    for (struct seen_item *it = *slot; it; it = it->next)
        if (it->hash == h && it->key_len == len && memcmp(it->key, key, len) == 0) {
            it->last_ms = now;
            return it->first_ms;
        }
    struct seen_item *it = malloc(sizeof *it);
    char *copy = malloc(len);
    if (!it || !copy) {
        free(it);
        free(copy);
        return -1;
    }
    memcpy(copy, key, len);
    *it = (struct seen_item){ *slot, h, copy, len, now, now };
    *slot = it;
    return now;
}

/* "<name>\0<owner>\0<fence>" into a malloc'd key. */
static char *key_of(const dlock_list_entry *e, const char *owner, uint64_t fence, size_t *len)
{
    size_t olen = owner ? strlen(owner) : 0;
    char *k = malloc(e->name_len + olen + 2 + sizeof fence);
    if (!k)
        return NULL;
    memcpy(k, e->name, e->name_len);
    k[e->name_len] = 0;
    memcpy(k + e->name_len + 1, owner ? owner : "", olen);
    k[e->name_len + 1 + olen] = 0;
    memcpy(k + e->name_len + 2 + olen, &fence, sizeof fence);
    *len = e->name_len + olen + 2 + sizeof fence;
    return k;
}

static int64_t age_of(struct seen *s, const dlock_list_entry *e, const char *owner, uint64_t fence, int64_t now)
{
    size_t len;
    char *key = key_of(e, owner, fence, &len);
    int64_t first = key ? first_seen(s, key, len, now) : -1;
    free(key);
    return first < 0 ? -1 : now - first;
}

static void forget_old(struct seen *s, int64_t now)
{
    for (size_t b = 0; b < s->nbuckets; b++)
        for (struct seen_item **p = &s->buckets[b]; *p;) {
            struct seen_item *it = *p;
            if (now - it->last_ms > FORGET_AFTER_MS) {
                *p = it->next;
                free(it->key);
                free(it);
            } else {
                p = &it->next;
            }
        }
}

void seen_apply(struct seen *s, struct view *v)
{
    if (!s->nbuckets)
        return;
    int64_t now = mono_ms();
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < v->n; i++) {
        dlock_list_entry *e = &v->entries[i];
        bool held = e->holder_count > 0 || e->n_holders > 0;
        if (!held || e->age_ms >= 0)
            continue;
        dlock_list_holder *holders = (dlock_list_holder *)e->holders; /* the view's own copies */
        if (e->n_holders == 0) {
            e->age_ms = age_of(s, e, "", e->fence, now);
            continue;
        }
        for (size_t h = 0; h < e->n_holders; h++) {
            if (holders[h].age_ms < 0)
                holders[h].age_ms = age_of(s, e, holders[h].owner, holders[h].fence, now);
            if (holders[h].age_ms > e->age_ms)
                e->age_ms = holders[h].age_ms;
        }
    }
    forget_old(s, now);
    pthread_mutex_unlock(&s->mu);
}
