//! The bank's answer to a credit transfer file: the ISO 20022 Customer Payment Status Report
//! (pain.002, parsed by the `sepa` crate), reduced to what settles a payout.
//!
//! - The report names our file by `OrgnlMsgId` and each transfer by `OrgnlEndToEndId` (the
//!   payout id in its 32-hex-digit form); a transfer it cannot be matched by is an error, never
//!   guessed.
//! - A transaction's status is its own `TxSts`, or else its payment information's `PmtInfSts`,
//!   or else the file's `GrpSts` (ISO 20022: the status at the higher level applies to what
//!   does not carry its own).
//! - `ACSC` (settlement completed) and `ACCC` (credited to the creditor's account) settle a
//!   transfer, `RJCT` rejects it with its reason code; every other status (`ACTC`, `ACCP`, `ACSP`, `ACWC`, `PDNG`, payee verification codes) leaves
//!   it pending.
//! - A status at the group or payment-information level that is final (settled or rejected)
//!   applies to the file's transfers the report does not list one by one.

use gpunex_domain::codes::ErrorCode;
use sepa::pain002::{OriginalMessageType, PaymentStatus, ReasonCode, parse_pain002};

/// What the bank says of a transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `ACSC`: the money reached the creditor's bank.
    Settled,
    /// `RJCT`: not executed; `code` is the ISO 20022 status reason (`AC04`, ...).
    Rejected { code: String, text: String },
    /// Accepted or in progress, not final: the status code as sent.
    Pending(String),
}

/// One transfer as the report lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferStatus {
    pub end_to_end_id: String,
    pub outcome: Outcome,
    /// The amount the report quotes for the transfer, in cents, with its currency.
    pub amount_cents: Option<i64>,
    pub currency: Option<String>,
}

/// A status report, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusReport {
    /// The report's own `MsgId`.
    pub message_id: String,
    /// The `MsgId` of the file it answers.
    pub original_message_id: String,
    /// The transfers listed one by one.
    pub transfers: Vec<TransferStatus>,
    /// A final status for the transfers not listed one by one.
    pub rest: Option<Outcome>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReportError {
    #[error("not a readable pain.002 status report: {0}")]
    Unreadable(String),
    #[error("the report answers a {0} message, not a credit transfer file (pain.001)")]
    NotCreditTransfer(String),
    #[error("a transaction status without OrgnlEndToEndId cannot be matched to a payout")]
    Unmatched,
    #[error("the report lists the transfer {0} twice")]
    Duplicate(String),
}

impl ReportError {
    /// The stable code of the error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ReportError::Unreadable(_) => ErrorCode::InvalidStatusReport,
            ReportError::NotCreditTransfer(_) => ErrorCode::NotACreditTransferReport,
            ReportError::Unmatched => ErrorCode::ReportTransactionUnmatched,
            ReportError::Duplicate(_) => ErrorCode::ReportTransactionTwice,
        }
    }
}

fn reason(codes: &[ReasonCode], info: &[String], status: &PaymentStatus) -> Outcome {
    let code = codes
        .first()
        .map_or_else(|| status.as_code().to_owned(), |c| c.as_code().to_owned());
    let mut text: Vec<String> = codes.iter().skip(1).map(|c| c.to_string()).collect();
    if let Some(first) = codes.first() {
        text.insert(0, first.to_string());
    }
    text.extend(info.iter().cloned());
    Outcome::Rejected {
        code,
        text: text.join("; "),
    }
}

fn outcome(status: &PaymentStatus, codes: &[ReasonCode], info: &[String]) -> Outcome {
    match status {
        PaymentStatus::Acsc => Outcome::Settled,
        // Accepted, credited to the creditor's account: settled too (not in every library's list).
        PaymentStatus::Other(code) if code == "ACCC" => Outcome::Settled,
        PaymentStatus::Rjct => reason(codes, info, status),
        other => Outcome::Pending(other.as_code().to_owned()),
    }
}

