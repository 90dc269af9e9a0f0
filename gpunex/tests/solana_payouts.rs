//! Solana payouts end to end, on SQLite and PostgreSQL: the real `gpunex payouts send` binary
//! sends real transactions, executed by a real Solana runtime (litesvm, with the SPL Token,
//! Associated Token Account and Memo programs, and a 6-decimal mint standing in for USDC).
//!
//! The runtime sits behind `LiteRpc`, a stand-in for a validator's JSON-RPC endpoint written
//! for these tests: the methods the sender calls, slots that advance with each request,
//! blockhashes that expire after 150 blocks, `finalized` 32 slots after a transaction lands.
//! It can kill the sender right after executing its transaction and before answering (the crash
//! between send and record), and drop a transaction (a leader that never included it). A
//! transfer from an underfunded treasury lands and fails on chain: the payout fails and its
//! amount is paid the next week, to the wallet then in force.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine;
use gpunex_api::AppState;
use gpunex_payouts::solana::{Treasury, associated_token_account, decode_transaction, memo};
use gpunex_payouts::testing::{chain_with_mint, set_token_account, token_balance};
use gpunex_tests::{TestDb, conformance};
use litesvm::LiteSVM;
use serde_json::{Value, json};
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use uuid::Uuid;

conformance!(solana_payouts_are_paid_exactly_once);

mod common;

/// Slots a request moves the chain forward.
const SLOTS_PER_REQUEST: u64 = 4;
/// Blocks a blockhash stays valid.
const BLOCKHASH_BLOCKS: u64 = 150;
/// Slots from landing to `finalized`.
const FINALITY: u64 = 32;

struct Chain {
    svm: LiteSVM,
    slot: u64,
    valid_until: u64,
    /// Signature -> (slot, error) of every transaction that landed.
    landed: HashMap<String, (u64, Option<String>)>,
    /// How often each signature was sent.
    sends: HashMap<String, u32>,
    /// Signatures to drop (never executed).
    drop: HashSet<String>,
    /// Drop the first transaction sent (a leader that never included it).
    drop_next: bool,
    /// Kill this process right after executing the next transaction, before answering.
    kill_after_send: Option<std::process::Child>,
    killed: Option<std::process::ExitStatus>,
}

type Shared = Arc<Mutex<Chain>>;

async fn rpc(State(chain): State<Shared>, Json(request): Json<Value>) -> (StatusCode, Json<Value>) {
    let mut chain = chain.lock().unwrap();
    chain.slot += SLOTS_PER_REQUEST;
    if chain.slot > chain.valid_until {
        chain.svm.expire_blockhash();
        chain.valid_until = chain.slot + BLOCKHASH_BLOCKS;
    }
    let params = &request["params"];
    let result = match request["method"].as_str().unwrap_or("") {
        "getLatestBlockhash" => json!({
            "context": {"slot": chain.slot},
            "value": {"blockhash": chain.svm.latest_blockhash().to_string(),
                      "lastValidBlockHeight": chain.valid_until}
        }),
        "getBlockHeight" => {
            let finalized = params[0]["commitment"] == "finalized";
            json!(if finalized {
                chain.slot.saturating_sub(FINALITY)
            } else {
                chain.slot
            })
        }
        "sendTransaction" => {
            assert_eq!(params[1]["encoding"], "base64");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(params[0].as_str().unwrap())
                .unwrap();
            let tx: solana_transaction::Transaction = bincode::deserialize(&bytes).unwrap();
            let signature = tx.signatures[0].to_string();
            *chain.sends.entry(signature.clone()).or_default() += 1;
            if chain.drop_next {
                chain.drop_next = false;
                chain.drop.insert(signature.clone());
            }
            if !chain.drop.contains(&signature) {
                let _ = chain.svm.send_transaction(tx.clone());
                if let Some(result) = chain.svm.get_transaction(&tx.signatures[0]) {
                    let err = result.as_ref().err().map(|f| format!("{:?}", f.err));
                    let slot = chain.slot;
                    chain.landed.entry(signature.clone()).or_insert((slot, err));
                }
                if let Some(mut child) = chain.kill_after_send.take() {
                    child.kill().unwrap();
                    chain.killed = Some(child.wait().unwrap());
                }
            }
            json!(signature)
        }
        "getSignatureStatuses" => {
            assert_eq!(params[1]["searchTransactionHistory"], true);
            let statuses: Vec<Value> = params[0]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| match chain.landed.get(s.as_str().unwrap()) {
                    None => Value::Null,
                    Some((slot, err)) => {
                        let finalized = chain.slot >= slot + FINALITY;
                        json!({
                            "slot": slot,
                            "confirmations": if finalized { Value::Null } else { json!(chain.slot - slot) },
                            "err": err.as_ref().map_or(Value::Null, |e| json!({"InstructionError": e})),
                            "confirmationStatus": if finalized { "finalized" } else { "confirmed" },
                        })
                    }
                })
                .collect();
            json!({"context": {"slot": chain.slot}, "value": statuses})
        }
        other => {
            return (
                StatusCode::OK,
                Json(json!({"jsonrpc": "2.0", "id": request["id"],
                            "error": {"code": -32601, "message": format!("method {other} not found")}})),
            );
        }
    };
    (
        StatusCode::OK,
        Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result})),
    )
}

