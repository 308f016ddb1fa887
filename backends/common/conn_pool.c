/* backends/common/conn_pool.c - see conn_pool.h. */
#include "config.h"

#include "conn_pool.h"

#include <dlock/provider.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000

void conn_pool_init(struct conn_pool *pool, const struct conn_pool_ops *ops, void *arg, int max)
{
    memset(pool, 0, sizeof *pool);
    pool->ops = ops;
    pool->arg = arg;
    pool->max = max < 1 ? 1 : max > CONN_POOL_MAX ? CONN_POOL_MAX : max;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
}

void conn_pool_destroy(struct conn_pool *pool)
{
    for (int i = 0; i < pool->nidle; i++)
        pool->ops->close(pool->idle[i]);
    pool->nidle = pool->total = 0;
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
}

static int get(struct conn_pool *pool, void **out, bool *was_idle, bool wait)
{
    pthread_mutex_lock(&pool->mu);
    while (pool->nidle == 0 && pool->total >= pool->max) {
        if (!wait) {
            pthread_mutex_unlock(&pool->mu);
            *out = NULL;
            return dlock_seterr(DLOCK_EBUSY, "all %d connections of the pool are in use", pool->max);
        }
        pthread_cond_wait(&pool->cv, &pool->mu);
    }
    if (pool->nidle > 0) {
        *out = pool->idle[--pool->nidle];
        pthread_mutex_unlock(&pool->mu);
        if (was_idle)
            *was_idle = true;
        return DLOCK_OK;
    }
    if (was_idle)
        *was_idle = false;
    int64_t now = dlock_provider_now_ms();
    if (now < pool->retry_at_ms) {
        *out = NULL;
        int rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s (next attempt in %lld ms)", pool->last_error,
                              (long long)(pool->retry_at_ms - now));
        pthread_mutex_unlock(&pool->mu);
        return rc;
    }
    pool->total++;
    pthread_mutex_unlock(&pool->mu);

    int rc = DLOCK_OK;
    void *conn = pool->ops->connect(pool->arg, &rc);

    pthread_mutex_lock(&pool->mu);
    if (conn) {
        pool->backoff_ms = 0;
        pool->retry_at_ms = 0;
    } else {
        pool->total--;
        if (rc == DLOCK_EUNAVAILABLE) {
            pool->backoff_ms = pool->backoff_ms ? pool->backoff_ms * 2 : BACKOFF_MIN_MS;
            if (pool->backoff_ms > BACKOFF_MAX_MS)
                pool->backoff_ms = BACKOFF_MAX_MS;
            pool->retry_at_ms = dlock_provider_now_ms() + pool->backoff_ms;
            snprintf(pool->last_error, sizeof pool->last_error, "%s", dlock_errmsg());
        }
        pthread_cond_signal(&pool->cv);
    }
    pthread_mutex_unlock(&pool->mu);
    *out = conn;
    return conn ? DLOCK_OK : rc;
}

int conn_pool_get(struct conn_pool *pool, void **out, bool *was_idle)
{
    return get(pool, out, was_idle, true);
}

int conn_pool_try_get(struct conn_pool *pool, void **out)
{
    return get(pool, out, NULL, false);
}

int conn_pool_take_idle(struct conn_pool *pool, void **out)
{
    pthread_mutex_lock(&pool->mu);
    *out = pool->nidle > 0 ? pool->idle[--pool->nidle] : NULL;
    pthread_mutex_unlock(&pool->mu);
    return *out ? DLOCK_OK : DLOCK_EBUSY;
}

void conn_pool_put(struct conn_pool *pool, void *conn)
{
    bool keep = conn && pool->ops->reusable(conn);
    if (conn && !keep)
        pool->ops->close(conn);
    pthread_mutex_lock(&pool->mu);
    if (keep)
        pool->idle[pool->nidle++] = conn;
    else
        pool->total--;
    pthread_cond_signal(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
}

void conn_pool_drop_idle(struct conn_pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    for (int i = 0; i < pool->nidle; i++) {
        pool->ops->close(pool->idle[i]);
        pool->total--;
    }
    pool->nidle = 0;
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
}
