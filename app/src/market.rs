//! The market commands on the command executor: a provider's prices, weekly schedule and
//! maintenance, and taking its GPUs off the marketplace and back (an operator now; the
//! benchmark rules' automatic delisting later). Each loads the provider's market from the read
//! models once they reach its stream (`provider_market-{provider_id}`), decides with
//! `gpunex_domain::market::decide`, and appends at the version it read, so two changes that
//! race (two delists of one GPU, a cancel beside another) are decided one after the other.

use gpunex_domain::market::{self, MarketCommand, MarketEvent, MarketRejection, ProviderMarket};
use gpunex_domain::onboarding::{ApplicationStatus, GpuModelChoice};
use gpunex_domain::time::Timestamp;
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::Metadata;
use uuid::Uuid;

use crate::command::{Done, Executor, Rejection, Retry, append_at};
use crate::{AppError, ReadModels};

/// How many times a market command decides again after another change to the same provider's
/// market landed first.
pub const MARKET_RETRY: Retry = Retry {
    name: "provider_market",
    attempts: 5,
};

/// The answer of a market command: what it wrote, refused, or the infrastructure failed.
pub type Outcome = Result<Result<Decided, Rejection<MarketRejection>>, AppError>;

/// A market command that was not refused: where it landed and the events it decided.
#[derive(Debug)]
pub struct Decided {
    pub done: Done,
    pub events: Vec<MarketEvent>,
}

/// The provider's market stream.
pub fn market_stream(provider_id: Uuid) -> StreamId {
    StreamId::parse(format!("provider_market-{provider_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

/// Models a provider offers: catalog models its approved application declares or its machines
/// have.
pub fn offered_models(models: &ReadModels, provider_id: Uuid) -> Vec<String> {
    let mut offered: Vec<String> = models
        .applications()
        .into_iter()
        .filter(|(_, a)| {
            a.provider_id == Some(provider_id) && a.status == ApplicationStatus::Approved
        })
        .flat_map(|(_, a)| {
            a.form
                .gpus
                .into_iter()
                .filter_map(|entry| match entry.model {
                    GpuModelChoice::Catalog(id) => Some(id),
                    GpuModelChoice::Unlisted(_) => None,
                })
        })
        .collect();
    offered.extend(models.with_fleet(|f| {
        f.gpus_of(&provider_id)
            .into_iter()
            .filter_map(|g| g.model_id)
            .collect::<Vec<_>>()
    }));
    offered.sort();
    offered.dedup();
    offered
}

/// The provider's market as the read models hold it at `now`, with its stream's version, read
/// together.
pub fn provider_market(
    models: &ReadModels,
    provider_id: Uuid,
    now: Timestamp,
) -> (ProviderMarket, u64) {
    let offered_models = offered_models(models, provider_id);
    let (machines, gpus) = models.with_fleet(|f| {
        let machines: Vec<Uuid> = f
            .machines_of(&provider_id)
            .into_iter()
            .map(|m| m.machine_id)
            .collect();
        let gpus: Vec<String> = f
            .gpus_of(&provider_id)
            .into_iter()
            .map(|g| g.gpu.gpu_uuid)
            .collect();
        (machines, gpus)
    });
    models.with_market(|m| {
        let state = ProviderMarket {
            provider_id,
            offered_models,
            machines,
            maintenance: m.maintenance_of(provider_id, now),
            delisted: gpus
                .into_iter()
                .filter(|gpu| m.delisting(gpu).is_some())
                .collect(),
        };
        (state, m.market_version(provider_id))
    })
}

/// Decides `command` on the provider's market and appends what it decided. `prepare` sees each
/// attempt's state and events right before its append (an HTTP answer recorded with the append
/// is prepared there).
pub async fn execute(
    exec: &Executor<'_>,
    provider_id: Uuid,
    command: MarketCommand,
    meta: &Metadata,
    mut prepare: impl FnMut(&ProviderMarket, &[MarketEvent]),
) -> Outcome {
    let models = exec.models();
    let stream = market_stream(provider_id);
    let mut decided: Vec<MarketEvent> = Vec::new();
    let outcome = exec
        .execute(
            MARKET_RETRY,
            || {
                let stream = stream.clone();
                async move {
                    models.wait_for_streams(exec.store(), &[&stream]).await?;
                    Ok(provider_market(models, provider_id, exec.now()))
                }
            },
            |(state, version): &(ProviderMarket, u64), now| {
                let events = market::decide(state, command.clone(), now)?;
                prepare(state, &events);
                decided.clone_from(&events);
                Ok(vec![append_at(
                    stream.clone(),
                    *version,
                    events.into_iter().map(DomainEvent::Market),
                    meta,
                )])
            },
        )
        .await?;
    Ok(outcome.map(|done| Decided {
        done,
        events: decided,
    }))
}
