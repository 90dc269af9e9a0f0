//! Providers' earnings as this process keeps them in memory: what stays bounded as history
//! grows (ADR 0007). Per provider: the sums of every line ever metered, the adjustments posted
//! to its payable account, its payout settings and its payouts. The lines themselves are the
//! stored projection [`crate::earnings_lines`]; readers combine the two at one log position
//! ([`Earnings::position`]): the stored lines read `as of` that position.
//!
//! [`Line`], [`RentalShares`], [`Earnings::per_gpu`] and [`Earnings::per_model`] are the shapes
//! readers get lines in and the rules that split them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gpunex_domain::DomainEvent;
use gpunex_domain::ledger::{Account, Side};
use gpunex_domain::money::Usdc;
use gpunex_domain::payouts::{PayoutEvent, PayoutSettingsChanged, SettledLines};
use gpunex_domain::rental::RentalEvent;
use gpunex_domain::time::Timestamp;
use uuid::Uuid;

use crate::payouts::PayoutBook;

/// What a line needs of its rental.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RentalRef {
    pub rental_id: Uuid,
    pub renter_id: Uuid,
    pub provider_id: Uuid,
    pub machine_id: Uuid,
    pub model_id: String,
    pub gpu_uuids: Vec<String>,
}

/// One metered usage, as earned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub position: u64,
    pub at: Timestamp,
    pub entry_id: Uuid,
    pub report_id: Uuid,
    pub rental: Arc<RentalRef>,
    pub from_gpu_seconds: u64,
    pub to_gpu_seconds: u64,
    pub price_per_gpu_hour: Usdc,
    pub gross: Usdc,
    pub fee: Usdc,
    pub net: Usdc,
    pub fee_bp: u32,
}

impl Line {
    pub fn gpu_seconds(&self) -> u64 {
        self.to_gpu_seconds - self.from_gpu_seconds
    }
}

/// Sums of lines, in micro-USDC and GPU-seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sums {
    pub gross: i64,
    pub fee: i64,
    pub net: i64,
    pub gpu_seconds: u64,
    pub lines: u64,
}

impl Sums {
    fn add(&mut self, gross: i64, fee: i64, net: i64, gpu_seconds: u64, lines: u64) {
        self.gross += gross;
        self.fee += fee;
        self.net += net;
        self.gpu_seconds += gpu_seconds;
        self.lines += lines;
    }

    /// Adds other sums.
    pub fn add_sums(&mut self, other: Sums) {
        self.add(
            other.gross,
            other.fee,
            other.net,
            other.gpu_seconds,
            other.lines,
        );
    }

    /// Adds one usage line.
    pub fn add_line(&mut self, gross: i64, fee: i64, net: i64, gpu_seconds: u64) {
        self.add(gross, fee, net, gpu_seconds, 1);
    }

    /// These sums less `other` (sums through an earlier line).
    pub fn minus(self, other: Sums) -> Sums {
        Sums {
            gross: self.gross - other.gross,
            fee: self.fee - other.fee,
            net: self.net - other.net,
            gpu_seconds: self.gpu_seconds - other.gpu_seconds,
            lines: self.lines - other.lines,
        }
    }

    /// The sums of one line.
    pub fn of(line: &Line) -> Sums {
        Sums {
            gross: line.gross.micros(),
            fee: line.fee.micros(),
            net: line.net.micros(),
            gpu_seconds: line.gpu_seconds(),
            lines: 1,
        }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Earnings {
    /// Each provider's sums over every line ever metered.
    providers: HashMap<Uuid, Sums>,
    totals: Sums,
    /// Net of the adjustments posted to each provider's payable account (credits positive).
    adjustments: HashMap<Uuid, i64>,
    /// Each provider's payout settings in force.
    payout_settings: HashMap<Uuid, PayoutSettingsChanged>,
    payouts: PayoutBook,
    /// The last log position applied.
    position: u64,
}

/// What the stored lines say about one provider for a payout at a cutoff, read as of one
/// position: the sums through the last line its payouts settled, and through the last line dated
/// before the cutoff (with that line's position).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredRange {
    /// The `settled_through` position these figures were read for.
    pub settled_through: u64,
    pub settled: Sums,
    pub before_cutoff: Sums,
    pub before_cutoff_position: Option<u64>,
}

/// What a provider could be paid at a cutoff: the unsettled lines dated before it, and what
/// earlier payouts, failures and adjustments bring forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payable {
    pub lines: SettledLines,
    pub brought_forward: Usdc,
    /// `lines.net + brought_forward`.
    pub available: Usdc,
}

