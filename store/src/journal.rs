//! The ledger journal's stored form, for both databases (ADR 0012, ADR 0016).
//!
//! Journal entries are stored in blocks: `ledger_journal_blocks (position, first_position,
//! entries)`, one row per run of up to [`BLOCK_ENTRIES_MAX`] consecutive entries of one written
//! page, keyed by the block's last position. `entries` encodes each entry's position, id and
//! postings in their order (account, side, amount). The event's id and recorded time are not
//! repeated: readers look them up by position in the log. An account's statement is found
//! through `ledger_postings (account, last_position, positions)`: per account and per written
//! page, the increasing positions of the entries that post to it. A rebuild so writes one row
//! per 28 events plus one per account and page, instead of one row per posting and a sorted
//! index over all of them (ADR 0012's one row per entry cost SQLite a B-tree insert per event,
//! which was a rebuild's whole time: ADR 0016).
//!
//! The encodings are versioned and decoded strictly: a malformed row is a `CorruptRow`, never
//! a panic.
//!
//! `entries`: the format byte 1; the number of entries (1 to [`BLOCK_ENTRIES_MAX`]); per entry
//! its position (the first is the row's `first_position`; each next as its non-zero distance
//! from the one before, unsigned LEB128), its id's 16 bytes, and the length of its lines
//! (LEB128) then the lines. The last entry's position is the row's `position`.
//!
//! lines: the format byte 1; the number of postings (1 to 64); per posting the account's kind
//! (a byte, [`account_kind`]), its owner's 16 bytes when the kind has one, the side (0 debit,
//! 1 credit) and the amount in micro-USDC as an unsigned LEB128 integer (at least 1).
//!
//! `positions`: the format byte 1; the first position as unsigned LEB128, then each next
//! position as its (non-zero) distance from the one before.

use std::collections::{BTreeMap, HashMap};

use gpunex_domain::{Account, Side, Usdc};
use gpunex_projections::ledger::{
    AccountTotals, JournalInput, LedgerBatch, LedgerLine, LedgerSink,
};
use uuid::Uuid;

use crate::StoreError;
use crate::bytes::{Reader, put_varint};

const LINES_FORMAT: u8 = 1;
const BLOCK_FORMAT: u8 = 1;
/// Entries a journal block holds at most. A block of usage entries (about 66 bytes each) stays
/// under 2,000 bytes: two fit a 4 KiB SQLite page without spilling into an overflow page, and
/// PostgreSQL keeps it in its row uncompressed (it compresses rows from about 2 KB). A statement
/// that needs one entry decodes at most this many.
pub(crate) const BLOCK_ENTRIES_MAX: usize = 28;
/// The room a block is given when it is opened: a full block of usage entries fits in it.
const BLOCK_BYTES_EXPECTED: usize = 2_048;
/// Postings rows an account's statement reads at a time.
pub(crate) const POSTINGS_ROWS_PER_READ: u64 = 64;
const POSITIONS_FORMAT: u8 = 1;

/// One event's journal entry, as a block holds it (its lines still encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryRow {
    pub position: u64,
    pub entry_id: Uuid,
    pub lines: Vec<u8>,
}

/// A run of consecutive entries of one written page, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockRow {
    /// The last entry's position: the row's key.
    pub position: u64,
    pub first_position: u64,
    pub entries: Vec<u8>,
}

/// One account's postings in one written batch, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PostingsRow {
    pub account: String,
    pub last_position: u64,
    pub positions: Vec<u8>,
}

/// A folded batch in its stored form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JournalRows {
    pub blocks: Vec<BlockRow>,
    pub postings: Vec<PostingsRow>,
}

/// A folded batch as it is written: its journal rows, encoded where it was folded (off the
/// writer, which is a rebuild's slowest stage), and its accounts' deltas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LedgerRows {
    pub journal: JournalRows,
    pub deltas: BTreeMap<Account, AccountTotals>,
}

impl LedgerRows {
    /// Folds `events` (in increasing position) straight into their rows: the ledger's fold
    /// ([`gpunex_projections::ledger::fold_into`]) with the rows as its sink, so no line is
    /// kept once encoded.
    pub fn fold<E: JournalInput>(events: &[E]) -> Result<LedgerRows, StoreError> {
        let mut rows = RowsBuilder::default();
        gpunex_projections::ledger::fold_into(events, &mut rows)?;
        rows.finish(None)
    }

    /// The rows of a folded batch (its lines in position and line order, as the fold makes
    /// them).
    pub fn of(batch: &LedgerBatch) -> Result<LedgerRows, StoreError> {
        let mut rows = RowsBuilder::default();
        for line in &batch.lines {
            rows.line(line.clone())?;
        }
        rows.finish(Some(batch.deltas.clone()))
    }
}

