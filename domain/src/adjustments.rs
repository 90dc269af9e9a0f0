//! Ledger adjustments under dual control: a goodwill credit, a correction, a chargeback. One
//! person proposes a balanced journal entry with a reason and evidence; another approves it (the
//! entry is then posted as `ledger.adjustment_posted`, which earnings, statements, payouts and
//! `audit reconcile` account for like any posting) or rejects it. Nothing moves money until the
//! approval, and a proposal is decided once.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::codes::ErrorCode;
use crate::ledger::{Account, JournalEntry, JournalError, Posting};
use crate::time::Timestamp;

/// Longest reason of a proposal, a decision or a posted adjustment, in characters.
pub const ADJUSTMENT_REASON_CHARS_MAX: usize = 500;
/// Longest evidence of a proposal, in characters.
pub const ADJUSTMENT_EVIDENCE_CHARS_MAX: usize = 2_000;

/// `ledger.adjustment_posted`: finance corrects the books by hand, a balanced journal entry with
/// a reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentPosted {
    pub entry_id: Uuid,
    pub reason: String,
    pub postings: JournalEntry,
}

/// `ledger.adjustment_proposed`: an entry waiting for a second person's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentProposed {
    pub proposal_id: Uuid,
    /// The entry id the posting will carry once approved.
    pub entry_id: Uuid,
    pub reason: String,
    /// What supports it: a ticket, a bank statement line, an agreement (as text).
    pub evidence: String,
    pub postings: JournalEntry,
    /// `token:<id>` of the proposer.
    pub proposed_by: String,
    pub proposed_at: Timestamp,
}

/// How a proposal was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approved,
    Rejected,
}

/// `ledger.adjustment_decided`: the second person's decision. An approval is appended with the
/// `ledger.adjustment_posted` it causes, atomically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentDecided {
    pub proposal_id: Uuid,
    pub decision: Decision,
    pub decided_by: String,
    /// Why (required to reject; optional to approve).
    pub reason: String,
    pub decided_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdjustmentEvent {
    Proposed(AdjustmentProposed),
    Decided(AdjustmentDecided),
}

/// Why a proposal or a decision is refused. Nothing is recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdjustmentRejection {
    #[error("the {field} must be 1 to {max} characters")]
    InvalidText { field: &'static str, max: usize },
    #[error("the postings do not make a journal entry: {0}")]
    Unbalanced(JournalError),
    #[error(
        "an adjustment may not touch {0}: payout clearing and the treasury move only with payouts"
    )]
    AccountNotAdjustable(String),
    #[error("the adjustment was already {0}")]
    AlreadyDecided(&'static str),
    #[error("the person who proposed an adjustment may not decide it: a second person must")]
    SamePerson,
}

impl AdjustmentRejection {
    pub fn code(&self) -> ErrorCode {
        match self {
            AdjustmentRejection::InvalidText { .. } => ErrorCode::InvalidText,
            AdjustmentRejection::Unbalanced(_) => ErrorCode::UnbalancedEntry,
            AdjustmentRejection::AccountNotAdjustable(_) => ErrorCode::AccountNotAdjustable,
            AdjustmentRejection::AlreadyDecided(_) => ErrorCode::AlreadyDecided,
            AdjustmentRejection::SamePerson => ErrorCode::SamePerson,
        }
    }
}

fn text(
    field: &'static str,
    value: &str,
    required: bool,
    max: usize,
) -> Result<String, AdjustmentRejection> {
    let value = value.trim();
    let chars = value.chars().count();
    if (required && chars == 0) || chars > max {
        return Err(AdjustmentRejection::InvalidText { field, max });
    }
    Ok(value.to_owned())
}

/// Checks and builds a proposal. Adjustments move money between providers' payables, renters'
/// receivables, platform revenue and platform adjustments; never payout clearing or the
/// treasury, whose balances belong to payouts in flight and money held.
pub fn propose(
    proposal_id: Uuid,
    entry_id: Uuid,
    reason: &str,
    evidence: &str,
    lines: Vec<Posting>,
    proposed_by: &str,
    at: Timestamp,
) -> Result<AdjustmentProposed, AdjustmentRejection> {
    let reason = text("reason", reason, true, ADJUSTMENT_REASON_CHARS_MAX)?;
    let evidence = text("evidence", evidence, true, ADJUSTMENT_EVIDENCE_CHARS_MAX)?;
    if let Some(line) = lines
        .iter()
        .find(|l| matches!(l.account, Account::PayoutClearing(_) | Account::Treasury))
    {
        return Err(AdjustmentRejection::AccountNotAdjustable(
            line.account.to_string(),
        ));
    }
    let postings = JournalEntry::new(lines).map_err(AdjustmentRejection::Unbalanced)?;
    Ok(AdjustmentProposed {
        proposal_id,
        entry_id,
        reason,
        evidence,
        postings,
        proposed_by: proposed_by.to_owned(),
        proposed_at: at,
    })
}