/// A chain with a 6-decimal mint and a treasury holding 1,000 of it; the RPC stand-in's URL.
async fn chain(treasury: &Keypair) -> (Shared, Pubkey, String) {
    let (svm, mint) = chain_with_mint(treasury, 1_000_000_000, 6);
    let shared = Arc::new(Mutex::new(Chain {
        svm,
        slot: 1_000,
        valid_until: 1_000 + BLOCKHASH_BLOCKS,
        landed: HashMap::new(),
        sends: HashMap::new(),
        drop: HashSet::new(),
        drop_next: false,
        kill_after_send: None,
        killed: None,
    }));
    let app = axum::Router::new()
        .route("/", axum::routing::post(rpc))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (shared, mint, url)
}

fn balance(chain: &Shared, account: &Pubkey) -> Option<u64> {
    token_balance(&chain.lock().unwrap().svm, account)
}

fn sender(
    db: &TestDb,
    rpc_url: &str,
    key_file: &std::path::Path,
    mint: &Pubkey,
) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gpunex"));
    command
        .args(["payouts", "send", "--solana-poll", "20ms"])
        .args(["--solana-rpc-url", rpc_url])
        .arg("--treasury-keypair")
        .arg(key_file)
        .args(["--usdc-mint", &mint.to_string()])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

