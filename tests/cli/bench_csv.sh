# dlock-bench --csv writes CSV that a real parser reads back as written:
# seven fields a row, metric names with commas intact (Python's csv module).
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/..}/cli/lib.sh"

BENCH=${DLOCK_BENCH_BIN:-$(dirname "$DLOCK")/dlock-bench}
[ -x "$BENCH" ] || { not_ok "dlock-bench not found at $BENCH"; finish; exit 1; }
command -v python3 > /dev/null || { not_ok "python3 not found (Debian: python3)"; finish; exit 1; }
printf 'backend = "local";\nlocal = { dir = "%s/locks"; };\n' "$T" > "$T/with,comma.conf"
mkdir -p "$T/locks"
"$BENCH" -c "$T/with,comma.conf" --scenario uncontended --scenario contended --workers 2 \
    --duration 0.2 --repeat 1 --csv "$T/out.csv" > "$T/bench.out" 2>&1
expect_status 0 $? "dlock-bench runs on the local backend" || tail -5 "$T/bench.out" | sed "s/^/# /"
python3 - "$T/out.csv" > "$T/check.out" 2>&1 <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
assert rows[0] == ["backend", "scenario", "metric", "median", "min", "max", "unit"], rows[0]
assert len(rows) > 3, rows
for r in rows[1:]:
    assert len(r) == 7, r
    float(r[3]); float(r[4]); float(r[5])
    assert r[0] == "with,comma", r
metrics = {r[2] for r in rows[1:]}
assert "grants, least busy worker" in metrics, metrics
print("ok", len(rows) - 1, "rows")
PY
if [ $? = 0 ]; then ok "the CSV reads back with Python's csv module ($(cat "$T/check.out"))"
else not_ok "the CSV does not read back: $(cat "$T/check.out")"; fi

# A run without the uncontended scenario has no throughput figure to plot:
# that plot is left out, and the others are drawn.
if command -v gnuplot > /dev/null; then
    "$BENCH" -c "$T/with,comma.conf" --scenario contended --workers 2 --duration 0.2 --repeat 1 \
        --plot "$T/plots" > "$T/plot.out" 2>&1
    expect_status 0 $? "dlock-bench --plot with only the contended scenario" || tail -5 "$T/plot.out" | sed "s/^/# /"
    [ -f "$T/plots/handoff.png" ] && [ ! -f "$T/plots/throughput.png" ] && ok "the hand-off plot, no throughput plot" \
        || not_ok "plots: $(ls "$T/plots" | tr '\n' ' ')"
    # A full run: the three plots are drawn at their size and are not blank
    # (decoded and counted by png_check.py), the hand-off one has a bar
    # group per backend at 8 workers, and each carries its stamp. Half a
    # second a case: in 0.2 s a sanitized build on a loaded machine once
    # measured no hand-off at 8 workers, and drew no hand-off plot.
    DLOCK_BENCH_COMMIT=test-commit "$BENCH" -c "$T/with,comma.conf" --scenario uncontended --scenario baseline \
        --scenario contended --workers 2,8 --duration 0.5 --repeat 1 --plot "$T/full" > "$T/full.out" 2>&1
    expect_status 0 $? "dlock-bench --plot with the uncontended, baseline and contended scenarios" ||
        tail -5 "$T/full.out" | sed "s/^/# /"
    if python3 "$DLOCK_TEST_SRCDIR/cli/png_check.py" 900 640 "$T/full/throughput.png" "$T/full/latency.png" \
        "$T/full/handoff.png" > "$T/png.out" 2>&1; then
        ok "the PNGs are 900x640 and drawn: $(tr '\n' ';' < "$T/png.out")"
    else
        not_ok "the PNGs: $(cat "$T/png.out")"
    fi
    rows=$(grep -vc '^#' "$T/full/handoff.dat")
    [ "$rows" = 1 ] && grep -q '^with,comma ' "$T/full/handoff.dat" && grep -q 'at 8 workers' "$T/full/handoff.dat" &&
        ok "handoff.dat: one row per backend, at 8 workers" || not_ok "handoff.dat: $(cat "$T/full/handoff.dat")"
    grep -q "commit test-commit" "$T/full/handoff.gp" && grep -q "libdlock " "$T/full/throughput.gp" &&
        ok "the plots carry the machine, the date and the commit" || not_ok "no stamp in the plots' scripts"
else
    not_ok "gnuplot not found (Debian: gnuplot-nox)"
fi
finish
