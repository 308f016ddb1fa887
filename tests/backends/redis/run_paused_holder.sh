# The fault suite's `dlock run` case: a `dlock run` holding a redis lock
# (watchdog, lease 1 s) is SIGSTOPped for 1.5 leases while another
# `dlock run` waits. The waiter is granted after the lease; the paused one,
# once continued, reports the loss, stops its command and exits 70 — and
# the stale write its command makes afterwards is refused by the Redis
# fence guard (DLOCK_FENCE_REDIS_SET_SCRIPT, dlock/fence.h).
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support/redis_single.sh"
port=$(free_port)
start_redis $port
printf 'backend = "redis";\nlease_ms = 1000;\nredis = { port = %d; };\n' $port > "$T/dlock.conf"
export DLOCK_CONFIG=$T/dlock.conf

# The guard: DLOCK_FENCE_REDIS_SET_SCRIPT, its text taken from the public
# header (the C string pieces joined).
guard=$(awk '/^#define DLOCK_FENCE_REDIS_SET_SCRIPT/ { on = 1; next }
    on {
        if (match($0, /"[^"]*"/)) { s = substr($0, RSTART + 1, RLENGTH - 2); gsub(/\\n/, "\n", s); printf "%s", s }
        if ($0 !~ /\\$/) exit
    }' "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/../include/dlock/fence.h")
case $guard in *"return 1"*) ;; *) not_ok "DLOCK_FENCE_REDIS_SET_SCRIPT not found in dlock/fence.h"; finish; exit 1 ;; esac
guarded_write() { # TOKEN VALUE -> 1 written, 0 refused as stale
    redis-cli -p $port EVAL "$guard" 2 '{account}' '{account}:fence' "$1" "$2"
}

# The paused run's command notes its token, then works for a while.
"$DLOCK" run paused -- sh -c 'echo "$DLOCK_FENCE" > "$1"; sleep 5' _ "$T/paused.fence" 2> "$T/paused.err" &
paused=$!
wait_until_held paused || not_ok "the first run never held the lock"
# The waiter writes through the guard with its own token as soon as it holds.
"$DLOCK" run paused -- sh -c 'redis-cli -p "$1" EVAL "$2" 2 "{account}" "{account}:fence" "$DLOCK_FENCE" waiter > "$3"' \
    _ $port "$guard" "$T/waiter.out" 2> "$T/waiter.err" &
waiter=$!
sleep 0.2
kill -STOP $paused
sleep 1.5
kill -CONT $paused
wait $waiter
expect_status 0 $? "the waiter ran once the paused holder's lease had run out"
[ "$(cat "$T/waiter.out")" = 1 ] && ok "the waiter's guarded write was admitted" \
    || not_ok "waiter: $(cat "$T/waiter.out" "$T/waiter.err" 2>&1)"
wait $paused
expect_status 70 $? "the paused run reports the loss"
grep -q "lost" "$T/paused.err" && ok "its stderr says the lock was lost" || not_ok "stderr: $(cat "$T/paused.err")"
# Its command, had it written after the pause, would have been refused.
[ "$(guarded_write "$(cat "$T/paused.fence")" paused)" = 0 ] && ok "a write with the paused run's token is refused" \
    || not_ok "the stale token $(cat "$T/paused.fence") was admitted"
[ "$(redis-cli -p $port GET '{account}')" = waiter ] && ok "the resource keeps the waiter's write" \
    || not_ok "resource: $(redis-cli -p $port GET '{account}')"
finish