/// Runs the sender until every open payout is settled; it must exit cleanly.
fn send_until_settled(mut sender: std::process::Command) {
    let output = sender.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The batch of `date`, created by finance.
async fn batch(base: &str, admin: &str, date: &str) -> Value {
    let (status, _, batch) = common::request(
        base,
        "POST",
        "/v1/payout-batches",
        Some(admin),
        Some(json!({"date": date})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{batch}");
    batch
}

async fn payout(state: &AppState, payout_id: Uuid) -> gpunex_projections::payouts::PayoutRecord {
    let head = state.store.head_position().await.unwrap();
    state.credentials.wait_for(head).await.unwrap();
    // The stored projection holds every payout, open or over, by its own fold of the log.
    state
        .store
        .stored_payout(payout_id, head)
        .await
        .unwrap()
        .unwrap()
}

async fn solana_payouts_are_paid_exactly_once(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let entry = common::one_h100();
    let mut wallets = Vec::new();
    for email in ["crash@example.com", "dropped@example.com"] {
        let (provider, token) =
            common::approved_provider(&base, &admin, email, entry.clone()).await;
        let wallet = Keypair::new().pubkey();
        common::set_payout_settings(
            &base,
            &token,
            provider,
            "weekly",
            json!({"kind": "solana", "wallet": wallet.to_string()}),
        )
        .await;
        wallets.push((provider, wallet, token));
    }
    let (crash_provider, crash_wallet, crash_token) = wallets[0].clone();
    let (drop_provider, drop_wallet, _) = wallets[1].clone();
    assert_eq!(
        common::earn(&state.store, crash_provider, 31_404, "2026-10-20T10:00:00Z").await,
        25_123_200
    );
    assert_eq!(
        common::earn(&state.store, drop_provider, 40_000, "2026-11-04T10:00:00Z").await,
        32_000_000
    );

    let treasury = Keypair::new();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("treasury.json");
    std::fs::write(
        &key_file,
        serde_json::to_string(&treasury.to_bytes().to_vec()).unwrap(),
    )
    .unwrap();
    let (chain, mint, rpc_url) = chain(&treasury).await;
    let source = Treasury::from_keypair(treasury.insecure_clone()).token_account(&mint);

    // Monday 2026-11-02 pays the first provider.
    let monday = batch(&base, &admin, "2026-11-02").await;
    assert_eq!(monday["payouts"].as_array().unwrap().len(), 1, "{monday}");
    let first: Uuid = monday["payouts"][0]["payout_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // The crash: the sender is killed right after its transaction executes, before it hears
    // back or records anything more.
    let child = sender(db, &rpc_url, &key_file, &mint).spawn().unwrap();
    chain.lock().unwrap().kill_after_send = Some(child);
    let killed = loop {
        if let Some(status) = chain.lock().unwrap().killed {
            break status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(!killed.success(), "the sender was killed: {killed:?}");
    let destination = associated_token_account(&crash_wallet, &mint);
    assert_eq!(balance(&chain, &destination), Some(25_123_200));
    // What it recorded before sending: the signed transaction, its signature and expiry.
    let record = payout(&state, first).await;
    assert_eq!(record.submissions.len(), 1);
    let gpunex_domain::payouts::Submission::Solana {
        signature,
        transaction,
        last_valid_block_height,
        destination: recorded_destination,
        attempt,
    } = record.submissions[0].submission.clone();
    assert_eq!(attempt, 1);
    assert_eq!(recorded_destination, destination.to_string());
    assert!(last_valid_block_height > 1_000);
    assert_eq!(
        decode_transaction(&transaction).unwrap().signatures[0].to_string(),
        signature
    );
    assert!(chain.lock().unwrap().landed.contains_key(&signature));

    // Started again: it finds the recorded signature on chain and waits for `finalized`; no
    // second transfer.
    send_until_settled(sender(db, &rpc_url, &key_file, &mint));
    let record = payout(&state, first).await;
    assert_eq!(record.submissions.len(), 1);
    let confirmed = record.confirmed.clone().expect("confirmed");
    let gpunex_domain::payouts::Confirmation::Solana {
        signature: paid,
        slot,
    } = confirmed.confirmation
    else {
        panic!("not a Solana confirmation");
    };
    assert_eq!(paid, signature);
    assert_eq!(
        Some(&(slot, None)),
        chain.lock().unwrap().landed.get(&signature)
    );
    assert_eq!(balance(&chain, &destination), Some(25_123_200));
    assert_eq!(balance(&chain, &source), Some(1_000_000_000 - 25_123_200));
    assert_eq!(chain.lock().unwrap().landed.len(), 1);
    // The memo carries the payout id.
    {
        let chain = chain.lock().unwrap();
        let tx = chain
            .svm
            .get_transaction(&signature.parse().unwrap())
            .unwrap()
            .clone()
            .unwrap();
        assert!(
            tx.logs.iter().any(|l| l.ends_with(&memo(first))),
            "{:?}",
            tx.logs
        );
    }

    // The next Monday's payout is dropped by the cluster: the sender rebroadcasts the same bytes
    // while the blockhash is valid, and signs anew only once it has expired unseen.
    let next = batch(&base, &admin, "2026-11-09").await;
    let second: Uuid = next["payouts"][0]["payout_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    chain.lock().unwrap().drop_next = true;
    send_until_settled(sender(db, &rpc_url, &key_file, &mint));
    let record = payout(&state, second).await;
    assert_eq!(record.submissions.len(), 2, "signed again after expiry");
    let signatures: Vec<String> = record
        .submissions
        .iter()
        .map(|s| match &s.submission {
            gpunex_domain::payouts::Submission::Solana { signature, .. } => signature.clone(),
        })
        .collect();
    {
        let chain = chain.lock().unwrap();
        assert!(
            chain.sends[&signatures[0]] >= 2,
            "rebroadcast: {:?}",
            chain.sends
        );
        assert!(!chain.landed.contains_key(&signatures[0]));
        assert!(chain.landed.contains_key(&signatures[1]));
    }
    assert!(record.confirmed.is_some());
    let dropped_destination = associated_token_account(&drop_wallet, &mint);
    assert_eq!(balance(&chain, &dropped_destination), Some(32_000_000));
    assert_eq!(
        balance(&chain, &source),
        Some(1_000_000_000 - 25_123_200 - 32_000_000)
    );

    // A payout the chain refuses: the treasury holds too little USDC. The provider changes its
    // wallet after the payout is scheduled: the payout still goes to the wallet it was
    // scheduled with.
    assert_eq!(
        common::earn(&state.store, crash_provider, 30_000, "2026-11-10T10:00:00Z").await,
        24_000_000
    );
    let third = batch(&base, &admin, "2026-11-16").await;
    assert_eq!(third["payouts"].as_array().unwrap().len(), 1, "{third}");
    let refused: Uuid = third["payouts"][0]["payout_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let new_wallet = Keypair::new().pubkey();
    common::set_payout_settings(
        &base,
        &crash_token,
        crash_provider,
        "weekly",
        json!({"kind": "solana", "wallet": new_wallet.to_string()}),
    )
    .await;
    let left = 1_000_000_000 - 25_123_200 - 32_000_000;
    {
        let mut chain = chain.lock().unwrap();
        set_token_account(&mut chain.svm, source, mint, treasury.pubkey(), 1_000_000);
    }
    send_until_settled(sender(db, &rpc_url, &key_file, &mint));
    let record = payout(&state, refused).await;
    let failure = record.failed.clone().expect("failed on chain");
    assert_eq!(failure.reason_code, "transaction_failed");
    assert!(record.confirmed.is_none());
    let gpunex_domain::payouts::Submission::Solana {
        signature: refused_signature,
        destination: refused_destination,
        ..
    } = record.submissions[0].submission.clone();
    assert_eq!(refused_destination, destination.to_string());
    assert!(
        failure.reason.contains(&refused_signature),
        "{}",
        failure.reason
    );
    assert!(
        chain.lock().unwrap().landed[&refused_signature].1.is_some(),
        "landed with an error"
    );
    // Nothing moved on chain; the amount is back in the provider's balance.
    assert_eq!(balance(&chain, &destination), Some(25_123_200));
    assert_eq!(balance(&chain, &source), Some(1_000_000));
    let (status, _, history) = common::request(
        &base,
        "GET",
        &format!("/v1/providers/{crash_provider}/payouts"),
        Some(&crash_token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{history}");
    assert_eq!(history["balance_micro_usdc"], 24_000_000, "{history}");
    assert_eq!(history["in_flight_micro_usdc"], 0);
    assert_eq!(history["history"][0]["status"], "failed");
    assert_eq!(history["history"][0]["failure_code"], "transaction_failed");

    // The treasury is funded again; the next Monday brings the returned amount forward and pays
    // it to the wallet in force now.
    {
        let mut chain = chain.lock().unwrap();
        set_token_account(&mut chain.svm, source, mint, treasury.pubkey(), left);
    }
    let fourth = batch(&base, &admin, "2026-11-23").await;
    let again = &fourth["payouts"][0];
    assert_eq!(again["brought_forward_micro_usdc"], 24_000_000, "{fourth}");
    assert_eq!(again["lines"], 0);
    assert_eq!(again["amount_micro_usdc"], 24_000_000);
    send_until_settled(sender(db, &rpc_url, &key_file, &mint));
    let fourth_id: Uuid = again["payout_id"].as_str().unwrap().parse().unwrap();
    assert!(payout(&state, fourth_id).await.confirmed.is_some());
    let new_destination = associated_token_account(&new_wallet, &mint);
    assert_eq!(balance(&chain, &new_destination), Some(24_000_000));
    assert_eq!(balance(&chain, &destination), Some(25_123_200));
    assert_eq!(balance(&chain, &source), Some(left - 24_000_000));

    // The provider's history shows the transaction; the money reconciles.
    let (status, _, history) = common::request(
        &base,
        "GET",
        &format!("/v1/providers/{crash_provider}/payouts"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(history["paid_micro_usdc"], 25_123_200 + 24_000_000);
    assert_eq!(history["balance_micro_usdc"], 0);
    let entries = history["history"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{history}");
    let first_entry = entries
        .iter()
        .find(|h| h["payout_id"] == first.to_string())
        .unwrap();
    assert_eq!(first_entry["signature"], signature);
    assert_eq!(first_entry["status"], "confirmed");
    assert_eq!(first_entry["slot"], slot);
    let (_, _, report) =
        common::request(&base, "GET", "/v1/audit/reconcile", Some(&admin), None).await;
    assert_eq!(report["mismatches"], json!([]), "{report}");
}
