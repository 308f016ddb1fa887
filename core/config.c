/* core/config.c - the libconfig file: top-level settings, the backend choice
 * and the backend groups. Every problem is reported with file and line, and
 * loading goes on after an error so `dlock check-config` can list them all. */
#include "config.h"

#include "internal.h"
#include "../contrib/http/http_address.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const top_level_names[] = {
    "backend", "lease_ms", "watchdog", "retry_base_ms", "retry_cap_ms", "prefix", "metrics", "cache",
};

/* The `cache` group's settings. */
static const struct dlock_setting_spec cache_spec[] = {
    { "idle_ms", DLOCK_SETTING_INT, 0, 3600000 },
    { "cooldown_ms", DLOCK_SETTING_INT, 0, 3600000 },
    { NULL, 0, 0, 0 },
};

/* The `metrics` group's settings; the values are checked further below. */
static const struct dlock_setting_spec metrics_spec[] = {
    { "listen", DLOCK_SETTING_STRING, 0, 0 },
    { "names", DLOCK_SETTING_STRING_LIST, 0, 0 },
    { NULL, 0, 0, 0 },
};

/* The backend names this source tree has modules for (configure collects
 * them; the core names only the built-in default), used to suggest a name
 * for a misspelt group. */
#define MAX_KNOWN 32
static size_t known_backends(const char **out, char *buf, size_t size)
{
    size_t n = 0;
    out[n++] = DLOCK__BUILTIN_BACKEND;
    snprintf(buf, size, "%s", DLOCK_KNOWN_BACKENDS);
    char *save = NULL;
    for (char *w = strtok_r(buf, " ", &save); w && n < MAX_KNOWN; w = strtok_r(NULL, " ", &save))
        out[n++] = w;
    return n;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *file_of(const config_setting_t *s, const char *source)
{
    const char *f = config_setting_source_file(s);
    return f ? f : source;
}

static bool int_in_range(const config_setting_t *s, const char *source, const char *name,
                         int64_t min, int64_t max, int64_t *out, struct dlock__diag *diag)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64) {
        dlock__diag_add(diag, 1, file_of(s, source), config_setting_source_line(s),
                        "'%s' must be an integer (milliseconds)", name);
        return false;
    }
    long long v = config_setting_get_int64(s);
    if (v < min || v > max) {
        dlock__diag_add(diag, 1, file_of(s, source), config_setting_source_line(s),
                        "'%s' is %lld, outside %lld..%lld", name, v, (long long)min, (long long)max);
        return false;
    }
    *out = v;
    return true;
}

static bool valid_prefix(const char *p)
{
    /* The prefix is used inside keys, paths and table names of backends:
     * printable ASCII without spaces, quotes or slashes keeps it safe in all. */
    size_t n = strlen(p);
    if (n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '/' || c == '\\' || c == '{' || c == '}')
            return false;
    }
    return true;
}

/* Label values of the exposition format are UTF-8: a listed name that is
 * not would make every scrape unreadable. */
static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        /* The lead byte says how many bytes follow and, to refuse overlong
         * forms, surrogates and code points past U+10FFFF, the range the
         * first of them must be in. */
        size_t more;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) {
            more = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        } else {
            return false;
        }
        if (n - i <= more || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k <= more; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
        i += more + 1;
    }
    return true;
}

