//! Payout rails: checking where a provider wants to be paid, with well-kept libraries (`sepa`
//! for IBAN, BIC, SEPA membership and character set; `bs58` and `curve25519-dalek` for Solana
//! wallets); the Solana USDC transaction and its JSON-RPC client ([`solana`]); the SEPA credit
//! transfer file ([`sepa_file`]).
#![deny(clippy::float_arithmetic)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod bank_report;
pub mod sepa_file;
pub mod solana;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use gpunex_domain::codes::ErrorCode;
use gpunex_domain::payouts::{BankAddress, BankDetails, PayoutMethod};

/// One problem with a payout method, for the field it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodError {
    pub field: &'static str,
    pub code: ErrorCode,
    pub message: String,
}

fn error(field: &'static str, code: ErrorCode, message: impl Into<String>) -> MethodError {
    MethodError {
        field,
        code,
        message: message.into(),
    }
}

/// Addresses no one holds a wallet key for, though some are on the curve: the System Program
/// (all zero bytes), the token, associated-token-account and memo programs, the USDC mint and
/// the sysvars a transfer touches. USDC sent to their token accounts could never be moved.
pub const RESERVED_ADDRESSES: [&str; 10] = [
    "11111111111111111111111111111111",
    "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
    "TokenzQdBNbLqP5VEhdkAS6EPFLC1PQnBqCXEpPxuEb",
    "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL",
    "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr",
    "Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo",
    "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
    "SysvarRent111111111111111111111111111111111",
    "SysvarC1ock11111111111111111111111111111111",
    "ComputeBudget111111111111111111111111111111",
];

/// A Solana wallet address: base58 of 32 bytes that are a point on the ed25519 curve and not a
/// reserved address ([`RESERVED_ADDRESSES`]). A program-derived address (off the curve) has no
/// private key: USDC sent to its token account could never be moved, so it is refused.
pub fn check_wallet(text: &str) -> Result<String, MethodError> {
    let text = text.trim();
    let bytes = bs58::decode(text).into_vec().map_err(|_| {
        error(
            "/method/wallet",
            ErrorCode::InvalidWallet,
            "a Solana address: base58 (no 0, O, I or l)",
        )
    })?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| {
        error(
            "/method/wallet",
            ErrorCode::InvalidWallet,
            "a Solana address is 32 bytes",
        )
    })?;
    let reserved = RESERVED_ADDRESSES
        .iter()
        .any(|address| bs58::decode(address).into_vec().is_ok_and(|r| r == bytes));
    if reserved {
        return Err(error(
            "/method/wallet",
            ErrorCode::InvalidWallet,
            "this is a program, mint or system address, not a wallet: USDC sent there could never be recovered",
        ));
    }
    if curve25519_dalek::edwards::CompressedEdwardsY(bytes)
        .decompress()
        .is_none()
    {
        return Err(error(
            "/method/wallet",
            ErrorCode::WalletOffCurve,
            "this is a program-derived address, not a wallet: give the address of a wallet you hold the key of",
        ));
    }
    Ok(text.to_owned())
}

fn text(errors: &mut Vec<MethodError>, field: &'static str, value: &str, max: usize) -> String {
    let value = value.trim();
    if value.is_empty() || value.chars().count() > max {
        errors.push(error(
            field,
            ErrorCode::InvalidText,
            format!("1 to {max} characters"),
        ));
    } else if !sepa::is_sepa_text(value) {
        errors.push(error(
            field,
            ErrorCode::InvalidCharacters,
            "only the SEPA character set (Latin letters, digits, spaces and / - ? : ( ) . , ' +)",
        ));
    }
    value.to_owned()
}

