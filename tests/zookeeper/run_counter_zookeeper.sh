# 8 processes x 25 non-atomic read-sleep-write increments of one counter
# file, each under `dlock run` with backend = "zookeeper", against a
# ZooKeeper this script starts on a private port (and stops by PID):
# exactly 200, and the fences handed to the runs strictly increase.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
SUPPORT=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/support
port=$(( 20000 + $$ % 12000 )) # below the ephemeral port range
bash "$SUPPORT/zookeeper.sh" start "$T/zk" $port > /dev/null || { not_ok "zookeeper did not start"; finish; exit 1; }
stop_zk() { bash "$SUPPORT/zookeeper.sh" stop "$T/zk"; rm -rf "$T"; }
trap stop_zk EXIT
printf 'backend = "zookeeper";\nzookeeper = { hosts = "127.0.0.1:%d"; };\n' $port > "$T/dlock.conf"
STEP=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/counter_step.sh
echo 0 > "$T/counter"
pids=
for w in 1 2 3 4 5 6 7 8; do
    (
        for i in $(seq 1 25); do
            "$DLOCK" -c "$T/dlock.conf" run counter -- sh -c 'echo "$DLOCK_FENCE" >> "$1.fences"; sh "$2" "$1"' _ \
                "$T/counter" "$STEP" || echo "run failed: $?" >&2
        done
    ) &
    pids="$pids $!"
done
# shellcheck disable=SC2086
wait $pids
got=$(cat "$T/counter")
[ "$got" = 200 ] && ok "8 x 25 increments through zookeeper end at 200" || not_ok "counter is $got, wanted 200"
# The runs were serialised, so the file lists the fences in grant order.
if [ "$(wc -l < "$T/counter.fences")" = 200 ] && sort -n -c "$T/counter.fences" 2>/dev/null \
        && [ "$(sort -n -u "$T/counter.fences" | wc -l)" = 200 ]; then
    ok "200 fences, strictly increasing in grant order"
else
    not_ok "fences not strictly increasing: $(head -c 300 "$T/counter.fences" | tr '\n' ' ')"
fi
"$DLOCK" -c "$T/dlock.conf" run --wait 0 counter -- true
expect_status 0 $? "free afterwards"
finish