#[cfg(test)]
impl JournalRows {
    /// The journal rows of a folded batch.
    pub fn of(batch: &LedgerBatch) -> Result<JournalRows, StoreError> {
        Ok(LedgerRows::of(batch)?.journal)
    }
}

/// One account a page posts to: its totals (when the page is folded here) and the positions
/// of its entries.
#[derive(Debug)]
struct AccountRows {
    account: Account,
    totals: AccountTotals,
    positions: Vec<u64>,
}

/// Encodes a page's lines into its rows as they come, entry by entry and block by block: each
/// entry's lines into `lines` (reused), each finished entry onto the open block.
#[derive(Debug, Default)]
struct RowsBuilder {
    accounts: Vec<AccountRows>,
    /// Where each account's rows are in `accounts` (the accounts are the log's, never a
    /// request's, so a fast hasher with no defence against chosen keys is enough).
    index: rustc_hash::FxHashMap<Account, usize>,
    /// The account of the last posting the fold added to, which its next line names.
    last_account: usize,
    /// The open entry: its position and id, its postings so far and their encoding.
    entry: Option<(u64, Uuid)>,
    postings: u32,
    lines: Vec<u8>,
    /// The position of the last entry finished.
    last_entry: Option<u64>,
    /// The open block: its entries so far, the first one's position and the encoding.
    block_entries: u8,
    block_first: u64,
    block: Vec<u8>,
    blocks: Vec<BlockRow>,
}

impl RowsBuilder {
    /// The index of `account`'s rows, added on its first posting.
    fn account(&mut self, account: Account) -> usize {
        if self
            .accounts
            .get(self.last_account)
            .is_some_and(|rows| rows.account == account)
        {
            return self.last_account;
        }
        let accounts = &mut self.accounts;
        let index = *self.index.entry(account).or_insert_with(|| {
            accounts.push(AccountRows {
                account,
                totals: AccountTotals::EMPTY,
                positions: Vec::new(),
            });
            accounts.len() - 1
        });
        self.last_account = index;
        index
    }

    fn line(&mut self, line: LedgerLine) -> Result<(), StoreError> {
        let corrupt = |reason: &str| StoreError::CorruptRow {
            position: line.position,
            reason: format!("journal entry: {reason}"),
        };
        let index = self.account(line.account);
        let positions = &mut self.accounts[index].positions;
        if positions.last() != Some(&line.position) {
            positions.push(line.position);
        }
        if self
            .entry
            .is_none_or(|(position, _)| position != line.position)
        {
            self.finish_entry()?;
            self.entry = Some((line.position, line.entry_id));
            self.postings = 0;
            self.lines.clear();
            // The number of postings is set when the entry is finished.
            self.lines.extend_from_slice(&[LINES_FORMAT, 0]);
        }
        if line.line_index != self.postings || line.amount.micros() <= 0 {
            return Err(corrupt("postings out of order or not positive"));
        }
        self.postings += 1;
        if self.postings as usize > gpunex_domain::ledger::JOURNAL_LINES_MAX {
            return Err(corrupt("1 to 64 postings"));
        }
        let (kind, owner) = account_kind(line.account);
        self.lines.push(kind);
        if let Some(owner) = owner {
            self.lines.extend_from_slice(owner.as_bytes());
        }
        self.lines.push(match line.side {
            Side::Debit => 0,
            Side::Credit => 1,
        });
        put_varint(&mut self.lines, line.amount.micros().unsigned_abs());
        Ok(())
    }

    /// Adds the open entry (if any) to the open block, after closing a full one.
    fn finish_entry(&mut self) -> Result<(), StoreError> {
        let Some((position, entry_id)) = self.entry.take() else {
            return Ok(());
        };
        if self.last_entry.is_some_and(|last| position <= last) {
            return Err(StoreError::CorruptRow {
                position,
                reason: "journal block: entries out of order".to_owned(),
            });
        }
        // 1 to JOURNAL_LINES_MAX (64), checked as each posting was added.
        self.lines[1] = u8::try_from(self.postings).unwrap_or(u8::MAX);
        if usize::from(self.block_entries) == BLOCK_ENTRIES_MAX {
            self.finish_block();
        }
        if self.block_entries == 0 {
            self.block = Vec::with_capacity(BLOCK_BYTES_EXPECTED);
            self.block.extend_from_slice(&[BLOCK_FORMAT, 0]);
            self.block_first = position;
        } else if let Some(last) = self.last_entry {
            put_varint(&mut self.block, position - last);
        }
        self.block.extend_from_slice(entry_id.as_bytes());
        put_varint(&mut self.block, self.lines.len() as u64);
        self.block.extend_from_slice(&self.lines);
        self.block_entries += 1;
        self.last_entry = Some(position);
        Ok(())
    }

