# 8 processes x 25 non-atomic read-sleep-write increments of one counter file,
# each under `dlock run` with backend = "redis" against a redis-server this
# script starts on a private port (and stops by PID): exactly 200.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
STEP=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/counter_step.sh
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

echo 0 > "$T/counter"
pids=
for w in 1 2 3 4 5 6 7 8; do
    (
        for i in $(seq 1 25); do
            "$DLOCK" -c "$T/dlock.conf" run counter -- sh "$STEP" "$T/counter" || echo "run failed: $?" >&2
        done
    ) &
    pids="$pids $!"
done
wait $pids
got=$(cat "$T/counter")
[ "$got" = 200 ] && ok "8 x 25 increments through redis end at 200" || not_ok "counter is $got, wanted 200"
[ "$(redis-cli -p $port get 'dlock:{counter}:fence')" = 200 ] && ok "fence 200 after 200 grants" \
    || not_ok "fence is $(redis-cli -p $port get 'dlock:{counter}:fence')"
"$DLOCK" -c "$T/dlock.conf" run --wait 0 counter -- true
expect_status 0 $? "free afterwards"
finish
