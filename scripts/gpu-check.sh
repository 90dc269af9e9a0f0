#!/usr/bin/env bash
# Checks gpunex-agent on a real NVIDIA GPU in under 5 minutes: NVML detection, registration
# against a local server (embedded SQLite), and heartbeats carrying real telemetry; then, where
# Docker and the NVIDIA Container Toolkit run and the CUDA base image is present, the agent in its
# own image as its unprivileged user with `--gpus all` (every GPU seen) and with one GPU's UUID
# (only that GPU seen: what a rented job gets).
#
#   scripts/gpu-check.sh [OUTPUT_DIR]
#
# Uses the release binaries in $GPUNEX_BIN_DIR (default target/release), building them first
# when cargo is available and they are missing. Everything printed is also written to
# OUTPUT_DIR/gpu-check.txt (default: $OUT, else ./gpu-check-out), with detect.json and
# machine.json beside it. Exits non-zero if any step fails.
set -euo pipefail

out=${1:-${OUT:-./gpu-check-out}}
mkdir -p "$out"
exec > >(tee "$out/gpu-check.txt") 2>&1

bin=${GPUNEX_BIN_DIR:-target/release}
if [[ ! -x $bin/gpunex || ! -x $bin/gpunex-agent ]]; then
    echo "building release binaries into $bin"
    cargo build --release --locked -p gpunex -p gpunex-agent
fi
server_bin=$(realpath "$bin/gpunex")
agent_bin=$(realpath "$bin/gpunex-agent")

step() { echo; echo "== $* ($(date -u +%H:%M:%SZ))"; }
started=$(date +%s)

step "host"
uname -a
step "nvidia-smi"
nvidia-smi || echo "(nvidia-smi failed or is missing; the agent uses NVML directly)"

step "gpunex-agent detect"
"$agent_bin" detect
step "gpunex-agent detect --json"
"$agent_bin" detect --json | tee "$out/detect.json"

work=$(mktemp -d)
server_pid=""
agent_pid=""
cleanup() {
    for pid in $agent_pid $server_pid; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT
export DATABASE_URL="sqlite://$work/gpunex.sqlite"
provider_id=$(cat /proc/sys/kernel/random/uuid)
agent_token=$("$server_bin" admin create-token --role agent --provider-id "$provider_id" \
    --label "gpu check" 2>/dev/null)
port=${GPUNEX_CHECK_PORT:-18931}
server="http://127.0.0.1:$port"

step "gpunex serve on $server (SQLite in $work)"
"$server_bin" serve --listen "127.0.0.1:$port" --no-outbox --log-format json \
    --heartbeat-interval 2s --offline-grace 10s >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
    "$agent_bin" --server "$server" ping >/dev/null 2>&1 && break
    sleep 0.2
done
"$agent_bin" --server "$server" ping

export GPUNEX_AGENT_TOKEN=$agent_token GPUNEX_SERVER_URL=$server GPUNEX_AGENT_STATE_DIR=$work/agent
step "gpunex-agent register"
"$agent_bin" register

step "gpunex-agent run (20 s of heartbeats every 2 s)"
"$agent_bin" --heartbeat-interval 2s --log-json run >"$work/agent.log" 2>&1 &
agent_pid=$!
sleep 20

step "gpunex-agent status"
"$agent_bin" status
"$agent_bin" status --json >"$out/machine.json"
grep -q '"status": "online"' "$out/machine.json" || { echo "FAIL: the machine is not online"; exit 1; }
grep -q '"utilization_pct"' "$out/machine.json" || { echo "FAIL: no telemetry"; exit 1; }
python3 - "$out/machine.json" <<'PY' || true
import json, sys
view = json.load(open(sys.argv[1]))["platform"]
for gpu in view["gpus"]:
    t = gpu.get("telemetry") or {}
    print(f'GPU {gpu["index"]} {gpu["name"]} model={gpu["model_id"]} match={gpu["model_match"]} '
          f'vram={gpu["vram_mib"]} MiB driver={gpu["driver_version"]} cuda={gpu["cuda_driver_version"]} '
          f'pcie now={gpu["pcie_current"]} max={gpu["pcie_max"]} power={gpu["power_limit_w"]}/{gpu["default_power_limit_w"]} W '
          f'ecc={gpu["ecc_enabled"]} mig={gpu["mig_enabled"]}')
    print(f'  telemetry at {t.get("at")}: util={t.get("utilization_pct")}% mem={t.get("memory_used_mib")} MiB '
          f'temp={t.get("temperature_c")} C power={t.get("power_draw_mw")} mW sm={t.get("sm_clock_mhz")} MHz '
          f'clock events={t.get("clock_event_reasons")} ecc={t.get("ecc_corrected")}/{t.get("ecc_uncorrected")}')
PY

step "the agent in its container (Docker, --gpus)"
cuda_base=nvidia/cuda:12.4.0-base-ubuntu22.04
if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
    echo "skipped: no Docker Engine answers here"
elif ! docker image inspect "$cuda_base" >/dev/null 2>&1; then
    echo "skipped: the base image $cuda_base is not on this machine (nothing can be pulled here)"
else
    context=$(mktemp -d)
    mkdir -p "$context/target/release" "$context/agent/docker"
    cp "$agent_bin" "$context/target/release/gpunex-agent"
    cp agent/docker/Dockerfile "$context/agent/docker/Dockerfile"
    cp .dockerignore "$context/.dockerignore"
    DOCKER_BUILDKIT=0 docker build -q -f "$context/agent/docker/Dockerfile" -t gpunex/agent:gpu-check "$context"
    docker run --rm --gpus all "$cuda_base" nvidia-smi -L
    docker run --rm --gpus all gpunex/agent:gpu-check detect --json | tee "$out/detect-container.json"
    first=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n 1 | tr -d ' ')
    docker run --rm --gpus "device=$first" gpunex/agent:gpu-check detect --json >"$out/detect-one-gpu.json"
    python3 - "$out/detect.json" "$out/detect-container.json" "$out/detect-one-gpu.json" "$first" <<'PY'
import json, sys
host, every, one = (json.load(open(p))["gpus"] for p in sys.argv[1:4])
uuid = lambda g: g.get("gpu_uuid") or g.get("uuid")
print(f"host sees {len(host)} GPU(s); the container with --gpus all sees {len(every)}; "
      f"with --gpus device={sys.argv[4]} it sees {[uuid(g) for g in one]}")
assert len(every) == len(host), "the container does not see every GPU"
assert [uuid(g) for g in one] == [sys.argv[4]], "a one-GPU container sees other GPUs"
PY
    rm -rf "$context"
fi

step "server log (last lines)"
tail -n 20 "$work/server.log"
step "agent log (last lines)"
tail -n 20 "$work/agent.log"
echo
echo "PASS in $(( $(date +%s) - started )) s"
