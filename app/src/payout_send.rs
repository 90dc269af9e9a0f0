//! The Solana sender: drives every open Solana payout to `finalized` or failure, so that no
//! payout is ever paid twice, whatever crashes where.
//!
//! For each open payout, one step at a time:
//! - **scheduled**: take a recent blockhash, build and sign the transfer, record
//!   `payout.submitted` (the signed bytes, the signature, the last valid block height), and only
//!   then send it. A crash after the record and before or after the send is harmless: the next
//!   step finds the record.
//! - **submitted**: look up every attempt's signature (searching history).
//!   - one is `finalized`: record `payout.confirmed` (its slot), or `payout.failed` if the
//!     transaction failed on chain (fees are charged even then; the amount returns to the
//!     balance);
//!   - one is known but not finalized: wait;
//!   - none is known and the finalized block height is past the last attempt's last valid block
//!     height: that transaction can never land, so sign a new one (a new attempt, recorded
//!     before it is sent);
//!   - none is known and the blockhash is still valid: rebroadcast the same bytes.

use std::time::Duration;

use gpunex_domain::DomainEvent;
use gpunex_domain::payouts::{
    self as rules, Confirmation, PayoutEvent, PayoutMethod, PayoutSubmitted, Submission,
};
use gpunex_payouts::solana::{self, Commitment, Rpc, Treasury};
use gpunex_projections::payouts::{PayoutRecord, PayoutStatus};
use gpunex_store::{Metadata, Store};
use uuid::Uuid;

use crate::ReadModels;
use crate::command::{Executor, Rejection, Retry, append_at};
use crate::payout_run::payout_stream;

const ACTOR: &str = "system:solana-sender";

