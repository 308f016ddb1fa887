#!/bin/sh
# tests/summary.sh BUILDDIR... [LOGFILE...] - reads the test logs of each
# build and prints what passed and failed, then one closing "N passed, N
# failed" line. A test program that crashed before printing its summary
# counts as one failure. A LOGFILE (a step of scripts/test.sh outside the
# builds, such as the packages) counts by its last "N passed, N failed"
# line, or as one failure without one.
total_pass=0
total_fail=0

# The lines of a failed program's log that say why: cmocka's failures,
# sanitizer reports with their stacks, valgrind's errors and definite
# leaks. Valgrind's "possibly lost" and "still reachable" records are left
# out (they fail nothing, and a forked child prints many), so that they do
# not crowd out the cause.
failure_lines() {
    awk '
        /^==[0-9]+== [0-9,]+ bytes in [0-9,]+ blocks are (possibly lost|still reachable)/ { skip = 1; next }
        /^==[0-9]+== *$/ { skip = 0; next }
        skip { next }
        /FAILED|not ok|ERROR|error|Sanitizer|==[0-9]+==|^  (Previous )?(Read|Write|Atomic)|^    #[0-9]+ / { print }
    ' "$1" | head -60
}
for dir in "$@"; do
    if [ -f "$dir" ]; then
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$dir" | tail -1)
        p=${line%% passed*}
        f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed$/\1/p')
        [ -z "$line" ] && p=0 && f=1
        [ "$f" != 0 ] && grep -E '^FAIL' "$dir" | head -20
        echo "$(basename "$dir" .log): $p passed, $f failed"
        total_pass=$((total_pass + p))
        total_fail=$((total_fail + f))
        continue
    fi
    pass=0
    fail=0
    for trs in $(find "$dir/tests" -name '*.trs' 2>/dev/null | sort); do
        log=${trs%.trs}.log
        result=$(sed -n 's/^:test-result: //p' "$trs" | head -1)
        # A program may run several cmocka groups (the conformance suite per
        # backend mode): every group's summary counts.
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\./\1/p' "$log" | awk '{s += $1} END {if (NR) print s}')
        f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s), listed below:/\1/p' "$log" | awk '{s += $1} END {if (NR) print s}')
        if [ -z "$p$f" ]; then
            line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
            p=${line%% passed*}
            f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed$/\1/p')
        fi
        p=${p:-0}
        f=${f:-0}
        if [ "$result" != PASS ] && [ "$f" = 0 ]; then
            f=1 # crashed, hung or leaked without a failing case of its own
        fi
        [ "$result" != PASS ] && echo "$dir: FAIL ${log#$dir/}" && failure_lines "$log"
        pass=$((pass + p))
        fail=$((fail + f))
    done
    echo "$dir: $pass passed, $fail failed"
    total_pass=$((total_pass + pass))
    total_fail=$((total_fail + fail))
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ] && [ "$total_pass" -gt 0 ]
