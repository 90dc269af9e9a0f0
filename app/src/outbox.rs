//! Notifications through an outbox. The log is the outbox: a consumer with its own checkpoint
//! reads it, and for every information request, approval and rejection emails the applicant.
//!
//! The outbox has one checkpoint per deployment: run it in one server process (the others start
//! with `--no-outbox`), or in several that share the same transport. Sharing is safe with the
//! mailbox directory (see `Mailbox::deliver`); with SMTP two processes could both send a message
//! before either records it, so run SMTP delivery in one process.
//!
//! Delivery here writes each message into a Maildir-style mailbox directory (`tmp/`, then an
//! atomic rename into `new/<event id>.eml`), so the default installation works without a mail
//! server. A message's file name is its event id: after a crash anywhere (between delivery and
//! checkpoint, or mid-write), the consumer starts again from its checkpoint, finds the messages
//! already in `new/`, and skips them: every notification is delivered exactly once. A failed
//! delivery does not move the checkpoint, so it is retried, with backoff, until it succeeds.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpunex_domain::DomainEvent;
use gpunex_domain::onboarding::{Application, ApplicationEvent, Tier};
use gpunex_store::Store;
use uuid::Uuid;

use crate::ReadModels;

/// The outbox's checkpoint name.
pub const OUTBOX: &str = "outbox";
/// Events read per pass.
const BATCH_EVENTS_MAX: usize = 500;
const RETRY_DELAY_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error(transparent)]
    Store(#[from] gpunex_store::StoreError),
    #[error("mailbox {path}: {source}")]
    Mailbox {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("event at position {position} cannot be read: {reason}")]
    Undecodable { position: u64, reason: String },
    #[error("the registry did not reach position {0}")]
    RegistryBehind(u64),
    #[error("notification setup: {reason}")]
    Config { reason: String },
    #[error("SMTP: {reason}")]
    Smtp { reason: String },
}

/// A message to one person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    /// The event that caused it: the idempotency key of its delivery.
    pub message_id: Uuid,
    pub to: String,
    pub subject: String,
    pub body: String,
}

impl Email {
    /// RFC 5322 text with CRLF line ends.
    pub fn render(&self, from: &str) -> String {
        let body = self.body.replace("\r\n", "\n").replace('\n', "\r\n");
        format!(
            "From: {from}\r\nTo: {}\r\nSubject: {}\r\nMessage-ID: <{}@gpunex>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n",
            self.to, self.subject, self.message_id
        )
    }
}

