# Clients that start at once against a database without the lock tables
# all create them: the ones that lose the race must open all the same.
# PostgreSQL's CREATE TABLE IF NOT EXISTS does not serialise two creators;
# the loser sees a duplicate of the table's type (SQLSTATE 42710) or of its
# row in pg_type (23505), which once failed a `dlock run` with exit 69 when
# eight started together. Each round drops the tables (every table, or on
# even rounds only the table of election values, which makes all eight
# reach that one CREATE together), then starts eight.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
SUPPORT=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support
port=$(free_port)
chmod 755 "$T" # initdb runs as the postgres user, which must reach $T/pg
sh "$SUPPORT/postgres.sh" start "$T/pg" "$port" > /dev/null || { not_ok "postgres did not start"; finish; exit 1; }
stop_pg() { sh "$SUPPORT/postgres.sh" stop "$T/pg"; rm -rf "$T"; }
trap stop_pg EXIT
printf 'backend = "postgres";\npostgres = { port = %d; user = "postgres"; database = "postgres"; };\n' "$port" > "$T/dlock.conf"
: > "$T/failures"
nrounds=$(rounds 80)
for round in $(seq 1 "$nrounds"); do
    drop='DROP TABLE IF EXISTS dlock_locks, dlock_locks_values; DROP SEQUENCE IF EXISTS dlock_locks_fence'
    [ $((round % 2)) = 0 ] && drop='DROP TABLE IF EXISTS dlock_locks_values'
    psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "SET client_min_messages = warning; $drop" \
        || echo "round $round: psql could not drop the tables" >> "$T/failures"
    pids=
    for w in 1 2 3 4 5 6 7 8; do
        { "$DLOCK" -c "$T/dlock.conf" run "race$w" -- true 2>> "$T/failures" || echo "round $round: exit $?" >> "$T/failures"; } &
        pids="$pids $!"
    done
    # shellcheck disable=SC2086
    wait $pids
done
if [ -s "$T/failures" ]; then
    not_ok "clients creating the tables at once failed: $(sort "$T/failures" | uniq -c | head -5 | tr '\n' ' ')"
else
    ok "$nrounds rounds of 8 clients creating the tables at once all opened"
fi
finish
