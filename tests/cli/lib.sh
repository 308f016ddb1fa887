# tests/cli/lib.sh - shared by the dlock program tests: a private temp dir
# (also $TMPDIR, so the default local lock directory is private to the test),
# check helpers and the closing "N passed, N failed" line.
set -u
DLOCK=${DLOCK_BIN:?DLOCK_BIN must point at the dlock program}
T=$(mktemp -d /tmp/dlock-cli-test-XXXXXX)
export TMPDIR=$T
unset DLOCK_CONFIG
PASSED=0
FAILED=0
cleanup() { rm -rf "$T"; }
trap cleanup EXIT

ok() { PASSED=$((PASSED + 1)); echo "ok - $1"; }
# rounds N: how many times a test that starts many dlock processes repeats
# its step: N, or $DLOCK_TEST_ROUNDS_PERCENT of it (at least 2). The
# sanitizer builds set it: there every process takes seconds to start,
# and what they check (memory, races) the same path shows each round.
rounds() { r=$(($1 * ${DLOCK_TEST_ROUNDS_PERCENT:-100} / 100)); [ "$r" -ge 2 ] && echo "$r" || echo 2; }
not_ok() { FAILED=$((FAILED + 1)); echo "not ok - $1"; }
# expect_status WANT GOT WHAT
# expect_status WANT GOT WHAT: ok or not ok; returns 1 on not ok, so that a
# caller can show what the program said.
expect_status() {
    if [ "$2" = "$1" ]; then ok "$3 (exit $2)"; else not_ok "$3: exit $2, wanted $1"; return 1; fi
}
# A port nothing listens on now (the kernel's pick), for a throwaway
# server: ports derived from $$ collide when two tests' PIDs differ by the
# offsets they add.
# start_on_private_port SHELL SCRIPT DIR: runs `SHELL SCRIPT start DIR PORT`
# (a tests/support server script) on a port below the ephemeral range,
# picked from this process's id, and sets port. Three suites run at once,
# each starting servers: a port another one's server took is passed over
# for the next of five (DIR is made afresh each time). 1 when none started.
start_on_private_port() {
    for attempt in 0 1 2 3 4; do
        port=$(( 20000 + ($$ * 7 + attempt * 1009) % 12000 ))
        rm -rf "$3"
        "$1" "$2" start "$3" $port > /dev/null 2> "$3.err" && return 0
    done
    cat "$3.err" >&2
    return 1
}
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
# wait_until_held NAME: polls `dlock status` (exit 1 = held) for up to 5 s
wait_until_held() {
    for _ in $(seq 1 100); do
        "$DLOCK" status "$1" >/dev/null 2>&1
        [ $? = 1 ] && return 0
        sleep 0.05
    done
    return 1
}
# wait_for_file FILE: until FILE has something in it, up to 5 s
wait_for_file() {
    for _ in $(seq 1 200); do
        [ -s "$1" ] && return 0
        sleep 0.025
    done
    return 1
}
finish() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" = 0 ]
}
