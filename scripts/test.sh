#!/usr/bin/env bash
# Every test, as CI runs it (.ci/run calls this after fmt and clippy): installs the Python tools
# the contract checks need (scripts/tools.sh, from PyPI), starts a real Docker Engine
# (scripts/docker.sh), runs `cargo test` against SQLite and the PostgreSQL on 127.0.0.1:5432 (GPUNEX_TEST_POSTGRES_URL to use another), then the contract checks
# (scripts/contract.sh: the OpenAPI document, SEPA schemas, fuzzing, the guide's story through a
# generated client), then the console's browser suite (scripts/console.sh: Debian's Chromium,
# installed if missing, driven by Playwright from the npm registry, on both databases).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/tools.sh >/dev/null
# A real Docker Engine and a registry on 127.0.0.1 for the agent's tests (scripts/docker.sh:
# installs Debian's docker.io when missing, starts dockerd in a temporary folder), stopped on exit.
docker_env=$(bash scripts/docker.sh start)
eval "$docker_env"
trap 'bash scripts/docker.sh stop "$GPUNEX_TEST_DOCKER_DIR"' EXIT
cargo test --workspace --locked
bash scripts/contract.sh
bash scripts/console.sh
