# dlock serve on the local backend, through curl: /api/locks lists a held
# name with its fields and drops it after release, odd names come back as
# exact, escaped JSON, /metrics parses with the Prometheus client's parser,
# bad queries are 400s, a failing backend is a 503, a non-loopback address
# needs a secret, and the secret is asked for (and never logged).
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
. "$DLOCK_TEST_SRCDIR/cli/serve_lib.sh"
need curl curl
need /usr/bin/python3 python3
/usr/bin/python3 -c 'import prometheus_client.parser' 2> /dev/null || {
    not_ok "python3-prometheus-client missing: install it (Debian: apt-get install python3-prometheus-client)"
    finish
    exit 1
}
PY=/usr/bin/python3

# ---- the address and the options ----------------------------------------------------
"$DLOCK" serve --listen 0.0.0.0:0 > /dev/null 2> "$T/err"
expect_status 64 $? "a non-loopback --listen without a secret"
grep -q 'not a loopback address.*--token-file' "$T/err" && ok "the refusal says how to go on" \
    || not_ok "refusal message: $(cat "$T/err")"
for bad in "nonsense" "127.0.0.1" "127.0.0.1:70000" "[::1:9465" "example.org:80"; do
    "$DLOCK" serve --listen "$bad" > /dev/null 2>&1
    expect_status 64 $? "--listen '$bad'"
done
"$DLOCK" serve --stale-after soon > /dev/null 2>&1
expect_status 64 $? "--stale-after soon"
"$DLOCK" serve --token-file "$T/none" > /dev/null 2>&1
expect_status 64 $? "a --token-file that does not exist"

# ---- /api/locks --------------------------------------------------------------------------
start_serve --stale-after 60 || { finish; exit 1; }
code=$(curl -s -o "$T/api" -w '%{http_code}' "${URL}api/locks")
[ "$code" = 200 ] && $PY - "$T/api" <<'PY' && ok "an empty backend is an empty list" || not_ok "empty: $code $(cat "$T/api")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["backend"] == "local" and d["locks"] == [] and d["truncated"] is False, d
assert d["stale_after_ms"] == 60000 and d["generated_ms"] > 1.6e12, d
PY

script='<script>alert(1)</script>'
hold job-1
hold "x$script"
"$DLOCK" run --wait 30s job-1 -- true &
HOLDERS="$HOLDERS $!"
api_until 'any(l["name"] == "job-1" and l["waiters"] == 1 for l in d["locks"])' \
    && ok "the waiter shows up" || not_ok "no waiter: $(cat "$T/api")"
$PY - "$T/api" "x$script" > "$T/check" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
by = {l["name"]: l for l in d["locks"]}
assert set(by) == {"job-1", sys.argv[2]}, by.keys()
j = by["job-1"]
assert j["kind"] == "exclusive" and j["holder_count"] == 1 and j["waiters"] == 1, j
h = j["holders"][0]
assert h["owner"] and h["pid"] > 0 and h["fence"] == j["fence"] and j["fence"] > 0, j
assert "lease_left_ms" in j and "age_ms" in j, j
assert by[sys.argv[2]]["waiters"] == 0, by
PY
[ $? = 0 ] && ok "/api/locks lists the held names with holders, fence and waiters" \
    || not_ok "fields: $(cat "$T/check") $(cat "$T/api")"
grep -qF '"x\u003cscript\u003ealert(1)\u003c/script\u003e"' "$T/api" && ! grep -qF '<script>' "$T/api" \
    && ok "a name with <script> is escaped in the JSON" || not_ok "escaping: $(cat "$T/api")"

curl -s -o "$T/api" "${URL}api/locks?prefix=job&limit=1"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [l["name"] for l in d["locks"]] == ["job-1"]' \
    "$T/api" && ok "prefix and limit keep to the names asked for" || not_ok "prefix: $(cat "$T/api")"