/// `n` shares of `amount` as equal as can be: the first `amount mod n` shares get one more unit.
pub fn equal_shares(amount: i64, n: usize) -> Vec<i64> {
    let n_i = i64::try_from(n.max(1)).unwrap_or(i64::MAX);
    let (base, extra) = (amount.div_euclid(n_i), amount.rem_euclid(n_i));
    (0..n_i).map(|i| base + i64::from(i < extra)).collect()
}

impl Earnings {
    /// Applies one event of the log at `position`, the `stream_version`-th of its stream.
    pub fn apply(&mut self, position: u64, stream_version: u64, event: &DomainEvent) {
        self.position = self.position.max(position);
        match event {
            DomainEvent::Rental(RentalEvent::UsageMetered(m)) => self.add_line(
                m.gross.micros(),
                m.fee.micros(),
                m.net.micros(),
                m.to_gpu_seconds.saturating_sub(m.from_gpu_seconds),
                m.provider_id,
            ),
            DomainEvent::Payout(PayoutEvent::SettingsChanged(changed)) => {
                self.payout_settings
                    .insert(changed.provider_id, changed.clone());
            }
            DomainEvent::Payout(PayoutEvent::Scheduled(event)) => {
                self.payouts.scheduled(position, stream_version, event)
            }
            DomainEvent::Payout(PayoutEvent::BatchCreated(event)) => {
                self.payouts.batch(position, event)
            }
            DomainEvent::Payout(PayoutEvent::RolledForward(event)) => {
                self.payouts.rolled_forward(event)
            }
            DomainEvent::Payout(PayoutEvent::BatchStarted(event)) => {
                self.payouts.batch_started(event)
            }
            DomainEvent::Payout(PayoutEvent::Submitted(event)) => self.payouts.submitted(event),
            DomainEvent::Payout(PayoutEvent::BankFileCreated(event)) => {
                self.payouts.bank_file(event)
            }
            DomainEvent::Payout(PayoutEvent::Confirmed(event)) => self.payouts.confirmed(event),
            DomainEvent::Payout(PayoutEvent::Failed(event)) => self.payouts.failed(event),
            DomainEvent::AdjustmentPosted(adjustment) => {
                for posting in adjustment.postings.lines() {
                    if let Account::ProviderPayable(provider) = posting.account {
                        let amount = posting.amount_micro_usdc.micros();
                        *self.adjustments.entry(provider).or_default() += match posting.side {
                            Side::Credit => amount,
                            Side::Debit => -amount,
                        };
                    }
                }
            }
            _ => {}
        }
    }

    fn add_line(&mut self, gross: i64, fee: i64, net: i64, gpu_seconds: u64, provider_id: Uuid) {
        self.providers
            .entry(provider_id)
            .or_default()
            .add_line(gross, fee, net, gpu_seconds);
        self.totals.add_line(gross, fee, net, gpu_seconds);
    }

    /// A provider's payout settings in force, if it chose any.
    pub fn payout_settings(&self, provider_id: Uuid) -> Option<&PayoutSettingsChanged> {
        self.payout_settings.get(&provider_id)
    }

    /// The providers with earnings, in id order.
    pub fn providers(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self.providers.keys().copied().collect();
        ids.sort();
        ids
    }

    /// Everything ever metered.
    pub fn totals(&self) -> Sums {
        self.totals
    }

    /// What a provider earned: every line's net plus adjustments.
    pub fn earned(&self, provider_id: Uuid) -> i64 {
        self.lifetime(provider_id).net + self.adjustments.get(&provider_id).copied().unwrap_or(0)
    }

    /// What a provider is owed and not yet in any payout (its payable account): earned, less
    /// what payouts took, plus what failed payouts returned. Equals earned - paid - in flight.
    pub fn pending_balance(&self, provider_id: Uuid) -> i64 {
        let payouts = self.payouts.provider(provider_id);
        self.earned(provider_id) - payouts.scheduled + payouts.failed
    }

    /// The last log position applied.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Every payout and batch.
    pub fn payouts(&self) -> &PayoutBook {
        &self.payouts
    }

    /// The position through which a provider's payouts settled its lines.
    pub fn settled_through(&self, provider_id: Uuid) -> u64 {
        self.payouts.provider(provider_id).settled_through
    }

