//! The stored earnings projection: every metered usage line, with its provider's running sums
//! through that line, and one row per rental a line refers to (ADR 0007; the store keeps a
//! provider's lines in runs, one row per folded page, ADR 0013).
//!
//! A total over any date range is then two indexed lookups and a subtraction (the running sums
//! of the last line before each end), whatever the length of the history; the lines of a range
//! are one range of the provider's runs. The rules are those of the in-memory [`crate::earnings`] model it
//! replaces: a line is dated when it was metered (`metered_at`; for events from before that
//! field, when it was recorded), and within a provider dates never go backwards (a line dated
//! "earlier" than the one before it, which two servers' clocks could produce, takes the previous
//! date), so date ranges and position ranges are both contiguous.
//!
//! The fold is pure: what it needs from before its batch (the rentals its lines refer to and the
//! providers' running sums) is passed in ([`Before`], loaded by the store for [`needs`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use gpunex_domain::DomainEvent;
use gpunex_domain::metered_line::MeteredLine;
use gpunex_domain::rental::{RentalEvent, RentalStarted};
use uuid::Uuid;

use crate::earnings::{RentalRef, Sums};
use crate::{FoldError, ProjectedEvent};

/// The projection's name, and its checkpoint's.
pub const EARNINGS: &str = "earnings";

/// A provider's place in the fold: the date of its last line and its sums through it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub last_at_us: i64,
    pub through: Sums,
}

/// One stored usage line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineRow {
    pub position: u64,
    pub provider_id: Uuid,
    pub at_us: i64,
    pub entry_id: Uuid,
    pub report_id: Uuid,
    pub rental_id: Uuid,
    pub from_gpu_seconds: u64,
    pub to_gpu_seconds: u64,
    pub price_per_gpu_hour: i64,
    pub gross: i64,
    pub fee: i64,
    pub net: i64,
    pub fee_bp: u32,
    /// The provider's sums through this line (this line included).
    pub through: Sums,
}

/// What one batch adds: rentals (inserted once), lines, the hours its lines fall in, and each
/// touched provider's new cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EarningsBatch {
    pub rentals: Vec<RentalRef>,
    pub lines: Vec<LineRow>,
    /// Every GPU row of each (provider, hour) the batch's lines fall in, as it stands after the
    /// batch: the stored rows of a provider's open hour ([`Before::hours`]) with the batch's
    /// lines added, so a writer replaces a provider's hour whole.
    pub hours: BTreeMap<HourKey, HourSums>,
    pub cursors: BTreeMap<Uuid, Cursor>,
}

/// The length of a stored hour (`earnings_hours`): one UTC hour. Every time zone's day
/// starts on a quarter hour, most on a whole UTC hour: a period's whole hours are read from the
/// hours, what is left of an hour cut by a period's bound from the lines.
pub const HOUR_US: i64 = 3_600_000_000;

/// The start of the UTC hour `at_us` falls in.
pub fn hour_of(at_us: i64) -> i64 {
    at_us - at_us.rem_euclid(HOUR_US)
}

/// An hour row's key: provider, hour (its first microsecond), GPU UUID, model.
pub type HourKey = (Uuid, i64, String, String);

/// One GPU's part of a provider's lines dated in one hour under one model: the sums the
/// dashboard's per-GPU and per-model figures add up ([`crate::earnings::Figures`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HourSums {
    /// The GPU's shares of the lines' gross, fee and GPU-seconds (GPU `i` of `n` gets `a div n`,
    /// plus one when `i < a mod n`), net = gross - fee of the shares, and how many lines the GPU
    /// was in. A rental with no GPU (never metered; kept for completeness) has one row under the
    /// GPU `""` with the whole amounts, which no per-GPU figure shows.
    pub gpu: Sums,
    /// The lines' own net and number, carried by the row of each line's first GPU, so a model's
    /// figures are its rows' shares (which add up to the lines' amounts exactly) with these.
    pub model_net: i64,
    pub model_lines: u64,
    /// The last log position folded into the row: a reader as of an earlier position reads the
    /// hour from its lines instead.
    pub through_position: u64,
}

