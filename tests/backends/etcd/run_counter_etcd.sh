# 8 processes x 25 non-atomic read-sleep-write increments of one counter
# file, each under `dlock run` with backend = "etcd", against an etcd this
# script starts on a private port (and stops by PID): exactly 200, and the
# fences handed to the runs strictly increase.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
SUPPORT=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support
start_on_private_port bash "$SUPPORT/etcd.sh" "$T/etcd" || { not_ok "etcd did not start"; finish; exit 1; }
stop_etcd() { bash "$SUPPORT/etcd.sh" stop "$T/etcd"; rm -rf "$T"; }
trap stop_etcd EXIT
printf 'backend = "etcd";\netcd = { endpoints = ( "http://127.0.0.1:%d" ); };\n' $port > "$T/dlock.conf"
BACKEND_LABEL=etcd
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"
finish
