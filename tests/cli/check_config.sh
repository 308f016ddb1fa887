# dlock check-config: every error with its file and line, non-zero exit.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"
cat > "$T/good.conf" <<'CONF'
backend = "local";
lease_ms = 20000;
local = { dir = "/tmp/somewhere"; };
CONF
"$DLOCK" check-config "$T/good.conf" > "$T/out" 2>&1
expect_status 0 $? "a good file"
cat > "$T/typo.conf" <<'CONF'
backend = "local";
# the next setting is misspelt
lease_msec = 20000;
local = { dri = "/tmp/x"; };
CONF
"$DLOCK" check-config "$T/typo.conf" > "$T/out" 2>&1
expect_status 78 $? "a misspelt setting"
grep -q "$T/typo.conf:3: error: unknown setting 'lease_msec' (did you mean 'lease_ms'?)" "$T/out" \
    && ok "names file and line of the first" || not_ok "output: $(cat "$T/out")"
grep -q "$T/typo.conf:4: error: unknown setting 'dri' in group 'local' (did you mean 'dir'?)" "$T/out" \
    && ok "and of the second" || not_ok "output: $(cat "$T/out")"
"$DLOCK" check-config /nonexistent.conf > "$T/out" 2>&1
expect_status 78 $? "a missing file"
finish
