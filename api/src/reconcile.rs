//! `gpunex audit reconcile` and `GET /v1/audit/reconcile`: replay the log into a
//! [`Reconciler`] and report every money mismatch (see `gpunex_projections::reconcile`).

use crate::json::Json;
use axum::extract::State;
use gpunex_domain::codes::ErrorCode;
use gpunex_projections::reconcile::{ReconcileReport, Reconciler};
use gpunex_store::Store;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// Whether an event type matters to reconciliation (the rest is skipped undecoded).
fn relevant(event_type: &str) -> bool {
    event_type.starts_with("rental.")
        || event_type == gpunex_domain::events::PAYOUT_SCHEDULED
        || event_type == gpunex_domain::events::PAYOUT_CONFIRMED
        || event_type == gpunex_domain::events::PAYOUT_FAILED
        || event_type == gpunex_domain::events::ADJUSTMENT_POSTED
        || event_type == gpunex_domain::events::MACHINE_ONLINE
        || event_type == gpunex_domain::events::MACHINE_OFFLINE
}

/// Folds the log up to `upto` (inclusive) into a reconciler; `progress` sees each batch's last
/// position. An event that cannot be decoded is an error: reconciliation cannot vouch for it.
pub async fn replay(
    store: &Store,
    upto: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> anyhow::Result<Reconciler> {
    let mut reconciler = Reconciler::default();
    let mut after = 0;
    while after < upto {
        let batch = store
            .read_all(after, gpunex_store::READ_BATCH_EVENTS_MAX)
            .await?;
        let Some(last) = batch.last() else {
            break;
        };
        after = last.position;
        for event in batch.iter().filter(|e| e.position <= upto) {
            if !relevant(&event.event_type) {
                continue;
            }
            let decoded = event
                .decode()
                .map_err(|e| anyhow::anyhow!("position {}: {e}", event.position))?;
            reconciler.apply(event.position, &decoded);
        }
        progress(after.min(upto));
    }
    Ok(reconciler)
}

/// `GET /v1/audit/reconcile` (finance): the same checks as `gpunex audit reconcile` on the log
/// up to its head now, plus the served earnings projection against the replay.
#[utoipa::path(
    get,
    path = "/v1/audit/reconcile",
    operation_id = "reconcile_endpoint",
    tag = "audit",
    summary = "usage money checked to the micro-USDC from the events, and the earnings projection against them",
    responses((status = 200, description = "usage money checked to the micro-USDC from the events, and the earnings projection against them", body = ReconcileReport)),
)]
pub async fn endpoint(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<ReconcileReport>, ApiError> {
    let head = state.store.head_position().await?;
    state.credentials.wait_for(head).await?;
    let reconciler = replay(&state.store, head, &|_| {})
        .await
        .map_err(|e| ApiError::Refused {
            code: ErrorCode::UndecodableEvent,
            detail: e.to_string(),
        })?;
    let at = state.clock.now();
    let served = served(&state, head).await?;
    Ok(Json(reconciler.check(at, Some(&served))))
}

/// What the served earnings projections say up to the replay's position `head`: pending
/// balances from memory, line sums from the stored lines.
async fn served(
    state: &AppState,
    head: u64,
) -> Result<gpunex_projections::reconcile::Served, ApiError> {
    let (position, pending) = state.credentials.with_earnings(|e| {
        let pending: std::collections::BTreeMap<uuid::Uuid, i64> = e
            .providers()
            .into_iter()
            .map(|p| (p, e.pending_balance(p)))
            .collect();
        (e.position(), pending)
    });
    state.store.earnings_reached(head).await?;
    let mut lines_upto = std::collections::BTreeMap::new();
    for provider_id in pending.keys() {
        lines_upto.insert(
            *provider_id,
            state.store.earnings_through(*provider_id, head).await?,
        );
    }
    Ok(gpunex_projections::reconcile::Served {
        position,
        pending_balance: pending,
        lines_upto,
    })
}

/// Prints a report as a person reads it.
pub fn print(report: &ReconcileReport) {
    let t = &report.totals;
    let usdc = |m: i64| gpunex_domain::money::Usdc::from_micros(m).to_string();
    println!("as of position {}", report.as_of_position);
    println!(
        "renter charges   {:>20} USDC\nprovider earnings{:>20} USDC\nplatform fees    {:>20} USDC",
        usdc(t.renter_charges_micro_usdc),
        usdc(t.provider_earnings_micro_usdc),
        usdc(t.platform_fees_micro_usdc)
    );
    println!(
        "{} usage lines, {} GPU-seconds, {} rentals, {} providers",
        t.usage_lines, t.gpu_seconds, t.rentals, t.providers
    );
    if report.is_clean() {
        println!("reconciled: no mismatch");
        return;
    }
    println!("{} mismatches:", report.mismatches.len());
    for m in &report.mismatches {
        println!(
            "  {:<24} rental {:<36} provider {:<36} position {:<10} expected {} found {}",
            m.kind,
            m.rental_id.map(|r| r.to_string()).unwrap_or_default(),
            m.provider_id.map(|r| r.to_string()).unwrap_or_default(),
            m.position.map(|p| p.to_string()).unwrap_or_default(),
            m.expected,
            m.found
        );
    }
}
