//! Payout batches over HTTP: the payout settings the server runs with, and the views of batches
//! and payouts. Planning, writing and scheduling a batch is `gpunex_app::payout_run`.

use std::collections::HashMap;

use gpunex_domain::codes::ErrorCode;

use chrono::NaiveDate;
use gpunex_domain::money::Usdc;
use gpunex_domain::payouts::{self as rules, PayoutPolicy, RolledForward};

use gpunex_projections::earnings::Earnings;
use gpunex_projections::payout_history::StoredBatch;
use gpunex_projections::payouts::PayoutRecord;
use gpunex_store::Store;
use gpunex_wire::payouts as wp;
use uuid::Uuid;

use crate::convert::timestamp;
use crate::error::ApiError;
use gpunex_app::ReadModels;
use gpunex_app::payout_run::{BatchRun, Planned};

/// What the server needs for payouts: the rules, and the platform's bank account for SEPA files.
#[derive(Debug, Clone, Default)]
pub struct PayoutConfig {
    pub policy: PayoutPolicy,
    pub debtor: Option<gpunex_domain::payouts::BankDetails>,
}

impl PayoutConfig {
    /// Reads and checks the bank account file, if one is given.
    pub fn new(
        policy: PayoutPolicy,
        debtor: Option<&std::path::Path>,
    ) -> anyhow::Result<PayoutConfig> {
        let debtor = match debtor {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--sepa-debtor {}: {e}", path.display()))?;
                let details: gpunex_domain::payouts::BankDetails = serde_json::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("--sepa-debtor {}: {e}", path.display()))?;
                let details = gpunex_payouts::check_bank(&details).map_err(|errors| {
                    let list: Vec<String> = errors
                        .iter()
                        .map(|e| format!("{}: {}", e.field, e.message))
                        .collect();
                    anyhow::anyhow!("--sepa-debtor {}: {}", path.display(), list.join("; "))
                })?;
                gpunex_payouts::sepa_file::check_debtor(&details)?;
                Some(details)
            }
        };
        Ok(PayoutConfig { policy, debtor })
    }
}

/// A payout as the API shows it.
pub fn payout_view(record: &PayoutRecord) -> wp::PayoutView {
    let scheduled = &record.scheduled;
    let last = record.submissions.last();
    let signature = last.map(|s| match &s.submission {
        rules::Submission::Solana { signature, .. } => signature.clone(),
    });
    let (slot, bank_reference) = match record.confirmed.as_ref().map(|c| &c.confirmation) {
        Some(rules::Confirmation::Solana { slot, .. }) => (Some(*slot), None),
        Some(rules::Confirmation::Bank { bank_reference, .. }) => {
            (None, Some(bank_reference.clone()))
        }
        None => (None, None),
    };
    let submitted_at = record
        .submissions
        .first()
        .map(|s| s.submitted_at)
        .or(record.bank_file.as_ref().map(|f| f.created_at));
    let settled_at = record
        .confirmed
        .as_ref()
        .map(|c| c.confirmed_at)
        .or(record.failed.as_ref().map(|f| f.failed_at));
    let status = serde_json::to_value(record.status())
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    wp::PayoutView {
        payout_id: scheduled.payout_id,
        batch_id: scheduled.batch_id,
        provider_id: scheduled.provider_id,
        payout_date: scheduled.payout_date.to_string(),
        period: scheduled.period.clone(),
        schedule: scheduled.schedule,
        rail: scheduled.method.rail(),
        method: scheduled.method.clone(),
        amount_micro_usdc: scheduled.amount.micros(),
        amount_usdc: scheduled.amount.to_string(),
        status,
        cutoff: timestamp(scheduled.cutoff.unix_micros()),
        lines: scheduled.lines.count,
        lines_net_micro_usdc: scheduled.lines.net.micros(),
        brought_forward_micro_usdc: scheduled.brought_forward.micros(),
        carried_micro_usdc: scheduled.carried.micros(),
        scheduled_at: timestamp(scheduled.scheduled_at.unix_micros()),
        signature,
        attempts: u32::try_from(record.submissions.len()).unwrap_or(u32::MAX),
        bank_message_id: record.bank_file.as_ref().map(|f| f.message_id.clone()),
        bank_end_to_end_id: (scheduled.method.rail() == rules::Rail::Bank)
            .then(|| gpunex_payouts::sepa_file::end_to_end_id(scheduled.payout_id)),
        bank_amount_cents: record.bank_file.as_ref().map(|f| f.amount_cents),
        bank_currency: record.bank_file.as_ref().map(|f| f.currency.clone()),
        bank_reference,
        slot,
        submitted_at: submitted_at.map(|t| timestamp(t.unix_micros())),
        settled_at: settled_at.map(|t| timestamp(t.unix_micros())),
        failure_code: record.failed.as_ref().map(|f| f.reason_code.clone()),
        failure_reason: record.failed.as_ref().map(|f| f.reason.clone()),
    }
}

fn rolled(r: &RolledForward) -> wp::RolledForwardView {
    wp::RolledForwardView {
        provider_id: r.provider_id,
        schedule: r.schedule,
        available_micro_usdc: r.available.micros(),
        minimum_micro_usdc: r.minimum.micros(),
    }
}

/// Which payouts of a batch a view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Start after this payout.
    pub after: Option<Uuid>,
    pub limit: usize,
}

impl Page {
    /// Every payout (the command line, the scheduler).
    pub const ALL: Page = Page {
        after: None,
        limit: usize::MAX,
    };
}

