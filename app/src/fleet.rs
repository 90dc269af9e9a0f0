//! The fleet commands an agent's reports cause, on the command executor: a machine's
//! registration (its GPUs identified and the provider's GPUs compared with its approved
//! application), a GPU's condition, and a heartbeat that finds its machine offline. Each report's
//! events are stored under ids derived from the report's own id, so a re-sent report is absorbed
//! by the store's idempotency (`Recorded::replayed`, or `Rejection::IdTaken` when it raced an
//! earlier delivery).

use std::convert::Infallible;

use gpunex_domain::fleet::{self, Declared, FleetEvent, GpuConditionChanged, Registration};
use gpunex_domain::onboarding::ApplicationStatus;
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::{Committed, ExpectedVersion, Metadata, NewEvent, StreamAppend};
use uuid::Uuid;

use crate::AppError;
use crate::command::{Done, Executor, Rejection, Retry};
use crate::presence::machine_stream;

/// How many times a registration compares again after another registration of the same
/// provider moved its fleet stream.
pub const REGISTRATION_RETRY: Retry = Retry {
    name: "registration",
    attempts: 5,
};

/// A heartbeat records its machine online once; when another heartbeat or the watchdog moved
/// the machine's stream first, the next heartbeat looks again.
pub const ONLINE_RETRY: Retry = Retry {
    name: "machine online",
    attempts: 1,
};

/// A GPU condition is appended to the machine's stream whatever its version.
const CONDITION_RETRY: Retry = Retry {
    name: "gpu condition",
    attempts: 1,
};

/// The answer of a fleet command: recorded, refused, or the infrastructure failed.
pub type Outcome<T> = Result<Result<T, Rejection<Infallible>>, AppError>;

/// Where an agent's report landed (the position of the event stored under the report's id) and
/// whether it was stored already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub position: u64,
    pub replayed: bool,
}

