//! The marketplace: prices, schedules, maintenance and delistings folded from `market.*` events,
//! and the listing snapshot built from them, the fleet and the approved applications at an
//! instant. Building is pure (`ListingSnapshot::build(.., now)`); the API rebuilds the snapshot
//! whenever the log moves and at least once a second, and answers searches from it.

use gpunex_domain::benchmark::Metric;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use gpunex_domain::DomainEvent;
use gpunex_domain::fleet::{GpuCondition, Span};
use gpunex_domain::gpu::{GPU_CATALOG, ModelAdded};
use gpunex_domain::market::{
    self, GpuListingChanged, Hidden, MaintenanceAnnounced, MarketEvent, PriceSet, RankBreakdown,
};
use gpunex_domain::metering::Meter;
use gpunex_domain::money::Usdc;
use gpunex_domain::onboarding::{
    Application, ApplicationStatus, Availability, GpuModelChoice, Location, Tier,
};
use gpunex_domain::rental::{JobEnded, JobStarted, RentalEnded, RentalEvent, RentalStarted};
use gpunex_domain::time::{MICROS_PER_DAY, Timestamp};
use uuid::Uuid;

use crate::fleet::{Fleet, MachineState};

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Market {
    /// Per provider and model, in log order, the prices that can still be in force from a day
    /// before the last one set and every price set in that day (see [`KeptPrice`]). The whole
    /// history is the stored price history (`crate::price_history`).
    #[serde(with = "crate::serde_pairs")]
    prices: HashMap<(Uuid, String), Vec<KeptPrice>>,
    availability: HashMap<Uuid, Availability>,
    /// Announced, not cancelled and not over for more than a day before the last maintenance
    /// announced, by id.
    maintenance: HashMap<Uuid, MaintenanceAnnounced>,
    /// Delisted GPUs, with why.
    delisted: HashMap<String, GpuListingChanged>,
    /// The open rentals (active, or ended while their job runs), by id. A rental that is over
    /// leaves memory; the stored rentals projection (`crate::rentals`) holds every rental.
    rentals: HashMap<Uuid, RentalState>,
    /// The rental holding each leased GPU now.
    leases: HashMap<String, Uuid>,
    /// Each GPU lease stream's version: the expected version of its next lease or release.
    lease_versions: HashMap<String, u64>,
    /// Per machine, the rentals its agent must act on (see [`Market::assignments_of`]).
    open_by_machine: HashMap<Uuid, BTreeSet<Uuid>>,
    /// Each provider's market stream version: the expected version of its next market event.
    market_versions: HashMap<Uuid, u64>,
    /// Benchmark runs, scores, verdicts and the automatic listing state.
    #[serde(default)]
    benchmarks: crate::benchmarks::Benchmarks,
}

/// How long memory keeps a price set after it was recorded, and how far before the last price
/// set of its model the prices in force are kept (ADR 0007).
pub const PRICE_MEMORY_MICROS: i64 = MICROS_PER_DAY;

/// How long after its end memory keeps a maintenance window: it is forgotten when maintenance
/// is next announced (by event time) once it ended more than this before.
pub const MAINTENANCE_MEMORY_MICROS: i64 = MICROS_PER_DAY;

/// A price set as memory keeps it: where and when it was recorded.
///
/// When a model's price is set, memory forgets that model's prices that can never be in force
/// at or after its horizon, a day before the latest time a kept price of the model was recorded
/// at (a later price took effect by then, or one set later takes effect at the same instant), and
/// that were recorded before the horizon. So every instant from the horizon on is priced exactly
/// from memory, and every price set in the day before the latest is in memory with its position: a
/// reader of the stored history (which may be a moment behind) adds those it lacks
/// ([`Market::recent_prices`]). Decided by event time, so the snapshot stays the fold of the log;
/// the horizon never moves back, whatever order the writers' clocks recorded prices in. Recorded
/// times come from the writers' clocks, which must agree to within the day (as sessions' expiry
/// and presence already assume): a writer a day ahead would move the horizon past instants the
/// others still price.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptPrice {
    pub position: u64,
    pub recorded_at_us: i64,
    pub set: PriceSet,
}

/// Forgets the prices of one model that memory no longer needs (see [`KeptPrice`]); the newest
/// price is already in `history`.
fn forget_past_prices(history: &mut Vec<KeptPrice>) {
    let Some(latest) = history.iter().map(|kept| kept.recorded_at_us).max() else {
        return;
    };
    let horizon = latest.saturating_sub(PRICE_MEMORY_MICROS);
    let horizon_at = Timestamp::from_unix_micros(horizon);
    // The price in force at the horizon, chosen as `market::price_at` chooses (the last of equals).
    let in_force = history
        .iter()
        .enumerate()
        .filter(|(_, kept)| kept.set.effective_at <= horizon_at)
        .max_by_key(|(_, kept)| kept.set.effective_at)
        .map(|(index, _)| index);
    // A price with a later one of the same effective instant is never in force.
    let mut instants = std::collections::HashSet::new();
    let mut shadowed = vec![false; history.len()];
    for (index, kept) in history.iter().enumerate().rev() {
        shadowed[index] = !instants.insert(kept.set.effective_at);
    }
    let mut index = 0;
    history.retain(|kept| {
        let can_be_in_force =
            !shadowed[index] && (Some(index) == in_force || kept.set.effective_at > horizon_at);
        index += 1;
        can_be_in_force || kept.recorded_at_us >= horizon
    });
}

/// A rental as folded: how it started and, once over, how it ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RentalState {
    pub started: RentalStarted,
    pub ended: Option<RentalEnded>,
    /// The highest usage counter metered and the total charged.
    pub meter: Meter,
    /// The rental stream's version: the expected version of its next event.
    pub stream_version: u64,
    /// The agent's reports on the workload.
    pub job_started: Option<JobStarted>,
    pub job_ended: Option<JobEnded>,
}

