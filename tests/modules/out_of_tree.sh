#!/bin/sh
# tests/modules/out_of_tree.sh BUILDDIR - proves the plugin framework from
# the outside: installs BUILDDIR's libdlock into a temporary root, builds
# tests/modules/outoftree/flockdir.c as a module against the installed
# headers with `pkg-config --cflags libdlock` (nothing from the source tree),
# puts it in a directory named by DLOCK_MODULE_PATH, and runs the
# conformance suite with `backend = "flockdir"` from a program built against
# the installed library. Records the run as a test in BUILDDIR/tests/modules
# (a .log and an automake-style .trs) for tests/summary.sh.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
out=$build/tests/modules
mkdir -p "$out"
log=$out/out_of_tree.log
trs=$out/out_of_tree.trs
T=$(mktemp -d /tmp/dlock-oot-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() {
    echo "out_of_tree: $1" >> "$log"
    echo "0 passed, 1 failed" >> "$log"
    printf ':test-result: FAIL\n' > "$trs"
    cat "$log"
    exit 1
}
: > "$log"
make -C "$build" install DESTDIR="$T/root" > "$T/install.log" 2>&1 || { cat "$T/install.log" >> "$log"; fail "make install failed"; }
prefix=$(sed -n 's/^prefix=//p' "$build/libdlock.pc")
libdir=$(sed -n 's/^libdir=//p' "$build/libdlock.pc" | sed "s|\${exec_prefix}|$prefix|; s|\${prefix}|$prefix|")
export PKG_CONFIG_SYSROOT_DIR="$T/root" PKG_CONFIG_PATH="$T/root$libdir/pkgconfig"
cflags=$(pkg-config --cflags libdlock) || fail "pkg-config does not know the installed libdlock"
libs=$(pkg-config --libs libdlock)
case "$cflags" in *"$top"*) fail "the module would see the source tree: $cflags";; esac
mkdir -p "$T/modules" "$T/locks"
# shellcheck disable=SC2086
cc -std=gnu11 -Wall -Wextra -Werror -shared -fPIC $cflags -o "$T/modules/dlock_flockdir.so" \
    "$top/tests/modules/outoftree/flockdir.c" >> "$log" 2>&1 || fail "the module does not build against the installed headers"
# shellcheck disable=SC2086
cc -std=gnu11 -Wall -Wextra $cflags $(pkg-config --cflags cmocka) -o "$T/run_conformance" \
    "$top/tests/modules/outoftree/run_conformance.c" "$top/tests/conformance/conformance.c" \
    "$top/tests/conformance/conformance_shared.c" "$top/tests/conformance/conformance_kinds.c" "$top/tests/conformance/conformance_model.c" "$top/tests/conformance/conformance_list.c" "$top/tests/conformance/conformance_waiting.c" "$top/tests/conformance/conformance_async.c" "$top/tests/conformance/conformance_election.c" "$top/tests/conformance/conformance_cache.c" \
    $libs $(pkg-config --libs cmocka) -lpthread >> "$log" 2>&1 || fail "the conformance runner does not build"
# Only the installed library and the out-of-tree module: none of the build's.
LD_LIBRARY_PATH="$T/root$libdir" DLOCK_MODULE_PATH="$T/modules" DLOCK_TEST_SRCDIR="$top/tests" \
    "$T/run_conformance" "$T/locks" >> "$log" 2>&1
status=$?
grep -q 'backend = "flockdir"' "$top/tests/modules/outoftree/run_conformance.c" || fail "not selected by configuration"
if [ $status = 0 ] && grep -q '^\[  PASSED  \]' "$log"; then
    printf ':test-result: PASS\n' > "$trs"
    grep -E '^\[  (PASSED|FAILED)' "$log"
    exit 0
fi
printf ':test-result: FAIL\n' > "$trs"
grep -E 'FAILED|ERROR|error' "$log" | head -20
exit 1
