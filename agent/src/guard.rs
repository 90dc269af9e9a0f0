//! The Docker guard (`gpunex-agent guard`, ADR 0010): the only way the agent reaches the host's
//! Docker Engine.
//!
//! Whoever holds the Docker socket holds root on the host: a container with the host's `/`
//! bound, or privileged, or in the host's namespaces, is the host. The agent's own container
//! therefore gets no Docker socket. The guard, a separate process in its own container, holds
//! the socket and serves a second one to the agent on which it forwards only what running
//! renters' jobs needs, deny by default:
//!
//! - `GET /_ping`, `GET /version`, `GET /images/{name}/json`, and pulls
//!   (`POST /images/create?fromImage=`, never an import);
//! - `POST /containers/create` of a job container: labelled with its rental, every capability
//!   dropped, `no-new-privileges`, memory, CPU and process limits set, no bind, mount, device,
//!   host namespace, privileged mode or security profile turned off, and GPUs only by UUID among
//!   the GPUs the provider designated (never `all`). Any other setting must be left empty;
//! - inspect, start, stop, kill, wait, logs and remove of containers that carry the job label,
//!   nothing else (no exec, no attach, no archive, no other container on the host).
//!
//! Everything else is answered `403` with a JSON `message` saying what was refused and why, the
//! shape Docker's own errors have, so the refusal reaches the job's evidence as Docker's words do.
//! The rules are a pure function of the request ([`check`]), tested on their own and against a
//! real daemon.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;

use crate::runtime::JOB_LABEL;

/// The largest container specification the guard reads.
const BODY_MAX: usize = 1 << 20;

/// What the guard allows beyond its fixed rules: the GPUs the provider designated.
#[derive(Debug, Clone)]
pub struct Policy {
    pub gpus: BTreeSet<String>,
}

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it as it is.
    Forward,
    /// Forward it if the container it names carries the job label.
    ForwardIfJob(String),
    /// Refuse it, saying why.
    Refuse(String),
}

/// The request's path without the API version prefix (`/v1.41/containers/create` ->
/// `/containers/create`).
fn unversioned(path: &str) -> &str {
    if let Some(rest) = path.strip_prefix("/v")
        && let Some(slash) = rest.find('/')
    {
        let version = &rest[..slash];
        if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return &rest[slash..];
        }
    }
    path
}

fn query_has(query: &str, key: &str) -> bool {
    query
        .split('&')
        .any(|pair| pair.split('=').next() == Some(key))
}

/// The verdict on a request: its method, path, query, and for a container creation its body.
pub fn check(policy: &Policy, method: &Method, path: &str, query: &str, body: &[u8]) -> Verdict {
    let path = unversioned(path);
    let refuse = |why: &str| Verdict::Refuse(why.to_owned());
    match (method.as_str(), path) {
        ("GET" | "HEAD", "/_ping") | ("GET", "/version") => return Verdict::Forward,
        ("GET", p) if p.starts_with("/images/") && p.ends_with("/json") => {
            return Verdict::Forward;
        }
        ("POST", "/images/create") => {
            return if query_has(query, "fromImage") && !query_has(query, "fromSrc") {
                Verdict::Forward
            } else {
                refuse("only pulls of an image (fromImage) are allowed, not imports")
            };
        }
        ("POST", "/containers/create") => {
            return match serde_json::from_slice::<Value>(body) {
                Ok(spec) => match check_spec(policy, &spec) {
                    Ok(()) => Verdict::Forward,
                    Err(why) => Verdict::Refuse(why),
                },
                Err(_) => refuse("the container specification is not JSON"),
            };
        }
        _ => {}
    }
    let Some(rest) = path.strip_prefix("/containers/") else {
        return refuse(&format!("{} {path} is not something a job needs", method));
    };
    let (id, operation) = rest.split_once('/').unwrap_or((rest, ""));
    if id.is_empty() || id.contains('%') {
        return refuse("a container must be named by its id or name");
    }
    let allowed = matches!(
        (method.as_str(), operation),
        ("GET", "json" | "logs") | ("POST", "start" | "stop" | "kill" | "wait") | ("DELETE", "")
    );
    if allowed {
        Verdict::ForwardIfJob(id.to_owned())
    } else {
        refuse(&format!(
            "{method} /containers/{{id}}/{operation} is not something a job needs"
        ))
    }
}

/// Whether a JSON value is empty: null, false, 0, "", or an array or object of empty values.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0) || n.as_u64() == Some(0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.iter().all(is_empty),
        Value::Object(map) => map.values().all(is_empty),
    }
}

