#!/bin/bash
# tests/modules/library_needs.sh - libdlock.so links no HTTP server and no
# TLS library: the metrics exporter is a module of its own
# (dlock_metrics_http.so), loaded only for metrics.listen. Reads the
# NEEDED entries of the built library and of the module.
. "$DLOCK_TEST_SRCDIR/cli/lib.sh"
lib=$(dirname "$DLOCK")/libdlock.so
[ -e "$lib" ] || { not_ok "no $lib"; finish; exit 1; }
command -v readelf > /dev/null || { not_ok "readelf not found (Debian: binutils)"; finish; exit 1; }
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] && ok "libdlock.so needs: $(echo $needed)" || not_ok "no NEEDED entries read from $lib"
bad=$(echo "$needed" | grep -E 'microhttpd|gnutls|ssl|crypto|curl|nettle|hogweed|p11-kit|tasn1' || true)
[ -z "$bad" ] && ok "libdlock.so needs no HTTP or TLS library" || not_ok "libdlock.so needs $(echo $bad)"
# The exporter module, where this build has one: it is the one that links libmicrohttpd.
module=""
IFS=: read -ra dirs <<< "${DLOCK_MODULE_PATH:-}"
for d in "${dirs[@]}"; do [ -e "$d/dlock_metrics_http.so" ] && module=$d/dlock_metrics_http.so && break; done
if grep -q '^#define DLOCK_HAVE_MICROHTTPD 1' "$(dirname "$DLOCK")/../config.h" 2> /dev/null; then
    [ -n "$module" ] && readelf -d "$module" | grep -q 'libmicrohttpd' \
        && ok "the exporter module links libmicrohttpd" || not_ok "no exporter module linking libmicrohttpd on the module path"
fi
finish
