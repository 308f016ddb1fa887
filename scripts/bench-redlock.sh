#!/bin/sh
# scripts/bench-redlock.sh [BUILDDIR] [--quick] - the Redlock figure of
# docs/benchmarks.md: starts 5 throwaway redis-servers on private ports, measures libdlock's
# redlock backend (uncontended acquire+release, one attempt) with dlock-bench
# and, in the same run on the same masters, the `redlock` npm package 4.2.0
# over ioredis (contrib/bench/npm, installed from the npm registry into
# $DLOCK_NPM_DIR, default ~/.cache/dlock-bench-npm), then prints the ratio and
# stops the servers by PID. Needs node and npm for the second half.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
B=$(pwd)/${1:-build}
quick=${2:-}
export LD_LIBRARY_PATH=$B/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DLOCK_MODULE_PATH=$B/backends/redis/.libs
BENCH=$B/.libs/dlock-bench
[ -x "$BENCH" ] || { echo "bench-redlock: $BENCH not built (is hiredis installed?)" >&2; exit 1; }
work=$(mktemp -d /tmp/dlock-bench-XXXXXX)
base=$(( 20000 + $$ % 12000 ))
ports=
servers=
for i in 0 1 2 3 4; do
    p=$((base + i))
    mkdir -p "$work/r$i"
    redis-server --port $p --bind 127.0.0.1 --dir "$work/r$i" --save '' --appendonly no --daemonize yes \
        --pidfile "$work/r$i/redis.pid" --logfile "$work/r$i/redis.log"
    ports="$ports${ports:+,}$p"
    servers="$servers${servers:+, }\"127.0.0.1:$p\""
done
stop() {
    for i in 0 1 2 3 4; do [ -f "$work/r$i/redis.pid" ] && kill "$(cat "$work/r$i/redis.pid")" 2>/dev/null; done
    sleep 0.2
    rm -rf "$work"
}
trap stop EXIT
for i in 0 1 2 3 4; do
    for _ in $(seq 1 100); do [ "$(redis-cli -p $((base + i)) ping 2>/dev/null)" = PONG ] && break; sleep 0.05; done
done
printf 'backend = "redlock";\nlease_ms = 3000;\nredlock = { servers = (%s); };\n' "$servers" > "$work/redlock.conf"
if [ "$quick" = --quick ]; then d=1; r=3; else d=3; r=5; fi

echo "== libdlock redlock over 5 masters: uncontended acquire+release (one attempt)"
"$BENCH" -c "$work/redlock.conf" -s uncontended --duration $d --repeat $r --csv "$work/dlock.csv" | grep -E 'uncontended'
ours=$(awk -F, '$2 == "uncontended" && $3 == "acquire+release/s" {print $4}' "$work/dlock.csv")

if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
    echo "bench-redlock: node/npm missing (Debian: nodejs npm): the npm redlock comparison is skipped" >&2
    exit 0
fi
npm_dir=${DLOCK_NPM_DIR:-$HOME/.cache/dlock-bench-npm}
mkdir -p "$npm_dir"
cp "$top/contrib/bench/npm/package.json" "$top/contrib/bench/npm/redlock-loop.js" "$npm_dir/"
(cd "$npm_dir" && [ -d node_modules/redlock ] || npm install --silent --no-audit --no-fund > npm.log 2>&1) \
    || { echo "bench-redlock: npm install failed (see $npm_dir/npm.log)" >&2; exit 1; }
echo "== the redlock npm package 4.2.0 (ioredis) over the same 5 masters"
node "$npm_dir/redlock-loop.js" "$ports" $d $r | tee "$work/npm.txt"
theirs=$(awk '{print $3}' "$work/npm.txt" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
echo "libdlock redlock: $ours acquire+release/s (median); npm redlock: $theirs (median); ratio $(awk -v a="$ours" -v b="$theirs" 'BEGIN {printf "%.2f", a / b}')"