fn positive(value: &Value) -> bool {
    value.as_i64().is_some_and(|n| n > 0)
}

/// The rules for a job container. `Err` says the first rule the specification breaks.
pub fn check_spec(policy: &Policy, spec: &Value) -> Result<(), String> {
    let host = &spec["HostConfig"];
    let refuse = |why: String| Err(format!("refused by the GPUnex guard: {why}"));
    if !spec["Labels"][JOB_LABEL].is_string() {
        return refuse(format!("a container must carry the {JOB_LABEL} label"));
    }
    // The dangerous things first, so the refusal names them.
    if host["Privileged"].as_bool() == Some(true) {
        return refuse("privileged containers are not allowed".to_owned());
    }
    for key in [
        "Binds",
        "Mounts",
        "VolumesFrom",
        "Devices",
        "DeviceCgroupRules",
    ] {
        if !is_empty(&host[key]) {
            return refuse(format!(
                "{key} is not allowed: a job gets no host directory, volume or device"
            ));
        }
    }
    if spec["Volumes"].as_object().is_some_and(|v| !v.is_empty())
        || !(spec["Volumes"].is_null() || spec["Volumes"].is_object())
    {
        return refuse("Volumes is not allowed: a job gets no volume".to_owned());
    }
    let network = host["NetworkMode"].as_str().unwrap_or("");
    if !matches!(network, "" | "default" | "bridge" | "none") {
        return refuse(format!(
            "NetworkMode {network} is not allowed: a job joins its own network (bridge) or none"
        ));
    }
    for key in ["PidMode", "UTSMode", "UsernsMode", "Cgroup"] {
        if !is_empty(&host[key]) {
            return refuse(format!(
                "{key} {} is not allowed: a job never shares the host's namespaces",
                host[key]
            ));
        }
    }
    if !matches!(
        host["IpcMode"].as_str().unwrap_or(""),
        "" | "private" | "none"
    ) {
        return refuse(format!("IpcMode {} is not allowed", host["IpcMode"]));
    }
    if !matches!(host["CgroupnsMode"].as_str().unwrap_or(""), "" | "private") {
        return refuse(format!(
            "CgroupnsMode {} is not allowed",
            host["CgroupnsMode"]
        ));
    }
    if !is_empty(&host["CapAdd"]) {
        return refuse("CapAdd is not allowed: a job gets no capability".to_owned());
    }
    let drops_all = host["CapDrop"].as_array().is_some_and(|caps| {
        caps.iter()
            .any(|c| c.as_str().is_some_and(|c| c.eq_ignore_ascii_case("ALL")))
    });
    if !drops_all {
        return refuse("CapDrop must be [\"ALL\"]".to_owned());
    }
    let options: Vec<&str> = host["SecurityOpt"]
        .as_array()
        .map(|o| o.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !options
        .iter()
        .any(|o| matches!(*o, "no-new-privileges:true" | "no-new-privileges"))
    {
        return refuse("SecurityOpt must hold no-new-privileges:true".to_owned());
    }
    if let Some(other) = options
        .iter()
        .find(|o| !matches!(**o, "no-new-privileges:true" | "no-new-privileges"))
    {
        return refuse(format!(
            "SecurityOpt {other} is not allowed: the default seccomp and AppArmor profiles stay"
        ));
    }
    for key in ["ReadonlyPaths", "MaskedPaths"] {
        if !host[key].is_null() {
            return refuse(format!("{key} may not be changed"));
        }
    }
    if !is_empty(&host["Sysctls"]) || !is_empty(&host["Runtime"]) {
        return refuse("Sysctls and Runtime may not be set".to_owned());
    }
    if host["OomKillDisable"].as_bool() == Some(true) {
        return refuse("OomKillDisable is not allowed".to_owned());
    }
    check_gpus(policy, &host["DeviceRequests"])?;
    for key in ["Memory", "NanoCpus", "PidsLimit"] {
        if !positive(&host[key]) {
            return refuse(format!("{key} must be set: a job runs within its limits"));
        }
    }
    if host["MemorySwap"] != host["Memory"] {
        return refuse("MemorySwap must equal Memory: a job gets no swap".to_owned());
    }
    // What remains must be left empty, whatever Docker adds to its API later.
    let understood = [
        "DeviceRequests",
        "Binds",
        "Mounts",
        "VolumesFrom",
        "Devices",
        "DeviceCgroupRules",
        "Privileged",
        "SecurityOpt",
        "CapAdd",
        "CapDrop",
        "Memory",
        "MemorySwap",
        "MemoryReservation",
        "MemorySwappiness",
        "NanoCpus",
        "PidsLimit",
        "IpcMode",
        "PidMode",
        "UTSMode",
        "UsernsMode",
        "CgroupnsMode",
        "Cgroup",
        "ShmSize",
        "NetworkMode",
        "RestartPolicy",
        "AutoRemove",
        "LogConfig",
        "ReadonlyPaths",
        "MaskedPaths",
        "Sysctls",
        "Runtime",
        "OomKillDisable",
        "Init",
        "ReadonlyRootfs",
        "Tmpfs",
        "ConsoleSize",
    ];
    if let Some(map) = host.as_object()
        && let Some((key, _)) = map
            .iter()
            .find(|(key, value)| !understood.contains(&key.as_str()) && !is_empty(value))
    {
        return refuse(format!("HostConfig.{key} is not something a job may set"));
    }
    if host["RestartPolicy"]["Name"]
        .as_str()
        .is_some_and(|n| !matches!(n, "" | "no"))
    {
        return refuse("a job container never restarts by itself".to_owned());
    }
    Ok(())
}

fn check_gpus(policy: &Policy, requests: &Value) -> Result<(), String> {
    let refuse = |why: String| Err(format!("refused by the GPUnex guard: {why}"));
    let Some(requests) = requests.as_array() else {
        return if requests.is_null() {
            Ok(())
        } else {
            refuse("DeviceRequests must be a list".to_owned())
        };
    };
    for request in requests {
        // The driver by name, or left to the daemon to pick by the `gpu` capability (what
        // `docker run --gpus` sends): either way NVIDIA's.
        let gpu_capability = request["Capabilities"].as_array().is_some_and(|sets| {
            sets.iter().any(|set| {
                set.as_array()
                    .is_some_and(|caps| caps.iter().any(|c| c.as_str() == Some("gpu")))
            })
        });
        match request["Driver"].as_str().unwrap_or("") {
            "nvidia" => {}
            "" if gpu_capability => {}
            _ => return refuse("a device request must be for NVIDIA GPUs".to_owned()),
        }
        if !is_empty(&request["Count"]) {
            return refuse(
                "a device request must name its GPUs by UUID, never a count or all".to_owned(),
            );
        }
        let ids: Vec<&str> = request["DeviceIDs"]
            .as_array()
            .map(|ids| ids.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if ids.is_empty() {
            return refuse("a device request must name at least one GPU UUID".to_owned());
        }
        if let Some(other) = ids.iter().find(|id| !policy.gpus.contains(**id)) {
            return refuse(format!(
                "GPU {other} is not one the provider designated for GPUnex"
            ));
        }
        if !is_empty(&request["Options"]) {
            return refuse("device request options are not allowed".to_owned());
        }
    }
    Ok(())
}

type Body = BoxBody<Bytes, hyper::Error>;

fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes))
        .map_err(|never| match never {})
        .boxed()
}

