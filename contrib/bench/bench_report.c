/* contrib/bench/bench_report.c - figures, and writing them: the table (with
 * each figure's ratio to its backend's baseline), the CSV, the plots. */
#include "bench.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct figure {
    char label[64], scenario[40], metric[48], unit[16];
    double values[MAX_REPEAT];
    int n;
};

static struct figure figures[512];
static int nfigures;

static struct figure *find(const char *label, const char *scenario, const char *metric)
{
    for (int i = 0; i < nfigures; i++)
        if (!strcmp(figures[i].label, label) && !strcmp(figures[i].scenario, scenario) &&
            !strcmp(figures[i].metric, metric))
            return &figures[i];
    return NULL;
}

void figure_add(const char *label, const char *scenario, const char *metric, const char *unit, double value)
{
    if (isnan(value) || value < 0)
        return;
    struct figure *f = find(label, scenario, metric);
    if (!f) {
        if (nfigures == (int)(sizeof figures / sizeof figures[0]))
            return;
        f = &figures[nfigures++];
        snprintf(f->label, sizeof f->label, "%s", label);
        snprintf(f->scenario, sizeof f->scenario, "%s", scenario);
        snprintf(f->metric, sizeof f->metric, "%s", metric);
        snprintf(f->unit, sizeof f->unit, "%s", unit);
    }
    if (f->n < MAX_REPEAT)
        f->values[f->n++] = value;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const struct figure *f)
{
    double v[MAX_REPEAT];
    memcpy(v, f->values, sizeof(double) * (size_t)f->n);
    qsort(v, (size_t)f->n, sizeof v[0], cmp_double);
    return f->n % 2 ? v[f->n / 2] : (v[f->n / 2 - 1] + v[f->n / 2]) / 2;
}

static void range(const struct figure *f, double *lo, double *hi)
{
    *lo = *hi = f->values[0];
    for (int k = 1; k < f->n; k++) {
        *lo = f->values[k] < *lo ? f->values[k] : *lo;
        *hi = f->values[k] > *hi ? f->values[k] : *hi;
    }
}

double figure_median(const char *label, const char *scenario, const char *metric)
{
    struct figure *f = find(label, scenario, metric);
    return f ? median(f) : NAN;
}

/* The baseline a figure is compared with, if it has one: throughput against
 * the plain loop's throughput (higher is better), renewal cost against the
 * pipeline's (lower is better). */
static double ratio_of(const struct figure *f)
{
    double base = NAN;
    if ((!strcmp(f->scenario, "uncontended") || !strcmp(f->scenario, "baseline-scripts")) &&
        !strcmp(f->metric, "acquire+release/s"))
        base = figure_median(f->label, "baseline-uncontended", "acquire+release/s");
    else if (!strcmp(f->scenario, "many-locks") && !strcmp(f->metric, "renewal of all locks"))
        base = figure_median(f->label, "baseline-many-locks", "renewal of all locks");
    return isnan(base) || base == 0 ? NAN : median(f) / base;
}

void report_table(const struct bench_config *configs, int nconfigs)
{
    printf("%-12s %-22s %-30s %12s  %-22s %-6s %s\n", "backend", "scenario", "metric", "median", "[min - max]",
           "unit", "x baseline");
    for (int c = 0; c < nconfigs; c++) {
        for (int i = 0; i < nfigures; i++) {
            struct figure *f = &figures[i];
            if (strcmp(f->label, configs[c].label))
                continue;
            double lo, hi, ratio = ratio_of(f);
            range(f, &lo, &hi);
            char r[48], ratio_text[16] = "";
            snprintf(r, sizeof r, "[%.1f - %.1f]", lo, hi);
            if (!isnan(ratio))
                snprintf(ratio_text, sizeof ratio_text, "%.2f", ratio);
            printf("%-12s %-22s %-30s %12.1f  %-22s %-6s %s\n", f->label, f->scenario, f->metric, median(f), r,
                   f->unit, ratio_text);
        }
    }
}

/* One CSV field as RFC 4180 has it: quoted, with its quotes doubled, when
 * it holds a comma, a quote or a line break (metric names have commas). */
static void csv_field(FILE *csv, const char *text, const char *after)
{
    if (strpbrk(text, ",\"\r\n")) {
        fputc('"', csv);
        for (const char *p = text; *p; p++) {
            if (*p == '"')
                fputc('"', csv);
            fputc(*p, csv);
        }
        fputc('"', csv);
    } else {
        fputs(text, csv);
    }
    fputs(after, csv);
}

