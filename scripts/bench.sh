#!/bin/sh
# scripts/bench.sh [--quick] [--shared | --shared-only | --waiting | --pending] [--out DIR] [BUILDDIR] - the comparative benchmark:
# starts throwaway servers on private ports (redis-server, a 3-master Redis
# Cluster, and PostgreSQL,
# MariaDB, ZooKeeper and etcd when their backends are built), writes one config per backend and
# mode, runs
# dlock-bench over all of them in one interleaved run (each beside its own
# plain client loop), prints the table, writes CSV and plots, and stops the
# servers by PID. --shared adds the shared-hold and semaphore scenarios (rw,
# semaphore) to the default ones, for the backends that have them;
# --shared-only runs just those two beside the exclusive-only contended one
# they are compared with. --waiting runs only the contended scenario at 8
# workers (hold 1 ms, pause 5 ms), over every backend and then again in fair
# mode over those that have it: how evenly and how quickly waiters get
# their turns. --pending runs the non-blocking API's scenario (10,000
# acquires pending on the redis family, 1,000 elsewhere, from one loop
# thread) beside the contended one at 8 workers it is compared with.
set -eu
cd "$(dirname "$0")/.."
quick=no
shared=no
out=bench-results
B=$(pwd)/build
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=yes ;;
    --shared) shared=yes ;;
    --shared-only) shared=only ;;
    --waiting) shared=waiting ;;
    --pending) shared=pending ;;
    --out) out=$2; shift ;;
    *) B=$(cd "$1" && pwd) ;;
    esac
    shift