/// A final outcome only (settled or rejected): what applies to transfers not listed.
fn final_outcome(
    status: Option<&PaymentStatus>,
    codes: &[ReasonCode],
    info: &[String],
) -> Option<Outcome> {
    status
        .map(|s| outcome(s, codes, info))
        .filter(|o| !matches!(o, Outcome::Pending(_)))
}

/// Reads a pain.002 report (any generation the `sepa` crate knows: `pain.002.001.10`, the reply
/// to our `pain.001.001.09`, and the `.03` ones).
pub fn read_status_report(xml: &str) -> Result<StatusReport, ReportError> {
    let document = parse_pain002(xml).map_err(|e| ReportError::Unreadable(e.to_string()))?;
    match &document.original_msg_type {
        None | Some(OriginalMessageType::CreditTransfer) => {}
        Some(OriginalMessageType::DirectDebit) => {
            return Err(ReportError::NotCreditTransfer("pain.008".to_owned()));
        }
        Some(OriginalMessageType::Other(name)) => {
            return Err(ReportError::NotCreditTransfer(name.clone()));
        }
        Some(other) => return Err(ReportError::NotCreditTransfer(format!("{other:?}"))),
    }
    let group = document.group_status.as_ref();
    let mut rest = final_outcome(
        group,
        &document.group_reason_codes,
        &document.group_additional_info,
    );
    let mut transfers: Vec<TransferStatus> = Vec::new();
    for payment in &document.payment_info_statuses {
        let payment_status = payment.status.as_ref().or(group);
        // Our files have one payment information block: its final status is the file's.
        if let Some(status) = final_outcome(
            payment.status.as_ref(),
            &payment.reason_codes,
            &payment.additional_info,
        ) {
            rest = Some(status);
        }
        for transaction in &payment.transactions {
            let end_to_end_id = transaction
                .original_end_to_end_id
                .as_deref()
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .ok_or(ReportError::Unmatched)?
                .to_owned();
            if transfers.iter().any(|t| t.end_to_end_id == end_to_end_id) {
                return Err(ReportError::Duplicate(end_to_end_id));
            }
            let status = transaction.status.as_ref().or(payment_status);
            let outcome = match status {
                Some(status) => outcome(
                    status,
                    &transaction.reason_codes,
                    &transaction.additional_info,
                ),
                None => Outcome::Pending("none".to_owned()),
            };
            transfers.push(TransferStatus {
                end_to_end_id,
                outcome,
                amount_cents: transaction.original_amount_ct,
                currency: transaction.original_currency.clone(),
            });
        }
    }
    Ok(StatusReport {
        message_id: document.msg_id.trim().to_owned(),
        original_message_id: document.original_msg_id.trim().to_owned(),
        transfers,
        rest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pain.002.001.10 report on `GPUNEX-20261102-01` with these transaction blocks.
    pub fn pain002(group: &str, transactions: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10">
  <CstmrPmtStsRpt>
    <GrpHdr><MsgId>BANK-RPT-7</MsgId><CreDtTm>2026-11-04T09:00:00Z</CreDtTm></GrpHdr>
    <OrgnlGrpInfAndSts>
      <OrgnlMsgId>GPUNEX-20261102-01</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId>
      {group}
    </OrgnlGrpInfAndSts>
    <OrgnlPmtInfAndSts>
      <OrgnlPmtInfId>GPUNEX-20261102-01</OrgnlPmtInfId>
      {transactions}
    </OrgnlPmtInfAndSts>
  </CstmrPmtStsRpt>
</Document>"#
        )
    }

    fn transaction(end_to_end: &str, status: &str, reason: Option<&str>) -> String {
        let reason = reason.map_or(String::new(), |code| {
            format!(
                "<StsRsnInf><Rsn><Cd>{code}</Cd></Rsn><AddtlInf>see bank</AddtlInf></StsRsnInf>"
            )
        });
        format!(
            "<TxInfAndSts><OrgnlEndToEndId>{end_to_end}</OrgnlEndToEndId><TxSts>{status}</TxSts>{reason}\
             <OrgnlTxRef><Amt><InstdAmt Ccy=\"EUR\">28.89</InstdAmt></Amt></OrgnlTxRef></TxInfAndSts>"
        )
    }

    #[test]
    fn each_transaction_is_settled_rejected_or_pending() {
        let xml = pain002(
            "<GrpSts>PART</GrpSts>",
            &[
                transaction("aaa", "ACSC", None),
                transaction("bbb", "RJCT", Some("AC04")),
                transaction("ccc", "ACSP", None),
                transaction("ddd", "ACCC", None),
            ]
            .concat(),
        );
        let report = read_status_report(&xml).unwrap();
        assert_eq!(report.message_id, "BANK-RPT-7");
        assert_eq!(report.original_message_id, "GPUNEX-20261102-01");
        assert_eq!(report.rest, None);
        assert_eq!(report.transfers.len(), 4);
        assert_eq!(report.transfers[3].outcome, Outcome::Settled);
        assert_eq!(report.transfers[0].outcome, Outcome::Settled);
        assert_eq!(report.transfers[0].amount_cents, Some(2_889));
        assert_eq!(report.transfers[0].currency.as_deref(), Some("EUR"));
        let Outcome::Rejected { code, text } = &report.transfers[1].outcome else {
            panic!("{:?}", report.transfers[1]);
        };
        assert_eq!(code, "AC04");
        assert!(text.contains("see bank"), "{text}");
        assert_eq!(
            report.transfers[2].outcome,
            Outcome::Pending("ACSP".to_owned())
        );
    }

    #[test]
    fn a_rejected_file_rejects_every_transfer_not_listed() {
        let xml = pain002(
            "<GrpSts>RJCT</GrpSts><StsRsnInf><Rsn><Cd>FF01</Cd></Rsn></StsRsnInf>",
            "",
        );
        let report = read_status_report(&xml).unwrap();
        assert!(report.transfers.is_empty());
        let Some(Outcome::Rejected { code, .. }) = report.rest else {
            panic!("{:?}", report.rest);
        };
        assert_eq!(code, "FF01");
        // A transaction without its own status takes the file's.
        let xml = pain002(
            "<GrpSts>ACSC</GrpSts>",
            "<TxInfAndSts><OrgnlEndToEndId>aaa</OrgnlEndToEndId></TxInfAndSts>",
        );
        let report = read_status_report(&xml).unwrap();
        assert_eq!(report.transfers[0].outcome, Outcome::Settled);
        assert_eq!(report.rest, Some(Outcome::Settled));
    }

    #[test]
    fn reports_that_cannot_be_matched_are_refused() {
        assert_eq!(
            read_status_report("<Document>").unwrap_err().code(),
            "invalid_status_report"
        );
        let unmatched = pain002(
            "<GrpSts>PART</GrpSts>",
            "<TxInfAndSts><TxSts>RJCT</TxSts></TxInfAndSts>",
        );
        assert_eq!(
            read_status_report(&unmatched).unwrap_err(),
            ReportError::Unmatched
        );
        let twice = pain002(
            "<GrpSts>PART</GrpSts>",
            &[
                transaction("aaa", "ACSC", None),
                transaction("aaa", "RJCT", Some("AC04")),
            ]
            .concat(),
        );
        assert_eq!(
            read_status_report(&twice).unwrap_err(),
            ReportError::Duplicate("aaa".to_owned())
        );
        let direct_debit =
            pain002("<GrpSts>ACSC</GrpSts>", "").replace("pain.001.001.09", "pain.008.001.08");
        assert_eq!(
            read_status_report(&direct_debit).unwrap_err().code(),
            "not_a_credit_transfer_report"
        );
    }
}
