#!/bin/sh
# scripts/bench.sh [--quick] [--out DIR] [BUILDDIR] - the comparative benchmark:
# starts throwaway servers on private ports (redis-server; the other servers
# join as their backends land), writes one config per backend, runs
# dlock-bench over all of them in one interleaved run (each beside its own
# plain client loop), prints the table, writes CSV and plots, and stops the
# servers by PID.
set -eu
cd "$(dirname "$0")/.."
quick=no
out=bench-results
B=$(pwd)/build
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=yes ;;
    --out) out=$2; shift ;;
    *) B=$(cd "$1" && pwd) ;;
    esac
    shift
done
export LD_LIBRARY_PATH=$B/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DLOCK_MODULE_PATH=$B/backends/redis/.libs
BENCH=$B/.libs/dlock-bench
[ -x "$BENCH" ] || { echo "bench: $BENCH is not built (the redis backend is needed: libhiredis-dev)" >&2; exit 1; }
work=$(mktemp -d /tmp/dlock-bench-XXXXXX)
stop() {
    [ -f "$work/redis.pid" ] && kill "$(cat "$work/redis.pid")" 2>/dev/null
    sleep 0.2
    rm -rf "$work"
}
trap stop EXIT

port=$(( 30000 + $$ % 20000 ))
redis-server --port $port --bind 127.0.0.1 --dir "$work" --save '' --appendonly no --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/redis.log"
for _ in $(seq 1 100); do [ "$(redis-cli -p $port ping 2>/dev/null)" = PONG ] && break; sleep 0.05; done
mkdir -p "$work/locks" "$out"
printf 'backend = "local";\nlease_ms = 3000;\nlocal = { dir = "%s/locks"; };\n' "$work" > "$work/local.conf"
printf 'backend = "redis";\nlease_ms = 3000;\nredis = { port = %d; };\n' $port > "$work/redis.conf"

if [ $quick = yes ]; then set -- --duration 1 --repeat 3 --workers 2,8 --locks 2000
else set -- --duration 3 --repeat 5 --workers 2,4,8,16 --locks 10000; fi
"$BENCH" -c "$work/local.conf" -c "$work/redis.conf" "$@" --csv "$out/results.csv" --plot "$out/plots"
echo "csv: $out/results.csv"
