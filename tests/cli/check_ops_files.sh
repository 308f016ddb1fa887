# The operator's files in contrib/: the alert rules pass promtool's check
# and their unit tests (contrib/prometheus/dlock-alerts.test.yml), the
# Grafana dashboard is valid JSON whose every query parses as PromQL, and
# every metric they name is one that dlock serve or a client exports.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
. "$DLOCK_TEST_SRCDIR/cli/serve_lib.sh"
need promtool prometheus
need /usr/bin/python3 python3
top="$DLOCK_TEST_SRCDIR/.."
rules="$top/contrib/prometheus/dlock-alerts.yml"
dashboard="$top/contrib/grafana/dlock-dashboard.json"

promtool check rules "$rules" > "$T/out" 2>&1 && ok "promtool check rules" || not_ok "check rules: $(cat "$T/out")"
(cd "$top/contrib/prometheus" && promtool test rules dlock-alerts.test.yml) > "$T/out" 2>&1 \
    && ok "the alert rules fire (and stay quiet) as their tests say" || not_ok "test rules: $(cat "$T/out")"
/usr/bin/python3 -m json.tool "$dashboard" > /dev/null 2> "$T/out" && ok "the dashboard is valid JSON" \
    || not_ok "dashboard JSON: $(cat "$T/out")"

# Each query, with Grafana's variables given values, as a recording rule:
# promtool then parses it as Prometheus would.
/usr/bin/python3 - "$dashboard" "$rules" "$top" > "$T/exprs.yml" 2> "$T/out" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
assert d["title"] and d["uid"] and d["schemaVersion"] >= 30, "dashboard header"
exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
assert len(exprs) >= 10, exprs
exported = set(re.findall(r'"(dlock_panel_[a-z_]+)"', open(sys.argv[3] + "/contrib/cli/serve_render.c").read()))
exported |= set(re.findall(r'"(dlock_[a-z_]+)"', open(sys.argv[3] + "/core/metrics.c").read()))
named = set()
for e in exprs + re.findall(r"expr: (.*)", open(sys.argv[2]).read()):
    for m in re.findall(r"\b(dlock_[a-z_]+)", e):
        named.add(re.sub(r"_(bucket|sum|count)$", "", m) if m not in exported else m)
missing = named - exported
assert not missing, "not exported by dlock serve or a client: %s" % sorted(missing)
print("groups:\n  - name: dashboard\n    rules:")
for i, e in enumerate(exprs):
    e = e.replace("$__rate_interval", "5m").replace("$backend", ".*")
    print("      - record: dashboard:query_%d\n        expr: %s" % (i, json.dumps(e)))
PY
[ $? = 0 ] && ok "every metric the dashboard and the rules name is exported" || not_ok "metric names: $(cat "$T/out")"
promtool check rules "$T/exprs.yml" > "$T/out" 2>&1 && ok "every dashboard query parses as PromQL" \
    || not_ok "dashboard queries: $(cat "$T/out")"
finish