impl HourSums {
    /// Adds `other` (later lines), refusing overflow.
    pub fn checked_add(&self, other: &HourSums) -> Option<HourSums> {
        Some(HourSums {
            gpu: Sums {
                gross: self.gpu.gross.checked_add(other.gpu.gross)?,
                fee: self.gpu.fee.checked_add(other.gpu.fee)?,
                net: self.gpu.net.checked_add(other.gpu.net)?,
                gpu_seconds: self.gpu.gpu_seconds.checked_add(other.gpu.gpu_seconds)?,
                lines: self.gpu.lines.checked_add(other.gpu.lines)?,
            },
            model_net: self.model_net.checked_add(other.model_net)?,
            model_lines: self.model_lines.checked_add(other.model_lines)?,
            through_position: self.through_position.max(other.through_position),
        })
    }
}

/// What one line adds to its GPUs' hours.
#[derive(Debug, Clone, Copy)]
pub struct HourLine {
    pub provider_id: Uuid,
    pub at_us: i64,
    pub position: u64,
    pub gross: i64,
    pub fee: i64,
    pub net: i64,
    pub gpu_seconds: u64,
}

/// Adds one line of `rental` to `hours` (one row per GPU of the rental); `None` on overflow.
pub fn add_line_hours(
    hours: &mut BTreeMap<HourKey, HourSums>,
    line: HourLine,
    rental: &RentalRef,
) -> Option<()> {
    let hour = hour_of(line.at_us);
    let seconds = i64::try_from(line.gpu_seconds).ok()?;
    let gpus: Vec<&str> = if rental.gpu_uuids.is_empty() {
        vec![""]
    } else {
        rental.gpu_uuids.iter().map(String::as_str).collect()
    };
    let n = i64::try_from(gpus.len()).ok()?;
    let share = |amount: i64, i: i64| amount.div_euclid(n) + i64::from(i < amount.rem_euclid(n));
    for (i, gpu) in (0..n).zip(gpus) {
        let gross = share(line.gross, i);
        let fee = share(line.fee, i);
        let first = i == 0;
        let add = HourSums {
            gpu: Sums {
                gross,
                fee,
                net: gross.checked_sub(fee)?,
                gpu_seconds: u64::try_from(share(seconds, i)).ok()?,
                lines: 1,
            },
            model_net: if first { line.net } else { 0 },
            model_lines: u64::from(first),
            through_position: line.position,
        };
        let key = (
            line.provider_id,
            hour,
            gpu.to_owned(),
            rental.model_id.clone(),
        );
        let entry = hours.entry(key).or_default();
        *entry = entry.checked_add(&add)?;
    }
    Some(())
}

/// What the fold reads of one event: a rental's start, or a usage line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read<'a> {
    Started(&'a RentalStarted),
    Metered(MeteredLine),
}

/// An event the fold takes: a whole decoded event ([`ProjectedEvent`], as `audit verify` and the
/// tests give it) or only what the fold reads of it ([`EarningsEvent`], as the catch-up decodes
/// it).
pub trait EarningsInput {
    fn position(&self) -> u64;
    fn recorded_at_us(&self) -> i64;
    /// What the fold reads of it; `None` for an event it skips.
    fn read(&self) -> Option<Read<'_>>;
}

impl EarningsInput for ProjectedEvent {
    fn position(&self) -> u64 {
        self.position
    }

    fn recorded_at_us(&self) -> i64 {
        self.recorded_at_us
    }

    fn read(&self) -> Option<Read<'_>> {
        match &self.event {
            DomainEvent::Rental(RentalEvent::Started(started)) => Some(Read::Started(started)),
            DomainEvent::Rental(RentalEvent::UsageMetered(metered)) => {
                Some(Read::Metered(MeteredLine::from(metered)))
            }
            _ => None,
        }
    }
}

/// Of one stored event, what the fold reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarningsEvent {
    pub position: u64,
    pub recorded_at_us: i64,
    pub event: EarningsEventKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EarningsEventKind {
    Started(Box<RentalStarted>),
    Metered(MeteredLine),
}