/// The provider's fleet stream: its declaration comparisons.
pub fn provider_fleet_stream(provider_id: Uuid) -> StreamId {
    StreamId::parse(format!("provider_fleet-{provider_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

fn recorded(committed: &Committed, report_id: Uuid) -> Recorded {
    Recorded {
        position: committed
            .events
            .iter()
            .find(|e| e.event_id == report_id)
            .map_or(committed.last_position(), |e| e.position),
        replayed: committed.replayed,
    }
}

fn done(
    outcome: Result<Done, Rejection<Infallible>>,
    report_id: Uuid,
) -> Result<Recorded, Rejection<Infallible>> {
    match outcome? {
        Done::Committed(committed) => Ok(recorded(&committed, report_id)),
        Done::Nothing => unreachable!("an agent's report always writes"),
    }
}

/// What a registration is compared with, read from the read models.
struct Loaded {
    added: Vec<gpunex_domain::gpu::ModelAdded>,
    application: Option<(Uuid, Vec<gpunex_domain::onboarding::GpuEntry>)>,
    registered: Vec<fleet::GpuDetected>,
    comparison_version: u64,
}

/// Records a registration under `report_id`: the machine and its GPUs on the machine's stream
/// (whatever its version: a re-registration after a hardware change follows the old one), and
/// the provider's declaration comparison on its fleet stream at the version the comparison was
/// computed from, so concurrent registrations of one provider's machines compare again rather
/// than record a stale comparison.
pub async fn register(
    exec: &Executor<'_>,
    report_id: Uuid,
    meta: &Metadata,
    registration: &Registration<'_>,
) -> Outcome<Recorded> {
    let models = exec.models();
    let machine_id = registration.machine_id;
    let provider_id = registration.provider_id;
    let outcome = exec
        .execute(
            REGISTRATION_RETRY,
            move || async move {
                // The provider's machines as of its fleet stream's last event, so no
                // registration is missed. (Its application was approved before the agent's
                // token was issued, so the read models already hold the declaration.)
                models
                    .wait_for_streams(
                        exec.store(),
                        &[
                            &machine_stream(machine_id),
                            &provider_fleet_stream(provider_id),
                        ],
                    )
                    .await?;
                let application = models
                    .applications()
                    .into_iter()
                    .map(|(_, a)| a)
                    .find(|a| {
                        a.provider_id == Some(provider_id)
                            && a.status == ApplicationStatus::Approved
                    })
                    .map(|a| (a.application_id, a.form.gpus));
                let (registered, comparison_version) = models
                    .with_fleet(|f| (f.gpus_of(&provider_id), f.comparison_version(&provider_id)));
                Ok(Loaded {
                    added: models.added_models(),
                    application,
                    registered,
                    comparison_version,
                })
            },
            |loaded: &Loaded, _now| -> Result<_, Infallible> {
                let declared = loaded
                    .application
                    .as_ref()
                    .map(|(application_id, gpus)| Declared {
                        application_id: *application_id,
                        gpus,
                        registered_elsewhere: &loaded.registered,
                    });
                let (events, comparison) =
                    fleet::decide_registration(registration, &loaded.added, declared.as_ref());
                let count = events.len();
                let machine_events = events
                    .into_iter()
                    .enumerate()
                    .map(|(i, event)| {
                        let id = match i {
                            0 => report_id,
                            i => fleet::derived_event_id(
                                report_id,
                                u16::try_from(i).unwrap_or(u16::MAX),
                            ),
                        };
                        NewEvent::from_domain(id, &DomainEvent::Fleet(event), meta.clone())
                    })
                    .collect();
                let mut writes = vec![StreamAppend {
                    stream_id: machine_stream(machine_id),
                    expected: ExpectedVersion::Any,
                    events: machine_events,
                }];
                if let Some(compared) = comparison {
                    let id = fleet::derived_event_id(
                        report_id,
                        u16::try_from(count).unwrap_or(u16::MAX),
                    );
                    let event = DomainEvent::Fleet(FleetEvent::DeclarationCompared(compared));
                    writes.push(StreamAppend {
                        stream_id: provider_fleet_stream(provider_id),
                        expected: ExpectedVersion::Exact(loaded.comparison_version),
                        events: vec![NewEvent::from_domain(id, &event, meta.clone())],
                    });
                }
                Ok(writes)
            },
        )
        .await?;
    Ok(done(outcome, report_id))
}

/// Records a GPU's condition (lost, throttled, failing memory, and back) under `report_id` on
/// its machine's stream.
pub async fn condition(
    exec: &Executor<'_>,
    report_id: Uuid,
    meta: &Metadata,
    changed: &GpuConditionChanged,
) -> Outcome<Recorded> {
    let outcome = exec
        .execute(
            CONDITION_RETRY,
            || async { Ok(()) },
            |_: &(), _now| -> Result<_, Infallible> {
                let event = DomainEvent::Fleet(FleetEvent::GpuConditionChanged(changed.clone()));
                Ok(vec![StreamAppend {
                    stream_id: machine_stream(changed.machine_id),
                    expected: ExpectedVersion::Any,
                    events: vec![NewEvent::from_domain(report_id, &event, meta.clone())],
                }])
            },
        )
        .await?;
    Ok(done(outcome, report_id))
}

/// After a heartbeat was stored: records the machine online if the read models hold it offline
/// (or never yet online), at the version of its stream they hold. Answers whether the machine is
/// online now, and the position of `fleet.machine_online` if this wrote it.
pub async fn heartbeat_online(
    exec: &Executor<'_>,
    machine_id: Uuid,
) -> Result<(bool, Option<u64>), AppError> {
    let models = exec.models();
    let meta = Metadata::actor("system:presence");
    let outcome = exec
        .execute(
            ONLINE_RETRY,
            move || async move {
                Ok(models.with_fleet(|f| {
                    f.machine(&machine_id)
                        .map(|m| (m.provider_id, m.online, m.stream_version))
                }))
            },
            |machine: &Option<(Uuid, bool, u64)>, now| -> Result<_, Infallible> {
                let Some((provider_id, online, version)) = *machine else {
                    return Ok(Vec::new());
                };
                Ok(fleet::decide_online(machine_id, provider_id, online, now)
                    .map(|event| StreamAppend {
                        stream_id: machine_stream(machine_id),
                        expected: ExpectedVersion::Exact(version),
                        events: vec![NewEvent::from_domain(
                            Uuid::now_v7(),
                            &DomainEvent::Fleet(event),
                            meta.clone(),
                        )],
                    })
                    .into_iter()
                    .collect())
            },
        )
        .await?;
    Ok(match outcome {
        Ok(Done::Committed(committed)) => (true, Some(committed.last_position())),
        Ok(Done::Nothing) => (
            models.with_fleet(|f| f.machine(&machine_id).is_some_and(|m| m.online)),
            None,
        ),
        // Another heartbeat or the watchdog moved the machine meanwhile: the next heartbeat
        // looks again.
        Err(_) => (false, None),
    })
}
