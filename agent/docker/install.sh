#!/usr/bin/env bash
# GPUnex agent installer, served by the platform at /agent/install.sh:
#
#   curl -fsSL https://<platform>/agent/install.sh | bash                  # install or upgrade
#   curl -fsSL https://<platform>/agent/install.sh | bash -s -- --uninstall
#
# It checks the guide's requirements (the NVIDIA driver, Docker, the NVIDIA Container Toolkit),
# asks for this machine's agent token on the terminal (or reads GPUNEX_AGENT_TOKEN, or --token),
# and starts two containers that restart with the host:
#   gpunex-agent-guard  holds the Docker socket and lets through only what renters' jobs need
#                       (ADR 0010: no host directory, device, namespace or privilege);
#   gpunex-agent        the agent, as an unprivileged user, with the designated GPUs, talking to
#                       Docker only through the guard.
# Then it waits until the platform shows the machine online. Run again to upgrade in place
# (the token and the machine's identity are kept). Options:
#   --token TOKEN      the agent token (prefer the prompt or GPUNEX_AGENT_TOKEN: a command line
#                      is visible to other users of the host)
#   --gpus UUID,...    the GPUs to designate for GPUnex (default: every GPU nvidia-smi lists)
#   --image IMAGE      the agent image (default: the platform's)
#   --server URL       the platform (default: the one this script was downloaded from)
#   --uninstall        stop and remove the agent, its guard, its state and its config
# Environment: GPUNEX_AGENT_TOKEN; GPUNEX_AGENT_NETWORK (the agent container's network, default
# Docker's); GPUNEX_INSTALL_ROOT (a prefix for /etc/gpunex, for tests); GPUNEX_AGENT_SIMULATE
# (DEVELOPMENT ONLY: simulated GPUs, which only a development platform lists).
set -euo pipefail

# Filled in by the platform when it serves this script.
server='@GPUNEX_SERVER_URL@'
image='@GPUNEX_AGENT_IMAGE@'

token=${GPUNEX_AGENT_TOKEN:-}
gpus=""
uninstall=false
root=${GPUNEX_INSTALL_ROOT:-}
network=${GPUNEX_AGENT_NETWORK:-}
simulate=${GPUNEX_AGENT_SIMULATE:-}
cuda_check_image=nvidia/cuda:12.4.0-base-ubuntu22.04
config_dir="$root/etc/gpunex"
config="$config_dir/agent.toml"
started=$(date +%s)

# Messages in the provider's language: Spanish when LANG says so, else English.
spanish=false
[[ ${LANG:-} == es* || ${LC_ALL:-} == es* ]] && spanish=true
say() { if $spanish; then printf '%s\n' "$1"; else printf '%s\n' "$2"; fi; }
die() {
    if $spanish; then printf 'gpunex: %s\n' "$1" >&2; else printf 'gpunex: %s\n' "$2" >&2; fi
    exit 1
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --token) token=${2:?--token needs a value}; shift 2 ;;
        --gpus) gpus=${2:?--gpus needs UUIDs}; shift 2 ;;
        --image) image=${2:?--image needs a value}; shift 2 ;;
        --server) server=${2:?--server needs a URL}; shift 2 ;;
        --uninstall) uninstall=true; shift ;;
        -h|--help) sed -n '2,26p' "$0" 2>/dev/null || echo "see the header of this script"; exit 0 ;;
        *) die "opción desconocida: $1" "unknown option: $1" ;;
    esac
done

[[ $server == @* ]] && die "falta --server: descargue este script desde la plataforma" \
    "no --server: download this script from the platform (/agent/install.sh)"
