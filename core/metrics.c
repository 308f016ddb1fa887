/* core/metrics.c - per-client counters and histograms, and those of each
 * name metrics.names lists, written in the Prometheus text exposition
 * format. Counters are updated with relaxed atomics: they are statistics,
 * not synchronisation. */
#include "config.h"

#include "internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds (ms) of the histogram buckets; the last bucket is +Inf. */
static const int64_t bucket_bounds_ms[DLOCK__HIST_BUCKETS - 1] = {
    1, 2, 5, 10, 25, 50, 100, 250, 1000, 5000, 30000
};

void dlock__metric_inc(uint64_t *counter)
{
    __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

static uint64_t load(const uint64_t *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

void dlock__histogram_observe(struct dlock__histogram *h, int64_t ms)
{
    if (ms < 0)
        ms = 0;
    size_t i = 0;
    while (i < DLOCK__HIST_BUCKETS - 1 && ms > bucket_bounds_ms[i])
        i++;
    __atomic_add_fetch(&h->buckets[i], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->sum_ms, (uint64_t)ms, __ATOMIC_RELAXED);
}

static void write_header(FILE *f, const char *family, const char *help, const char *type)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", family, help, family, type);
}

static void write_counter(FILE *f, const char *family, const char *labels, const uint64_t *value)
{
    fprintf(f, "%s{%s} %llu\n", family, labels, (unsigned long long)load(value));
}

static void write_histogram(FILE *f, const char *family, const char *labels, const struct dlock__histogram *h)
{
    uint64_t cumulative = 0;
    for (size_t i = 0; i < DLOCK__HIST_BUCKETS; i++) {
        cumulative += load(&h->buckets[i]);
        if (i < DLOCK__HIST_BUCKETS - 1)
            fprintf(f, "%s_bucket{%s,le=\"%g\"} %llu\n", family, labels,
                    (double)bucket_bounds_ms[i] / 1000.0, (unsigned long long)cumulative);
        else
            fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %llu\n", family, labels, (unsigned long long)cumulative);
    }
    fprintf(f, "%s_sum{%s} %.3f\n", family, labels, (double)load(&h->sum_ms) / 1000.0);
    fprintf(f, "%s_count{%s} %llu\n", family, labels, (unsigned long long)load(&h->count));
}

/* The label set of a listed name's series: backend and name, the name's
 * backslashes, quotes and newlines escaped as the exposition format wants
 * (the configuration checked that it is UTF-8). */
static void name_labels(char *buf, size_t size, const char *backend, const struct dlock__name_metrics *n)
{
    int head = snprintf(buf, size, "backend=\"%s\",name=\"", backend);
    size_t at = head < 0 ? 0 : (size_t)head < size ? (size_t)head : size - 1;
    for (size_t i = 0; i < n->name_len && at + 4 < size; i++) {
        char c = n->name[i];
        if (c == '\\' || c == '"' || c == '\n')
            buf[at++] = '\\';
        buf[at++] = c == '\n' ? 'n' : c;
    }
    snprintf(buf + at, size - at, "\"");
}

/* The per-name families: each family's header once, then a series per
 * listed name, since a family's lines must stay together. */
static void write_names(FILE *f, const struct dlock__metrics *m, const char *backend)
{
    const struct {
        const char *family, *help;
        size_t offset;
    } counters[] = {
        { "dlock_name_grants_total", "First grants of a hold of a name listed in metrics.names.",
          offsetof(struct dlock__name_metrics, grants) },
        { "dlock_name_timeouts_total", "Acquires of a listed name whose wait budget ran out.",
          offsetof(struct dlock__name_metrics, timeouts) },
        { "dlock_name_releases_total", "Holds of a listed name released on the backend.",
          offsetof(struct dlock__name_metrics, releases) },
        { "dlock_name_losses_total", "Holds of a listed name lost (expired, taken over, session ended).",
          offsetof(struct dlock__name_metrics, losses) },
    }, histograms[] = {
        { "dlock_name_wait_seconds", "Time from acquire call to grant, for a listed name.",
          offsetof(struct dlock__name_metrics, wait_ms) },
        { "dlock_name_hold_seconds", "Time from grant to release, for a listed name.",
          offsetof(struct dlock__name_metrics, hold_ms) },
    };
    char labels[2 * DLOCK_NAME_MAX + 128];
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        write_header(f, counters[i].family, counters[i].help, "counter");
        for (size_t j = 0; j < m->nnames; j++) {
            name_labels(labels, sizeof labels, backend, &m->names[j]);
            write_counter(f, counters[i].family, labels,
                          (const uint64_t *)((const char *)&m->names[j] + counters[i].offset));
        }
    }
    for (size_t i = 0; i < sizeof histograms / sizeof histograms[0]; i++) {
        write_header(f, histograms[i].family, histograms[i].help, "histogram");
        for (size_t j = 0; j < m->nnames; j++) {
            name_labels(labels, sizeof labels, backend, &m->names[j]);
            write_histogram(f, histograms[i].family, labels,
                            (const struct dlock__histogram *)((const char *)&m->names[j] + histograms[i].offset));
        }
    }
}

