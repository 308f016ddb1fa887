/* contrib/cli/serve_render.c - the documents of dlock serve: /api/locks
 * (JSON) and /metrics (Prometheus text), both from one view. */
#include "serve.h"
#include "entry.h"
#include "escape.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A memstream's buffer (*buf is only set by fclose), or NULL when
 * writing it failed. */
static char *finish(FILE *f, char **buf)
{
    bool bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        free(*buf);
        return NULL;
    }
    return *buf;
}

char *serve_render_api(const struct view *v, const char *backend, int64_t stale_ms)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return NULL;
    fputs("{\"backend\":", f);
    escape_json(f, backend, strlen(backend));
    fprintf(f, ",\"generated_ms\":%" PRId64, v->generated_ms);
    if (v->rc != DLOCK_OK) {
        fputs(",\"error\":", f);
        escape_json(f, v->error, strlen(v->error));
        fputs("}\n", f);
        return finish(f, &buf);
    }
    fprintf(f, ",\"stale_after_ms\":%" PRId64 ",\"truncated\":%s,\"count\":%zu,\"locks\":[", stale_ms,
            v->truncated ? "true" : "false", v->n);
    for (size_t i = 0; i < v->n; i++) {
        fputs(i ? ",\n" : "\n", f);
        entry_json(f, &v->entries[i], v->elections ? &v->elections[i] : NULL);
    }
    fputs("]}\n", f);
    return finish(f, &buf);
}

static void gauge_header(FILE *f, const char *family, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", family, help, family);
}

/* A gauge with the backend label only. */
static void gauge(FILE *f, const char *family, const char *help, const char *backend, double value)
{
    gauge_header(f, family, help);
    fprintf(f, "%s{backend=\"", family);
    escape_label(f, backend, strlen(backend));
    fprintf(f, "\"} %.15g\n", value);
}

char *serve_render_metrics(const struct view *v, const char *backend, int64_t stale_ms)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return NULL;
    bool up = v->rc == DLOCK_OK;
    gauge(f, "dlock_panel_backend_up", "Whether the last listing of the backend succeeded (1) or failed (0).",
          backend, up);
    if (!up)
        return finish(f, &buf); /* no view to say anything else about */
    struct view_summary s = view_summarize(v, stale_ms);
    gauge(f, "dlock_panel_names_listed", "Names held or waited for, as listed (at most the listing cap).",
          backend, (double)v->n);
    gauge(f, "dlock_panel_listing_truncated", "Whether the listing stopped at its cap (1) and missed names.",
          backend, v->truncated);
    gauge(f, "dlock_panel_locks_held", "Names with at least one holder.", backend, (double)s.held);
    gauge(f, "dlock_panel_oldest_hold_age_seconds", "Age of the oldest hold of any name (0: nothing held).",
          backend, s.oldest_age_ms < 0 ? 0.0 : (double)s.oldest_age_ms / 1000.0);
    gauge(f, "dlock_panel_stale_locks", "Held names whose oldest hold is older than --stale-after.", backend,
          (double)s.stale);
    gauge(f, "dlock_panel_stale_after_seconds", "The --stale-after threshold of this panel.", backend,
          (double)stale_ms / 1000.0);
    /* One series per name that is waited for, not per listed name: the
     * names nobody waits for would only add series that stay at 0. */
    gauge_header(f, "dlock_panel_waiters", "Requests waiting for a name, for each name someone waits for.");
    for (size_t i = 0; i < v->n; i++) {
        const dlock_list_entry *e = &v->entries[i];
        if (e->waiters <= 0)
            continue;
        fputs("dlock_panel_waiters{backend=\"", f);
        escape_label(f, backend, strlen(backend));
        fputs("\",name=\"", f);
        if (!escape_label(f, e->name, e->name_len)) {
            /* Names whose bytes are not UTF-8 read alike in the label:
             * the exact bytes keep their series apart. */
            fputs("\",name_hex=\"", f);
            escape_hex(f, e->name, e->name_len);
        }
        fprintf(f, "\"} %" PRId64 "\n", e->waiters);
    }
    return finish(f, &buf);
}
