# What the operator's commands write to a terminal, on the local backend:
# names and owners that carry terminal controls (C0, DEL, C1 written as
# UTF-8, the bidirectional controls) are escaped in dlock list, top,
# list --json and status, byte for byte; the JSON still gives the exact
# names back; planted lock files that the backend never makes are not
# listed, and a cursor never carries a raw control.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
. "$DLOCK_TEST_SRCDIR/cli/serve_lib.sh"
command -v python3 > /dev/null || { not_ok "python3 not found (Debian: python3)"; finish; exit 1; }

# OSC "set title" .. ST, CSI "erase screen", CSI "home", each introducer
# as its C1 code point in UTF-8 (C2 9D, C2 9C, C2 9B).
c1=$(printf 'zz\302\2350;PWNED\302\234\302\2332J\302\233H')
# A right-to-left override and an isolate, which reorder what is read.
bidi=$(printf 'bb\342\200\256evil\342\201\246')
# The ESC forms, DEL and a C0 control.
esc=$(printf 'yy\033]0;ESC\007\033[2J\177\001')
hold "$c1"
hold "$bidi"
hold "$esc"
hold owned

# Counts the bytes in file that a terminal would act on: C0 controls but
# newline, DEL, and C1, U+2028/2029 and bidirectional controls as UTF-8.
raw_controls() {
    python3 - "$1" <<'PY'
import re, sys
data = open(sys.argv[1], "rb").read()
bad = re.findall(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae]|\xe2\x81[\xa6-\xa9]", data)
print(len(bad))
PY
}

"$DLOCK" list > "$T/list" 2>&1
expect_status 0 $? "list"
[ "$(raw_controls "$T/list")" = 0 ] && ok "list writes no terminal control" \
    || not_ok "list writes $(raw_controls "$T/list") controls: $(od -c "$T/list" | head -20)"
grep -qF 'zz\xc2\x9d0;PWNED\xc2\x9c\xc2\x9b2J\xc2\x9bH ' "$T/list" \
    && grep -qF 'bb\xe2\x80\xaeevil\xe2\x81\xa6 ' "$T/list" && grep -qF 'yy\x1b]0;ESC\x07\x1b[2J\x7f\x01 ' "$T/list" \
    && ok "list shows each control as \\xHH, byte for byte" || not_ok "list: $(cat "$T/list")"

"$DLOCK" top --once > "$T/top" 2>&1 || "$DLOCK" top > "$T/top" 2>&1
[ "$(raw_controls "$T/top")" = 0 ] && grep -qF 'zz\xc2\x9d0;PWNED' "$T/top" && ok "top writes no terminal control" \
    || not_ok "top: $(od -c "$T/top" | head -20)"

"$DLOCK" list --json > "$T/json" 2>&1
[ "$(raw_controls "$T/json")" = 0 ] && ok "list --json writes no terminal control" \
    || not_ok "list --json: $(od -c "$T/json" | head -20)"
python3 - "$T/json" "$c1" "$bidi" "$esc" > "$T/check" 2>&1 <<'PY'
import json, os, sys
names = {e["name"] for e in json.load(open(sys.argv[1]))}
for want in sys.argv[2:5]:
    assert os.fsdecode(os.fsencode(want)) in names, (want, names)
text = open(sys.argv[1]).read()
assert "\\u009d" in text and "\\u202e" in text and "\\u001b" in text, text
print("checked")
PY
[ $? = 0 ] && ok "the JSON gives the exact names back, controls as \\u escapes" \
    || not_ok "JSON: $(cat "$T/check")"

# An owner planted in the lock file's header, where dlock status reads it:
# anyone who may write the lock directory can set it.
lockdir=$T/dlock-$(id -u)
python3 - "$lockdir/owned.lock" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(24)  # magic (8), fence (8), holder pid (8), then the owner (96)
    f.write(b"\x1b]0;OWNED\x07\x1b[2J\xc2\x9b2J all clear\x00")
PY
"$DLOCK" status owned > "$T/status" 2>&1
expect_status 1 $? "status of a held name"
[ "$(raw_controls "$T/status")" = 0 ] && grep -qF '(owner \x1b]0;OWNED\x07\x1b[2J\xc2\x9b2J all clear)' "$T/status" \
    && ok "status escapes the owner the backend stored" || not_ok "status: $(od -c "$T/status" | head)"
"$DLOCK" status "$c1" > "$T/status" 2>&1
[ "$(raw_controls "$T/status")" = 0 ] && grep -qF 'zz\xc2\x9d0;PWNED' "$T/status" \
    && ok "status escapes the name" || not_ok "status of the C1 name: $(od -c "$T/status" | head)"

# Planted files, each a copy of a real lock file held by an OFD lock: one
# whose name decodes to a name held elsewhere (%62 is a plain 'b'), and one
# whose file name carries ESC and BEL. The backend makes neither name.
hold billing/close
cp "$lockdir/billing%2Fclose.lock" "$lockdir/%62illing%2Fclose.lock"
cp "$lockdir/billing%2Fclose.lock" "$lockdir/$(printf '\033]0;CURSOR\007a').lock"
python3 - "$lockdir" "$T/planted" <<'PY' &
import fcntl, os, struct, sys, time
F_OFD_SETLK = 37
fds = []
for name in (b"%62illing%2Fclose.lock", b"\x1b]0;CURSOR\x07a.lock"):
    fd = os.open(os.path.join(os.fsencode(sys.argv[1]), name), os.O_RDWR)
    fcntl.fcntl(fd, F_OFD_SETLK, struct.pack("hhqqixxxx", fcntl.F_WRLCK, 0, 0, 1 << 40, 0))
    fds.append(fd)
open(sys.argv[2], "w").close()
while os.path.exists(sys.argv[2]):
    time.sleep(0.02)
PY
planter=$!
for _ in $(seq 1 250); do [ -e "$T/planted" ] && break; sleep 0.02; done
"$DLOCK" list > "$T/list" 2>&1
[ "$(grep -c '^billing/close ' "$T/list")" = 1 ] && ! grep -q 'CURSOR' "$T/list" \
    && ok "planted files the backend never makes are not listed" || not_ok "planted: $(cat -v "$T/list")"
cursor_ok=yes
cursor=
for _ in 1 2 3 4 5 6 7 8; do
    "$DLOCK" list --limit 1 ${cursor:+--cursor "$cursor"} > "$T/page" 2> "$T/err"
    [ "$(raw_controls "$T/err")" = 0 ] || cursor_ok=no
    cursor=$(sed -n "s/.*--cursor '\(.*\)'$/\1/p" "$T/err")
    [ -n "$cursor" ] || break
done
[ $cursor_ok = yes ] && ok "every cursor of a page-by-page listing is printable" || not_ok "cursor: $(cat -v "$T/err")"
rm -f "$T/planted"
wait "$planter"

touch "$T/go"
wait
finish
