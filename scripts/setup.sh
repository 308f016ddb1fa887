#!/bin/sh
# scripts/setup.sh - installs what libdlock needs to build and test on Debian
# 12 (when run as root and something is missing), then configures and builds
# it in build/ (or the directory given as $1, with the configure options that
# follow). Used by the README's two quick-start commands and by .ci/run.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)

# Build tools, libraries, the test framework and checkers, and the servers
# the backend tests start (each on a private port, stopped by PID).
# libmicrohttpd serves metrics.listen; tests/metrics scrapes it with curl and
# reads the text with python3-prometheus-client's parser. The operator's
# view is tested in a real browser (chromium, headless), and its alert rules
# with promtool (from prometheus). abigail-tools (abidw, abidiff) checks
# the frozen ABI against the release's dump (tests/abi).
PACKAGES="build-essential pkg-config autoconf automake libtool libconfig-dev libcmocka-dev
libhiredis-dev libpq-dev libmariadb-dev libzookeeper-mt-dev valgrind clang libclang-rt-14-dev redis-server
redis-sentinel redis-tools postgresql mariadb-server libzookeeper-java openjdk-17-jre-headless gnuplot-nox
libcurl4-openssl-dev libjson-c-dev libssl-dev etcd-server etcd-client curl python3
libmicrohttpd-dev python3-prometheus-client chromium prometheus libuv1-dev libevent-dev libev-dev abigail-tools"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: missing Debian packages:$missing" >&2
        echo "setup: run as root, or: sudo apt-get install$missing" >&2
        exit 1
    fi
    echo "setup: installing$missing"
    # Package scripts must not start system daemons (no init system here).
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing > /tmp/dlock-apt.log 2>&1 || {
        tail -20 /tmp/dlock-apt.log >&2
        exit 1
    }
fi

[ -x configure ] || ./autogen.sh > /dev/null 2>&1 || { ./autogen.sh; exit 1; }

builddir=${1:-build}
[ $# -gt 0 ] && shift
mkdir -p "$builddir"
cd "$builddir"
if [ ! -f Makefile ] || [ "$top/configure" -nt Makefile ]; then
    # configure's clean-up of "core" files complains about our core/ folder.
    "$top/configure" -q "$@" 2>&1 | grep -v "cannot remove 'core'" || true
    [ -f Makefile ] || { echo "setup: configure failed, see $builddir/config.log" >&2; exit 1; }
fi
make -j"$(nproc)" > make.log 2>&1 || { tail -40 make.log >&2; exit 1; }
echo "setup: built in $builddir"