impl RentalState {
    /// Applies one event of the rental's own stream after its start (`Ended`, `UsageMetered`,
    /// `JobStarted`, `JobEnded`; the others do not change a rental); `stream_version` is the
    /// event's. The in-memory market and the stored rentals projection share this rule.
    pub fn apply(&mut self, stream_version: u64, event: &RentalEvent) {
        match event {
            RentalEvent::Ended(ended) => self.ended = Some(ended.clone()),
            RentalEvent::UsageMetered(metered) => {
                self.meter(stream_version, metered.to_gpu_seconds, metered.gross);
            }
            RentalEvent::JobStarted(job) => self.job_started = Some(job.clone()),
            RentalEvent::JobEnded(job) => self.job_ended = Some(job.clone()),
            RentalEvent::Started(_) | RentalEvent::GpuLeased(_) | RentalEvent::GpuReleased(_) => {
                return;
            }
        }
        self.stream_version = stream_version;
    }

    /// Applies a usage line of the rental's stream (what [`RentalState::apply`] does with a
    /// `UsageMetered`, for a fold that decodes only the line): the meter moves to the line's
    /// counter and adds its gross.
    pub fn meter(&mut self, stream_version: u64, to_gpu_seconds: u64, gross: Usdc) {
        self.meter = Meter {
            gpu_seconds: to_gpu_seconds,
            charged: Usdc::from_micros(self.meter.charged.micros().saturating_add(gross.micros())),
        };
        self.stream_version = stream_version;
    }

    /// Whether the agent may still have to act on it: active, or ended while its job runs.
    /// A rental that is not open never opens again in memory (see [`Market`]).
    pub fn is_open(&self) -> bool {
        self.ended.is_none() || (self.job_started.is_some() && self.job_ended.is_none())
    }

    /// A rental as it stands when `started` is its only event.
    pub fn started(started: RentalStarted) -> RentalState {
        RentalState {
            started,
            ended: None,
            meter: Meter::default(),
            stream_version: 1,
            job_started: None,
            job_ended: None,
        }
    }
}

/// The rental an event of a rental's own stream is about (`None` for lease events).
fn rental_id_of(event: &RentalEvent) -> Option<Uuid> {
    match event {
        RentalEvent::Started(e) => Some(e.rental_id),
        RentalEvent::Ended(e) => Some(e.rental_id),
        RentalEvent::UsageMetered(e) => Some(e.rental_id),
        RentalEvent::JobStarted(e) => Some(e.rental_id),
        RentalEvent::JobEnded(e) => Some(e.rental_id),
        RentalEvent::GpuLeased(_) | RentalEvent::GpuReleased(_) => None,
    }
}

impl Market {
    /// Applies one event of the log, recorded at `position` (`recorded_at_us`) as version
    /// `stream_version` of its stream.
    pub fn apply(
        &mut self,
        position: u64,
        stream_version: u64,
        recorded_at_us: i64,
        event: &DomainEvent,
    ) {
        if let DomainEvent::Rental(event) = event {
            self.apply_rental(stream_version, event);
            return;
        }
        if let DomainEvent::Benchmark(_) = event {
            self.benchmarks.apply(stream_version, event);
            return;
        }
        let DomainEvent::Market(event) = event else {
            return;
        };
        self.market_versions
            .insert(event.provider_id(), stream_version);
        match event {
            MarketEvent::PriceSet(set) => {
                let history = self
                    .prices
                    .entry((set.provider_id, set.model_id.clone()))
                    .or_default();
                history.push(KeptPrice {
                    position,
                    recorded_at_us,
                    set: set.clone(),
                });
                forget_past_prices(history);
            }
            MarketEvent::AvailabilitySet(set) => {
                self.availability
                    .insert(set.provider_id, set.availability.clone());
            }
            MarketEvent::MaintenanceAnnounced(announced) => {
                // Maintenance over for more than a day (by this event's time) can hide nothing
                // and be cancelled no more: it leaves memory, deterministically, when more is
                // announced (the only way the map grows).
                let ended_before = recorded_at_us.saturating_sub(MAINTENANCE_MEMORY_MICROS);
                self.maintenance
                    .retain(|_, kept| kept.until.unix_micros() >= ended_before);
                self.maintenance
                    .insert(announced.maintenance_id, announced.clone());
            }
            MarketEvent::MaintenanceCancelled(cancelled) => {
                self.maintenance.remove(&cancelled.maintenance_id);
            }
            MarketEvent::GpuDelisted(changed) => {
                self.delisted
                    .insert(changed.gpu_uuid.clone(), changed.clone());
            }
            MarketEvent::GpuRelisted(changed) => {
                self.delisted.remove(&changed.gpu_uuid);
            }
        }
    }

    fn apply_rental(&mut self, stream_version: u64, event: &RentalEvent) {
        self.apply_rental_state(stream_version, event);
        let Some(rental_id) = rental_id_of(event) else {
            return;
        };
        let Some(rental) = self.rentals.get(&rental_id) else {
            return;
        };
        let machine = rental.started.machine_id;
        if rental.is_open() {
            self.open_by_machine
                .entry(machine)
                .or_default()
                .insert(rental_id);
        } else {
            // Over for good: the stored rentals projection keeps it (ADR 0007).
            self.rentals.remove(&rental_id);
            if let Some(set) = self.open_by_machine.get_mut(&machine) {
                set.remove(&rental_id);
                if set.is_empty() {
                    self.open_by_machine.remove(&machine);
                }
            }
        }
    }

    fn apply_rental_state(&mut self, stream_version: u64, event: &RentalEvent) {
        match event {
            RentalEvent::Started(started) => {
                self.rentals.insert(
                    started.rental_id,
                    RentalState {
                        stream_version,
                        ..RentalState::started(started.clone())
                    },
                );
            }
            RentalEvent::GpuLeased(lease) => {
                self.leases.insert(lease.gpu_uuid.clone(), lease.rental_id);
                self.lease_versions
                    .insert(lease.gpu_uuid.clone(), stream_version);
            }
            RentalEvent::GpuReleased(lease) => {
                if self.leases.get(&lease.gpu_uuid) == Some(&lease.rental_id) {
                    self.leases.remove(&lease.gpu_uuid);
                }
                self.lease_versions
                    .insert(lease.gpu_uuid.clone(), stream_version);
            }
            other => {
                if let Some(rental) = rental_id_of(other).and_then(|id| self.rentals.get_mut(&id)) {
                    rental.apply(stream_version, other);
                }
            }
        }
    }

