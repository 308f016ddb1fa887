#!/bin/sh
# scripts/test.sh - the README's test command: installs, builds and runs the
# whole test suite three times: a plain build, ASan+UBSan, and TSan; then the
# cmocka programs once more under valgrind, and the libFuzzer targets for a
# bounded time. Ends with "N passed, N failed".
#
# The three suites run at the same time. Their programs spend most of their
# time waiting (for leases to run out, servers to start, holders to be
# stopped and continued): one suite after another kept the two cores about
# 85% idle. Each test program starts its own servers on ports of its own,
# so the suites share nothing but the machine; the sanitizer builds' timing
# bounds are widened (DLOCK_TEST_SLACK) for their slower steps as before.
# valgrind and the fuzzers, which keep a core busy, run afterwards, beside
# each other.
set -u
cd "$(dirname "$0")/.."
top=$(pwd)
status=0
# Each step's line says how far into the run it starts, so a run's length
# can be read step by step.
started=$(date +%s)
step() { echo "== $* ($(($(date +%s) - started)) s in)"; }
# Every backend this tree has is required here (=yes): a missing dependency
# must fail the run, not quietly drop that backend's tests as =auto would.
# The same for metrics over HTTP: without libmicrohttpd tests/metrics would
# check only that metrics.listen is refused.
BACKENDS="--with-redis=yes --with-postgres=yes --with-mysql=yes --with-zookeeper=yes --with-etcd=yes --with-microhttpd=yes"
failed_builds=""
build_tree() { # builddir configure-options...
    dir=$1
    shift
    scripts/setup.sh "$dir" "$@" || { echo "$dir: build failed"; status=1; failed_builds="$failed_builds $dir"; }
}
# Built one after another (the compiler is what keeps the cores busy), so
# that no suite's tests share the machine with a compile.
build_tree build $BACKENDS
build_tree build-asan $BACKENDS --enable-sanitizers=address,undefined
build_tree build-tsan $BACKENDS --enable-sanitizers=thread
build_tree build-valgrind $BACKENDS
built() { case " $failed_builds " in *" $1 "*) return 1 ;; esac; return 0; }

step "build: a backend module built out of tree, against the installed headers"
if built build; then
    tests/modules/out_of_tree.sh build > /dev/null || status=1
fi

# check_in_background BUILDDIR JOBS [VAR=value...]: runs its make check, JOBS programs
# at a time, with those variables in its environment; the exit status goes to
# BUILDDIR/check.status.
check_in_background() {
    dir=$1
    njobs=$2
    shift 2
    built "$dir" || return 0
    step "$dir: make check"
    (cd "$dir" && { env "$@" make -j"$njobs" check > check.log 2>&1; echo $? > check.status; }) &
}
rm -f build/check.status build-asan/check.status build-tsan/check.status build-valgrind/check.status
# At most two fault-run programs (test_checked_*) at a time, of all three
# suites (tests/heavy_gate.sh): when the three suites reached theirs
# together, their workers waited seconds for a core, past the leases those
# runs measure.
heavy_slots=$(mktemp -d /tmp/dlock-heavy-slots-XXXXXX)
touch "$heavy_slots/slot.1" "$heavy_slots/slot.2"
DLOCK_TEST_HEAVY_SLOTS=$heavy_slots
export DLOCK_TEST_HEAVY_SLOTS
# Six programs at a time share two cores (and the servers they start), so
# a step of any of them may wait for a core: every suite's timing bounds
# are widened (DLOCK_TEST_SLACK multiplies them), the plain build's too.
# A widened bound still tells a wake-up from a timer or a poll, which is
# what those bounds check. On a machine whose system calls are slow (one
# where a bare fcntl lock and unlock takes 2 us) the bounds of the plain
# build alone were missed by a few programs in ten thousand steps.
check_in_background build 2 DLOCK_TEST_SLACK=2
# tests/lsan.supp names the one leak inside a client library (not ours).
# What ASan checks is memory; its slower steps (about twice as slow) get
# wider timing bounds, as TSan's do below.
# The tests that start hundreds of dlock processes repeat their step a
# quarter as often there (DLOCK_TEST_ROUNDS_PERCENT, tests/cli/lib.sh): a
# sanitized process takes seconds to start, and the path is the same each
# round; the plain build runs them in full.
check_in_background build-asan 2 "LSAN_OPTIONS=suppressions=$top/tests/lsan.supp ${LSAN_OPTIONS:-}" DLOCK_TEST_SLACK=3 \
    DLOCK_TEST_ROUNDS_PERCENT=25
# Tests fork children that open their own clients while the parent has
# threads: fine for us, but TSan refuses it unless told.
# tests/tsan.supp: a race inside the ZooKeeper C client, not in libdlock.
# What TSan checks is races; its slower steps get wider timing bounds.
# Two at a time, as the others: at three, its programs (the slowest per
# step) missed their bounds, and its suite still ended first.
check_in_background build-tsan 2 "TSAN_OPTIONS=die_after_fork=0 suppressions=$top/tests/tsan.supp ${TSAN_OPTIONS:-}" \
    DLOCK_TEST_SLACK=4 DLOCK_TEST_ROUNDS_PERCENT=25
wait
rm -rf "$heavy_slots"
unset DLOCK_TEST_HEAVY_SLOTS

# One valgrind program at a time: valgrind slows each ~20x, and the timing
# bounds of the core tests leave little room for two of them sharing two
# cores. The fuzzers take the other core meanwhile.
if built build-valgrind; then
    step "build-valgrind: cmocka programs under valgrind"
    (cd build-valgrind && make -j1 check TESTS="tests/unit/test_basics tests/unit/test_config tests/unit/test_core tests/unit/test_async_native tests/unit/test_modules tests/metrics/test_metrics tests/backends/local/test_local tests/backends/local/test_local_queue" \
        LOG_COMPILER="$top/tests/valgrind.sh" > check.log 2>&1; echo $? > check.status) &
fi
if built build; then
    step "fuzzing: the config loader and every backend's name mapping, 30 s each"
    tests/fuzz/run.sh build 30 || status=1
fi
wait
for dir in build build-asan build-tsan build-valgrind; do
    built "$dir" || continue
    [ "$(cat "$dir/check.status" 2> /dev/null)" = 0 ] || status=1
done
# The Debian packages, once the suites are done (it builds the tree again
# in a copy, and installs and purges the packages).
logs=""
if built build; then
    step "packages: build, lintian, install, use, purge"
    scripts/packages.sh > packages.log 2>&1 || status=1
    logs=packages.log
fi
step "summary"
tests/summary.sh build build-asan build-tsan build-valgrind $logs || status=1
exit $status
