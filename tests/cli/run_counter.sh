# 4 processes x 50 read-sleep-write increments of one counter file, each
# under `dlock run` with no config (the local default): exactly 200 at the end.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
STEP=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/counter_step.sh
echo 0 > "$T/counter"
# A new lock file's counter starts at the clock in microseconds: note where.
first=$("$DLOCK" run counter -- sh -c 'echo "$DLOCK_FENCE"')
pids=
for w in 1 2 3 4; do
    (
        for i in $(seq 1 50); do
            "$DLOCK" run counter -- sh "$STEP" "$T/counter" || echo "run failed: $?" >&2
        done
    ) &
    pids="$pids $!"
done
wait $pids
got=$(cat "$T/counter")
if [ "$got" = 200 ]; then ok "4 x 50 increments under dlock run end at 200"; else not_ok "counter is $got, wanted 200"; fi
"$DLOCK" status counter > "$T/status"
st=$?
expect_status 0 "$st" "status says free afterwards"
grep -q "fence $((first + 200))" "$T/status" && ok "the fence counted all 200 grants" \
    || not_ok "status: $(cat "$T/status") (the first fence was $first)"
finish
