/* core/client.c - opening and closing clients, and the client-wide queries. */
#include "config.h"

#include "entry.h"
#include "exporter.h"

#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

static void log_config_finding(int is_error, const char *file, int line, const char *msg, void *arg)
{
    struct dlock__log *log = arg;
    if (line > 0)
        dlock__logf(log, is_error ? DLOCK_LOG_ERROR : DLOCK_LOG_WARN, "%s:%d: %s", file, line, msg);
    else
        dlock__logf(log, is_error ? DLOCK_LOG_ERROR : DLOCK_LOG_WARN, "%s: %s", file, msg);
}

/* Starts the server of metrics.listen, if the configuration has one,
 * through the exporter module. It is started before the backend is
 * opened: a port that is taken fails the open at once, before any
 * connection is made. */
static int metrics_http_start(dlock_client *c)
{
    if (!c->config.metrics_listen)
        return DLOCK_OK;
    int rc = dlock__exporter_load(&c->exporter);
    if (rc != DLOCK_OK) {
        struct dlock_saved_error saved;
        dlock_error_save(&saved);
        return dlock_seterr(rc, "metrics.listen \"%s\" cannot be served: %s", c->config.metrics_listen,
                            saved.text);
    }
    return c->exporter->start(c, c->config.metrics_listen, &c->log, &c->exporter_server);
}

static void metrics_http_stop(dlock_client *c)
{
    if (c->exporter_server)
        c->exporter->stop(c->exporter_server);
    c->exporter_server = NULL;
}

/* Undoes what client_open did before the backend was open, and returns rc. */
static int open_failed(dlock_client *c, int rc)
{
    metrics_http_stop(c);
    dlock__metrics_names_free(&c->metrics);
    dlock__config_free(&c->config);
    dlock__log_destroy(&c->log);
    free(c);
    return rc;
}

static int client_open(dlock_client **out, const char *path, const char *text)
{
    if (!out)
        return dlock_seterr(DLOCK_EINVAL, "dlock_client_open: out is NULL");
    *out = NULL;
    if (!path && !text) {
        const char *env = getenv("DLOCK_CONFIG");
        if (env && *env)
            path = env;
        else
            text = ""; /* the built-in default: local backend, default settings */
    }

    dlock_client *c = calloc(1, sizeof *c);
    if (!c)
        return dlock_seterr(DLOCK_ENOMEM, "out of memory for a client");
    c->pid = getpid();
    c->fork_generation = dlock__fork_generation();
    dlock__log_init(&c->log);
    struct dlock__diag diag = { .report = log_config_finding, .arg = &c->log };
    int rc = dlock__config_load(&c->config, path, text, &diag);
    if (rc != DLOCK_OK) {
        dlock__log_destroy(&c->log);
        free(c);
        /* A configuration that is right but names a backend whose module
         * this host lacks (or refused) cannot be served here: unavailable,
         * as dlock.h says (dlock run exits 69, not 78). */
        if (rc == DLOCK_ECONFIG && diag.errors == 1 && diag.backend_unavailable)
            rc = dlock_seterr(DLOCK_EUNAVAILABLE, "%s", diag.first_error);
        return rc;
    }
    c->provider = c->config.provider;

    unsigned char id[16];
    if ((rc = dlock__random_bytes(id, sizeof id)) != DLOCK_OK ||
        (rc = dlock__metrics_names_init(&c->metrics, c->config.metrics_names, c->config.metrics_nnames)) != DLOCK_OK ||
        (rc = metrics_http_start(c)) != DLOCK_OK)
        return open_failed(c, rc);
    for (size_t i = 0; i < sizeof id; i++)
        snprintf(c->client_id + 2 * i, 3, "%02x", id[i]);

    struct dlock_settings settings = { c->config.backend_group, c->config.source };
    struct dlock_provider_env env = {
        .settings = &settings,
        .prefix = c->config.prefix,
        .default_lease_ms = c->config.lease_ms,
        .log_handle = &c->log,
        .wanted = dlock__cache_wanted,
    };
    rc = dlock__p_open(c, &env);
    if (rc != DLOCK_OK)
        return open_failed(c, rc);
    if (c->config.cache_idle_ms > 0 && !(c->capabilities & DLOCK_CAP_CACHE)) {
        dlock__p_close(c);
        return open_failed(c, dlock_seterr(DLOCK_ENOTSUP, "%s: the %s backend cannot keep released holds "
                                           "(cache.idle_ms = %lld): drop the cache group for this backend",
                                           c->config.source, c->provider->name,
                                           (long long)c->config.cache_idle_ms));
    }
    c->cache_holder = dlock__holder_no_new();
    pthread_mutex_init(&c->entries_mu, NULL);
    dlock__async_init(c);
    dlock__watchdog_init(c);
    dlock__expiry_init(c);
    dlock__logf(&c->log, DLOCK_LOG_INFO, "client %s opened with backend %s", c->client_id, c->provider->name);
    *out = c;
    return DLOCK_OK;
}

