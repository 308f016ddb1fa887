#!/bin/bash
# tests/support/etcd.sh start DIR PORT [N] [tls] | stop DIR
# A throwaway single-member etcd for tests and benchmarks: clients on
# 127.0.0.1:PORT, peers on 127.0.0.1:PORT+1, data in DIR. With `tls` (N is
# ignored), it makes a CA and a server certificate for 127.0.0.1 in DIR
# (ca.pem, server.pem, server-key.pem, with openssl) and serves https only.
# `start` waits until the v3 JSON gateway answers and prints the PID; `stop`
# stops it by PID.
set -eu
. "$(dirname "$0")/stop_pid.sh"
case $1 in
start)
    dir=$2
    port=$3
    command -v etcd > /dev/null || { echo "etcd.sh: etcd not found (Debian: etcd-server)" >&2; exit 1; }
    mkdir -p "$dir"
    scheme=http
    tls_args=
    curl_tls=
    if [ "${5:-}" = tls ]; then
        command -v openssl > /dev/null || { echo "etcd.sh: openssl not found (Debian: openssl)" >&2; exit 1; }
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=dlock test CA" \
            -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" > "$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log" >&2; exit 1; }
        openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$dir/server-key.pem" \
            -out "$dir/server.csr" >> "$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log" >&2; exit 1; }
        printf 'subjectAltName=IP:127.0.0.1\n' > "$dir/san.ext"
        openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial \
            -days 2 -extfile "$dir/san.ext" -out "$dir/server.pem" >> "$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log" >&2; exit 1; }
        scheme=https
        tls_args="--cert-file $dir/server.pem --key-file $dir/server-key.pem"
        curl_tls="--cacert $dir/ca.pem"
    fi
    # --unsafe-no-fsync: a test server; nothing here must survive a crash.
    # A short election timeout lowers etcd's smallest lease TTL (1.5 x the
    # election timeout) below a second, so that short test leases hold.
    ETCD_UNSUPPORTED_ARCH= etcd --name dlock-test --data-dir "$dir/data" \
        --listen-client-urls "$scheme://127.0.0.1:$port" --advertise-client-urls "$scheme://127.0.0.1:$port" \
        $tls_args \
        --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-cluster "dlock-test=http://127.0.0.1:$((port + 1))" \
        --heartbeat-interval 10 --election-timeout 100 \
        --unsafe-no-fsync --log-level error > "$dir/etcd.log" 2>&1 &
    echo $! > "$dir/pid"
    for _ in $(seq 1 200); do
        # shellcheck disable=SC2086
        if curl -s -m 1 $curl_tls -X POST -d '{"key":"AA=="}' "$scheme://127.0.0.1:$port/v3/kv/range" 2>/dev/null | grep -q header; then
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