[[ $image == @* ]] && die "falta --image" "no --image given"
[[ $server =~ ^https?://[A-Za-z0-9.:/_-]+$ ]] || die "--server debe ser una URL http(s): $server" \
    "--server must be an http(s) URL: $server"
server=${server%/}

# The Docker socket the guard will hold: DOCKER_HOST's when it names one, else the default.
docker_socket=/var/run/docker.sock
[[ ${DOCKER_HOST:-} == unix://* ]] && docker_socket=${DOCKER_HOST#unix://}

if $uninstall; then
    say "Desinstalando el agente GPUnex" "Uninstalling the GPUnex agent"
    docker rm -f gpunex-agent gpunex-agent-guard >/dev/null 2>&1 || true
    docker volume rm gpunex-agent-state gpunex-agent-run >/dev/null 2>&1 || true
    rm -f "$config"
    rmdir "$config_dir" 2>/dev/null || true
    say "Listo. La máquina aparecerá como desconectada en el Panel de proveedor; retírela allí si no volverá." \
        "Done. The machine will show as offline in the provider console; retire it there if it will not come back."
    exit 0
fi

say "1/6 Comprobando el controlador NVIDIA (nvidia-smi)" "1/6 Checking the NVIDIA driver (nvidia-smi)"
command -v nvidia-smi >/dev/null || die \
    "no se encontró nvidia-smi. Instale el controlador NVIDIA: 'nvidia-smi' debería mostrar la información de su GPU sin errores." \
    "nvidia-smi not found. Install the NVIDIA driver: 'nvidia-smi' should show your GPUs without errors."
nvidia-smi >/dev/null 2>&1 || die \
    "nvidia-smi falló. 'nvidia-smi' debería mostrar la información de su GPU sin errores: revise el controlador NVIDIA." \
    "nvidia-smi failed. 'nvidia-smi' should show your GPUs without errors: check the NVIDIA driver."
listed=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | tr -d ' ' | paste -sd, -)
[[ -n $listed ]] || die "nvidia-smi no lista ninguna GPU." "nvidia-smi lists no GPU."
if [[ -z $gpus ]]; then
    gpus=$listed
else
    IFS=, read -r -a wanted <<<"$gpus"
    for uuid in "${wanted[@]}"; do
        [[ ",$listed," == *",$uuid,"* ]] || die "la GPU $uuid no está en esta máquina (nvidia-smi lista: $listed)" \
            "GPU $uuid is not on this machine (nvidia-smi lists: $listed)"
    done
fi

say "2/6 Comprobando Docker" "2/6 Checking Docker"
command -v docker >/dev/null || die \
    "Docker no está instalado. Asegúrese de que Docker esté instalado y en ejecución en su máquina host (https://docs.docker.com/engine/install/)." \
    "Docker is not installed. Make sure Docker is installed and running on your host (https://docs.docker.com/engine/install/)."
docker_error=$(docker info 2>&1 >/dev/null) || die \
    "Docker no responde: asegúrese de que Docker esté instalado y en ejecución en su máquina host, y ejecute este instalador como root. Docker dijo: $docker_error" \
    "Docker does not answer: make sure Docker is installed and running on your host, and run this installer as root. Docker said: $docker_error"
[[ -S $docker_socket ]] || die "no se encuentra el socket de Docker en $docker_socket" \
    "the Docker socket is not at $docker_socket"

say "3/6 Comprobando el NVIDIA Container Toolkit" "3/6 Checking the NVIDIA Container Toolkit"
toolkit_error=$(docker run --rm --gpus all "$cuda_check_image" nvidia-smi 2>&1 >/dev/null) || die \
    "un contenedor no puede ver sus GPUs. Asegúrese de que el NVIDIA Container Toolkit esté instalado: 'docker run --rm --gpus all $cuda_check_image nvidia-smi' debería mostrar la información de su GPU sin errores. Docker dijo: $toolkit_error" \
    "a container cannot see your GPUs. Make sure the NVIDIA Container Toolkit is installed: 'docker run --rm --gpus all $cuda_check_image nvidia-smi' should show your GPUs without errors. Docker said: $toolkit_error"

say "4/6 Credenciales del proveedor" "4/6 Provider credentials"
upgrade=false
if [[ -z $token && -f $config ]]; then
    token=$(sed -n 's/^token = "\(.*\)"$/\1/p' "$config")
    [[ -n $token ]] && upgrade=true
fi
if [[ -z $token ]]; then
    # Under `curl ... | bash` standard input is the script itself: ask on the terminal.
    if { exec 3</dev/tty; } 2>/dev/null; then
        if $spanish; then prompt="Token del agente GPUnex (del correo de aprobación o del Panel de proveedor): "
        else prompt="GPUnex agent token (from the approval email or the provider console): "; fi
        read -r -s -p "$prompt" token <&3 || true
        exec 3<&-
        echo
    fi
fi
[[ -n $token ]] || die \
    "no hay token: ejecútelo en una terminal para que lo pida, o defina GPUNEX_AGENT_TOKEN (curl ... | sudo GPUNEX_AGENT_TOKEN=... bash)." \
    "no token: run this in a terminal so it can ask, or set GPUNEX_AGENT_TOKEN (curl ... | sudo GPUNEX_AGENT_TOKEN=... bash)."
[[ $token =~ ^gpnx_[0-9a-f]{32}_[0-9a-f]{64}$ ]] || die \
    "eso no es un token de GPUnex (gpnx_<32 hex>_<64 hex>)." "that is not a GPUnex token (gpnx_<32 hex>_<64 hex>)."
answer=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$server/v1/agent/identity" 2>&1) \
    || die "no se puede contactar con $server: $answer" "cannot reach $server: $answer"
case $answer in
    200) ;;
    401|403) die "la plataforma rechazó el token ($answer): emita uno nuevo para esta máquina en el Panel de proveedor." \
        "the platform refused the token ($answer): issue a new one for this machine in the provider console." ;;
    *) die "la plataforma respondió $answer; inténtelo de nuevo en unos minutos." \
        "the platform answered $answer; try again in a few minutes." ;;