int report_csv(const char *path)
{
    FILE *csv = fopen(path, "w");
    if (!csv) {
        perror(path);
        return -1;
    }
    fprintf(csv, "backend,scenario,metric,median,min,max,unit\n");
    for (int i = 0; i < nfigures; i++) {
        double lo, hi;
        range(&figures[i], &lo, &hi);
        csv_field(csv, figures[i].label, ",");
        csv_field(csv, figures[i].scenario, ",");
        csv_field(csv, figures[i].metric, ",");
        fprintf(csv, "%.3f,%.3f,%.3f,", median(&figures[i]), lo, hi);
        csv_field(csv, figures[i].unit, "\n");
    }
    return fclose(csv);
}

/* ---- plots ---------------------------------------------------------------------- */

#define MAX_KEPT 200000
static struct {
    char label[64];
    int64_t *v;
    size_t n;
} latencies[MAX_CONFIGS];
static int nlatencies;

void report_keep_latencies(const char *label, const int64_t *samples, size_t n)
{
    int i = 0;
    while (i < nlatencies && strcmp(latencies[i].label, label))
        i++;
    if (i == nlatencies) {
        if (nlatencies == MAX_CONFIGS)
            return;
        nlatencies++;
        snprintf(latencies[i].label, sizeof latencies[i].label, "%s", label);
    }
    free(latencies[i].v);
    latencies[i].n = n < MAX_KEPT ? n : MAX_KEPT;
    latencies[i].v = malloc(latencies[i].n * sizeof(int64_t));
    /* samples are sorted by bench_percentile already; keep an even spread */
    for (size_t k = 0; k < latencies[i].n; k++)
        latencies[i].v[k] = samples[k * n / latencies[i].n];
}

static FILE *open_in(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        perror(path);
    return f;
}

/* What a plot was measured on, printed under it: the machine (host, CPU
 * model, cores), the date (UTC), the library's version and the commit
 * (DLOCK_BENCH_COMMIT, which scripts/bench.sh sets from git). Quotes are
 * dropped: the text goes inside a gnuplot string. */
static void plot_stamp(char *out, size_t size)
{
    char host[128] = "?", cpu[160] = "?", line[512];
    FILE *f = fopen("/proc/sys/kernel/hostname", "r");
    if (f && fgets(host, sizeof host, f))
        host[strcspn(host, "\n")] = 0;
    if (f)
        fclose(f);
    f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
    time_t now = time(NULL);
    struct tm tm;
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
    const char *commit = getenv("DLOCK_BENCH_COMMIT");
    snprintf(out, size, "%s, %s, %ld cores; %s; libdlock %s, commit %s", host, cpu, sysconf(_SC_NPROCESSORS_ONLN),
             date, dlock_version(), commit && *commit ? commit : "unknown");
    for (char *p = out; *p; p++)
        if (*p == '\'' || *p == '"' || *p == '\\')
            *p = ' ';
}

/* Writes NAME.gp that draws into NAME.png and NAME.svg, with the stamp
 * under the plot. */
static void write_plot(const char *dir, const char *name, const char *body)
{
    char gp[128], stamp[512];
    snprintf(gp, sizeof gp, "%s.gp", name);
    FILE *f = open_in(dir, gp);
    if (!f)
        return;
    plot_stamp(stamp, sizeof stamp);
    fprintf(f, "set terminal pngcairo size 900,640 noenhanced\nset output '%s.png'\n"
               "set label 1001 '%s' at screen 0.01, screen 0.015 font ',8' tc rgb '#555555'\n%s\n"
               "set terminal svg size 900,640 noenhanced\nset output '%s.svg'\nreplot\n",
            name, stamp, body, name);
    fclose(f);
}

/* The worker count the hand-off plot shows: 8 if the run had it, else the
 * largest it had. */
static int handoff_workers(void)
{
    int best = 0;
    for (int w = 0; w < opt.nworker_counts; w++) {
        if (opt.worker_counts[w] == 8)
            return 8;
        if (opt.worker_counts[w] > best)
            best = opt.worker_counts[w];
    }
    return best;
}

