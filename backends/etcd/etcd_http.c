/* backends/etcd/etcd_http.c - see etcd_http.h */
#include "config.h"

#include "etcd_http.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void init_curl(void)
{
    curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* url with the user information of its authority ("user:password@"), if
 * it has any, written as "***@": libcurl sends it as HTTP basic
 * authentication (for an etcd behind an authenticating proxy), and it must
 * not reach a message, a log or the panel. */
static void redact_userinfo(const char *url, char *out, size_t size)
{
    const char *authority = strstr(url, "://");
    authority = authority ? authority + 3 : url;
    size_t end = strcspn(authority, "/?#");
    const char *at = memrchr(authority, '@', end);
    if (!at) {
        snprintf(out, size, "%s", url);
        return;
    }
    snprintf(out, size, "%.*s***%s", (int)(authority - url), url, at);
}

static int copy_endpoint(struct etcd_http *h, const char *value, const dlock_settings *s)
{
    size_t len = strlen(value);
    while (len > 0 && value[len - 1] == '/')
        len--;
    char shown[sizeof h->shown[0]];
    redact_userinfo(value, shown, sizeof shown);
    if ((strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0) || len <= 8 ||
        len >= sizeof h->endpoints[0])
        return dlock_seterr(DLOCK_ECONFIG, "%s: etcd.endpoints: \"%s\" is not an http:// or https:// URL",
                            dlock_settings_where(s, "endpoints"), shown);
    memcpy(h->endpoints[h->nendpoints], value, len);
    h->endpoints[h->nendpoints][len] = 0;
    redact_userinfo(h->endpoints[h->nendpoints], h->shown[h->nendpoints], sizeof h->shown[0]);
    h->nendpoints++;
    return DLOCK_OK;
}

const char *etcd_http_shown(const struct etcd_http *h, const char *endpoint)
{
    for (int i = 0; i < h->nendpoints; i++)
        if (strcmp(h->endpoints[i], endpoint) == 0)
            return h->shown[i];
    return "(an endpoint)";
}

int etcd_http_init(struct etcd_http *h, const dlock_settings *s)
{
    memset(h, 0, sizeof *h);
    pthread_once(&curl_once, init_curl);
    if (curl_init_result != CURLE_OK)
        return dlock_seterr(DLOCK_EINTERNAL, "etcd: libcurl cannot start: %s", curl_easy_strerror(curl_init_result));
    h->connect_timeout_ms = 2000;
    h->command_timeout_ms = 2000;
    dlock_settings_int(s, "connect_timeout_ms", &h->connect_timeout_ms);
    dlock_settings_int(s, "command_timeout_ms", &h->command_timeout_ms);
    const struct {
        const char *name;
        char *out;
        size_t size;
    } strings[] = {
        { "username", h->username, sizeof h->username }, { "password", h->password, sizeof h->password },
        { "cacert", h->cacert, sizeof h->cacert },         { "cert", h->cert, sizeof h->cert },
        { "key", h->key, sizeof h->key },
    };
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        const char *v;
        if (!dlock_settings_string(s, strings[i].name, &v))
            continue;
        if (strlen(v) >= strings[i].size)
            return dlock_seterr(DLOCK_ECONFIG, "%s: etcd.%s is longer than %zu bytes",
                                dlock_settings_where(s, strings[i].name), strings[i].name, strings[i].size - 1);
        snprintf(strings[i].out, strings[i].size, "%s", v);
    }
    if ((h->username[0] != 0) != (h->password[0] != 0))
        return dlock_seterr(DLOCK_ECONFIG, "%s: etcd.username and etcd.password go together",
                            dlock_settings_where(s, h->username[0] ? "username" : "password"));
    if ((h->cert[0] != 0) != (h->key[0] != 0))
        return dlock_seterr(DLOCK_ECONFIG, "%s: etcd.cert and etcd.key go together",
                            dlock_settings_where(s, h->cert[0] ? "cert" : "key"));
    size_t n = dlock_settings_list_count(s, "endpoints");
    if (n > ETCD_MAX_ENDPOINTS)
        return dlock_seterr(DLOCK_ECONFIG, "%s: etcd.endpoints lists more than %d endpoints",
                            dlock_settings_where(s, "endpoints"), ETCD_MAX_ENDPOINTS);
    int rc = DLOCK_OK;
    for (size_t i = 0; rc == DLOCK_OK && i < n; i++)
        rc = copy_endpoint(h, dlock_settings_list_item(s, "endpoints", i), s);
    if (rc == DLOCK_OK && n == 0)
        rc = copy_endpoint(h, "http://127.0.0.1:2379", s);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_init(&h->mu, NULL);
    snprintf(h->label, sizeof h->label, "etcd %s%s", h->shown[0], h->nendpoints > 1 ? " (and others)" : "");
    return DLOCK_OK;
}

