#!/usr/bin/env bash
# A real Docker Engine for the agent's tests (agent/tests/docker_engine.rs), started in a
# temporary folder and stopped again; scripts/test.sh runs it around `cargo test`.
#
#   eval "$(bash scripts/docker.sh start)"   # prints the exports the tests read
#   bash scripts/docker.sh stop DIR
#
# `start` installs Debian's docker.io, busybox-static and docker-registry when they are missing,
# starts dockerd (no iptables, no bridge: containers get --network none or host) with its data in
# a new folder, a registry on 127.0.0.1, and builds the local base image the agent's Dockerfile
# names. No registry outside the machine is used: every image is made here.
#
# Two stand-ins, named as such wherever they appear, because no GPU and no NVIDIA Container Toolkit
# exist on these machines:
# - `nvidia-container-runtime-hook` on dockerd's PATH: it reads its input and exits 0, which makes
#   dockerd accept an NVIDIA device request (`--gpus`). The container then starts WITHOUT any
#   GPU. It shows that a request is well formed and which GPU UUIDs it names, never isolation.
# - the base image, tagged `nvidia/cuda:12.4.0-base-ubuntu22.04` as the guide's check names it, is
#   this host's own Debian libraries with busybox and bash, and a `nvidia-smi` that prints two
#   fixed GPUs (GPUNEX STAND-IN). The real image is NVIDIA's.
set -euo pipefail

BASE_IMAGE=nvidia/cuda:12.4.0-base-ubuntu22.04

need() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    [[ -x /bin/busybox ]] || missing+=(busybox-static)
    command -v docker-registry >/dev/null || missing+=(docker-registry)
    command -v script >/dev/null || missing+=(bsdutils)
    if ((${#missing[@]})); then
        echo "installing ${missing[*]}" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The base image: busybox, bash, and the C libraries of this host (the agent binary is built
# here, so its glibc needs are met), plus the stand-in nvidia-smi.
base_image() {
    local root=$1/rootfs lib
    mkdir -p "$root"/{bin,usr/bin,usr/local/bin,etc,tmp,lib64,var/lib}
    cp /bin/busybox "$root/bin/busybox"
    for tool in sh ls cat echo sleep head tail env id mkdir chown chmod rm cp grep sed true false \
        kill ps wc dd yes seq date stat printf test tr; do
        ln -sf busybox "$root/bin/$tool"
    done
    cp /bin/bash "$root/bin/bash"
    # bash's libraries, and what a Rust binary built here links: libgcc_s, libm.
    for lib in $(ldd /bin/bash | grep -o '/[^ ]*\.so[^ ]*') \
        $(ldconfig -p | awk '/\/(libgcc_s\.so\.1|libm\.so\.6)$/ {print $NF}'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    printf 'ID=debian\nPRETTY_NAME="GPUnex test base (GPUNEX STAND-IN for %s)"\n' "$BASE_IMAGE" >"$root/etc/os-release"
    cat >"$root/usr/bin/nvidia-smi" <<'SH'
#!/bin/sh
# GPUNEX STAND-IN: no GPU exists on the test machine; this prints two fixed GPUs.
case "$*" in
    *uuid*) printf 'GPU-00000000-0000-4000-8000-0000000000a1\nGPU-00000000-0000-4000-8000-0000000000a2\n' ;;
    *) echo "GPUNEX STAND-IN nvidia-smi: 2 x NVIDIA H100 80GB HBM3 (no real GPU)" ;;
esac
SH
    chmod 755 "$root/usr/bin/nvidia-smi"
    chmod 1777 "$root/tmp"
    tar -C "$root" -c . | docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$BASE_IMAGE" >/dev/null
    rm -rf "$root"
}

start() {
    need
    local dir
    dir=$(mktemp -d /tmp/gpunex-docker.XXXXXX)
    mkdir -p "$dir/hook-bin"
    # GPUNEX STAND-IN for the NVIDIA Container Toolkit's hook (see the header).
    printf '#!/bin/sh\ncat >/dev/null\nexit 0\n' >"$dir/hook-bin/nvidia-container-runtime-hook"
    chmod 755 "$dir/hook-bin/nvidia-container-runtime-hook"
    PATH="$dir/hook-bin:$PATH" dockerd --iptables=false --ip6tables=false --bridge=none \
        --storage-driver=overlay2 --data-root "$dir/data" --exec-root "$dir/exec" \
        -H "unix://$dir/docker.sock" --pidfile "$dir/dockerd.pid" >"$dir/dockerd.log" 2>&1 &
    export DOCKER_HOST="unix://$dir/docker.sock"
    local tries=0
    until docker info >/dev/null 2>&1; do
        tries=$((tries + 1))
        if ((tries > 300)); then
            echo "dockerd did not start in 30 s; its log:" >&2
            tail -n 30 "$dir/dockerd.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    local port
    port=$(free_port)
    cat >"$dir/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $dir/registry
http:
  addr: 127.0.0.1:$port
log:
  level: error
YML
    docker-registry serve "$dir/registry.yml" >"$dir/registry.log" 2>&1 &
    echo $! >"$dir/registry.pid"
    tries=0
    until python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v2/')" 2>/dev/null; do
        tries=$((tries + 1))
        ((tries < 100)) || { echo "the registry did not start" >&2; exit 1; }
        sleep 0.1
    done
    base_image "$dir"
    echo "export DOCKER_HOST=unix://$dir/docker.sock"
    echo "export GPUNEX_TEST_DOCKER_DIR=$dir"
    echo "export GPUNEX_TEST_REGISTRY=127.0.0.1:$port"
}

stop() {
    local dir=${1:?which folder}
    [[ -f $dir/registry.pid ]] && kill "$(cat "$dir/registry.pid")" 2>/dev/null || true
    if [[ -f $dir/dockerd.pid ]]; then
        local pid
        pid=$(cat "$dir/dockerd.pid")
        # Containers the tests left behind, then the daemon.
        DOCKER_HOST="unix://$dir/docker.sock" docker ps -aq 2>/dev/null \
            | xargs -r env DOCKER_HOST="unix://$dir/docker.sock" docker rm -f >/dev/null 2>&1 || true
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    grep -o " $dir/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount 2>/dev/null || true
    rm -rf "$dir"
}

case ${1:-} in
    start) start ;;
    stop) stop "${2:-}" ;;
    *) echo "usage: $0 start | stop DIR" >&2; exit 2 ;;
esac