    /// What a provider could be paid with earnings dated before a cutoff, from what the stored
    /// lines say ([`StoredRange`], read as of [`Earnings::position`]): the lines no payout settled
    /// yet, plus what is brought forward (earlier carries, failed payouts, adjustments).
    pub fn payable(&self, provider_id: Uuid, stored: &StoredRange) -> Payable {
        let payouts = self.payouts.provider(provider_id);
        let (new, through) = if stored.before_cutoff.lines > stored.settled.lines {
            (
                stored.before_cutoff.minus(stored.settled),
                stored
                    .before_cutoff_position
                    .unwrap_or(payouts.settled_through),
            )
        } else {
            (Sums::default(), payouts.settled_through)
        };
        let brought_forward = stored.settled.net
            + self.adjustments.get(&provider_id).copied().unwrap_or(0)
            - payouts.scheduled
            + payouts.failed;
        Payable {
            lines: SettledLines {
                after_position: payouts.settled_through,
                through_position: through,
                count: new.lines,
                net: Usdc::from_micros(new.net),
            },
            brought_forward: Usdc::from_micros(brought_forward),
            available: Usdc::from_micros(new.net + brought_forward),
        }
    }

    /// A provider's sums over all time.
    pub fn lifetime(&self, provider_id: Uuid) -> Sums {
        self.providers
            .get(&provider_id)
            .copied()
            .unwrap_or_default()
    }

    /// Per GPU and model: each line's gross, fee and GPU-seconds shared equally among its
    /// rental's GPUs (GPU `i` of `n` gets `a div n`, plus one when `i < a mod n`, in the
    /// rental's GPU order), and net = gross - fee per share, so every GPU's gross = fee + net
    /// and the shares add up to the lines exactly. A GPU that earned under two models (its
    /// identification changed) has one entry per model.
    pub fn per_gpu(shares: &[RentalShares]) -> BTreeMap<(String, String), Sums> {
        let mut per: BTreeMap<(String, String), Sums> = BTreeMap::new();
        for rental in shares {
            for (i, gpu) in rental.rental.gpu_uuids.iter().enumerate() {
                let gross = rental.gross.share(i);
                let fee = rental.fee.share(i);
                per.entry((gpu.clone(), rental.rental.model_id.clone()))
                    .or_default()
                    .add(
                        gross,
                        fee,
                        gross - fee,
                        u64::try_from(rental.gpu_seconds.share(i)).unwrap_or(0),
                        rental.totals.lines,
                    );
            }
        }
        per
    }

    /// Per model: the lines' own sums.
    pub fn per_model(shares: &[RentalShares]) -> BTreeMap<String, Sums> {
        let mut per: BTreeMap<String, Sums> = BTreeMap::new();
        for rental in shares {
            per.entry(rental.rental.model_id.clone())
                .or_default()
                .add_sums(rental.totals);
        }
        per
    }
}

/// How one amount of a rental's lines divides among its `n` GPUs, line by line: GPU `i` of a
/// line gets `a div n`, plus one micro-unit when `i < a mod n`. Kept as the sum of the quotients
/// and how many lines left each remainder, so GPU `i`'s share of all the lines is the quotients
/// plus the lines whose remainder is above `i`; the store computes it in SQL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Split {
    pub quotients: i64,
    /// `remainders[r]`: how many lines left remainder `r` (`n` entries).
    pub remainders: Vec<u64>,
}

impl Split {
    /// The split of `amounts` among `n` GPUs (at least one).
    pub fn of(amounts: impl IntoIterator<Item = i64>, n: usize) -> Split {
        let n = n.max(1);
        let mut split = Split {
            quotients: 0,
            remainders: vec![0; n],
        };
        for amount in amounts {
            split.add(amount, 1);
        }
        split
    }

    /// Counts `lines` more lines of `amount` each.
    pub fn add(&mut self, amount: i64, lines: u64) {
        let n = self.remainders.len().max(1);
        let divisor = i64::try_from(n).unwrap_or(i64::MAX);
        let times = i64::try_from(lines).unwrap_or(i64::MAX);
        self.quotients += amount.div_euclid(divisor).saturating_mul(times);
        let r = usize::try_from(amount.rem_euclid(divisor)).unwrap_or(0);
        if self.remainders.is_empty() {
            self.remainders.push(0);
        }
        if let Some(count) = self.remainders.get_mut(r) {
            *count += lines;
        }
    }

    /// GPU `i`'s share.
    pub fn share(&self, i: usize) -> i64 {
        let above: u64 = self.remainders.iter().skip(i + 1).sum();
        self.quotients + i64::try_from(above).unwrap_or(i64::MAX)
    }
}

/// A rental's lines reduced to what the per-GPU and per-model figures need: their sums and how
/// their gross, fee and GPU-seconds split among the rental's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RentalShares {
    pub rental: Arc<RentalRef>,
    pub totals: Sums,
    pub gross: Split,
    pub fee: Split,
    pub gpu_seconds: Split,
}

