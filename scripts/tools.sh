#!/usr/bin/env bash
# Installs the Python tools the contract checks use into target/tools/venv (from PyPI, pinned),
# once: openapi-spec-validator, schemathesis, openapi-python-client, xmlschema and sepaxml (for
# its ISO 20022 schemas), prometheus-client (its exposition parser). Prints the venv's bin directory.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/tools/venv
stamp="$venv/.installed-4"
if [[ ! -f $stamp ]]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "openapi-spec-validator==0.9.0" \
        "schemathesis==4.32.5" \
        "openapi-python-client==0.28.*" \
        "xmlschema==4.*" \
        "sepaxml==2.*" \
        "prometheus-client==0.21.*" >&2
    touch "$stamp"
fi
echo "$(pwd)/$venv/bin"