/// Bank details for a SEPA credit transfer: a valid IBAN of a SEPA country (others get
/// `bank_region_unsupported`), a valid BIC, the account holder and a structured address in the
/// SEPA character set. Every problem is reported at once.
pub fn check_bank(details: &BankDetails) -> Result<BankDetails, Vec<MethodError>> {
    let mut errors = Vec::new();
    let iban = match sepa::validate_iban(&details.iban) {
        Ok(iban) if iban.is_sepa() => iban.as_str().to_owned(),
        Ok(iban) => {
            errors.push(error(
                "/method/iban",
                ErrorCode::BankRegionUnsupported,
                format!(
                    "bank transfers are offered in SEPA countries; {} is not one: choose USDC on Solana",
                    iban.country_code()
                ),
            ));
            String::new()
        }
        Err(e) => {
            errors.push(error("/method/iban", ErrorCode::InvalidIban, e.to_string()));
            String::new()
        }
    };
    let bic = match sepa::validate_bic(&details.bic) {
        Ok(bic) => bic.as_str().to_owned(),
        Err(e) => {
            errors.push(error("/method/bic", ErrorCode::InvalidBic, e.to_string()));
            String::new()
        }
    };
    let account_holder = text(
        &mut errors,
        "/method/account_holder",
        &details.account_holder,
        70,
    );
    let a = &details.address;
    let street = text(&mut errors, "/method/address/street", &a.street, 70);
    let building_number = a
        .building_number
        .as_deref()
        .map(|b| text(&mut errors, "/method/address/building_number", b, 16));
    let post_code = text(&mut errors, "/method/address/post_code", &a.post_code, 16);
    let town = text(&mut errors, "/method/address/town", &a.town, 35);
    let country = a.country.trim().to_ascii_uppercase();
    if !sepa::is_country_code(&country) {
        errors.push(error(
            "/method/address/country",
            ErrorCode::InvalidCountry,
            "an ISO 3166-1 alpha-2 country code",
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(BankDetails {
        iban,
        bic,
        account_holder,
        address: BankAddress {
            street,
            building_number,
            post_code,
            town,
            country,
        },
    })
}

/// Checks a payout method, normalizing it.
pub fn check_method(method: &PayoutMethod) -> Result<PayoutMethod, Vec<MethodError>> {
    match method {
        PayoutMethod::Solana { wallet } => check_wallet(wallet)
            .map(|wallet| PayoutMethod::Solana { wallet })
            .map_err(|e| vec![e]),
        PayoutMethod::Bank(details) => check_bank(details).map(PayoutMethod::Bank),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::edwards::CompressedEdwardsY;

    fn bank(iban: &str, bic: &str) -> BankDetails {
        BankDetails {
            iban: iban.to_owned(),
            bic: bic.to_owned(),
            account_holder: "Ada Lovelace".to_owned(),
            address: BankAddress {
                street: "Calle Mayor".to_owned(),
                building_number: Some("1".to_owned()),
                post_code: "28013".to_owned(),
                town: "Madrid".to_owned(),
                country: "es".to_owned(),
            },
        }
    }

    #[test]
    fn wallets_are_base58_points_on_the_curve() {
        // The ed25519 base point is on the curve.
        let base = curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED.to_bytes();
        let wallet = bs58::encode(base).into_string();
        assert_eq!(check_wallet(&format!(" {wallet} ")), Ok(wallet));
        // Some 32 bytes are not a point (as a program-derived address): refused.
        let off = (0_u8..=255)
            .map(|b| [b; 32])
            .find(|bytes| CompressedEdwardsY(*bytes).decompress().is_none())
            .unwrap();
        let code = |text: &str| check_wallet(text).unwrap_err().code;
        assert_eq!(code(&bs58::encode(off).into_string()), "wallet_off_curve");
        assert_eq!(code("0OIl"), "invalid_wallet");
        for reserved in RESERVED_ADDRESSES {
            assert_eq!(
                bs58::decode(reserved).into_vec().unwrap().len(),
                32,
                "{reserved}"
            );
            assert_eq!(code(reserved), "invalid_wallet", "{reserved}");
        }
        assert_eq!(
            code(&bs58::encode([0_u8; 32]).into_string()),
            "invalid_wallet",
            "the System Program"
        );
        assert_eq!(
            code(&bs58::encode([1_u8; 31]).into_string()),
            "invalid_wallet"
        );
    }

    #[test]
    fn bank_details_need_a_sepa_iban_a_bic_and_a_structured_address() {
        let ok = check_bank(&bank("DE89 3704 0044 0532 0130 00", "COBADEFFXXX")).unwrap();
        assert_eq!(ok.iban, "DE89370400440532013000");
        assert_eq!(ok.address.country, "ES");
        let codes = |details: BankDetails| -> Vec<&'static str> {
            check_bank(&details)
                .unwrap_err()
                .into_iter()
                .map(|e| e.code.as_str())
                .collect()
        };
        assert_eq!(
            codes(bank("DE89370400440532013001", "COBADEFFXXX")),
            ["invalid_iban"]
        );
        // Saudi Arabia has IBANs but is not in SEPA.
        assert_eq!(
            codes(bank("SA0380000000608010167519", "COBADEFFXXX")),
            ["bank_region_unsupported"]
        );
        assert_eq!(
            codes(bank("DE89370400440532013000", "COBAD")),
            ["invalid_bic"]
        );
        let mut bad = bank("DE89370400440532013000", "COBADEFFXXX");
        bad.account_holder = "Ада".to_owned();
        bad.address.town = String::new();
        bad.address.country = "XX".to_owned();
        assert_eq!(
            codes(bad),
            ["invalid_characters", "invalid_text", "invalid_country"]
        );
    }
}
