/* core/settings.c - a backend group of the configuration: validation against
 * the provider's declared settings, and the typed getters providers use. */
#include "config.h"

#include "internal.h"

#include <stdio.h>
#include <string.h>

void dlock__diag_add(struct dlock__diag *diag, int is_error, const char *file, int line,
                     const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (is_error) {
        if (diag->errors++ == 0) {
            if (line > 0)
                snprintf(diag->first_error, sizeof diag->first_error, "%s:%d: %s", file, line, msg);
            else
                snprintf(diag->first_error, sizeof diag->first_error, "%s: %s", file, msg);
        }
    } else {
        diag->warnings++;
    }
    if (diag->report)
        diag->report(is_error, file, line, msg, diag->arg);
}

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

/* Levenshtein distance, for "did you mean" hints; names are short. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t above = row[j];
            row[j] = min3(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1]));
            diag = above;
        }
    }
    return row[lb];
}

const char *dlock__suggest(const char *word, const char *const *candidates, size_t n)
{
    const char *best = NULL;
    size_t best_distance = 3;
    size_t wlen = strlen(word);
    for (size_t i = 0; i < n; i++)
        if (wlen >= 3 && strncmp(candidates[i], word, wlen) == 0)
            return candidates[i]; /* "lease" -> "lease_ms" */
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, candidates[i]);
        if (d < best_distance) {
            best_distance = d;
            best = candidates[i];
        }
    }
    return best;
}

static const char *type_name(enum dlock_setting_type type)
{
    switch (type) {
    case DLOCK_SETTING_STRING: return "a string";
    case DLOCK_SETTING_INT: return "an integer";
    case DLOCK_SETTING_BOOL: return "a boolean (true or false)";
    case DLOCK_SETTING_STRING_LIST: return "a list of strings";
    }
    return "?";
}

static bool is_string_list(const config_setting_t *s)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY)
        return false;
    for (int i = 0; i < config_setting_length(s); i++)
        if (config_setting_type(config_setting_get_elem(s, (unsigned)i)) != CONFIG_TYPE_STRING)
            return false;
    return true;
}

static bool type_matches(const config_setting_t *s, enum dlock_setting_type type)
{
    int t = config_setting_type(s);
    switch (type) {
    case DLOCK_SETTING_STRING: return t == CONFIG_TYPE_STRING;
    case DLOCK_SETTING_INT: return t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64;
    case DLOCK_SETTING_BOOL: return t == CONFIG_TYPE_BOOL;
    case DLOCK_SETTING_STRING_LIST: return is_string_list(s);
    }
    return false;
}

static const char *setting_file(const config_setting_t *s, const char *fallback)
{
    const char *f = config_setting_source_file(s);
    return f ? f : fallback;
}

int dlock__settings_validate(const config_setting_t *group, const char *source,
                             const struct dlock_setting_spec *spec, const char *group_name,
                             struct dlock__diag *diag)
{
    int errors_before = diag->errors;
    if (!group)
        return 0;
    const char *names[64];
    size_t nnames = 0;
    for (const struct dlock_setting_spec *sp = spec; sp && sp->name && nnames < 64; sp++)
        names[nnames++] = sp->name;

    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        const char *name = config_setting_name(s);
        const char *file = setting_file(s, source);
        int line = config_setting_source_line(s);
        const struct dlock_setting_spec *match = NULL;
        for (const struct dlock_setting_spec *sp = spec; sp && sp->name; sp++)
            if (strcmp(sp->name, name) == 0)
                match = sp;
        if (!match) {
            const char *hint = dlock__suggest(name, names, nnames);
            dlock__diag_add(diag, 1, file, line, "unknown setting '%s' in group '%s'%s%s%s", name,
                            group_name, hint ? " (did you mean '" : "", hint ? hint : "",
                            hint ? "'?)" : "");
            continue;
        }
        if (!type_matches(s, match->type)) {
            dlock__diag_add(diag, 1, file, line, "'%s.%s' must be %s", group_name, name,
                            type_name(match->type));
            continue;
        }
        if (match->type == DLOCK_SETTING_INT && (match->min || match->max)) {
            long long v = config_setting_get_int64(s);
            if (v < match->min || v > match->max)
                dlock__diag_add(diag, 1, file, line, "'%s.%s' is %lld, outside %lld..%lld",
                                group_name, name, v, (long long)match->min, (long long)match->max);
        }
    }
    return diag->errors - errors_before;
}

static const config_setting_t *member(const dlock_settings *s, const char *name)
{
    if (!s || !s->group || !name)
        return NULL;
    return config_setting_get_member(s->group, name);
}

int dlock_settings_string(const dlock_settings *s, const char *name, const char **out)
{
    const config_setting_t *m = member(s, name);
    if (!m || config_setting_type(m) != CONFIG_TYPE_STRING)
        return 0;
    *out = config_setting_get_string(m);
    return 1;
}

int dlock_settings_int(const dlock_settings *s, const char *name, int64_t *out)
{
    const config_setting_t *m = member(s, name);
    if (!m || (config_setting_type(m) != CONFIG_TYPE_INT && config_setting_type(m) != CONFIG_TYPE_INT64))
        return 0;
    *out = config_setting_get_int64(m);
    return 1;
}

int dlock_settings_bool(const dlock_settings *s, const char *name, int *out)
{
    const config_setting_t *m = member(s, name);
    if (!m || config_setting_type(m) != CONFIG_TYPE_BOOL)
        return 0;
    *out = config_setting_get_bool(m);
    return 1;
}

size_t dlock_settings_list_count(const dlock_settings *s, const char *name)
{
    const config_setting_t *m = member(s, name);
    if (!m || !is_string_list(m))
        return 0;
    return (size_t)config_setting_length(m);
}

const char *dlock_settings_list_item(const dlock_settings *s, const char *name, size_t i)
{
    const config_setting_t *m = member(s, name);
    if (!m || !is_string_list(m) || i >= (size_t)config_setting_length(m))
        return NULL;
    return config_setting_get_string_elem(m, (int)i);
}

const char *dlock_settings_where(const dlock_settings *s, const char *name)
{
    static __thread char where[300];
    const config_setting_t *m = name ? member(s, name) : (s ? s->group : NULL);
    const char *source = s && s->source ? s->source : "<config>";
    if (!m)
        snprintf(where, sizeof where, "%s", source);
    else
        snprintf(where, sizeof where, "%s:%u", setting_file(m, source), config_setting_source_line(m));
    return where;
}
