#!/usr/bin/env bash
# Refreshes the committed console screenshots (docs/screenshots/) from a run of the browser
# suite on SQLite, so a reader sees the console without running it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/console.sh
rm -rf docs/screenshots
mkdir -p docs/screenshots
cp target/console/sqlite/*.png docs/screenshots/
ls docs/screenshots
