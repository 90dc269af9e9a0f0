//! A local Solana runtime for tests (feature `testing`, never in a production build): litesvm
//! with a mint standing in for USDC, a treasury holding it, and token accounts set directly.
#![allow(
    clippy::panic,
    reason = "test support: a setup that cannot be made fails the test that asked for it"
)]

use litesvm::LiteSVM;
use solana_keypair::Keypair;
use solana_program_pack::Pack;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use spl_token_interface::state::{Account as TokenAccount, AccountState, Mint};

/// Lamports given to the treasury for fees and rent.
const TREASURY_LAMPORTS: u64 = 10_000_000_000;

fn set_packed(svm: &mut LiteSVM, address: Pubkey, data: Vec<u8>) {
    let lamports = svm.minimum_balance_for_rent_exemption(data.len());
    svm.set_account(
        address,
        solana_account::Account {
            lamports,
            data,
            owner: spl_token_interface::id(),
            executable: false,
            rent_epoch: 0,
        },
    )
    .unwrap_or_else(|e| panic!("cannot set account {address}: {e:?}"));
}

/// Writes an initialized token account of `mint` owned by `owner` holding `amount`, replacing
/// what is at `address` (a treasury drained or funded again).
pub fn set_token_account(
    svm: &mut LiteSVM,
    address: Pubkey,
    mint: Pubkey,
    owner: Pubkey,
    amount: u64,
) {
    let mut data = vec![0u8; TokenAccount::LEN];
    TokenAccount::pack(
        TokenAccount {
            mint,
            owner,
            amount,
            state: AccountState::Initialized,
            ..TokenAccount::default()
        },
        &mut data,
    )
    .unwrap_or_else(|e| panic!("cannot pack a token account: {e:?}"));
    set_packed(svm, address, data);
}

/// A runtime with a mint of `decimals` (6 stands in for USDC) whose authority is `treasury`,
/// and the treasury's associated token account holding all `funds` of it. Returns the mint.
pub fn chain_with_mint(treasury: &Keypair, funds: u64, decimals: u8) -> (LiteSVM, Pubkey) {
    let mut svm = LiteSVM::new();
    svm.airdrop(&treasury.pubkey(), TREASURY_LAMPORTS)
        .unwrap_or_else(|e| panic!("cannot fund the treasury: {e:?}"));
    let mint = Pubkey::new_unique();
    let mut data = vec![0u8; Mint::LEN];
    Mint::pack(
        Mint {
            mint_authority: Some(treasury.pubkey()).into(),
            supply: funds,
            decimals,
            is_initialized: true,
            freeze_authority: None.into(),
        },
        &mut data,
    )
    .unwrap_or_else(|e| panic!("cannot pack a mint: {e:?}"));
    set_packed(&mut svm, mint, data);
    let source = crate::solana::associated_token_account(&treasury.pubkey(), &mint);
    set_token_account(&mut svm, source, mint, treasury.pubkey(), funds);
    (svm, mint)
}

/// The token balance at `account`, if the account exists.
pub fn token_balance(svm: &LiteSVM, account: &Pubkey) -> Option<u64> {
    svm.get_account(account).map(|a| {
        TokenAccount::unpack(&a.data)
            .unwrap_or_else(|e| panic!("{account} is not a token account: {e:?}"))
            .amount
    })
}
