#!/bin/sh
# tests/adapters/run_async_counter.sh - the libuv example
# (contrib/examples/async_counter.c) as a user runs it: two processes of 100
# handles each, every handle one read-pause-write of a counter file under
# the lock, on the local backend. The count must end at exactly 200, and the
# lock must be free afterwards.
set -u
B=${DLOCK_BUILDDIR:-$(pwd)} # make check runs it in the build tree
EX="$B/contrib/examples/dlock-example-async-counter"
T=$(mktemp -d /tmp/dlock-async-counter-XXXXXX)
trap 'rm -rf "$T"' EXIT
printf 'backend = "local";\nlocal = { dir = "%s"; };\n' "$T" > "$T/dlock.conf"
echo 0 > "$T/counter"
"$EX" "$T/counter" 100 "$T/dlock.conf" & a=$!
"$EX" "$T/counter" 100 "$T/dlock.conf" & b=$!
wait $a; ra=$?
wait $b; rb=$?
got=$(cat "$T/counter")
echo "exit statuses $ra $rb; counter $got"
if [ "$ra" = 0 ] && [ "$rb" = 0 ] && [ "$got" = 200 ]; then
    echo "1 passed, 0 failed"
    exit 0
fi
echo "0 passed, 1 failed"
exit 1