/// A configured Solana rail.
#[derive(Debug)]
pub struct SolanaRail {
    pub rpc: Rpc,
    pub treasury: Treasury,
    pub mint: solana_pubkey::Pubkey,
    pub poll: Duration,
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassReport {
    pub submitted: u32,
    pub rebroadcast: u32,
    pub resigned: u32,
    pub confirmed: u32,
    pub failed: u32,
    /// Open Solana payouts left after the pass.
    pub open: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Solana(#[from] solana::SolanaError),
    #[error("the log refused the record: {0}")]
    Append(#[from] gpunex_store::AppendError),
    #[error(transparent)]
    App(#[from] crate::AppError),
    #[error(transparent)]
    Store(#[from] gpunex_store::StoreError),
    #[error("payout {0}: {1}")]
    Payout(Uuid, String),
}

/// Records one step of a payout at the version the sender read it at. Decided from the chain
/// once, so not decided again: when another sender moved this payout first, its record stands
/// and the payout is looked at again next pass (`false`).
async fn record(
    store: &Store,
    credentials: &ReadModels,
    payout: &PayoutRecord,
    event: PayoutEvent,
) -> Result<bool, SendError> {
    let meta = Metadata::actor(ACTOR);
    let mut event = Some(event);
    let outcome = Executor::new(store, credentials)
        .execute(
            SENDER_RECORD,
            || async { Ok(()) },
            |_: &(), _now| {
                Ok::<_, std::convert::Infallible>(
                    event
                        .take()
                        .map(|event| {
                            append_at(
                                payout_stream(payout.scheduled.payout_id),
                                payout.version,
                                [DomainEvent::Payout(event)],
                                &meta,
                            )
                        })
                        .into_iter()
                        .collect(),
                )
            },
        )
        .await?;
    match outcome {
        Ok(_) => Ok(true),
        Err(Rejection::Contended { .. }) => Ok(false),
        Err(Rejection::IdTaken { event_id, reason }) => Err(SendError::Append(
            gpunex_store::AppendError::IdempotencyConflict { event_id, reason },
        )),
        Err(Rejection::Rule(never)) => match never {},
    }
}

/// One attempt: a step recorded after another sender's is not decided again (see `record`).
pub const SENDER_RECORD: Retry = Retry {
    name: "solana_sender_record",
    attempts: 1,
};

/// Signs a new attempt, records it, then sends it.
async fn submit(
    store: &Store,
    credentials: &ReadModels,
    rail: &SolanaRail,
    payout: &PayoutRecord,
) -> Result<bool, SendError> {
    let scheduled = &payout.scheduled;
    let PayoutMethod::Solana { wallet } = &scheduled.method else {
        return Err(SendError::Payout(
            scheduled.payout_id,
            "not a Solana payout".to_owned(),
        ));
    };
    let wallet = solana::pubkey(wallet)?;
    let amount = u64::try_from(scheduled.amount.micros())
        .map_err(|_| SendError::Payout(scheduled.payout_id, "negative amount".to_owned()))?;
    let (blockhash, last_valid_block_height) = rail.rpc.latest_blockhash().await?;
    let signed = solana::transfer(
        &rail.treasury,
        &rail.mint,
        &wallet,
        amount,
        scheduled.payout_id,
        blockhash,
    )?;
    let attempt = u32::try_from(payout.submissions.len()).unwrap_or(u32::MAX - 1) + 1;
    let submitted = PayoutSubmitted {
        payout_id: scheduled.payout_id,
        submission: Submission::Solana {
            signature: signed.signature.clone(),
            last_valid_block_height,
            transaction: signed.transaction.clone(),
            destination: signed.destination.clone(),
            attempt,
        },
        submitted_at: store.clock().now(),
    };
    if !record(
        store,
        credentials,
        payout,
        PayoutEvent::Submitted(submitted),
    )
    .await?
    {
        return Ok(false);
    }
    tracing::info!(payout_id = %scheduled.payout_id, signature = %signed.signature, attempt, "payout transaction recorded; sending");
    if let Err(error) = rail.rpc.send(&signed.transaction).await {
        // Recorded: the next pass looks it up and rebroadcasts it.
        tracing::warn!(payout_id = %scheduled.payout_id, %error, "send failed; will rebroadcast");
    }
    Ok(true)
}

/// One step for one open Solana payout.
async fn step(
    store: &Store,
    credentials: &ReadModels,
    rail: &SolanaRail,
    payout: &PayoutRecord,
    report: &mut PassReport,
) -> Result<(), SendError> {
    let scheduled = &payout.scheduled;
    if payout.status() == PayoutStatus::Scheduled {
        if submit(store, credentials, rail, payout).await? {
            report.submitted += 1;
        }
        return Ok(());
    }
    let attempts: Vec<(&str, u64, &str)> = payout
        .submissions
        .iter()
        .map(|s| match &s.submission {
            Submission::Solana {
                signature,
                last_valid_block_height,
                transaction,
                ..
            } => (
                signature.as_str(),
                *last_valid_block_height,
                transaction.as_str(),
            ),
        })
        .collect();
    let signatures: Vec<String> = attempts.iter().map(|a| a.0.to_owned()).collect();
    let statuses = rail.rpc.signature_statuses(&signatures).await?;
    let landed = signatures
        .iter()
        .zip(&statuses)
        .find_map(|(signature, status)| status.as_ref().map(|s| (signature, s)));
    if let Some((signature, status)) = landed {
        if status.commitment != Commitment::Finalized {
            return Ok(());
        }
        let now = store.clock().now();
        let money = |e: gpunex_domain::ledger::JournalError| {
            SendError::Payout(scheduled.payout_id, e.to_string())
        };
        let event = match &status.err {
            None => {
                let confirmation = Confirmation::Solana {
                    signature: signature.clone(),
                    slot: status.slot,
                };
                PayoutEvent::Confirmed(scheduled.confirmed(confirmation, now).map_err(money)?)
            }
            Some(err) => PayoutEvent::Failed(
                scheduled
                    .failed(
                        "transaction_failed",
                        format!(
                            "transaction {signature} failed on chain in slot {}: {err}",
                            status.slot
                        ),
                        ACTOR.to_owned(),
                        now,
                    )
                    .map_err(money)?,
            ),
        };
        let confirmed = matches!(event, PayoutEvent::Confirmed(_));
        if record(store, credentials, payout, event).await? {
            if confirmed {
                report.confirmed += 1;
            } else {
                report.failed += 1;
            }
        }
        return Ok(());
    }
    let Some(&(_, last_valid, transaction)) = attempts.last() else {
        return Ok(());
    };
    let finalized_height = rail.rpc.block_height(Commitment::Finalized).await?;
    if finalized_height > last_valid {
        // Expired and unknown everywhere: it can never land. Only now may it be re-signed.
        if submit(store, credentials, rail, payout).await? {
            report.resigned += 1;
        }
    } else {
        if let Err(error) = rail.rpc.send(transaction).await {
            tracing::warn!(payout_id = %scheduled.payout_id, %error, "rebroadcast failed");
        }
        report.rebroadcast += 1;
    }
    Ok(())
}

fn open_solana(credentials: &ReadModels) -> Vec<PayoutRecord> {
    credentials.with_earnings(|e| {
        e.payouts()
            .open()
            .into_iter()
            .filter(|r| r.scheduled.method.rail() == rules::Rail::Solana)
            .cloned()
            .collect()
    })
}

/// One pass over the open Solana payouts. A payout whose step fails (the RPC node down) is
/// retried next pass; the others go on.
pub async fn pass(
    store: &Store,
    credentials: &ReadModels,
    rail: &SolanaRail,
) -> Result<PassReport, SendError> {
    credentials.wait_for(store.head_position().await?).await?;
    let mut report = PassReport::default();
    for payout in open_solana(credentials) {
        if let Err(error) = step(store, credentials, rail, &payout, &mut report).await {
            tracing::warn!(payout_id = %payout.scheduled.payout_id, %error, "payout step failed; retrying next pass");
        }
    }
    report.open = u32::try_from(open_solana(credentials).len()).unwrap_or(u32::MAX);
    Ok(report)
}

/// Passes forever, `rail.poll` apart (the server's background sender).
pub async fn run(store: Store, credentials: ReadModels, rail: SolanaRail) {
    tracing::info!(treasury = %rail.treasury.pubkey(), mint = %rail.mint, "Solana payout sender running");
    loop {
        if let Err(error) = pass(&store, &credentials, &rail).await {
            tracing::warn!(%error, "Solana payout pass failed");
        }
        tokio::time::sleep(rail.poll).await;
    }
}
