/* contrib/bench/bench_etcd_baseline.c - the plain etcd loop: what a careful
 * user of libcurl and json-c writes against the v3 JSON gateway to take and
 * drop one lock key by hand, measured in the same run as libdlock's etcd
 * backend.
 *
 *   one lease granted up front (TTL 30 s), then per cycle:
 *   txn { create_revision(key) == 0 ? put key on the lease : - ;
 *         range the name's first key by create_revision }
 *   txn { create_revision(key) == ours ? delete key }
 *   on one connection that libcurl keeps open. */
#include "config.h"

#include "bench.h"

#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef BENCH_ETCD
#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/evp.h>

struct etcd_loop {
    CURL *curl;
    char base[256];       /* http://host:port */
    char key[64], end[64]; /* base64 of the lock key and of its range end */
    char lease[32];
    char reply[8192];
    size_t got;
};

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    struct etcd_loop *e = arg;
    size_t len = size * n;
    if (len > sizeof e->reply - 1 - e->got)
        len = sizeof e->reply - 1 - e->got;
    memcpy(e->reply + e->got, data, len);
    e->got += len;
    return size * n;
}

/* POSTs body to path: the parsed reply, or NULL with *why (curl's reason
 * or "unexpected answer") and *status. */
static struct json_object *try_post(struct etcd_loop *e, const char *path, const char *body, const char **why,
                                    long *status)
{
    char url[320];
    snprintf(url, sizeof url, "%s%s", e->base, path);
    e->got = 0;
    curl_easy_setopt(e->curl, CURLOPT_URL, url);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(e->curl);
    *status = 0;
    curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, status);
    e->reply[e->got] = 0;
    struct json_object *j = rc == CURLE_OK && *status == 200 ? json_tokener_parse(e->reply) : NULL;
    *why = rc == CURLE_OK ? "unexpected answer" : curl_easy_strerror(rc);
    return j;
}

/* POSTs body to path; the parsed reply, or exits with the reason. */
static struct json_object *post(struct etcd_loop *e, const char *path, const char *body)
{
    const char *why;
    long status;
    struct json_object *j = try_post(e, path, body, &why, &status);
    if (!j) {
        fprintf(stderr, "dlock-bench: the etcd baseline loop failed at %s: %s (HTTP %ld)\n", path, why, status);
        exit(1);
    }
    return j;
}

static const char *field(struct json_object *o, const char *name)
{
    struct json_object *v;
    return o && json_object_object_get_ex(o, name, &v) ? json_object_get_string(v) : NULL;
}

static void etcd_cycle(void *arg)
{
    struct etcd_loop *e = arg;
    char body[1024];
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"create_revision\":\"0\"}],"
             "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"YQ==\",\"lease\":\"%s\"}},"
             "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\",\"sort_target\":\"CREATE\","
             "\"sort_order\":\"ASCEND\",\"limit\":\"1\"}}]}",
             e->key, e->key, e->lease, e->key, e->end);
    struct json_object *taken = post(e, "/v3/kv/txn", body), *header, *succeeded;
    /* The put made the key at the txn's revision: its create_revision. */
    const char *rev = json_object_object_get_ex(taken, "header", &header) ? field(header, "revision") : NULL;
    if (!rev || !json_object_object_get_ex(taken, "succeeded", &succeeded) || !json_object_get_boolean(succeeded)) {
        fprintf(stderr, "dlock-bench: the etcd baseline found its key taken\n");
        exit(1);
    }
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"create_revision\":\"%s\"}],"
             "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}}]}",
             e->key, rev, e->key);
    json_object_put(taken);
    json_object_put(post(e, "/v3/kv/txn", body));
}

static void base64_of(char *out, const char *text)
{
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)text, (int)strlen(text));
}

/* The first endpoint of cfg's etcd group into base, when it is plain http
 * (an https or authenticated cluster is left to libdlock's rows). */
static bool plain_endpoint(const struct bench_config *cfg, char *base, size_t size)
{
    if (strcmp(cfg->backend, "etcd") != 0 || !cfg->path)
        return false;
    config_t c;
    config_init(&c);
    const char *endpoint = "http://127.0.0.1:2379";
    if (config_read_file(&c, cfg->path) == CONFIG_TRUE) {
        config_setting_t *list = config_lookup(&c, "etcd.endpoints");
        if (list && config_setting_type(list) == CONFIG_TYPE_STRING)
            endpoint = config_setting_get_string(list);
        else if (list && config_setting_length(list) > 0)
            endpoint = config_setting_get_string_elem(list, 0);
    }
    bool plain = endpoint && strncmp(endpoint, "http://", 7) == 0;
    if (plain)
        snprintf(base, size, "%s", endpoint);
    config_destroy(&c);
    return plain;
}

static struct etcd_loop *loop_open(const struct bench_config *cfg)
{
    struct etcd_loop *e = calloc(1, sizeof *e);
    if (!e || !plain_endpoint(cfg, e->base, sizeof e->base) || !(e->curl = curl_easy_init())) {
        free(e);
        return NULL;
    }
    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, 5000L);
    return e;
}

static void loop_close(struct etcd_loop *e)
{
    curl_easy_cleanup(e->curl);
    free(e);
}

void bench_etcd_compact(const struct bench_config *cfg)
{
    struct etcd_loop *e = loop_open(cfg);
    if (!e)
        return;
    struct json_object *read = post(e, "/v3/kv/range", "{\"key\":\"AA==\"}"), *header;
    const char *rev = json_object_object_get_ex(read, "header", &header) ? field(header, "revision") : NULL;
    char body[96];
    snprintf(body, sizeof body, "{\"revision\":\"%s\",\"physical\":true}", rev ? rev : "0");
    json_object_put(read);
    /* Refused when nothing was written since the last compaction: then
     * there is nothing to drop. */
    const char *why;
    long status;
    struct json_object *done = try_post(e, "/v3/kv/compaction", body, &why, &status);
    if (done)
        json_object_put(done);
    loop_close(e);
}

bool run_etcd_baseline_uncontended(const struct bench_config *cfg, int64_t *samples)
{
    struct etcd_loop *e = loop_open(cfg);
    if (!e)
        return false;
    base64_of(e->key, "dlock-bench-baseline/k");
    base64_of(e->end, "dlock-bench-baseline/l");
    struct json_object *granted = post(e, "/v3/lease/grant", "{\"TTL\":\"30\"}");
    snprintf(e->lease, sizeof e->lease, "%s", field(granted, "ID") ? field(granted, "ID") : "0");
    json_object_put(granted);
    double secs;
    size_t n = bench_timed_cycles(etcd_cycle, e, samples, &secs);
    bench_record_cycles(cfg->label, "baseline-uncontended", samples, n, secs);
    char body[64];
    snprintf(body, sizeof body, "{\"ID\":\"%s\"}", e->lease);
    json_object_put(post(e, "/v3/lease/revoke", body));
    loop_close(e);
    return true;
}
#else
/* Built without the etcd client libraries: no plain loop to compare with,
 * and no etcd to compact. */
void bench_etcd_compact(const struct bench_config *cfg)
{
    (void)cfg;
}

bool run_etcd_baseline_uncontended(const struct bench_config *cfg, int64_t *samples)
{
    (void)cfg, (void)samples;
    return false;
}
#endif
