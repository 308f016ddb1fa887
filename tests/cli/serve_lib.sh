# tests/cli/serve_lib.sh - for the dlock serve tests, after lib.sh: tools
# that must be there (a missing one fails the test with how to install it),
# a server on a free loopback port, and holders that keep a name until told.

# need TOOL DEBIAN-PACKAGE: fails the whole test when TOOL is missing, since
# a skipped browser or parser test would pass without checking anything.
need() {
    command -v "$1" > /dev/null 2>&1 && return 0
    not_ok "$1 not found: install it (Debian: apt-get install $2, or scripts/setup.sh as root)"
    finish
    exit 1
}

SERVERS=""
HOLDERS=""
cleanup() {
    touch "$T/go" 2> /dev/null
    for p in $SERVERS $HOLDERS; do kill "$p" 2> /dev/null; done
    wait 2> /dev/null
    rm -rf "$T"
}

# start_serve OPTIONS...: starts dlock serve on 127.0.0.1 (a port the kernel
# picks unless OPTIONS has --listen), sets SERVE (its pid) and URL (ending in /).
start_serve() {
    # Emptied here, not only by the redirection below: that one happens in
    # the background child, and the loop could read the previous server's
    # address before the child has opened the file.
    : > "$T/serve.out"
    : > "$T/serve.err"
    "$DLOCK" serve --listen 127.0.0.1:0 "$@" > "$T/serve.out" 2> "$T/serve.err" &
    SERVE=$!
    SERVERS="$SERVERS $SERVE"
    URL=""
    for _ in $(seq 1 250); do
        URL=$(grep -o 'http://[^ ]*/' "$T/serve.out" 2> /dev/null)
        [ -n "$URL" ] && return 0
        kill -0 "$SERVE" 2> /dev/null || break
        sleep 0.02
    done
    not_ok "dlock serve did not start: $(cat "$T/serve.out" "$T/serve.err")"
    return 1
}

stop_serve() {
    kill "$SERVE" 2> /dev/null
    wait "$SERVE"
}

# hold NAME [RUN OPTIONS...]: holds NAME in the background until $T/go
# exists (release_all), and returns once it is held.
hold() {
    local name=$1 tag command=run
    shift
    # hold NAME --elect VALUE: lead the election NAME instead
    [ "${1:-}" = --elect ] && { command=elect; set -- --value "$2"; }
    tag=h$(date +%s%N)
    "$DLOCK" $command "$@" "$name" -- sh -c "touch '$T/$tag'; while [ ! -e '$T/go' ]; do sleep 0.02; done" &
    HOLDERS="$HOLDERS $!"
    for _ in $(seq 1 250); do [ -e "$T/$tag" ] && return 0; sleep 0.02; done
    not_ok "could not hold $name"
}

release_all() {
    touch "$T/go"
    for p in $HOLDERS; do wait "$p" 2> /dev/null; done
    HOLDERS=""
    rm -f "$T/go"
}

# api_until PYTHON-CONDITION: fetches /api/locks into $T/api until the
# condition on its parsed document d holds (5 s at most); 0 when it did.
api_until() {
    for _ in $(seq 1 100); do
        curl -s "${URL}api/locks" > "$T/api"
        /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" \
            "$T/api" 2> /dev/null && return 0
        sleep 0.05
    done
    return 1
}

# expect_http CODE WHAT CURL-ARGS...: the status of one request.
expect_http() {
    local want=$1 what=$2 code
    shift 2
    code=$(curl -s -o /dev/null -w '%{http_code}' "$@")
    if [ "$code" = "$want" ]; then ok "$what: $code"; else not_ok "$what: $code, wanted $want"; fi
}
