//! Ledger adjustments under dual control, on the command executor: a proposal starts its own
//! stream (`adjustment-{proposal_id}`); a decision is appended at the version that showed the
//! proposal undecided, so of two racing decisions (in any process) the later decides again and
//! is refused as already decided. The rules are `gpunex_domain::adjustments`.

use gpunex_domain::adjustments::{
    self, AdjustmentEvent, AdjustmentProposed, AdjustmentRejection, Decision,
};
use gpunex_domain::ledger::Posting;
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_projections::adjustments::Proposal;
use gpunex_store::Metadata;
use uuid::Uuid;

use crate::command::{Executor, Rejection, Retry, append_at};
use crate::{AppError, ReadModels};

/// A proposal's stream is new, so nothing can move it first; one attempt.
pub const PROPOSE_RETRY: Retry = Retry {
    name: "adjustment_propose",
    attempts: 1,
};

/// One more decision after another person's decision landed first (which the second refuses).
pub const DECIDE_RETRY: Retry = Retry {
    name: "adjustment_decide",
    attempts: 2,
};

/// Why an adjustment command was refused: the proposal is unknown, or the rules refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotFound,
    Rule(AdjustmentRejection),
}

impl From<AdjustmentRejection> for Refusal {
    fn from(rejection: AdjustmentRejection) -> Refusal {
        Refusal::Rule(rejection)
    }
}

pub type Outcome = Result<Result<Proposal, Rejection<Refusal>>, AppError>;

pub fn stream_of(proposal_id: Uuid) -> StreamId {
    StreamId::parse(format!("adjustment-{proposal_id}"))
        .unwrap_or_else(|_| unreachable!("a uuid makes a valid stream id"))
}

/// What a proposal says; the ids are the caller's (chosen once per request, so an answer
/// prepared before the append names them).
pub struct Propose<'a> {
    pub proposal_id: Uuid,
    pub entry_id: Uuid,
    pub reason: &'a str,
    pub evidence: &'a str,
    pub postings: Vec<Posting>,
}

/// Proposes an adjustment as `actor`. `prepare` sees the proposal right before its append.
pub async fn propose(
    exec: &Executor<'_>,
    request: Propose<'_>,
    actor: &str,
    mut prepare: impl FnMut(&Proposal),
) -> Outcome {
    let meta = Metadata::actor(actor);
    let stream = stream_of(request.proposal_id);
    let mut proposal = None;
    let outcome = exec
        .execute(
            PROPOSE_RETRY,
            || async { Ok(()) },
            |_: &(), now| {
                let proposed = adjustments::propose(
                    request.proposal_id,
                    request.entry_id,
                    request.reason,
                    request.evidence,
                    request.postings.clone(),
                    actor,
                    now,
                )?;
                let made = Proposal {
                    proposed: proposed.clone(),
                    decided: None,
                    position: 0,
                };
                prepare(&made);
                proposal = Some(made);
                Ok(vec![append_at(
                    stream.clone(),
                    0,
                    [DomainEvent::Adjustment(AdjustmentEvent::Proposed(proposed))],
                    &meta,
                )])
            },
        )
        .await?;
    Ok(outcome.and_then(|_| proposal.ok_or(Rejection::Rule(Refusal::NotFound))))
}

/// Whether `actor` is the person who proposed (the same token, or one token issued by the
/// other): operators hold one token each, and a second token of one's own does not make a
/// second person.
pub fn same_person(models: &ReadModels, actor: &str, proposed_by: &str) -> bool {
    if actor == proposed_by {
        return true;
    }
    let issued_by = |token: &str| {
        token
            .strip_prefix("token:")
            .and_then(|id| Uuid::parse_str(id).ok())
            .and_then(|id| models.get(&id))
            .map(|record| record.issued_by)
    };
    issued_by(actor).is_some_and(|by| by == proposed_by)
        || issued_by(proposed_by).is_some_and(|by| by == actor)
}

/// Decides the proposal `proposal_id` as `actor`: an approval posts its entry with the
/// decision, in one append. `prepare` sees the decided proposal right before its append.
pub async fn decide(
    exec: &Executor<'_>,
    proposal_id: Uuid,
    decision: Decision,
    reason: &str,
    actor: &str,
    mut prepare: impl FnMut(&Proposal),
) -> Outcome {
    let models = exec.models();
    let meta = Metadata::actor(actor);
    let stream = stream_of(proposal_id);
    let mut after = None;
    let outcome = exec
        .execute(
            DECIDE_RETRY,
            || {
                let stream = stream.clone();
                async move {
                    let version = models.at_stream(exec.store(), &stream).await?;
                    Ok((
                        models.with_adjustments(|a| a.get(&proposal_id).cloned()),
                        version,
                    ))
                }
            },
            |(current, version): &(Option<Proposal>, u64), now| {
                let current = current.as_ref().ok_or(Refusal::NotFound)?;
                let proposed: &AdjustmentProposed = &current.proposed;
                let (decided, posted) = adjustments::decide(
                    proposed,
                    current.decided.as_ref().map(|d| d.decision),
                    decision,
                    same_person(models, actor, &proposed.proposed_by),
                    actor,
                    reason,
                    now,
                )?;
                let made = Proposal {
                    decided: Some(decided.clone()),
                    ..current.clone()
                };
                prepare(&made);
                after = Some(made);
                let mut events = vec![DomainEvent::Adjustment(AdjustmentEvent::Decided(decided))];
                events.extend(posted.map(DomainEvent::AdjustmentPosted));
                Ok(vec![append_at(stream.clone(), *version, events, &meta)])
            },
        )
        .await?;
    Ok(outcome.and_then(|_| after.ok_or(Rejection::Rule(Refusal::NotFound))))
}