static void check_metrics_names(struct dlock__config *cfg, const config_setting_t *list, struct dlock__diag *diag)
{
    const char *file = file_of(list, cfg->source);
    int line = config_setting_source_line(list);
    size_t n = (size_t)config_setting_length(list);
    if (n > DLOCK__METRICS_NAMES_MAX) {
        dlock__diag_add(diag, 1, file, line,
                        "'metrics.names' lists %zu names, more than %d: every listed name adds its own series "
                        "to each scrape; list only the locks worth watching one by one",
                        n, DLOCK__METRICS_NAMES_MAX);
        return;
    }
    if (n == 0)
        return;
    cfg->metrics_names = calloc(n, sizeof *cfg->metrics_names);
    if (!cfg->metrics_names) {
        dlock__diag_add(diag, 1, file, line, "out of memory for 'metrics.names'");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = config_setting_get_string_elem(list, (int)i);
        size_t len = strlen(name);
        if (len == 0 || len > DLOCK_NAME_MAX || !valid_utf8((const unsigned char *)name, len)) {
            dlock__diag_add(diag, 1, file, line,
                            "'metrics.names' item %zu is not a lock name: names here must be 1..%d bytes of UTF-8",
                            i + 1, DLOCK_NAME_MAX);
            continue;
        }
        bool repeated = false;
        for (size_t j = 0; j < cfg->metrics_nnames; j++)
            repeated = repeated || strcmp(cfg->metrics_names[j], name) == 0;
        if (repeated)
            dlock__diag_add(diag, 1, file, line, "'metrics.names' lists \"%s\" twice", name);
        else
            cfg->metrics_names[cfg->metrics_nnames++] = name;
    }
}

static void check_metrics(struct dlock__config *cfg, const config_setting_t *group, struct dlock__diag *diag)
{
    if (dlock__settings_validate(group, cfg->source, metrics_spec, "metrics", diag) > 0)
        return;
    const config_setting_t *listen = config_setting_get_member(group, "listen");
    const config_setting_t *names = config_setting_get_member(group, "names");
    if (names)
        check_metrics_names(cfg, names, diag);
    if (!listen)
        return;
    const char *file = file_of(listen, cfg->source);
    int line = config_setting_source_line(listen);
    const char *text = config_setting_get_string(listen);
    /* Port 0 is the grammar's, but here nothing would tell a scraper
     * which port the kernel chose. */
    struct http_address addr;
    if (!http_address_parse(text, &addr) || addr.port == 0) {
        dlock__diag_add(diag, 1, file, line,
                        "'metrics.listen' is \"%s\": it must be ADDRESS:PORT with a numeric address (or "
                        "localhost) and a port of 1..65535, e.g. \"127.0.0.1:9464\" (this host only), "
                        "\"0.0.0.0:9464\" (every interface) or \"[::1]:9464\"",
                        text);
        return;
    }
#ifdef DLOCK_HAVE_MICROHTTPD
    cfg->metrics_listen = text;
#else
    dlock__diag_add(diag, 1, file, line,
                    "'metrics.listen' cannot be served: this libdlock was built without libmicrohttpd. "
                    "Rebuild it with libmicrohttpd (Debian: libmicrohttpd-dev; configure --with-microhttpd=yes), "
                    "or drop 'listen' and read the metrics with dlock_client_metrics() or `dlock metrics`");
#endif
}

