#!/bin/sh
# Runs one test program under valgrind, through libtool so the real binary is
# checked and not its wrapper script. Errors and definite leaks fail the test.
exec ./libtool --mode=execute valgrind -q --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite,indirect "$@"