    /// An open rental (active, or ended while its job runs); one that is over is in the stored
    /// rentals projection.
    pub fn open_rental(&self, rental_id: &Uuid) -> Option<&RentalState> {
        self.rentals.get(rental_id)
    }

    /// A machine's rentals the agent must act on: those still active, and those ended whose job
    /// the agent has not yet reported ended (it must stop them). Oldest first.
    pub fn assignments_of(&self, machine_id: Uuid) -> Vec<&RentalState> {
        self.open_by_machine
            .get(&machine_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.rentals.get(id))
            .collect()
    }

    /// Every rental still active.
    pub fn active_rentals(&self) -> Vec<&RentalState> {
        self.rentals
            .values()
            .filter(|r| r.ended.is_none())
            .collect()
    }

    /// The rental holding a GPU now, if any.
    pub fn lease_of(&self, gpu_uuid: &str) -> Option<Uuid> {
        self.leases.get(gpu_uuid).copied()
    }

    /// The version of a GPU's lease stream (0: never leased).
    pub fn lease_version(&self, gpu_uuid: &str) -> u64 {
        self.lease_versions.get(gpu_uuid).copied().unwrap_or(0)
    }

    /// The version of the provider's market stream (0: nothing set yet).
    pub fn market_version(&self, provider_id: Uuid) -> u64 {
        self.market_versions.get(&provider_id).copied().unwrap_or(0)
    }

    /// The prices of a model memory keeps, in log order: enough for [`market::price_at`] at any
    /// instant from a day before its last price was set (see [`KeptPrice`]). Its whole history is
    /// the stored price history.
    pub fn live_prices(
        &self,
        provider_id: Uuid,
        model_id: &str,
    ) -> impl Iterator<Item = &PriceSet> + '_ {
        self.prices
            .get(&(provider_id, model_id.to_owned()))
            .into_iter()
            .flatten()
            .map(|kept| &kept.set)
    }

    /// Every price of the provider memory keeps, with its position, in log order: among them
    /// every one set in the day before the provider's last price set, which a stored history
    /// read a moment ago may lack.
    pub fn recent_prices(&self, provider_id: Uuid) -> Vec<(u64, PriceSet)> {
        let mut kept: Vec<(u64, PriceSet)> = self
            .prices
            .iter()
            .filter(|((p, _), _)| *p == provider_id)
            .flat_map(|(_, history)| history.iter().map(|k| (k.position, k.set.clone())))
            .collect();
        kept.sort_by_key(|(position, _)| *position);
        kept
    }

    /// The provider's schedule; always on until it sets one.
    pub fn availability(&self, provider_id: Uuid) -> Availability {
        self.availability
            .get(&provider_id)
            .cloned()
            .unwrap_or(Availability::AlwaysOn)
    }

    /// Announced maintenance of the provider that has not ended by `now`, by start.
    pub fn maintenance_of(&self, provider_id: Uuid, now: Timestamp) -> Vec<MaintenanceAnnounced> {
        let mut found: Vec<_> = self
            .maintenance
            .values()
            .filter(|m| m.provider_id == provider_id && m.until > now)
            .cloned()
            .collect();
        found.sort_by_key(|m| (m.from, m.maintenance_id));
        found
    }

    pub fn delisting(&self, gpu_uuid: &str) -> Option<&GpuListingChanged> {
        self.delisted.get(gpu_uuid)
    }

    pub fn benchmarks(&self) -> &crate::benchmarks::Benchmarks {
        &self.benchmarks
    }

    /// The next instant after `now` at which the market alone (no new event) changes what is
    /// listed: a price or maintenance starting or ending, or a schedule opening or closing.
    pub fn next_boundary(&self, now: Timestamp) -> Option<Timestamp> {
        let weekly = self
            .availability
            .values()
            .filter_map(|a| market::next_availability_change(a, now))
            .min();
        let maintenance = self
            .maintenance
            .values()
            .flat_map(|m| [m.from, m.until])
            .filter(|t| *t > now);
        let prices = self
            .prices
            .values()
            .flatten()
            .map(|kept| kept.set.effective_at)
            .filter(|t| *t > now);
        weekly.into_iter().chain(maintenance).chain(prices).min()
    }

    fn in_maintenance(&self, machine: &MachineState, now: Timestamp) -> bool {
        self.maintenance.values().any(|m| {
            m.provider_id == machine.provider_id
                && m.machine_id.is_none_or(|id| id == machine.machine_id)
                && m.from <= now
                && now < m.until
        })
    }
}

/// One listed GPU, with everything a renter filters and sorts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub gpu_uuid: Arc<str>,
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub model_id: Arc<str>,
    pub model_name: Arc<str>,
    pub vram_gb: u32,
    pub vram_mib: u64,
    /// Listed GPUs on the same machine, this one included.
    pub gpus_on_machine: u32,
    pub price: Usdc,
    pub country: Arc<str>,
    pub region: Arc<str>,
    pub city: Arc<str>,
    /// The region lowercased: the market a price is compared in, with the model.
    region_key: Arc<str>,
    pub tier: Tier,
    pub commitment_months: u32,
    pub uptime_bp: u32,
    /// Dense FP16 tensor TFLOPS, in tenths: the GPU's latest accepted benchmark figure, else
    /// the datasheet's.
    pub fp16_tflops_tenths: u32,
    /// Whether `fp16_tflops_tenths` was measured on this GPU (else it is the datasheet's).
    pub fp16_measured: bool,
    /// The latest accepted benchmark run's score, basis points of the model's reference.
    pub performance_score_bp: Option<u64>,
    /// FP16 TFLOPS per USDC per hour, in thousandths.
    pub tflops_per_usdc_milli: u64,
    pub rank: RankBreakdown,
    pub simulated: bool,
}

/// Whether one GPU is listed at the snapshot's instant and, if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuStatus {
    pub gpu_uuid: Arc<str>,
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub hidden: Vec<Hidden>,
    /// The rank it has (listed) or would have with its price (hidden but priced).
    pub rank: Option<RankBreakdown>,
}

/// Everything the snapshot is built from besides the fleet and the market.
pub struct BuildInputs<'a> {
    pub fleet: &'a Fleet,
    pub market: &'a Market,
    /// Every application (the approved ones make providers).
    pub applications: &'a [Application],
    pub added_models: &'a [ModelAdded],
    /// Development deployment: simulated GPUs may be listed.
    pub dev_mode: bool,
}

