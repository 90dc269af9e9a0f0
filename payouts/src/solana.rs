//! The Solana USDC rail: one transaction per payout, and a small JSON-RPC client to send it and
//! follow it.
//!
//! A payout's transaction has three instructions, all paid and signed by the treasury:
//! 1. create the provider's associated token account for the mint, idempotently (a no-op when
//!    it exists);
//! 2. SPL Token `transfer_checked` of the exact amount, from the treasury's associated token
//!    account, with the mint and its 6 decimals checked on chain;
//! 3. a memo (SPL Memo v3) `gpunex:payout:<payout id>`, so the transfer can be found on chain
//!    even if our own record were lost.
//!
//! The signature of a signed transaction is known before it is sent: the caller records the
//! signed bytes, the signature and the blockhash's last valid block height, and only then sends.
//! See `docs/payouts.md` for the whole send/rebroadcast/re-sign rule.

use std::fmt;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use solana_hash::Hash;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use solana_transaction::Transaction;
use uuid::Uuid;

/// The mainnet USDC mint.
pub const USDC_MAINNET_MINT: &str = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
/// USDC's decimals: amounts are micro-USDC.
pub const USDC_DECIMALS: u8 = 6;

/// The treasury's signing key. Its `Debug` shows the public key only; the secret never leaves
/// this type except to sign.
pub struct Treasury {
    keypair: Keypair,
}

impl fmt::Debug for Treasury {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Treasury({})", self.keypair.pubkey())
    }
}

/// Why something on the Solana rail failed.
#[derive(Debug, thiserror::Error)]
pub enum SolanaError {
    #[error("treasury key file {path}: {reason}")]
    KeyFile { path: String, reason: String },
    #[error("invalid address {0:?}")]
    Address(String),
    #[error("could not build the transfer: {0}")]
    Build(String),
    #[error("could not decode the recorded transaction: {0}")]
    Decode(String),
    #[error("Solana RPC {method}: {reason}")]
    Rpc {
        method: &'static str,
        reason: String,
    },
}

impl Treasury {
    /// Reads a key file in the Solana CLI format (a JSON array of the 64 keypair bytes). Errors
    /// name the file, never its content.
    pub fn from_file(path: &Path) -> Result<Treasury, SolanaError> {
        let fail = |reason: &str| SolanaError::KeyFile {
            path: path.display().to_string(),
            reason: reason.to_owned(),
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(&e.kind().to_string()))?;
        let bytes: Vec<u8> = serde_json::from_str(&text)
            .map_err(|_| fail("not a JSON array of bytes (the Solana CLI key format)"))?;
        let keypair = Keypair::try_from(bytes.as_slice())
            .map_err(|_| fail("not a valid 64-byte ed25519 keypair"))?;
        Ok(Treasury { keypair })
    }

    pub fn from_keypair(keypair: Keypair) -> Treasury {
        Treasury { keypair }
    }

    pub fn pubkey(&self) -> Pubkey {
        self.keypair.pubkey()
    }

    /// The treasury's token account for `mint`: its associated token account.
    pub fn token_account(&self, mint: &Pubkey) -> Pubkey {
        associated_token_account(&self.pubkey(), mint)
    }
}

/// Parses a base58 address.
pub fn pubkey(text: &str) -> Result<Pubkey, SolanaError> {
    text.parse::<Pubkey>()
        .map_err(|_| SolanaError::Address(text.to_owned()))
}

/// The associated token account of `wallet` for `mint` (classic SPL Token program).
pub fn associated_token_account(wallet: &Pubkey, mint: &Pubkey) -> Pubkey {
    spl_associated_token_account_interface::address::get_associated_token_address(wallet, mint)
}

/// The memo a payout's transaction carries.
pub fn memo(payout_id: Uuid) -> String {
    format!("gpunex:payout:{payout_id}")
}

/// A signed payout transaction, ready to be recorded and sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTransfer {
    /// Base58 of the fee payer's signature: the transaction id.
    pub signature: String,
    /// Bincode of the transaction, base64: what is sent, byte for byte, every time.
    pub transaction: String,
    /// The provider's associated token account.
    pub destination: String,
}

