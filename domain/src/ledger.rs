//! Double-entry bookkeeping: accounts, postings and balanced journal entries.
//!
//! A [`JournalEntry`] can only exist balanced: its constructor (also used by deserialization)
//! rejects an entry whose debits and credits differ, so an event that carries one cannot be
//! appended unbalanced, whoever produced its JSON.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::money::{MoneyError, Usdc};

/// Most lines one journal entry may hold. A payout batch posts per provider, not in one entry.
pub const JOURNAL_LINES_MAX: usize = 64;
/// Largest amount of one posting: 1 billion USDC. Far above any real charge or payout, and low
/// enough that account totals (`i64` micro-USDC, about 9.2 trillion USDC) cannot be overflowed
/// by any plausible history.
pub const POSTING_MICRO_USDC_MAX: i64 = 1_000_000_000 * crate::money::MICROS_PER_USDC;

/// A ledger account. Written as `kind` or `kind:<uuid>` in JSON, SQL and docs alike.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Account {
    /// What a renter owes the platform for usage (asset, debit-normal).
    RenterReceivable(Uuid),
    /// What the platform owes a provider, net of fees (liability, credit-normal).
    ProviderPayable(Uuid),
    /// Fees the platform earned (revenue, credit-normal).
    PlatformRevenue,
    /// A provider's payout that is scheduled or in flight (liability, credit-normal).
    PayoutClearing(Uuid),
    /// USDC and bank money the platform holds (asset, debit-normal).
    Treasury,
    /// Corrections finance posts by hand, e.g. goodwill credits (expense, debit-normal).
    PlatformAdjustments,
}

/// Which side of an account a posting lands on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Debit,
    Credit,
}

impl Account {
    /// The side on which this account's balance grows.
    pub fn normal_side(self) -> Side {
        match self {
            Account::RenterReceivable(_) | Account::Treasury | Account::PlatformAdjustments => {
                Side::Debit
            }
            Account::ProviderPayable(_) | Account::PlatformRevenue | Account::PayoutClearing(_) => {
                Side::Credit
            }
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Account::RenterReceivable(_) => "renter_receivable",
            Account::ProviderPayable(_) => "provider_payable",
            Account::PlatformRevenue => "platform_revenue",
            Account::PayoutClearing(_) => "payout_clearing",
            Account::Treasury => "treasury",
            Account::PlatformAdjustments => "platform_adjustments",
        }
    }

    fn owner(self) -> Option<Uuid> {
        match self {
            Account::RenterReceivable(id)
            | Account::ProviderPayable(id)
            | Account::PayoutClearing(id) => Some(id),
            Account::PlatformRevenue | Account::Treasury | Account::PlatformAdjustments => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountParseError {
    #[error("unknown account kind `{kind}`")]
    UnknownKind { kind: String },
    #[error("account `{text}` needs an owner id: `{kind}:<uuid>`")]
    MissingOwner { text: String, kind: &'static str },
    #[error("account `{text}` takes no owner id")]
    UnexpectedOwner { text: String },
    #[error("account `{text}` has an invalid owner id")]
    InvalidOwner { text: String },
}

impl fmt::Display for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.owner() {
            Some(id) => write!(f, "{}:{}", self.kind(), id),
            None => f.write_str(self.kind()),
        }
    }
}

impl FromStr for Account {
    type Err = AccountParseError;

    fn from_str(text: &str) -> Result<Account, AccountParseError> {
        let (kind, owner) = match text.split_once(':') {
            Some((kind, owner)) => (kind, Some(owner)),
            None => (text, None),
        };
        let parse_owner = |kind: &'static str| -> Result<Uuid, AccountParseError> {
            let owner = owner.ok_or_else(|| AccountParseError::MissingOwner {
                text: text.to_owned(),
                kind,
            })?;
            // Only the canonical lowercase hyphenated form, so one account has one spelling.
            let canonical = owner.len() == 36
                && owner.as_bytes()[8] == b'-'
                && !owner.bytes().any(|b| b.is_ascii_uppercase());
            match Uuid::try_parse(owner) {
                Ok(id) if canonical => Ok(id),
                _ => Err(AccountParseError::InvalidOwner {
                    text: text.to_owned(),
                }),
            }
        };
        let no_owner = |account: Account| -> Result<Account, AccountParseError> {
            match owner {
                None => Ok(account),
                Some(_) => Err(AccountParseError::UnexpectedOwner {
                    text: text.to_owned(),
                }),
            }
        };
        match kind {
            "renter_receivable" => Ok(Account::RenterReceivable(parse_owner("renter_receivable")?)),
            "provider_payable" => Ok(Account::ProviderPayable(parse_owner("provider_payable")?)),
            "payout_clearing" => Ok(Account::PayoutClearing(parse_owner("payout_clearing")?)),
            "platform_revenue" => no_owner(Account::PlatformRevenue),
            "treasury" => no_owner(Account::Treasury),
            "platform_adjustments" => no_owner(Account::PlatformAdjustments),
            _ => Err(AccountParseError::UnknownKind {
                kind: kind.chars().take(64).collect(),
            }),
        }
    }
}

impl Serialize for Account {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Account {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Account, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One line of a journal entry: a positive amount on one side of one account.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Posting {
    pub account: Account,
    pub side: Side,
    pub amount_micro_usdc: Usdc,
}

impl Posting {
    pub fn debit(account: Account, amount: Usdc) -> Posting {
        Posting {
            account,
            side: Side::Debit,
            amount_micro_usdc: amount,
        }
    }

