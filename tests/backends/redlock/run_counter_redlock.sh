# 8 processes x 25 non-atomic read-sleep-write increments of one counter
# file, each under `dlock run` with backend = "redlock" over 5 redis-servers
# this script starts on private ports (and stops by PID): exactly 200, and
# the fences handed to the runs strictly increase.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
command -v redis-server > /dev/null || { not_ok "redis-server is not installed"; finish; exit 1; }
base=$(( 20000 + $$ % 12000 )) # below the ephemeral port range
servers=
for i in 0 1 2 3 4; do
    port=$((base + i))
    mkdir -p "$T/r$i"
    redis-server --port $port --bind 127.0.0.1 --dir "$T/r$i" --save '' --appendonly no --daemonize yes \
        --pidfile "$T/r$i/redis.pid" --logfile "$T/r$i/redis.log" || { not_ok "redis-server $i did not start"; finish; exit 1; }
    servers="$servers${servers:+, }\"127.0.0.1:$port\""
done
for i in 0 1 2 3 4; do
    for _ in $(seq 1 100); do
        [ "$(redis-cli -p $((base + i)) ping 2>/dev/null)" = PONG ] && break
        sleep 0.05
    done
done
stop_all() {
    for i in 0 1 2 3 4; do [ -f "$T/r$i/redis.pid" ] && kill "$(cat "$T/r$i/redis.pid")" 2>/dev/null; done
    sleep 0.1
    rm -rf "$T"
}
trap stop_all EXIT
printf 'backend = "redlock";\nredlock = { servers = (%s); };\n' "$servers" > "$T/dlock.conf"

BACKEND_LABEL="redlock (5 masters)"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"
finish
