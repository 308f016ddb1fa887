#!/bin/bash
# dlock elect and dlock leader, on the local backend: a leader and two
# standbys, the leader killed -9 (a standby takes over with a greater term),
# the new leader's command ending (the last standby takes over at once),
# DLOCK_TERM in each command's environment, dlock leader's exit status and
# JSON, and dlock leader --watch printing one line per change.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"

name=nightly-job
# CANDIDATE VALUE: dlock elect whose command notes its term and pid, then
# sleeps until it is ended.
candidate() {
    "$DLOCK" elect --value "$1" "$name" -- sh -c 'echo "$DLOCK_TERM $DLOCK_FENCE $DLOCK_NAME $$" > "$0"; exec sleep 60' \
        "$T/$1.env" > "$T/$1.out" 2>&1 &
}
leaders() { ls "$T"/*.env 2>/dev/null | wc -l; }

"$DLOCK" leader "$name" > "$T/none" 2>&1
expect_status 1 $? "leader with nobody leading"
grep -q ': no leader$' "$T/none" && ok "it says so" || not_ok "leader: $(cat "$T/none")"

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
sleep 0.5
[ "$(leaders)" = 1 ] && ok "the standbys wait" || not_ok "$(leaders) leaders at once"
read -r a_term a_fence a_name a_cmd < "$T/a.env"
[ "$a_term" -gt 0 ] && [ "$a_term" = "$a_fence" ] && [ "$a_name" = "$name" ] \
    && ok "the command has DLOCK_TERM, DLOCK_FENCE and DLOCK_NAME" || not_ok "environment: $(cat "$T/a.env")"
"$DLOCK" leader "$name" > "$T/now" 2>&1
expect_status 0 $? "leader while one leads"
grep -q ": term $a_term, value a$" "$T/now" && ok "leader prints the term and value" || not_ok "leader: $(cat "$T/now")"
"$DLOCK" leader --json "$name" > "$T/json" 2>&1
grep -qF "{\"name\":\"$name\",\"term\":$a_term,\"value\":\"a\"}" "$T/json" && ok "leader --json" \
    || not_ok "leader --json: $(cat "$T/json")"

# dlock list shows the name as an election: its leader, term and
# candidates (the leader and the two standbys waiting).
"$DLOCK" list > "$T/list" 2>&1
grep -q "^    election: leader term $a_term, value a, 3 candidates$" "$T/list" && ok "list shows the election" \
    || not_ok "list: $(cat "$T/list")"
"$DLOCK" list --json > "$T/list.json" 2>&1
python3 - "$T/list.json" "$name" "$a_term" > "$T/check" 2>&1 <<'PY'
import json, sys
locks = {l["name"]: l for l in json.load(open(sys.argv[1]))}
e = locks[sys.argv[2]]["election"]
assert e == {"term": int(sys.argv[3]), "value": "a", "candidates": 3}, e
print("checked")
PY
[ $? = 0 ] && ok "list --json has the election" || not_ok "list --json: $(cat "$T/check") $(cat "$T/list.json")"

# The leader killed -9: its command goes with it (the parent-death
# signal), and a standby is elected with a greater term.
kill -9 "$a_pid"
wait "$a_pid" 2>/dev/null
t0=$(now_ms)
for _ in $(seq 1 100); do
    [ "$(leaders)" = 2 ] && break
    sleep 0.05
done
took=$(($(now_ms) - t0))
[ "$(leaders)" = 2 ] && ok "a standby took over ${took} ms after the leader was killed" \
    || not_ok "no takeover: $(cat "$T"/*.out)"
# alive PID: running (a zombie whose parent died has ended). The stat
# line is read once: a process that ends between a test for the file and
# a read of it is not alive.
alive() {
    stat_line=$(cat "/proc/$1/stat" 2> /dev/null) || return 1
    [ -n "$stat_line" ] || return 1
    case "${stat_line##*) }" in
    Z*) return 1 ;;
    esac
    return 0
}
for _ in $(seq 1 40); do
    alive "$a_cmd" || break
    sleep 0.05
done
alive "$a_cmd" && not_ok "the killed leader's command still runs" || ok "the killed leader's command is gone"
next=b
[ -s "$T/c.env" ] && next=c
last=c
[ $next = c ] && last=b
read -r n_term _ _ n_cmd < "$T/$next.env"
[ "$n_term" -gt "$a_term" ] && ok "the new term is greater ($n_term > $a_term)" || not_ok "term $n_term after $a_term"

# The new leader's command ends: dlock elect exits with its status and
# resigns, and the last standby is elected at once.
kill -TERM "$n_cmd"
if [ $next = b ]; then wait "$b_pid"; else wait "$c_pid"; fi
expect_status 143 $? "elect exits with the command's status"
wait_for_file "$T/$last.env" && ok "the last standby took over after the clean exit" || not_ok "no takeover"
read -r l_term _ _ l_cmd < "$T/$last.env"
[ "$l_term" -gt "$n_term" ] && ok "its term is greater still" || not_ok "term $l_term after $n_term"

sleep 0.3
kill -TERM "$l_cmd"
if [ $last = b ]; then wait "$b_pid"; else wait "$c_pid"; fi
"$DLOCK" leader "$name" > /dev/null 2>&1
expect_status 1 $? "nobody leads once every candidate is gone"
sleep 0.3
kill -INT "$watch_pid"
wait "$watch_pid"
expect_status 0 $? "leader --watch ends on SIGINT"
# One line per change: nobody, a, the next, the last, nobody (a change
# quicker than a read may show only its last state: a resignation whose
# successor was elected at once need not show "no leader" between).
grep -q ": term $a_term, value a$" "$T/watch" && grep -q ": term $n_term, value $next$" "$T/watch" \
    && grep -q ": term $l_term, value $last$" "$T/watch" && ok "leader --watch showed each leader" \
    || not_ok "watch: $(cat "$T/watch")"
[ "$(head -1 "$T/watch")" = "$name: no leader" ] && [ "$(tail -1 "$T/watch")" = "$name: no leader" ] \
    && ok "it began and ended with nobody leading" || not_ok "watch: $(cat "$T/watch")"
terms=$(grep -o 'term [0-9]*' "$T/watch" | awk '{print $2}')
sort -n -c <(echo "$terms") 2>/dev/null && ok "terms only grew" || not_ok "terms: $terms"

"$DLOCK" elect --shared "$name" -- true > "$T/usage" 2>&1
expect_status 64 $? "elect refuses --shared"
"$DLOCK" run --value x "$name" -- true > "$T/usage" 2>&1
expect_status 64 $? "run refuses --value"
finish
