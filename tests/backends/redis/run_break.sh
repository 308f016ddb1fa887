# dlock break as an operator runs it, against a redis-server this script
# starts on a private port (and stops by PID): without --yes it does
# nothing; with it, the holder's `dlock run` loses the lock at its next
# renewal and stops its command (exit 70), the next holder's fence is
# higher, and a second break finds nothing. On the local backend it is
# refused with the reason.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support/redis_single.sh"
port=$(free_port)
start_redis $port
printf 'backend = "redis";\nlease_ms = 900;\nredis = { port = %d; };\n' $port > "$T/dlock.conf"
export DLOCK_CONFIG="$T/dlock.conf"

"$DLOCK" run stuck -- sh -c 'echo "$DLOCK_FENCE" > "$0"; sleep 30' "$T/fence1" &
holder=$!
wait_until_held stuck || not_ok "the holder never got the lock"

"$DLOCK" break stuck > "$T/out" 2>&1
expect_status 64 $? "break without --yes"
grep -q -- "--yes" "$T/out" && ok "it says what --yes is for" || not_ok "no word of --yes: $(cat "$T/out")"
"$DLOCK" status stuck > /dev/null 2>&1
expect_status 1 $? "still held after a break without --yes"

t0=$(now_ms)
"$DLOCK" break --yes stuck > "$T/out" 2>&1
expect_status 0 $? "break --yes"
grep -q "broken" "$T/out" && ok "it says the lock was broken" || not_ok "break said: $(cat "$T/out")"
wait $holder
st=$?
took=$(( $(now_ms) - t0 ))
expect_status 70 $st "the holder's dlock run, its lock lost"
# Within 2 s, widened as the suite's other bounds are (DLOCK_TEST_SLACK).
bound=$((2000 * ${DLOCK_TEST_SLACK:-1}))
[ $took -lt $bound ] && ok "the holder stopped $took ms after the break" || not_ok "the holder stopped after $took ms (bound $bound)"

"$DLOCK" run --wait 0 stuck -- sh -c 'echo "$DLOCK_FENCE" > "$0"' "$T/fence2"
expect_status 0 $? "the next holder gets it at once"
[ "$(cat "$T/fence2")" -gt "$(cat "$T/fence1")" ] && ok "its fence is higher" \
    || not_ok "fences $(cat "$T/fence1") then $(cat "$T/fence2")"
"$DLOCK" break --yes stuck > "$T/out" 2>&1
expect_status 0 $? "break of a free name"
grep -q "was not held" "$T/out" && ok "it says nothing was held" || not_ok "break said: $(cat "$T/out")"

unset DLOCK_CONFIG
"$DLOCK" break --yes local-name > "$T/out" 2>&1
st=$?
[ $st != 0 ] && grep -q "kernel lock" "$T/out" && ok "local refuses with the reason (exit $st)" \
    || not_ok "local: exit $st: $(cat "$T/out")"
finish