impl EarningsInput for EarningsEvent {
    fn position(&self) -> u64 {
        self.position
    }

    fn recorded_at_us(&self) -> i64 {
        self.recorded_at_us
    }

    fn read(&self) -> Option<Read<'_>> {
        Some(match &self.event {
            EarningsEventKind::Started(started) => Read::Started(started),
            EarningsEventKind::Metered(line) => Read::Metered(*line),
        })
    }
}

/// What a batch's fold needs from before the batch.
#[derive(Debug, Clone, Default)]
pub struct Before {
    pub rentals: HashMap<Uuid, RentalRef>,
    pub cursors: HashMap<Uuid, Cursor>,
    /// The GPU rows of each provider's open hour: the hour of its cursor's last line
    /// ([`open_hour`]). It is the only stored hour a later line of the provider can add to,
    /// since within a provider dates never go backwards; a provider absent here has no row in
    /// that hour.
    pub hours: BTreeMap<HourKey, HourSums>,
}

/// A provider's open hour: the hour of its last line, the one later lines may still add to.
pub fn open_hour(cursor: &Cursor) -> i64 {
    hour_of(cursor.last_at_us)
}

/// Makes `open` hold, for each provider `batch` moved, the GPU rows of its new open hour in
/// place of its earlier ones: what the next batch's fold needs of the hours
/// ([`Before::hours`]), one hour per provider.
pub fn keep_open_hours(open: &mut BTreeMap<HourKey, HourSums>, batch: &EarningsBatch) {
    for (provider, cursor) in &batch.cursors {
        let closed: Vec<HourKey> = open
            .range((*provider, i64::MIN, String::new(), String::new())..)
            .take_while(|(key, _)| key.0 == *provider)
            .map(|(key, _)| key.clone())
            .collect();
        for key in closed {
            open.remove(&key);
        }
        let rows = hour_rows(&batch.hours, *provider, open_hour(cursor));
        open.extend(rows.map(|(key, sums)| (key.clone(), *sums)));
    }
}

/// The GPU rows of `provider`'s `hour` in `hours`.
pub fn hour_rows(
    hours: &BTreeMap<HourKey, HourSums>,
    provider: Uuid,
    hour: i64,
) -> impl Iterator<Item = (&HourKey, &HourSums)> {
    hours
        .range((provider, hour, String::new(), String::new())..)
        .take_while(move |(key, _)| key.0 == provider && key.1 == hour)
}

/// The rentals (started before the batch) and providers a batch's lines concern.
pub fn needs<E: EarningsInput>(events: &[E]) -> (Vec<Uuid>, Vec<Uuid>) {
    let mut started = BTreeSet::new();
    let mut rentals = BTreeSet::new();
    let mut providers = BTreeSet::new();
    for event in events {
        match event.read() {
            Some(Read::Started(s)) => {
                started.insert(s.rental_id);
            }
            Some(Read::Metered(m)) => {
                if !started.contains(&m.rental_id) {
                    rentals.insert(m.rental_id);
                }
                providers.insert(m.provider_id);
            }
            None => {}
        }
    }
    (
        rentals.into_iter().collect(),
        providers.into_iter().collect(),
    )
}

fn overflow(provider: Uuid, position: u64) -> FoldError {
    FoldError::BalanceOverflow {
        account: format!("earnings of provider {provider}"),
        position,
    }
}

/// Adds one line to running sums, refusing overflow.
fn add(sums: Sums, row: &LineRow) -> Option<Sums> {
    Some(Sums {
        gross: sums.gross.checked_add(row.gross)?,
        fee: sums.fee.checked_add(row.fee)?,
        net: sums.net.checked_add(row.net)?,
        gpu_seconds: sums
            .gpu_seconds
            .checked_add(row.to_gpu_seconds.saturating_sub(row.from_gpu_seconds))?,
        lines: sums.lines.checked_add(1)?,
    })
}