# Without a secret, requests must name a loopback host: a page whose name
# was rebound to 127.0.0.1 (DNS rebinding) gets nothing.
port=${URL#http://127.0.0.1:}; port=${port%/}
expect_http 421 "Host: evil.example" -H "Host: evil.example:$port" "${URL}api/locks"
expect_http 421 "Host: evil.example on /metrics" -H "Host: evil.example" "${URL}metrics"
expect_http 200 "Host: localhost" -H "Host: localhost:$port" "${URL}api/locks"

# One address cannot take every connection: 40 idle ones from 127.0.0.1,
# and a request from 127.0.0.2 is still answered.
$PY - "$port" > "$T/hog.out" 2>&1 <<'PY' &
import socket, sys, time
conns = []
for _ in range(40):
    try:
        conns.append(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2))
    except OSError:
        pass
print(len(conns), flush=True)
time.sleep(6)
PY
HOG=$!
sleep 1
expect_http 200 "a request from another address while one holds 40 idle connections" \
    --max-time 4 --interface 127.0.0.2 -H "Host: 127.0.0.1:$port" "${URL}api/locks"
kill $HOG 2> /dev/null; wait $HOG 2> /dev/null
# The server sees those connections close on its own threads: until then
# 127.0.0.1 is still at its limit.
for _ in $(seq 1 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "${URL}api/locks")" = 200 ] && break
    sleep 0.05
done

# ---- /metrics ---------------------------------------------------------------------------

curl -s -D "$T/headers" -o "$T/metrics" "${URL}metrics"
$PY - "$T/metrics" > "$T/check" 2>&1 <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
values = {}
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    assert fam.type == "gauge", fam
    for s in fam.samples:
        values[(s.name, s.labels.get("name"))] = (s.value, s.labels)
assert values[("dlock_panel_backend_up", None)][0] == 1, values
assert values[("dlock_panel_locks_held", None)][0] == 2, values
assert values[("dlock_panel_waiters", "job-1")] == (1, {"backend": "local", "name": "job-1"}), values
assert ("dlock_panel_waiters", "x<script>alert(1)</script>") not in values, values
assert values[("dlock_panel_oldest_hold_age_seconds", None)][0] >= 0, values
assert values[("dlock_panel_stale_locks", None)][0] == 0, values
assert values[("dlock_panel_stale_after_seconds", None)][0] == 60, values
print("checked")
PY
[ $? = 0 ] && ok "/metrics parses, with the held names and the waiter" || not_ok "metrics: $(cat "$T/check" "$T/metrics")"
grep -qi '^content-type: text/plain; version=0.0.4' "$T/headers" && ok "/metrics is Prometheus text" \
    || not_ok "metrics headers: $(cat "$T/headers")"

# A waited-for name with a quote, a backslash and a newline: an escaped label.
odd=$(printf 'q"b\\\\n\nl')
hold "$odd"
"$DLOCK" run --wait 30s "$odd" -- true &
HOLDERS="$HOLDERS $!"
for _ in $(seq 1 100); do curl -s "${URL}metrics" > "$T/metrics"; grep -q '^dlock_panel_waiters.*q' "$T/metrics" && break; sleep 0.05; done
$PY - "$T/metrics" "$odd" <<'PY' > "$T/check" 2>&1
import sys
from prometheus_client.parser import text_string_to_metric_families
names = [s.labels["name"] for f in text_string_to_metric_families(open(sys.argv[1]).read())
         if f.name == "dlock_panel_waiters" for s in f.samples]
assert sys.argv[2] in names, (names, sys.argv[2])
PY
[ $? = 0 ] && ok "a label value with a quote, backslash and newline parses back exactly" \
    || not_ok "label escaping: $(cat "$T/check") $(grep waiters "$T/metrics")"
# Two names that differ only in bytes that are not UTF-8, each waited for:
# their series must not collapse into one.
hold "$(printf 'q\377')"
hold "$(printf 'q\376')"
"$DLOCK" run --wait 30s "$(printf 'q\377')" -- true &
HOLDERS="$HOLDERS $!"
"$DLOCK" run --wait 30s "$(printf 'q\376')" -- true &
HOLDERS="$HOLDERS $!"
for _ in $(seq 1 100); do
    curl -s "${URL}metrics" > "$T/metrics"
    [ "$(grep -c '^dlock_panel_waiters.*name_hex' "$T/metrics")" = 2 ] && break
    sleep 0.05
