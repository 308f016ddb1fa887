#!/bin/bash
# tests/support/etcd.sh start DIR PORT [N] [tls] | stop DIR | leader PORT N
# A throwaway etcd for tests and benchmarks. N = 1 (default): one member,
# clients on 127.0.0.1:PORT, peers on PORT+1, data in DIR. N = 3: a cluster
# with clients on PORT, PORT+1, PORT+2 and peers on PORT+100.., member i in
# DIR/i. With `tls` (one member), it makes a CA and a server certificate for
# 127.0.0.1 in DIR (ca.pem, server.pem, server-key.pem, with openssl) and
# serves https only. `start` waits until the v3 JSON gateway answers and
# prints the (first) PID; `stop` stops them by PID; `leader` prints the
# index (1..N) of the member that leads now.
set -eu
. "$(dirname "$0")/stop_pid.sh"
case $1 in
start)
    dir=$2
    port=$3
    n=${4:-1}
    if [ "$n" -gt 1 ]; then
        command -v etcd > /dev/null || { echo "etcd.sh: etcd not found (Debian: etcd-server)" >&2; exit 1; }
        cluster=
        for i in $(seq 1 "$n"); do
            cluster="$cluster${cluster:+,}m$i=http://127.0.0.1:$((port + 99 + i))"
        done
        for i in $(seq 1 "$n"); do
            mkdir -p "$dir/$i"
            # Elections at 500 ms: a loaded test machine must not see a
            # leader change every time a heartbeat is late.
            ETCD_UNSUPPORTED_ARCH= etcd --name "m$i" --data-dir "$dir/$i/data" \
                --listen-client-urls "http://127.0.0.1:$((port + i - 1))" \
                --advertise-client-urls "http://127.0.0.1:$((port + i - 1))" \
                --listen-peer-urls "http://127.0.0.1:$((port + 99 + i))" \
                --initial-advertise-peer-urls "http://127.0.0.1:$((port + 99 + i))" \
                --initial-cluster "$cluster" --initial-cluster-state new \
                --heartbeat-interval 50 --election-timeout 500 \
                --unsafe-no-fsync --log-level error > "$dir/$i/etcd.log" 2>&1 &
            echo $! > "$dir/$i/pid"
        done
        for i in $(seq 1 "$n"); do
            ok=no
            for _ in $(seq 1 300); do
                if curl -s -m 1 -X POST -d '{"key":"AA=="}' "http://127.0.0.1:$((port + i - 1))/v3/kv/range" 2>/dev/null | grep -q header; then
                    ok=yes
                    break
                fi
                sleep 0.05
            done
            if [ $ok = no ]; then
                tail -20 "$dir/$i/etcd.log" >&2
                for f in "$dir"/*/pid; do stop_pid_file "$f"; done
                exit 1
            fi
        done
        cat "$dir/1/pid"
        exit 0
    fi
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
    for f in "$2"/*/pid; do stop_pid_file "$f"; done
    ;;
leader)
    for i in $(seq 1 "$3"); do
        s=$(curl -s -m 1 -X POST -d '{}' "http://127.0.0.1:$(($2 + i - 1))/v3/maintenance/status" 2>/dev/null) || continue
        me=$(printf '%s' "$s" | sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p')
        leader=$(printf '%s' "$s" | sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p')
        if [ -n "$me" ] && [ "$me" = "$leader" ]; then
            echo "$i"
            exit 0
        fi
    done
    exit 1
    ;;
esac
