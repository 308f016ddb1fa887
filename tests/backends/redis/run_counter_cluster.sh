# The exact-counter test (tests/cli/counter_case.sh) through `dlock run` with
# the redis backend on a Redis Cluster of 3 masters and 3 replicas that
# tests/support/redis_cluster.sh starts on private ports (and stops by PID).
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
support="${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support"
base=$(( 20000 + ($$ * 13) % 11000 )) # below the ephemeral port range (bus ports at +100)
stop_all() {
    bash "$support/redis_cluster.sh" stop "$T/cluster"
    rm -rf "$T"
}
trap stop_all EXIT
# Ports come from the PID; a server of a test program running beside this
# one may hold one of the twelve already. Then the nodes that did start go,
# and the next range is tried.
started=
for attempt in 1 2 3; do
    if bash "$support/redis_cluster.sh" start "$T/cluster" $base 6 > /dev/null; then
        started=1
        break
    fi
    bash "$support/redis_cluster.sh" stop "$T/cluster" > /dev/null 2>&1 || true
    rm -rf "$T/cluster"
    base=$(( 20000 + (base - 20000 + 1117) % 11000 ))
done
[ -n "$started" ] || { not_ok "the Redis Cluster did not start (3 port ranges tried)"; finish; exit 1; }
printf 'backend = "redis";\nredis = { cluster = ("127.0.0.1:%d", "127.0.0.1:%d"); };\n' $base $((base + 1)) > "$T/dlock.conf"
BACKEND_LABEL="redis cluster (3 masters + 3 replicas)"
fence_of() { redis-cli -c -p $base get "dlock:{$1}:fence"; }
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"
finish
