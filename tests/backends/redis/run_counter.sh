# 8 processes x 25 non-atomic read-sleep-write increments of one counter file,
# each under `dlock run` with backend = "redis" against a redis-server this
# script starts on a private port (and stops by PID): exactly 200.
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/lib.sh"
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/support/redis_single.sh"
port=$(free_port)
start_redis $port
printf 'backend = "redis";\nredis = { port = %d; };\n' $port > "$T/dlock.conf"

BACKEND_LABEL=redis
fence_of() { redis-cli -p $port get "dlock:{$1}:fence"; }
. "${DLOCK_TEST_SRCDIR:-$(dirname "$0")/../..}/cli/counter_case.sh"
finish
