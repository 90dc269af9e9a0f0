//! The marketplace: prices, schedules, maintenance and delistings folded from `market.*` events,
//! and the listing snapshot built from them, the fleet and the approved applications at an
//! instant. Building is pure (`ListingSnapshot::build(.., now)`); the API rebuilds the snapshot
//! whenever the log moves and at least once a second, and answers searches from it.

use std::collections::{BTreeMap, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::fleet::{GpuCondition, Span};
use gpunex_domain::gpu::{GPU_CATALOG, ModelAdded};
use gpunex_domain::market::{
    self, GpuListingChanged, Hidden, MaintenanceAnnounced, MarketEvent, PriceSet, RankBreakdown,
};
use gpunex_domain::money::Usdc;
use gpunex_domain::onboarding::{
    Application, ApplicationStatus, Availability, GpuModelChoice, Location, Tier,
};
use gpunex_domain::time::{MICROS_PER_DAY, Timestamp};
use uuid::Uuid;

use crate::fleet::{Fleet, MachineState};

#[derive(Debug, Clone, Default)]
pub struct Market {
    /// Price history per provider and model, in log order.
    prices: HashMap<(Uuid, String), Vec<PriceSet>>,
    availability: HashMap<Uuid, Availability>,
    /// Announced and not cancelled, by id.
    maintenance: HashMap<Uuid, MaintenanceAnnounced>,
    /// Delisted GPUs, with why.
    delisted: HashMap<String, GpuListingChanged>,
}

impl Market {
    pub fn apply(&mut self, event: &DomainEvent) {
        let DomainEvent::Market(event) = event else {
            return;
        };
        match event {
            MarketEvent::PriceSet(set) => self
                .prices
                .entry((set.provider_id, set.model_id.clone()))
                .or_default()
                .push(set.clone()),
            MarketEvent::AvailabilitySet(set) => {
                self.availability
                    .insert(set.provider_id, set.availability.clone());
            }
            MarketEvent::MaintenanceAnnounced(announced) => {
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

    pub fn price_history(&self, provider_id: Uuid, model_id: &str) -> &[PriceSet] {
        self.prices
            .get(&(provider_id, model_id.to_owned()))
            .map_or(&[], Vec::as_slice)
    }

    /// Every model the provider has priced, with its history.
    pub fn prices_of(&self, provider_id: Uuid) -> BTreeMap<String, Vec<PriceSet>> {
        self.prices
            .iter()
            .filter(|((p, _), _)| *p == provider_id)
            .map(|((_, model), history)| (model.clone(), history.clone()))
            .collect()
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

    pub fn maintenance(&self, maintenance_id: &Uuid) -> Option<&MaintenanceAnnounced> {
        self.maintenance.get(maintenance_id)
    }

    pub fn delisting(&self, gpu_uuid: &str) -> Option<&GpuListingChanged> {
        self.delisted.get(gpu_uuid)
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
    pub gpu_uuid: String,
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub model_id: String,
    pub model_name: String,
    pub vram_gb: u32,
    pub vram_mib: u64,
    /// Listed GPUs on the same machine, this one included.
    pub gpus_on_machine: u32,
    pub price: Usdc,
    pub country: String,
    pub region: String,
    pub city: String,
    pub tier: Tier,
    pub commitment_months: u32,
    pub uptime_bp: u32,
    /// Datasheet dense FP16 tensor TFLOPS, in tenths: the performance figure until benchmarks
    /// exist.
    pub fp16_tflops_tenths: u32,
    /// FP16 TFLOPS per USDC per hour, in thousandths.
    pub tflops_per_usdc_milli: u64,
    pub rank: RankBreakdown,
    pub simulated: bool,
}

/// Whether one GPU is listed at the snapshot's instant and, if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuStatus {
    pub gpu_uuid: String,
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
}

impl SortBy {
    pub const ALL: [SortBy; 3] = [SortBy::Rank, SortBy::Price, SortBy::PerfPerDollar];

    /// The ordering key: smaller sorts first; ties go by GPU UUID.
    pub fn key(self, listing: &Listing) -> i64 {
        match self {
            SortBy::Rank => -i64::from(listing.rank.total),
            SortBy::Price => listing.price.micros(),
            SortBy::PerfPerDollar => {
                -i64::try_from(listing.tflops_per_usdc_milli).unwrap_or(i64::MAX)
            }
        }
    }
}

/// The listings at one instant, pre-sorted for every order, overall and per model.
#[derive(Debug, Clone)]
pub struct ListingSnapshot {
    pub as_of: Timestamp,
    pub listings: Vec<Listing>,
    /// Indexes into `listings`, sorted, per (model or `None` for all, sort).
    orders: HashMap<(Option<String>, SortByKey), Vec<u32>>,
    /// Every registered GPU's status.
    statuses: HashMap<String, GpuStatus>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SortByKey(u8);

impl From<SortBy> for SortByKey {
    fn from(sort: SortBy) -> SortByKey {
        SortByKey(match sort {
            SortBy::Rank => 0,
            SortBy::Price => 1,
            SortBy::PerfPerDollar => 2,
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
    /// Where GPUs of `model_id` are: the application entry for that model, else the first.
    fn location(&self, model_id: &str) -> Option<&Location> {
        let gpus = &self.application.form.gpus;
        gpus.iter()
            .find(|entry| matches!(&entry.model, GpuModelChoice::Catalog(id) if id == model_id))
            .or_else(|| gpus.first())
            .map(|entry| &entry.location)
    }
}

/// A catalog model's VRAM, name and datasheet FP16 figure (the variant with the GPU's device id,
/// else the first), built-in or added.
fn model_facts(
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
        let mut candidates: Vec<(Listing, MachineState)> = Vec::new();
        let mut statuses: HashMap<String, GpuStatus> = HashMap::new();
        let mut schedules: HashMap<Uuid, bool> = HashMap::new();
        for machine in inputs.fleet.machines() {
            let provider = providers.get(&machine.provider_id);
            let available = *schedules.entry(machine.provider_id).or_insert_with(|| {
                market::available_at(&inputs.market.availability(machine.provider_id), now)
            });
            let in_maintenance = inputs.market.in_maintenance(machine, now);
            let machine_uptime = uptime_bp(machine, outages, now);
            for gpu in &machine.gpus {
                let uuid = &gpu.gpu.gpu_uuid;
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
                    .get(uuid)
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
                if inputs.market.delisting(uuid).is_some() {
                    hidden.push(Hidden::Delisted);
                }
                let facts = gpu.model_id.as_deref().and_then(|id| {
                    Some((
                        id,
                        model_facts(id, gpu.gpu.pci_device_id, inputs.added_models)?,
                    ))
                });
                let price = gpu.model_id.as_deref().and_then(|id| {
                    market::price_at(inputs.market.price_history(machine.provider_id, id), now)
                });
                match (&facts, price) {
                    (None, _) => hidden.push(Hidden::NotACatalogModel),
                    (Some(_), None) => hidden.push(Hidden::NoPrice),
                    _ => {}
                }
                statuses.insert(
                    uuid.clone(),
                    GpuStatus {
                        gpu_uuid: uuid.clone(),
                        machine_id: machine.machine_id,
                        provider_id: machine.provider_id,
                        hidden: hidden.clone(),
                        rank: None,
                    },
                );
                let (Some((model_id, (model_name, vram_gb, fp16))), Some(price), Some(provider)) =
                    (facts, price, provider)
                else {
                    continue;
                };
                let location = provider.location(model_id);
                let listing = Listing {
                    gpu_uuid: uuid.clone(),
                    machine_id: machine.machine_id,
                    provider_id: machine.provider_id,
                    model_id: model_id.to_owned(),
                    model_name,
                    vram_gb,
                    vram_mib: gpu.gpu.vram_mib,
                    gpus_on_machine: 0,
                    price,
                    country: location.map(|l| l.country.clone()).unwrap_or_default(),
                    region: location.map(|l| l.region.clone()).unwrap_or_default(),
                    city: location.map(|l| l.city.clone()).unwrap_or_default(),
                    tier: provider.tier,
                    commitment_months: provider.commitment_months,
                    uptime_bp: machine_uptime,
                    fp16_tflops_tenths: fp16,
                    tflops_per_usdc_milli: u64::from(fp16) * 100_000_000
                        / u64::try_from(price.micros().max(1)).unwrap_or(1),
                    rank: market::rank(0, price, price, provider.tier, 0),
                    simulated: machine.simulated,
                };
                // Hidden but priced GPUs get a rank too (for the provider's breakdown); only
                // listed ones enter the market.
                if hidden.is_empty() {
                    candidates.push((listing, machine.clone()));
                } else if let Some(status) = statuses.get_mut(uuid) {
                    status.rank = Some(listing.rank);
                }
            }
        }
        // Medians per model and region over the listed GPUs.
        let mut prices: HashMap<(String, String), Vec<i64>> = HashMap::new();
        for (listing, _) in &candidates {
            prices
                .entry((listing.model_id.clone(), listing.region.to_lowercase()))
                .or_default()
                .push(listing.price.micros());
        }
        let medians: HashMap<(String, String), i64> = prices
            .into_iter()
            .filter_map(|(key, mut values)| Some((key, market::median(&mut values)?)))
            .collect();
        let mut per_machine: HashMap<Uuid, u32> = HashMap::new();
        for (listing, _) in &candidates {
            *per_machine.entry(listing.machine_id).or_default() += 1;
        }
        let mut listings: Vec<Listing> = candidates
            .into_iter()
            .map(|(mut listing, _)| {
                let median = medians
                    .get(&(listing.model_id.clone(), listing.region.to_lowercase()))
                    .copied()
                    .unwrap_or(listing.price.micros());
                listing.rank = market::rank(
                    listing.uptime_bp,
                    listing.price,
                    Usdc::from_micros(median),
                    listing.tier,
                    listing.commitment_months,
                );
                listing.gpus_on_machine =
                    per_machine.get(&listing.machine_id).copied().unwrap_or(1);
                listing
            })
            .collect();
        listings.sort_by(|a, b| {
            (SortBy::Rank.key(a), &a.gpu_uuid).cmp(&(SortBy::Rank.key(b), &b.gpu_uuid))
        });
        for listing in &listings {
            if let Some(status) = statuses.get_mut(&listing.gpu_uuid) {
                status.rank = Some(listing.rank);
            }
        }
        let mut orders: HashMap<(Option<String>, SortByKey), Vec<u32>> = HashMap::new();
        let mut by_model: HashMap<String, Vec<u32>> = HashMap::new();
        for (i, listing) in listings.iter().enumerate() {
            by_model
                .entry(listing.model_id.clone())
                .or_default()
                .push(i as u32);
        }
        let all: Vec<u32> = (0..listings.len() as u32).collect();
        for sort in SortBy::ALL {
            let order = |indexes: &[u32]| {
                let mut sorted = indexes.to_vec();
                sorted.sort_by(|&a, &b| {
                    let (a, b) = (&listings[a as usize], &listings[b as usize]);
                    (sort.key(a), &a.gpu_uuid).cmp(&(sort.key(b), &b.gpu_uuid))
                });
                sorted
            };
            orders.insert((None, sort.into()), order(&all));
            for (model, indexes) in &by_model {
                orders.insert((Some(model.clone()), sort.into()), order(indexes));
            }
        }
        ListingSnapshot {
            as_of: now,
            listings,
            orders,
            statuses,
        }
    }

    pub fn status(&self, gpu_uuid: &str) -> Option<&GpuStatus> {
        self.statuses.get(gpu_uuid)
    }

    pub fn listing(&self, gpu_uuid: &str) -> Option<&Listing> {
        self.listings.iter().find(|l| l.gpu_uuid == gpu_uuid)
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
                (sort.key(l), l.gpu_uuid.as_str()) <= (*key, uuid.as_str())
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
    }
}
