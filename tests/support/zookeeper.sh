#!/bin/bash
# tests/support/zookeeper.sh start DIR PORT [N] | stop DIR | mode PORT
# A throwaway ZooKeeper for tests and benchmarks: N = 1 (default) runs one
# standalone server on 127.0.0.1:PORT; N = 3 runs an ensemble on PORT,
# PORT+1, PORT+2 (quorum and election ports PORT+100.. and PORT+200..).
# Each server lives in DIR/<i> with its own pid file. tickTime is 200 ms, so
# session timeouts from 400 ms to 4 s are honoured as asked. `start` waits
# until every server reports its mode and prints the PIDs on one line;
# `stop` stops those PIDs; `mode PORT` prints standalone, leader or follower.
set -eu
. "$(dirname "$0")/stop_pid.sh"
jars=/usr/share/java
cp="$jars/zookeeper.jar:$jars/zookeeper-jute.jar:$jars/slf4j-api.jar:$jars/slf4j-log4j12.jar:$jars/log4j-1.2.jar"
mode_of() {
    exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null || return 1
    printf 'srvr' >&3
    # A server that is still starting may keep the socket open without an
    # answer: every read gives up after 2 s.
    local line
    while IFS= read -r -t 2 line <&3; do
        case $line in "Mode: "*) echo "${line#Mode: }" ;; esac
    done
    exec 3<&-
}
case $1 in
start)
    dir=$2
    port=$3
    n=${4:-1}
    command -v java > /dev/null || { echo "zookeeper.sh: java not found (Debian: openjdk-17-jre-headless)" >&2; exit 1; }
    [ -f "$jars/zookeeper.jar" ] || { echo "zookeeper.sh: zookeeper.jar not found (Debian: libzookeeper-java)" >&2; exit 1; }
    pids=
    for i in $(seq 1 "$n"); do
        d=$dir/$i
        mkdir -p "$d/data"
        echo "$i" > "$d/data/myid"
        {
            echo "tickTime=200"
            echo "initLimit=50"
            echo "syncLimit=25"
            echo "dataDir=$d/data"
            echo "clientPort=$((port + i - 1))"
            echo "clientPortAddress=127.0.0.1"
            echo "admin.enableServer=false"
            echo "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,isro"
            echo "maxClientCnxns=0"
            echo "forceSync=no"
            if [ "$n" -gt 1 ]; then
                for j in $(seq 1 "$n"); do
                    echo "server.$j=127.0.0.1:$((port + 99 + j)):$((port + 199 + j))"
                done
            fi
        } > "$d/zoo.cfg"
        printf 'log4j.rootLogger=INFO, F\nlog4j.appender.F=org.apache.log4j.FileAppender\nlog4j.appender.F.File=%s/zk.log\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\nlog4j.appender.F.layout.ConversionPattern=%%d %%p %%c{1}: %%m%%n\n' "$d" > "$d/log4j.properties"
        java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$cp" \
            -Dlog4j.configuration="file:$d/log4j.properties" -Dznode.container.checkIntervalMs=500 \
            org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" > "$d/stdout.log" 2>&1 &
        echo $! > "$d/pid"
        pids="$pids $!"
    done
    for i in $(seq 1 "$n"); do
        p=$((port + i - 1))
        t=0
        until mode_of $p 2>/dev/null | grep -Eq 'standalone|leader|follower'; do
            t=$((t + 1))
            if [ $t -gt 300 ] || ! kill -0 "$(cat "$dir/$i/pid")" 2>/dev/null; then
                tail -20 "$dir/$i/zk.log" "$dir/$i/stdout.log" >&2 2>/dev/null
                for pid in $pids; do kill "$pid" 2>/dev/null || true; done
                exit 1
            fi
            sleep 0.1
        done
    done
    echo $pids
    ;;
stop)
    for f in "$2"/*/pid; do stop_pid_file "$f"; done
    ;;
mode)
    mode_of "$2"
    ;;
*)
    echo "usage: zookeeper.sh start DIR PORT [N] | stop DIR | mode PORT" >&2
    exit 2
    ;;
esac