    fn finish_block(&mut self) {
        let Some(last) = self.last_entry.filter(|_| self.block_entries > 0) else {
            return;
        };
        self.block[1] = self.block_entries;
        self.blocks.push(BlockRow {
            position: last,
            first_position: self.block_first,
            entries: std::mem::take(&mut self.block),
        });
        self.block_entries = 0;
    }

    /// The page's rows; its deltas are the totals folded here, or `deltas` when given.
    fn finish(
        mut self,
        deltas: Option<BTreeMap<Account, AccountTotals>>,
    ) -> Result<LedgerRows, StoreError> {
        self.finish_entry()?;
        self.finish_block();
        self.accounts.sort_unstable_by_key(|rows| rows.account);
        let postings = self
            .accounts
            .iter()
            .filter_map(|rows| {
                Some(PostingsRow {
                    account: rows.account.to_string(),
                    last_position: *rows.positions.last()?,
                    positions: encode_positions(&rows.positions),
                })
            })
            .collect();
        let deltas = deltas.unwrap_or_else(|| {
            self.accounts
                .iter()
                .map(|rows| (rows.account, rows.totals))
                .collect()
        });
        Ok(LedgerRows {
            journal: JournalRows {
                blocks: self.blocks,
                postings,
            },
            deltas,
        })
    }
}

impl LedgerSink for RowsBuilder {
    type Error = StoreError;

    fn totals(&mut self, account: Account) -> &mut AccountTotals {
        let index = self.account(account);
        &mut self.accounts[index].totals
    }

    fn line(&mut self, line: LedgerLine) -> Result<(), StoreError> {
        RowsBuilder::line(self, line)
    }
}

/// The entries of a stored block whose positions `keep` accepts, checked to run from
/// `first_position` to `position`.
pub(crate) fn decode_block(
    position: u64,
    first_position: u64,
    bytes: &[u8],
    keep: &impl Fn(u64) -> bool,
    out: &mut Vec<EntryRow>,
) -> Result<(), StoreError> {
    let mut reader = Reader {
        bytes,
        position,
        what: "journal block",
    };
    if reader.byte()? != BLOCK_FORMAT {
        return Err(reader.corrupt("unknown format"));
    }
    let count = reader.byte()?;
    if count == 0 || usize::from(count) > BLOCK_ENTRIES_MAX {
        return Err(reader.corrupt("no entry or too many"));
    }
    let mut at = first_position;
    for index in 0..count {
        if index > 0 {
            let step = reader.varint()?;
            if step == 0 {
                return Err(reader.corrupt("positions not increasing"));
            }
            at = at
                .checked_add(step)
                .ok_or_else(|| reader.corrupt("position overflows"))?;
        }
        let entry_id =
            Uuid::from_slice(reader.take(16)?).map_err(|_| reader.corrupt("entry id"))?;
        let length = usize::try_from(reader.varint()?).map_err(|_| reader.corrupt("length"))?;
        let lines = reader.take(length)?;
        if keep(at) {
            out.push(EntryRow {
                position: at,
                entry_id,
                lines: lines.to_vec(),
            });
        }
    }
    reader.done()?;
    if at != position {
        return Err(reader.corrupt("entries do not end at the row's position"));
    }
    Ok(())
}

/// The stored blocks' entries whose positions `keep` accepts, in position order (blocks are
/// read in key order).
pub(crate) fn block_entries(
    blocks: impl IntoIterator<Item = (i64, i64, Vec<u8>)>,
    keep: impl Fn(u64) -> bool,
) -> Result<Vec<EntryRow>, StoreError> {
    let mut entries = Vec::new();
    for (position, first_position, bytes) in blocks {
        let position = crate::to_u64(position, 0, "position")?;
        let first_position = crate::to_u64(first_position, position, "first_position")?;
        decode_block(position, first_position, &bytes, &keep, &mut entries)?;
    }
    Ok(entries)
}

/// The positions of `entries`, as the log's lookup of their events' ids and times binds them.
pub(crate) fn entry_positions(entries: &[EntryRow]) -> Vec<i64> {
    entries.iter().map(|e| crate::to_i64(e.position)).collect()
}

/// The events' ids and recorded times by position, from `position, event_id, recorded_at_us`
/// rows.
pub(crate) fn stamp_map(
    rows: Vec<(i64, Option<Uuid>, Option<i64>)>,
) -> Result<HashMap<u64, (Uuid, i64)>, StoreError> {
    rows.into_iter()
        .map(|(position, id, at)| {
            Ok((
                crate::to_u64(position, 0, "position")?,
                (id.unwrap_or_default(), at.unwrap_or_default()),
            ))
        })
        .collect()
}

