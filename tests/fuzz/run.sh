#!/bin/sh
# tests/fuzz/run.sh BUILDDIR SECONDS [SEED] - builds the libFuzzer targets
# with clang (ASan + UBSan) against the sources, runs each for SECONDS from
# the seeds in tests/fuzz/seeds, and records each as a test in
# BUILDDIR/tests/fuzz (a .log ending "N passed, N failed" and an
# automake-style .trs) for tests/summary.sh. A crash, leak or timeout fails
# it, with its input saved. SEED defaults to 1 so that CI replays the same
# input sequence each run (a finding then is a change's, not luck's); pass
# SEED=0 for a random one when fuzzing for long by hand.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
seconds=${2:-20}
seed=${3:-1}
out=$build/tests/fuzz
mkdir -p "$out"
command -v clang > /dev/null || { echo "fuzz: clang is missing (Debian: clang, libclang-rt-14-dev)"; exit 1; }
cflags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I$build -I$build/include -I$top/include \
-DDLOCK_MODULE_DIR=\"/nonexistent\" $(pkg-config --cflags libconfig)"
libs="$(pkg-config --libs libconfig) -lpthread -ldl"
core=$(ls "$top"/core/*.c)
# The local backend is built in: all of its files, and the shared waiting
# line it drives (Makefile.am's libdlock_core sources).
local="$(ls "$top"/backends/local/*.c) $top/backends/common/line.c $top/backends/common/out_of_line.c"
# The configuration's check of metrics.listen uses the shared address
# grammar, compiled into the library.
local="$local $top/contrib/http/http_address.c"
status=0
for target in config names; do
    log=$out/fuzz_$target.log
    extra=
    [ $target = names ] && extra="$top/backends/redis/redis_keys.c $top/backends/common/name_digest.c \
        $top/backends/common/name_escape.c"
    # shellcheck disable=SC2086
    if ! clang $cflags -o "$out/fuzz_$target" "$top/tests/fuzz/fuzz_$target.c" $core \
            $local $extra $libs > "$log" 2>&1; then
        echo "0 passed, 1 failed" >> "$log"
        printf ':test-result: FAIL\n' > "$out/fuzz_$target.trs"
        echo "fuzz_$target: build failed (see $log)"
        status=1
        continue
    fi
    mkdir -p "$out/corpus_$target"
    if (cd "$out" && LSAN_OPTIONS="suppressions=$top/tests/fuzz/lsan.supp ${LSAN_OPTIONS:-}" "./fuzz_$target" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -print_final_stats=1 "corpus_$target" "$top/tests/fuzz/seeds/$target") >> "$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        echo "fuzz_$target: $runs inputs in ${seconds}s, no crash" | tee -a "$log"
        echo "1 passed, 0 failed" >> "$log"
        printf ':test-result: PASS\n' > "$out/fuzz_$target.trs"
    else
        echo "fuzz_$target: FAILED (crash input saved in $out; see $log)" | tee -a "$log"
        echo "0 passed, 1 failed" >> "$log"
        printf ':test-result: FAIL\n' > "$out/fuzz_$target.trs"
        status=1
    fi
done
exit $status
