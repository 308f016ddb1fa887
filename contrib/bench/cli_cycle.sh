#!/bin/sh
# contrib/bench/cli_cycle.sh DLOCK CONFIG ENDPOINT [N] - one lock cycle from
# the command line on the same etcd: `dlock run NAME -- true` beside etcd's
# own `etcdctl lock NAME true`, interleaved, N times each (default 20).
# Prints the median wall time of each (process start to exit) and the ratio.
set -eu
dlock=$1 config=$2 endpoint=$3 n=${4:-20}
command -v etcdctl > /dev/null || { echo "cli_cycle: etcdctl not found (Debian: etcd-client)" >&2; exit 1; }
now_us() { echo $(($(date +%s%N) / 1000)); }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
: > /tmp/cli_cycle.$$.dlock
: > /tmp/cli_cycle.$$.etcdctl
for i in $(seq 1 "$n"); do
    t0=$(now_us)
    "$dlock" -c "$config" run "cli-cycle" -- true
    t1=$(now_us)
    ETCDCTL_API=3 etcdctl --endpoints="$endpoint" lock "cli-cycle-etcdctl" true > /dev/null
    t2=$(now_us)
    echo $((t1 - t0)) >> /tmp/cli_cycle.$$.dlock
    echo $((t2 - t1)) >> /tmp/cli_cycle.$$.etcdctl
done
d=$(median < /tmp/cli_cycle.$$.dlock)
e=$(median < /tmp/cli_cycle.$$.etcdctl)
rm -f /tmp/cli_cycle.$$.dlock /tmp/cli_cycle.$$.etcdctl
echo "one cycle from the command line, median of $n: dlock run $((d / 1000)) ms, etcdctl lock $((e / 1000)) ms," \
    "ratio $(awk -v d="$d" -v e="$e" 'BEGIN { printf "%.2f", e / d }') (etcdctl time / dlock time)"
