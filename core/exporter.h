/* core/exporter.h - between the library and its metrics exporter, the
 * module dlock_metrics_http.so that serves `metrics { listen = ...; }`
 * over HTTP. The exporter is a module so that libdlock.so links no HTTP
 * server and no TLS library: a service that never sets `listen` never
 * loads them. It is built in this tree, with the library, and uses only
 * the public API (dlock_client_metrics() for the body, dlock_provider_log()
 * for its complaints); this table is not installed and its version only
 * has to match the library it was built with. */
#ifndef DLOCK_CORE_EXPORTER_H
#define DLOCK_CORE_EXPORTER_H

#include <dlock.h>

#define DLOCK_EXPORTER_FILE "dlock_metrics_http.so"
#define DLOCK_EXPORTER_ENTRY "dlock_exporter_module"
#define DLOCK_EXPORTER_VERSION 1u

struct dlock_exporter_table {
    unsigned version; /* DLOCK_EXPORTER_VERSION */
    /*
     * Serves client's metrics at listen (its configuration text, already
     * checked with http_address_parse(); copied) until stop. log_handle
     * goes to dlock_provider_log(). Requests may come before start returns
     * and until stop returns, on the exporter's own thread. Returns
     * DLOCK_OK with *server set, or an error with dlock_seterr() (a port
     * that cannot be listened on is DLOCK_EUNAVAILABLE).
     */
    int (*start)(dlock_client *client, const char *listen, void *log_handle, void **server);
    /* Stops answering and frees server; no request runs after it returns. */
    void (*stop)(void *server);
};

/* The module's entry: its table for version, or NULL if it was built for
 * another one. */
typedef const struct dlock_exporter_table *(*dlock_exporter_entry_fn)(unsigned version);

/*
 * Loads the exporter from the module path (as backends are found) once per
 * process. Returns DLOCK_OK with *out, or DLOCK_EUNAVAILABLE with a message
 * that says where it looked and what to install. Thread-safe.
 */
int dlock__exporter_load(const struct dlock_exporter_table **out);

#endif
