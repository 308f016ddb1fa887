# dlock run --shared and --permits: shared holders run together and keep an
# exclusive run out; a semaphore admits N; bad combinations are usage errors.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"

# The holders hold until the test lets them go ($T/go-*), however slowly
# the checks below run (a sanitizer build starts processes slowly).
hold_until() { echo "touch $T/$1; while [ ! -e $T/go-$2 ]; do sleep 0.02; done"; }

# Two shared runs overlap: both are running at one moment.
"$DLOCK" run --shared books -- sh -c "$(hold_until r1 books)" &
r1=$!
"$DLOCK" run books --shared -- sh -c "$(hold_until r2 books)" &
r2=$!
for _ in $(seq 1 500); do [ -e "$T/r1" ] && [ -e "$T/r2" ] && break; sleep 0.02; done
if [ -e "$T/r1" ] && [ -e "$T/r2" ] && kill -0 $r1 2>/dev/null && kill -0 $r2 2>/dev/null; then
    ok "two shared runs hold together"
else
    not_ok "two shared runs did not hold together"
fi
"$DLOCK" run --wait 0 books -- true 2>/dev/null
expect_status 75 $? "an exclusive run while shared holders run"
# A name held shared is not a semaphore too: the permit run is refused,
# and its command never runs (before, it ran beside the readers).
"$DLOCK" run --permits 1 --wait 0 books -- touch "$T/permit-ran" 2> "$T/err"
st=$?
[ $st != 0 ] && [ ! -e "$T/permit-ran" ] && grep -q "shared lock, not as a semaphore" "$T/err" \
    && ok "a permit run beside shared runs is refused (exit $st)" \
    || not_ok "a permit run beside shared runs: exit $st, ran: $([ -e "$T/permit-ran" ] && echo yes || echo no), $(cat "$T/err")"
"$DLOCK" status books > "$T/status" 2>&1
st=$?
[ $st = 1 ] && grep -q "shared holders" "$T/status" && ok "status says shared holders hold it (exit 1)" \
    || not_ok "status of a shared hold: exit $st, $(cat "$T/status")"
touch "$T/go-books"
wait $r1; expect_status 0 $? "first shared run"
wait $r2; expect_status 0 $? "second shared run"
"$DLOCK" run --wait 0 books -- true
expect_status 0 $? "an exclusive run after them"

# A semaphore of 2: two at once, a third is kept out.
"$DLOCK" run --permits 2 pool -- sh -c "$(hold_until p1 pool)" &
p1=$!
"$DLOCK" run --permits 2 pool -- sh -c "$(hold_until p2 pool)" &
p2=$!
for _ in $(seq 1 500); do [ -e "$T/p1" ] && [ -e "$T/p2" ] && break; sleep 0.02; done
"$DLOCK" run --permits 2 --wait 0 pool -- true 2>/dev/null
expect_status 75 $? "a third holder of 2 permits"
"$DLOCK" status pool > "$T/status" 2>&1
st=$?
[ $st = 1 ] && grep -q "semaphore of 2 permits" "$T/status" && ok "status says a semaphore's holders hold it (exit 1)" \
    || not_ok "status of a semaphore: exit $st, $(cat "$T/status")"
"$DLOCK" run --permits 3 --wait 0 pool -- true 2>"$T/err"
st=$?
[ $st != 0 ] && grep -q "2 permits" "$T/err" && ok "another number of permits is refused, naming the name's (exit $st)" \
    || not_ok "another number of permits: exit $st, $(cat "$T/err")"
touch "$T/go-pool"
wait $p1; expect_status 0 $? "first permit run"
wait $p2; expect_status 0 $? "second permit run"

"$DLOCK" run --shared --permits 2 x -- true 2>/dev/null
expect_status 64 $? "--shared with --permits"
"$DLOCK" run --permits 0 x -- true 2>/dev/null
expect_status 64 $? "--permits 0"
finish
