#!/bin/sh
# tests/support/mariadb.sh start DIR PORT | stop DIR
# A throwaway MariaDB for tests and benchmarks: data in DIR/data, listening
# on 127.0.0.1:PORT (and a socket in DIR), no binary log, relaxed flushing,
# temporary files in DIR/tmp: MariaDB deletes every '#sql*' file of its
# tmpdir when it starts, so servers sharing /tmp would break each other's
# temporary tables (tests/backends/mysql/check_private_tmpdir.sh).
# `start` waits until it answers and prints its PID (kept in DIR/server.pid,
# since mysqld deletes its own pid file at shutdown); `stop` stops that PID.
set -eu
. "$(dirname "$0")/stop_pid.sh"
cmd=$1
dir=$2
case $cmd in
start)
    port=$3
    command -v mariadbd > /dev/null || { echo "mariadb.sh: mariadbd not found (Debian: mariadb-server)" >&2; exit 1; }
    mkdir -p "$dir/tmp"
    mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$dir/data" \
        --auth-root-authentication-method=normal --skip-test-db > "$dir/install.log" 2>&1 \
        || { cat "$dir/install.log" >&2; exit 1; }
    mariadbd --no-defaults --user="$(id -un)" --datadir="$dir/data" --port="$port" --bind-address=127.0.0.1 \
        --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --tmpdir="$dir/tmp" --skip-log-bin \
        --innodb-buffer-pool-size=32M \
        --innodb-flush-log-at-trx-commit=0 --performance-schema=OFF --max-connections=300 \
        > "$dir/mysqld.log" 2>&1 &
    pid=$!
    echo "$pid" > "$dir/server.pid"
    i=0
    until mariadb-admin --no-defaults -h 127.0.0.1 -P "$port" -u root ping > /dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 300 ] || ! kill -0 "$pid" 2> /dev/null; then
            tail -20 "$dir/mysqld.log" >&2
            kill "$pid" 2> /dev/null || true
            exit 1
        fi
        sleep 0.1
    done
    echo "$pid"
    ;;
stop)
    stop_pid_file "$dir/server.pid"
    ;;
*)
    echo "usage: mariadb.sh start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
