//! The bank rail's file: a SEPA credit transfer initiation (ISO 20022 pain.001.001.09) built with
//! the `sepa` crate, never by hand.
//!
//! - `MsgId` is derived from the batch (`GPUNEX-<date>-<nn>`), unique per bank.
//! - `EndToEndId` is the payout id in its 32-hex-digit form (a hyphenated UUID is 36 characters,
//!   over the 35 the field allows); the bank returns it in its status reports and statements.
//! - Creditor and debtor addresses are structured (street, number, post code, town, country):
//!   unstructured addresses are refused by the schemes from 15 November 2026.
//! - Amounts are whole cents of the file's currency; the control sum and the count are the
//!   library's, checked again by the tests parsing the file back.

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};
use gpunex_domain::payouts::{BankAddress, BankDetails};
use sepa::pain001::CreditTransferKind;
use sepa::{CreditTransferEntry, CreditTransferGroup, IsoDate, IsoDateTime, Pain001Builder};
use uuid::Uuid;

/// One payout in a file.
#[derive(Debug, Clone)]
pub struct FileTransfer<'a> {
    pub payout_id: Uuid,
    pub creditor: &'a BankDetails,
    pub amount_cents: i64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FileError {
    #[error("SEPA credit transfers are in EUR, not {0}")]
    Currency(String),
    #[error("the platform's bank account: {0}")]
    Debtor(String),
    #[error("payout {payout_id}: {reason}")]
    Creditor { payout_id: Uuid, reason: String },
    #[error("the file could not be built: {0}")]
    Build(String),
}

/// The `EndToEndId` of a payout.
pub fn end_to_end_id(payout_id: Uuid) -> String {
    payout_id.simple().to_string()
}

/// The `MsgId` of the `sequence`-th file of the batch dated `date`.
pub fn message_id(date: NaiveDate, sequence: u32) -> String {
    format!("GPUNEX-{}-{sequence:02}", date.format("%Y%m%d"))
}

fn iso_date(date: NaiveDate) -> Result<IsoDate, String> {
    let year = u16::try_from(date.year()).map_err(|e| e.to_string())?;
    let month = u8::try_from(date.month()).map_err(|e| e.to_string())?;
    let day = u8::try_from(date.day()).map_err(|e| e.to_string())?;
    IsoDate::new(year, month, day).map_err(|e| e.to_string())
}

fn address(address: &BankAddress) -> Result<sepa::PostalAddress, String> {
    let mut built = sepa::PostalAddress::new(address.town.clone(), &address.country)
        .map_err(|e| e.to_string())?
        .street(address.street.clone())
        .post_code(address.post_code.clone());
    if let Some(number) = &address.building_number {
        built = built.building_number(number.clone());
    }
    Ok(built)
}

/// Checks the platform's account (the debtor) as a file needs it.
pub fn check_debtor(debtor: &BankDetails) -> Result<(), FileError> {
    let fail = |e: String| FileError::Debtor(e);
    sepa::validate_iban(&debtor.iban).map_err(|e| fail(e.to_string()))?;
    sepa::validate_bic(&debtor.bic).map_err(|e| fail(e.to_string()))?;
    address(&debtor.address).map_err(fail)?;
    if debtor.account_holder.trim().is_empty() || !sepa::is_sepa_text(&debtor.account_holder) {
        return Err(fail("the name must be SEPA text".to_owned()));
    }
    Ok(())
}

