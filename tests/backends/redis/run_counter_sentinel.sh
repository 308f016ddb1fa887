# The exact-counter test (tests/cli/counter_case.sh) through `dlock run` with
# the redis backend finding its master through Redis Sentinel: a master, a
# replica and a sentinel this script starts on private ports (and stops by
# PID).
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
command -v redis-sentinel > /dev/null || { not_ok "redis-sentinel is not installed"; finish; exit 1; }
base=$(( 20000 + $$ % 12000 )) # below the ephemeral port range
mkdir -p "$T/m" "$T/r" "$T/s"
redis-server --port $base --bind 127.0.0.1 --dir "$T/m" --save '' --appendonly no --daemonize yes \
    --pidfile "$T/m/redis.pid" --logfile "$T/m/redis.log" || { not_ok "master did not start"; finish; exit 1; }
redis-server --port $((base + 1)) --bind 127.0.0.1 --dir "$T/r" --save '' --appendonly no --daemonize yes \
    --pidfile "$T/r/redis.pid" --logfile "$T/r/redis.log" --replicaof 127.0.0.1 $base \
    || { not_ok "replica did not start"; finish; exit 1; }
printf 'port %d\nbind 127.0.0.1\ndaemonize yes\npidfile %s/s/sentinel.pid\nlogfile %s/s/sentinel.log\ndir %s/s\nsentinel monitor mymaster 127.0.0.1 %d 1\nsentinel down-after-milliseconds mymaster 1000\n' \
    $((base + 2)) "$T" "$T" "$T" $base > "$T/s/sentinel.conf"
redis-sentinel "$T/s/sentinel.conf" || { not_ok "sentinel did not start"; finish; exit 1; }
stop_all() {
    for f in "$T/s/sentinel.pid" "$T/r/redis.pid" "$T/m/redis.pid"; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    sleep 0.1
    rm -rf "$T"
}
trap stop_all EXIT
for _ in $(seq 1 100); do
    [ "$(redis-cli -p $((base + 2)) sentinel get-master-addr-by-name mymaster 2>/dev/null | tail -1)" = $base ] && break
    sleep 0.05
done
printf 'backend = "redis";\nredis = { sentinels = ("127.0.0.1:%d"); master = "mymaster"; };\n' $((base + 2)) > "$T/dlock.conf"
BACKEND_LABEL="redis through sentinel"
fence_of() { redis-cli -p $base get "dlock:{$1}:fence"; }
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"
finish
