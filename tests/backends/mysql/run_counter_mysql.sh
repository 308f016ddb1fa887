# The exact-counter test (tests/cli/counter_case.sh) through `dlock run` with
# backend = "mysql", in lease and in session mode, against a MariaDB this
# script starts on a private port (and stops by PID).
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
SUPPORT=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support
port=$(free_port)
sh "$SUPPORT/mariadb.sh" start "$T/my" $port > /dev/null || { not_ok "mariadb did not start"; finish; exit 1; }
stop_my() { sh "$SUPPORT/mariadb.sh" stop "$T/my"; rm -rf "$T"; }
trap stop_my EXIT
sql_value() { mariadb --no-defaults -N -B -h 127.0.0.1 -P $port -u root -e "$1"; }
sql_value "CREATE DATABASE dl"

BACKEND_LABEL="mysql lease mode"
fence_of() { sql_value "SELECT fence FROM dl.dlock_locks WHERE name = 'dlock:$1'" 2> /dev/null; }
printf 'backend = "mysql";\nmysql = { port = %d; user = "root"; database = "dl"; };\n' $port > "$T/dlock.conf"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"

BACKEND_LABEL="mysql session mode"
sql_value "DELETE FROM dl.dlock_locks"
printf 'backend = "mysql";\nmysql = { port = %d; user = "root"; database = "dl"; mode = "session"; };\n' \
    $port > "$T/dlock.conf"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"
finish
