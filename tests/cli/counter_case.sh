# tests/cli/counter_case.sh - the exact-counter case, sourced by the backends' counter tests once they
# have started their server(s) and written "$T/dlock.conf": 8 processes x 25
# (or rounds 25) non-atomic read-sleep-write increments of one counter file,
# each under `dlock run`. Checks that the count ends at exactly 200 (8 x the rounds), that the fences
# handed to the runs (DLOCK_FENCE) strictly increase in grant order, that the
# lock is free afterwards, and, when the caller defines fence_of NAME (the
# backend's stored counter), that it holds the last token handed out.
STEP=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/counter_step.sh
echo 0 > "$T/counter"
: > "$T/counter.fences"
per=$(rounds 25)
total=$((8 * per))
fences_before=
if type fence_of > /dev/null 2>&1; then
    fences_before=$(fence_of counter)
    fences_before=${fences_before:-0} # no counter yet
fi
pids=
for w in 1 2 3 4 5 6 7 8; do
    (
        for i in $(seq 1 "$per"); do
            "$DLOCK" -c "$T/dlock.conf" run counter -- sh -c 'echo "$DLOCK_FENCE" >> "$1.fences"; sh "$2" "$1"' _ \
                "$T/counter" "$STEP" || echo "run failed: $?" >&2
        done
    ) &
    pids="$pids $!"
done
# shellcheck disable=SC2086
wait $pids
got=$(cat "$T/counter")
[ "$got" = "$total" ] && ok "8 x $per increments through $BACKEND_LABEL end at $total" \
    || not_ok "counter is $got, wanted $total"
# The runs were serialised, so the file lists the fences in grant order.
if [ "$(wc -l < "$T/counter.fences")" = "$total" ] && sort -n -c "$T/counter.fences" 2>/dev/null \
        && [ "$(sort -n -u "$T/counter.fences" | wc -l)" = "$total" ]; then
    ok "$total fences, strictly increasing in grant order"
else
    not_ok "fences not strictly increasing: $(head -c 300 "$T/counter.fences" | tr '\n' ' ')"
fi
if [ -n "$fences_before" ]; then
    # Tokens follow the server's clock in microseconds where the backend
    # keeps them above every earlier token that way (redis), so they do not
    # count grants one by one: the counter must hold the last token handed
    # out, above where it was before.
    after=$(fence_of counter)
    last=$(tail -1 "$T/counter.fences")
    [ "${after:-0}" = "$last" ] && [ "$last" -gt "$fences_before" ] \
        && ok "the fence counter holds the last of the $total tokens" \
        || not_ok "the fence counter went from $fences_before to $after; the last token was $last"
fi
"$DLOCK" -c "$T/dlock.conf" run --wait 0 counter -- true
expect_status 0 $? "free afterwards"
