/* contrib/bench/bench_main.c - dlock-bench: the same scenarios over any set of
 * backend configurations, in one run, each beside its backend's plain client
 * loop, so the figures are ratios measured under the same machine noise.
 *
 *   dlock-bench -c FILE [-c FILE ...] [--scenario NAME ...] [--duration S]
 *               [--repeat R] [--workers N[,N...]] [--threads] [--hold-ms X]
 *               [--pause-ms Y] [--locks K] [--fair] [--csv FILE] [--plot DIR]
 *
 * Runs are interleaved (for each repeat, each scenario, each config: A B A B)
 * and each figure is the median and [min - max] of the repeats. */
#include "bench.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct bench_options opt = { 3.0, 3, { 8 }, 1, false, 1, 5, 10000, false, NULL, NULL, 0 };

static const char *const default_scenarios[] = { "uncontended", "contended", "many-locks", "baseline" };
static const char *const all_scenarios[] = { "uncontended", "contended", "many-locks", "baseline", "rw", "semaphore",
                                             "pending", "cache-handoff", "cache-affinity", "cache-starvation" };

/* The pending scenario's size: --pending, else 10,000 on the redis family
 * and 1,000 on the others. */
static int pending_count(const struct bench_config *cfg)
{
    if (opt.pending > 0)
        return opt.pending;
    return strncmp(cfg->backend, "redis", 5) == 0 || strcmp(cfg->backend, "redlock") == 0 ? 10000 : 1000;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dlock-bench -c FILE [-c FILE ...] [--scenario NAME ...] [--duration S] [--repeat R]\n"
            "                   [--workers N[,N...]] [--threads] [--hold-ms X] [--pause-ms Y] [--locks K]\n"
            "                   [--fair] [--pending N] [--csv FILE] [--plot DIR]\n"
            "scenarios: uncontended contended many-locks baseline rw semaphore pending\n"
            "           cache-handoff cache-affinity cache-starvation\n"
            "(default: the first four)\n"
            "Each -c FILE is one backend setup; see dlock-bench(1).\n");
}

static void label_of(const char *path, char *out, size_t len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, len, "%s", base);
    char *dot = strstr(out, ".conf");
    if (dot && dot != out)
        *dot = 0;
}

