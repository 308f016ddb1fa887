#!/bin/sh
# tests/abi/check_abi.sh BUILDDIR - the frozen ABI, checked on a build:
#   1. libdlock.so exports exactly the symbols libdlock.map lists, each
#      with a version node, and nothing else;
#   2. abidiff against the dump stored for the release (abi/libdlock.abi):
#      an incompatible change (a symbol removed, a type changed under its
#      users) fails, unless the soname changed with it; a compatible one
#      (symbols added) is reported.
# Prints "N passed, N failed" last. Needs abigail-tools (abidw, abidiff).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
# Under make check, the build is where DLOCK_BIN is (tests/Makefile.inc).
default=build
[ -n "${DLOCK_BIN:-}" ] && default=${DLOCK_BIN%/.libs/dlock}
build=${1:-$default}
case $build in /*) ;; *) build=$top/$build ;; esac
lib=$build/.libs/libdlock.so
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

if [ ! -f "$lib" ]; then
    bad "no library at $lib: build first (scripts/setup.sh $build)"
    echo "$passed passed, $failed failed"
    exit 1
fi
command -v abidiff > /dev/null || { bad "abidiff not found: apt-get install abigail-tools"; }

# 1. The exports and the map.
listed=$(sed -n '/global:/,/local:/p' "$top/libdlock.map" | sed 's,/\*.*\*/,,' | tr -d ' \t' |
    grep -E '^dlock_[a-z0-9_]+;$' | tr -d ';' | sort)
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//' | sort)
unversioned=$(objdump -T "$lib" | awk '$2 == "g" && $4 != "*UND*" && $(NF-1) !~ /^DLOCK_/ && $NF !~ /^DLOCK_/ {print $NF}')
missing=$(printf '%s\n' "$exported" | grep -vxF "$listed")
stale=$(printf '%s\n' "$listed" | grep -vxF "$exported")
if [ -z "$missing" ] && [ -z "$stale" ]; then
    ok "libdlock.so exports the $(printf '%s\n' "$listed" | wc -l) symbols libdlock.map lists"
else
    [ -n "$missing" ] && bad "exported but not in libdlock.map: $(echo $missing)"
    [ -n "$stale" ] && bad "in libdlock.map but not exported: $(echo $stale)"
fi
if [ -z "$unversioned" ]; then
    ok "every exported symbol has a DLOCK_ version node"
else
    bad "exported without a DLOCK_ version node: $(echo $unversioned)"
fi

# 2. The ABI against the release's dump.
if command -v abidiff > /dev/null; then
    stored=$top/abi/libdlock.abi
    if [ ! -f "$stored" ]; then
        bad "no stored dump at $stored (make one: abidw --headers-dir $top/include --out-file $stored $lib)"
    else
        report=$(abidiff --headers-dir2 "$top/include" "$stored" "$lib" 2>&1)
        status=$?
        old_soname=$(sed -n 's/.*soname=.\([^"'\'']*\).*/\1/p' "$stored" | head -1)
        new_soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
        if [ $((status & 1)) -ne 0 ]; then
            bad "abidiff could not compare (status $status): $report"
        elif [ $((status & 8)) -ne 0 ] && [ "$old_soname" = "$new_soname" ]; then
            bad "an incompatible ABI change under the same soname $new_soname:"
            printf '%s\n' "$report" | sed 's/^/    /'
        elif [ $((status & 8)) -ne 0 ]; then
            ok "an incompatible ABI change, with the soname changed ($old_soname -> $new_soname)"
        elif [ $((status & 4)) -ne 0 ]; then
            ok "the ABI of $old_soname is kept (compatible changes only)"
            printf '%s\n' "$report" | sed 's/^/    /'
        else
            ok "the ABI of $old_soname is unchanged"
        fi
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