fn refused(why: &str) -> Response<Body> {
    let message = if why.starts_with("refused by the GPUnex guard") {
        why.to_owned()
    } else {
        format!("refused by the GPUnex guard: {why}")
    };
    tracing::warn!(%message, "refused");
    let body = serde_json::json!({ "message": message }).to_string();
    Response::builder()
        .status(StatusCode::FORBIDDEN)
        .header("content-type", "application/json")
        .body(full(body.into_bytes()))
        .unwrap_or_else(|_| Response::new(full(Vec::new())))
}

/// Sends a request to the daemon and returns its answer, body streamed.
async fn forward(
    docker: &Path,
    request: Request<Full<Bytes>>,
) -> anyhow::Result<Response<Incoming>> {
    let stream = tokio::net::UnixStream::connect(docker)
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach Docker at {}: {e}", docker.display()))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    Ok(sender.send_request(request).await?)
}

/// Whether the container `id` carries the job label (asked of the daemon).
async fn is_job(docker: &Path, id: &str) -> anyhow::Result<Option<bool>> {
    let request = Request::get(format!("/containers/{id}/json"))
        .header("host", "docker")
        .body(Full::new(Bytes::new()))?;
    let response = forward(docker, request).await?;
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    if status == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let container: Value = serde_json::from_slice(&bytes)?;
    Ok(Some(container["Config"]["Labels"][JOB_LABEL].is_string()))
}