static void check_top_level(struct dlock__config *cfg, struct dlock__diag *diag,
                            const config_setting_t **backend_setting)
{
    const config_setting_t *root = config_root_setting(&cfg->cfg);
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        const char *name = config_setting_name(s);
        const char *file = file_of(s, cfg->source);
        int line = config_setting_source_line(s);
        int type = config_setting_type(s);

        if (strcmp(name, "metrics") == 0) {
            if (type == CONFIG_TYPE_GROUP)
                check_metrics(cfg, s, diag);
            else
                dlock__diag_add(diag, 1, file, line,
                                "'metrics' must be a group, e.g. metrics = { listen = \"127.0.0.1:9464\"; }");
            continue;
        }
        if (strcmp(name, "cache") == 0) {
            if (type != CONFIG_TYPE_GROUP) {
                dlock__diag_add(diag, 1, file, line, "'cache' must be a group, e.g. cache = { idle_ms = 1000; }");
            } else if (dlock__settings_validate(s, cfg->source, cache_spec, "cache", diag) == 0) {
                const config_setting_t *idle = config_setting_get_member(s, "idle_ms");
                if (idle)
                    cfg->cache_idle_ms = config_setting_get_int64(idle);
                const config_setting_t *cooldown = config_setting_get_member(s, "cooldown_ms");
                if (cooldown)
                    cfg->cache_cooldown_ms = config_setting_get_int64(cooldown);
            }
            continue;
        }
        if (type == CONFIG_TYPE_GROUP)
            continue; /* backend groups: checked once the backends are known */
        if (strcmp(name, "backend") == 0) {
            if (type != CONFIG_TYPE_STRING)
                dlock__diag_add(diag, 1, file, line, "'backend' must be a string, e.g. \"local\"");
            else
                *backend_setting = s;
        } else if (strcmp(name, "lease_ms") == 0) {
            int_in_range(s, cfg->source, name, 100, 86400000, &cfg->lease_ms, diag);
        } else if (strcmp(name, "retry_base_ms") == 0) {
            int_in_range(s, cfg->source, name, 1, 60000, &cfg->retry_base_ms, diag);
        } else if (strcmp(name, "retry_cap_ms") == 0) {
            int_in_range(s, cfg->source, name, 1, 3600000, &cfg->retry_cap_ms, diag);
        } else if (strcmp(name, "watchdog") == 0) {
            if (type != CONFIG_TYPE_BOOL)
                dlock__diag_add(diag, 1, file, line, "'watchdog' must be true or false");
            else
                cfg->watchdog = config_setting_get_bool(s) != 0;
        } else if (strcmp(name, "prefix") == 0) {
            if (type != CONFIG_TYPE_STRING || !valid_prefix(config_setting_get_string(s)))
                dlock__diag_add(diag, 1, file, line,
                                "'prefix' must be a string of at most 64 printable characters "
                                "without spaces, quotes, slashes or braces");
            else
                snprintf(cfg->prefix, sizeof cfg->prefix, "%s", config_setting_get_string(s));
        } else {
            const char *hint = dlock__suggest(name, top_level_names, COUNT(top_level_names));
            dlock__diag_add(diag, 1, file, line, "unknown setting '%s'%s%s%s", name,
                            hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
        }
    }
    if (cfg->retry_cap_ms < cfg->retry_base_ms)
        dlock__diag_add(diag, 1, cfg->source, 0, "retry_cap_ms (%lld) is below retry_base_ms (%lld)",
                        (long long)cfg->retry_cap_ms, (long long)cfg->retry_base_ms);
}

static bool is_backend_name(const char *name)
{
    return name[0] && strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(name);
}

static void check_groups(struct dlock__config *cfg, struct dlock__diag *diag)
{
    const config_setting_t *root = config_root_setting(&cfg->cfg);
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        const char *name = config_setting_name(s);
        if (config_setting_type(s) != CONFIG_TYPE_GROUP || strcmp(name, "metrics") == 0 ||
            strcmp(name, "cache") == 0)
            continue; /* the metrics and cache groups are the core's own (check_top_level) */
        const char *file = file_of(s, cfg->source);
        int line = config_setting_source_line(s);
        bool chosen = cfg->provider && strcmp(name, cfg->provider->name) == 0;
        const struct dlock_provider *p = NULL;
        if (chosen) {
            p = cfg->provider;
            cfg->backend_group = s;
        } else if (dlock__provider_find(name, &p) != DLOCK_OK) {
            /* A group for a backend whose module this host lacks (one of
             * ours not built here, or an out-of-tree one) is not an error:
             * one file can serve hosts with different builds. A near miss
             * of a backend we know is taken for a typo. */
            const char *known[MAX_KNOWN + 2];
            char names[512];
            size_t nknown = known_backends(known, names, sizeof names);
            known[nknown++] = "metrics"; /* the two groups that are not a backend's */
            known[nknown++] = "cache";
            const char *hint = dlock__suggest(name, known, nknown);
            if (hint && strcmp(hint, name) == 0)
                hint = NULL;
            if (is_backend_name(name) && !hint) {
                dlock__diag_add(diag, 0, file, line,
                                "group '%s' not checked: that backend is not available here (%s)",
                                name, dlock_errmsg());
            } else {
                dlock__diag_add(diag, 1, file, line, "unknown group '%s'%s%s%s", name,
                                hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
            }
            continue;
        }
        dlock__settings_validate(s, cfg->source, p->settings, name, diag);
    }
}

