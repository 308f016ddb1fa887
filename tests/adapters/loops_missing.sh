#!/bin/sh
# Run instead of tests/adapters/test_adapters when configure did not find
# libuv, libevent and libev: the adapters are then untested, which is a
# failure, not a skip.
echo "the event-loop adapters are not tested: configure did not find libuv, libevent and libev" >&2
echo "(Debian: apt-get install libuv1-dev libevent-dev libev-dev, then configure again)" >&2
exit 1