/// The notification an application event sends, if any.
/// `public_url` is where people reach the platform (`--public-url`): the steps in a message
/// name it.
pub fn notification(
    event_id: Uuid,
    event: &ApplicationEvent,
    application: &Application,
    public_url: &str,
) -> Option<Email> {
    let url = public_url.trim_end_matches('/');
    let (subject, body) = match event {
        ApplicationEvent::InformationRequested(requested) => (
            "GPUnex: more information needed for your provider application".to_owned(),
            format!(
                "The GPUnex team needs more information to review your application {id}:\n\n{message}\n\nAnswer signed in, with your session token; the review continues as soon as you do:\n\n\x20  curl -X POST {url}/v1/applications/{id}/answer -H 'Authorization: Bearer <session token>' -H 'Content-Type: application/json' -d '{{\"text\": \"...\"}}'",
                id = application.application_id,
                message = requested.message
            ),
        ),
        ApplicationEvent::Approved(approved) => (
            format!(
                "GPUnex: your provider application is approved ({} tier)",
                match approved.tier {
                    Tier::Enterprise => "Enterprise",
                    Tier::Community => "Community",
                }
            ),
            format!(
                "Welcome to GPUnex. Your provider id is {provider}.\n\n\
                 In the console, sign in and open your application to take your provider token;\n\
                 the Panel de proveedor then shows your machines, with the install steps and an\n\
                 agent token for each:\n\n\
                 \x20  {url}/console/applications/{application}\n\
                 \x20  {url}/console/provider/{provider}/machines\n\n\
                 Or, with the API:\n\n\
                 1. Claim your provider token. It is shown once: keep it safe. Sign in, then claim it\n\
                 with your session token:\n\n\
                 \x20  curl -X POST {url}/v1/sessions -H 'Content-Type: application/json' -d '{{\"email\": \"{email}\", \"password\": \"...\"}}'\n\
                 \x20  curl -X POST {url}/v1/applications/{application}/provider-token -H 'Authorization: Bearer <session token>'\n\n\
                 2. For each machine, issue an agent token with your provider token. The platform gives\n\
                 the machine its id (role.machine_id in the answer); the agent token is shown once:\n\n\
                 \x20  curl -X POST {url}/v1/tokens -H 'Authorization: Bearer <provider token>' -H 'Content-Type: application/json' -d '{{\"role\": {{\"kind\": \"agent\"}}}}'\n\n\
                 3. On the machine: check the NVIDIA driver and the NVIDIA Container Toolkit, then install\n\
                 the agent with its token (it asks for the token if you leave it out):\n\n\
                 \x20  nvidia-smi\n\
                 \x20  docker run --rm --gpus all nvidia/cuda:12.4.0-base-ubuntu22.04 nvidia-smi\n\
                 \x20  GPUNEX_AGENT_TOKEN=<agent token> agent/docker/install.sh --server {url}\n\
                 \x20  docker ps | grep gpunex-agent\n\n\
                 4. Within minutes the machine shows online, with its GPUs as the agent detected them:\n\n\
                 \x20  curl {url}/v1/providers/{provider}/machines -H 'Authorization: Bearer <provider token>'\n\n\
                 Then set your prices (POST {url}/v1/providers/{provider}/prices) and your payout\n\
                 settings (PUT {url}/v1/providers/{provider}/payout-settings).",
                provider = approved.provider_id,
                application = application.application_id,
                email = application.form.email,
            ),
        ),
        ApplicationEvent::Rejected(rejected) => (
            "GPUnex: your provider application was not approved".to_owned(),
            format!(
                "We could not approve application {}:\n\n{}",
                application.application_id, rejected.reason
            ),
        ),
        ApplicationEvent::Submitted(_)
        | ApplicationEvent::InformationProvided(_)
        | ApplicationEvent::Withdrawn(_) => {
            return None;
        }
    };
    Some(Email {
        message_id: event_id,
        to: application.form.email.clone(),
        subject,
        body,
    })
}

/// The benchmark events that notify someone.
const BENCHMARK_NOTICES: [&str; 3] = [
    gpunex_domain::events::BENCHMARK_GPU_DELISTED,
    gpunex_domain::events::BENCHMARK_GPU_RELISTED,
    gpunex_domain::events::BENCHMARK_DELISTING_PAUSED,
];