/// Sort orders of a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SortBy {
    /// Rank, highest first.
    Rank,
    /// Price, lowest first.
    Price,
    /// FP16 TFLOPS per USDC per hour, highest first.
    PerfPerDollar,
    /// Benchmark score, highest first; GPUs not benchmarked yet last.
    Performance,
}

impl SortBy {
    pub const ALL: [SortBy; 4] = [
        SortBy::Rank,
        SortBy::Price,
        SortBy::PerfPerDollar,
        SortBy::Performance,
    ];

    /// The ordering key: smaller sorts first; ties go by GPU UUID.
    pub fn key(self, listing: &Listing) -> i64 {
        match self {
            SortBy::Rank => -i64::from(listing.rank.total),
            SortBy::Price => listing.price.micros(),
            SortBy::PerfPerDollar => {
                -i64::try_from(listing.tflops_per_usdc_milli).unwrap_or(i64::MAX)
            }
            SortBy::Performance => listing
                .performance_score_bp
                .map_or(1, |score| -i64::try_from(score).unwrap_or(i64::MAX)),
        }
    }
}

/// The listings at one instant, pre-sorted for every order, overall and per model.
#[derive(Debug, Clone)]
pub struct ListingSnapshot {
    pub as_of: Timestamp,
    /// When the listings change next with time alone (see [`Market::next_boundary`]).
    pub next_change: Option<Timestamp>,
    pub listings: Vec<Listing>,
    /// Indexes into `listings`, sorted, per (model or `None` for all, sort).
    orders: HashMap<(Option<String>, SortByKey), Vec<u32>>,
    /// Every registered GPU's status.
    statuses: HashMap<Arc<str>, GpuStatus>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SortByKey(u8);

impl From<SortBy> for SortByKey {
    fn from(sort: SortBy) -> SortByKey {
        SortByKey(match sort {
            SortBy::Rank => 0,
            SortBy::Price => 1,
            SortBy::PerfPerDollar => 2,
            SortBy::Performance => 3,
        })
    }
}

/// Provider, PCI device id and model: what an [`Offer`] is cached by during one build.
type OfferKey<'a> = (Uuid, Option<u16>, &'a str);

/// What every GPU of one provider and model shares in a snapshot.
struct Offer {
    model_id: Arc<str>,
    model_name: Arc<str>,
    vram_gb: u32,
    fp16_tflops_tenths: u32,
    price: Option<Usdc>,
    country: Arc<str>,
    region: Arc<str>,
    city: Arc<str>,
    region_key: Arc<str>,
}

impl Offer {
    /// `None` when the model is not in the catalog.
    fn new(
        inputs: &BuildInputs<'_>,
        provider: Option<&Provider<'_>>,
        provider_id: Uuid,
        model_id: &str,
        device: Option<u16>,
        now: Timestamp,
    ) -> Option<Offer> {
        let (model_name, vram_gb, fp16) = model_facts(model_id, device, inputs.added_models)?;
        let location = provider.and_then(|p| p.location(model_id));
        let text = |pick: fn(&Location) -> &str| Arc::<str>::from(location.map_or("", pick));
        Some(Offer {
            model_id: Arc::from(model_id),
            model_name: Arc::from(model_name.as_str()),
            vram_gb,
            fp16_tflops_tenths: fp16,
            price: market::price_at(inputs.market.live_prices(provider_id, model_id), now),
            country: text(|l| &l.country),
            region: text(|l| &l.region),
            city: text(|l| &l.city),
            region_key: Arc::from(
                location
                    .map_or(String::new(), |l| l.region.to_lowercase())
                    .as_str(),
            ),
        })
    }
}

/// What the approved application says about a provider.
struct Provider<'a> {
    tier: Tier,
    commitment_months: u32,
    application: &'a Application,
}

impl Provider<'_> {
    fn location(&self, model_id: &str) -> Option<&Location> {
        location_of(self.application, model_id)
    }
}

/// Where a provider's GPUs of `model_id` are: its application's entry for that model, else the
/// first entry.
pub fn location_of<'a>(application: &'a Application, model_id: &str) -> Option<&'a Location> {
    let gpus = &application.form.gpus;
    gpus.iter()
        .find(|entry| matches!(&entry.model, GpuModelChoice::Catalog(id) if id == model_id))
        .or_else(|| gpus.first())
        .map(|entry| &entry.location)
}

/// A catalog model's VRAM, name and datasheet FP16 figure (the variant with the GPU's device id,
/// else the first), built-in or added.
pub fn model_facts(
    model_id: &str,
    device: Option<u16>,
    added: &[ModelAdded],
) -> Option<(String, u32, u32)> {
    if let Some(model) = GPU_CATALOG.iter().find(|m| m.id == model_id) {
        let variant = model
            .variants
            .iter()
            .find(|v| device.is_some() && v.pci_device_id == device)
            .or_else(|| model.variants.first());
        return Some((
            model.name.to_owned(),
            model.vram_gb,
            variant.map_or(0, |v| v.fp16_tensor_tflops_tenths),
        ));
    }
    added
        .iter()
        .find(|m| m.model_id == model_id)
        .map(|m| (m.name.clone(), m.vram_gb, 0))
}

/// Uptime over the last 30 days (or since registration), in basis points.
pub fn uptime_bp(machine: &MachineState, outages: &[Span], now: Timestamp) -> u32 {
    let from = machine.registered_at.max(Timestamp::from_unix_micros(
        now.unix_micros() - 30 * MICROS_PER_DAY,
    ));
    let window = Span { from, until: now };
    let length = window.micros();
    if length <= 0 {
        return 10_000;
    }
    let down = machine
        .downtime_micros(outages, window, now)
        .clamp(0, length);
    u32::try_from((i128::from(length - down) * 10_000 / i128::from(length)).clamp(0, 10_000))
        .unwrap_or(0)
}

impl ListingSnapshot {
    /// No listings (before the first build).
    pub fn empty() -> ListingSnapshot {
        ListingSnapshot {
            as_of: Timestamp::from_unix_micros(0),
            next_change: None,
            listings: Vec::new(),
            orders: HashMap::new(),
            statuses: HashMap::new(),
        }
    }

