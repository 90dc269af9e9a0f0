//! The agent's side of the HTTP API. The token is sent as a bearer credential and never logged.

use std::time::Duration;

use gpunex_wire::fleet::{
    AgentEvent, AgentEventsRequest, AgentEventsResponse, AgentIdentity, Heartbeat, HeartbeatAck,
    MachineView,
};
use serde::de::DeserializeOwned;
use uuid::Uuid;

/// How long the agent waits for the server before giving up on a request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No answer (server down, network, timeout): try again later.
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The server refused the request itself (4xx): resending it unchanged will not help.
    #[error("{url} refused the request ({status} {code}): {detail}")]
    Refused {
        url: String,
        status: u16,
        code: String,
        detail: String,
    },
    /// The server failed (5xx): try again later.
    #[error("{url} failed ({status}): {detail}")]
    Server {
        url: String,
        status: u16,
        detail: String,
    },
}

impl SendError {
    /// Worth retrying later, unchanged.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SendError::Unreachable { .. } | SendError::Server { .. }
        )
    }
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Client> {
        Ok(Client {
            http: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .user_agent(concat!("gpunex-agent/", env!("CARGO_PKG_VERSION")))
                .build()?,
            base: base.trim_end_matches('/').to_owned(),
            token: token.trim().to_owned(),
        })
    }

    /// The token id, read from the token (`gpnx_<id>_<secret>`).
    pub fn token_id(&self) -> Option<Uuid> {
        let rest = self.token.strip_prefix("gpnx_")?;
        Uuid::try_parse(rest.split_once('_')?.0).ok()
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl serde::Serialize>,
    ) -> Result<T, SendError> {
        let (url, status, bytes) = self.call_bytes(method, path, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| SendError::Server {
            url,
            status,
            detail: format!("unreadable answer: {e}"),
        })
    }

    /// A call whose successful answer's body is returned as it came (with the URL and status).
    async fn call_bytes(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl serde::Serialize>,
    ) -> Result<(String, u16, Vec<u8>), SendError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| SendError::Unreachable {
            url: url.clone(),
            reason: e.without_url().to_string(),
        })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| SendError::Unreachable {
            url: url.clone(),
            reason: e.without_url().to_string(),
        })?;
        if status.is_success() {
            return Ok((url, status.as_u16(), bytes.to_vec()));
        }
        let problem: Option<gpunex_wire::Problem> = serde_json::from_slice(&bytes).ok();
        let detail = problem
            .as_ref()
            .map(|p| p.detail.clone())
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(300).collect());
        if status.is_client_error() {
            Err(SendError::Refused {
                url,
                status: status.as_u16(),
                code: problem.map(|p| p.code).unwrap_or_default(),
                detail,
            })
        } else {
            Err(SendError::Server {
                url,
                status: status.as_u16(),
                detail,
            })
        }
    }

    /// One small round trip to the platform (`GET /healthz`), for the network figures.
    pub async fn ping(&self) -> Result<(), SendError> {
        self.call_bytes(reqwest::Method::GET, "/healthz", None::<&()>)
            .await
            .map(|_| ())
    }

    /// Downloads `bytes` from the platform's speed test; answers how many arrived. A download
    /// may take longer than other requests: up to a minute.
    pub async fn speedtest(&self, bytes: u64) -> Result<u64, SendError> {
        let url = format!("{}/v1/agent/speedtest?bytes={bytes}", self.base);
        let unreachable = |e: reqwest::Error| SendError::Unreachable {
            url: url.clone(),
            reason: e.without_url().to_string(),
        };
        let mut response = self
            .http
            .get(&url)
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        if !status.is_success() {
            return Err(SendError::Refused {
                url: url.clone(),
                status: status.as_u16(),
                code: String::new(),
                detail: format!("the speed test answered {status}"),
            });
        }
        let mut received = 0_u64;
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            received += chunk.len() as u64;
        }
        Ok(received)
    }

    pub async fn identity(&self) -> Result<AgentIdentity, SendError> {
        self.call(reqwest::Method::GET, "/v1/agent/identity", None::<&()>)
            .await
    }

    pub async fn deliver(&self, events: &[AgentEvent]) -> Result<AgentEventsResponse, SendError> {
        let body = AgentEventsRequest {
            events: events.to_vec(),
        };
        self.call(reqwest::Method::POST, "/v1/agent/events", Some(&body))
            .await
    }

    pub async fn heartbeat(&self, heartbeat: &Heartbeat) -> Result<HeartbeatAck, SendError> {
        self.call(
            reqwest::Method::POST,
            "/v1/agent/heartbeat",
            Some(heartbeat),
        )
        .await
    }

    /// The rentals this machine must run or stop.
    pub async fn assignments(&self) -> Result<gpunex_wire::fleet::Assignments, SendError> {
        self.call(reqwest::Method::GET, "/v1/agent/assignments", None::<&()>)
            .await
    }

    pub async fn machine(&self) -> Result<MachineView, SendError> {
        self.call(reqwest::Method::GET, "/v1/agent/machine", None::<&()>)
            .await
    }

    /// Ships a chunk of a job's output that starts at `offset` of it.
    pub async fn ship_log(
        &self,
        rental_id: Uuid,
        offset: u64,
        data: &[u8],
    ) -> Result<(), SendError> {
        use base64::Engine as _;
        let body = gpunex_wire::fleet::JobLogChunk {
            offset,
            data_base64: base64::engine::general_purpose::STANDARD.encode(data),
        };
        self.call_bytes(
            reqwest::Method::POST,
            &format!("/v1/agent/rentals/{rental_id}/logs"),
            Some(&body),
        )
        .await
        .map(|_| ())
    }
}
