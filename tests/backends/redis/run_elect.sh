#!/bin/bash
# dlock elect on redis (a redis-server this script starts on a private
# port and stops by PID), lease 900 ms: a leader and two standbys; the
# leader killed -9 is replaced within its lease by a standby with a greater
# term; the next leader's leadership broken (dlock break --yes) stops its
# command and makes dlock elect exit 70, and the last standby takes over;
# dlock leader --watch prints each leader in turn, terms only growing.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support/redis_single.sh"
port=$(free_port)
start_redis $port
printf 'backend = "redis";\nlease_ms = 900;\nredis = { port = %d; };\n' $port > "$T/dlock.conf"
export DLOCK_CONFIG="$T/dlock.conf"
slack=${DLOCK_TEST_SLACK:-1}
name=primary

candidate() {
    "$DLOCK" elect --value "$1" --kill-after 500 "$name" -- \
        sh -c 'echo "$DLOCK_TERM $$" > "$0"; exec sleep 60' "$T/$1.env" > "$T/$1.out" 2>&1 &
}
leaders() { ls "$T"/*.env 2>/dev/null | wc -l; }

"$DLOCK" leader --watch "$name" > "$T/watch" 2>&1 &
watch_pid=$!
wait_for_file "$T/watch" || not_ok "leader --watch printed nothing"
candidate a
a_pid=$!
wait_for_file "$T/a.env" && ok "the first candidate leads" || not_ok "no leader: $(cat "$T/a.out")"
candidate b
b_pid=$!
candidate c
c_pid=$!
sleep 0.3
read -r a_term _ < "$T/a.env"
[ "$(leaders)" = 1 ] && ok "the standbys wait" || not_ok "$(leaders) leaders"

kill -9 "$a_pid"
t0=$(now_ms)
for _ in $(seq 1 $((200 * slack))); do
    [ "$(leaders)" = 2 ] && break
    sleep 0.025
done
took=$(( $(now_ms) - t0 ))
[ "$(leaders)" = 2 ] && [ $took -lt $((900 + 400 * slack)) ] \
    && ok "a standby took over ${took} ms after the leader was killed (lease 900 ms)" \
    || not_ok "takeover after $took ms, $(leaders) leaders"
next=b
[ -s "$T/c.env" ] && next=c
last=c
[ $next = c ] && last=b
read -r n_term _ < "$T/$next.env"
[ "$n_term" -gt "$a_term" ] && ok "its term is greater ($n_term > $a_term)" || not_ok "term $n_term after $a_term"
"$DLOCK" leader "$name" > "$T/now" 2>&1
grep -q ": term $n_term, value $next$" "$T/now" && ok "dlock leader names it" || not_ok "leader: $(cat "$T/now")"

# Its leadership broken: the command is stopped and elect exits 70 (at
# the next renewal, a third of the lease), the last standby takes over.
"$DLOCK" break --yes "$name" > /dev/null 2>&1
if [ $next = b ]; then wait "$b_pid"; else wait "$c_pid"; fi
expect_status 70 $? "elect, its leadership lost"
grep -q "leadership" "$T/$next.out" && ok "it says the leadership was lost" || not_ok "said: $(cat "$T/$next.out")"
wait_for_file "$T/$last.env" && ok "the last standby took over" || not_ok "no takeover: $(cat "$T/$last.out")"
read -r l_term l_cmd < "$T/$last.env"
[ "$l_term" -gt "$n_term" ] && ok "its term is greater still" || not_ok "term $l_term after $n_term"

kill -TERM "$l_cmd"
if [ $last = b ]; then wait "$b_pid"; else wait "$c_pid"; fi
sleep 0.3
kill -INT "$watch_pid"
wait "$watch_pid"
grep -q ": term $a_term, value a$" "$T/watch" && grep -q ": term $n_term, value $next$" "$T/watch" \
    && grep -q ": term $l_term, value $last$" "$T/watch" && ok "leader --watch showed each leader" \
    || not_ok "watch: $(cat "$T/watch")"
terms=$(grep -o 'term [0-9]*' "$T/watch" | awk '{print $2}')
sort -n -c <(echo "$terms") 2>/dev/null && ok "terms only grew" || not_ok "terms: $terms"
[ "$(tail -1 "$T/watch")" = "$name: no leader" ] && ok "it ended with nobody leading" || not_ok "watch: $(cat "$T/watch")"
finish
