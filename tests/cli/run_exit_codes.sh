# dlock run: exit statuses a shell script can rely on, the environment it
# gives the command, and the lost path.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"

"$DLOCK" run held -- sleep 60 &
holder=$!
wait_until_held held || not_ok "holder never got the lock"

"$DLOCK" run --wait 0 held -- true 2>/dev/null
expect_status 75 $? "--wait 0 on a held lock"
t0=$(now_ms)
"$DLOCK" run --wait 300 held -- true 2>/dev/null
st=$?
took=$(( $(now_ms) - t0 ))
expect_status 75 $st "--wait 300 on a held lock"
[ $took -ge 300 ] && [ $took -lt 5000 ] && ok "waited about 300 ms ($took)" || not_ok "waited $took ms"
"$DLOCK" run held --wait 0 -- true 2>/dev/null
expect_status 75 $? "options after NAME"

# A signal while waiting ends the wait promptly with 128+signal.
"$DLOCK" run held -- true 2>/dev/null &
waiter=$!
sleep 0.2
kill -TERM $waiter
wait $waiter
expect_status 143 $? "SIGTERM while waiting"
kill $holder 2>/dev/null; wait $holder 2>/dev/null

"$DLOCK" run x -- sh -c 'exit 7'
expect_status 7 $? "the command's own exit status"
"$DLOCK" run x -- sh -c 'kill -KILL $$'
expect_status 137 $? "a command killed by a signal"
"$DLOCK" run x -- /nonexistent/program 2>/dev/null
expect_status 127 $? "a command that does not exist"

"$DLOCK" run envtest -- sh -c 'echo "$DLOCK_NAME $DLOCK_FENCE"' > "$T/env1"
"$DLOCK" run envtest -- sh -c 'echo "$DLOCK_NAME $DLOCK_FENCE"' > "$T/env2"
read -r name1 fence1 < "$T/env1"
read -r name2 fence2 < "$T/env2"
[ "$name1 $name2" = "envtest envtest" ] && [ $((fence2 - fence1)) = 1 ] \
    && ok "DLOCK_NAME and DLOCK_FENCE (increasing)" || not_ok "env: $(cat "$T/env1") / $(cat "$T/env2")"

# A fixed lease shorter than the command: lost, the command gets SIGTERM, 70.
t0=$(now_ms)
"$DLOCK" run --lease 300 short -- sleep 10 2>"$T/lost.err"
st=$?
took=$(( $(now_ms) - t0 ))
expect_status 70 $st "lock lost while the command ran"
[ $took -lt 5000 ] && ok "the command was stopped ($took ms)" || not_ok "the command ran $took ms"
grep -q "lost" "$T/lost.err" && ok "the loss is reported" || not_ok "stderr: $(cat "$T/lost.err")"
# ... and a command that ignores SIGTERM gets SIGKILL after --kill-after.
"$DLOCK" run --lease 200 --kill-after 300 stubborn -- sh -c 'trap "" TERM; sleep 10' 2>/dev/null
expect_status 70 $? "SIGKILL after --kill-after"

printf 'backend = "local";\nlease_ms = "soon";\n' > "$T/bad.conf"
"$DLOCK" -c "$T/bad.conf" run x -- true 2>/dev/null
expect_status 78 $? "configuration error"
printf 'local = { dir = "/proc/no/such/dir"; };\n' > "$T/unavail.conf"
"$DLOCK" -c "$T/unavail.conf" run x -- true 2>/dev/null
expect_status 69 $? "backend unavailable"
printf 'backend = "nosuchbackend";\n' > "$T/nomodule.conf"
DLOCK_MODULE_PATH=/nonexistent "$DLOCK" -c "$T/nomodule.conf" run x -- true 2>/dev/null
expect_status 69 $? "backend module missing on this host"
printf 'backend = "../../lib/evil";\n' > "$T/badname.conf"
"$DLOCK" -c "$T/badname.conf" run x -- true 2> "$T/err"
expect_status 78 $? "a backend that is not a backend name is a configuration error"
grep -q "not a backend name" "$T/err" && ok "the message says why" || not_ok "message: $(cat "$T/err")"
"$DLOCK" run x 2>/dev/null
expect_status 64 $? "usage error"
"$DLOCK" run --wait soon x -- true 2>/dev/null
expect_status 64 $? "bad duration"
"$DLOCK" --help > /dev/null
expect_status 0 $? "--help"
# The command inherits no descriptor beyond 0-2: not the backend's
# connections, not one the caller left open without close-on-exec.
exec 7>"$T/leak"
"$DLOCK" run fds -- sh -c 'for f in /proc/$$/fd/*; do echo "${f##*/}"; done' > "$T/fds"
exec 7>&-
# (3 is the directory the shell's glob reads while listing.)
[ "$(sort -n "$T/fds" | tr '\n' ' ')" = "0 1 2 3 " ] && ok "the command gets fds 0-2 only" \
    || not_ok "the command inherited fds: $(tr '\n' ' ' < "$T/fds")"

# dlock itself is killed (SIGKILL, the OOM killer): its command must not
# outlive the hold, so that a second holder never runs beside it.
"$DLOCK" run orphan -- sh -c 'echo $$ > "$0/cmd.pid"; exec sleep 30' "$T" &
runner=$!
for _ in $(seq 1 100); do [ -s "$T/cmd.pid" ] && break; sleep 0.05; done
cmd=$(cat "$T/cmd.pid" 2>/dev/null)
kill -KILL $runner
wait $runner 2>/dev/null
gone=no
for _ in $(seq 1 40); do kill -0 "$cmd" 2>/dev/null || { gone=yes; break; }; sleep 0.05; done
[ -n "$cmd" ] && [ $gone = yes ] && ok "the command dies with a killed dlock" \
    || { not_ok "the command ($cmd) outlived its killed dlock"; kill "$cmd" 2>/dev/null; }

finish