/// The lines of `entries`, each with its event's id and recorded time from `stamps` (an entry
/// without its event gets a nil event id and time 0, which no replay matches).
pub(crate) fn entry_lines(
    entries: Vec<EntryRow>,
    stamps: &HashMap<u64, (Uuid, i64)>,
) -> Result<Vec<LedgerLine>, StoreError> {
    let mut lines = Vec::with_capacity(entries.len() * 3);
    for entry in entries {
        let (event_id, recorded_at_us) = stamps.get(&entry.position).copied().unwrap_or_default();
        lines.extend(decode_lines(
            entry.position,
            event_id,
            recorded_at_us,
            entry.entry_id,
            &entry.lines,
        )?);
    }
    Ok(lines)
}

/// The first `limit` of `lines` (entries in position order) that post to `account` (all of
/// them when `None`).
pub(crate) fn statement(
    lines: Vec<LedgerLine>,
    account: Option<Account>,
    limit: usize,
) -> Vec<LedgerLine> {
    lines
        .into_iter()
        .filter(|line| account.is_none_or(|account| line.account == account))
        .take(limit)
        .collect()
}

/// Walks an account's postings rows, [`POSTINGS_ROWS_PER_READ`] at a time, until it has the
/// first `limit` positions after `after`: the backend reads the rows after [`Self::next`] and
/// hands them to [`Self::add`].
pub(crate) struct PositionWalk {
    after: u64,
    limit: usize,
    from: Option<u64>,
    positions: Vec<u64>,
}

impl PositionWalk {
    pub fn new(after: u64, limit: usize) -> PositionWalk {
        PositionWalk {
            after,
            limit,
            from: Some(after),
            positions: Vec::new(),
        }
    }

    /// The `last_position` to read rows after, or `None` when the walk is done.
    pub fn next(&self) -> Option<u64> {
        self.from.filter(|_| self.positions.len() < self.limit)
    }

    /// Takes a read's rows (`last_position`, decoded positions) in `last_position` order.
    pub fn add(&mut self, rows: Vec<(u64, Vec<u64>)>) {
        if rows.len() < POSTINGS_ROWS_PER_READ as usize {
            self.from = None;
        }
        for (last, positions) in rows {
            let after = self.after;
            self.positions
                .extend(positions.into_iter().filter(|p| *p > after));
            if self.from.is_some() {
                self.from = Some(last);
            }
        }
    }

    pub fn positions(mut self) -> Vec<u64> {
        self.positions.truncate(self.limit);
        self.positions
    }
}

/// Blocks a walk over the journal reads at a time.
pub(crate) const BLOCKS_PER_READ: u64 = 16;

/// Walks the journal's blocks, [`BLOCKS_PER_READ`] at a time, until it has the first `limit`
/// entries after `after`: the backend reads the blocks after [`Self::next`] and hands them to
/// [`Self::add`].
pub(crate) struct BlockWalk {
    after: u64,
    limit: usize,
    from: Option<u64>,
    entries: Vec<EntryRow>,
}

impl BlockWalk {
    pub fn new(after: u64, limit: usize) -> BlockWalk {
        BlockWalk {
            after,
            limit,
            from: Some(after),
            entries: Vec::new(),
        }
    }

    /// The position to read blocks after, or `None` when the walk is done.
    pub fn next(&self) -> Option<u64> {
        self.from.filter(|_| self.entries.len() < self.limit)
    }

    /// Takes a read's blocks (`position, first_position, entries`) in key order.
    pub fn add(&mut self, blocks: Vec<(i64, i64, Vec<u8>)>) -> Result<(), StoreError> {
        let full = blocks.len() >= BLOCKS_PER_READ as usize;
        let after = self.after;
        let last = blocks.last().map(|block| block.0);
        let entries = block_entries(blocks, |at| at > after)?;
        self.entries.extend(entries);
        self.from = match last {
            Some(last) if full => Some(crate::to_u64(last, 0, "position")?),
            _ => None,
        };
        Ok(())
    }

    pub fn entries(mut self) -> Vec<EntryRow> {
        self.entries.truncate(self.limit);
        self.entries
    }
}

/// A digest of a set of positions (an account's entries), to compare the stored postings rows
/// with a replay's without holding either in memory: the count and two sums of the positions
/// through different 64-bit mixes (SplitMix64's finalizer), so that a listed position missing,
/// added or changed shows in all three.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PostingsDigest {
    entries: u64,
    sum: u64,
    mixed: u64,
}