async fn handle(
    docker: PathBuf,
    policy: Policy,
    request: Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, BODY_MAX).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Ok(refused("the request body is too large or unreadable")),
    };
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    match check(&policy, &parts.method, &path, &query, &body) {
        Verdict::Refuse(why) => return Ok(refused(&why)),
        Verdict::ForwardIfJob(id) => match is_job(&docker, &id).await {
            Ok(Some(true)) => {}
            Ok(Some(false)) => {
                return Ok(refused(&format!(
                    "container {id} is not a GPUnex job: the agent may not touch it"
                )));
            }
            Ok(None) => {
                let body = serde_json::json!({"message": format!("No such container: {id}")});
                return Ok(Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .header("content-type", "application/json")
                    .body(full(body.to_string().into_bytes()))
                    .unwrap_or_else(|_| Response::new(full(Vec::new()))));
            }
            Err(error) => return Ok(unavailable(&error)),
        },
        Verdict::Forward => {}
    }
    let mut request = Request::from_parts(parts, Full::new(body));
    request
        .headers_mut()
        .insert("host", hyper::header::HeaderValue::from_static("docker"));
    match forward(&docker, request).await {
        Ok(response) => Ok(response.map(BodyExt::boxed)),
        Err(error) => Ok(unavailable(&error)),
    }
}

fn unavailable(error: &anyhow::Error) -> Response<Body> {
    let body =
        serde_json::json!({"message": format!("the GPUnex guard cannot reach Docker: {error}")});
    Response::builder()
        .status(StatusCode::BAD_GATEWAY)
        .header("content-type", "application/json")
        .body(full(body.to_string().into_bytes()))
        .unwrap_or_else(|_| Response::new(full(Vec::new())))
}