impl RentalShares {
    /// Reduces `lines`, by rental (in rental id order): the reference the store's SQL reduction
    /// is tested against.
    pub fn of_lines(lines: &[Line]) -> Vec<RentalShares> {
        let mut by_rental: BTreeMap<Uuid, Vec<&Line>> = BTreeMap::new();
        for line in lines {
            by_rental
                .entry(line.rental.rental_id)
                .or_default()
                .push(line);
        }
        by_rental
            .into_values()
            .filter_map(|lines| {
                let rental = lines.first()?.rental.clone();
                let n = rental.gpu_uuids.len();
                let mut totals = Sums::default();
                for line in &lines {
                    totals.add_sums(Sums::of(line));
                }
                Some(RentalShares {
                    gross: Split::of(lines.iter().map(|l| l.gross.micros()), n),
                    fee: Split::of(lines.iter().map(|l| l.fee.micros()), n),
                    gpu_seconds: Split::of(
                        lines
                            .iter()
                            .map(|l| i64::try_from(l.gpu_seconds()).unwrap_or(i64::MAX)),
                        n,
                    ),
                    rental,
                    totals,
                })
            })
            .collect()
    }
}

/// A period's per-GPU and per-model figures: [`Earnings::per_gpu`] and [`Earnings::per_model`] of
/// its lines. Both are sums over lines, so the figures of two disjoint sets of lines add up to
/// the figures of their union: the store reads a period's figures from stored per-hour sums
/// ([`crate::earnings_lines::HourRow`]) for its whole hours and from the lines themselves for the
/// rest, and adds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    /// Per GPU and model: the GPU's shares, net = gross - fee of the shares, and the lines the GPU
    /// was in.
    pub per_gpu: BTreeMap<(String, String), Sums>,
    /// Per model: the lines' own sums.
    pub per_model: BTreeMap<String, Sums>,
}

impl Figures {
    /// The figures of rentals' reduced lines.
    pub fn of_shares(shares: &[RentalShares]) -> Figures {
        Figures {
            per_gpu: Earnings::per_gpu(shares),
            per_model: Earnings::per_model(shares),
        }
    }

    /// The figures of lines, line by line: the reference every stored read is tested against.
    pub fn of_lines(lines: &[Line]) -> Figures {
        Figures::of_shares(&RentalShares::of_lines(lines))
    }

    /// Adds the figures of other lines.
    pub fn add(&mut self, other: &Figures) {
        for (key, sums) in &other.per_gpu {
            self.per_gpu.entry(key.clone()).or_default().add_sums(*sums);
        }
        for (model, sums) in &other.per_model {
            self.per_model
                .entry(model.clone())
                .or_default()
                .add_sums(*sums);
        }
    }

    /// The sums of every line.
    pub fn totals(&self) -> Sums {
        let mut totals = Sums::default();
        self.per_model.values().for_each(|s| totals.add_sums(*s));
        totals
    }