impl PostingsDigest {
    pub fn add(&mut self, position: u64) {
        self.entries += 1;
        self.sum = self.sum.wrapping_add(mix(position));
        self.mixed = self
            .mixed
            .wrapping_add(mix(position ^ 0x9e37_79b9_7f4a_7c15));
    }

    pub fn entries(&self) -> u64 {
        self.entries
    }
}

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The stored byte of an account's kind (never reused: stored rows keep their meaning).
fn account_kind(account: Account) -> (u8, Option<Uuid>) {
    match account {
        Account::RenterReceivable(id) => (1, Some(id)),
        Account::ProviderPayable(id) => (2, Some(id)),
        Account::PlatformRevenue => (3, None),
        Account::PayoutClearing(id) => (4, Some(id)),
        Account::Treasury => (5, None),
        Account::PlatformAdjustments => (6, None),
    }
}

fn account_of(kind: u8, owner: Option<Uuid>) -> Option<Account> {
    Some(match (kind, owner) {
        (1, Some(id)) => Account::RenterReceivable(id),
        (2, Some(id)) => Account::ProviderPayable(id),
        (3, None) => Account::PlatformRevenue,
        (4, Some(id)) => Account::PayoutClearing(id),
        (5, None) => Account::Treasury,
        (6, None) => Account::PlatformAdjustments,
        _ => return None,
    })
}

fn has_owner(kind: u8) -> bool {
    matches!(kind, 1 | 2 | 4)
}

/// The lines of a stored entry, with its event's id and recorded time.
pub(crate) fn decode_lines(
    position: u64,
    event_id: Uuid,
    recorded_at_us: i64,
    entry_id: Uuid,
    bytes: &[u8],
) -> Result<Vec<LedgerLine>, StoreError> {
    let mut reader = Reader {
        bytes,
        position,
        what: "journal entry",
    };
    if reader.byte()? != LINES_FORMAT {
        return Err(reader.corrupt("unknown format"));
    }
    let count = reader.byte()?;
    if count == 0 || usize::from(count) > gpunex_domain::ledger::JOURNAL_LINES_MAX {
        return Err(reader.corrupt("1 to 64 postings"));
    }
    let mut lines = Vec::with_capacity(usize::from(count));
    for line_index in 0..u32::from(count) {
        let kind = reader.byte()?;
        let owner = if has_owner(kind) {
            let bytes = reader.take(16)?;
            Some(Uuid::from_slice(bytes).map_err(|_| reader.corrupt("owner id"))?)
        } else {
            None
        };
        let account = account_of(kind, owner).ok_or_else(|| reader.corrupt("account kind"))?;
        let side = match reader.byte()? {
            0 => Side::Debit,
            1 => Side::Credit,
            _ => return Err(reader.corrupt("side")),
        };
        let amount = i64::try_from(reader.varint()?)
            .ok()
            .filter(|a| *a > 0)
            .ok_or_else(|| reader.corrupt("amount"))?;
        lines.push(LedgerLine {
            position,
            line_index,
            event_id,
            entry_id,
            account,
            side,
            amount: Usdc::from_micros(amount),
            recorded_at_us,
        });
    }
    reader.done()?;
    Ok(lines)
}

fn encode_positions(positions: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + positions.len() * 2);
    out.push(POSITIONS_FORMAT);
    let mut previous = 0;
    for &position in positions {
        put_varint(&mut out, position - previous);
        previous = position;
    }
    out
}