done
$PY - "$T/metrics" > "$T/check" 2>&1 <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
seen = [tuple(sorted(s.labels.items())) for fam in text_string_to_metric_families(open(sys.argv[1]).read())
        for s in fam.samples if s.name == "dlock_panel_waiters"]
hexes = {dict(l).get("name_hex") for l in seen}
assert len(seen) == len(set(seen)), seen
assert {"71ff", "71fe"} <= hexes, seen
PY
[ $? = 0 ] && ok "names alike but for non-UTF-8 bytes keep series of their own" || not_ok "labels: $(cat "$T/check")"

# ---- bad requests -------------------------------------------------------------------------
for q in 'limit=abc' 'limit=0' 'limit=-1' 'limit=1e3' 'limit=10001' 'limit=99999999999999999999999999' \
         'limit=' 'limit' 'prefix=a&prefix=b' 'prefix=a%00b' 'colour=blue' 'limit=5&limit=6' \
         "prefix=$(head -c 600 /dev/zero | tr '\0' a)"; do
    code=$(curl -s -o "$T/body" -w '%{http_code}' "${URL}api/locks?$q")
    [ "$code" = 400 ] && grep -q '"error":"' "$T/body" && ok "?$(printf %.30s "$q") is a 400 with a message" \
        || not_ok "?$q: $code $(cat "$T/body")"
done
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x "${URL}api/locks")
[ "$code" = 405 ] && ok "POST is refused: the panel is read-only" || not_ok "POST: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "${URL}nowhere")
[ "$code" = 404 ] && ok "an unknown path is a 404" || not_ok "unknown path: $code"
curl -s -D "$T/headers" -o "$T/page" "$URL"
grep -qi '^content-security-policy:.*connect-src .self.' "$T/headers" && grep -q '<table id="locks">' "$T/page" \
    && ok "the page is served with its policy" || not_ok "page: $(cat "$T/headers")"
kill -0 "$SERVE" && ok "the server is still up after the bad requests" || not_ok "the server died"

# ---- release ------------------------------------------------------------------------------
release_all
api_until 'd["locks"] == []' && ok "released names are gone from /api/locks" || not_ok "after release: $(cat "$T/api")"
curl -s "${URL}metrics" > "$T/metrics"
grep -q '^dlock_panel_locks_held{backend="local"} 0$' "$T/metrics" && ! grep -q '^dlock_panel_waiters{' "$T/metrics" \
    && ok "/metrics shows nothing held and no waiter" || not_ok "metrics after release: $(cat "$T/metrics")"

# ---- a failing backend, a backend that does not answer -----------------------------------------
# A lock file that is a symbolic link makes every local listing fail.
dir="$T/dlock-$(id -u)"
ln -s /etc/hostname "$dir/broken.lock"
code=$(curl -s -o "$T/api" -w '%{http_code}' "${URL}api/locks")
[ "$code" = 503 ] && $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "broken.lock" in d["error"] and "locks" not in d' \
    "$T/api" && ok "a failing backend is a 503 with its error" || not_ok "failing backend: $code $(cat "$T/api")"
curl -s "${URL}metrics" > "$T/metrics"
grep -q '^dlock_panel_backend_up{backend="local"} 0$' "$T/metrics" && ok "/metrics says the backend is down" \
    || not_ok "metrics when down: $(cat "$T/metrics")"
rm "$dir/broken.lock"
# A lock file that is a FIFO: opening it blocks, as a hung backend would.
mkfifo "$dir/stuck.lock"
start=$(now_ms)
code=$(curl -s -m 10 -o "$T/api" -w '%{http_code}' "${URL}api/locks")
took=$(($(now_ms) - start))
[ "$code" = 503 ] && [ "$took" -lt 5000 ] && grep -q 'no answer from the backend within' "$T/api" \
    && ok "a backend that does not answer is a 503 after ${took} ms" || not_ok "hung backend: $code in $took ms $(cat "$T/api")"
