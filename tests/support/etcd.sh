#!/bin/bash
# tests/support/etcd.sh start DIR PORT | stop DIR
# A throwaway single-member etcd for tests and benchmarks: clients on
# 127.0.0.1:PORT, peers on 127.0.0.1:PORT+1, data in DIR. `start` waits until
# the v3 JSON gateway answers and prints the PID; `stop` stops it by PID.
set -eu
. "$(dirname "$0")/stop_pid.sh"
case $1 in
start)
    dir=$2
    port=$3
    command -v etcd > /dev/null || { echo "etcd.sh: etcd not found (Debian: etcd-server)" >&2; exit 1; }
    mkdir -p "$dir"
    # --unsafe-no-fsync: a test server; nothing here must survive a crash.
    # A short election timeout lowers etcd's smallest lease TTL (1.5 x the
    # election timeout) below a second, so that short test leases hold.
    ETCD_UNSUPPORTED_ARCH= etcd --name dlock-test --data-dir "$dir/data" \
        --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
        --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-cluster "dlock-test=http://127.0.0.1:$((port + 1))" \
        --heartbeat-interval 10 --election-timeout 100 \
        --unsafe-no-fsync --log-level error > "$dir/etcd.log" 2>&1 &
    echo $! > "$dir/pid"
    for _ in $(seq 1 200); do
        if curl -s -m 1 -X POST -d '{"key":"AA=="}' "http://127.0.0.1:$port/v3/kv/range" 2>/dev/null | grep -q header; then
            cat "$dir/pid"
            exit 0
        fi
        kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
        sleep 0.05
    done
    tail -20 "$dir/etcd.log" >&2
    stop_pid_file "$dir/pid"
    exit 1
    ;;
stop)
    stop_pid_file "$2/pid"
    ;;
esac
