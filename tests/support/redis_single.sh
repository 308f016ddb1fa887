# tests/support/redis_single.sh - sourced by the shell tests after
# tests/cli/lib.sh: start_redis PORT starts a throwaway redis-server on
# 127.0.0.1:PORT with its files in $T (no persistence), waits until it
# answers, and arranges for it to be stopped by its PID (and $T removed) on
# exit. A missing or failing server is a test failure, never a skip.
start_redis() {
    command -v redis-server > /dev/null || { not_ok "redis-server is not installed"; finish; exit 1; }
    redis-server --port "$1" --bind 127.0.0.1 --dir "$T" --save '' --appendonly no --daemonize yes \
        --pidfile "$T/redis.pid" --logfile "$T/redis.log" || { not_ok "redis-server did not start"; finish; exit 1; }
    # The server that answers must be ours: one of another test on the
    # same port would answer PING too, and go away under us.
    local ours=""
    for _ in $(seq 1 100); do
        [ -s "$T/redis.pid" ] && ours=$(cat "$T/redis.pid")
        [ -n "$ours" ] && redis-cli -p "$1" info server 2>/dev/null | grep -q "^process_id:$ours" && break
        sleep 0.05
    done
    redis-cli -p "$1" info server 2>/dev/null | grep -q "^process_id:${ours:-none}" \
        || { not_ok "redis-server did not start on port $1: $(tail -3 "$T/redis.log" 2>/dev/null)"; finish; exit 1; }
    trap stop_redis EXIT
}
stop_redis() { [ -f "$T/redis.pid" ] && kill "$(cat "$T/redis.pid")" 2>/dev/null; sleep 0.1; rm -rf "$T"; }