static bool parse_workers(const char *text)
{
    opt.nworker_counts = 0;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", text);
    char *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int n = atoi(t);
        if (n < 1 || n > 64 || opt.nworker_counts == MAX_WORKER_COUNTS)
            return false;
        opt.worker_counts[opt.nworker_counts++] = n;
    }
    return opt.nworker_counts > 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' }, { "scenario", required_argument, NULL, 's' },
        { "duration", required_argument, NULL, 'd' }, { "repeat", required_argument, NULL, 'r' },
        { "workers", required_argument, NULL, 'w' }, { "threads", no_argument, NULL, 't' },
        { "hold-ms", required_argument, NULL, 'H' }, { "pause-ms", required_argument, NULL, 'P' },
        { "locks", required_argument, NULL, 'k' }, { "fair", no_argument, NULL, 'f' },
        { "pending", required_argument, NULL, 'n' },
        { "csv", required_argument, NULL, 'o' }, { "plot", required_argument, NULL, 'p' },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    struct bench_config configs[MAX_CONFIGS];
    int nconfigs = 0;
    const char *scenarios[8];
    int nscenarios = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "c:s:d:r:w:tH:P:k:fo:p:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            if (nconfigs == MAX_CONFIGS) {
                fprintf(stderr, "dlock-bench: at most %d configurations\n", MAX_CONFIGS);
                return 64;
            }
            configs[nconfigs++].path = optarg;
            break;
        case 's':
            if (nscenarios < 8)
                scenarios[nscenarios++] = optarg;
            break;
        case 'd': opt.duration_s = atof(optarg); break;
        case 'r': opt.repeat = atoi(optarg) < 1 ? 1 : atoi(optarg) > MAX_REPEAT ? MAX_REPEAT : atoi(optarg); break;
        case 'w':
            if (!parse_workers(optarg)) {
                fprintf(stderr, "dlock-bench: --workers takes counts 1..64 separated by commas\n");
                return 64;
            }
            break;
        case 't': opt.threads = true; break;
        case 'H': opt.hold_ms = atoi(optarg); break;
        case 'P': opt.pause_ms = atoi(optarg); break;
        case 'k': opt.locks = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        case 'n': opt.pending = atoi(optarg) > 8 ? atoi(optarg) : 9; break;
        case 'f': opt.fair = true; break;
        case 'o': opt.csv = optarg; break;
        case 'p': opt.plot_dir = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 64;
        }
    }
    if (nconfigs == 0) {
        usage(stderr);
        return 64;
    }
    if (nscenarios == 0)
        for (size_t i = 0; i < sizeof default_scenarios / sizeof default_scenarios[0]; i++)
            scenarios[nscenarios++] = default_scenarios[i];
    for (int s = 0; s < nscenarios; s++) {
        bool known = false;
        for (size_t i = 0; i < sizeof all_scenarios / sizeof all_scenarios[0]; i++)
            known |= strcmp(scenarios[s], all_scenarios[i]) == 0;
        if (!known) {
            fprintf(stderr, "dlock-bench: unknown scenario '%s'\n", scenarios[s]);
            return 64;
        }
    }
    bool with_baseline = false;
    for (int s = 0; s < nscenarios; s++)
        with_baseline |= strcmp(scenarios[s], "baseline") == 0;

    for (int i = 0; i < nconfigs; i++) {
        label_of(configs[i].path, configs[i].label, sizeof configs[i].label);
        for (int k = 0; k < i; k++)
            if (!strcmp(configs[k].label, configs[i].label))
                snprintf(configs[i].label + strlen(configs[i].label),
                         sizeof configs[i].label - strlen(configs[i].label), "-%d", i + 1);
        dlock_client *c;
        int rc = dlock_client_open(&c, configs[i].path);
        if (rc != DLOCK_OK)
            bench_die(configs[i].path, rc);
        snprintf(configs[i].backend, sizeof configs[i].backend, "%s", dlock_client_backend(c));
        bool unfair = opt.fair && !(dlock_client_capabilities(c) & DLOCK_CAP_FAIR);
        dlock_client_close(c);
        if (unfair) {
            /* One run over every backend, fair where it can be: the others
             * are said to be left out, not measured unfair. */
            fprintf(stderr, "dlock-bench: %s: the %s backend has no fair mode; left out of this --fair run\n",
                    configs[i].label, configs[i].backend);
            memmove(&configs[i], &configs[i + 1], (size_t)(nconfigs - i - 1) * sizeof configs[0]);
            nconfigs--;
            i--;
        }
    }
    if (nconfigs == 0) {
        fprintf(stderr, "dlock-bench: no configuration left to run\n");
        return 64;
    }

    int64_t *samples = malloc(MAX_SAMPLES * sizeof *samples);
    signal(SIGPIPE, SIG_IGN);
    bool progress = isatty(STDERR_FILENO);
    for (int r = 0; r < opt.repeat; r++) {
        for (int s = 0; s < nscenarios; s++) {
            for (int i = 0; i < nconfigs; i++) {
                const struct bench_config *cfg = &configs[i];
                if (progress)
                    fprintf(stderr, "\r[%d/%d] %-12s %-14s", r + 1, opt.repeat, scenarios[s], cfg->label);
                bench_etcd_compact(cfg); /* each run starts from the same history */
                if (!strcmp(scenarios[s], "uncontended")) {
                    run_uncontended(cfg, samples);
                    if (with_baseline)
                        run_baseline_uncontended(cfg, samples);
                } else if (!strcmp(scenarios[s], "contended")) {
                    for (int w = 0; w < opt.nworker_counts; w++)
                        run_contended(cfg, opt.worker_counts[w], samples);
                } else if (!strcmp(scenarios[s], "rw")) {
                    for (int w = 0; w < opt.nworker_counts; w++)
                        run_rw(cfg, opt.worker_counts[w], samples);
                } else if (!strcmp(scenarios[s], "semaphore")) {
                    for (int w = 0; w < opt.nworker_counts; w++)
                        run_semaphore(cfg, opt.worker_counts[w], samples);
                } else if (!strcmp(scenarios[s], "cache-handoff")) {
                    run_cache_handoff(cfg, samples);
                } else if (!strcmp(scenarios[s], "cache-affinity")) {
                    run_cache_affinity(cfg);
                } else if (!strcmp(scenarios[s], "cache-starvation")) {
                    run_cache_starvation(cfg, samples);
                } else if (!strcmp(scenarios[s], "pending")) {
                    run_pending(cfg, pending_count(cfg), samples);
                } else if (!strcmp(scenarios[s], "many-locks")) {
                    run_many_locks(cfg);
                    if (with_baseline)
                        run_baseline_many_locks(cfg);
                }
            }
        }
    }
    if (progress)
        fprintf(stderr, "\r%60s\r", "");
    /* Shared throughput beside the exclusive-only figure of the same
     * backend and worker count in this run. */
    for (int i = 0; i < nconfigs; i++)
        for (int w = 0; w < opt.nworker_counts; w++) {
            char rw[48], ex[48];
            snprintf(rw, sizeof rw, "rw-%dw", opt.worker_counts[w]);
            snprintf(ex, sizeof ex, "contended-%dw", opt.worker_counts[w]);
            double a = figure_median(configs[i].label, rw, "grants/s");
            double b = figure_median(configs[i].label, ex, "grants/s");
            if (a == a && b == b && b > 0) /* both taken (not NAN) */
                figure_add(configs[i].label, rw, "x exclusive-only grants/s", "ratio", a / b);
        }
    /* The non-blocking API's drain beside the blocking API at 8 workers. */
    for (int i = 0; i < nconfigs; i++) {
        char pending[40];
        snprintf(pending, sizeof pending, "pending-%d", pending_count(&configs[i]));
        double a = figure_median(configs[i].label, pending, "grants/s");
        double b = figure_median(configs[i].label, "contended-8w", "grants/s");
        if (a == a && b == b && b > 0)
            figure_add(configs[i].label, pending, "x blocking 8w grants/s", "ratio", a / b);
        static const char *const which[] = { "p50", "p99" };
        for (int q = 0; q < 2; q++) {
            char mine[48], theirs[64], name[64];
            snprintf(mine, sizeof mine, "handoff %s", which[q]);
            snprintf(theirs, sizeof theirs, "handoff from release call %s", which[q]);
            snprintf(name, sizeof name, "blocking 8w / this handoff %s", which[q]);
            a = figure_median(configs[i].label, pending, mine);
            b = figure_median(configs[i].label, "contended-8w", theirs);
            if (a == a && b == b && a > 0)
                figure_add(configs[i].label, pending, name, "ratio", b / a);
        }
    }
    for (int i = 0; i < nconfigs; i++)
        bench_cache_compare(&configs[i]);
    report_table(configs, nconfigs);
    int status = 0;
    if (opt.csv && report_csv(opt.csv) != 0)
        status = 1;
    if (opt.plot_dir && report_plots(opt.plot_dir, configs, nconfigs) != 0)
        status = 1;
    else if (opt.plot_dir)
        printf("\nplots: %s/{throughput,latency,handoff}.{png,svg}\n", opt.plot_dir);
    free(samples);
    return status;
}
