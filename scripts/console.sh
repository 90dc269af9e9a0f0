#!/usr/bin/env bash
# The console's browser suite (console/tests/story.mjs): installs Debian's Chromium if it is
# missing and the suite's npm packages (pinned by console/tests/package-lock.json), then runs the
# suite against `gpunex serve` on SQLite and on PostgreSQL (GPUNEX_TEST_POSTGRES_URL's server,
# a scratch database created and dropped). The server is the debug build on its test clock
# (GPUNEX_TEST_CLOCK_STEP_DAYS: the suite moves it ahead to a payout date with SIGUSR1), in
# development mode (the suite's agent has simulated GPUs), with a weekly payout minimum of
# 0.01 USDC and a platform bank account for SEPA files. Before each run it makes the staff
# accounts the story signs in with. Screenshots
# land in target/console/<database>/; scripts/screenshots.sh copies the SQLite set to
# docs/screenshots/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
gpunex="$root/target/debug/gpunex"
agent="$root/target/debug/gpunex-agent"
# Built here (a no-op when cargo test built them): the console is embedded in the binary.
cargo build --locked -q -p gpunex --bin gpunex -p gpunex-agent --bin gpunex-agent
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
password="correct horse battery staple"
cleanup() {
    [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    psql "$pg_url" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The platform's bank account, so treasury can make SEPA files of bank payouts.
cat >"$work/debtor.json" <<'JSON'
{"iban": "DE89370400440532013000", "bic": "COBADEFFXXX", "account_holder": "GPUnex Treasury",
 "address": {"street": "Friedrichstrasse", "building_number": "68", "post_code": "10117",
             "town": "Berlin", "country": "DE"}}
JSON

run() {
    local url=$1 name=$2 port base
    port=$(free_port)
    DATABASE_URL=$url GPUNEX_TEST_CLOCK_STEP_DAYS=10 GPUNEX_PAYOUT_WEEKLY_MINIMUM=0.01 \
        GPUNEX_SEPA_DEBTOR="$work/debtor.json" \
        "$gpunex" serve --listen "127.0.0.1:$port" --no-outbox --no-payout-scheduler --dev-mode \
        --log-format json >"$work/$name.log" 2>&1 &
    server_pid=$!
    base="http://127.0.0.1:$port"
    for _ in $(seq 1 100); do
        curl -fsS "$base/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    # The staff: people with accounts, granted their roles on the command line (ADR 0009).
    for email in rita@gpunex.test fiona@gpunex.test; do
        curl -fsS -X POST "$base/v1/accounts" -H 'Content-Type: application/json' \
            -d "{\"email\": \"$email\", \"password\": \"$password\"}" >/dev/null
    done
    DATABASE_URL=$url "$gpunex" admin grant --email rita@gpunex.test --role admin >/dev/null
    DATABASE_URL=$url "$gpunex" admin grant --email fiona@gpunex.test --role finance >/dev/null
    DATABASE_URL=$url "$gpunex" admin grant --email fiona@gpunex.test --role treasury >/dev/null
    rm -rf "target/console/$name"
    if ! CHROMIUM=$chromium AGENT=$agent SERVER_PID=$server_pid PASSWORD=$password WORK=$work \
        node console/tests/story.mjs "$base" "$root/target/console/$name" "$name"; then
        tail -n 60 "$work/$name.log" >&2
        return 1
    fi
    kill "$server_pid" && wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

# CONSOLE_ONLY=sqlite (or postgres) runs one database, while working on the console.
if [[ ${CONSOLE_ONLY:-sqlite} == sqlite || -z ${CONSOLE_ONLY:-} ]]; then
    echo "== console in Chromium: SQLite"
    run "sqlite://$work/console.sqlite" sqlite
fi
if [[ ${CONSOLE_ONLY:-postgres} == postgres ]]; then
    echo "== console in Chromium: PostgreSQL"
    psql "$pg_url" -qc "CREATE DATABASE $pg_db" >/dev/null
    run "${pg_url%/*}/$pg_db" postgres
fi
