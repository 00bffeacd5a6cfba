#!/usr/bin/env bash
# A newcomer's first `make run`, side by side: for each commit given, a fresh clone of this
# repository, nothing cached, and the seconds from `make run` until the app answers on
# loopback (its /_stcore/health). The installs dominate; they come from the package
# registries, so run the commits back to back on a quiet machine.
#
#   bash bench/first_run.sh 32bf275 HEAD
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bash bench/first_run.sh COMMIT [COMMIT...]" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
port=8601
# Stop the app on port $1 and wait for it to exit (it closes its database first), up to
# 20 s, then kill it. Only apps this script started: never another app on the machine.
stop_app() {
    local app="server.port $1( |\$)" tries
    pkill -f "$app" 2> /dev/null || return 0
    for ((tries = 0; tries < 100; tries++)); do
        pgrep -f "$app" > /dev/null || return 0
        sleep 0.2
    done
    pkill -9 -f "$app" 2> /dev/null || true
}
stop_apps() {
    local p
    for ((p = 8601; p <= port; p++)); do stop_app "$p"; done
}
trap 'stop_apps; rm -rf "$work"' EXIT
first=""
for commit in "$@"; do
    dir="$work/$port"
    git clone -q "$repo" "$dir"
    git -C "$dir" checkout -q "$commit"
    export UV_CACHE_DIR="$work/uv-cache-$port" PIP_NO_CACHE_DIR=1
    start=$(date +%s.%N)
    make -C "$dir" run PORT="$port" API="127.0.0.1:$((port + 50))" > "$dir.log" 2>&1 &
    until curl -sf "http://127.0.0.1:$port/_stcore/health" > /dev/null; do
        if ! kill -0 $! 2> /dev/null; then cat "$dir.log" >&2; exit 1; fi
        sleep 0.2
    done
    seconds=$(echo "$(date +%s.%N) - $start" | bc)
    stop_app "$port"
    wait || true
    if [ -z "$first" ]; then first=$seconds; fi
    printf '%-12s make run -> app answers: %6.1f s  (%.2fx the first)\n' \
        "$commit" "$seconds" "$(echo "$seconds / $first" | bc -l)"
    port=$((port + 1))
done