void etcd_http_destroy(struct etcd_http *h)
{
    for (int i = 0; i < h->nidle; i++)
        curl_easy_cleanup(h->idle[i]);
    h->nidle = 0;
    pthread_mutex_destroy(&h->mu);
}

/* ---- one call ------------------------------------------------------------------------ */

bool etcd_buffer_append(struct etcd_buffer *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return false;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

static size_t collect(char *ptr, size_t size, size_t nmemb, void *arg)
{
    size_t n = size * nmemb;
    return etcd_buffer_append(arg, ptr, n) ? n : 0; /* 0: libcurl reports a write error */
}

/* Every socket libcurl opens is close-on-exec: a program this process starts
 * must not inherit the connection to the lock server. */
static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)arg;
    (void)purpose;
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static CURL *take_handle(struct etcd_http *h, char *endpoint, size_t size, char *token, size_t token_size)
{
    CURL *c = NULL;
    pthread_mutex_lock(&h->mu);
    if (h->nidle > 0)
        c = h->idle[--h->nidle];
    snprintf(endpoint, size, "%s", h->endpoints[h->current]);
    snprintf(token, token_size, "%s", h->token);
    pthread_mutex_unlock(&h->mu);
    if (!c)
        c = curl_easy_init();
    return c;
}

static void give_handle(struct etcd_http *h, CURL *c, bool healthy)
{
    pthread_mutex_lock(&h->mu);
    if (healthy && h->nidle < ETCD_IDLE_HANDLES) {
        h->idle[h->nidle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&h->mu);
    if (c)
        curl_easy_cleanup(c);
}

static void next_endpoint(struct etcd_http *h, const char *failed)
{
    pthread_mutex_lock(&h->mu);
    if (strcmp(h->endpoints[h->current], failed) == 0)
        h->current = (h->current + 1) % h->nendpoints;
    pthread_mutex_unlock(&h->mu);
}

/* The gateway's error answer: {"error": "...", "code": N, ...}. */
static int server_error(const struct etcd_http *h, const char *endpoint, long status, const struct etcd_buffer *b,
                        struct etcd_status *st)
{
    struct json_object *obj = b->data ? json_tokener_parse(b->data) : NULL;
    struct json_object *err = obj ? etcd_json_get(obj, "error") : NULL;
    st->grpc_code = obj ? (int)etcd_json_int(obj, "code") : 0;
    /* PermissionDenied, and a server with authentication on asked without
     * a user ("user name is empty"), are the setup's to fix. */
    bool needs_user = !h->username[0] && (st->grpc_code == 16 ||
                                          (err && strstr(json_object_get_string(err), "user name is empty")));
    const char *hint = st->grpc_code == 7 ? " (the user needs readwrite permission on the key prefix)"
                       : needs_user       ? " (the server requires authentication: set etcd.username and etcd.password)"
                                          : "";
    int code = st->grpc_code == 7 || needs_user ? DLOCK_ECONFIG : DLOCK_EUNAVAILABLE;
    int rc = dlock_seterr(code, "etcd %s: HTTP %ld: %s%s", etcd_http_shown(h, endpoint), status,
                          err ? json_object_get_string(err) : "an answer without an error message", hint);
    if (obj)
        json_object_put(obj);
    return rc;
}

struct curl_slist *etcd_http_setup_post(const struct etcd_http *h, void *curl_easy, const char *endpoint,
                                        const char *path, const char *token, const char *text,
                                        size_t (*sink)(char *, size_t, size_t, void *), void *arg)
{
    CURL *c = curl_easy;
    char url[512], auth[600];
    snprintf(url, sizeof url, "%s%s", endpoint, path);
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (headers && token[0]) {
        snprintf(auth, sizeof auth, "Authorization: %s", token);
        struct curl_slist *more = curl_slist_append(headers, auth);
        if (!more) {
            curl_slist_free_all(headers);
            return NULL;
        }
        headers = more;
    }
    if (!headers)
        return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url); /* libcurl copies strings it is given */
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, arg);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)h->connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    if (h->cacert[0])
        curl_easy_setopt(c, CURLOPT_CAINFO, h->cacert);
    if (h->cert[0]) {
        curl_easy_setopt(c, CURLOPT_SSLCERT, h->cert);
        curl_easy_setopt(c, CURLOPT_SSLKEY, h->key);
    }
    return headers;
}

