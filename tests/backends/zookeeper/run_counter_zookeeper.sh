# 8 processes x 25 non-atomic read-sleep-write increments of one counter
# file, each under `dlock run` with backend = "zookeeper", against a
# ZooKeeper this script starts on a private port (and stops by PID):
# exactly 200, and the fences handed to the runs strictly increase.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
SUPPORT=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support
start_on_private_port bash "$SUPPORT/zookeeper.sh" "$T/zk" || { not_ok "zookeeper did not start"; finish; exit 1; }
stop_zk() { bash "$SUPPORT/zookeeper.sh" stop "$T/zk"; rm -rf "$T"; }
trap stop_zk EXIT
printf 'backend = "zookeeper";\nzookeeper = { hosts = "127.0.0.1:%d"; };\n' $port > "$T/dlock.conf"
BACKEND_LABEL=zookeeper
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"
finish