    /// Which GPUs are listed at `now`, with their ranks, and why the others are not.
    pub fn build(inputs: &BuildInputs<'_>, now: Timestamp) -> ListingSnapshot {
        let providers: HashMap<Uuid, Provider<'_>> = inputs
            .applications
            .iter()
            .filter(|a| a.status == ApplicationStatus::Approved)
            .filter_map(|a| {
                Some((
                    a.provider_id?,
                    Provider {
                        tier: a.tier?,
                        commitment_months: a.form.commitment_months,
                        application: a,
                    },
                ))
            })
            .collect();
        let outages = inputs.fleet.outages();
        let mut candidates: Vec<Listing> = Vec::new();
        let mut hidden_priced: Vec<Listing> = Vec::new();
        let mut statuses: HashMap<Arc<str>, GpuStatus> = HashMap::new();
        let mut schedules: HashMap<Uuid, bool> = HashMap::new();
        // What every GPU of one provider and model shares, computed once per build.
        let mut offers: HashMap<OfferKey<'_>, Option<Arc<Offer>>> = HashMap::new();
        for machine in inputs.fleet.machines() {
            let provider = providers.get(&machine.provider_id);
            let available = *schedules.entry(machine.provider_id).or_insert_with(|| {
                market::available_at(&inputs.market.availability(machine.provider_id), now)
            });
            let in_maintenance = inputs.market.in_maintenance(machine, now);
            let machine_uptime = uptime_bp(machine, outages, now);
            for gpu in &machine.gpus {
                let uuid: Arc<str> = Arc::from(gpu.gpu.gpu_uuid.as_str());
                let mut hidden = Vec::new();
                if provider.is_none() {
                    hidden.push(Hidden::ProviderNotApproved);
                }
                if machine.simulated && !inputs.dev_mode {
                    hidden.push(Hidden::Simulated);
                }
                if !machine.online {
                    hidden.push(Hidden::Offline);
                }
                if machine
                    .conditions
                    .get(&gpu.gpu.gpu_uuid)
                    .is_some_and(|c| c.contains_key(&GpuCondition::Lost))
                {
                    hidden.push(Hidden::GpuLost);
                }
                if !available {
                    hidden.push(Hidden::OutsideAvailability);
                }
                if in_maintenance {
                    hidden.push(Hidden::Maintenance);
                }
                if inputs.market.delisting(&gpu.gpu.gpu_uuid).is_some() {
                    hidden.push(Hidden::Delisted);
                }
                let benchmarked = inputs.market.benchmarks().gpu(&gpu.gpu.gpu_uuid);
                if benchmarked.is_some_and(|b| b.hidden()) {
                    hidden.push(Hidden::BenchmarkFailed);
                }
                let measured_fp16 = benchmarked
                    .and_then(|b| b.latest.as_ref())
                    .and_then(|l| l.recorded.run.figure(Metric::Fp16Tflops))
                    .map(|f| u32::try_from(f.median_milli / 100).unwrap_or(u32::MAX));
                if inputs.market.lease_of(&gpu.gpu.gpu_uuid).is_some() {
                    hidden.push(Hidden::Rented);
                }
                let offer = match gpu.model_id.as_deref() {
                    None => None,
                    Some(model_id) => offers
                        .entry((machine.provider_id, gpu.gpu.pci_device_id, model_id))
                        .or_insert_with(|| {
                            Offer::new(
                                inputs,
                                provider,
                                machine.provider_id,
                                model_id,
                                gpu.gpu.pci_device_id,
                                now,
                            )
                            .map(Arc::new)
                        })
                        .clone(),
                };
                match offer.as_deref() {
                    None => hidden.push(Hidden::NotACatalogModel),
                    Some(Offer { price: None, .. }) => hidden.push(Hidden::NoPrice),
                    Some(_) => {}
                }
                let listing = match (offer.as_deref(), provider) {
                    (Some(offer), Some(provider)) => offer.price.map(|price| {
                        let fp16_tflops_tenths = measured_fp16.unwrap_or(offer.fp16_tflops_tenths);
                        Listing {
                            gpu_uuid: Arc::clone(&uuid),
                            machine_id: machine.machine_id,
                            provider_id: machine.provider_id,
                            model_id: Arc::clone(&offer.model_id),
                            model_name: Arc::clone(&offer.model_name),
                            vram_gb: offer.vram_gb,
                            vram_mib: gpu.gpu.vram_mib,
                            gpus_on_machine: 0,
                            price,
                            country: Arc::clone(&offer.country),
                            region: Arc::clone(&offer.region),
                            city: Arc::clone(&offer.city),
                            region_key: Arc::clone(&offer.region_key),
                            tier: provider.tier,
                            commitment_months: provider.commitment_months,
                            uptime_bp: machine_uptime,
                            fp16_tflops_tenths,
                            fp16_measured: measured_fp16.is_some(),
                            performance_score_bp: benchmarked.and_then(|b| b.score_bp()),
                            tflops_per_usdc_milli: u64::from(fp16_tflops_tenths) * 100_000_000
                                / u64::try_from(price.micros().max(1)).unwrap_or(1),
                            rank: RankBreakdown::default(),
                            simulated: machine.simulated,
                        }
                    }),
                    _ => None,
                };
                let listed = hidden.is_empty();
                statuses.insert(
                    Arc::clone(&uuid),
                    GpuStatus {
                        gpu_uuid: uuid,
                        machine_id: machine.machine_id,
                        provider_id: machine.provider_id,
                        hidden,
                        rank: None,
                    },
                );
                // Only listed GPUs enter the market (and its medians).
                match (listing, listed) {
                    (Some(listing), true) => candidates.push(listing),
                    (Some(listing), false) => hidden_priced.push(listing),
                    (None, _) => {}
                }
            }
        }
        // Medians per model and region over the listed GPUs.
        let mut prices: HashMap<(Arc<str>, Arc<str>), Vec<i64>> = HashMap::new();
        for listing in &candidates {
            prices
                .entry((
                    Arc::clone(&listing.model_id),
                    Arc::clone(&listing.region_key),
                ))
                .or_default()
                .push(listing.price.micros());
        }
        let medians: HashMap<(Arc<str>, Arc<str>), i64> = prices
            .into_iter()
            .filter_map(|(key, mut values)| Some((key, market::median(&mut values)?)))
            .collect();
        let rank_of = |listing: &Listing| {
            let median = medians
                .get(&(
                    Arc::clone(&listing.model_id),
                    Arc::clone(&listing.region_key),
                ))
                .copied()
                .unwrap_or(listing.price.micros());
            market::rank(
                listing.uptime_bp,
                listing.price,
                Usdc::from_micros(median),
                listing.tier,
                listing.commitment_months,
            )
        };
        // Hidden but priced GPUs show the rank they would have (for the provider's breakdown).
        for listing in &hidden_priced {
            if let Some(status) = statuses.get_mut(&listing.gpu_uuid) {
                status.rank = Some(rank_of(listing));
            }
        }
        let mut per_machine: HashMap<Uuid, u32> = HashMap::new();
        for listing in &candidates {
            *per_machine.entry(listing.machine_id).or_default() += 1;
        }
        let mut listings: Vec<Listing> = candidates
            .into_iter()
            .map(|mut listing| {
                listing.rank = rank_of(&listing);
                listing.gpus_on_machine =
                    per_machine.get(&listing.machine_id).copied().unwrap_or(1);
                listing
            })
            .collect();
        // Sorted by UUID, so an index breaks ties exactly as the UUID does.
        listings.sort_unstable_by(|a, b| a.gpu_uuid.cmp(&b.gpu_uuid));
        for listing in &listings {
            if let Some(status) = statuses.get_mut(&listing.gpu_uuid) {
                status.rank = Some(listing.rank);
            }
        }
        let mut orders: HashMap<(Option<String>, SortByKey), Vec<u32>> = HashMap::new();
        let count = u32::try_from(listings.len()).unwrap_or(u32::MAX);
        for sort in SortBy::ALL {
            let mut all: Vec<u32> = (0..count).collect();
            all.sort_unstable_by_key(|&i| (sort.key(&listings[i as usize]), i));
            // Each model's order is the overall order filtered: no second sort.
            let mut per_model: HashMap<&str, Vec<u32>> = HashMap::new();
            for &i in &all {
                per_model
                    .entry(&listings[i as usize].model_id)
                    .or_default()
                    .push(i);
            }
            for (model, order) in per_model {
                orders.insert((Some(model.to_owned()), sort.into()), order);
            }
            orders.insert((None, sort.into()), all);
        }
        ListingSnapshot {
            as_of: now,
            next_change: inputs.market.next_boundary(now),
            listings,
            orders,
            statuses,
        }
    }

