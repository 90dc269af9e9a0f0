//! Adding a GPU model to the catalog, on the command executor. Each model has its own stream
//! (`catalog_model-{model_id}`), appended to only while it does not exist, so two admins adding
//! one id cannot both succeed: the later one decides again on the models the first added and is
//! refused as `AlreadyListed`.

use gpunex_domain::gpu::{Catalog, CatalogRejection, ModelAdded};
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::Metadata;

use crate::AppError;
use crate::command::{Executor, Rejection, Retry, append_at};

/// One more decision after another admin's addition of the same id landed first (which the
/// second decision refuses).
pub const CATALOG_RETRY: Retry = Retry {
    name: "catalog_model",
    attempts: 2,
};

/// The model an admin asks to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewModel<'a> {
    pub model_id: &'a str,
    pub name: &'a str,
    pub vram_gb: u32,
}

/// The stream of a catalog model id (`None` for text that cannot name one).
pub fn model_stream(model_id: &str) -> Option<StreamId> {
    StreamId::parse(format!("catalog_model-{model_id}")).ok()
}

/// Adds `model` to the catalog as `actor`; answers the event that added it.
pub async fn add(
    exec: &Executor<'_>,
    model: NewModel<'_>,
    actor: &str,
) -> Result<Result<ModelAdded, Rejection<CatalogRejection>>, AppError> {
    let models = exec.models();
    let Some(stream) = model_stream(model.model_id) else {
        return Ok(Err(Rejection::Rule(CatalogRejection::InvalidId)));
    };
    let meta = Metadata::actor(actor);
    let mut added = None;
    let outcome = exec
        .execute(
            CATALOG_RETRY,
            || {
                let stream = stream.clone();
                async move {
                    let version = models.at_stream(exec.store(), &stream).await?;
                    Ok((models.added_models(), version))
                }
            },
            |(catalog, version): &(Vec<ModelAdded>, u64), now| {
                let event = Catalog { added: catalog }.add(
                    model.model_id,
                    model.name,
                    model.vram_gb,
                    actor,
                    now,
                )?;
                added = Some(event.clone());
                Ok(vec![append_at(
                    stream.clone(),
                    *version,
                    [DomainEvent::ModelAdded(event)],
                    &meta,
                )])
            },
        )
        .await?;
    Ok(outcome.and_then(|_| added.ok_or(Rejection::Rule(CatalogRejection::AlreadyListed))))
}
