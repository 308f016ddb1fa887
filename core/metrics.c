/* core/metrics.c - per-client counters and histograms, written in the
 * Prometheus text exposition format. Counters are updated with relaxed
 * atomics: they are statistics, not synchronisation. */
#include "config.h"

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

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

static void write_counter(FILE *f, const char *backend, const char *name, const char *help,
                          const uint64_t *value)
{
    fprintf(f, "# HELP dlock_%s_total %s\n# TYPE dlock_%s_total counter\n", name, help, name);
    fprintf(f, "dlock_%s_total{backend=\"%s\"} %llu\n", name, backend,
            (unsigned long long)load(value));
}

static void write_histogram(FILE *f, const char *backend, const char *name, const char *help,
                            const struct dlock__histogram *h)
{
    fprintf(f, "# HELP dlock_%s_seconds %s\n# TYPE dlock_%s_seconds histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < DLOCK__HIST_BUCKETS; i++) {
        cumulative += load(&h->buckets[i]);
        if (i < DLOCK__HIST_BUCKETS - 1)
            fprintf(f, "dlock_%s_seconds_bucket{backend=\"%s\",le=\"%g\"} %llu\n", name, backend,
                    (double)bucket_bounds_ms[i] / 1000.0, (unsigned long long)cumulative);
        else
            fprintf(f, "dlock_%s_seconds_bucket{backend=\"%s\",le=\"+Inf\"} %llu\n", name,
                    backend, (unsigned long long)cumulative);
    }
    fprintf(f, "dlock_%s_seconds_sum{backend=\"%s\"} %.3f\n", name, backend,
            (double)load(&h->sum_ms) / 1000.0);
    fprintf(f, "dlock_%s_seconds_count{backend=\"%s\"} %llu\n", name, backend,
            (unsigned long long)load(&h->count));
}

int dlock__metrics_format(const struct dlock__metrics *m, const char *backend, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return dlock_seterr(DLOCK_ENOMEM, "metrics: cannot allocate the output buffer");
    const struct {
        const char *name, *help;
        const uint64_t *value;
    } counters[] = {
        { "acquire_attempts", "Single acquire attempts sent to the backend.", &m->attempts },
        { "grants", "First grants of a hold (not reentries).", &m->grants },
        { "reentries", "Reentrant acquires served by the client.", &m->reentries },
        { "busy", "Attempts answered busy.", &m->busy },
        { "timeouts", "Acquires that ran out of wait budget.", &m->timeouts },
        { "cancellations", "Acquires cancelled while waiting.", &m->cancels },
        { "releases", "Holds released on the backend.", &m->releases },
        { "release_failures", "Releases the backend refused or could not take.", &m->release_failures },
        { "renewals", "Successful lease renewals.", &m->renewals },
        { "renewal_failures", "Renewals that failed (transient or lost).", &m->renewal_failures },
        { "losses", "Holds lost (expired, taken over, session ended).", &m->losses },
        { "backend_errors", "Operations that failed with a backend error.", &m->backend_errors },
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        write_counter(f, backend, counters[i].name, counters[i].help, counters[i].value);
    fprintf(f, "# HELP dlock_renewal_round_seconds Time the watchdog spent renewing, per round.\n"
               "# TYPE dlock_renewal_round_seconds summary\n"
               "dlock_renewal_round_seconds_sum{backend=\"%s\"} %.6f\n"
               "dlock_renewal_round_seconds_count{backend=\"%s\"} %llu\n",
            backend, (double)load(&m->renewal_round_us) / 1e6, backend,
            (unsigned long long)load(&m->renewal_rounds));
    write_histogram(f, backend, "wait", "Time from acquire call to grant.", &m->wait_ms);
    write_histogram(f, backend, "hold", "Time from grant to release.", &m->hold_ms);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return dlock_seterr(DLOCK_ENOMEM, "metrics: cannot write the output buffer");
    }
    *out = buf;
    return DLOCK_OK;
}