/* True when a group holds a secret: a password, an auth string, or a
 * connection string with a password in it. */
static const char *secret_in(const config_setting_t *group)
{
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        const char *name = config_setting_name(s);
        const char *value = config_setting_type(s) == CONFIG_TYPE_STRING ? config_setting_get_string(s) : NULL;
        if (!name || !value || !value[0])
            continue;
        if (strstr(name, "password") || strcmp(name, "auth") == 0 ||
            (strcmp(name, "conninfo") == 0 && strstr(value, "password")))
            return name;
    }
    return NULL;
}

/* A file that holds a secret and that other users can read gives the
 * secret away: warned about, as libpq does for ~/.pgpass. */
static void check_secret_file_mode(struct dlock__config *cfg, const char *path, struct dlock__diag *diag)
{
    struct stat st;
    if (!path || stat(path, &st) != 0 || !(st.st_mode & (S_IRWXG | S_IRWXO)))
        return;
    const config_setting_t *root = config_root_setting(&cfg->cfg);
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *g = config_setting_get_elem(root, (unsigned)i);
        const char *secret = config_setting_type(g) == CONFIG_TYPE_GROUP ? secret_in(g) : NULL;
        if (secret) {
            dlock__diag_add(diag, 0, path, config_setting_source_line(g),
                            "this file holds %s.%s and is open to group or others (mode %03o): "
                            "chmod 600 (or 640 for a service group) it",
                            config_setting_name(g), secret, (unsigned)(st.st_mode & 0777));
            return;
        }
    }
}

/* Whether a string is a URL with credentials in its authority
 * ("scheme://user:password@host"). */
static bool url_with_credentials(const char *v)
{
    const char *authority = strstr(v, "://");
    if (!authority)
        return false;
    authority += 3;
    size_t end = strcspn(authority, "/?#");
    return memchr(authority, '@', end) != NULL;
}

/* A backend setting that is a URL with a user and password in it: the
 * backend sends them and keeps them out of its messages, but they belong
 * in the settings made for credentials, which a file mode check covers
 * and which never appear in a label. */
static void check_credentials_in_urls(struct dlock__config *cfg, struct dlock__diag *diag)
{
    const config_setting_t *root = config_root_setting(&cfg->cfg);
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *g = config_setting_get_elem(root, (unsigned)i);
        if (config_setting_type(g) != CONFIG_TYPE_GROUP)
            continue;
        for (int k = 0; k < config_setting_length(g); k++) {
            const config_setting_t *s = config_setting_get_elem(g, (unsigned)k);
            bool list = config_setting_is_aggregate(s);
            int n = list ? config_setting_length(s) : 1;
            for (int j = 0; j < n; j++) {
                const config_setting_t *item = list ? config_setting_get_elem(s, (unsigned)j) : s;
                const char *v = config_setting_type(item) == CONFIG_TYPE_STRING ? config_setting_get_string(item) : NULL;
                if (!v || !url_with_credentials(v))
                    continue;
                dlock__diag_add(diag, 0, file_of(item, cfg->source), config_setting_source_line(item),
                                "%s.%s: a URL with a user name and password in it; put them in the backend's "
                                "own settings instead (for etcd: etcd.username and etcd.password)",
                                config_setting_name(g), config_setting_name(s));
                break;
            }
        }
    }
}

static void set_defaults(struct dlock__config *cfg)
{
    cfg->lease_ms = DLOCK__DEFAULT_LEASE_MS;
    cfg->watchdog = true;
    cfg->retry_base_ms = DLOCK__DEFAULT_RETRY_BASE_MS;
    cfg->retry_cap_ms = DLOCK__DEFAULT_RETRY_CAP_MS;
    cfg->cache_cooldown_ms = DLOCK__DEFAULT_CACHE_COOLDOWN_MS;
    snprintf(cfg->prefix, sizeof cfg->prefix, "%s", DLOCK__DEFAULT_PREFIX);
    cfg->provider = NULL;
    cfg->backend_group = NULL;
}