/// Builds one pain.001.001.09 file: one payment group from the platform's account, executed on
/// `execution_date`, one transfer per payout.
pub fn credit_transfer_file(
    debtor: &BankDetails,
    message_id: &str,
    created_at: NaiveDateTime,
    execution_date: NaiveDate,
    currency: &str,
    transfers: &[FileTransfer<'_>],
) -> Result<String, FileError> {
    if currency != "EUR" {
        return Err(FileError::Currency(currency.to_owned()));
    }
    check_debtor(debtor)?;
    let debtor_iban =
        sepa::validate_iban(&debtor.iban).map_err(|e| FileError::Debtor(e.to_string()))?;
    let debtor_bic =
        sepa::validate_bic(&debtor.bic).map_err(|e| FileError::Debtor(e.to_string()))?;
    let execution = iso_date(execution_date).map_err(FileError::Build)?;
    let mut group =
        CreditTransferGroup::new(debtor.account_holder.clone(), &debtor_iban, execution)
            .kind(CreditTransferKind::Standard)
            .debtor_bic(debtor_bic)
            .debtor_address(address(&debtor.address).map_err(FileError::Debtor)?)
            .batch_booking(false);
    for transfer in transfers {
        let fail = |reason: String| FileError::Creditor {
            payout_id: transfer.payout_id,
            reason,
        };
        let creditor = transfer.creditor;
        let iban = sepa::validate_iban(&creditor.iban).map_err(|e| fail(e.to_string()))?;
        let bic = sepa::validate_bic(&creditor.bic).map_err(|e| fail(e.to_string()))?;
        group = group.add_entry(
            CreditTransferEntry::new(
                creditor.account_holder.clone(),
                iban,
                transfer.amount_cents,
                end_to_end_id(transfer.payout_id),
            )
            .with_bic(bic)
            .with_creditor_address(address(&creditor.address).map_err(fail)?)
            .with_description(format!("GPUnex payout {}", transfer.payout_id)),
        );
    }
    let created = IsoDateTime::new(
        iso_date(created_at.date()).map_err(FileError::Build)?,
        u8::try_from(created_at.hour()).unwrap_or(0),
        u8::try_from(created_at.minute()).unwrap_or(0),
        u8::try_from(created_at.second()).unwrap_or(0),
    )
    .map_err(|e| FileError::Build(e.to_string()))?;
    Pain001Builder::new(debtor.account_holder.clone(), message_id)
        .created_at(created)
        .add_group(group)
        .build()
        .map_err(|e| FileError::Build(e.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A parsed element: its name, text and children (enough to read a pain.001 back).
    #[derive(Debug, Default, Clone)]
    pub struct Element {
        pub name: String,
        pub attributes: BTreeMap<String, String>,
        pub text: String,
        pub children: Vec<Element>,
    }

    impl Element {
        pub fn parse(xml: &str) -> Element {
            use quick_xml::events::Event;
            let mut reader = quick_xml::Reader::from_str(xml);
            let mut stack = vec![Element::default()];
            loop {
                match reader.read_event().unwrap() {
                    Event::Start(start) => {
                        let mut element = Element {
                            name: String::from_utf8(start.local_name().as_ref().to_vec()).unwrap(),
                            ..Element::default()
                        };
                        for attribute in start.attributes() {
                            let attribute = attribute.unwrap();
                            element.attributes.insert(
                                String::from_utf8(attribute.key.as_ref().to_vec()).unwrap(),
                                String::from_utf8(attribute.value.to_vec()).unwrap(),
                            );
                        }
                        stack.push(element);
                    }
                    Event::End(_) => {
                        let done = stack.pop().unwrap();
                        stack.last_mut().unwrap().children.push(done);
                    }
                    Event::Text(text) => {
                        stack
                            .last_mut()
                            .unwrap()
                            .text
                            .push_str(&text.decode().unwrap());
                    }
                    Event::Eof => break,
                    _ => {}
                }
            }
            stack.pop().unwrap().children.remove(0)
        }

        /// The one descendant at this path of names.
        pub fn at(&self, path: &str) -> &Element {
            path.split('/').fold(self, |element, name| {
                let found: Vec<&Element> =
                    element.children.iter().filter(|c| c.name == name).collect();
                assert_eq!(found.len(), 1, "{name} under {}", element.name);
                found[0]
            })
        }

        pub fn all(&self, name: &str) -> Vec<&Element> {
            self.children.iter().filter(|c| c.name == name).collect()
        }
    }

    pub fn debtor() -> BankDetails {
        BankDetails {
            account_holder: "GPUnex Treasury".to_owned(),
            iban: "DE89370400440532013000".to_owned(),
            bic: "COBADEFFXXX".to_owned(),
            address: BankAddress {
                street: "Friedrichstrasse".to_owned(),
                building_number: Some("68".to_owned()),
                post_code: "10117".to_owned(),
                town: "Berlin".to_owned(),
                country: "DE".to_owned(),
            },
        }
    }

    fn creditor(iban: &str, holder: &str) -> BankDetails {
        BankDetails {
            iban: iban.to_owned(),
            bic: "ABNANL2A".to_owned(),
            account_holder: holder.to_owned(),
            address: BankAddress {
                street: "Damrak".to_owned(),
                building_number: None,
                post_code: "1012 LG".to_owned(),
                town: "Amsterdam".to_owned(),
                country: "NL".to_owned(),
            },
        }
    }

    #[test]
    fn a_file_carries_every_field_and_sums_that_add_up() {
        let a = creditor("NL91ABNA0417164300", "Ada Lovelace");
        let b = creditor("NL02ABNA0123456789", "Alan Turing");
        let date = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap();
        let transfers = [
            FileTransfer {
                payout_id: Uuid::from_u128(1),
                creditor: &a,
                amount_cents: 2_512,
            },
            FileTransfer {
                payout_id: Uuid::from_u128(2),
                creditor: &b,
                amount_cents: 100_001,
            },
        ];
        let created = date.and_hms_opt(6, 0, 5).unwrap();
        let xml = credit_transfer_file(
            &debtor(),
            &message_id(date, 1),
            created,
            date,
            "EUR",
            &transfers,
        )
        .unwrap();
        assert!(
            xml.contains("urn:iso:std:iso:20022:tech:xsd:pain.001.001.09"),
            "{xml}"
        );
        // For the contract checks (`scripts/contract.sh`), which validate it against the
        // pain.001.001.09 schema PyPI's sepaxml ships.
        let samples =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/contract/sepa");
        std::fs::create_dir_all(&samples).unwrap();
        std::fs::write(samples.join("two-transfers.xml"), &xml).unwrap();
        let document = Element::parse(&xml);
        let initiation = document.at("CstmrCdtTrfInitn");
        let header = initiation.at("GrpHdr");
        assert_eq!(header.at("MsgId").text, "GPUNEX-20261130-01");
        assert_eq!(header.at("CreDtTm").text, "2026-11-30T06:00:05");
        assert_eq!(header.at("NbOfTxs").text, "2");
        assert_eq!(header.at("CtrlSum").text, "1025.13");
        let group = initiation.at("PmtInf");
        assert_eq!(group.at("NbOfTxs").text, "2");
        assert_eq!(group.at("CtrlSum").text, "1025.13");
        assert_eq!(group.at("PmtTpInf/SvcLvl/Cd").text, "SEPA");
        assert_eq!(group.at("ReqdExctnDt/Dt").text, "2026-11-30");
        assert_eq!(group.at("Dbtr/Nm").text, "GPUnex Treasury");
        assert_eq!(group.at("Dbtr/PstlAdr/StrtNm").text, "Friedrichstrasse");
        assert_eq!(group.at("Dbtr/PstlAdr/BldgNb").text, "68");
        assert_eq!(group.at("DbtrAcct/Id/IBAN").text, "DE89370400440532013000");
        assert_eq!(group.at("DbtrAgt/FinInstnId/BICFI").text, "COBADEFFXXX");
        let entries = group.all("CdtTrfTxInf");
        assert_eq!(entries.len(), 2);
        let mut sum = 0;
        for (entry, transfer) in entries.iter().zip(&transfers) {
            assert_eq!(
                entry.at("PmtId/EndToEndId").text,
                end_to_end_id(transfer.payout_id)
            );
            let amount = entry.at("Amt/InstdAmt");
            assert_eq!(amount.attributes["Ccy"], "EUR");
            let cents: i64 = amount.text.replace('.', "").parse().unwrap();
            assert_eq!(cents, transfer.amount_cents);
            sum += cents;
            assert_eq!(entry.at("Cdtr/Nm").text, transfer.creditor.account_holder);
            assert_eq!(entry.at("Cdtr/PstlAdr/StrtNm").text, "Damrak");
            assert_eq!(entry.at("Cdtr/PstlAdr/PstCd").text, "1012 LG");
            assert_eq!(entry.at("Cdtr/PstlAdr/TwnNm").text, "Amsterdam");
            assert_eq!(entry.at("Cdtr/PstlAdr/Ctry").text, "NL");
            assert_eq!(entry.at("CdtrAcct/Id/IBAN").text, transfer.creditor.iban);
            assert_eq!(entry.at("CdtrAgt/FinInstnId/BICFI").text, "ABNANL2A");
            assert_eq!(
                entry.at("RmtInf/Ustrd").text,
                format!("GPUnex payout {}", transfer.payout_id)
            );
        }
        assert_eq!(sum, 102_513);
        assert_eq!(end_to_end_id(Uuid::from_u128(1)).len(), 32);
        // The same input, the same bytes.
        assert_eq!(
            credit_transfer_file(
                &debtor(),
                &message_id(date, 1),
                created,
                date,
                "EUR",
                &transfers
            )
            .unwrap(),
            xml
        );
        assert_eq!(
            credit_transfer_file(&debtor(), "M", created, date, "USD", &transfers),
            Err(FileError::Currency("USD".to_owned()))
        );
    }
}