esac
# Root-only: the directory is 700, the file 600 and owned by the agent's user in its container.
mkdir -p "$config_dir"
chmod 700 "$config_dir"
umask 077
{
    echo "# Written by the GPUnex installer."
    echo "server_url = \"$server\""
    echo "token = \"$token\""
    echo "runtime = \"docker\""
    echo "docker_socket = \"/run/gpunex/docker.sock\""
    [[ -n $simulate ]] && echo "simulate = \"$simulate\""
} >"$config.new"
chown 10001:10001 "$config.new"
chmod 600 "$config.new"
mv "$config.new" "$config"

say "5/6 Obteniendo la imagen del agente $image" "5/6 Getting the agent image $image"
if ! docker image inspect "$image" >/dev/null 2>&1; then
    pull_error=$(docker pull "$image" 2>&1 >/dev/null) || die \
        "no se pudo descargar $image: $pull_error" "cannot pull $image: $pull_error"
fi

say "6/6 Iniciando el agente" "6/6 Starting the agent"
$upgrade && say "  (actualización: se conservan el token y la identidad de la máquina)" \
    "  (upgrade: the token and the machine's identity are kept)"
docker rm -f gpunex-agent gpunex-agent-guard >/dev/null 2>&1 || true
socket_group=$(stat -c %g "$docker_socket")
docker run -d --name gpunex-agent-guard --restart unless-stopped \
    --user 10001:10001 --group-add "$socket_group" \
    --network none --read-only --cap-drop ALL --security-opt no-new-privileges:true \
    -v "$docker_socket:/var/run/docker.sock" -v gpunex-agent-run:/run/gpunex \
    "$image" guard --gpus "$gpus" >/dev/null
network_flags=()
[[ -n $network ]] && network_flags=(--network "$network")
docker run -d --name gpunex-agent --restart unless-stopped \
    --gpus "\"device=$gpus\"" "${network_flags[@]}" \
    --user 10001:10001 --cap-drop ALL --security-opt no-new-privileges:true \
    -v "$config:/etc/gpunex/agent.toml:ro" \
    -v gpunex-agent-state:/var/lib/gpunex-agent -v gpunex-agent-run:/run/gpunex \
    -v /etc/os-release:/host/etc/os-release:ro \
    "$image" run >/dev/null

# Up, and staying up.
for _ in $(seq 1 20); do
    sleep 0.5
    status=$(docker inspect -f '{{.State.Status}} {{.RestartCount}}' gpunex-agent 2>/dev/null || echo "gone 0")
    [[ $status == "running 0" ]] || break
done
if [[ $status != "running 0" ]]; then
    docker logs --tail 20 gpunex-agent >&2 || true
    die "el agente no se mantiene en ejecución ($status); su registro está arriba." \
        "the agent does not stay up ($status); its log is above."
fi

say "Esperando a que la plataforma vea la máquina en línea..." "Waiting for the platform to see the machine online..."
online=false
for _ in $(seq 1 120); do
    if docker exec gpunex-agent gpunex-agent status 2>/dev/null | grep -q '^platform  online'; then
        online=true
        break
    fi
    sleep 1
done
if ! $online; then
    docker logs --tail 20 gpunex-agent >&2 || true
    die "el agente está en ejecución pero la plataforma aún no ve la máquina en línea: revise el registro de arriba y 'docker exec gpunex-agent gpunex-agent status'." \
        "the agent runs but the platform does not see the machine online yet: check the log above and 'docker exec gpunex-agent gpunex-agent status'."
fi
if ! docker exec gpunex-agent gpunex-agent status 2>/dev/null | grep -q '^docker    API'; then
    docker logs --tail 20 gpunex-agent-guard >&2 || true
    die "el agente no llega a Docker a través de su guardia (gpunex-agent-guard); su registro está arriba." \
        "the agent cannot reach Docker through its guard (gpunex-agent-guard); its log is above."
fi
elapsed=$(($(date +%s) - started))
echo
say "Listo en ${elapsed} s: la máquina está En línea. Compruébelo con:  docker ps | grep gpunex-agent" \
    "Done in ${elapsed} s: the machine is online. Check it with:  docker ps | grep gpunex-agent"
