//! Payout settings over HTTP: a provider chooses weekly or monthly payouts and one method, a
//! Solana wallet or SEPA bank details, checked by `gpunex-payouts`. Each change is an event
//! (`payout.settings_changed`); a payout already submitted keeps the method it was submitted with.

use axum::Json;
use axum::extract::{Path, State};
use gpunex_domain::payouts::{PayoutEvent, PayoutPolicy, PayoutSettingsChanged};
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::{ExpectedVersion, Metadata, NewEvent};
use gpunex_wire::payouts as wp;
use uuid::Uuid;

use crate::auth::{Allow, Caller};
use crate::error::{ApiError, append_failure};
use crate::server::{AppState, timestamp};
use crate::tokens::now;

fn view(settings: &PayoutSettingsChanged) -> wp::PayoutSettingsView {
    let minimum = PayoutPolicy::default().minimum(settings.schedule);
    wp::PayoutSettingsView {
        provider_id: settings.provider_id,
        schedule: settings.schedule,
        method: settings.method.clone(),
        minimum_micro_usdc: minimum.micros(),
        minimum_usdc: minimum.to_string(),
        changed_at: timestamp(settings.changed_at.unix_micros()),
        changed_by: settings.changed_by.clone(),
    }
}

fn check_provider(state: &AppState, provider_id: Uuid) -> Result<(), ApiError> {
    match state.credentials.provider_application(&provider_id) {
        Some(_) => Ok(()),
        None => Err(ApiError::NotFound("provider")),
    }
}

/// `GET /v1/providers/{provider_id}/payout-settings`
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
) -> Result<Json<wp::PayoutSettingsView>, ApiError> {
    caller.require_for_provider(
        &[Allow::Admin, Allow::Finance, Allow::Provider],
        provider_id,
    )?;
    check_provider(&state, provider_id)?;
    state
        .credentials
        .with_earnings(|e| e.payout_settings(provider_id).map(view))
        .map(Json)
        .ok_or(ApiError::NotFound("payout_settings"))
}

/// `PUT /v1/providers/{provider_id}/payout-settings` (the provider, or an admin)
pub async fn set(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
    Json(body): Json<serde_json::Value>,
) -> Result<Json<wp::PayoutSettingsView>, ApiError> {
    caller.require_for_provider(&[Allow::Admin, Allow::Provider], provider_id)?;
    check_provider(&state, provider_id)?;
    let request: wp::PayoutSettingsRequest = serde_json::from_value(body)
        .map_err(|e| ApiError::invalid("body", "invalid_body", e.to_string()))?;
    let method = gpunex_payouts::check_method(&request.method).map_err(|errors| {
        ApiError::InvalidRequest(
            errors
                .into_iter()
                .map(|e| gpunex_wire::FieldError {
                    field: e.field.to_owned(),
                    code: e.code.to_owned(),
                    message: e.message,
                })
                .collect(),
        )
    })?;
    let changed = PayoutSettingsChanged {
        provider_id,
        schedule: request.schedule,
        method,
        changed_at: now(),
        changed_by: caller.actor(),
    };
    let stream = StreamId::parse(format!("payout_settings-{provider_id}"))
        .unwrap_or_else(|_| unreachable!("a uuid makes a valid stream id"));
    let committed = state
        .store
        .append(
            stream,
            ExpectedVersion::Any,
            vec![NewEvent::from_domain(
                Uuid::now_v7(),
                &DomainEvent::Payout(PayoutEvent::SettingsChanged(changed.clone())),
                Metadata::actor(caller.actor()),
            )],
        )
        .await
        .map_err(append_failure)?;
    state
        .credentials
        .wait_for(committed.last_position())
        .await?;
    Ok(Json(view(&changed)))
}