done
export LD_LIBRARY_PATH=$B/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Every backend module this build has (the list is not written here).
DLOCK_MODULE_PATH=$(for d in "$B"/backends/*/.libs; do [ -d "$d" ] && printf '%s:' "$d"; done)
export DLOCK_MODULE_PATH=${DLOCK_MODULE_PATH%:}
BENCH=$B/.libs/dlock-bench
[ -x "$BENCH" ] || { echo "bench: $BENCH is not built (the redis backend is needed: libhiredis-dev)" >&2; exit 1; }
work=$(mktemp -d /tmp/dlock-bench-XXXXXX)
stop() {
    set +e # stop every server even when one stop fails
    [ -f "$work/redis.pid" ] && kill "$(cat "$work/redis.pid")" 2>/dev/null
    [ -d "$work/pg" ] && sh tests/support/postgres.sh stop "$work/pg"
    [ -d "$work/my" ] && sh tests/support/mariadb.sh stop "$work/my"
    [ -d "$work/zk" ] && bash tests/support/zookeeper.sh stop "$work/zk"
    [ -d "$work/etcd" ] && bash tests/support/etcd.sh stop "$work/etcd"
    [ -d "$work/cluster" ] && bash tests/support/redis_cluster.sh stop "$work/cluster"
    for i in 0 1 2 3 4; do [ -f "$work/rl$i/redis.pid" ] && kill "$(cat "$work/rl$i/redis.pid")" 2>/dev/null; done
    sleep 0.2
    rm -rf "$work"
}
trap stop EXIT

port=$(( 20000 + $$ % 12000 )) # below the ephemeral port range
redis-server --port $port --bind 127.0.0.1 --dir "$work" --save '' --appendonly no --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/redis.log"
for _ in $(seq 1 100); do [ "$(redis-cli -p $port ping 2>/dev/null)" = PONG ] && break; sleep 0.05; done
mkdir -p "$work/locks" "$out"
printf 'backend = "local";\nlease_ms = 3000;\nlocal = { dir = "%s/locks"; };\n' "$work" > "$work/local.conf"
printf 'backend = "redis";\nlease_ms = 3000;\nredis = { port = %d; };\n' $port > "$work/redis.conf"
set -- -c "$work/local.conf" -c "$work/redis.conf"
# A Redis Cluster of 3 masters (no replicas, like the single server above),
# compared with that single server: what routing by slot costs.
bash tests/support/redis_cluster.sh start "$work/cluster" $((port + 10)) 3 > /dev/null
printf 'backend = "redis";
lease_ms = 3000;
redis = { cluster = ("127.0.0.1:%d"); };
' $((port + 10)) \
    > "$work/redis-cluster.conf"
set -- "$@" -c "$work/redis-cluster.conf"
# Redlock over 5 independent masters of its own.
servers=
for i in 0 1 2 3 4; do
    p=$((port + 20 + i))
    mkdir -p "$work/rl$i"
    redis-server --port $p --bind 127.0.0.1 --dir "$work/rl$i" --save '' --appendonly no --daemonize yes \
        --pidfile "$work/rl$i/redis.pid" --logfile "$work/rl$i/redis.log"
    for _ in $(seq 1 100); do [ "$(redis-cli -p $p ping 2>/dev/null)" = PONG ] && break; sleep 0.05; done
    servers="$servers${servers:+, }\"127.0.0.1:$p\""
done
printf 'backend = "redlock";\nlease_ms = 3000;\nredlock = { servers = (%s); };\n' "$servers" > "$work/redlock.conf"
set -- "$@" -c "$work/redlock.conf"
# The SQL servers run with fsync off (as in the tests): both libdlock and the
# plain loop beside it commit the same way, so the ratio is fair.
if [ -f "$B/backends/postgres/.libs/dlock_postgres.so" ]; then
    chmod 755 "$work"
    sh tests/support/postgres.sh start "$work/pg" $((port + 1)) > /dev/null
    for mode in lease session; do
        printf 'backend = "postgres";\nlease_ms = 3000;\npostgres = { port = %d; user = "postgres"; database = "postgres"; mode = "%s"; };\n' \
            $((port + 1)) $mode > "$work/postgres-$mode.conf"
        set -- "$@" -c "$work/postgres-$mode.conf"
    done
fi
if [ -f "$B/backends/mysql/.libs/dlock_mysql.so" ]; then
    sh tests/support/mariadb.sh start "$work/my" $((port + 2)) > /dev/null
    mariadb --no-defaults -h 127.0.0.1 -P $((port + 2)) -u root -e 'CREATE DATABASE dl'
    for mode in lease session; do
        printf 'backend = "mysql";\nlease_ms = 3000;\nmysql = { port = %d; database = "dl"; mode = "%s"; };\n' \
            $((port + 2)) $mode > "$work/mysql-$mode.conf"
        set -- "$@" -c "$work/mysql-$mode.conf"
    done
fi
if [ -f "$B/backends/zookeeper/.libs/dlock_zookeeper.so" ]; then
    bash tests/support/zookeeper.sh start "$work/zk" $((port + 3)) > /dev/null
    printf 'backend = "zookeeper";\nlease_ms = 3000;\nzookeeper = { hosts = "127.0.0.1:%d"; };\n' \
        $((port + 3)) > "$work/zookeeper.conf"
    set -- "$@" -c "$work/zookeeper.conf"
fi
if [ -f "$B/backends/etcd/.libs/dlock_etcd.so" ]; then
    bash tests/support/etcd.sh start "$work/etcd" $((port + 4)) > /dev/null
    printf 'backend = "etcd";\nlease_ms = 3000;\netcd = { endpoints = ("http://127.0.0.1:%d"); };\n' \
        $((port + 4)) > "$work/etcd.conf"
    set -- "$@" -c "$work/etcd.conf"
fi

# The plots carry the commit they were measured at.
DLOCK_BENCH_COMMIT=$( (git rev-parse --short HEAD && { git diff --quiet HEAD || echo +changes; }) 2> /dev/null | tr -d '\n' || true)
export DLOCK_BENCH_COMMIT

if [ $shared = waiting ]; then
    set -- "$@" --scenario contended --workers 8 --hold-ms 1 --pause-ms 5
    if [ $quick = yes ]; then set -- "$@" --duration 1 --repeat 1; else set -- "$@" --duration 3 --repeat 3; fi
    echo "== every backend"
    "$BENCH" "$@" --csv "$out/waiting.csv"
    echo "== fair mode, where the backend has it"
    "$BENCH" "$@" --fair --csv "$out/waiting-fair.csv"
    echo "csv: $out/waiting.csv $out/waiting-fair.csv"
    exit 0
fi
if [ $shared = pending ]; then
    set -- "$@" --scenario contended --scenario pending --workers 8 --hold-ms 1 --pause-ms 5
    if [ $quick = yes ]; then set -- "$@" --duration 1 --repeat 1; else set -- "$@" --duration 3 --repeat 3; fi
    "$BENCH" "$@" --csv "$out/pending.csv"
    echo "csv: $out/pending.csv"
    exit 0
fi
if [ $quick = yes ]; then set -- "$@" --duration 1 --repeat 3 --workers 2,8 --locks 2000
else set -- "$@" --duration 3 --repeat 5 --workers 2,4,8,16 --locks 10000; fi
if [ $shared = yes ]; then
    for s in uncontended contended many-locks baseline rw semaphore; do set -- "$@" --scenario $s; done
elif [ $shared = only ]; then
    for s in contended rw semaphore; do set -- "$@" --scenario $s; done
fi
"$BENCH" "$@" --csv "$out/results.csv" --plot "$out/plots"
echo "csv: $out/results.csv"
if [ -f "$work/etcd.conf" ]; then
    sh contrib/bench/cli_cycle.sh "$B/.libs/dlock" "$work/etcd.conf" "http://127.0.0.1:$((port + 4))" \
        | tee "$out/cli-cycle-etcd.txt"
fi
