# 8 processes x 25 non-atomic read-sleep-write increments of one counter file,
# each under `dlock run` with backend = "redis" against a redis-server this
# script starts on a private port (and stops by PID): exactly 200.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
command -v redis-server > /dev/null || { not_ok "redis-server is not installed"; finish; exit 1; }
port=$(( 20000 + $$ % 12000 )) # below the ephemeral port range
redis-server --port $port --bind 127.0.0.1 --dir "$T" --save '' --appendonly no --daemonize yes \
    --pidfile "$T/redis.pid" --logfile "$T/redis.log" || { not_ok "redis-server did not start"; finish; exit 1; }
for _ in $(seq 1 100); do
    [ "$(redis-cli -p $port ping 2>/dev/null)" = PONG ] && break
    sleep 0.05
done
stop_redis() { [ -f "$T/redis.pid" ] && kill "$(cat "$T/redis.pid")" 2>/dev/null; sleep 0.1; rm -rf "$T"; }
trap stop_redis EXIT
printf 'backend = "redis";\nredis = { port = %d; };\n' $port > "$T/dlock.conf"

BACKEND_LABEL=redis
fence_of() { redis-cli -p $port get "dlock:{$1}:fence"; }
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/counter_run.sh"
finish
