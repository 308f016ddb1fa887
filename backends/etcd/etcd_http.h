/*
 * backends/etcd/etcd_http.h - etcd's v3 JSON gateway over HTTP/1.1: one
 * POST of a JSON body, one JSON answer, with libcurl (connections kept
 * alive and reused) and json-c. The gateway's quirks are handled here:
 * 64-bit integers come as strings, false and zero fields are left out,
 * keys and values are base64.
 */
#ifndef DLOCK_ETCD_HTTP_H
#define DLOCK_ETCD_HTTP_H

#include <dlock/provider.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_MAX_ENDPOINTS 8
#define ETCD_IDLE_HANDLES 16

struct etcd_http {
    char endpoints[ETCD_MAX_ENDPOINTS][256]; /* "http://host:port", no trailing slash */
    char shown[ETCD_MAX_ENDPOINTS][256];     /* the same for messages: a user and password
                                              * in the URL written as "***" */
    int nendpoints;
    int current;                    /* the endpoint calls go to; moves on after a failure */
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    char username[128], password[256]; /* "" without auth */
    char cacert[512], cert[512], key[512]; /* TLS files, "" for the defaults / none */
    char token[512];                /* auth token ("" until authenticated) */
    pthread_mutex_t mu;             /* current, token, idle */
    void *idle[ETCD_IDLE_HANDLES];  /* CURL easy handles with live connections */
    int nidle;
    char label[300];                /* "etcd http://127.0.0.1:2379", for messages */
};

/* Reads endpoints (default http://127.0.0.1:2379), connect_timeout_ms,
 * command_timeout_ms, username and password, and the TLS files cacert,
 * cert and key. DLOCK_OK or DLOCK_ECONFIG naming the setting. */
int etcd_http_init(struct etcd_http *h, const dlock_settings *s);
void etcd_http_destroy(struct etcd_http *h);

/* The form of endpoint (one of h->endpoints) to write in messages, with
 * no credentials in it. */
const char *etcd_http_shown(const struct etcd_http *h, const char *endpoint);

/* What a call's failure was, beside its libdlock code. */
struct etcd_status {
    int grpc_code;      /* the gateway's error code (5 = not found, ...), 0 if none */
    bool sent;          /* the request may have reached the server */
};

/* POSTs body (not consumed) to path ("/v3/kv/txn") on the current endpoint,
 * once, within command_timeout_ms, and parses the answer into *reply
 * (caller frees with json_object_put). DLOCK_OK, or DLOCK_EUNAVAILABLE
 * (cannot reach it, or the server's error, with its words in the detail;
 * st->grpc_code says which) or DLOCK_EPROTOCOL (an answer that is not
 * JSON). An endpoint that cannot be reached (nothing sent) is followed by
 * the next, each once; a failure moves later calls to the next endpoint. */
int etcd_call(struct etcd_http *h, const char *path, struct json_object *body, struct json_object **reply,
              struct etcd_status *st);

/* With a username, gets a token from /v3/auth/authenticate (called at open,
 * and by etcd_call when the server says the token expired). DLOCK_OK, or
 * DLOCK_ECONFIG when the server refuses the name or password, or the
 * failure to reach it. */
int etcd_authenticate(struct etcd_http *h);

/* Sets an easy handle up for one POST of text to endpoint + path with the
 * auth token (if any), answers going to sink(arg): JSON content type, the
 * connect timeout, the TLS files, close-on-exec sockets. Returns the header
 * list to free (curl_slist_free_all) after the transfer, NULL when out of
 * memory. Used for calls and for the watch stream alike. */
struct curl_slist *etcd_http_setup_post(const struct etcd_http *h, void *curl_easy, const char *endpoint,
                                        const char *path, const char *token, const char *text,
                                        size_t (*sink)(char *, size_t, size_t, void *), void *arg);

/* The endpoint calls go to now, and the auth token ("" without), copied. */
void etcd_http_target(struct etcd_http *h, char *endpoint, size_t size, char *token, size_t token_size);

struct etcd_buffer;
/* What a POST to endpoint + path that ended with curl_result (a CURLcode)
 * and HTTP status, its body in body, comes to, as etcd_call reports it
 * (*reply parsed on DLOCK_OK; st filled). A transfer that failed moves
 * later calls to the next endpoint. For a transfer made by the caller
 * (etcd_native.c). */
int etcd_http_answer(struct etcd_http *h, const char *endpoint, const char *path, int curl_result, long status,
                     const struct etcd_buffer *body, struct json_object **reply, struct etcd_status *st);

/* A growing byte buffer, always NUL-terminated, for answers as they come. */
struct etcd_buffer {
    char *data;
    size_t len, cap;
};
/* Appends n bytes; false when out of memory. */
bool etcd_buffer_append(struct etcd_buffer *b, const char *p, size_t n);

/* ---- the gateway's JSON ---------------------------------------------------------- */

/* A 64-bit integer field that the gateway writes as a string (or leaves out
 * when 0): its value, or 0. */
int64_t etcd_json_int(struct json_object *obj, const char *field);
/* The object or array at field, or NULL. */
struct json_object *etcd_json_get(struct json_object *obj, const char *field);
/* A new string object holding the base64 of len bytes. */
struct json_object *etcd_json_b64(const void *data, size_t len);
/* data in standard base64 with padding, as the gateway writes keys; a new
 * NUL-terminated string the caller frees, or NULL when out of memory. */
char *etcd_b64(const void *data, size_t len);
/* Decodes the base64 string at field into out (at most size bytes); the
 * number of bytes, or -1 when absent or malformed. */
int etcd_json_unb64(struct json_object *obj, const char *field, char *out, size_t size);
/* A new string object holding a decimal 64-bit integer, as the gateway wants. */
struct json_object *etcd_json_int_str(int64_t v);

#endif