    /// No line at all.
    pub fn is_empty(&self) -> bool {
        self.per_model.is_empty() && self.per_gpu.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::ledger::{JournalEntry, Posting};
    use gpunex_domain::rental::{RentalStarted, UsageMetered};

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn started(provider: Uuid, gpus: &[&str]) -> RentalStarted {
        RentalStarted {
            rental_id: id(1),
            renter_id: id(2),
            provider_id: provider,
            machine_id: id(3),
            gpu_uuids: gpus.iter().map(|g| (*g).to_owned()).collect(),
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
            from_gpu_seconds: 0,
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

    fn line(rental: &Arc<RentalRef>, position: u64, gross: i64, fee: i64) -> Line {
        Line {
            position,
            at: Timestamp::from_unix_micros(0),
            entry_id: id(u128::from(position)),
            report_id: id(u128::from(position) + 1_000),
            rental: rental.clone(),
            from_gpu_seconds: 0,
            to_gpu_seconds: 30,
            price_per_gpu_hour: Usdc::from_micros(2_000_000),
            gross: Usdc::from_micros(gross),
            fee: Usdc::from_micros(fee),
            net: Usdc::from_micros(gross - fee),
            fee_bp: 2_000,
        }
    }

    #[test]
    fn lifetime_sums_follow_the_lines_and_shares_add_up() {
        let provider = id(4);
        let mut earnings = Earnings::default();
        let rental = started(provider, &["GPU-a", "GPU-b", "GPU-c"]);
        earnings.apply(
            1,
            1,
            &DomainEvent::Rental(RentalEvent::Started(rental.clone())),
        );
        earnings.apply(2, 1, &metered(&rental, 10, 1_001, 200));
        earnings.apply(3, 1, &metered(&rental, 20, 2_000, 400));
        earnings.apply(4, 1, &metered(&rental, 30, 3_000, 600));
        assert_eq!(earnings.lifetime(provider).lines, 3);
        assert_eq!(earnings.lifetime(provider).gross, 6_001);
        assert_eq!(earnings.totals().fee, 1_200);
        assert_eq!(earnings.pending_balance(provider), 4_801);
        assert_eq!(earnings.position(), 4);

        let reference = Arc::new(RentalRef {
            rental_id: rental.rental_id,
            renter_id: rental.renter_id,
            provider_id: provider,
            machine_id: rental.machine_id,
            model_id: rental.model_id.clone(),
            gpu_uuids: rental.gpu_uuids.clone(),
        });
        let all = [
            line(&reference, 2, 1_001, 200),
            line(&reference, 3, 2_000, 400),
            line(&reference, 4, 3_000, 600),
        ];
        let shares = RentalShares::of_lines(&all);
        let per_gpu = Earnings::per_gpu(&shares);
        let gross: i64 = per_gpu.values().map(|s| s.gross).sum();
        let net: i64 = per_gpu.values().map(|s| s.net).sum();
        assert_eq!((gross, net), (6_001, 4_801));
        let key = |gpu: &str| (gpu.to_owned(), "h100-80gb".to_owned());
        // 1,001 over three GPUs: 334, 334, 333.
        assert_eq!(per_gpu[&key("GPU-a")].gross, 334 + 667 + 1_000);
        assert_eq!(per_gpu[&key("GPU-c")].gross, 333 + 666 + 1_000);
        assert!(per_gpu.values().all(|s| s.gross == s.fee + s.net));
        assert!(per_gpu.values().all(|s| s.lines == 3));
        assert_eq!(Earnings::per_model(&shares)["h100-80gb"].gross, 6_001);
        assert_eq!(equal_shares(-5, 2), vec![-2, -3]);
    }

    /// The reduced form gives each GPU exactly the sum of its line-by-line shares.
    #[test]
    fn splits_add_up_to_the_line_by_line_shares() {
        let provider = id(4);
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for n in 1..=8_usize {
            let gpus: Vec<String> = (0..n).map(|i| format!("GPU-{i}")).collect();
            let reference = Arc::new(RentalRef {
                rental_id: id(100 + n as u128),
                renter_id: id(2),
                provider_id: provider,
                machine_id: id(3),
                model_id: "a100-80gb".to_owned(),
                gpu_uuids: gpus.clone(),
            });
            let lines: Vec<Line> = (0..200)
                .map(|p| {
                    let gross = i64::try_from(next() % 1_000_000).unwrap();
                    let fee = gross / 5 + i64::try_from(next() % 3).unwrap();
                    let mut l = line(&reference, p, gross, fee);
                    l.to_gpu_seconds = next() % 100_000;
                    l
                })
                .collect();
            let per_gpu = Earnings::per_gpu(&RentalShares::of_lines(&lines));
            for (i, gpu) in gpus.iter().enumerate() {
                let mut want = Sums::default();
                for l in &lines {
                    let gross = equal_shares(l.gross.micros(), n)[i];
                    let fee = equal_shares(l.fee.micros(), n)[i];
                    let seconds = equal_shares(i64::try_from(l.gpu_seconds()).unwrap(), n)[i];
                    want.add_line(gross, fee, gross - fee, u64::try_from(seconds).unwrap());
                }
                assert_eq!(
                    per_gpu[&(gpu.clone(), "a100-80gb".to_owned())],
                    want,
                    "n {n}, GPU {i}"
                );
            }
        }
    }

    #[test]
    fn payable_takes_the_unsettled_lines_before_the_cutoff() {
        let provider = id(4);
        let earnings = Earnings::default();
        let sums = |lines: u64, net: i64| Sums {
            net,
            lines,
            ..Sums::default()
        };
        let stored = StoredRange {
            settled_through: 0,
            settled: Sums::default(),
            before_cutoff: sums(2, 700),
            before_cutoff_position: Some(9),
        };
        let payable = earnings.payable(provider, &stored);
        assert_eq!(payable.lines.count, 2);
        assert_eq!(payable.lines.through_position, 9);
        assert_eq!(payable.available, Usdc::from_micros(700));
        // Nothing dated before the cutoff beyond what was settled: no new lines.
        let stored = StoredRange {
            settled: sums(2, 700),
            before_cutoff: sums(2, 700),
            ..stored
        };
        let payable = earnings.payable(provider, &stored);
        assert_eq!(payable.lines.count, 0);
        assert_eq!(payable.lines.through_position, 0);
    }
}