/// Builds and signs a payout's transaction against `blockhash`.
pub fn transfer(
    treasury: &Treasury,
    mint: &Pubkey,
    wallet: &Pubkey,
    amount_micro_usdc: u64,
    payout_id: Uuid,
    blockhash: Hash,
) -> Result<SignedTransfer, SolanaError> {
    let payer = treasury.pubkey();
    let token_program = spl_token_interface::id();
    let destination = associated_token_account(wallet, mint);
    let instructions = vec![
        spl_associated_token_account_interface::instruction::create_associated_token_account_idempotent(
            &payer,
            wallet,
            mint,
            &token_program,
        ),
        spl_token_interface::instruction::transfer_checked(
            &token_program,
            &treasury.token_account(mint),
            mint,
            &destination,
            &payer,
            &[],
            amount_micro_usdc,
            USDC_DECIMALS,
        )
        .map_err(|e| SolanaError::Build(e.to_string()))?,
        spl_memo_interface::instruction::build_memo(
            &spl_memo_interface::v3::id(),
            memo(payout_id).as_bytes(),
            &[&payer],
        ),
    ];
    let tx = Transaction::new_signed_with_payer(
        &instructions,
        Some(&payer),
        &[&treasury.keypair],
        blockhash,
    );
    let signature = tx
        .signatures
        .first()
        .map(ToString::to_string)
        .ok_or_else(|| SolanaError::Build("the transaction has no signature".to_owned()))?;
    let bytes = bincode::serialize(&tx).map_err(|e| SolanaError::Build(e.to_string()))?;
    Ok(SignedTransfer {
        signature,
        transaction: BASE64.encode(bytes),
        destination: destination.to_string(),
    })
}

/// Decodes a recorded transaction (base64 of bincode).
pub fn decode_transaction(text: &str) -> Result<Transaction, SolanaError> {
    let bytes = BASE64
        .decode(text)
        .map_err(|e| SolanaError::Decode(e.to_string()))?;
    bincode::deserialize(&bytes).map_err(|e| SolanaError::Decode(e.to_string()))
}

/// How settled a transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Commitment {
    Processed,
    Confirmed,
    Finalized,
}

impl Commitment {
    fn as_str(self) -> &'static str {
        match self {
            Commitment::Processed => "processed",
            Commitment::Confirmed => "confirmed",
            Commitment::Finalized => "finalized",
        }
    }
}

/// A transaction the cluster knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureStatus {
    pub slot: u64,
    /// The transaction's error, if it failed (it is on chain all the same: fees were charged).
    pub err: Option<String>,
    pub commitment: Commitment,
}

/// A Solana JSON-RPC endpoint.
#[derive(Debug, Clone)]
pub struct Rpc {
    url: String,
    http: reqwest::Client,
}

