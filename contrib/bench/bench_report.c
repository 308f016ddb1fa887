/* contrib/bench/bench_report.c - figures, and writing them: the table (with
 * each figure's ratio to its backend's baseline), the CSV, the plots. */
#include "bench.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    if (!strcmp(f->scenario, "uncontended") && !strcmp(f->metric, "acquire+release/s"))
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

/* Writes NAME.gp that draws into NAME.png and NAME.svg. */
static void write_plot(const char *dir, const char *name, const char *body)
{
    char gp[128];
    snprintf(gp, sizeof gp, "%s.gp", name);
    FILE *f = open_in(dir, gp);
    if (!f)
        return;
    fprintf(f, "set terminal pngcairo size 900,640 noenhanced\nset output '%s.png'\n%s\n"
               "set terminal svg size 900,640 noenhanced\nset output '%s.svg'\nreplot\n",
            name, body, name);
    fclose(f);
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

    /* 3. hand-off vs workers */
    f = open_in(dir, "handoff.dat");
    if (!f)
        return -1;
    fprintf(f, "# workers then, per backend, hand-off p50 and p99 (us)\n");
    /* Hand-offs span decades (a polling backend's 100 ms tail beside a
     * notified one's 300 us): a log scale, and ticks at the worker counts
     * this run used. */
    char plot3[4096] = "set title 'Hand-off from release to the next grant'\nset xlabel 'workers'\n"
                       "set ylabel 'microseconds (log scale)'\nset logscale y\nset key below\nset xtics (";
    for (int w = 0; w < opt.nworker_counts; w++) {
        size_t used = strlen(plot3);
        snprintf(plot3 + used, sizeof plot3 - used, "%s%d", w ? ", " : "", opt.worker_counts[w]);
    }
    size_t used3 = strlen(plot3);
    snprintf(plot3 + used3, sizeof plot3 - used3, ")\nset offsets 0.5, 0.5, 0, 0\nplot ");
    bool any_handoff = false;
    for (int w = 0; w < opt.nworker_counts; w++) {
        fprintf(f, "%d", opt.worker_counts[w]);
        for (int c = 0; c < nconfigs; c++) {
            char scenario[40];
            snprintf(scenario, sizeof scenario, "contended-%dw", opt.worker_counts[w]);
            double p50 = figure_median(configs[c].label, scenario, "handoff p50");
            double p99 = figure_median(configs[c].label, scenario, "handoff p99");
            /* NaN, not 0: a figure the run did not take is left out, and a
             * log scale has no 0. */
            fprintf(f, " %.1f %.1f", isnan(p50) || p50 <= 0 ? NAN : p50, isnan(p99) || p99 <= 0 ? NAN : p99);
            any_handoff |= !isnan(p50) && p50 > 0;
        }
        fprintf(f, "\n");
    }
    fclose(f);
    for (int c = 0; c < nconfigs; c++) {
        size_t used = strlen(plot3);
        snprintf(plot3 + used, sizeof plot3 - used,
                 "%s'handoff.dat' using 1:%d with linespoints lw 2 title '%s p50', "
                 "'handoff.dat' using 1:%d with linespoints dt 2 title '%s p99'",
                 c ? ", " : "", 2 + 2 * c, configs[c].label, 3 + 2 * c, configs[c].label);
    }
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