int report_plots(const char *dir, const struct bench_config *configs, int nconfigs)
{
    mkdir(dir, 0755);
    /* 1. throughput per backend, beside its baseline */
    FILE *f = open_in(dir, "throughput.dat");
    if (!f)
        return -1;
    fprintf(f, "# backend libdlock baseline (acquire+release/s, medians)\n");
    bool any_throughput = false;
    for (int c = 0; c < nconfigs; c++) {
        double a = figure_median(configs[c].label, "uncontended", "acquire+release/s");
        double b = figure_median(configs[c].label, "baseline-uncontended", "acquire+release/s");
        any_throughput |= !isnan(a) || !isnan(b);
        fprintf(f, "%s %.1f %.1f\n", configs[c].label, isnan(a) ? 0 : a, isnan(b) ? 0 : b);
    }
    fclose(f);
    /* A run that took no uncontended figure has nothing to draw there
     * (gnuplot refuses a plot with no point). */
    if (any_throughput)
        write_plot(dir, "throughput",
               "set title 'Uncontended acquire+release per second (median)'\n"
               "set style data histogram\nset style histogram cluster gap 1\nset style fill solid 0.8\n"
               "set boxwidth 0.9\nset ylabel 'ops/s (log scale)'\nset logscale y\nset yrange [100:*]\nset key top right\n"
               /* Backend names under the bars: slanted, so that long ones do not run into each other. */
               "set xtics rotate by 30 right nomirror\nset bmargin 10\n"
               "plot 'throughput.dat' using 2:xtic(1) title 'libdlock', '' using 3 title 'plain client loop'");

    /* 2. latency distributions (CDF of the last uncontended run) */
    f = open_in(dir, "latency.dat");
    if (!f)
        return -1;
    char plot[4096] = "set title 'Uncontended acquire+release latency'\nset xlabel 'microseconds'\n"
                      "set ylabel 'fraction of cycles'\nset logscale x\nset key bottom right\nplot ";
    for (int i = 0; i < nlatencies; i++) {
        fprintf(f, "# %s\n", latencies[i].label);
        for (size_t k = 0; k < latencies[i].n; k += latencies[i].n > 2000 ? latencies[i].n / 2000 : 1)
            fprintf(f, "%lld %.5f\n", (long long)latencies[i].v[k], (double)k / (double)latencies[i].n);
        fprintf(f, "\n\n");
        size_t used = strlen(plot);
        snprintf(plot + used, sizeof plot - used, "%s'latency.dat' index %d using 1:2 with lines lw 2 title '%s'",
                 i ? ", " : "", i, latencies[i].label);
    }
    fclose(f);
    if (nlatencies)
        write_plot(dir, "latency", plot);

    /* 3. hand-off per backend at one worker count: p50 and p99 bars side
     * by side, on a log axis (hand-offs span decades: a notified backend's
     * 100 us beside a polling one's 100 ms). */
    f = open_in(dir, "handoff.dat");
    if (!f)
        return -1;
    int workers = handoff_workers();
    char scenario[40];
    snprintf(scenario, sizeof scenario, "contended-%dw", workers);
    fprintf(f, "# backend, hand-off p50 and p99 (us) at %d workers (medians)\n", workers);
    bool any_handoff = false;
    for (int c = 0; c < nconfigs; c++) {
        double p50 = figure_median(configs[c].label, scenario, "handoff p50");
        double p99 = figure_median(configs[c].label, scenario, "handoff p99");
        if (isnan(p50) || p50 <= 0)
            continue; /* not measured here: no empty slot */
        fprintf(f, "%s %.1f %.1f\n", configs[c].label, p50, isnan(p99) || p99 <= 0 ? p50 : p99);
        any_handoff = true;
    }
    fclose(f);
    char plot3[1024];
    snprintf(plot3, sizeof plot3,
             "set title 'Hand-off from release to the next grant, %d workers (median of runs)'\n"
             "set style data histogram\nset style histogram cluster gap 1\nset style fill solid 0.8\n"
             "set boxwidth 0.9\nset ylabel 'microseconds (log scale)'\nset logscale y\nset yrange [10:*]\n"
             "set key top left\nset xtics rotate by 30 right nomirror\nset bmargin 10\n"
             "plot 'handoff.dat' using 2:xtic(1) title 'p50', '' using 3 title 'p99'",
             workers);
    if (any_handoff)
        write_plot(dir, "handoff", plot3);

    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && command -v gnuplot >/dev/null 2>&1 && for p in *.gp; do gnuplot \"$p\" || exit 1; done",
             dir);
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "dlock-bench: gnuplot is missing or failed; the .dat and .gp files are in %s\n", dir);
        return -1;
    }
    return 0;
}