    pub fn credit(account: Account, amount: Usdc) -> Posting {
        Posting {
            account,
            side: Side::Credit,
            amount_micro_usdc: amount,
        }
    }

    /// The signed change this posting makes to its account's balance (on its normal side).
    pub fn balance_delta(&self) -> Result<Usdc, MoneyError> {
        if self.side == self.account.normal_side() {
            Ok(self.amount_micro_usdc)
        } else {
            self.amount_micro_usdc.checked_neg()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error("journal entry has no lines")]
    Empty,
    #[error("journal entry has {lines} lines, more than the limit of {JOURNAL_LINES_MAX}")]
    TooManyLines { lines: usize },
    #[error("posting {index} has a non-positive amount {amount}")]
    NonPositiveAmount { index: usize, amount: Usdc },
    #[error("posting {index} amount {amount} is above the limit of 1,000,000,000 USDC")]
    AmountTooLarge { index: usize, amount: Usdc },
    #[error("journal entry is unbalanced: debits {debits} != credits {credits}")]
    Unbalanced { debits: Usdc, credits: Usdc },
    #[error("journal entry totals overflow: {0}")]
    Overflow(#[from] MoneyError),
}

/// A balanced set of postings: the sum of debits equals the sum of credits.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(try_from = "Vec<Posting>", into = "Vec<Posting>")]
pub struct JournalEntry {
    lines: Vec<Posting>,
}

impl JournalEntry {
    pub fn new(lines: Vec<Posting>) -> Result<JournalEntry, JournalError> {
        if lines.is_empty() {
            return Err(JournalError::Empty);
        }
        if lines.len() > JOURNAL_LINES_MAX {
            return Err(JournalError::TooManyLines { lines: lines.len() });
        }
        let mut debits = Usdc::ZERO;
        let mut credits = Usdc::ZERO;
        for (index, line) in lines.iter().enumerate() {
            if !line.amount_micro_usdc.is_positive() {
                return Err(JournalError::NonPositiveAmount {
                    index,
                    amount: line.amount_micro_usdc,
                });
            }
            if line.amount_micro_usdc.micros() > POSTING_MICRO_USDC_MAX {
                return Err(JournalError::AmountTooLarge {
                    index,
                    amount: line.amount_micro_usdc,
                });
            }
            match line.side {
                Side::Debit => debits = debits.checked_add(line.amount_micro_usdc)?,
                Side::Credit => credits = credits.checked_add(line.amount_micro_usdc)?,
            }
        }
        if debits != credits {
            return Err(JournalError::Unbalanced { debits, credits });
        }
        Ok(JournalEntry { lines })
    }

    pub fn lines(&self) -> &[Posting] {
        &self.lines
    }

    /// Sum of the debit side, which equals the sum of the credit side.
    pub fn total(&self) -> Usdc {
        self.lines
            .iter()
            .filter(|line| line.side == Side::Debit)
            .fold(Usdc::ZERO, |sum, line| {
                // Cannot overflow: `new` already summed the same lines with checks.
                Usdc::from_micros(sum.micros() + line.amount_micro_usdc.micros())
            })
    }
}

impl TryFrom<Vec<Posting>> for JournalEntry {
    type Error = JournalError;

    fn try_from(lines: Vec<Posting>) -> Result<JournalEntry, JournalError> {
        JournalEntry::new(lines)
    }
}

impl From<JournalEntry> for Vec<Posting> {
    fn from(entry: JournalEntry) -> Vec<Posting> {
        entry.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROVIDER: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001);

    #[test]
    fn accounts_round_trip_through_text() {
        let accounts = [
            Account::RenterReceivable(PROVIDER),
            Account::ProviderPayable(PROVIDER),
            Account::PayoutClearing(PROVIDER),
            Account::PlatformRevenue,
            Account::Treasury,
            Account::PlatformAdjustments,
        ];
        for account in accounts {
            assert_eq!(account.to_string().parse::<Account>(), Ok(account));
        }
    }

    #[test]
    fn account_text_errors_are_precise() {
        type Check = fn(&AccountParseError) -> bool;
        let cases: [(&str, Check); 5] = [
            ("wallet", |e| {
                matches!(e, AccountParseError::UnknownKind { .. })
            }),
            ("provider_payable", |e| {
                matches!(e, AccountParseError::MissingOwner { .. })
            }),
            ("treasury:0190", |e| {
                matches!(e, AccountParseError::UnexpectedOwner { .. })
            }),
            ("provider_payable:nope", |e| {
                matches!(e, AccountParseError::InvalidOwner { .. })
            }),
            // Same id, non-canonical spelling: one account must have one spelling.
            ("provider_payable:01900000000070008000000000000001", |e| {
                matches!(e, AccountParseError::InvalidOwner { .. })
            }),
        ];
        for (text, expected) in cases {
            let error = text.parse::<Account>().unwrap_err();
            assert!(expected(&error), "{text}: {error:?}");
        }
    }

    #[test]
    fn unbalanced_entries_cannot_exist() {
        let payable = Account::ProviderPayable(PROVIDER);
        let error = JournalEntry::new(vec![
            Posting::debit(Account::PlatformAdjustments, Usdc::from_micros(10)),
            Posting::credit(payable, Usdc::from_micros(9)),
        ])
        .unwrap_err();
        assert_eq!(
            error,
            JournalError::Unbalanced {
                debits: Usdc::from_micros(10),
                credits: Usdc::from_micros(9)
            }
        );
        assert_eq!(JournalEntry::new(vec![]), Err(JournalError::Empty));
        let too_much = Usdc::from_micros(POSTING_MICRO_USDC_MAX + 1);
        assert!(matches!(
            JournalEntry::new(vec![
                Posting::debit(Account::Treasury, too_much),
                Posting::credit(payable, too_much),
            ]),
            Err(JournalError::AmountTooLarge { index: 0, .. })
        ));
        assert!(matches!(
            JournalEntry::new(vec![
                Posting::debit(Account::Treasury, Usdc::ZERO),
                Posting::credit(payable, Usdc::ZERO),
            ]),
            Err(JournalError::NonPositiveAmount { index: 0, .. })
        ));
        let json = serde_json::json!([
            {"account": "treasury", "side": "debit", "amount_micro_usdc": 5},
            {"account": "platform_revenue", "side": "credit", "amount_micro_usdc": 4}
        ]);
        let decoded = serde_json::from_value::<JournalEntry>(json);
        assert!(decoded.unwrap_err().to_string().contains("unbalanced"));
    }

    #[test]
    fn balance_deltas_follow_the_normal_side() {
        let payable = Account::ProviderPayable(PROVIDER);
        assert_eq!(
            Posting::credit(payable, Usdc::from_micros(7))
                .balance_delta()
                .unwrap(),
            Usdc::from_micros(7)
        );
        assert_eq!(
            Posting::debit(payable, Usdc::from_micros(7))
                .balance_delta()
                .unwrap(),
            Usdc::from_micros(-7)
        );
        assert_eq!(
            Posting::debit(Account::Treasury, Usdc::from_micros(7))
                .balance_delta()
                .unwrap(),
            Usdc::from_micros(7)
        );
    }
}
