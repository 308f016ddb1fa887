#!/bin/sh
# Runs one test program under valgrind, through libtool so the real binary is
# checked and not its wrapper script. Errors and definite leaks fail the test.
# Timing bounds widen (tests/support/test_time.h): here memory is checked.
DLOCK_TEST_SLACK=6
export DLOCK_TEST_SLACK
exec ./libtool --mode=execute valgrind -q --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite,indirect "$@"
