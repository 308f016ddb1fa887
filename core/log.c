/* core/log.c - the client's log sink. Silent unless the application installs
 * a sink or $DLOCK_LOG names a level: a library must not write to stderr on
 * its own. */
#include "config.h"

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const level_names[] = { "error", "warn", "info", "debug" };

static void stderr_sink(int level, const char *msg, void *arg)
{
    (void)arg;
    fprintf(stderr, "dlock[%s]: %s\n", level_names[level], msg);
}

void dlock__log_init(struct dlock__log *log)
{
    pthread_mutex_init(&log->mu, NULL);
    log->fn = NULL;
    log->arg = NULL;
    log->max_level = -1;
    const char *env = getenv("DLOCK_LOG");
    if (!env)
        return;
    for (int i = 0; i <= DLOCK_LOG_DEBUG; i++)
        if (strcmp(env, level_names[i]) == 0) {
            log->fn = stderr_sink;
            log->max_level = i;
        }
}

void dlock__log_destroy(struct dlock__log *log)
{
    pthread_mutex_destroy(&log->mu);
}

static void log_vf(struct dlock__log *log, int level, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&log->mu);
    dlock_log_fn fn = log->fn;
    void *arg = log->arg;
    int max_level = log->max_level;
    pthread_mutex_unlock(&log->mu);
    if (!fn || level > max_level || level < 0)
        return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fn(level, msg, arg);
}

void dlock__logf(struct dlock__log *log, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vf(log, level, fmt, ap);
    va_end(ap);
}

void dlock_provider_log(void *log_handle, int level, const char *fmt, ...)
{
    if (!log_handle)
        return;
    va_list ap;
    va_start(ap, fmt);
    log_vf(log_handle, level, fmt, ap);
    va_end(ap);
}

void dlock_client_set_log(dlock_client *client, dlock_log_fn fn, void *arg, int max_level)
{
    if (dlock__client_usable(client) != DLOCK_OK)
        return;
    pthread_mutex_lock(&client->log.mu);
    client->log.fn = fn;
    client->log.arg = arg;
    client->log.max_level = fn ? max_level : -1;
    pthread_mutex_unlock(&client->log.mu);
}