int dlock__metrics_names_init(struct dlock__metrics *m, const char *const *names, size_t n)
{
    m->names = NULL;
    m->nnames = 0;
    if (n == 0)
        return DLOCK_OK;
    m->names = calloc(n, sizeof *m->names);
    if (!m->names)
        return dlock_seterr(DLOCK_ENOMEM, "metrics: out of memory for %zu listed names", n);
    for (size_t i = 0; i < n; i++) {
        m->names[i].name = names[i];
        m->names[i].name_len = strlen(names[i]);
    }
    m->nnames = n;
    return DLOCK_OK;
}

void dlock__metrics_names_free(struct dlock__metrics *m)
{
    free(m->names);
    m->names = NULL;
    m->nnames = 0;
}

struct dlock__name_metrics *dlock__metrics_name_find(struct dlock__metrics *m, const char *name, size_t len)
{
    /* A linear scan: at most DLOCK__METRICS_NAMES_MAX names, looked at
     * once per lock state created, not per operation. */
    for (size_t i = 0; i < m->nnames; i++)
        if (m->names[i].name_len == len && memcmp(m->names[i].name, name, len) == 0)
            return &m->names[i];
    return NULL;
}

int dlock__metrics_format(const struct dlock__metrics *m, const char *backend, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return dlock_seterr(DLOCK_ENOMEM, "metrics: cannot allocate the output buffer");
    const struct {
        const char *family, *help;
        const uint64_t *value;
    } counters[] = {
        { "dlock_acquire_attempts_total", "Single acquire attempts sent to the backend.", &m->attempts },
        { "dlock_acquire_attempts_parked_total",
          "Attempts whose round trip waited on a descriptor, holding no thread (non-blocking API).",
          &m->attempts_parked },
        { "dlock_releases_parked_total",
          "Releases whose round trip waited on a descriptor, holding no thread (non-blocking API).",
          &m->releases_parked },
        { "dlock_grants_total", "First grants of a hold (not reentries).", &m->grants },
        { "dlock_cache_keeps_total", "Releases that kept the hold for the client (cache.idle_ms).",
          &m->cache_keeps },
        { "dlock_cache_hits_total", "Acquires served from a hold the client kept, with no round trip.",
          &m->cache_hits },
        { "dlock_cache_givebacks_total", "Kept holds released on the backend (idle, asked for, lost, freed).",
          &m->cache_givebacks },
        { "dlock_cache_pauses_total", "Times a name was not kept for a while, its give-backs costing "
          "more than its hits save (cache.cooldown_ms).", &m->cache_pauses },
        { "dlock_reentries_total", "Reentrant acquires served by the client.", &m->reentries },
        { "dlock_busy_total", "Attempts answered busy.", &m->busy },
        { "dlock_timeouts_total", "Acquires that ran out of wait budget.", &m->timeouts },
        { "dlock_cancellations_total", "Acquires cancelled while waiting.", &m->cancels },
        { "dlock_releases_total", "Holds released on the backend.", &m->releases },
        { "dlock_release_failures_total", "Releases the backend refused or could not take.", &m->release_failures },
        { "dlock_renewals_total", "Successful lease renewals.", &m->renewals },
        { "dlock_renewal_failures_total", "Renewals that failed (transient or lost).", &m->renewal_failures },
        { "dlock_losses_total", "Holds lost (expired, taken over, session ended).", &m->losses },
        { "dlock_backend_errors_total", "Operations that failed with a backend error.", &m->backend_errors },
    };
    char labels[128];
    snprintf(labels, sizeof labels, "backend=\"%s\"", backend);
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        write_header(f, counters[i].family, counters[i].help, "counter");
        write_counter(f, counters[i].family, labels, counters[i].value);
    }
    write_header(f, "dlock_renewal_round_seconds", "Time the watchdog spent renewing, per round.", "summary");
    fprintf(f, "dlock_renewal_round_seconds_sum{%s} %.6f\n"
               "dlock_renewal_round_seconds_count{%s} %llu\n",
            labels, (double)load(&m->renewal_round_us) / 1e6, labels,
            (unsigned long long)load(&m->renewal_rounds));
    write_header(f, "dlock_wait_seconds", "Time from acquire call to grant.", "histogram");
    write_histogram(f, "dlock_wait_seconds", labels, &m->wait_ms);
    write_header(f, "dlock_hold_seconds", "Time from grant to release.", "histogram");
    write_histogram(f, "dlock_hold_seconds", labels, &m->hold_ms);
    if (m->nnames > 0)
        write_names(f, m, backend);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return dlock_seterr(DLOCK_ENOMEM, "metrics: cannot write the output buffer");
    }
    *out = buf;
    return DLOCK_OK;
}