/// Folds a batch of events (in increasing position) into the rows it adds.
pub fn fold_batch<E: EarningsInput>(
    events: &[E],
    before: &Before,
) -> Result<EarningsBatch, FoldError> {
    let mut batch = EarningsBatch::default();
    let mut new_rentals: Vec<RentalRef> = Vec::new();
    let mut started: HashMap<Uuid, usize> = HashMap::new();
    // The (provider, hour)s the batch has added to, each started from its stored rows.
    let mut opened: HashSet<(Uuid, i64)> = HashSet::new();
    let mut previous = 0;
    for event in events {
        let (position, recorded_at_us) = (event.position(), event.recorded_at_us());
        if position <= previous {
            return Err(FoldError::OutOfOrder { position, previous });
        }
        previous = position;
        match event.read() {
            Some(Read::Started(s)) => {
                started.insert(s.rental_id, new_rentals.len());
                let started = s;
                new_rentals.push(RentalRef {
                    rental_id: started.rental_id,
                    renter_id: started.renter_id,
                    provider_id: started.provider_id,
                    machine_id: started.machine_id,
                    model_id: started.model_id.clone(),
                    gpu_uuids: started.gpu_uuids.clone(),
                });
            }
            Some(Read::Metered(metered)) => {
                let rental = match started.get(&metered.rental_id) {
                    Some(index) => new_rentals.get(*index),
                    None => before.rentals.get(&metered.rental_id),
                };
                let Some(rental) = rental else {
                    // The in-memory model ignored lines of unknown rentals; so does this one.
                    continue;
                };
                let cursor = batch
                    .cursors
                    .get(&metered.provider_id)
                    .or_else(|| before.cursors.get(&metered.provider_id))
                    .copied();
                let dated = metered
                    .metered_at
                    .map_or(recorded_at_us, |t| t.unix_micros());
                let at_us = cursor.map_or(dated, |c| {
                    if c.through.lines == 0 {
                        dated
                    } else {
                        c.last_at_us.max(dated)
                    }
                });
                let mut row = LineRow {
                    position,
                    provider_id: metered.provider_id,
                    at_us,
                    entry_id: metered.entry_id,
                    report_id: metered.report_id,
                    rental_id: metered.rental_id,
                    from_gpu_seconds: metered.from_gpu_seconds,
                    to_gpu_seconds: metered.to_gpu_seconds,
                    price_per_gpu_hour: metered.price_per_gpu_hour.micros(),
                    gross: metered.gross.micros(),
                    fee: metered.fee.micros(),
                    net: metered.net.micros(),
                    fee_bp: metered.fee_bp,
                    through: Sums::default(),
                };
                row.through = add(cursor.unwrap_or_default().through, &row)
                    .ok_or_else(|| overflow(metered.provider_id, position))?;
                batch.cursors.insert(
                    metered.provider_id,
                    Cursor {
                        last_at_us: at_us,
                        through: row.through,
                    },
                );
                let hour = hour_of(at_us);
                if opened.insert((row.provider_id, hour)) {
                    let stored = hour_rows(&before.hours, row.provider_id, hour);
                    batch
                        .hours
                        .extend(stored.map(|(key, sums)| (key.clone(), *sums)));
                }
                add_line_hours(
                    &mut batch.hours,
                    HourLine {
                        provider_id: row.provider_id,
                        at_us,
                        position: row.position,
                        gross: row.gross,
                        fee: row.fee,
                        net: row.net,
                        gpu_seconds: row.to_gpu_seconds.saturating_sub(row.from_gpu_seconds),
                    },
                    rental,
                )
                .ok_or_else(|| overflow(metered.provider_id, position))?;
                batch.lines.push(row);
            }
            None => {}
        }
    }
    batch.rentals = new_rentals;
    Ok(batch)
}

/// The fold of a whole log kept in memory, for `audit verify` and tests: every batch folded in
/// order with the state the store would have loaded.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    before: Before,
}

