//! A provider's payout settings and finance's settlement of a bank transfer, on the command
//! executor. Settings are appended at the settings stream's version
//! (`payout_settings-{provider_id}`), so of two racing changes the later is decided after the
//! first (and wins, as the later change). A confirmation or a return is appended at the payout
//! stream's version, so it settles a payout once even beside the Solana sender or a bank status
//! report imported at the same time.

use std::collections::HashMap;

use chrono::NaiveDate;
use gpunex_domain::money::MICROS_PER_CENT;
use gpunex_domain::payouts::{
    self, BankDetails, BankFileCreated, BankTransfer, Confirmation, PayoutEvent, PayoutMethod,
    PayoutSettingsChanged, Rail, Schedule,
};
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_payouts::bank_report::StatusReport;
use gpunex_payouts::sepa_file;
use gpunex_projections::payouts::BatchHead;
use gpunex_projections::payouts::{PayoutRecord, PayoutStatus};
use gpunex_store::Metadata;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::AppError;
use crate::command::{Executor, Rejection, Retry, append_at};
use crate::payout_run::{batch_stream, payout_stream};

/// How many times a settings change decides again after another change of the same provider's
/// settings landed first.
pub const SETTINGS_RETRY: Retry = Retry {
    name: "payout_settings",
    attempts: 3,
};

/// One more decision after another settlement of the payout landed first (which the second
/// refuses: the payout is no longer submitted).
pub const SETTLE_RETRY: Retry = Retry {
    name: "payout_settle",
    attempts: 2,
};

pub fn settings_stream(provider_id: Uuid) -> StreamId {
    StreamId::parse(format!("payout_settings-{provider_id}"))
        .unwrap_or_else(|_| unreachable!("a uuid makes a valid stream id"))
}

/// Why a payout command was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No approved provider with this id.
    UnknownProvider,
    /// No payout with this id.
    UnknownPayout,
    /// A Solana payout is settled on chain by the sender, not by a person.
    NotABankPayout,
    /// Only a payout in a bank file (submitted) can be confirmed or returned.
    NotSubmitted(PayoutStatus),
    /// The settlement's journal entry could not be built, or a transfer's amount is not a
    /// positive number of cents (in words).
    Amount(String),
    /// No payout batch on this date.
    UnknownBatch,
    /// The batch has no bank payouts waiting for a file.
    NothingToFile,
    /// The file could not be rendered (in words).
    BankFileInvalid(String),
    /// No bank file with the message id a status report answers.
    UnknownBankFile,
    /// A status report's amount or currency differs from what the file ordered (in words).
    ReportAmountMismatch(String),
    /// A status report settles a payout the other way than it already is (in words).
    ReportContradictsPayout(String),
    /// A status report names a transfer the file does not hold (in words).
    ReportTransactionUnknown(String),
}

/// Records the provider's new schedule and (already checked) method as `actor`. `prepare` sees
/// the change right before its append.
pub async fn set_settings(
    exec: &Executor<'_>,
    provider_id: Uuid,
    schedule: Schedule,
    method: PayoutMethod,
    actor: &str,
    mut prepare: impl FnMut(&PayoutSettingsChanged),
) -> Result<Result<PayoutSettingsChanged, Rejection<Refusal>>, AppError> {
    let models = exec.models();
    let meta = Metadata::actor(actor);
    let stream = settings_stream(provider_id);
    let mut decided = None;
    let outcome = exec
        .execute(
            SETTINGS_RETRY,
            || {
                let stream = stream.clone();
                async move {
                    let version = models.at_stream(exec.store(), &stream).await?;
                    Ok((models.provider_application(&provider_id).is_some(), version))
                }
            },
            |(provider_known, version): &(bool, u64), now| {
                if !provider_known {
                    return Err(Refusal::UnknownProvider);
                }
                let changed = PayoutSettingsChanged {
                    provider_id,
                    schedule,
                    method: method.clone(),
                    changed_at: now,
                    changed_by: actor.to_owned(),
                };
                prepare(&changed);
                decided = Some(changed.clone());
                Ok(vec![append_at(
                    stream.clone(),
                    *version,
                    [DomainEvent::Payout(PayoutEvent::SettingsChanged(changed))],
                    &meta,
                )])
            },
        )
        .await?;
    Ok(outcome.and_then(|_| decided.ok_or(Rejection::Rule(Refusal::UnknownProvider))))
}