/// Payouts on one page of a batch over HTTP, unless `?limit=` says otherwise (at most 1,000).
pub const PAGE_DEFAULT: usize = 500;
pub const PAGE_MAX: usize = 1_000;

/// A recorded batch (read from the stored payouts projection), with the payouts of `page`.
pub async fn batch_view(
    store: &Store,
    batch: &StoredBatch,
    created: bool,
    page: Page,
) -> Result<wp::BatchView, ApiError> {
    let created_event = batch
        .created
        .as_ref()
        .ok_or(ApiError::NotFound("payout_batch"))?;
    // One more than shown says whether a next page exists.
    let mut payouts = store
        .batch_payouts(batch, page.after, page.limit.saturating_add(1))
        .await?
        .ok_or_else(|| {
            ApiError::query(
                "after",
                ErrorCode::InvalidCursor,
                "after: a payout of this batch (the next_after of the previous page)",
            )
        })?;
    let more = payouts.len() > page.limit;
    payouts.truncate(page.limit);
    let next_after = more
        .then(|| payouts.last().map(|r| r.scheduled.payout_id))
        .flatten();
    let payout_count = store.batch_statuses(batch).await?.values().sum();
    Ok(wp::BatchView {
        batch_id: created_event.batch_id,
        date: created_event.payout_date.to_string(),
        cutoff: timestamp(created_event.cutoff.unix_micros()),
        dry_run: false,
        created,
        payout_count,
        payouts: payouts.iter().map(payout_view).collect(),
        next_after,
        // On the first page only: later pages carry payouts.
        rolled_forward: if page.after.is_none() {
            batch.rolled_forward.iter().map(rolled).collect()
        } else {
            Vec::new()
        },
        without_method: Vec::new(),
        total_micro_usdc: created_event.total.micros(),
        total_usdc: created_event.total.to_string(),
        bank_files: batch.files.iter().map(|f| f.message_id.clone()).collect(),
    })
}

/// A recorded batch without its payouts, with how many are in each status.
pub async fn batch_summary(
    store: &Store,
    batch: &StoredBatch,
) -> Result<Option<wp::BatchSummary>, ApiError> {
    let Some(created) = &batch.created else {
        return Ok(None);
    };
    let statuses = store.batch_statuses(batch).await?;
    let payout_count = statuses.values().sum();
    let by_status = statuses
        .into_iter()
        .map(|(status, count)| (gpunex_store::payouts::status_text(status).to_owned(), count))
        .collect();
    Ok(Some(wp::BatchSummary {
        batch_id: created.batch_id,
        date: created.payout_date.to_string(),
        cutoff: timestamp(created.cutoff.unix_micros()),
        payout_count,
        rolled_forward_count: batch.rolled_forward.len() as u64,
        total_micro_usdc: created.total.micros(),
        total_usdc: created.total.to_string(),
        by_status,
        bank_files: batch.files.iter().map(|f| f.message_id.clone()).collect(),
    }))
}

/// A planned batch (a dry run): its payouts as they would be scheduled, after those an
/// interrupted run scheduled already (`existing`, found by id).
fn planned_view(existing: &HashMap<Uuid, PayoutRecord>, planned: &Planned) -> wp::BatchView {
    let mut payouts: Vec<wp::PayoutView> = planned
        .existing
        .iter()
        .filter_map(|id| existing.get(id))
        .map(payout_view)
        .collect();
    payouts.extend(planned.payouts.iter().map(|scheduled| {
        payout_view(&PayoutRecord {
            scheduled: scheduled.clone(),
            submissions: Vec::new(),
            bank_file: None,
            confirmed: None,
            failed: None,
            version: 0,
        })
    }));
    let total: i64 = payouts.iter().map(|p| p.amount_micro_usdc).sum();
    wp::BatchView {
        batch_id: planned.batch_id,
        date: planned.date.to_string(),
        cutoff: timestamp(planned.cutoff.unix_micros()),
        dry_run: true,
        created: false,
        payout_count: payouts.len() as u64,
        payouts,
        next_after: None,
        rolled_forward: planned.rolled_forward.iter().map(rolled).collect(),
        without_method: planned.without_method.clone(),
        total_micro_usdc: total,
        total_usdc: Usdc::from_micros(total).to_string(),
        bank_files: Vec::new(),
    }
}

/// Builds (or, with `dry_run`, shows) the batch of `date` (`gpunex_app::payout_run::run_batch`)
/// and answers its view: a date whose batch exists returns it unchanged (`created: false`).
pub async fn run_batch(
    store: &Store,
    credentials: &ReadModels,
    policy: &PayoutPolicy,
    date: NaiveDate,
    dry_run: bool,
    actor: &str,
) -> Result<wp::BatchView, ApiError> {
    let run = gpunex_app::payout_run::run_batch(store, credentials, policy, date, dry_run, actor)
        .await?
        .map_err(|refused| ApiError::Refused {
            code: refused.code(),
            detail: refused.to_string(),
        })?;
    let as_of = credentials.with_earnings(Earnings::position);
    match run {
        BatchRun::Exists { date, created } => {
            let batch = store
                .stored_batch_on(date, as_of)
                .await?
                .ok_or(ApiError::NotFound("payout_batch"))?;
            batch_view(store, &batch, created, Page::ALL).await
        }
        BatchRun::Planned { planned, dry_run } => {
            let existing = store.payouts_by_id(&planned.existing, as_of).await?;
            let mut view = planned_view(&existing, &planned);
            view.dry_run = dry_run;
            Ok(view)
        }
    }
}