static int call_once(struct etcd_http *h, const char *path, struct json_object *body, struct json_object **reply,
                     struct etcd_status *st);

int etcd_call(struct etcd_http *h, const char *path, struct json_object *body, struct json_object **reply,
              struct etcd_status *st)
{
    struct etcd_status mine;
    if (!st)
        st = &mine;
    int rc = call_once(h, path, body, reply, st);
    /* An endpoint that cannot be reached at all (nothing was sent): the
     * next one is asked at once, each at most once, as a client of a
     * cluster does; a request that may have run is never sent twice. */
    for (int tried = 1; rc == DLOCK_EUNAVAILABLE && !st->sent && tried < h->nendpoints; tried++)
        rc = call_once(h, path, body, reply, st);
    /* An auth token expires (simple tokens after 5 minutes idle): the
     * server answers "invalid auth token" (Unauthenticated, 16); get a new
     * one and ask again, once. */
    if (rc != DLOCK_OK && st->grpc_code == 16 && h->username[0]) {
        struct dlock_saved_error saved;
        dlock_error_save(&saved);
        if (etcd_authenticate(h) != DLOCK_OK)
            return dlock_error_restore(&saved, rc);
        rc = call_once(h, path, body, reply, st);
    }
    return rc;
}

int etcd_authenticate(struct etcd_http *h)
{
    if (!h->username[0])
        return DLOCK_OK;
    struct json_object *req = json_object_new_object(), *reply = NULL;
    json_object_object_add(req, "name", json_object_new_string(h->username));
    json_object_object_add(req, "password", json_object_new_string(h->password));
    struct etcd_status st;
    pthread_mutex_lock(&h->mu);
    h->token[0] = 0;
    pthread_mutex_unlock(&h->mu);
    int rc = call_once(h, "/v3/auth/authenticate", req, &reply, &st);
    json_object_put(req);
    if (rc != DLOCK_OK) {
        if (st.grpc_code == 3 || st.grpc_code == 9) /* InvalidArgument, FailedPrecondition: wrong name or password */
            return dlock_seterr(DLOCK_ECONFIG, "%s: authentication as '%s' refused (check etcd.username and "
                                "etcd.password)", h->label, h->username);
        return rc;
    }
    struct json_object *token = etcd_json_get(reply, "token");
    pthread_mutex_lock(&h->mu);
    snprintf(h->token, sizeof h->token, "%s", token ? json_object_get_string(token) : "");
    pthread_mutex_unlock(&h->mu);
    json_object_put(reply);
    return DLOCK_OK;
}

static int call_once(struct etcd_http *h, const char *path, struct json_object *body, struct json_object **reply,
                     struct etcd_status *st)
{
    st->grpc_code = 0;
    st->sent = false;
    *reply = NULL;
    char endpoint[256], token[512];
    CURL *c = take_handle(h, endpoint, sizeof endpoint, token, sizeof token);
    if (!c)
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory for an HTTP handle");
    const char *text = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    struct etcd_buffer b = { NULL, 0, 0 };
    curl_easy_reset(c);
    struct curl_slist *headers = etcd_http_setup_post(h, c, endpoint, path, token, text, collect, &b);
    if (!headers) {
        give_handle(h, c, true);
        return dlock_seterr(DLOCK_ENOMEM, "etcd: out of memory for a request");
    }
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)h->command_timeout_ms);
    CURLcode res = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    int rc = etcd_http_answer(h, endpoint, path, res, status, &b, reply, st);
    free(b.data);
    give_handle(h, c, res == CURLE_OK);
    return rc;
}

