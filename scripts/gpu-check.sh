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
"$agent_bin" --heartbeat-interval 2s --benchmark-sustained "${GPUNEX_CHECK_SUSTAINED:-30s}" --log-json run \
    >"$work/agent.log" 2>&1 &
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

step "the agent's first benchmark suite, as the platform scored it"
if [[ -n ${GPUNEX_SIMULATE:-} ]]; then
    echo "(simulated GPUs: a run from each GPU's profile after ${GPUNEX_BENCHMARK_SUITE_DURATION:-150s})"
fi
python3 - "$server" "$out/machine.json" "$out/platform-benchmarks.json" <<'PY'
import json, sys, time, urllib.request
server, machine, target = sys.argv[1:4]
gpu = json.load(open(machine))["platform"]["gpus"][0]["gpu_uuid"]
deadline = time.time() + 240
while True:
    view = json.load(urllib.request.urlopen(f"{server}/v1/gpus/{gpu}/benchmarks"))
    if view.get("latest") or time.time() > deadline:
        break
    time.sleep(3)
json.dump(view, open(target, "w"), indent=2)
latest = view.get("latest")
if not latest:
    sys.exit(f"FAIL: no benchmark run from the agent for {gpu} within 240 s (see the agent log)")
print(f'{gpu}: {view["benchmark_listing"]}, score {view["score_pct"]} %, verdict {latest["verdict"]["outcome"]}, '
      f'{latest["run"]["started_at"]} to {latest["run"]["finished_at"]}')
for part in latest["parts"]:
    print(f'  {part["metric"]:<20} {part["measured_milli"] / 1000:10.1f} against {part["reference"]["value_milli"] / 1000:.1f} = {part["ratio_bp"] / 100:.1f} %')
for reason in latest["verdict"]["reasons"]:
    print(f'  {reason["outcome"]} {reason["code"]}: {reason["evidence"]}')
PY
# The agent's suite and bench-gpu must not share the GPU (bench-gpu refuses a busy GPU).
kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
agent_pid=""

step "gpunex-agent bench-gpu (the benchmark suite on every GPU; sustained phase ${GPUNEX_CHECK_SUSTAINED:-30s})"
# Against the server above, so the network figures are measured too. The figures against the
# datasheet go into docs/benchmarks.md ("Measured on a real GPU").
if [[ -n ${GPUNEX_SIMULATE:-} ]]; then
    echo "skipped: simulated GPUs (GPUNEX_SIMULATE) have no CUDA; their runs come from profiles"
else
    suite_started=$(date +%s)
    "$agent_bin" --benchmark-sustained "${GPUNEX_CHECK_SUSTAINED:-30s}" bench-gpu --json | tee "$out/bench-gpu.json"
    echo "suite on every GPU in $(( $(date +%s) - suite_started )) s"
    python3 - "$out/bench-gpu.json" <<'PY'
import json, sys
for gpu in json.load(open(sys.argv[1])):
    print(f'{gpu["name"]} cc {gpu["compute_capability"]} model={gpu["model_id"]}: {gpu["seconds"]} s, '
          f'verdict {(gpu["verdict"] or {}).get("outcome")}, score {(gpu["score"] or {}).get("score_bp")} bp')
    for f in gpu["figures"]:
        peak = f["datasheet_peak_milli"]
        share = f' = {f["of_peak_bp"] / 100:.1f} % of datasheet {peak / 1000:.1f}' if peak else ''
        print(f'  {f["metric"]:<20} {f["median_milli"] / 1000:10.1f} (p10 {f["p10_milli"] / 1000:.1f}, p90 {f["p90_milli"] / 1000:.1f}){share}')
    h = gpu["health"]
    print(f'  verified={h["results_verified"]} xids={h["xids"]} sustained={h["sustained_ratio_bp"]} bp '
          f'max={h["max_temperature_c"]} C clock events={h["throttle_mask"]:#x} pcie={h["pcie"]} notes={gpu["notes"]}')
    assert h["results_verified"], "a GEMM gave a wrong result"
PY
fi

step "the agent in its container (Docker, --gpus)"
cuda_base=nvidia/cuda:12.4.0-base-ubuntu22.04
agent_base=nvidia/cuda:12.4.0-runtime-ubuntu22.04
if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
    echo "skipped: no Docker Engine answers here"
elif ! docker image inspect "$cuda_base" >/dev/null 2>&1 || ! docker image inspect "$agent_base" >/dev/null 2>&1; then
    echo "skipped: the images $cuda_base and $agent_base are not both on this machine (nothing can be pulled here)"
else
    context=$(mktemp -d)
    mkdir -p "$context/target/release" "$context/agent/docker"
    cp "$agent_bin" "$context/target/release/gpunex-agent"
    cp agent/docker/Dockerfile "$context/agent/docker/Dockerfile"
    cp .dockerignore "$context/.dockerignore"
    DOCKER_BUILDKIT=0 docker build -q -f "$context/agent/docker/Dockerfile" --build-arg "CUDA_BASE=$agent_base" \
        -t gpunex/agent:gpu-check "$context"
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
