#!/bin/sh
# scripts/bench-redis.sh [BUILDDIR] [--quick] - the Redis figures of docs/benchmarks.md:
# starts a throwaway redis-server on a private port, runs dlock-bench's
# scenarios (uncontended, renewal of many locks, 8 contending processes,
# fair mode, threads) beside their baselines, and stops the server by PID.
set -eu
cd "$(dirname "$0")/.."
B=$(pwd)/${1:-build}
quick=${2:-}
export LD_LIBRARY_PATH=$B/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DLOCK_MODULE_PATH=$B/backends/redis/.libs
BENCH=$B/.libs/dlock-bench
[ -x "$BENCH" ] || { echo "bench-redis: $BENCH not built (is hiredis installed?)" >&2; exit 1; }
work=$(mktemp -d /tmp/dlock-bench-XXXXXX)
port=$(( 30000 + $$ % 20000 ))
redis-server --port $port --bind 127.0.0.1 --dir "$work" --save '' --appendonly no --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/redis.log"
stop() { [ -f "$work/redis.pid" ] && kill "$(cat "$work/redis.pid")" 2>/dev/null; sleep 0.2; rm -rf "$work"; }
trap stop EXIT
for _ in $(seq 1 100); do [ "$(redis-cli -p $port ping 2>/dev/null)" = PONG ] && break; sleep 0.05; done
printf 'backend = "redis";\nredis = { port = %d; };\n' $port > "$work/redis.conf"
printf 'backend = "redis";\nlease_ms = 3000;\nredis = { port = %d; };\n' $port > "$work/redis-3s.conf"

if [ "$quick" = --quick ]; then d=1; r=3; locks=2000; else d=3; r=5; locks=10000; fi
echo "== uncontended acquire+release on one connection, beside SET NX PX + EVALSHA compare-and-delete;"
echo "== the watchdog renewing $locks held locks (lease 3 s), beside one pipeline of $locks EVALSHA renewals"
"$BENCH" -c "$work/redis-3s.conf" -s uncontended -s many-locks -s baseline --locks $locks --duration $d --repeat $r
echo
echo "== 8 worker processes on one lock, hold 1 ms, pause 5 ms"
"$BENCH" -c "$work/redis.conf" -s contended --workers 8 --hold-ms 1 --pause-ms 5 --duration $d --repeat $r
echo
echo "== the same in fair mode"
"$BENCH" -c "$work/redis.conf" -s contended --fair --workers 8 --hold-ms 1 --pause-ms 5 --duration $d --repeat $r
echo
echo "== 8 threads of one client on one lock, hold 1 ms, pause 5 ms"
"$BENCH" -c "$work/redis.conf" -s contended --threads --workers 8 --hold-ms 1 --pause-ms 5 --duration $d --repeat $r