void etcd_http_target(struct etcd_http *h, char *endpoint, size_t size, char *token, size_t token_size)
{
    pthread_mutex_lock(&h->mu);
    snprintf(endpoint, size, "%s", h->endpoints[h->current]);
    snprintf(token, token_size, "%s", h->token);
    pthread_mutex_unlock(&h->mu);
}

int etcd_http_answer(struct etcd_http *h, const char *endpoint, const char *path, int curl_result, long status,
                     const struct etcd_buffer *body, struct json_object **reply, struct etcd_status *st)
{
    CURLcode res = (CURLcode)curl_result;
    const struct etcd_buffer b = *body;
    st->grpc_code = 0;
    *reply = NULL;
    int rc = DLOCK_OK;
    if (res != CURLE_OK) {
        st->sent = res != CURLE_COULDNT_CONNECT && res != CURLE_COULDNT_RESOLVE_HOST;
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "etcd %s: %s%s", etcd_http_shown(h, endpoint), curl_easy_strerror(res),
                          res == CURLE_OPERATION_TIMEDOUT ? " (raise etcd.command_timeout_ms?)" : "");
        next_endpoint(h, endpoint);
    } else if (status != 200) {
        st->sent = true;
        rc = server_error(h, endpoint, status, &b, st);
    } else {
        st->sent = true;
        *reply = b.data ? json_tokener_parse(b.data) : NULL;
        if (!*reply || !json_object_is_type(*reply, json_type_object)) {
            if (*reply)
                json_object_put(*reply);
            *reply = NULL;
            rc = dlock_seterr(DLOCK_EPROTOCOL, "etcd %s: %s answered with something that is not a JSON object",
                              etcd_http_shown(h, endpoint), path);
        }
    }
    return rc;
}

/* ---- the gateway's JSON ---------------------------------------------------------- */

struct json_object *etcd_json_get(struct json_object *obj, const char *field)
{
    struct json_object *v = NULL;
    return obj && json_object_object_get_ex(obj, field, &v) ? v : NULL;
}

int64_t etcd_json_int(struct json_object *obj, const char *field)
{
    struct json_object *v = etcd_json_get(obj, field);
    if (!v)
        return 0; /* the gateway leaves zero out */
    if (json_object_is_type(v, json_type_string))
        return strtoll(json_object_get_string(v), NULL, 10);
    return json_object_get_int64(v);
}

struct json_object *etcd_json_int_str(int64_t v)
{
    char text[24];
    snprintf(text, sizeof text, "%lld", (long long)v);
    return json_object_new_string(text);
}

char *etcd_b64(const void *data, size_t len)
{
    unsigned char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock(out, data, (int)len);
    return (char *)out;
}

struct json_object *etcd_json_b64(const void *data, size_t len)
{
    char *out = etcd_b64(data, len);
    if (!out)
        return NULL;
    struct json_object *s = json_object_new_string(out);
    free(out);
    return s;
}

int etcd_json_unb64(struct json_object *obj, const char *field, char *out, size_t size)
{
    struct json_object *v = etcd_json_get(obj, field);
    if (!v || !json_object_is_type(v, json_type_string))
        return -1;
    const char *text = json_object_get_string(v);
    size_t len = strlen(text);
    if (len % 4 != 0 || 3 * (len / 4) > size)
        return -1;
    int n = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)text, (int)len);
    if (n < 0)
        return -1;
    /* EVP_DecodeBlock counts the padding as bytes: take them off. */
    if (len >= 1 && text[len - 1] == '=')
        n--;
    if (len >= 2 && text[len - 2] == '=')
        n--;
    return n;
}
