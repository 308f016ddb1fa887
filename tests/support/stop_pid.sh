# tests/support/stop_pid.sh - sourced by the server scripts here.
# stop_pid_file FILE: SIGTERM the PID in FILE, wait up to 10 s for it to go,
# then SIGKILL; FILE is removed. Nothing happens if FILE or the process is gone.
stop_pid_file() {
    [ -f "$1" ] || return 0
    local pid t=0
    pid=$(cat "$1")
    if kill "$pid" 2> /dev/null; then
        while [ -d "/proc/$pid" ] && [ $t -lt 100 ]; do sleep 0.1; t=$((t + 1)); done
        [ -d "/proc/$pid" ] && kill -9 "$pid" 2> /dev/null
    fi
    rm -f "$1"
}
