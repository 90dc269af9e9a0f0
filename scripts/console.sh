#!/usr/bin/env bash
# The console's browser suite (console/tests/story.mjs): installs Debian's Chromium if it is
# missing and the suite's npm packages (pinned by console/tests/package-lock.json), then runs the
# suite against `gpunex serve` on SQLite and on PostgreSQL (GPUNEX_TEST_POSTGRES_URL's server,
# a scratch database created and dropped). Screenshots land in target/console/<database>/;
# scripts/screenshots.sh copies the SQLite set to docs/screenshots/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
gpunex="$root/target/debug/gpunex"
# Built here (a no-op when cargo test built it): the console is embedded in the binary.
cargo build --locked -q -p gpunex --bin gpunex
chromium=${CHROMIUM:-/usr/bin/chromium}
if [[ ! -x $chromium ]]; then
    echo "installing Debian's chromium" >&2
    # A fresh machine may have no package lists yet: update and try again.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
    }
fi
(cd console/tests && npm ci --no-audit --no-fund --silent)
work=$(mktemp -d)
server_pid=""
pg_url=${GPUNEX_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
pg_db="gpunex_console_$$"
cleanup() {
    [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    psql "$pg_url" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run() {
    local url=$1 name=$2 port base
    port=$(free_port)
    DATABASE_URL=$url "$gpunex" serve --listen "127.0.0.1:$port" --no-outbox \
        --no-payout-scheduler --log-format json >"$work/$name.log" 2>&1 &
    server_pid=$!
    base="http://127.0.0.1:$port"
    for _ in $(seq 1 100); do
        curl -fsS "$base/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    rm -rf "target/console/$name"
    if ! CHROMIUM=$chromium node console/tests/story.mjs "$base" "$root/target/console/$name" "$name"; then
        tail -n 50 "$work/$name.log" >&2
        return 1
    fi
    kill "$server_pid" && wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

echo "== console in Chromium: SQLite"
run "sqlite://$work/console.sqlite" sqlite
echo "== console in Chromium: PostgreSQL"
psql "$pg_url" -qc "CREATE DATABASE $pg_db" >/dev/null
run "${pg_url%/*}/$pg_db" postgres