/// The messages a benchmark event sends: the provider hears that a GPU was delisted (with the
/// reasons, the evidence and what to fix) or relisted; every admin hears that automatic
/// delisting paused. A provider with no address on file, or no admin, gets nothing.
pub fn benchmark_notifications(
    event_id: Uuid,
    event: &gpunex_domain::benchmark_log::BenchmarkEvent,
    registry: &ReadModels,
    public_url: &str,
) -> Vec<Email> {
    use gpunex_domain::benchmark_log::BenchmarkEvent;
    let url = public_url.trim_end_matches('/');
    let provider_email = |provider_id: &Uuid| {
        registry
            .provider_application(provider_id)
            .map(|a| a.form.email)
    };
    let percent = |bp: u64| format!("{}.{}", bp / 100, (bp % 100) / 10);
    match event {
        BenchmarkEvent::GpuDelisted(acted) => {
            let Some(to) = provider_email(&acted.provider_id) else {
                return Vec::new();
            };
            let reasons: String = acted
                .verdict
                .reasons
                .iter()
                .filter(|r| r.outcome == gpunex_domain::benchmark::Outcome::Fail)
                .map(|r| {
                    format!(
                        "- {}: {}\n  What to do: {}\n",
                        r.code, r.evidence, r.guidance
                    )
                })
                .collect();
            vec![Email {
                message_id: event_id,
                to,
                subject: format!(
                    "GPUnex: GPU {} is off the marketplace after its benchmark",
                    acted.gpu_uuid
                ),
                body: format!(
                    "Your {model} GPU {gpu} failed its automated benchmark (score {score} % of the model's reference) and is no longer listed. Renters' running jobs are not affected.\n\nWhat needs attention:\n\n{reasons}\nOnce it is fixed, ask for a re-test (once an hour) from the Panel de proveedor, Pruebas de rendimiento, or with the API:\n\n\x20  curl -X POST {url}/v1/gpus/{gpu}/benchmarks/retest -H 'Authorization: Bearer <provider token>' -H 'Content-Type: application/json' -d '{{\"reason\": \"...\"}}'\n\nA passing re-test lists it again. The runs and the verdict: {url}/console/provider/{provider}/benchmarks",
                    model = acted.model_id,
                    gpu = acted.gpu_uuid,
                    score = percent(acted.score_bp),
                    provider = acted.provider_id,
                ),
            }]
        }
        BenchmarkEvent::GpuRelisted(acted) => {
            let Some(to) = provider_email(&acted.provider_id) else {
                return Vec::new();
            };
            vec![Email {
                message_id: event_id,
                to,
                subject: format!("GPUnex: GPU {} is listed again", acted.gpu_uuid),
                body: format!(
                    "Your {} GPU {} passed its re-test (score {} % of the model's reference) and is back on the marketplace.",
                    acted.model_id,
                    acted.gpu_uuid,
                    percent(acted.score_bp)
                ),
            }]
        }
        BenchmarkEvent::DelistingPaused(paused) => registry
            .staff_emails(gpunex_domain::accounts::StaffRole::Admin)
            .into_iter()
            .map(|to| Email {
                message_id: Uuid::new_v5(&event_id, to.as_bytes()),
                subject: "GPUnex: automatic delisting paused (fleet-wide benchmark anomaly)"
                    .to_owned(),
                body: format!(
                    "{}\n\nNo GPU is delisted automatically until an admin resumes it, after looking at the runs:\n\n\x20  curl -X POST {url}/v1/admin/benchmarks/resume -H 'Authorization: Bearer <admin token>' -H 'Content-Type: application/json' -d '{{\"reason\": \"...\"}}'",
                    paused.evidence
                ),
                to,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A Maildir-style directory: `tmp/` for writes in progress, `new/` for delivered messages.
#[derive(Debug, Clone)]
pub struct Mailbox {
    root: PathBuf,
    from: String,
}

impl Mailbox {
    pub fn open(root: &Path, from: &str) -> Result<Mailbox, OutboxError> {
        for dir in ["tmp", "new"] {
            let path = root.join(dir);
            std::fs::create_dir_all(&path)
                .map_err(|source| OutboxError::Mailbox { path, source })?;
        }
        Ok(Mailbox {
            root: root.to_path_buf(),
            from: from.to_owned(),
        })
    }

    pub fn delivered_path(&self, message_id: Uuid) -> PathBuf {
        self.root.join("new").join(format!("{message_id}.eml"))
    }

    /// Whether message `id` is in the mailbox: in `new/`, or already moved to `cur/` by a mail
    /// client (which may add flags after the name: `<id>.eml:2,S`).
    fn contains(&self, message_id: Uuid) -> Result<bool, OutboxError> {
        if self.delivered_path(message_id).exists() {
            return Ok(true);
        }
        let cur = self.root.join("cur");
        let prefix = format!("{message_id}.eml");
        match std::fs::read_dir(&cur) {
            Ok(entries) => Ok(entries
                .filter_map(Result::ok)
                .any(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(OutboxError::Mailbox { path: cur, source }),
        }
    }

    /// Delivers `email` unless it already was; returns whether it was delivered now. The file is
    /// written under a unique temporary name, synced, and published with a hard link, which
    /// fails if the message exists: two deliverers sharing the directory cannot tear or double
    /// a message. The directory is synced before the caller moves its checkpoint.
    fn deliver(&self, email: &Email) -> Result<bool, OutboxError> {
        if self.contains(email.message_id)? {
            return Ok(false);
        }
        let target = self.delivered_path(email.message_id);
        let temporary = self.root.join("tmp").join(format!(
            "{}.{}.tmp",
            email.message_id,
            Uuid::new_v4().simple()
        ));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| OutboxError::Mailbox { path, source }
        };
        let mut file = std::fs::File::create(&temporary).map_err(io(&temporary))?;
        file.write_all(email.render(&self.from).as_bytes())
            .map_err(io(&temporary))?;
        file.sync_all().map_err(io(&temporary))?;
        let published = match std::fs::hard_link(&temporary, &target) {
            Ok(()) => true,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(source) => {
                let _ = std::fs::remove_file(&temporary);
                return Err(OutboxError::Mailbox {
                    path: target,
                    source,
                });
            }
        };
        let _ = std::fs::remove_file(&temporary);
        let new = self.root.join("new");
        std::fs::File::open(&new)
            .and_then(|dir| dir.sync_all())
            .map_err(io(&new))?;
        Ok(published)
    }
}

/// How notifications leave: SMTP when configured, otherwise the mailbox directory.
#[derive(Clone)]
pub enum Transport {
    Mailbox(Mailbox),
    Smtp(Smtp),
}

/// SMTP through `lettre`. The URL picks the security: `smtp://host:25` (plain, e.g. a local
/// relay), `smtp://host:587?tls=required` (STARTTLS), `smtps://user:password@host:465`.
#[derive(Clone)]
pub struct Smtp {
    transport: lettre::AsyncSmtpTransport<lettre::Tokio1Executor>,
    from: lettre::message::Mailbox,
}

impl Smtp {
    pub fn from_url(url: &str, from: &str) -> Result<Smtp, OutboxError> {
        let invalid = |reason: String| OutboxError::Config { reason };
        let transport = lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::from_url(url)
            .map_err(|e| invalid(format!("SMTP URL: {e}")))?
            .build();
        let from = from
            .parse()
            .map_err(|e| invalid(format!("sender `{from}`: {e}")))?;
        Ok(Smtp { transport, from })
    }

    /// Sends unless the store records it as sent; records it after the server accepts it.
    /// A crash between the two sends it again on restart: at least once, and the stable
    /// `Message-ID` lets mail clients drop the copy.
    async fn deliver(&self, store: &Store, email: &Email) -> Result<bool, OutboxError> {
        use lettre::AsyncTransport;
        if store.notification_delivered(email.message_id).await? {
            return Ok(false);
        }
        // A message that can never be sent (an address the mail library refuses, a permanent
        // 5xx from the server) must not hold back every later notification: it is logged as a
        // dead letter, recorded, and skipped. Anything else is retried.
        let dead_letter = |reason: String| async move {
            tracing::error!(message_id = %email.message_id, %reason, "notification cannot be delivered; skipped");
            store.record_notification(email.message_id).await?;
            Ok::<bool, OutboxError>(false)
        };
        let message = match email
            .to
            .parse()
            .map_err(|e| format!("recipient: {e}"))
            .and_then(|to| {
                lettre::Message::builder()
                    .from(self.from.clone())
                    .to(to)
                    .subject(&email.subject)
                    .message_id(Some(format!("<{}@gpunex>", email.message_id)))
                    .header(lettre::message::header::ContentType::TEXT_PLAIN)
                    .body(email.body.clone())
                    .map_err(|e| e.to_string())
            }) {
            Ok(message) => message,
            Err(reason) => return dead_letter(reason).await,
        };
        match self.transport.send(message).await {
            Ok(_) => {}
            Err(error) if error.is_permanent() => return dead_letter(error.to_string()).await,
            Err(error) => {
                return Err(OutboxError::Smtp {
                    reason: error.to_string(),
                });
            }
        }
        store.record_notification(email.message_id).await?;
        Ok(true)
    }
}

impl Transport {
    async fn deliver(&self, store: &Store, email: Email) -> Result<bool, OutboxError> {
        match self {
            Transport::Mailbox(mailbox) => {
                let mailbox = mailbox.clone();
                tokio::task::spawn_blocking(move || mailbox.deliver(&email))
                    .await
                    .map_err(|e| OutboxError::Config {
                        reason: e.to_string(),
                    })?
            }
            Transport::Smtp(smtp) => smtp.deliver(store, &email).await,
        }
    }
}

/// Delivers every notification after the outbox checkpoint and moves the checkpoint after
/// each batch. Returns how many messages were delivered now.
pub async fn deliver_pending(
    store: &Store,
    registry: &ReadModels,
    transport: &Transport,
    public_url: &str,
) -> Result<u64, OutboxError> {
    let mut position = store.consumer_checkpoint(OUTBOX).await?;
    let mut delivered = 0;
    loop {
        let events = store.read_all(position, BATCH_EVENTS_MAX).await?;
        let Some(last) = events.last().map(|e| e.position) else {
            return Ok(delivered);
        };
        for event in events.iter().filter(|e| {
            e.event_type.starts_with("provider.application_")
                || BENCHMARK_NOTICES.contains(&e.event_type.as_str())
        }) {
            if BENCHMARK_NOTICES.contains(&event.event_type.as_str()) {
                let decoded = event.decode().map_err(|e| OutboxError::Undecodable {
                    position: event.position,
                    reason: e.to_string(),
                })?;
                let DomainEvent::Benchmark(benchmark_event) = decoded else {
                    continue;
                };
                registry
                    .wait_for(event.position)
                    .await
                    .map_err(|_| OutboxError::RegistryBehind(event.position))?;
                for email in
                    benchmark_notifications(event.event_id, &benchmark_event, registry, public_url)
                {
                    delivered += u64::from(transport.deliver(store, email).await?);
                }
                continue;
            }
            let decoded = event.decode().map_err(|e| OutboxError::Undecodable {
                position: event.position,
                reason: e.to_string(),
            })?;
            let DomainEvent::Application(application_event) = decoded else {
                continue;
            };
            // The registry folds the application up to this event before we read the address.
            registry
                .wait_for(event.position)
                .await
                .map_err(|_| OutboxError::RegistryBehind(event.position))?;
            let id = application_event.application_id();
            // Folded before this event (waited for above): missing means the registry is broken;
            // retry rather than lose the notification.
            let application = registry
                .application(&id)
                .ok_or(OutboxError::RegistryBehind(event.position))?;
            let Some(email) =
                notification(event.event_id, &application_event, &application, public_url)
            else {
                continue;
            };
            let sent = transport.deliver(store, email).await?;
            delivered += u64::from(sent);
        }
        store.advance_consumer(OUTBOX, position, last).await?;
        position = last;
    }
}

/// The server's outbox loop: deliver, wait for new events (or a poll interval), repeat;
/// failures are retried with backoff.
pub async fn run(store: Store, registry: ReadModels, transport: Transport, public_url: String) {
    let mut head = store.head_watch().await;
    let mut retry_delay = Duration::from_millis(200);
    loop {
        head.borrow_and_update();
        match deliver_pending(&store, &registry, &transport, &public_url).await {
            Ok(delivered) => {
                if delivered > 0 {
                    tracing::info!(delivered, "notifications delivered");
                }
                retry_delay = Duration::from_millis(200);
                let _ = tokio::time::timeout(Duration::from_secs(1), head.changed()).await;
            }
            Err(error) => {
                tracing::warn!(%error, retry_in_ms = retry_delay.as_millis() as u64, "notification delivery failed");
                tokio::time::sleep(retry_delay).await;
                retry_delay = (retry_delay * 2).min(RETRY_DELAY_MAX);
            }
        }
    }
}