/// The increasing positions of a stored postings row, checked to end at `last_position`.
pub(crate) fn decode_positions(last_position: u64, bytes: &[u8]) -> Result<Vec<u64>, StoreError> {
    let mut reader = Reader {
        bytes,
        position: last_position,
        what: "account postings",
    };
    if reader.byte()? != POSITIONS_FORMAT {
        return Err(reader.corrupt("unknown format"));
    }
    let mut positions = Vec::new();
    let mut previous = 0_u64;
    while !reader.bytes.is_empty() {
        let step = reader.varint()?;
        if step == 0 {
            return Err(reader.corrupt("positions not increasing"));
        }
        previous = previous
            .checked_add(step)
            .ok_or_else(|| reader.corrupt("position overflows"))?;
        positions.push(previous);
    }
    if positions.last() != Some(&last_position) {
        return Err(reader.corrupt("positions do not end at the row's last position"));
    }
    Ok(positions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_projections::FoldError;
    use gpunex_projections::ledger::JournalEvent;

    fn line(
        position: u64,
        line_index: u32,
        account: Account,
        side: Side,
        amount: i64,
    ) -> LedgerLine {
        LedgerLine {
            position,
            line_index,
            event_id: Uuid::from_u128(u128::from(position)),
            entry_id: Uuid::from_u128(u128::from(position) << 64),
            account,
            side,
            amount: Usdc::from_micros(amount),
            recorded_at_us: 1_700_000_000_000_000 + position as i64,
        }
    }

    fn batch() -> LedgerBatch {
        let provider = Account::ProviderPayable(Uuid::from_u128(7));
        let renter = Account::RenterReceivable(Uuid::from_u128(9));
        LedgerBatch {
            lines: vec![
                line(3, 0, renter, Side::Debit, 100),
                line(3, 1, provider, Side::Credit, 80),
                line(3, 2, Account::PlatformRevenue, Side::Credit, 20),
                line(9, 0, Account::Treasury, Side::Debit, i64::MAX),
                line(
                    9,
                    1,
                    Account::PayoutClearing(Uuid::from_u128(1)),
                    Side::Credit,
                    i64::MAX,
                ),
                line(300, 0, Account::PlatformAdjustments, Side::Debit, 1),
                line(300, 1, provider, Side::Credit, 1),
                line(300, 2, provider, Side::Debit, 5),
                line(300, 3, renter, Side::Credit, 5),
            ],
            deltas: BTreeMap::new(),
        }
    }

    /// The stored blocks of `rows` as a database returns them.
    fn stored(rows: &JournalRows) -> Vec<(i64, i64, Vec<u8>)> {
        rows.blocks
            .iter()
            .map(|b| {
                (
                    b.position as i64,
                    b.first_position as i64,
                    b.entries.clone(),
                )
            })
            .collect()
    }

    fn stamps_of(batch: &LedgerBatch) -> HashMap<u64, (Uuid, i64)> {
        batch
            .lines
            .iter()
            .map(|l| (l.position, (l.event_id, l.recorded_at_us)))
            .collect()
    }

    #[test]
    fn entries_round_trip_with_their_event() {
        let batch = batch();
        let rows = JournalRows::of(&batch).unwrap();
        assert_eq!(rows.blocks.len(), 1);
        assert_eq!(
            (rows.blocks[0].first_position, rows.blocks[0].position),
            (3, 300)
        );
        let entries = block_entries(stored(&rows), |_| true).unwrap();
        assert_eq!(entries.len(), 3);
        let decoded = entry_lines(entries, &stamps_of(&batch)).unwrap();
        assert_eq!(decoded, batch.lines);

        let middle = block_entries(stored(&rows), |at| at == 9).unwrap();
        let lines = entry_lines(middle, &stamps_of(&batch)).unwrap();
        assert_eq!(lines, batch.lines[3..5]);
        // An entry whose event the log does not have: no id, time 0.
        let lines = entry_lines(
            block_entries(stored(&rows), |at| at == 3).unwrap(),
            &HashMap::new(),
        )
        .unwrap();
        assert!(
            lines
                .iter()
                .all(|l| l.event_id.is_nil() && l.recorded_at_us == 0)
        );
    }

    /// The stored bytes of ADR 0016's format, spelled out: rows written before keep decoding,
    /// and rows written now decode in older readers.
    #[test]
    fn blocks_are_written_in_the_stored_format() {
        let mut batch = batch();
        batch.lines.truncate(5);
        let rows = JournalRows::of(&batch).unwrap();
        let owner = |n: u128| Uuid::from_u128(n).as_bytes().to_vec();
        let entry3 = [
            vec![LINES_FORMAT, 3],
            vec![1],
            owner(9),
            vec![0, 100],
            vec![2],
            owner(7),
            vec![1, 80],
            vec![3, 1, 20],
        ]
        .concat();
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        let entry9 = [
            vec![LINES_FORMAT, 2, 5, 0],
            max.to_vec(),
            vec![4],
            owner(1),
            vec![1],
            max.to_vec(),
        ]
        .concat();
        let expected = [
            vec![BLOCK_FORMAT, 2],
            owner(3 << 64),
            vec![entry3.len() as u8],
            entry3,
            vec![6],
            owner(9 << 64),
            vec![entry9.len() as u8],
            entry9,
        ]
        .concat();
        assert_eq!(rows.blocks.len(), 1);
        assert_eq!(rows.blocks[0].entries, expected);
        assert_eq!(
            (rows.blocks[0].first_position, rows.blocks[0].position),
            (3, 9)
        );
    }

    /// A journal event of `lines` postings (a debit, then credits summing to it).
    fn journal_event(position: u64, lines: usize, amount: i64) -> JournalEvent {
        let renter = Account::RenterReceivable(Uuid::from_u128(u128::from(position % 5)));
        let mut postings = vec![gpunex_domain::ledger::Posting::debit(
            renter,
            Usdc::from_micros(amount * (lines as i64 - 1)),
        )];
        for n in 1..lines {
            let account = if n % 2 == 1 {
                Account::ProviderPayable(Uuid::from_u128(u128::from(position % 3) + 100))
            } else {
                Account::PlatformRevenue
            };
            postings.push(gpunex_domain::ledger::Posting::credit(
                account,
                Usdc::from_micros(amount),
            ));
        }
        JournalEvent {
            position,
            event_id: Uuid::from_u128(u128::from(position)),
            recorded_at_us: position as i64 * 1_000,
            entry_id: Uuid::from_u128(u128::from(position) << 64),
            entry: gpunex_domain::ledger::JournalEntry::new(postings).unwrap(),
        }
    }

    #[test]
    fn folding_into_rows_equals_encoding_the_folded_batch() {
        for count in [1_u64, 2, 27, 28, 29, 56, 57, 300] {
            // Gaps between positions, 2 to 64 postings an entry.
            let events: Vec<JournalEvent> = (1..=count)
                .map(|n| journal_event(n * 8 + n % 7, 2 + (n as usize * 5) % 63, n as i64))
                .collect();
            let batch = gpunex_projections::ledger::fold_batch(&events).unwrap();
            let folded = LedgerRows::fold(&events).unwrap();
            assert_eq!(folded, LedgerRows::of(&batch).unwrap(), "{count} events");
            assert_eq!(folded.deltas, batch.deltas);
            let all = block_entries(stored(&folded.journal), |_| true).unwrap();
            assert_eq!(entry_lines(all, &stamps_of(&batch)).unwrap(), batch.lines);
        }
        let events = vec![journal_event(5, 3, 1), journal_event(4, 3, 1)];
        assert!(matches!(
            LedgerRows::fold(&events),
            Err(StoreError::Fold(FoldError::OutOfOrder { position: 4, .. }))
        ));
        // One renter debited the most a posting may hold until its debits overflow.
        let max = gpunex_domain::ledger::POSTING_MICRO_USDC_MAX;
        let events: Vec<JournalEvent> = (1..=(i64::MAX / max + 1) as u64)
            .map(|k| journal_event(k * 5, 2, max))
            .collect();
        let overflow = Err::<(), _>(FoldError::BalanceOverflow {
            account: Account::RenterReceivable(Uuid::nil()).to_string(),
            position: 5 * (i64::MAX / max + 1) as u64,
        });
        assert_eq!(
            gpunex_projections::ledger::fold_batch(&events).map(|_| ()),
            overflow
        );
        match LedgerRows::fold(&events) {
            Err(StoreError::Fold(error)) => assert_eq!(Err::<(), _>(error), overflow),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_batch_out_of_order_is_refused() {
        let mut shuffled = batch();
        shuffled.lines.swap(3, 5);
        assert!(LedgerRows::of(&shuffled).is_err(), "an entry's lines apart");
        let mut skipped = batch();
        skipped.lines.remove(1);
        assert!(LedgerRows::of(&skipped).is_err(), "a line index skipped");
        let mut zero = batch();
        zero.lines[2].amount = Usdc::ZERO;
        assert!(LedgerRows::of(&zero).is_err(), "an amount of zero");
    }

    #[test]
    fn a_page_of_many_entries_is_split_in_blocks() {
        let lines: Vec<LedgerLine> = (1..=200)
            .map(|p| line(p * 2, 0, Account::Treasury, Side::Debit, p as i64))
            .collect();
        let batch = LedgerBatch {
            lines,
            deltas: BTreeMap::new(),
        };
        let rows = JournalRows::of(&batch).unwrap();
        let bounds: Vec<(u64, u64)> = rows
            .blocks
            .iter()
            .map(|b| (b.first_position, b.position))
            .collect();
        let size = BLOCK_ENTRIES_MAX as u64 * 2;
        let expected: Vec<(u64, u64)> = (0..200_u64.div_ceil(BLOCK_ENTRIES_MAX as u64))
            .map(|b| (b * size + 2, ((b + 1) * size).min(400)))
            .collect();
        assert_eq!(bounds, expected);
        let all = block_entries(stored(&rows), |_| true).unwrap();
        assert_eq!(entry_lines(all, &stamps_of(&batch)).unwrap(), batch.lines);

        // A walk from inside a block reads on until it has enough entries.
        let after = size + 10;
        let mut walk = BlockWalk::new(after, 70);
        assert_eq!(walk.next(), Some(after));
        let blocks = stored(&rows);
        walk.add(blocks[1..].to_vec()).unwrap();
        assert_eq!(walk.next(), None, "fewer blocks than a full read: the end");
        let entries = walk.entries();
        assert_eq!(entries.len(), 70);
        assert_eq!(entries[0].position, after + 2);
        assert_eq!(entries[69].position, after + 140);
    }

    #[test]
    fn postings_list_each_accounts_positions_once() {
        let rows = JournalRows::of(&batch()).unwrap();
        let provider = Account::ProviderPayable(Uuid::from_u128(7)).to_string();
        let row = rows
            .postings
            .iter()
            .find(|p| p.account == provider)
            .unwrap();
        assert_eq!(row.last_position, 300);
        assert_eq!(decode_positions(300, &row.positions).unwrap(), vec![3, 300]);
        assert_eq!(rows.postings.len(), 6);
    }

    #[test]
    fn a_walk_reads_rows_until_it_has_enough_positions() {
        let full = POSTINGS_ROWS_PER_READ as usize;
        // Rows of two positions each: 10, 11 | 20, 21 | ...
        let rows = |from: u64| -> Vec<(u64, Vec<u64>)> {
            (1..)
                .map(|n: u64| (n * 10 + 1, vec![n * 10, n * 10 + 1]))
                .filter(|(last, _)| *last > from)
                .take(full)
                .collect()
        };
        let mut walk = PositionWalk::new(20, 3);
        assert_eq!(walk.next(), Some(20));
        walk.add(rows(20));
        assert_eq!(walk.next(), None, "enough positions");
        assert_eq!(walk.positions(), vec![21, 30, 31]);

        let mut walk = PositionWalk::new(0, 1_000);
        while let Some(from) = walk.next() {
            let mut page = rows(from);
            page.retain(|(last, _)| *last <= 1_001);
            walk.add(page);
        }
        let positions = walk.positions();
        assert_eq!(positions.len(), 200);
        assert_eq!(positions.last(), Some(&1_001));
    }

    #[test]
    fn digests_differ_when_a_position_does() {
        let digest = |positions: &[u64]| {
            let mut d = PostingsDigest::default();
            positions.iter().for_each(|p| d.add(*p));
            d
        };
        assert_eq!(digest(&[1, 5, 9]), digest(&[9, 1, 5]));
        assert_ne!(digest(&[1, 5, 9]), digest(&[1, 5, 10]));
        assert_ne!(digest(&[1, 5, 9]), digest(&[1, 5]));
        assert_ne!(digest(&[1, 4, 10]), digest(&[2, 3, 10]));
    }

    #[test]
    fn malformed_rows_are_corrupt_not_panics() {
        let rows = JournalRows::of(&batch()).unwrap();
        let entries = block_entries(stored(&rows), |_| true).unwrap();
        let good = &entries[0].lines;
        for cut in 0..good.len() {
            assert!(decode_lines(3, Uuid::nil(), 0, Uuid::nil(), &good[..cut]).is_err());
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode_lines(3, Uuid::nil(), 0, Uuid::nil(), &trailing).is_err());
        for bad in [
            vec![2, 1, 3, 0, 1], // unknown format
            vec![1, 0],          // no postings
            vec![1, 1, 7, 0, 1], // unknown kind
            vec![1, 1, 3, 2, 1], // unknown side
            vec![1, 1, 3, 0, 0], // zero amount
            vec![
                1, 1, 3, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ], // overflow
        ] {
            assert!(matches!(
                decode_lines(3, Uuid::nil(), 0, Uuid::nil(), &bad),
                Err(StoreError::CorruptRow { position: 3, .. })
            ));
        }
        let block = &rows.blocks[0];
        let keep = |_: u64| true;
        let decode = |position: u64, first: u64, bytes: &[u8]| {
            decode_block(position, first, bytes, &keep, &mut Vec::new())
        };
        assert!(decode(300, 3, &block.entries).is_ok());
        for cut in 0..block.entries.len() {
            assert!(
                decode(300, 3, &block.entries[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut trailing = block.entries.clone();
        trailing.push(0);
        assert!(decode(300, 3, &trailing).is_err());
        assert!(
            decode(301, 3, &block.entries).is_err(),
            "ends before the key"
        );
        assert!(decode(300, 4, &block.entries).is_err(), "begins elsewhere");
        assert!(decode(300, u64::MAX, &block.entries).is_err(), "overflows");
        for bad in [vec![2, 1], vec![1, 0], vec![1, BLOCK_ENTRIES_MAX as u8 + 1]] {
            assert!(matches!(
                decode(300, 3, &bad),
                Err(StoreError::CorruptRow { position: 300, .. })
            ));
        }
        assert!(decode_positions(5, &[1, 5]).is_ok());
        for bad in [vec![], vec![2, 5], vec![1, 5, 0], vec![1, 4], vec![1, 0x80]] {
            assert!(decode_positions(5, &bad).is_err(), "{bad:?}");
        }
    }
}
