# 4 processes x 50 read-sleep-write increments of one counter file, each
# under `dlock run` with no config (the local default): exactly 200 at the
# end (fewer increments where rounds() says so).
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
STEP=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/counter_step.sh
echo 0 > "$T/counter"
per=$(rounds 50)
total=$((4 * per))
# A new lock file's counter starts at the clock in microseconds: note where.
first=$("$DLOCK" run counter -- sh -c 'echo "$DLOCK_FENCE"')
pids=
for w in 1 2 3 4; do
    (
        for i in $(seq 1 "$per"); do
            "$DLOCK" run counter -- sh "$STEP" "$T/counter" || echo "run failed: $?" >&2
        done
    ) &
    pids="$pids $!"
done
wait $pids
got=$(cat "$T/counter")
if [ "$got" = "$total" ]; then ok "4 x $per increments under dlock run end at $total"; else not_ok "counter is $got, wanted $total"; fi
"$DLOCK" status counter > "$T/status"
st=$?
expect_status 0 "$st" "status says free afterwards"
grep -q "fence $((first + total))" "$T/status" && ok "the fence counted all $total grants" \
    || not_ok "status: $(cat "$T/status") (the first fence was $first)"
finish
