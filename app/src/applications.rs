//! Provider application commands on the command executor: each step (submit, answer, withdraw,
//! request information, approve, reject) is decided by `gpunex_domain::onboarding::decide`
//! against the application folded from its own stream, and appended at the version it was folded
//! from, so two racing decisions cannot both land: the later one decides again on what the first
//! wrote.

use gpunex_domain::onboarding::{self, Application, ApplicationCommand, ApplicationRejection};
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::{Metadata, READ_BATCH_EVENTS_MAX, Store, StoreError};
use uuid::Uuid;

use crate::AppError;
use crate::command::{Done, Executor, Rejection, Retry, append_at};

/// How many times a step decides again after another step of the same application landed first.
pub const APPLICATION_RETRY: Retry = Retry {
    name: "application",
    attempts: 3,
};

pub fn stream_of(id: Uuid) -> StreamId {
    StreamId::parse(format!("application-{id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

/// The application folded from its own stream (none if it has no events), and the stream's
/// version: state and version from one read, so a decision is checked against exactly what it
/// will be appended after.
pub async fn load(store: &Store, id: Uuid) -> Result<(Option<Application>, u64), AppError> {
    let (events, version) = read(store, id).await?;
    Ok((events.iter().fold(None, onboarding::evolve), version))
}

/// Every event of the application `id`, oldest first: its conversation (the reviewers'
/// questions, the answers, the decision) as the applicant and reviewers read it.
pub async fn events(
    store: &Store,
    id: Uuid,
) -> Result<Vec<onboarding::ApplicationEvent>, AppError> {
    Ok(read(store, id).await?.0)
}

/// The application's events and its stream's version.
async fn read(
    store: &Store,
    id: Uuid,
) -> Result<(Vec<onboarding::ApplicationEvent>, u64), AppError> {
    let stream = stream_of(id);
    let mut events = Vec::new();
    let mut version = 0;
    loop {
        let page = store
            .read_stream(&stream, version, READ_BATCH_EVENTS_MAX)
            .await?;
        let Some(last) = page.last().map(|e| e.stream_version) else {
            return Ok((events, version));
        };
        for recorded in &page {
            let event = recorded.decode().map_err(|e| StoreError::CorruptRow {
                position: recorded.position,
                reason: e.to_string(),
            })?;
            if let DomainEvent::Application(event) = event {
                events.push(event);
            }
        }
        version = last;
    }
}

/// Decides `command` for the application `id` and appends what it decides; answers the
/// application after its new events (folded from the decision itself, not read back).
pub async fn execute(
    exec: &Executor<'_>,
    actor: &str,
    id: Uuid,
    command: &ApplicationCommand,
) -> Result<Result<Application, Rejection<ApplicationRejection>>, AppError> {
    let metadata = Metadata::actor(actor);
    let mut after: Option<Application> = None;
    let outcome = exec
        .execute(
            APPLICATION_RETRY,
            move || async move { load(exec.store(), id).await },
            |(current, version): &(Option<Application>, u64), _now| {
                let events = onboarding::decide(current.as_ref(), command.clone())?;
                after = events.iter().fold(current.clone(), onboarding::evolve);
                Ok(vec![append_at(
                    stream_of(id),
                    *version,
                    events.into_iter().map(DomainEvent::Application),
                    &metadata,
                )])
            },
        )
        .await?;
    Ok(match outcome {
        Ok(Done::Committed(_)) | Ok(Done::Nothing) => {
            after.ok_or(Rejection::Rule(ApplicationRejection::NotFound))
        }
        Err(rejection) => Err(rejection),
    })
}