/// How finance settles a bank transfer by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The transfer settled, with the bank's reference.
    Confirm { bank_reference: String },
    /// The bank returned it, with the ISO 20022 reason code and words; the amount goes back to
    /// the provider's balance.
    Return { reason_code: String, reason: String },
}

/// Whether a person may settle `record` by hand: a bank payout that is in a bank file.
pub fn check_settleable(record: &PayoutRecord) -> Result<(), Refusal> {
    if record.scheduled.method.rail() != Rail::Bank {
        return Err(Refusal::NotABankPayout);
    }
    match record.status() {
        PayoutStatus::Submitted => Ok(()),
        status => Err(Refusal::NotSubmitted(status)),
    }
}

/// Settles the bank payout `payout_id` as `actor`; answers the payout as the read models hold it
/// after the settlement.
pub async fn settle(
    exec: &Executor<'_>,
    payout_id: Uuid,
    settlement: &Settlement,
    actor: &str,
) -> Result<Result<PayoutRecord, Rejection<Refusal>>, AppError> {
    let models = exec.models();
    let meta = Metadata::actor(actor);
    let stream = payout_stream(payout_id);
    let outcome = exec
        .execute(
            SETTLE_RETRY,
            || {
                let stream = stream.clone();
                async move {
                    models.at_stream(exec.store(), &stream).await?;
                    payout_as_held(exec, payout_id).await
                }
            },
            |record: &Option<PayoutRecord>, now| {
                let record = record.as_ref().ok_or(Refusal::UnknownPayout)?;
                check_settleable(record)?;
                let amount =
                    |e: gpunex_domain::ledger::JournalError| Refusal::Amount(e.to_string());
                let event = match settlement {
                    Settlement::Confirm { bank_reference } => PayoutEvent::Confirmed(
                        record
                            .scheduled
                            .confirmed(
                                Confirmation::Bank {
                                    bank_reference: bank_reference.clone(),
                                    confirmed_by: actor.to_owned(),
                                },
                                now,
                            )
                            .map_err(amount)?,
                    ),
                    Settlement::Return {
                        reason_code,
                        reason,
                    } => PayoutEvent::Failed(
                        record
                            .scheduled
                            .failed(
                                "bank_returned",
                                format!("{reason_code}: {reason}"),
                                actor.to_owned(),
                                now,
                            )
                            .map_err(amount)?,
                    ),
                };
                Ok(vec![append_at(
                    stream.clone(),
                    record.version,
                    [DomainEvent::Payout(event)],
                    &meta,
                )])
            },
        )
        .await?;
    match outcome {
        Ok(_) => Ok(payout_as_held(exec, payout_id)
            .await?
            .ok_or(Rejection::Rule(Refusal::UnknownPayout))),
        Err(rejection) => Ok(Err(rejection)),
    }
}

/// A payout as the read models hold it now: from memory while it is open, from the stored
/// payouts projection (as of the in-memory position) once it is over.
pub async fn payout_as_held(
    exec: &Executor<'_>,
    payout_id: Uuid,
) -> Result<Option<PayoutRecord>, AppError> {
    let (open, as_of) = exec
        .models()
        .with_earnings(|e| (e.payouts().open_payout(payout_id).cloned(), e.position()));
    match open {
        Some(record) => Ok(Some(record)),
        None => Ok(exec.store().stored_payout(payout_id, as_of).await?),
    }
}

/// Most transfers in one file: the event that records it lists each (at most about 115 bytes of
/// JSON), and 500 stay under the 64 KiB payload limit with room for the debtor.
pub const TRANSFERS_PER_FILE: usize = 500;

