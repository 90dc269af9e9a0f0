#!/usr/bin/env bash
# Refreshes the committed console screenshots (docs/screenshots/) from a run of the browser
# suite on SQLite, so a reader sees the console without running it: every page at 1100 px, and
# a few at 375 px (the suite checks every page at both widths; docs/screenshots/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
CONSOLE_ONLY=sqlite bash scripts/console.sh
# The images only: the folder's README stays.
mkdir -p docs/screenshots
find docs/screenshots -name '*.jpg' -delete
shots=target/console/sqlite
cp "$shots"/[0-9][0-9]-*.jpg docs/screenshots/
find docs/screenshots -name '*-375px.jpg' \
    ! -name '*-roles-375px.jpg' ! -name '*-apply-field-errors-375px.jpg' \
    ! -name '*-machines-online-375px.jpg' ! -name '*-earnings-375px.jpg' -delete
ls docs/screenshots
