# The exact-counter test (tests/cli/counter_case.sh) through `dlock run` with
# backend = "postgres", in lease and in session mode, against a PostgreSQL
# this script starts on a private port (and stops by PID).
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
SUPPORT=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support
chmod 755 "$T" # initdb runs as the postgres user, which must reach $T/pg
start_on_private_port sh "$SUPPORT/postgres.sh" "$T/pg" || { not_ok "postgres did not start"; finish; exit 1; }
stop_pg() { sh "$SUPPORT/postgres.sh" stop "$T/pg"; rm -rf "$T"; }
trap stop_pg EXIT
psql_value() { psql -X -A -t -h 127.0.0.1 -p $port -U postgres -d postgres -c "$1"; }

BACKEND_LABEL="postgres lease mode"
fence_of() { psql_value "SELECT fence FROM dlock_locks WHERE name = convert_to('dlock:$1', 'UTF8')"; }
printf 'backend = "postgres";\npostgres = { port = %d; user = "postgres"; database = "postgres"; };\n' $port > "$T/dlock.conf"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"

BACKEND_LABEL="postgres session mode"
# Session mode draws fences from one sequence, one per dlock run (which asks).
fence_of() { psql_value "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM dlock_locks_fence"; }
printf 'backend = "postgres";\npostgres = { port = %d; user = "postgres"; database = "postgres"; mode = "session"; };\n' \
    $port > "$T/dlock.conf"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"
finish
