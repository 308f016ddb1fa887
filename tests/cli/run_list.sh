# dlock list on the local backend: an empty backend is a header or [], held
# names of each kind and a waiter are listed with their fields, the JSON is
# valid and gives odd names back byte for byte, --prefix and --limit page.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
command -v python3 > /dev/null || { not_ok "python3 not found (Debian: python3)"; finish; exit 1; }

"$DLOCK" list > "$T/out" 2>&1
expect_status 0 $? "list of an empty backend"
[ "$(wc -l < "$T/out")" = 1 ] && grep -q '^NAME  *KIND  *HOLDERS  *FENCE  *LEASE-LEFT  *AGE  *WAITERS$' "$T/out" \
    && ok "an empty backend lists the header only" || not_ok "empty list: $(cat "$T/out")"
[ "$(DLOCK_LOG= "$DLOCK" list --json)" = "[]" ] && ok "an empty backend is [] in JSON" || not_ok "empty JSON list"

hold_until() { echo "touch $T/$1; while [ ! -e $T/go ]; do sleep 0.02; done"; }
# A name with a quote, braces, %, a newline and a byte that is not UTF-8.
odd=$(printf 'odd"{x}%%\n\377')
"$DLOCK" run "$odd" -- sh -c "$(hold_until h1)" &
"$DLOCK" run --shared books -- sh -c "$(hold_until h2)" &
"$DLOCK" run --shared books -- sh -c "$(hold_until h3)" &
"$DLOCK" run --permits 3 pool -- sh -c "$(hold_until h4)" &
for _ in $(seq 1 500); do [ -e "$T/h1" ] && [ -e "$T/h2" ] && [ -e "$T/h3" ] && [ -e "$T/h4" ] && break; sleep 0.02; done
"$DLOCK" run --wait 30s "$odd" -- true &
waiter=$!
for _ in $(seq 1 250); do
    "$DLOCK" list --json > "$T/json" 2>&1
    grep -q '"waiters":1' "$T/json" && break
    sleep 0.02
done

python3 - "$T/json" "$odd" > "$T/check" 2>&1 <<'PY'
import json, sys, os
entries = json.load(open(sys.argv[1]))
odd = os.fsencode(sys.argv[2])
by = {}
for e in entries:
    raw = bytes.fromhex(e["name_hex"]) if "name_hex" in e else e["name"].encode()
    assert raw not in by, raw
    by[raw] = e
assert set(by) == {odd, b"books", b"pool"}, by.keys()
x = by[odd]
assert x["kind"] == "exclusive" and x["holder_count"] == 1 and x["waiters"] == 1, x
assert len(x["holders"]) == 1 and x["holders"][0]["pid"] > 0 and x["holders"][0]["fence"] == x["fence"], x
assert x["name"] == 'odd"{x}%\n\ufffd', x["name"]
s = by[b"books"]
assert s["kind"] == "shared" and s["holder_count"] == 2 and s["waiters"] == 0, s
p = by[b"pool"]
assert p["kind"] == "semaphore" and p["permits"] == 3 and p["holder_count"] == 1, p
print("checked")
PY
[ $? = 0 ] && ok "the JSON lists each name with its fields" || not_ok "JSON list: $(cat "$T/check") $(cat "$T/json")"

"$DLOCK" list > "$T/out" 2>&1
expect_status 0 $? "list of held names"
grep -q '^odd"{x}%\\n\\xff  *exclusive  *1 ' "$T/out" && grep -q '^books  *shared  *2 ' "$T/out" \
    && grep -q '^pool  *semaphore/3  *1 ' "$T/out" && grep -q '^    holder [0-9a-f]*:[0-9]* pid [0-9]' "$T/out" \
    && ok "the table lists each name, escaped, with its holders" || not_ok "table: $(cat "$T/out")"

"$DLOCK" list --prefix bo > "$T/out" 2>&1
[ "$(wc -l < "$T/out")" = 2 ] && grep -q '^books ' "$T/out" && ok "--prefix keeps to the names under it" \
    || not_ok "--prefix: $(cat "$T/out")"

"$DLOCK" list --limit 1 > "$T/out" 2> "$T/err"
expect_status 0 $? "list --limit 1"
cursor=$(sed -n "s/.*--cursor '\(.*\)'$/\1/p" "$T/err")
[ "$(wc -l < "$T/out")" = 2 ] && [ -n "$cursor" ] && ok "--limit 1 prints one name and the cursor to go on" \
    || not_ok "--limit 1: $(cat "$T/out") $(cat "$T/err")"
"$DLOCK" list --cursor "$cursor" > "$T/rest" 2>&1
[ "$(tail -n +2 "$T/out" | cat - "$T/rest" | grep -c '^[a-z]')" = 3 ] && ok "--cursor goes on with the rest" \
    || not_ok "--cursor: $(cat "$T/out" "$T/rest")"

"$DLOCK" list --limit 0 2>/dev/null
expect_status 64 $? "--limit 0"
"$DLOCK" list extra 2>/dev/null
expect_status 64 $? "list with a NAME"
"$DLOCK" list --cursor '../x' 2>/dev/null
expect_status 64 $? "a cursor the backend did not make"

touch "$T/go"
wait $waiter
expect_status 0 $? "the waiter ran after the holder"
wait
[ "$("$DLOCK" list --json)" = "[]" ] && ok "nothing is listed once every run is over" || not_ok "list after the runs"
finish
