#!/bin/sh
# tests/support/postgres.sh start DIR PORT | stop DIR
# A throwaway PostgreSQL for tests and benchmarks: a cluster in DIR/data
# (initdb refuses root, so it runs as the postgres user when we are root),
# listening on 127.0.0.1:PORT and a socket in DIR, fsync off. `start` waits
# until it accepts connections and prints its PID; `stop` stops that PID.
# Exits non-zero with the server's log when it does not come up.
set -eu
cmd=$1
dir=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] && [ -x "$bin/pg_ctl" ] || { echo "postgres.sh: PostgreSQL server binaries not found (Debian: postgresql)" >&2; exit 1; }
as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case $cmd in
start)
    port=$3
    mkdir -p "$dir"
    chmod 755 "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync > "$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/pg.log" -w -t 30 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start > /dev/null \
        || { cat "$dir/pg.log" >&2; exit 1; }
    head -1 "$dir/data/postmaster.pid"
    ;;
stop)
    [ -f "$dir/data/postmaster.pid" ] || exit 0
    as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop > /dev/null 2>&1 || true
    ;;
*)
    echo "usage: postgres.sh start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
