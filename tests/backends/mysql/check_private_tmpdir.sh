# Two throwaway MariaDB servers side by side, as the suites start them (the
# plain, ASan and TSan trees run at once): a server that starts must not
# delete the temporary tables of one already running. MariaDB removes
# every '#sql*' file of its tmpdir when it starts, so each test server has
# a tmpdir of its own (tests/support/mariadb.sh); with /tmp shared, the
# running server's next use of such a file failed ("Error on delete of
# '/tmp/#sql-temptable-...'"), which once failed a conformance case.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
SUPPORT=${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support
pa=$(free_port)
pb=$(free_port)
sh "$SUPPORT/mariadb.sh" start "$T/a" "$pa" > /dev/null || { not_ok "the first mariadb did not start"; finish; exit 1; }
stop_both() { sh "$SUPPORT/mariadb.sh" stop "$T/a"; sh "$SUPPORT/mariadb.sh" stop "$T/b" 2> /dev/null; rm -rf "$T"; }
trap stop_both EXIT
# A session that holds a temporary table (an Aria file in the tmpdir)
# across the second server's start, then drops it.
mariadb --no-defaults -h 127.0.0.1 -P "$pa" -u root -e \
    "CREATE DATABASE t; USE t; CREATE TEMPORARY TABLE tt (a INT) ENGINE=Aria; INSERT INTO tt VALUES (1);
     SELECT SLEEP(4); DROP TEMPORARY TABLE tt; SELECT 'dropped'" > "$T/session.out" 2>&1 &
session=$!
sleep 1
sh "$SUPPORT/mariadb.sh" start "$T/b" "$pb" > /dev/null || not_ok "the second mariadb did not start"
wait $session
if grep -q dropped "$T/session.out" && ! grep -qi error "$T/session.out"; then
    ok "a second server's start leaves the first one's temporary tables alone"
else
    not_ok "the first server's temporary table broke when the second started: $(tr '\n' ' ' < "$T/session.out")"
fi
finish