impl Rpc {
    pub fn new(url: impl Into<String>) -> Result<Rpc, SolanaError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| SolanaError::Rpc {
                method: "client",
                reason: e.to_string(),
            })?;
        Ok(Rpc {
            url: url.into(),
            http,
        })
    }

    async fn call(&self, method: &'static str, params: Value) -> Result<Value, SolanaError> {
        let fail = |reason: String| SolanaError::Rpc { method, reason };
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .map_err(|e| fail(e.without_url().to_string()))?;
        let status = response.status();
        let reply: Value = response
            .json()
            .await
            .map_err(|e| fail(format!("HTTP {status}: {}", e.without_url())))?;
        if let Some(error) = reply.get("error") {
            return Err(fail(error.to_string()));
        }
        reply
            .get("result")
            .cloned()
            .ok_or_else(|| fail("a reply with neither result nor error".to_owned()))
    }

    /// The latest blockhash (at `confirmed`) and the last block height it is valid for.
    pub async fn latest_blockhash(&self) -> Result<(Hash, u64), SolanaError> {
        let result = self
            .call("getLatestBlockhash", json!([{"commitment": "confirmed"}]))
            .await?;
        let value = &result["value"];
        let hash = value["blockhash"]
            .as_str()
            .and_then(|h| h.parse::<Hash>().ok())
            .ok_or_else(|| SolanaError::Rpc {
                method: "getLatestBlockhash",
                reason: format!("no blockhash in {value}"),
            })?;
        let height = value["lastValidBlockHeight"]
            .as_u64()
            .ok_or_else(|| SolanaError::Rpc {
                method: "getLatestBlockhash",
                reason: format!("no lastValidBlockHeight in {value}"),
            })?;
        Ok((hash, height))
    }

    /// The block height at a commitment.
    pub async fn block_height(&self, commitment: Commitment) -> Result<u64, SolanaError> {
        self.call(
            "getBlockHeight",
            json!([{"commitment": commitment.as_str()}]),
        )
        .await?
        .as_u64()
        .ok_or_else(|| SolanaError::Rpc {
            method: "getBlockHeight",
            reason: "not a number".to_owned(),
        })
    }

    /// Sends recorded bytes. No preflight (a rebroadcast of a landed transaction would fail it)
    /// and no retries by the node: the caller rebroadcasts.
    pub async fn send(&self, transaction: &str) -> Result<String, SolanaError> {
        let result = self
            .call(
                "sendTransaction",
                json!([transaction, {"encoding": "base64", "skipPreflight": true, "maxRetries": 0}]),
            )
            .await?;
        result
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| SolanaError::Rpc {
                method: "sendTransaction",
                reason: "no signature in the reply".to_owned(),
            })
    }

    /// The status of each signature, searching the ledger's history, not only recent ones.
    pub async fn signature_statuses(
        &self,
        signatures: &[String],
    ) -> Result<Vec<Option<SignatureStatus>>, SolanaError> {
        let result = self
            .call(
                "getSignatureStatuses",
                json!([signatures, {"searchTransactionHistory": true}]),
            )
            .await?;
        let bad = |reason: String| SolanaError::Rpc {
            method: "getSignatureStatuses",
            reason,
        };
        let values = result["value"]
            .as_array()
            .ok_or_else(|| bad("no value array".to_owned()))?;
        if values.len() != signatures.len() {
            return Err(bad(format!(
                "{} statuses for {} signatures",
                values.len(),
                signatures.len()
            )));
        }
        values
            .iter()
            .map(|value| {
                if value.is_null() {
                    return Ok(None);
                }
                let slot = value["slot"]
                    .as_u64()
                    .ok_or_else(|| bad(format!("no slot in {value}")))?;
                let commitment = match value["confirmationStatus"].as_str() {
                    Some("finalized") => Commitment::Finalized,
                    Some("confirmed") => Commitment::Confirmed,
                    Some("processed") => Commitment::Processed,
                    // Old nodes: no status but `confirmations: null` means rooted.
                    _ if value["confirmations"].is_null() => Commitment::Finalized,
                    _ => Commitment::Processed,
                };
                let err = match &value["err"] {
                    Value::Null => None,
                    other => Some(other.to_string()),
                };
                Ok(Some(SignatureStatus {
                    slot,
                    err,
                    commitment,
                }))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{chain_with_mint, token_balance as balance};
    use litesvm::LiteSVM;

    /// A mint of `decimals` (6 stands in for USDC), and a treasury holding `funds` of it.
    fn chain_with(funds: u64, decimals: u8) -> (LiteSVM, Treasury, Pubkey) {
        let keypair = Keypair::new();
        let (svm, mint) = chain_with_mint(&keypair, funds, decimals);
        (svm, Treasury::from_keypair(keypair), mint)
    }

    fn chain(funds: u64) -> (LiteSVM, Treasury, Pubkey) {
        chain_with(funds, USDC_DECIMALS)
    }

    #[test]
    fn a_payout_pays_the_exact_amount_to_the_wallets_token_account_with_its_memo() {
        let (mut svm, treasury, mint) = chain(100_000_000);
        let wallet = Keypair::new().pubkey();
        let payout = Uuid::from_u128(42);
        let signed = transfer(
            &treasury,
            &mint,
            &wallet,
            25_123_456,
            payout,
            svm.latest_blockhash(),
        )
        .unwrap();
        let tx = decode_transaction(&signed.transaction).unwrap();
        assert_eq!(tx.signatures[0].to_string(), signed.signature);
        let meta = svm.send_transaction(tx.clone()).unwrap();
        let destination = associated_token_account(&wallet, &mint);
        assert_eq!(signed.destination, destination.to_string());
        assert_eq!(balance(&svm, &destination), Some(25_123_456));
        assert_eq!(
            balance(&svm, &treasury.token_account(&mint)),
            Some(100_000_000 - 25_123_456)
        );
        // The memo program logs the memo, signed by the treasury.
        let logs = meta.logs.join("\n");
        assert!(
            logs.contains(&format!(
                "Program log: Signed by:\nProgram log: {}\nProgram log: Memo (len 50)\nProgram log: gpunex:payout:00000000-0000-0000-0000-00000000002a",
                treasury.pubkey()
            )),
            "{logs}"
        );
        // The same bytes again: refused as already processed, nothing moves.
        assert!(svm.send_transaction(tx).is_err());
        assert_eq!(balance(&svm, &destination), Some(25_123_456));
        // A second payout to the same wallet: the account exists, the create is a no-op.
        svm.expire_blockhash();
        let again = transfer(
            &treasury,
            &mint,
            &wallet,
            1,
            Uuid::from_u128(43),
            svm.latest_blockhash(),
        )
        .unwrap();
        svm.send_transaction(decode_transaction(&again.transaction).unwrap())
            .unwrap();
        assert_eq!(balance(&svm, &destination), Some(25_123_457));
    }

    #[test]
    fn the_chain_checks_the_mint_decimals_and_the_funds() {
        let (mut svm, treasury, mint) = chain(10);
        let wallet = Keypair::new().pubkey();
        // More than the treasury holds: the transaction fails on chain and nothing moves.
        let signed = transfer(
            &treasury,
            &mint,
            &wallet,
            11,
            Uuid::from_u128(1),
            svm.latest_blockhash(),
        )
        .unwrap();
        let failed = svm
            .send_transaction(decode_transaction(&signed.transaction).unwrap())
            .unwrap_err();
        assert!(
            format!("{:?}", failed.err).contains("Custom(1)"),
            "{failed:?}"
        );
        assert_eq!(balance(&svm, &treasury.token_account(&mint)), Some(10));
        // A mint with other decimals than USDC's: refused by the token program
        // (MintDecimalsMismatch), nothing moves.
        let (mut svm, treasury, other) = chain_with(10, 9);
        let signed = transfer(
            &treasury,
            &other,
            &wallet,
            1,
            Uuid::from_u128(2),
            svm.latest_blockhash(),
        )
        .unwrap();
        let failed = svm
            .send_transaction(decode_transaction(&signed.transaction).unwrap())
            .unwrap_err();
        assert!(
            format!("{:?}", failed.err).contains("Custom(18)"),
            "{failed:?}"
        );
        assert_eq!(balance(&svm, &treasury.token_account(&other)), Some(10));
    }

    #[test]
    fn key_files_are_read_without_ever_showing_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("treasury.json");
        let keypair = Keypair::new();
        std::fs::write(
            &path,
            serde_json::to_string(&keypair.to_bytes().to_vec()).unwrap(),
        )
        .unwrap();
        let treasury = Treasury::from_file(&path).unwrap();
        assert_eq!(treasury.pubkey(), keypair.pubkey());
        assert_eq!(
            format!("{treasury:?}"),
            format!("Treasury({})", keypair.pubkey())
        );
        std::fs::write(&path, "[1, 2, 3]").unwrap();
        let error = Treasury::from_file(&path).unwrap_err().to_string();
        assert!(error.contains("not a valid 64-byte"), "{error}");
        assert!(!error.contains("1, 2"), "{error}");
        assert!(Treasury::from_file(&dir.path().join("missing")).is_err());
    }
}