impl Replay {
    /// Folds the next batch and remembers what later batches need: the rentals, and each
    /// provider's cursor and open hour.
    pub fn fold<E: EarningsInput>(&mut self, events: &[E]) -> Result<EarningsBatch, FoldError> {
        let batch = fold_batch(events, &self.before)?;
        for rental in &batch.rentals {
            self.before.rentals.insert(rental.rental_id, rental.clone());
        }
        self.before
            .cursors
            .extend(batch.cursors.iter().map(|(k, v)| (*k, *v)));
        keep_open_hours(&mut self.before.hours, &batch);
        Ok(batch)
    }

    /// Every provider's cursor so far.
    pub fn cursors(&self) -> &HashMap<Uuid, Cursor> {
        &self.before.cursors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::StreamId;
    use gpunex_domain::ledger::{Account, JournalEntry, Posting};
    use gpunex_domain::money::Usdc;
    use gpunex_domain::rental::{RentalStarted, UsageMetered};
    use gpunex_domain::time::Timestamp;

    use crate::earnings::Earnings;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn projected(position: u64, recorded_at_us: i64, event: DomainEvent) -> ProjectedEvent {
        ProjectedEvent {
            position,
            event_id: id(u128::from(position) + 50_000),
            stream_id: StreamId::parse("rental-x").unwrap(),
            stream_version: position,
            recorded_at_us,
            event,
        }
    }

    fn started(rental: u128, provider: Uuid) -> RentalStarted {
        RentalStarted {
            rental_id: id(rental),
            renter_id: id(2),
            provider_id: provider,
            machine_id: id(3),
            gpu_uuids: vec!["GPU-a".to_owned(), "GPU-b".to_owned()],
            model_id: "h100-80gb".to_owned(),
            price_per_gpu_hour: Usdc::from_micros(2_000_000),
            started_at: Timestamp::from_unix_micros(0),
            workload: None,
        }
    }

    fn metered(rental: &RentalStarted, to: u64, gross: i64, fee: i64) -> DomainEvent {
        let postings = JournalEntry::new(vec![
            Posting::debit(
                Account::RenterReceivable(rental.renter_id),
                Usdc::from_micros(gross),
            ),
            Posting::credit(
                Account::ProviderPayable(rental.provider_id),
                Usdc::from_micros(gross - fee),
            ),
            Posting::credit(Account::PlatformRevenue, Usdc::from_micros(fee)),
        ])
        .unwrap();
        DomainEvent::Rental(RentalEvent::UsageMetered(UsageMetered {
            entry_id: id(u128::from(to)),
            rental_id: rental.rental_id,
            renter_id: rental.renter_id,
            provider_id: rental.provider_id,
            report_id: id(u128::from(to) + 1_000),
            from_gpu_seconds: to - 10,
            to_gpu_seconds: to,
            price_per_gpu_hour: rental.price_per_gpu_hour,
            gross: Usdc::from_micros(gross),
            fee: Usdc::from_micros(fee),
            net: Usdc::from_micros(gross - fee),
            fee_bp: 2_000,
            postings,
            reported_gpu_seconds: None,
            metered_at: None,
        }))
    }

    /// Split into batches anywhere, the stored fold dates and sums every line as the in-memory
    /// model does.
    #[test]
    fn batches_fold_like_the_in_memory_model() {
        let provider = id(4);
        let first = started(1, provider);
        let second = started(5, provider);
        let events = vec![
            projected(
                1,
                0,
                DomainEvent::Rental(RentalEvent::Started(first.clone())),
            ),
            projected(2, 100, metered(&first, 10, 1_001, 200)),
            projected(3, 200, metered(&first, 20, 2_000, 400)),
            // Recorded "before" the previous line (another server's clock): dated at 200.
            projected(4, 150, metered(&first, 30, 3_000, 600)),
            projected(
                5,
                300,
                DomainEvent::Rental(RentalEvent::Started(second.clone())),
            ),
            projected(6, 400, metered(&second, 10, 500, 100)),
        ];
        let mut memory = Earnings::default();
        for e in &events {
            memory.apply(e.position, e.stream_version, &e.event);
        }
        for split in 0..=events.len() {
            let mut replay = Replay::default();
            let (a, b) = events.split_at(split);
            let mut rows = replay.fold(a).unwrap().lines;
            let (rentals, providers) = needs(b);
            assert!(rentals.iter().all(|r| a.iter().any(|e| matches!(&e.event,
                DomainEvent::Rental(RentalEvent::Started(s)) if s.rental_id == *r))));
            assert!(providers.iter().all(|p| *p == provider));
            rows.extend(replay.fold(b).unwrap().lines);
            assert_eq!(rows.len(), 4, "split at {split}");
            let dates: Vec<i64> = rows.iter().map(|r| r.at_us).collect();
            assert_eq!(dates, vec![100, 200, 200, 400]);
            let last = rows.last().unwrap().through;
            assert_eq!(last, memory.lifetime(provider));
            assert_eq!(replay.cursors()[&provider].through, last);
            assert_eq!(replay.cursors()[&provider].last_at_us, 400);
        }
    }

    /// Each line's GPU shares land in its hour, under its model; a model's figures are the rows'
    /// shares with the lines' own net and count; split into batches anywhere, the batches' hours
    /// add up to the whole log's.
    #[test]
    fn hours_carry_each_gpus_shares_and_add_up_across_batches() {
        const HOUR: i64 = HOUR_US;
        let provider = id(4);
        let rental = started(1, provider);
        let events = vec![
            projected(
                1,
                0,
                DomainEvent::Rental(RentalEvent::Started(rental.clone())),
            ),
            // 1,001 among 2 GPUs: 501 and 500; fee 201: 101 and 100.
            projected(2, 10, metered(&rental, 10, 1_001, 201)),
            projected(3, HOUR - 1, metered(&rental, 20, 3, 1)),
            projected(4, HOUR, metered(&rental, 31, 2_000, 400)),
            projected(5, 3 * HOUR + 5, metered(&rental, 41, 7, 1)),
        ];
        let whole = fold_batch(&events, &Before::default()).unwrap().hours;
        let key = |hour: i64, gpu: &str| (provider, hour, gpu.to_owned(), "h100-80gb".to_owned());
        let first_a = whole[&key(0, "GPU-a")];
        let first_b = whole[&key(0, "GPU-b")];
        assert_eq!((first_a.gpu.gross, first_b.gpu.gross), (501 + 2, 500 + 1));
        assert_eq!((first_a.gpu.fee, first_b.gpu.fee), (101 + 1, 100));
        assert_eq!(first_a.gpu.net, first_a.gpu.gross - first_a.gpu.fee);
        assert_eq!((first_a.gpu.lines, first_b.gpu.lines), (2, 2));
        assert_eq!((first_a.model_lines, first_b.model_lines), (2, 0));
        assert_eq!(first_a.model_net, (1_001 - 201) + (3 - 1));
        assert_eq!(first_a.through_position, 3);
        assert_eq!(whole[&key(HOUR, "GPU-a")].gpu.gross, 1_000);
        assert_eq!(whole[&key(3 * HOUR, "GPU-b")].gpu.gross, 3);
        assert_eq!(whole.len(), 6, "three hours of two GPUs");
        for split in 0..=events.len() {
            let mut replay = Replay::default();
            let (a, b) = events.split_at(split);
            let mut merged = replay.fold(a).unwrap().hours;
            let later = replay.fold(b).unwrap().hours;
            // The second batch's hours are whole: an hour both batches add to is the first
            // batch's rows with the second's lines added.
            merged.extend(later);
            assert_eq!(merged, whole, "split at {split}");
        }
        assert_eq!(hour_of(-1), -HOUR);
        assert_eq!(hour_of(HOUR), HOUR);
    }

    /// A batch's lines start from the stored rows of their provider's open hour, and only
    /// from those: an hour the provider's cursor has left is never read again.
    #[test]
    fn a_batch_adds_to_the_open_hour_it_is_given() {
        const HOUR: i64 = HOUR_US;
        let provider = id(4);
        let rental = started(1, provider);
        let mut before = Before::default();
        before.rentals.insert(
            rental.rental_id,
            RentalRef {
                rental_id: rental.rental_id,
                renter_id: rental.renter_id,
                provider_id: provider,
                machine_id: rental.machine_id,
                model_id: rental.model_id.clone(),
                gpu_uuids: rental.gpu_uuids.clone(),
            },
        );
        let through = Sums {
            gross: 50,
            lines: 1,
            ..Sums::default()
        };
        before.cursors.insert(
            provider,
            Cursor {
                last_at_us: HOUR + 7,
                through,
            },
        );
        let key = |hour: i64, gpu: &str| (provider, hour, gpu.to_owned(), "h100-80gb".to_owned());
        let stored = |gross: i64, lines: u64| HourSums {
            gpu: Sums {
                gross,
                net: gross,
                lines,
                ..Sums::default()
            },
            through_position: 3,
            ..HourSums::default()
        };
        // Another model's row of the open hour is kept as it is.
        let other = (provider, HOUR, "GPU-z".to_owned(), "a100-40gb".to_owned());
        before.hours.insert(key(HOUR, "GPU-a"), stored(25, 1));
        before.hours.insert(key(HOUR, "GPU-b"), stored(25, 1));
        before.hours.insert(other.clone(), stored(9, 2));
        let events = [
            // Recorded in the hour before the open one: dated at the cursor's date.
            projected(10, 5, metered(&rental, 10, 10, 2)),
            projected(11, 2 * HOUR, metered(&rental, 20, 4, 2)),
        ];
        let hours = fold_batch(&events, &before).unwrap().hours;
        assert_eq!(hours[&key(HOUR, "GPU-a")].gpu.gross, 25 + 5);
        assert_eq!(hours[&key(HOUR, "GPU-a")].gpu.lines, 2);
        assert_eq!(hours[&key(HOUR, "GPU-a")].through_position, 10);
        assert_eq!(hours[&key(HOUR, "GPU-b")].gpu.gross, 25 + 5);
        assert_eq!(hours[&other], stored(9, 2));
        assert_eq!(hours[&key(2 * HOUR, "GPU-b")].gpu.gross, 2);
        assert_eq!(
            hours.len(),
            5,
            "the open hour's three rows and the next hour's two"
        );
        assert!(hours.keys().all(|k| k.1 >= HOUR));
        assert_eq!(
            hour_rows(&hours, provider, HOUR).count(),
            3,
            "an hour's rows, in order"
        );
    }

    #[test]
    fn a_line_of_an_unknown_rental_is_ignored_and_order_is_checked() {
        let provider = id(4);
        let rental = started(1, provider);
        let lone = [projected(7, 0, metered(&rental, 10, 100, 20))];
        assert!(
            fold_batch(&lone, &Before::default())
                .unwrap()
                .lines
                .is_empty()
        );
        let backwards = [
            projected(
                3,
                0,
                DomainEvent::Rental(RentalEvent::Started(rental.clone())),
            ),
            projected(2, 0, metered(&rental, 10, 100, 20)),
        ];
        assert!(matches!(
            fold_batch(&backwards, &Before::default()),
            Err(FoldError::OutOfOrder { position: 2, .. })
        ));
    }

    #[test]
    fn sums_that_would_overflow_are_refused() {
        let provider = id(4);
        let rental = started(1, provider);
        let mut before = Before::default();
        before.rentals.insert(
            rental.rental_id,
            RentalRef {
                rental_id: rental.rental_id,
                renter_id: rental.renter_id,
                provider_id: provider,
                machine_id: rental.machine_id,
                model_id: rental.model_id.clone(),
                gpu_uuids: rental.gpu_uuids.clone(),
            },
        );
        before.cursors.insert(
            provider,
            Cursor {
                last_at_us: 0,
                through: Sums {
                    gross: i64::MAX - 10,
                    lines: 1,
                    ..Sums::default()
                },
            },
        );
        let events = [projected(9, 0, metered(&rental, 10, 100, 20))];
        assert!(matches!(
            fold_batch(&events, &before),
            Err(FoldError::BalanceOverflow { position: 9, .. })
        ));
    }
}