/// One more decision after another file of the same batch landed first (the next decision
/// files what that one left).
pub const BANK_FILE_RETRY: Retry = Retry {
    name: "payout_bank_file",
    attempts: 3,
};

/// What finance files a batch's bank payouts with.
#[derive(Debug, Clone)]
pub struct BankFiling {
    pub date: NaiveDate,
    /// Euros per USDC.
    pub rate: Decimal,
    pub execution_date: NaiveDate,
    /// The platform's bank account.
    pub debtor: BankDetails,
}

/// What the next file of a batch is decided from: the batch and the payouts it would carry.
struct Unfiled {
    batch: Option<BatchHead>,
    payouts: Vec<PayoutRecord>,
}

/// The SEPA pain.001 file `file` records, rendered from it and the bank details of the payouts
/// it carries (`payout` finds each).
pub fn render_file<'r>(
    file: &BankFileCreated,
    payout: impl Fn(Uuid) -> Option<&'r PayoutRecord>,
) -> Result<String, Refusal> {
    let mut creditors = Vec::with_capacity(file.transfers.len());
    for transfer in &file.transfers {
        let record = payout(transfer.payout_id).ok_or(Refusal::UnknownPayout)?;
        let PayoutMethod::Bank(details) = &record.scheduled.method else {
            return Err(Refusal::NotABankPayout);
        };
        creditors.push((transfer, details));
    }
    let transfers: Vec<sepa_file::FileTransfer<'_>> = creditors
        .iter()
        .map(|(t, details)| sepa_file::FileTransfer {
            payout_id: t.payout_id,
            creditor: details,
            amount_cents: t.amount_cents,
        })
        .collect();
    let created = chrono::DateTime::from_timestamp_micros(file.created_at.unix_micros())
        .map(|t| t.naive_utc())
        .unwrap_or_default();
    sepa_file::credit_transfer_file(
        &file.debtor,
        &file.message_id,
        created,
        file.execution_date,
        &file.currency,
        &transfers,
    )
    .map_err(|e| Refusal::BankFileInvalid(e.to_string()))
}

/// The hex SHA-256 of a rendered file, as its event records it.
pub fn file_sha256(xml: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(xml.as_bytes()))
}

/// The next file of a batch: its bank payouts still scheduled (at most
/// [`TRANSFERS_PER_FILE`]), converted at the filing's rate, or `None` when none waits.
fn next_file(
    unfiled: &Unfiled,
    filing: &BankFiling,
    actor: &str,
    now: gpunex_domain::time::Timestamp,
) -> Result<Option<BankFileCreated>, Refusal> {
    let batch = unfiled.batch.as_ref().ok_or(Refusal::UnknownBatch)?;
    if unfiled.payouts.is_empty() {
        return Ok(None);
    }
    let mut transfers = Vec::with_capacity(unfiled.payouts.len());
    for record in &unfiled.payouts {
        let usdc_cents = record.scheduled.amount.micros() / MICROS_PER_CENT;
        let amount_cents = payouts::convert_cents(usdc_cents, filing.rate)
            .filter(|c| *c > 0)
            .ok_or_else(|| {
                Refusal::Amount(format!(
                    "payout {}: {usdc_cents} cents at {} is not a positive amount",
                    record.scheduled.payout_id, filing.rate
                ))
            })?;
        transfers.push(BankTransfer {
            payout_id: record.scheduled.payout_id,
            usdc_cents,
            amount_cents,
        });
    }
    let sequence = u32::try_from(batch.files.len() + 1).unwrap_or(u32::MAX);
    let mut file = BankFileCreated {
        batch_id: batch.created.batch_id,
        message_id: sepa_file::message_id(filing.date, sequence),
        currency: "EUR".to_owned(),
        rate: filing.rate,
        execution_date: filing.execution_date,
        debtor: filing.debtor.clone(),
        control_sum_cents: transfers.iter().map(|t| t.amount_cents).sum(),
        transfers,
        sha256: String::new(),
        // Whole seconds: the file's creation time has no fraction.
        created_at: gpunex_domain::time::Timestamp::from_unix_micros(
            now.unix_micros().div_euclid(1_000_000) * 1_000_000,
        ),
        created_by: actor.to_owned(),
    };
    let xml = render_file(&file, |id| {
        unfiled.payouts.iter().find(|r| r.scheduled.payout_id == id)
    })?;
    file.sha256 = file_sha256(&xml);
    Ok(Some(file))
}