int dlock_client_open(dlock_client **out, const char *config_path)
{
    return client_open(out, config_path, NULL);
}

int dlock_client_open_string(dlock_client **out, const char *config_text)
{
    if (out)
        *out = NULL;
    if (!config_text)
        return dlock_seterr(DLOCK_EINVAL, "dlock_client_open_string: config_text is NULL");
    return client_open(out, NULL, config_text);
}

void dlock_client_close(dlock_client *c)
{
    if (dlock__client_usable(c) != DLOCK_OK)
        return;
    /* Non-blocking operations end first: their steps use everything below. */
    dlock__async_shutdown(c);
    /* The server reads the metrics, which go with the client below. */
    metrics_http_stop(c);
    /* No provider thread tells an entry of a request for its name any
     * more: that would schedule on the timer threads stopped below. */
    dlock__entries_unwatch_all(c);
    /* Both threads stopped before either is torn down: each may schedule
     * on the other until it has stopped. */
    dlock__timer_thread_join(&c->expiry);
    dlock__timer_thread_join(&c->watchdog);
    /* The heaps point into the entries: gone before the entries are. */
    dlock__timer_thread_destroy(&c->expiry);
    dlock__timer_thread_destroy(&c->watchdog);
    dlock__entries_close_all(c);
    dlock__async_destroy(c);
    dlock__p_close(c);
    pthread_mutex_destroy(&c->entries_mu);
    dlock__metrics_names_free(&c->metrics);
    dlock__config_free(&c->config);
    dlock__log_destroy(&c->log);
    free(c);
}

const char *dlock_client_backend(const dlock_client *c)
{
    return c ? c->provider->name : NULL;
}

unsigned dlock_client_capabilities(const dlock_client *c)
{
    return c ? c->capabilities : 0;
}

int dlock_client_metrics(dlock_client *c, char **out)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    if (!out)
        return dlock_seterr(DLOCK_EINVAL, "dlock_client_metrics: out is NULL");
    return dlock__metrics_format(&c->metrics, c->provider->name, out);
}

/* How much of dlock_status_info a caller of that version has. */
static size_t status_info_size(unsigned version)
{
    (void)version; /* version 1 is the whole struct; later ones add a case */
    return offsetof(dlock_status_info, holder) + sizeof ((dlock_status_info *)0)->holder;
}

int dlock_status(dlock_client *c, const char *name, size_t name_len, dlock_status_info *out)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    if (!name || name_len == 0 || name_len > DLOCK_NAME_MAX || memchr(name, 0, name_len) || !out)
        return dlock_seterr(DLOCK_EINVAL, "dlock_status: need a name of 1..%d bytes without NUL and an out pointer",
                            DLOCK_NAME_MAX);
    if (out->version < 1 || out->version > DLOCK_STATUS_INFO_VERSION)
        return dlock_seterr(DLOCK_EINVAL, "dlock_status: out->version is %u; initialise the struct with "
                            "DLOCK_STATUS_INFO_INIT (this library knows versions 1..%d)",
                            out->version, DLOCK_STATUS_INFO_VERSION);
    /* The provider fills the whole struct of this library's version; the
     * caller gets the fields of its own. */
    dlock_status_info full;
    memset(&full, 0, sizeof full);
    full.version = DLOCK_STATUS_INFO_VERSION;
    full.held = -1;
    full.holder_pid = -1;
    full.ttl_ms = -1;
    struct dlock_ctl_status arg = { name, name_len, &full };
    rc = dlock__p_ctl(c, DLOCK_CTL_STATUS, &arg);
    if (rc == DLOCK_ENOTSUP)
        dlock_seterr(rc, "the %s backend cannot report a lock's status", c->provider->name);
    unsigned version = out->version;
    memcpy(out, &full, status_info_size(version));
    out->version = version;
    return rc;
}

const char *dlock_version(void)
{
    return PACKAGE_VERSION;
}