/// Decides `proposal`: `decided` is its decision so far, `same_person` whether the decider is
/// the proposer (the same token, or one issued by the other). An approval also gives the posting.
pub fn decide(
    proposal: &AdjustmentProposed,
    decided: Option<Decision>,
    decision: Decision,
    same_person: bool,
    decided_by: &str,
    reason: &str,
    at: Timestamp,
) -> Result<(AdjustmentDecided, Option<AdjustmentPosted>), AdjustmentRejection> {
    if let Some(decided) = decided {
        return Err(AdjustmentRejection::AlreadyDecided(match decided {
            Decision::Approved => "approved",
            Decision::Rejected => "rejected",
        }));
    }
    if same_person {
        return Err(AdjustmentRejection::SamePerson);
    }
    let reason = text(
        "reason",
        reason,
        decision == Decision::Rejected,
        ADJUSTMENT_REASON_CHARS_MAX,
    )?;
    let posted = (decision == Decision::Approved).then(|| AdjustmentPosted {
        entry_id: proposal.entry_id,
        reason: proposal.reason.clone(),
        postings: proposal.postings.clone(),
    });
    Ok((
        AdjustmentDecided {
            proposal_id: proposal.proposal_id,
            decision,
            decided_by: decided_by.to_owned(),
            reason,
            decided_at: at,
        },
        posted,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Usdc;

    fn credit(provider: Uuid, micros: i64) -> Vec<Posting> {
        vec![
            Posting::debit(Account::PlatformAdjustments, Usdc::from_micros(micros)),
            Posting::credit(
                Account::ProviderPayable(provider),
                Usdc::from_micros(micros),
            ),
        ]
    }

    fn proposal() -> AdjustmentProposed {
        propose(
            Uuid::from_u128(1),
            Uuid::from_u128(2),
            "goodwill for the outage of 1 December",
            "ticket 4711",
            credit(Uuid::from_u128(9), 5_000_000),
            "token:a",
            Timestamp::from_unix_micros(0),
        )
        .unwrap()
    }

    #[test]
    fn a_proposal_is_a_balanced_entry_with_reason_and_evidence() {
        let at = Timestamp::from_unix_micros(0);
        let id = Uuid::from_u128(1);
        let mut unbalanced = credit(Uuid::from_u128(9), 5);
        unbalanced[1].amount_micro_usdc = Usdc::from_micros(4);
        for (reason, evidence, lines, code) in [
            ("", "x", credit(id, 5), "invalid_text"),
            ("r", " ", credit(id, 5), "invalid_text"),
            ("r", "x", unbalanced, "unbalanced_entry"),
            ("r", "x", Vec::new(), "unbalanced_entry"),
            (
                "r",
                "x",
                vec![
                    Posting::debit(Account::Treasury, Usdc::from_micros(5)),
                    Posting::credit(Account::ProviderPayable(id), Usdc::from_micros(5)),
                ],
                "account_not_adjustable",
            ),
        ] {
            let refused = propose(id, id, reason, evidence, lines, "token:a", at).unwrap_err();
            assert_eq!(refused.code(), code, "{refused}");
        }
    }

    #[test]
    fn a_second_person_decides_once() {
        let at = Timestamp::from_unix_micros(1);
        let proposal = proposal();
        let approve = |decided, same| {
            decide(
                &proposal,
                decided,
                Decision::Approved,
                same,
                "token:b",
                "",
                at,
            )
        };
        assert_eq!(
            approve(None, true).unwrap_err(),
            AdjustmentRejection::SamePerson
        );
        assert!(matches!(
            approve(Some(Decision::Rejected), false),
            Err(AdjustmentRejection::AlreadyDecided("rejected"))
        ));
        let (decided, posted) = approve(None, false).unwrap();
        assert_eq!(decided.decision, Decision::Approved);
        let posted = posted.unwrap();
        assert_eq!(
            (posted.entry_id, &posted.postings),
            (proposal.entry_id, &proposal.postings)
        );
        // A rejection needs its reason and posts nothing.
        assert!(
            decide(
                &proposal,
                None,
                Decision::Rejected,
                false,
                "token:b",
                " ",
                at
            )
            .is_err()
        );
        let (rejected, posted) = decide(
            &proposal,
            None,
            Decision::Rejected,
            false,
            "token:b",
            "no evidence",
            at,
        )
        .unwrap();
        assert_eq!((rejected.decision, posted), (Decision::Rejected, None));
    }
}
