# dlock top on the local backend: into a pipe it prints one table without
# escape sequences and ends; --sort waiters puts the waited-for name first;
# on a terminal (script(1) gives it one) it clears the screen and redraws.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
. "$DLOCK_TEST_SRCDIR/cli/serve_lib.sh"
need script bsdutils

"$DLOCK" top > "$T/out" 2>&1
expect_status 0 $? "top of an empty backend, into a file"
grep -q '^dlock top - backend local - .* 0 names' "$T/out" && grep -q '^NAME  *KIND' "$T/out" \
    && ok "an empty backend: the header and no row" || not_ok "empty: $(cat "$T/out")"

hold alpha
hold busy
"$DLOCK" run --wait 30s busy -- true &
HOLDERS="$HOLDERS $!"
for _ in $(seq 1 100); do "$DLOCK" top --sort waiters > "$T/out"; grep -q '1 waited for' "$T/out" && break; sleep 0.05; done
[ "$(sed -n 4p "$T/out" | cut -d' ' -f1)" = busy ] && grep -q '^alpha ' "$T/out" && grep -q '2 held, 1 waited for' "$T/out" \
    && ok "--sort waiters lists the waited-for name first" || not_ok "sort: $(cat "$T/out")"
! grep -q "$(printf '\033')" "$T/out" && ok "no escape sequence into a file" || not_ok "escapes in a file"
"$DLOCK" top --sort size > /dev/null 2>&1
expect_status 64 $? "--sort size"
"$DLOCK" top --interval 0 > /dev/null 2>&1
expect_status 64 $? "--interval 0"

# On a terminal: redrawn every 0.2 s until SIGTERM.
script -qfec "$DLOCK top --interval 0.2" "$T/tty" > /dev/null 2>&1 &
tty_pid=$!
for _ in $(seq 1 200); do
    [ "$(grep -o "$(printf '\033\\[H\033\\[2J')" "$T/tty" 2> /dev/null | wc -l)" -ge 3 ] && break
    sleep 0.1
done
kill "$tty_pid"
wait "$tty_pid" 2> /dev/null
draws=$(grep -o "$(printf '\033\\[H\033\\[2J')" "$T/tty" | wc -l)
[ "$draws" -ge 3 ] && grep -q 'busy' "$T/tty" && ok "on a terminal it clears and redraws ($draws times)" \
    || not_ok "terminal: $draws draws: $(cat -v "$T/tty" | head -5)"
script -qfec "$DLOCK top --once" "$T/tty" > /dev/null 2>&1
[ "$(grep -o "$(printf '\033\\[H\033\\[2J')" "$T/tty" | wc -l)" = 0 ] && grep -q 'alpha' "$T/tty" \
    && ok "--once on a terminal draws once, without clearing" || not_ok "--once: $(cat -v "$T/tty" | head -5)"
release_all
finish