/// Files every bank payout of the filing's batch that is not in a file yet, one
/// `payout.bank_file_created` per [`TRANSFERS_PER_FILE`] payouts, each appended at the batch
/// stream's version; answers the files written (`NothingToFile` when none was due).
pub async fn file_bank_payouts(
    exec: &Executor<'_>,
    filing: &BankFiling,
    actor: &str,
) -> Result<Result<Vec<BankFileCreated>, Rejection<Refusal>>, AppError> {
    let models = exec.models();
    let meta = Metadata::actor(actor);
    let stream = batch_stream(filing.date);
    let mut files = Vec::new();
    loop {
        let mut decided = None;
        let outcome = exec
            .execute(
                BANK_FILE_RETRY,
                || {
                    let stream = stream.clone();
                    async move {
                        models.at_stream(exec.store(), &stream).await?;
                        Ok(models.with_earnings(|e| {
                            let batch = e.payouts().batch_on(filing.date).cloned();
                            let payouts = batch
                                .iter()
                                .flat_map(|b| e.payouts().open_in_batch(b))
                                .filter(|r| {
                                    r.scheduled.method.rail() == Rail::Bank
                                        && r.status() == PayoutStatus::Scheduled
                                })
                                .take(TRANSFERS_PER_FILE)
                                .cloned()
                                .collect();
                            Unfiled { batch, payouts }
                        }))
                    }
                },
                |unfiled: &Unfiled, now| {
                    decided = None;
                    let Some(file) = next_file(unfiled, filing, actor, now)? else {
                        return Ok(Vec::new());
                    };
                    let version = unfiled.batch.as_ref().map_or(0, |b| b.version);
                    decided = Some(file.clone());
                    Ok(vec![append_at(
                        stream.clone(),
                        version,
                        [DomainEvent::Payout(PayoutEvent::BankFileCreated(file))],
                        &meta,
                    )])
                },
            )
            .await?;
        if let Err(refusal) = outcome {
            return Ok(Err(refusal));
        }
        match decided {
            Some(file) => files.push(file),
            None => break,
        }
    }
    if files.is_empty() {
        return Ok(Err(Rejection::Rule(Refusal::NothingToFile)));
    }
    Ok(Ok(files))
}

/// What a status report does to one payout of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Confirm,
    Fail { code: String, text: String },
    Pending(String),
    Unchanged,
}