static int read_source(struct dlock__config *cfg, const char *path, const char *text,
                       struct dlock__diag *diag)
{
    int ok;
    if (path) {
        FILE *f = fopen(path, "re");
        if (!f) {
            dlock__diag_add(diag, 1, path, 0, "cannot open: %s", strerror(errno));
            return DLOCK_ECONFIG;
        }
        fclose(f);
        ok = config_read_file(&cfg->cfg, path);
    } else {
        ok = config_read_string(&cfg->cfg, text);
    }
    if (ok != CONFIG_TRUE) {
        const char *file = config_error_file(&cfg->cfg);
        if (config_error_type(&cfg->cfg) == CONFIG_ERR_FILE_IO)
            dlock__diag_add(diag, 1, file ? file : cfg->source, 0, "cannot read: %s",
                            config_error_text(&cfg->cfg));
        else
            dlock__diag_add(diag, 1, file ? file : cfg->source, config_error_line(&cfg->cfg),
                            "syntax error: %s", config_error_text(&cfg->cfg));
        return DLOCK_ECONFIG;
    }
    return DLOCK_OK;
}

int dlock__config_load(struct dlock__config *cfg, const char *path, const char *text,
                       struct dlock__diag *diag)
{
    memset(cfg, 0, sizeof *cfg);
    set_defaults(cfg);
    config_init(&cfg->cfg);
    if (path) {
        cfg->source_copy = strdup(path);
        if (!cfg->source_copy) {
            config_destroy(&cfg->cfg);
            return dlock_seterr(DLOCK_ENOMEM, "config: out of memory");
        }
        cfg->source = cfg->source_copy;
    } else {
        cfg->source = "<string>";
    }

    int rc = read_source(cfg, path, text ? text : "", diag);
    if (rc == DLOCK_OK) {
        const config_setting_t *backend_setting = NULL;
        check_top_level(cfg, diag, &backend_setting);
        const char *backend = backend_setting ? config_setting_get_string(backend_setting) : DLOCK__BUILTIN_BACKEND;
        int find_rc = dlock__provider_find(backend, &cfg->provider);
        if (find_rc != DLOCK_OK) {
            diag->backend_unavailable = find_rc == DLOCK_EUNAVAILABLE;
            const char *file = backend_setting ? file_of(backend_setting, cfg->source) : cfg->source;
            int line = backend_setting ? config_setting_source_line(backend_setting) : 0;
            if (find_rc == DLOCK_ECONFIG) /* not a name at all: a mistake in the file */
                dlock__diag_add(diag, 1, file, line, "backend: %s", dlock_errmsg());
            else
                dlock__diag_add(diag, 1, file, line, "backend '%s' is not available: %s", backend, dlock_errmsg());
            cfg->provider = NULL;
        }
        check_groups(cfg, diag);
        check_secret_file_mode(cfg, path, diag);
        check_credentials_in_urls(cfg, diag);
    }
    if (diag->errors > 0) {
        dlock__config_free(cfg);
        return dlock_seterr(DLOCK_ECONFIG, "%s%s", diag->first_error,
                            diag->errors > 1 ? " (and more: run `dlock check-config` for all)" : "");
    }
    return DLOCK_OK;
}

void dlock__config_free(struct dlock__config *cfg)
{
    free(cfg->metrics_names);
    cfg->metrics_names = NULL;
    cfg->metrics_nnames = 0;
    config_destroy(&cfg->cfg);
    free(cfg->source_copy);
    cfg->source_copy = NULL;
}

static void count_only(int is_error, const char *file, int line, const char *msg, void *arg)
{
    (void)is_error; (void)file; (void)line; (void)msg; (void)arg;
}

int dlock_config_check(const char *config_path, dlock_config_report_fn report, void *arg)
{
    if (!config_path)
        return dlock_seterr(DLOCK_EINVAL, "dlock_config_check: config_path is NULL");
    struct dlock__diag diag = { .report = report ? report : count_only, .arg = arg };
    struct dlock__config cfg;
    int rc = dlock__config_load(&cfg, config_path, NULL, &diag);
    if (rc == DLOCK_OK)
        dlock__config_free(&cfg);
    return rc;
}
