/* contrib/cli/serve.h - what the parts of dlock serve share: the server's
 * settings, the HTTP side (serve_http.c), the documents it answers with
 * (serve_render.c) and the page (panel.html, compiled in as panel_html). */
#ifndef DLOCK_CLI_SERVE_H
#define DLOCK_CLI_SERVE_H

#include "view.h"
#include "../http/http_address.h"

#include <dlock.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* How a request proves it may read: nothing (loopback only), the token of
 * --token-file as "Authorization: Bearer TOKEN", or the user:password of
 * --basic-auth-file as HTTP basic authentication. */
enum serve_auth { AUTH_NONE, AUTH_TOKEN, AUTH_BASIC };

struct serve_settings {
    dlock_client *client;
    const char *backend;
    int64_t stale_ms;
    enum serve_auth auth;
    char *expected;        /* the whole Authorization value a request must carry */
};

/* Starts answering on the bound, listening socket fd (taken over, closed
 * on failure); returns an opaque server, or NULL after a message on stderr. */
struct serve_http *serve_http_start(int fd, const struct http_address *addr, const struct serve_settings *settings);

/* Stops answering, then waits a short while for listings still running on
 * the backend. Returns false when some still run: the client must then be
 * left open, as they use it. */
bool serve_http_stop(struct serve_http *server);

/* The body of /api/locks for a view (an { "error" } object when it
 * failed), and of /metrics; malloc()ed, NULL when out of memory. */
char *serve_render_api(const struct view *v, const char *backend, int64_t stale_ms);
char *serve_render_metrics(const struct view *v, const char *backend, int64_t stale_ms);

/* The panel page, from contrib/cli/panel.html. */
extern const char panel_html[];

#endif
