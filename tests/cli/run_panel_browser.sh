# dlock serve's page in a real browser (headless Chromium): the table shows
# the held names once the page's script has fetched them, a name made of
# markup is shown as text and nothing in it runs, an election shows its
# leader's value (as text) and term, a released name goes away
# on the next load, and a failing backend is reported on the page. Leaves a
# screenshot in tests/cli/panel.png of the build directory.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
. "$DLOCK_TEST_SRCDIR/cli/serve_lib.sh"
need chromium chromium
need curl curl
need /usr/bin/python3 python3

# browse OUT [CHROMIUM OPTIONS...]: loads the page and lets its script run
# for 5 s of virtual time (fetches and the 2 s refresh included).
browse() {
    local out=$1
    shift
    timeout 90 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$T/profile" \
        --virtual-time-budget=5000 "$@" "$URL" > "$out" 2> "$T/chromium.err"
}

start_serve || { finish; exit 1; }
script='x<script>alert(1)</script>'
img='<img src=none onerror="document.body.dataset.pwned=1">'
hold deploy/prod
hold "$script"
hold "$img"
hold books --shared
hold books --shared
leader='<u>node-1</u>'
hold primary --elect "$leader"
"$DLOCK" run --wait 60s deploy/prod -- true &
HOLDERS="$HOLDERS $!"
api_until 'any(l["waiters"] == 1 for l in d["locks"])' || not_ok "no waiter: $(cat "$T/api")"

browse "$T/dom.html" --dump-dom
[ $? = 0 ] && ok "chromium loaded the page" || not_ok "chromium: $(tail -5 "$T/chromium.err")"
/usr/bin/python3 - "$T/dom.html" "$script" "$img" "$leader" > "$T/check" 2>&1 <<'PY'
import sys
from html.parser import HTMLParser
class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.row, self.cell, self.tags, self.body = [], None, None, [], {}
    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "body": self.body = a
        if tag == "tr": self.row = {"class": a.get("class"), "cells": []}
        if tag == "td" and self.row is not None: self.cell = ""
    def handle_endtag(self, tag):
        if tag == "td" and self.row is not None and self.cell is not None:
            self.row["cells"].append(self.cell); self.cell = None
        if tag == "tr" and self.row is not None:
            self.rows.append(self.row); self.row = None
    def handle_data(self, data):
        if self.cell is not None: self.cell += data
p = Page()
p.feed(open(sys.argv[1]).read())
names = {r["cells"][0]: r for r in p.rows if len(r["cells"]) == 7}
assert set(names) == {"deploy/prod", sys.argv[2], sys.argv[3], "books", "primary"}, names.keys()
# An election shows its leader's value (as text) and term.
assert names["primary"]["cells"][2].startswith("leader " + sys.argv[4] + " (term "), names["primary"]
assert names["deploy/prod"]["class"] == "waiting" and names["deploy/prod"]["cells"][6] == "1", names
assert names["books"]["cells"][1] == "shared" and names["books"]["cells"][2] == "2 holders", names["books"]
# The markup in the names and the leader's value is text: one script element (the page's own), no image or u, and the
# image's onerror never ran.
assert p.tags.count("script") == 1, p.tags.count("script")
assert "img" not in p.tags, "an <img> element was made from a name"
assert "u" not in p.tags, "a <u> element was made from a leader's value"
assert "data-pwned" not in p.body, p.body
assert "error" not in (p.body.get("class") or ""), p.body
print("checked")
PY
[ $? = 0 ] && ok "the table shows each held name, markup as text, and nothing in a name ran" \
    || not_ok "DOM: $(cat "$T/check")"
grep -qF 'x&lt;script&gt;alert(1)&lt;/script&gt;</td>' "$T/dom.html" && ok "the <script> name is in the DOM as text" \
    || not_ok "script name: $(grep -o '<tbody.*</tbody>' "$T/dom.html")"

mkdir -p tests/cli
browse /dev/null --window-size=1200,700 --hide-scrollbars --screenshot="$PWD/tests/cli/panel.png"
[ -s tests/cli/panel.png ] && ok "a screenshot is in tests/cli/panel.png" || not_ok "no screenshot: $(tail -3 "$T/chromium.err")"

release_all
api_until 'd["locks"] == []' || not_ok "names still listed after release"
browse "$T/dom.html" --dump-dom
! grep -q 'deploy/prod' "$T/dom.html" && grep -q 'No lock is held or waited for.' "$T/dom.html" \
    && ok "after release, the next load has no row" || not_ok "after release: $(grep -o '<tbody.*</tbody>' "$T/dom.html")"

ln -s /etc/hostname "$T/dlock-$(id -u)/broken.lock"
browse "$T/dom.html" --dump-dom
grep -q '<body class="error">' "$T/dom.html" && grep -q 'role="alert">backend unreachable: .*broken.lock' "$T/dom.html" \
    && ok "a failing backend is shown as 'backend unreachable: ...'" \
    || not_ok "failing backend: $(grep -o '<body.*<table' "$T/dom.html")"
rm "$T/dlock-$(id -u)/broken.lock"
stop_serve
finish