/// Decides each payout of the file from the report, refusing a report that contradicts the
/// file: an unknown transfer, another amount or currency, or a payout already settled the
/// other way. Transfers the report leaves open (listed nowhere, no final status) are left out.
fn report_changes(
    file: &BankFileCreated,
    payout: impl Fn(Uuid) -> Option<PayoutRecord>,
    report: &StatusReport,
) -> Result<Vec<(PayoutRecord, Change)>, Refusal> {
    use gpunex_payouts::bank_report::Outcome;
    let mut listed: std::collections::HashMap<&str, &gpunex_payouts::bank_report::TransferStatus> =
        report
            .transfers
            .iter()
            .map(|t| (t.end_to_end_id.as_str(), t))
            .collect();
    let mut changes = Vec::with_capacity(file.transfers.len());
    for transfer in &file.transfers {
        let end_to_end = sepa_file::end_to_end_id(transfer.payout_id);
        let record = payout(transfer.payout_id).ok_or(Refusal::UnknownPayout)?;
        let outcome = match listed.remove(end_to_end.as_str()) {
            Some(status) => {
                let amount_differs = status
                    .amount_cents
                    .is_some_and(|cents| cents != transfer.amount_cents);
                let currency_differs = status
                    .currency
                    .as_deref()
                    .is_some_and(|c| c != file.currency);
                if amount_differs || currency_differs {
                    return Err(Refusal::ReportAmountMismatch(format!(
                        "transfer {end_to_end}: the report says {} {}, the file ordered {} cents {}",
                        status
                            .amount_cents
                            .map_or("?".to_owned(), |c| c.to_string()),
                        status.currency.as_deref().unwrap_or("?"),
                        transfer.amount_cents,
                        file.currency
                    )));
                }
                Some(status.outcome.clone())
            }
            None => report.rest.clone(),
        };
        let status = record.status();
        let change = match (outcome, status) {
            (None, PayoutStatus::Submitted) => continue,
            (None, _) => Change::Unchanged,
            (Some(Outcome::Pending(code)), PayoutStatus::Submitted) => Change::Pending(code),
            (Some(Outcome::Pending(_)), _) => Change::Unchanged,
            (Some(Outcome::Settled), PayoutStatus::Confirmed) => Change::Unchanged,
            (Some(Outcome::Rejected { .. }), PayoutStatus::Failed) => Change::Unchanged,
            (Some(Outcome::Settled), PayoutStatus::Submitted) => Change::Confirm,
            (Some(Outcome::Rejected { code, text }), PayoutStatus::Submitted) => {
                Change::Fail { code, text }
            }
            (Some(outcome), status) => {
                return Err(Refusal::ReportContradictsPayout(
                    format!(
                        "payout {} is {status:?} but the report says {outcome:?}: settle it by hand",
                        transfer.payout_id
                    )
                    .to_lowercase(),
                ));
            }
        };
        changes.push((record, change));
    }
    if let Some(unknown) = listed.keys().next() {
        return Err(Refusal::ReportTransactionUnknown(format!(
            "the report names the transfer {unknown}, which is not in {}",
            file.message_id
        )));
    }
    Ok(changes)
}

/// Decides again after another writer settled some of the same payouts first (those are then
/// unchanged, or contradict the report).
pub const STATUS_REPORT_RETRY: Retry = Retry {
    name: "bank_status_report",
    attempts: 3,
};

/// What importing a status report did to each payout of its file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportImported {
    /// The payout date of the batch the file belongs to.
    pub batch_date: Option<NaiveDate>,
    pub confirmed: Vec<Uuid>,
    pub failed: Vec<Uuid>,
    /// Still submitted, with the bank's interim status.
    pub pending: Vec<(Uuid, String)>,
    /// Already as the report says (an import repeated changes nothing).
    pub unchanged: Vec<Uuid>,
}

/// The file a report answers and its payouts as the read models hold them now.
struct ReportState {
    date: NaiveDate,
    file: BankFileCreated,
    payouts: HashMap<Uuid, PayoutRecord>,
}

/// The file `message_id` and its payouts as the read models hold them now: the batch head and
/// open payouts from memory, the file and the payouts that are over from the stored payouts
/// projection (as of the in-memory position).
async fn report_state(
    exec: &Executor<'_>,
    message_id: &str,
) -> Result<Option<ReportState>, AppError> {
    let (head, as_of) = exec
        .models()
        .with_earnings(|e| (e.payouts().batch_of_file(message_id).cloned(), e.position()));
    let Some(head) = head else {
        return Ok(None);
    };
    let date = head.created.payout_date;
    let Some(file) = exec
        .store()
        .stored_batch_on(date, as_of)
        .await?
        .and_then(|b| b.files.into_iter().find(|f| f.message_id == message_id))
    else {
        return Ok(None);
    };
    let ids: Vec<Uuid> = file.transfers.iter().map(|t| t.payout_id).collect();
    let (mut payouts, closed): (HashMap<Uuid, PayoutRecord>, Vec<Uuid>) =
        exec.models().with_earnings(|e| {
            let mut open = HashMap::new();
            let mut closed = Vec::new();
            for id in &ids {
                match e.payouts().open_payout(*id) {
                    Some(record) => {
                        open.insert(*id, record.clone());
                    }
                    None => closed.push(*id),
                }
            }
            (open, closed)
        });
    if !closed.is_empty() {
        payouts.extend(exec.store().payouts_by_id(&closed, as_of).await?);
    }
    Ok(Some(ReportState {
        date,
        file,
        payouts,
    }))
}

