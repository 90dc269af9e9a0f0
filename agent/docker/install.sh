#!/usr/bin/env bash
# Installs the GPUnex agent on a Linux host with NVIDIA GPUs, as a Docker container named
# `gpunex-agent` that restarts with the host.
#
#   install.sh [--token TOKEN] [--server URL] [--image IMAGE] [--build REPO_DIR] [--dry-run]
#
# The token is the agent token for this machine (from the provider dashboard); without --token
# or GPUNEX_AGENT_TOKEN it is asked for, without echo. It is written to /etc/gpunex/agent.toml
# (mode 600, root only) and never passed on a command line. --build builds the image from a
# checkout of the GPUnex repository instead of pulling it. --dry-run checks the inputs, writes the
# config under $GPUNEX_INSTALL_ROOT (default /) and prints the docker commands instead of running
# them.
set -euo pipefail

token=${GPUNEX_AGENT_TOKEN:-}
server=${GPUNEX_SERVER_URL:-https://api.gpunex.com}
image=${GPUNEX_AGENT_IMAGE:-gpunex/agent:latest}
build_dir=""
dry_run=false
root=${GPUNEX_INSTALL_ROOT:-}

die() { echo "gpunex install: $*" >&2; exit 1; }

while [[ $# -gt 0 ]]; do
    case $1 in
        --token) token=${2:?--token needs a value}; shift 2 ;;
        --server) server=${2:?--server needs a value}; shift 2 ;;
        --image) image=${2:?--image needs a value}; shift 2 ;;
        --build) build_dir=${2:?--build needs the repository directory}; shift 2 ;;
        --dry-run) dry_run=true; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

run() {
    if $dry_run; then
        printf 'would run:'; printf ' %q' "$@"; printf '\n'
    else
        "$@"
    fi
}

[[ $server == http://* || $server == https://* ]] || die "--server must be an http(s) URL, got '$server'"

echo "1/5 checking the NVIDIA driver (nvidia-smi)"
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: install the NVIDIA driver first"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader \
    || die "nvidia-smi failed: the NVIDIA driver is not working"

echo "2/5 checking Docker and the NVIDIA Container Toolkit"
command -v docker >/dev/null || die "docker not found: install Docker Engine first"
docker info >/dev/null 2>&1 || die "the Docker daemon is not running (or this user may not use it)"
docker run --rm --gpus all nvidia/cuda:12.4.0-base-ubuntu22.04 nvidia-smi >/dev/null \
    || die "a container cannot see the GPUs: install the NVIDIA Container Toolkit"

if [[ -z $token ]]; then
    [[ -t 0 ]] || die "no token: pass --token or set GPUNEX_AGENT_TOKEN"
    read -r -s -p "GPUnex agent token: " token
    echo
fi
[[ $token =~ ^gpnx_[0-9a-f]{32}_[0-9a-f]{64}$ ]] || die "that does not look like a GPUnex token (gpnx_<32 hex>_<64 hex>)"

echo "3/5 writing $root/etc/gpunex/agent.toml"
mkdir -p "$root/etc/gpunex"
umask 077
cat > "$root/etc/gpunex/agent.toml" <<TOML
# Written by the GPUnex installer. Keys: server_url, token, state_dir, heartbeat_interval.
server_url = "$server"
token = "$token"
TOML
chmod 600 "$root/etc/gpunex/agent.toml"

echo "4/5 getting the agent image $image"
if [[ -n $build_dir ]]; then
    run docker build -f "$build_dir/agent/docker/Dockerfile" -t "$image" "$build_dir"
else
    run docker pull "$image"
fi

common=(--gpus all
    -v /etc/gpunex:/etc/gpunex:ro
    -v gpunex-agent-state:/var/lib/gpunex-agent
    -v /etc/os-release:/host/etc/os-release:ro)

echo "5/5 registering this machine and starting the agent"
run docker run --rm "${common[@]}" "$image" register
if $dry_run; then
    echo "would run: docker rm -f gpunex-agent"
else
    docker rm -f gpunex-agent >/dev/null 2>&1 || true
fi
# The service starts renters' containers through the host's Docker Engine API (each with only
# its rented GPUs and no host directory): it needs the Docker socket.
run docker run -d --name gpunex-agent --restart unless-stopped "${common[@]}" \
    -v /var/run/docker.sock:/var/run/docker.sock "$image" run
echo
echo "Done. Check it with:  docker ps | grep gpunex-agent   and   docker exec gpunex-agent gpunex-agent status"