/// Serves the guarded socket at `listen` (replacing a stale one, mode 0660) until SIGTERM or
/// Ctrl-C, forwarding what [`check`] allows to the daemon at `docker`.
pub async fn serve(listen: &Path, docker: &Path, policy: Policy) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if listen.exists() {
        std::fs::remove_file(listen)?;
    }
    if let Some(parent) = listen.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let listener = tokio::net::UnixListener::bind(listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", listen.display()))?;
    std::fs::set_permissions(listen, std::fs::Permissions::from_mode(0o660))?;
    tracing::info!(
        listen = %listen.display(),
        docker = %docker.display(),
        gpus = ?policy.gpus,
        "Docker guard serving"
    );
    let mut shutdown = std::pin::pin!(crate::service::shutdown_signal());
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = &mut shutdown => {
                let _ = std::fs::remove_file(listen);
                return Ok(());
            }
        };
        let docker = docker.to_owned();
        let policy = policy.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                handle(docker.clone(), policy.clone(), request)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{JobPolicy, container_spec};
    use gpunex_domain::rental::Workload;
    use serde_json::json;
    use uuid::Uuid;

    fn policy() -> Policy {
        Policy {
            gpus: ["GPU-aa".to_owned(), "GPU-bb".to_owned()].into(),
        }
    }

    fn job() -> Value {
        container_spec(
            Uuid::nil(),
            &["GPU-aa".to_owned()],
            &Workload {
                image: "busybox".to_owned(),
                command: vec!["true".to_owned()],
                env: Default::default(),
            },
            &JobPolicy::for_host(Some(8192), Some(4), 2),
        )
    }

    fn verdict(spec: &Value) -> Verdict {
        check(
            &policy(),
            &Method::POST,
            "/v1.41/containers/create",
            "name=gpunex-x",
            spec.to_string().as_bytes(),
        )
    }

    #[test]
    fn the_agents_own_job_containers_pass() {
        assert_eq!(verdict(&job()), Verdict::Forward);
    }

    #[test]
    fn what_would_reach_the_host_is_refused_even_if_the_agent_asks() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("HostConfig", json!({"Binds": ["/:/host"]}), "Binds"),
            (
                "HostConfig",
                json!({"Mounts": [{"Type": "bind", "Source": "/"}]}),
                "Mounts",
            ),
            ("HostConfig", json!({"Privileged": true}), "privileged"),
            (
                "HostConfig",
                json!({"NetworkMode": "host"}),
                "NetworkMode host",
            ),
            (
                "HostConfig",
                json!({"NetworkMode": "container:abc"}),
                "NetworkMode",
            ),
            ("HostConfig", json!({"PidMode": "host"}), "PidMode"),
            ("HostConfig", json!({"IpcMode": "host"}), "IpcMode"),
            ("HostConfig", json!({"UTSMode": "host"}), "UTSMode"),
            ("HostConfig", json!({"UsernsMode": "host"}), "UsernsMode"),
            (
                "HostConfig",
                json!({"Devices": [{"PathOnHost": "/dev/sda"}]}),
                "Devices",
            ),
            ("HostConfig", json!({"CapAdd": ["SYS_ADMIN"]}), "CapAdd"),
            ("HostConfig", json!({"CapDrop": ["NET_RAW"]}), "CapDrop"),
            (
                "HostConfig",
                json!({"SecurityOpt": ["no-new-privileges:true", "seccomp=unconfined"]}),
                "seccomp=unconfined",
            ),
            (
                "HostConfig",
                json!({"SecurityOpt": []}),
                "no-new-privileges",
            ),
            ("HostConfig", json!({"Memory": 0}), "Memory must be set"),
            ("HostConfig", json!({"PidsLimit": -1}), "PidsLimit"),
            ("HostConfig", json!({"MemorySwap": -1}), "no swap"),
            (
                "HostConfig",
                json!({"Sysctls": {"kernel.x": "1"}}),
                "Sysctls",
            ),
            ("HostConfig", json!({"ReadonlyPaths": []}), "ReadonlyPaths"),
            (
                "HostConfig",
                json!({"OomKillDisable": true}),
                "OomKillDisable",
            ),
            (
                "HostConfig",
                json!({"RestartPolicy": {"Name": "always"}}),
                "restarts",
            ),
            (
                "HostConfig",
                json!({"VolumeDriver": "x"}),
                "HostConfig.VolumeDriver",
            ),
            (
                "HostConfig",
                json!({"DeviceRequests": [{"Driver": "nvidia", "Count": -1}]}),
                "never a count or all",
            ),
            (
                "HostConfig",
                json!({"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["GPU-cc"]}]}),
                "GPU GPU-cc is not one",
            ),
            (
                "HostConfig",
                json!({"DeviceRequests": [{"Driver": "", "DeviceIDs": ["GPU-aa"]}]}),
                "NVIDIA GPUs",
            ),
            (
                "HostConfig",
                json!({"DeviceRequests": [{"Driver": "other", "DeviceIDs": ["GPU-aa"], "Capabilities": [["gpu"]]}]}),
                "NVIDIA GPUs",
            ),
            ("Labels", json!({}), "label"),
            ("Volumes", json!({"/data": {}}), "Volumes"),
        ];
        for (key, patch, said) in cases {
            let mut spec = job();
            match patch {
                Value::Object(map) if key == "HostConfig" => {
                    for (k, v) in map {
                        spec["HostConfig"][k] = v;
                    }
                }
                other => spec[key] = other,
            }
            match verdict(&spec) {
                Verdict::Refuse(why) => assert!(why.contains(said), "{key} {spec}: {why}"),
                other => panic!("{key}: {other:?} for {spec}"),
            }
        }
    }

    #[test]
    fn only_what_a_job_needs_is_forwarded() {
        let p = policy();
        let get = |path: &str| check(&p, &Method::GET, path, "", b"");
        assert_eq!(get("/_ping"), Verdict::Forward);
        assert_eq!(get("/v1.41/images/nvidia/cuda:12.4/json"), Verdict::Forward);
        assert_eq!(
            get("/v1.41/containers/abc/json"),
            Verdict::ForwardIfJob("abc".to_owned())
        );
        assert_eq!(
            check(&p, &Method::POST, "/containers/abc/stop", "t=10", b""),
            Verdict::ForwardIfJob("abc".to_owned())
        );
        assert_eq!(
            check(&p, &Method::DELETE, "/containers/abc", "force=true", b""),
            Verdict::ForwardIfJob("abc".to_owned())
        );
        for (method, path, query) in [
            (Method::GET, "/containers/json", "all=1"),
            (Method::POST, "/containers/abc/exec", ""),
            (Method::POST, "/containers/abc/attach", ""),
            (Method::PUT, "/containers/abc/archive", "path=/"),
            (Method::POST, "/containers/abc/update", ""),
            (Method::POST, "/images/create", "fromSrc=-"),
            (Method::POST, "/build", ""),
            (Method::POST, "/volumes/create", ""),
            (Method::POST, "/networks/create", ""),
            (Method::GET, "/info", ""),
            (Method::POST, "/swarm/init", ""),
            (Method::POST, "/plugins/pull", ""),
            (Method::POST, "/session", ""),
        ] {
            assert!(
                matches!(check(&p, &method, path, query, b""), Verdict::Refuse(_)),
                "{method} {path}"
            );
        }
        assert_eq!(
            check(
                &p,
                &Method::POST,
                "/images/create",
                "fromImage=busybox&tag=1",
                b""
            ),
            Verdict::Forward
        );
    }
}