/// Imports the bank's status report on one of the platform's files as `actor`: settled
/// transfers confirm their payouts (bank reference: the report's `MsgId`), rejected ones fail
/// (the amount returns to the provider's balance), the rest stay submitted. The whole report is
/// checked before anything is written; then the payouts it settles are appended at their
/// streams' versions, at most [`gpunex_store::APPEND_STREAMS_MAX`] per append, each append
/// decided again from what the read models hold should another writer settle one first.
pub async fn import_status_report(
    exec: &Executor<'_>,
    report: &StatusReport,
    actor: &str,
) -> Result<Result<ReportImported, Rejection<Refusal>>, AppError> {
    let meta = Metadata::actor(actor);
    let reference = report.message_id.clone();
    let mut imported = ReportImported::default();
    loop {
        let mut written: Vec<(Uuid, bool)> = Vec::new();
        let mut last: Option<Vec<(PayoutRecord, Change)>> = None;
        let outcome = exec
            .execute(
                STATUS_REPORT_RETRY,
                || async move { report_state(exec, &report.original_message_id).await },
                |state: &Option<ReportState>, now| {
                    written.clear();
                    let state = state.as_ref().ok_or(Refusal::UnknownBankFile)?;
                    imported.batch_date = Some(state.date);
                    let changes =
                        report_changes(&state.file, |id| state.payouts.get(&id).cloned(), report)?;
                    let amount =
                        |e: gpunex_domain::ledger::JournalError| Refusal::Amount(e.to_string());
                    let mut appends = Vec::new();
                    for (record, change) in &changes {
                        if appends.len() == gpunex_store::APPEND_STREAMS_MAX {
                            break;
                        }
                        let scheduled = &record.scheduled;
                        let event = match change {
                            Change::Unchanged | Change::Pending(_) => continue,
                            Change::Confirm => PayoutEvent::Confirmed(
                                scheduled
                                    .confirmed(
                                        Confirmation::Bank {
                                            bank_reference: reference.clone(),
                                            confirmed_by: actor.to_owned(),
                                        },
                                        now,
                                    )
                                    .map_err(amount)?,
                            ),
                            Change::Fail { code, text } => {
                                let reason = if text.is_empty() {
                                    format!("{code} (status report {reference})")
                                } else {
                                    format!("{code}: {text} (status report {reference})")
                                };
                                PayoutEvent::Failed(
                                    scheduled
                                        .failed("bank_rejected", reason, actor.to_owned(), now)
                                        .map_err(amount)?,
                                )
                            }
                        };
                        written.push((scheduled.payout_id, matches!(change, Change::Confirm)));
                        appends.push(append_at(
                            payout_stream(scheduled.payout_id),
                            record.version,
                            [DomainEvent::Payout(event)],
                            &meta,
                        ));
                    }
                    last = Some(changes);
                    Ok(appends)
                },
            )
            .await?;
        if let Err(refusal) = outcome {
            return Ok(Err(refusal));
        }
        if written.is_empty() {
            // Nothing left to write: what the report leaves is pending or unchanged.
            for (record, change) in last.unwrap_or_default() {
                let id = record.scheduled.payout_id;
                let ours = imported.confirmed.contains(&id) || imported.failed.contains(&id);
                match change {
                    Change::Pending(status) => imported.pending.push((id, status)),
                    Change::Unchanged if !ours => imported.unchanged.push(id),
                    _ => {}
                }
            }
            return Ok(Ok(imported));
        }
        for (id, confirmed) in written {
            if confirmed {
                imported.confirmed.push(id);
            } else {
                imported.failed.push(id);
            }
        }
    }
}
