#!/bin/sh
# scripts/test.sh - the README's test command: installs, builds and runs the
# whole test suite three times: a plain build, ASan+UBSan, and TSan; then the
# cmocka programs once more under valgrind, and the libFuzzer targets for a
# bounded time. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
status=0
run_suite() { # builddir configure-options...
    dir=$1
    shift
    scripts/setup.sh "$dir" "$@" || { echo "$dir: build failed"; status=1; return; }
    echo "== $dir: make check"
    (cd "$dir" && make -j2 check > check.log 2>&1) || status=1
}
# Every backend this tree has is required here (=yes): a missing dependency
# must fail the run, not quietly drop that backend's tests as =auto would.
# The same for metrics over HTTP: without libmicrohttpd tests/metrics would
# check only that metrics.listen is refused.
BACKENDS="--with-redis=yes --with-postgres=yes --with-mysql=yes --with-zookeeper=yes --with-etcd=yes --with-microhttpd=yes"
run_suite build $BACKENDS
echo "== build: a backend module built out of tree, against the installed headers"
tests/modules/out_of_tree.sh build > /dev/null || status=1
# tests/lsan.supp names the one leak inside a client library (not ours).
export LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp ${LSAN_OPTIONS:-}"
# What ASan checks is memory; its slower steps (about twice as slow) get
# wider timing bounds, as TSan's do below.
export DLOCK_TEST_SLACK=2
run_suite build-asan $BACKENDS --enable-sanitizers=address,undefined
unset LSAN_OPTIONS DLOCK_TEST_SLACK
# Tests fork children that open their own clients while the parent has
# threads: fine for us, but TSan refuses it unless told.
# tests/tsan.supp: a race inside the ZooKeeper C client, not in libdlock.
export TSAN_OPTIONS="die_after_fork=0 suppressions=$(pwd)/tests/tsan.supp ${TSAN_OPTIONS:-}"
# What TSan checks is races; its slower steps get wider timing bounds.
export DLOCK_TEST_SLACK=3
run_suite build-tsan $BACKENDS --enable-sanitizers=thread
unset DLOCK_TEST_SLACK
scripts/setup.sh build-valgrind $BACKENDS || status=1
echo "== build-valgrind: cmocka programs under valgrind"
# One program at a time: valgrind slows each ~20x, and the timing bounds of
# the core tests leave little room for two of them sharing two cores.
(cd build-valgrind && make -j1 check TESTS="tests/unit/test_basics tests/unit/test_config tests/unit/test_core tests/unit/test_modules tests/metrics/test_metrics tests/backends/local/test_local tests/backends/local/test_local_queue" \
    LOG_COMPILER="$(pwd)/../tests/valgrind.sh" > check.log 2>&1) || status=1
echo "== fuzzing: the config loader and every backend's name mapping, 30 s each"
tests/fuzz/run.sh build 30 || status=1
tests/summary.sh build build-asan build-tsan build-valgrind || status=1
exit $status
