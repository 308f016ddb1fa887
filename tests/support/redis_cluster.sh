#!/bin/bash
# tests/support/redis_cluster.sh start DIR PORT [N] | stop DIR
# A throwaway Redis Cluster for tests and benchmarks: N nodes (default 6) on
# 127.0.0.1:PORT .. PORT+N-1, cluster bus ports PORT+100 .. (pinned, so a
# data port near 65535 cannot push its bus port out of range). N = 6 makes
# 3 masters with one replica each; N = 3 makes 3 masters alone. Each node
# lives in DIR/<i> with its pid file; no persistence; node timeout 1000 ms
# (a dead master is replaced within about 2 s). `start` waits until every
# node reports cluster_state:ok and every replica's link to its master is
# up, then prints the PIDs on one line; `stop` stops those PIDs.
set -eu
. "$(dirname "$0")/stop_pid.sh"
case $1 in
start)
    dir=$2
    port=$3
    n=${4:-6}
    command -v redis-server > /dev/null || { echo "redis_cluster.sh: redis-server not found (Debian: redis-server)" >&2; exit 1; }
    replicas=0
    [ "$n" -ge 6 ] && replicas=$((n / 3 - 1))
    pids=
    addrs=
    fail() {
        echo "redis_cluster.sh: $1" >&2
        for f in "$dir"/*/redis.log; do [ -f "$f" ] && tail -5 "$f" >&2; done
        for pid in $pids; do kill "$pid" 2>/dev/null || true; done
        exit 1
    }
    for i in $(seq 0 $((n - 1))); do
        d=$dir/$i
        mkdir -p "$d"
        p=$((port + i))
        redis-server --port $p --cluster-port $((port + 100 + i)) --bind 127.0.0.1 --dir "$d" \
            --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000 \
            --save '' --appendonly no --daemonize yes --pidfile "$d/pid" --logfile redis.log ||
            fail "node $i did not start"
        addrs="$addrs 127.0.0.1:$p"
    done
    for i in $(seq 0 $((n - 1))); do
        t=0
        until [ "$(redis-cli -p $((port + i)) ping 2>/dev/null)" = PONG ]; do
            t=$((t + 1))
            [ $t -gt 100 ] && fail "node $i (port $((port + i))) does not answer"
            sleep 0.05
        done
        pids="$pids $(cat "$dir/$i/pid")"
    done
    # shellcheck disable=SC2086
    redis-cli --cluster create $addrs --cluster-replicas $replicas --cluster-yes > "$dir/create.log" 2>&1 ||
        fail "redis-cli --cluster create failed: $(tail -3 "$dir/create.log")"
    for i in $(seq 0 $((n - 1))); do
        t=0
        until redis-cli -p $((port + i)) cluster info 2>/dev/null | grep -q '^cluster_state:ok' &&
            { redis-cli -p $((port + i)) role 2>/dev/null | head -1 | grep -q master ||
              redis-cli -p $((port + i)) info replication 2>/dev/null | grep -q '^master_link_status:up'; }; do
            t=$((t + 1))
            [ $t -gt 300 ] && fail "node $i did not reach cluster_state:ok with its replication up"
            sleep 0.1
        done
    done
    echo $pids
    ;;
stop)
    for f in "$2"/*/pid; do stop_pid_file "$f"; done
    ;;
*)
    echo "usage: redis_cluster.sh start DIR PORT [N] | stop DIR" >&2
    exit 2
    ;;
esac