: > "$dir/stuck.lock" # a writer lets the stuck listing go on and end
rm "$dir/stuck.lock"
api_until 'd["locks"] == []' && ok "the panel answers again once the backend does" || not_ok "after the hang: $(cat "$T/api")"
stop_serve
expect_status 0 $? "dlock serve ends on SIGTERM"

# ---- a token ------------------------------------------------------------------------------
token=tok-$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$token" > "$T/token"
chmod 600 "$T/token"
start_serve --token-file "$T/token" || { finish; exit 1; }
expect_http 401 "without the token" -D "$T/headers" "${URL}api/locks"
grep -qi '^www-authenticate: Bearer' "$T/headers" && ok "the 401 asks for a bearer token" || not_ok "no Bearer challenge"
expect_http 401 "a wrong token" -H "Authorization: Bearer ${token}x" "${URL}metrics"
expect_http 200 "the token" -H "Authorization: Bearer $token" "${URL}api/locks"
expect_http 200 "the page itself (no data), which asks for the token" "$URL"
stop_serve
! grep -qF "$token" "$T/serve.out" "$T/serve.err" && ok "the token is not in the output" || not_ok "token logged"
printf 'tiny-secret\n' > "$T/short"
"$DLOCK" serve --token-file "$T/short" > /dev/null 2> "$T/err"
expect_status 64 $? "a token shorter than 16 characters"
grep -qF "$T/short" "$T/err" && ! grep -q tiny-secret "$T/err" && ok "its error names the file, not the token" \
    || not_ok "short token message: $(cat "$T/err")"

# ---- basic authentication -------------------------------------------------------------------
printf 'ops:pass-%s\n' "$token" > "$T/basic"
chmod 600 "$T/basic"
start_serve --basic-auth-file "$T/basic" || { finish; exit 1; }
expect_http 401 "basic: without a password" -D "$T/headers" "$URL"
grep -qi '^www-authenticate: Basic' "$T/headers" && ok "the 401 asks for a password" || not_ok "no Basic challenge"
expect_http 401 "basic: a wrong password" -u "ops:wrong" "${URL}api/locks"
expect_http 200 "basic: the password" -u "ops:pass-$token" "${URL}api/locks"
stop_serve

# ---- a stuck lock ---------------------------------------------------------------------------
# The local backend keeps no grant time: the panel ages a hold from when it
# first saw it (same name, holder and fence), so that a lock held past the
# threshold is flagged and its gauge can fire an alert.
release_all
start_serve --stale-after 1 || { finish; exit 1; }
hold stuck
api_until 'any(l["name"] == "stuck" for l in d["locks"])' || not_ok "stuck never listed"
sleep 1.6
curl -s -o "$T/api" "${URL}api/locks"
curl -s -o "$T/metrics" "${URL}metrics"
$PY - "$T/api" "$T/metrics" > "$T/check" 2>&1 <<'PY'
import json, sys
from prometheus_client.parser import text_string_to_metric_families
d = json.load(open(sys.argv[1]))
stuck = [l for l in d["locks"] if l["name"] == "stuck"][0]
assert stuck["age_ms"] is not None and stuck["age_ms"] >= 1000, stuck
values = {s.name: s.value for fam in text_string_to_metric_families(open(sys.argv[2]).read()) for s in fam.samples
          if "name" not in s.labels}
assert values["dlock_panel_oldest_hold_age_seconds"] >= 1, values
assert values["dlock_panel_stale_locks"] == 1, values
print("checked")
PY
[ $? = 0 ] && ok "a hold seen for 1.6 s is 1 s old at least, and stale past --stale-after 1" \
    || not_ok "age: $(cat "$T/check")"
release_all
curl -s -o /dev/null "${URL}api/locks"
hold stuck
curl -s -o "$T/api" "${URL}api/locks"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); s=[l for l in d["locks"] if l["name"]=="stuck"][0]; assert s["age_ms"] is not None and s["age_ms"] < 1000, s' \
    "$T/api" && ok "a new hold of the same name starts young" || not_ok "new hold: $(cat "$T/api")"
stop_serve
release_all
finish