    pub fn status(&self, gpu_uuid: &str) -> Option<&GpuStatus> {
        self.statuses.get(gpu_uuid)
    }

    pub fn listing(&self, gpu_uuid: &str) -> Option<&Listing> {
        self.listings
            .binary_search_by(|l| (*l.gpu_uuid).cmp(gpu_uuid))
            .ok()
            .map(|i| &self.listings[i])
    }

    /// Where a listed GPU stands in a search for its model in the default order (rank): its
    /// 1-based place and how many GPUs of the model are listed. `None` when it is not listed.
    pub fn place_in_model(&self, gpu_uuid: &str) -> Option<(usize, usize)> {
        let index = self
            .listings
            .binary_search_by(|l| (*l.gpu_uuid).cmp(gpu_uuid))
            .ok()?;
        let listing = &self.listings[index];
        let order = self
            .orders
            .get(&(Some(listing.model_id.to_string()), SortBy::Rank.into()))?;
        let sort_key = |i: u32| (SortBy::Rank.key(&self.listings[i as usize]), i);
        let own = sort_key(u32::try_from(index).ok()?);
        let before = order.partition_point(|&i| sort_key(i) < own);
        Some((before + 1, order.len()))
    }

    /// One page of listings matching `filter`, in `sort` order, after the cursor `after`
    /// (the sort key and GPU UUID of the last listing of the previous page). Returns the page and
    /// whether more may follow.
    pub fn search(
        &self,
        filter: &SearchFilter,
        sort: SortBy,
        after: Option<&(i64, String)>,
        limit: usize,
    ) -> (Vec<&Listing>, bool) {
        let Some(order) = self.orders.get(&(filter.model.clone(), sort.into())) else {
            return (Vec::new(), false);
        };
        // Skip to the cursor by binary search on (key, uuid).
        let start = match after {
            Some((key, uuid)) => order.partition_point(|&i| {
                let l = &self.listings[i as usize];
                (sort.key(l), &*l.gpu_uuid) <= (*key, uuid.as_str())
            }),
            None => 0,
        };
        let mut page = Vec::with_capacity(limit.min(order.len()));
        for &i in &order[start..] {
            let listing = &self.listings[i as usize];
            if filter.matches(listing) {
                if page.len() == limit {
                    return (page, true);
                }
                page.push(listing);
            }
        }
        (page, false)
    }
}

/// What a renter asks for. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchFilter {
    pub model: Option<String>,
    pub min_vram_gb: Option<u32>,
    /// ISO 3166-1 alpha-2, any case.
    pub country: Option<String>,
    /// Case-insensitive.
    pub region: Option<String>,
    pub max_price: Option<Usdc>,
    pub tier: Option<Tier>,
    pub min_gpus_on_machine: Option<u32>,
    /// Basis points; no listing has a reliability score yet, so any value above 0 matches none.
    pub min_reliability_bp: Option<u32>,
    /// Basis points of the benchmark score; GPUs not benchmarked yet do not match.
    pub min_performance_bp: Option<u64>,
}

