#!/bin/sh
# scripts/packages.sh [OUTDIR] - builds the Debian packages from this tree
# (dpkg-buildpackage -us -uc -b on a copy of the committed files), checks
# them with lintian (no errors allowed), installs them, builds
# contrib/examples/counter.c against the installed files with pkg-config,
# runs `dlock run` from the installed files on the local backend and on a
# throwaway redis-server, then purges the packages and checks that nothing
# is left. Run as root on Debian 12; installs what it needs. The .deb
# files are left in OUTDIR (default: a temp dir, printed). Ends with
# "N passed, N failed".
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/dlock-packages.XXXXXX)
out=${1:-$work/out}
mkdir -p "$out"
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
redis_pid=""
finish() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2> /dev/null
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}

# The packages' build tools, and the build's own dependencies.
need="dpkg-dev debhelper lintian pkg-config build-essential"
missing=""
for p in $need; do dpkg -s "$p" > /dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then bad "missing:$missing (run as root, or apt-get install them)"; finish; fi
    apt-get update -qq > /dev/null 2>&1
    apt-get install -y -qq --no-install-recommends $missing > "$work/apt.log" 2>&1 ||
        { bad "apt-get install$missing failed (see $work/apt.log)"; finish; }
fi
cd "$top"
deps=$(dpkg-checkbuilddeps 2>&1 | sed -n 's/.*Unmet build dependencies: //p' | sed 's/([^)]*)//g')
if [ -n "$deps" ]; then
    apt-get install -y -qq --no-install-recommends $deps > "$work/apt-deps.log" 2>&1 ||
        { bad "cannot install the build dependencies: $deps"; finish; }
fi

# 1. Build, from the project's own files only (a copy of what git tracks
#    or would track: no build trees, nothing an earlier configure made).
src=$work/libdlock-1
mkdir -p "$src"
(cd "$top" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c --ignore-failed-read -f -) |
    tar -x -C "$src"
if (cd "$src" && dpkg-buildpackage -us -uc -b > "$work/build.log" 2>&1); then
    ok "dpkg-buildpackage -us -uc -b"
else
    bad "dpkg-buildpackage failed; the end of $work/build.log:"
    tail -30 "$work/build.log"
    finish
fi
mv "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out"/ 2> /dev/null
expected="libdlock0 libdlock-dev dlock-tools dlock-bench libdlock-redis libdlock-zookeeper libdlock-etcd libdlock-postgres libdlock-mysql libdlock-metrics-http"
for p in $expected; do
    if ls "$out/${p}_"*.deb > /dev/null 2>&1; then ok "package $p built"; else bad "package $p not built"; fi
done

# 2. lintian: no errors.
if lintian --fail-on error "$out"/*.changes > "$work/lintian.log" 2>&1; then
    ok "lintian: no errors ($(grep -c '^W:' "$work/lintian.log") warnings)"
else
    bad "lintian reports errors:"
    grep '^E:' "$work/lintian.log"
fi

# Each backend module's package depends on its own client library only.
for m in redis zookeeper etcd postgres mysql; do
    d=$(dpkg-deb -f "$out"/libdlock-${m}_*.deb Depends)
    others=""
    for lib in libhiredis libzookeeper-mt libcurl libpq libmariadb; do
        case $m:$lib in redis:libhiredis | zookeeper:libzookeeper-mt | etcd:libcurl | postgres:libpq | mysql:libmariadb) continue ;; esac
        case $d in *"$lib"*) others="$others $lib" ;; esac
    done
    if [ -z "$others" ]; then ok "libdlock-$m depends on no other backend's client ($d)"; else bad "libdlock-$m depends on$others"; fi
done

# 3. Install, build the example against the installed files, run dlock.
pkgs="libdlock0 libdlock-dev dlock-tools libdlock-redis"
if apt-get install -y -qq --no-install-recommends $(for p in $pkgs; do ls "$out/${p}_"*.deb; done) > "$work/install.log" 2>&1; then
    ok "installed $pkgs"
else
    bad "apt-get install of the packages failed (see $work/install.log)"
    finish
fi
if cc -o "$work/counter" "$top/contrib/examples/counter.c" $(pkg-config --cflags --libs libdlock) 2> "$work/cc.log"; then
    ok "contrib/examples/counter.c built with pkg-config --cflags --libs libdlock"
else
    bad "building the example against the installed files failed: $(cat "$work/cc.log")"
fi
printf 'backend = "local";\nlocal = { dir = "%s/locks"; };\n' "$work" > "$work/local.conf"
if [ "$(/usr/bin/dlock -c "$work/local.conf" run pkg-test -- echo held)" = held ]; then
    ok "installed dlock run on local"
else
    bad "installed dlock run on local failed"
fi
if [ -x "$work/counter" ] && "$work/counter" "$work/count" 20 "$work/local.conf" > "$work/counter.log" 2>&1 &&
    [ "$(cat "$work/count" 2> /dev/null)" = 20 ]; then
    ok "the example counted to 20 on local with the installed library"
else
    bad "the example failed on local: $(tail -3 "$work/counter.log" 2> /dev/null)"
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" > "$work/redis.log" 2>&1 &
redis_pid=$!
for i in $(seq 50); do redis-cli -p "$port" ping > /dev/null 2>&1 && break; sleep 0.1; done
printf 'backend = "redis";\nredis = { port = %s; };\n' "$port" > "$work/redis.conf"
if [ "$(/usr/bin/dlock -c "$work/redis.conf" run pkg-test -- echo held)" = held ]; then
    ok "installed dlock run on redis (the module from libdlock-redis)"
else
    bad "installed dlock run on redis failed"
fi
kill "$redis_pid" 2> /dev/null
wait "$redis_pid" 2> /dev/null
redis_pid=""

# 4. Purge: nothing of ours is left.
apt-get purge -y -qq $pkgs > "$work/purge.log" 2>&1
left=$(ls /usr/bin/dlock /usr/include/dlock.h /usr/lib/*/libdlock.so* /usr/lib/*/libdlock 2> /dev/null)
if [ -z "$left" ]; then ok "purged: no file left"; else bad "left after purge: $left"; fi
echo "packages: $out"
finish
