#!/bin/sh
# tests/heavy_gate.sh PROGRAM [ARGS...] - runs one cmocka test program (the
# LOG_COMPILER of every program without an extension).
#
# The fault-run programs (test_checked_*) each keep a server and half a
# dozen worker processes busy for minutes. scripts/test.sh runs three
# builds' suites side by side on two cores; when all three reached their
# fault runs together, a worker could wait seconds for a core, past the
# leases and bounds those runs measure. There, DLOCK_TEST_HEAVY_SLOTS names
# a directory of slot files: a fault-run program first takes a free slot
# (flock), so that no more fault runs than slots share the machine, from
# whichever build. Every other program, and every program run without
# that variable (a plain `make check`), starts at once.
case "${1##*/}" in
test_checked_*) ;;
*) exec "$@" ;;
esac
slots=${DLOCK_TEST_HEAVY_SLOTS:-}
if [ -z "$slots" ] || ! [ -d "$slots" ]; then
    exec "$@"
fi
# flock's own answer when the slot is taken; the programs exit with the
# number of their failed cases, far below it.
taken=254
while :; do
    for slot in "$slots"/slot.*; do
        [ -e "$slot" ] || continue
        # -o: the program and the workers it forks do not keep the slot's
        # descriptor; the slot is free when the program ends.
        flock -n -o -E $taken "$slot" "$@"
        rc=$?
        [ $rc -eq $taken ] || exit $rc
    done
    sleep 1
done