impl SearchFilter {
    pub fn matches(&self, listing: &Listing) -> bool {
        self.min_vram_gb.is_none_or(|v| listing.vram_gb >= v)
            && self
                .country
                .as_deref()
                .is_none_or(|c| listing.country.eq_ignore_ascii_case(c))
            && self
                .region
                .as_deref()
                .is_none_or(|r| listing.region.eq_ignore_ascii_case(r))
            && self.max_price.is_none_or(|p| listing.price <= p)
            && self.tier.is_none_or(|t| listing.tier == t)
            && self
                .min_gpus_on_machine
                .is_none_or(|n| listing.gpus_on_machine >= n)
            && self.min_reliability_bp.is_none_or(|r| r == 0)
            && self
                .min_performance_bp
                .is_none_or(|p| listing.performance_score_bp.is_some_and(|s| s >= p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maintenance_over_for_a_day_leaves_memory_when_more_is_announced() {
        let provider_id = Uuid::from_u128(1);
        let day = MICROS_PER_DAY;
        let announce = |id: u128, from: i64, until: i64| {
            DomainEvent::Market(MarketEvent::MaintenanceAnnounced(MaintenanceAnnounced {
                maintenance_id: Uuid::from_u128(id),
                provider_id,
                machine_id: None,
                from: Timestamp::from_unix_micros(from),
                until: Timestamp::from_unix_micros(until),
                reason: "PSU".to_owned(),
                announced_at: Timestamp::from_unix_micros(0),
            }))
        };
        let mut market = Market::default();
        market.apply(1, 1, 0, &announce(1, day, 2 * day));
        market.apply(2, 2, 0, &announce(2, 5 * day, 6 * day));
        // Day 2.5: the first ended half a day ago; kept.
        market.apply(3, 3, 2 * day + day / 2, &announce(3, 7 * day, 8 * day));
        assert_eq!(market.maintenance.len(), 3);
        // Day 3.5: over for more than a day; forgotten. The others are still ahead.
        market.apply(4, 4, 3 * day + day / 2, &announce(4, 9 * day, 10 * day));
        let mut kept: Vec<u128> = market.maintenance.keys().map(|id| id.as_u128()).collect();
        kept.sort_unstable();
        assert_eq!(kept, [2, 3, 4]);
        let now = Timestamp::from_unix_micros(3 * day + day / 2);
        assert_eq!(market.maintenance_of(provider_id, now).len(), 3);
    }

    /// Whatever the order prices are set in, and with writers' clocks stepping back, the ones
    /// memory keeps price every instant from a day before the latest recorded exactly as the
    /// whole history does, and hold every price set in that day.
    #[test]
    fn forgotten_prices_never_change_a_price_from_a_day_before_the_last() {
        const HOUR: i64 = 3_600_000_000;
        let provider_id = Uuid::from_u128(1);
        // A small deterministic generator (no dependency): effective times up to 60 hours after
        // each set, sets 0 to 20 hours apart, ties included.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            i64::try_from(seed % n).unwrap()
        };
        for _ in 0..200 {
            let mut market = Market::default();
            let mut whole: Vec<PriceSet> = Vec::new();
            let (mut recorded, mut latest) = (0, 0);
            for position in 1..=30_u64 {
                // Clocks may step back up to 6 hours between writers.
                recorded += next(21) * HOUR - 6 * HOUR;
                latest = i64::max(latest, recorded);
                let set = PriceSet {
                    provider_id,
                    model_id: "h100-80gb".to_owned(),
                    price_micro_usdc: Usdc::from_micros(i64::try_from(position).unwrap()),
                    effective_at: Timestamp::from_unix_micros(recorded + next(4) * 20 * HOUR),
                    set_at: Timestamp::from_unix_micros(recorded),
                    set_by: "t".to_owned(),
                };
                whole.push(set.clone());
                market.apply(
                    position,
                    position,
                    recorded,
                    &DomainEvent::Market(MarketEvent::PriceSet(set)),
                );
                let kept: Vec<PriceSet> = market
                    .live_prices(provider_id, "h100-80gb")
                    .cloned()
                    .collect();
                for t in (latest - PRICE_MEMORY_MICROS..latest + 100 * HOUR)
                    .step_by(usize::try_from(HOUR / 2).unwrap())
                {
                    let t = Timestamp::from_unix_micros(t);
                    assert_eq!(
                        market::price_at(&kept, t),
                        market::price_at(&whole, t),
                        "at {t:?} after {position} prices"
                    );
                }
                let recent = market.recent_prices(provider_id);
                for (index, set) in whole.iter().enumerate() {
                    let position = u64::try_from(index).unwrap() + 1;
                    if set.set_at.unix_micros() >= latest - PRICE_MEMORY_MICROS {
                        assert!(recent.contains(&(position, set.clone())));
                    }
                }
                // Nothing else: the price in force at the horizon, those that take effect
                // after it, and those recorded since.
                let horizon = latest - PRICE_MEMORY_MICROS;
                let needed = whole
                    .iter()
                    .filter(|p| {
                        p.effective_at.unix_micros() > horizon || p.set_at.unix_micros() >= horizon
                    })
                    .count();
                assert!(kept.len() <= needed + 1, "{} > {needed} + 1", kept.len());
            }
        }
    }
    use gpunex_domain::fleet::{
        DetectedGpu, FleetEvent, GpuDetected, HostInfo, MachineOnline, MachineRegistered,
        ModelMatch, PcieLink,
    };
    use gpunex_domain::market::{AvailabilitySet, MaintenanceAnnounced, PriceSet};
    use gpunex_domain::onboarding::{ApplicationForm, GpuEntry, WeeklyWindow};
    use gpunex_domain::time::{MICROS_PER_SECOND, Weekday};

    // 2026-03-02 is a Monday.
    const MONDAY_0000_UTC: i64 = 1_772_409_600;

    fn at(hours: i64) -> Timestamp {
        Timestamp::from_unix_micros((MONDAY_0000_UTC + hours * 3_600) * MICROS_PER_SECOND)
    }

    fn application(provider_id: Uuid) -> Application {
        Application {
            application_id: Uuid::from_u128(1),
            applicant_user_id: Uuid::from_u128(2),
            form: ApplicationForm {
                full_legal_name: "Ada".to_owned(),
                email: "ada@example.com".to_owned(),
                company_name: None,
                gpus: vec![GpuEntry {
                    model: GpuModelChoice::Catalog("h100-80gb".to_owned()),
                    quantity: 2,
                    system_ram_gb: 512,
                    upload_mbps: 1_000,
                    download_mbps: 1_000,
                    availability: Availability::AlwaysOn,
                    location: Location {
                        city: "Madrid".to_owned(),
                        country: "ES".to_owned(),
                        region: "Madrid".to_owned(),
                    },
                }],
                ups_protected: true,
                commitment_months: 12,
                maintenance_notes: String::new(),
            },
            status: ApplicationStatus::Approved,
            submitted_at: at(-100),
            decided_at: Some(at(-99)),
            tier: Some(Tier::Community),
            provider_id: Some(provider_id),
            information_requests: 0,
        }
    }

    fn fleet(provider_id: Uuid, machine_id: Uuid, simulated: bool) -> Fleet {
        let mut fleet = Fleet::default();
        let registered = MachineRegistered {
            machine_id,
            provider_id,
            host: HostInfo::named("n"),
            agent_version: "t".to_owned(),
            simulated,
            gpu_count: 2,
            detected_at: at(-50),
        };
        fleet.apply(
            1,
            at(-50).unix_micros(),
            &DomainEvent::Fleet(FleetEvent::MachineRegistered(registered)),
        );
        for index in 0..2 {
            let gpu = GpuDetected {
                machine_id,
                provider_id,
                gpu: DetectedGpu {
                    gpu_uuid: format!("GPU-{index:08x}"),
                    index,
                    name: "NVIDIA H100 80GB HBM3".to_owned(),
                    pci_device_id: Some(0x2330),
                    pci_bus_id: None,
                    vram_mib: 81_559,
                    driver_version: None,
                    cuda_driver_version: None,
                    pcie_current: PcieLink::default(),
                    pcie_max: PcieLink::default(),
                    power_limit_w: None,
                    default_power_limit_w: None,
                    ecc_enabled: None,
                    mig_enabled: None,
                },
                model_id: Some("h100-80gb".to_owned()),
                model_match: ModelMatch::PciDeviceId,
                vram_below_model: false,
                power_limit_lowered: None,
            };
            fleet.apply(
                2 + u64::from(index),
                at(-50).unix_micros(),
                &DomainEvent::Fleet(FleetEvent::GpuDetected(gpu)),
            );
        }
        let online = MachineOnline {
            machine_id,
            provider_id,
            at: at(-49),
        };
        fleet.apply(
            4,
            at(-49).unix_micros(),
            &DomainEvent::Fleet(FleetEvent::MachineOnline(online)),
        );
        fleet
    }

    fn hidden(snapshot: &ListingSnapshot) -> Vec<Hidden> {
        snapshot.status("GPU-00000000").unwrap().hidden.clone()
    }

    #[test]
    fn what_is_listed_is_a_function_of_the_events_and_the_instant() {
        let provider_id = Uuid::from_u128(10);
        let machine_id = Uuid::from_u128(11);
        let applications = [application(provider_id)];
        let fleet = fleet(provider_id, machine_id, false);
        let mut market = Market::default();
        let market_event = |e: MarketEvent| DomainEvent::Market(e);
        // Priced from Monday 10:00 UTC; open Monday 09:00-17:00 Madrid (08:00-16:00 UTC in
        // winter); maintenance Monday 12:00-13:00 UTC.
        market.apply(
            1,
            1,
            0,
            &market_event(MarketEvent::PriceSet(PriceSet {
                provider_id,
                model_id: "h100-80gb".to_owned(),
                price_micro_usdc: Usdc::from_micros(2_000_000),
                effective_at: at(10),
                set_at: at(-1),
                set_by: "t".to_owned(),
            })),
        );
        market.apply(
            1,
            1,
            0,
            &market_event(MarketEvent::AvailabilitySet(AvailabilitySet {
                provider_id,
                availability: Availability::Weekly {
                    time_zone: "Europe/Madrid".to_owned(),
                    windows: vec![WeeklyWindow {
                        day: Weekday::Monday,
                        start_minute: 540,
                        end_minute: 1_020,
                    }],
                },
                set_at: at(-1),
            })),
        );
        market.apply(
            1,
            1,
            0,
            &market_event(MarketEvent::MaintenanceAnnounced(MaintenanceAnnounced {
                maintenance_id: Uuid::from_u128(20),
                provider_id,
                machine_id: Some(machine_id),
                from: at(12),
                until: at(13),
                reason: "PSU".to_owned(),
                announced_at: at(-1),
            })),
        );
        let inputs = BuildInputs {
            fleet: &fleet,
            market: &market,
            applications: &applications,
            added_models: &[],
            dev_mode: false,
        };
        let build = |t| ListingSnapshot::build(&inputs, t);
        assert_eq!(
            hidden(&build(at(7))),
            vec![Hidden::OutsideAvailability, Hidden::NoPrice]
        );
        assert_eq!(hidden(&build(at(9))), vec![Hidden::NoPrice]);
        let open = build(at(10));
        assert!(hidden(&open).is_empty());
        assert_eq!(open.listings.len(), 2);
        assert_eq!(open.listings[0].gpus_on_machine, 2);
        assert_eq!(open.listings[0].region.as_ref(), "Madrid");
        assert_eq!(hidden(&build(at(12))), vec![Hidden::Maintenance]);
        assert!(hidden(&build(at(13))).is_empty());
        assert_eq!(hidden(&build(at(16))), vec![Hidden::OutsideAvailability]);
        // The snapshot knows when it changes next without any event.
        assert_eq!(build(at(10)).next_change, Some(at(12)));
        assert_eq!(build(at(13)).next_change, Some(at(16)));

        // Simulated GPUs are listed only by a development deployment.
        let simulated = self::fleet(provider_id, machine_id, true);
        let mut inputs = BuildInputs {
            fleet: &simulated,
            market: &market,
            applications: &applications,
            added_models: &[],
            dev_mode: false,
        };
        assert_eq!(
            hidden(&ListingSnapshot::build(&inputs, at(10))),
            vec![Hidden::Simulated]
        );
        inputs.dev_mode = true;
        assert!(hidden(&ListingSnapshot::build(&inputs, at(10))).is_empty());
        // Without an approved application nothing is listed.
        let inputs = BuildInputs {
            fleet: &fleet,
            market: &market,
            applications: &[],
            added_models: &[],
            dev_mode: false,
        };
        assert_eq!(
            hidden(&ListingSnapshot::build(&inputs, at(10))),
            vec![Hidden::ProviderNotApproved]
        );
    }
}
