# tests/sql/counter.sh - sourced by run_counter_{postgres,mysql}.sh after
# they have started their server and written "$T/dlock.conf": 8 processes x
# 25 non-atomic read-sleep-write increments of one counter file, each under
# `dlock run`; the count must end at exactly 200, and the lock's fence row
# must have counted 200 grants (checked by the caller's fence_of).
STEP=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/counter_step.sh
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
# shellcheck disable=SC2086
wait $pids
got=$(cat "$T/counter")
[ "$got" = 200 ] && ok "8 x 25 increments through $BACKEND_LABEL end at 200" || not_ok "counter is $got, wanted 200"
fence=$(fence_of counter)
[ "$fence" = 200 ] && ok "fence 200 after 200 grants" || not_ok "fence is '$fence', wanted 200"
"$DLOCK" -c "$T/dlock.conf" run --wait 0 counter -- true
expect_status 0 $? "free afterwards"
