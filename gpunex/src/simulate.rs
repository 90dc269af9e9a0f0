//! `gpunex simulate`: a marketplace driven deterministically from a seed, written into a real
//! database through the store's real append path. It is the demo a newcomer runs and the load the
//! benchmarks use.
//!
//! What happens is decided by the domain's own rules, the ones the API handlers use:
//! applications through `onboarding::decide`, model identification by `fleet::identify`,
//! prices checked by `market::parse_price`, usage metered by `rental::meter_usage` (capped at the
//! machine's online time by `fleet::online_micros`), fees from the tier's schedule. Every append
//! names each stream's expected version, as the handlers do. The agents are simulated (their
//! machines are registered `simulated: true`, listed only by a `--dev-mode` server). After every
//! simulated hour the money invariants are checked with the same `Reconciler` as `gpunex audit
//! reconcile`; a mismatch stops the run.
//!
//! Time is simulated: 5-minute steps from the start date's midnight (UTC). The same seed, sizes
//! and start date give the same events (ids, payloads, order); the log's own `recorded_at` is the
//! real clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::NaiveDate;
use gpunex_domain::DomainEvent;
use gpunex_domain::StreamId;
use gpunex_domain::fleet::{
    self, DetectedGpu, FleetEvent, GpuCondition, GpuConditionChanged, GpuDetected, HostInfo,
    MachineOffline, MachineOnline, MachineRegistered, PcieLink, Span,
};
use gpunex_domain::gpu::GPU_CATALOG;
use gpunex_domain::market::{MarketEvent, PriceSet};
use gpunex_domain::metering::{FeeSchedule, Meter};
use gpunex_domain::money::Usdc;
use gpunex_domain::onboarding::{
    self, Application, ApplicationCommand, ApplicationForm, Availability, GpuEntry, GpuModelChoice,
    Location, Tier,
};
use gpunex_domain::rental::{
    self, EndCause, GpuLease, JobEnded, JobEvidence, JobStarted, RentalEnded, RentalEvent,
    RentalStarted, UsageInput, Workload,
};
use gpunex_domain::time::{MICROS_PER_SECOND, Timestamp};
use gpunex_projections::reconcile::Reconciler;
use gpunex_store::{ExpectedVersion, Metadata, NewEvent, Store, StreamAppend};
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

const STEP_SECONDS: i64 = 300;
const STEPS_PER_HOUR: i64 = 3_600 / STEP_SECONDS;
const STEPS_PER_DAY: i64 = 24 * STEPS_PER_HOUR;
/// A rental whose machine is silent longer than this ends `network_loss` (the server default).
const RENTAL_GRACE_SECONDS: i64 = 600;

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub providers: u32,
    /// GPUs per provider (one machine each).
    pub gpus: u32,
    pub days: u32,
    pub renters: u32,
    /// The first simulated day (UTC); default: `days` days before today.
    pub start: NaiveDate,
    pub fees: FeeSchedule,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SimReport {
    pub seed: u64,
    pub start: String,
    pub days: u32,
    pub providers: u32,
    pub gpus: u32,
    pub events: u64,
    pub usage_events: u64,
    pub rentals: u64,
    pub completed: u64,
    pub cancelled: u64,
    pub hardware_faults: u64,
    pub network_losses: u64,
    pub outages: u64,
    pub price_changes: u64,
    pub renter_charges_micro_usdc: i64,
    pub provider_earnings_micro_usdc: i64,
    pub platform_fees_micro_usdc: i64,
    /// Hourly reconciliations run, all clean.
    pub invariant_checks: u64,
    /// SHA-256 of every event's type and payload, in order: equal for equal inputs.
    pub content_digest: String,
    pub seconds: f64,
}

/// splitmix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// True with probability `per_million` / 1,000,000.
    fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }

    /// A UUIDv7 at `at`, its random bits from the seed.
    fn uuid(&mut self, at: Timestamp) -> Uuid {
        let mut bytes = [0_u8; 10];
        bytes[..8].copy_from_slice(&self.next().to_le_bytes());
        bytes[8..].copy_from_slice(&self.next().to_le_bytes()[..2]);
        let millis = u64::try_from(at.unix_micros() / 1_000).unwrap_or(0);
        uuid::Builder::from_unix_timestamp_millis(millis, &bytes).into_uuid()
    }
}

/// Models the simulation offers, with a typical hourly price in micro-USDC.
const MODELS: [(&str, i64); 6] = [
    ("h100-80gb", 2_500_000),
    ("a100-80gb", 1_600_000),
    ("a100-40gb", 1_200_000),
    ("l40s", 1_000_000),
    ("rtx-4090", 450_000),
    ("l4", 400_000),
];

const PLACES: [(&str, &str, &str); 6] = [
    ("Madrid", "ES", "Madrid"),
    ("Frankfurt", "DE", "Hesse"),
    ("Paris", "FR", "Ile-de-France"),
    ("Ashburn", "US", "Virginia"),
    ("Dallas", "US", "Texas"),
    ("Singapore", "SG", "Singapore"),
];

struct SimProvider {
    provider_id: Uuid,
    tier: Tier,
    model_id: &'static str,
    base_price: i64,
    price: Usdc,
    machine_id: Uuid,
    free: BTreeSet<String>,
    online: bool,
    back_at: Option<Timestamp>,
    offline_since: Option<Timestamp>,
    transitions: Vec<(bool, Timestamp)>,
    /// A GPU with an active fault, and when it clears.
    fault: Option<(String, Timestamp)>,
}

struct SimRental {
    started: RentalStarted,
    provider: usize,
    meter: Meter,
    planned_end: Timestamp,
}

struct Simulation<'a> {
    store: &'a Store,
    config: &'a SimConfig,
    rng: Rng,
    versions: HashMap<String, u64>,
    /// Events waiting for the next flush, grouped by stream in first-touch order.
    pending: Vec<(String, Vec<(Uuid, DomainEvent)>)>,
    pending_index: HashMap<String, usize>,
    providers: Vec<SimProvider>,
    renters: Vec<Uuid>,
    rentals: BTreeMap<Uuid, SimRental>,
    reconciler: Reconciler,
    digest: Sha256,
    sequence: u64,
    report: SimReport,
}

fn seconds(s: i64) -> i64 {
    s * MICROS_PER_SECOND
}

fn at_plus(at: Timestamp, secs: i64) -> Timestamp {
    Timestamp::from_unix_micros(at.unix_micros() + seconds(secs))
}

impl Simulation<'_> {
    fn push(&mut self, stream: String, at: Timestamp, event: DomainEvent) {
        let id = self.rng.uuid(at);
        self.sequence += 1;
        self.reconciler.apply(self.sequence, &event);
        let new = NewEvent::from_domain(id, &event, Metadata::actor("system:simulation"));
        self.digest.update(new.event_type.as_bytes());
        self.digest.update(new.payload.to_string().as_bytes());
        self.report.events += 1;
        if matches!(event, DomainEvent::Rental(RentalEvent::UsageMetered(_))) {
            self.report.usage_events += 1;
        }
        match self.pending_index.get(&stream) {
            Some(&i) => self.pending[i].1.push((id, event)),
            None => {
                self.pending_index
                    .insert(stream.clone(), self.pending.len());
                self.pending.push((stream, vec![(id, event)]));
            }
        }
    }

    /// Appends everything pending: streams in chunks within the store's limits, the chunks
    /// concurrently (the writer commits them as groups), each stream at its expected version.
    async fn flush(&mut self) -> anyhow::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_index.clear();
        let mut chunks: Vec<Vec<StreamAppend>> = Vec::new();
        let mut current: Vec<StreamAppend> = Vec::new();
        let mut events_in_current = 0;
        for (stream, events) in pending {
            let version = self.versions.entry(stream.clone()).or_insert(0);
            let expected = if *version == 0 {
                ExpectedVersion::NoStream
            } else {
                ExpectedVersion::Exact(*version)
            };
            *version += events.len() as u64;
            if current.len() == gpunex_store::envelope::APPEND_STREAMS_MAX
                || events_in_current + events.len() > gpunex_store::envelope::APPEND_EVENTS_MAX
            {
                chunks.push(std::mem::take(&mut current));
                events_in_current = 0;
            }
            events_in_current += events.len();
            current.push(StreamAppend {
                stream_id: StreamId::parse(stream)?,
                expected,
                events: events
                    .into_iter()
                    .map(|(id, e)| {
                        NewEvent::from_domain(id, &e, Metadata::actor("system:simulation"))
                    })
                    .collect(),
            });
        }
        if !current.is_empty() {
            chunks.push(current);
        }
        let appends = chunks
            .into_iter()
            .map(|chunk| self.store.append_streams(chunk));
        for result in futures_util::future::join_all(appends).await {
            result.map_err(|e| anyhow::anyhow!("append refused: {e}"))?;
        }
        Ok(())
    }

    fn machine_stream(&self, p: usize) -> String {
        format!("machine-{}", self.providers[p].machine_id)
    }

    /// A provider applies, is approved, registers its machine, comes online and sets a price.
    fn onboard(&mut self, index: u32, t0: Timestamp) -> anyhow::Result<()> {
        let (model_id, base_price) = MODELS[self.rng.below(MODELS.len() as u64) as usize];
        let place = PLACES[self.rng.below(PLACES.len() as u64) as usize];
        let tier = if self.rng.chance(300_000) {
            Tier::Enterprise
        } else {
            Tier::Community
        };
        let gpus = self.config.gpus;
        let form = ApplicationForm {
            full_legal_name: format!("Simulated Provider {index}"),
            email: format!("provider{index}@simulation.gpunex.example"),
            company_name: Some(format!("Simulated Compute {index}")),
            gpus: vec![GpuEntry {
                model: GpuModelChoice::Catalog(model_id.to_owned()),
                quantity: gpus,
                system_ram_gb: 64 * gpus,
                upload_mbps: 10_000,
                download_mbps: 10_000,
                availability: Availability::AlwaysOn,
                location: Location {
                    city: place.0.to_owned(),
                    country: place.1.to_owned(),
                    region: place.2.to_owned(),
                },
            }],
            ups_protected: true,
            commitment_months: 12,
            maintenance_notes: "monthly, announced a week ahead".to_owned(),
        };
        let submitted_at = at_plus(t0, -2 * 86_400);
        let application_id = self.rng.uuid(submitted_at);
        let applicant = self.rng.uuid(submitted_at);
        let provider_id = self.rng.uuid(submitted_at);
        let stream = format!("application-{application_id}");
        let submitted = onboarding::decide(
            None,
            ApplicationCommand::Submit {
                application_id,
                applicant_user_id: applicant,
                form,
                at: submitted_at,
            },
        )?;
        let mut state: Option<Application> = None;
        for event in &submitted {
            state = onboarding::evolve(state, event);
        }
        let approve = |tier| ApplicationCommand::Approve {
            reviewer_user_id: Uuid::from_u128(1),
            tier,
            provider_id,
            at: at_plus(t0, -86_400),
        };
        // An Enterprise approval the tier rules refuse becomes Community, as a reviewer would.
        let (approved, tier) = match onboarding::decide(state.as_ref(), approve(tier)) {
            Ok(events) => (events, tier),
            Err(_) => (
                onboarding::decide(state.as_ref(), approve(Tier::Community))?,
                Tier::Community,
            ),
        };
        for event in submitted.into_iter().chain(approved) {
            self.push(stream.clone(), t0, DomainEvent::Application(event));
        }

        // The machine, registered by a simulated agent, and its GPUs as NVML would show them.
        let machine_id = self.rng.uuid(t0);
        let catalog = GPU_CATALOG
            .iter()
            .find(|m| m.id == model_id)
            .ok_or_else(|| anyhow::anyhow!("{model_id} is not in the catalog"))?;
        let variant = catalog.variants[0];
        let machine_stream = format!("machine-{machine_id}");
        self.push(
            machine_stream.clone(),
            t0,
            DomainEvent::Fleet(FleetEvent::MachineRegistered(MachineRegistered {
                machine_id,
                provider_id,
                host: HostInfo {
                    hostname: format!("sim-{index}"),
                    cpu_model: Some("Simulated EPYC".to_owned()),
                    cpu_cores: Some(64),
                    ram_mib: Some(u64::from(64 * gpus) * 1_024),
                    disk_total_gib: Some(4_000),
                    disk_free_gib: Some(3_000),
                    os: Some("Ubuntu 22.04".to_owned()),
                    kernel: Some("6.5.0".to_owned()),
                },
                agent_version: "simulation".to_owned(),
                simulated: true,
                gpu_count: gpus,
                detected_at: t0,
            })),
        );
        let mut uuids = Vec::new();
        for i in 0..gpus {
            let id = self.rng.uuid(t0).simple().to_string();
            let gpu_uuid = format!(
                "GPU-{}-{}-{}-{}-{}",
                &id[..8],
                &id[8..12],
                &id[12..16],
                &id[16..20],
                &id[20..]
            );
            let detected = DetectedGpu {
                gpu_uuid: gpu_uuid.clone(),
                index: i,
                name: catalog.name.to_owned(),
                pci_device_id: variant.pci_device_id,
                pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + i)),
                vram_mib: u64::from(catalog.vram_gb) * 1_000_000_000 / 1_048_576,
                driver_version: Some("550.54.15".to_owned()),
                cuda_driver_version: Some("12.4".to_owned()),
                pcie_current: PcieLink {
                    generation: Some(4),
                    width: Some(16),
                },
                pcie_max: PcieLink {
                    generation: Some(4),
                    width: Some(16),
                },
                power_limit_w: Some(variant.power_w),
                default_power_limit_w: Some(variant.power_w),
                ecc_enabled: Some(true),
                mig_enabled: Some(false),
            };
            let identified = fleet::identify(&detected, &[]);
            self.push(
                machine_stream.clone(),
                t0,
                DomainEvent::Fleet(FleetEvent::GpuDetected(GpuDetected {
                    machine_id,
                    provider_id,
                    power_limit_lowered: detected.power_limit_lowered(),
                    gpu: detected,
                    model_id: identified.model_id,
                    model_match: identified.method,
                    vram_below_model: identified.vram_below_model,
                })),
            );
            uuids.push(gpu_uuid);
        }
        self.push(
            machine_stream,
            t0,
            DomainEvent::Fleet(FleetEvent::MachineOnline(MachineOnline {
                machine_id,
                provider_id,
                at: t0,
            })),
        );
        // A price near the model's typical one, to the cent.
        let cents = base_price / 10_000 * (80 + self.rng.below(46) as i64) / 100;
        let price =
            gpunex_domain::market::parse_price(&format!("{}.{:02}", cents / 100, cents % 100))
                .map_err(|e| anyhow::anyhow!("simulated price: {e}"))?;
        self.providers.push(SimProvider {
            provider_id,
            tier,
            model_id,
            base_price,
            price,
            machine_id,
            free: uuids.into_iter().collect(),
            online: true,
            back_at: None,
            offline_since: None,
            transitions: vec![(true, t0)],
            fault: None,
        });
        let p = self.providers.len() - 1;
        self.set_price(p, t0, price);
        Ok(())
    }

    fn set_price(&mut self, p: usize, at: Timestamp, price: Usdc) {
        self.providers[p].price = price;
        let provider = &self.providers[p];
        let event = DomainEvent::Market(MarketEvent::PriceSet(PriceSet {
            provider_id: provider.provider_id,
            model_id: provider.model_id.to_owned(),
            price_micro_usdc: price,
            effective_at: at,
            set_at: at,
            set_by: "system:simulation".to_owned(),
        }));
        let stream = format!("provider_market-{}", provider.provider_id);
        self.push(stream, at, event);
    }

    /// Meters the rental's counter now (as the agent reports it), capped at the online time.
    fn meter(&mut self, rental_id: Uuid, at: Timestamp, counter: u64) -> anyhow::Result<()> {
        let Some(rental) = self.rentals.get(&rental_id) else {
            return Ok(());
        };
        let provider = &self.providers[rental.provider];
        let online = fleet::online_micros(
            &provider.transitions,
            Span {
                from: rental.started.started_at,
                until: at,
            },
        ) / MICROS_PER_SECOND;
        let report_id = self.rng.uuid(at);
        let input = UsageInput {
            rental: &rental.started,
            meter: rental.meter,
            tier: provider.tier,
            fees: self.config.fees,
            reported_gpu_seconds: counter,
            online_gpu_seconds: u64::try_from(online).unwrap_or(0)
                * rental.started.gpu_uuids.len() as u64,
            report_id,
            at,
        };
        if let Some(metered) = rental::meter_usage(&input)? {
            if let Some(rental) = self.rentals.get_mut(&rental_id) {
                rental.meter = Meter {
                    gpu_seconds: metered.to_gpu_seconds,
                    charged: Usdc::from_micros(
                        rental.meter.charged.micros() + metered.gross.micros(),
                    ),
                };
            }
            self.report.renter_charges_micro_usdc += metered.gross.micros();
            self.report.provider_earnings_micro_usdc += metered.net.micros();
            self.report.platform_fees_micro_usdc += metered.fee.micros();
            self.push(
                format!("rental-{rental_id}"),
                at,
                DomainEvent::Rental(RentalEvent::UsageMetered(metered)),
            );
        }
        Ok(())
    }

    /// The agent's counter: the rental's GPUs times the seconds since it started.
    fn counter(rental: &SimRental, at: Timestamp) -> u64 {
        let secs = (at.unix_micros() - rental.started.started_at.unix_micros()) / MICROS_PER_SECOND;
        u64::try_from(secs).unwrap_or(0) * rental.started.gpu_uuids.len() as u64
    }

    /// Ends a rental: the final usage, the job's end (when the agent could report it), the
    /// rental's end and the GPU releases.
    fn finish(
        &mut self,
        rental_id: Uuid,
        at: Timestamp,
        ended_at: Timestamp,
        cause: EndCause,
        evidence: JobEvidence,
        job_reported: bool,
    ) -> anyhow::Result<()> {
        let Some(rental) = self.rentals.get(&rental_id) else {
            return Ok(());
        };
        let counter = Simulation::counter(rental, at);
        self.meter(rental_id, at, counter)?;
        let Some(rental) = self.rentals.remove(&rental_id) else {
            return Ok(());
        };
        let stream = format!("rental-{rental_id}");
        let machine_id = rental.started.machine_id;
        if job_reported {
            self.push(
                stream.clone(),
                at,
                DomainEvent::Rental(RentalEvent::JobEnded(JobEnded {
                    rental_id,
                    machine_id,
                    cause,
                    evidence: evidence.clone(),
                    gpu_seconds: counter,
                    ended_at,
                })),
            );
        }
        self.push(
            stream,
            at,
            DomainEvent::Rental(RentalEvent::Ended(RentalEnded {
                rental_id,
                cause,
                ended_at,
                ended_by: if cause == EndCause::RenterCancelled {
                    format!("renter:{}", rental.started.renter_id)
                } else {
                    format!("agent:{machine_id}")
                },
                evidence: evidence.summary(),
            })),
        );
        for gpu in &rental.started.gpu_uuids {
            self.push(
                format!("gpu_lease-{gpu}"),
                at,
                DomainEvent::Rental(RentalEvent::GpuReleased(GpuLease {
                    gpu_uuid: gpu.clone(),
                    rental_id,
                    at: ended_at,
                })),
            );
            let provider = &mut self.providers[rental.provider];
            let faulty = provider.fault.as_ref().is_some_and(|(g, _)| g == gpu);
            if !faulty {
                provider.free.insert(gpu.clone());
            }
        }
        match cause {
            EndCause::Completed => self.report.completed += 1,
            EndCause::RenterCancelled => self.report.cancelled += 1,
            EndCause::HardwareFault => self.report.hardware_faults += 1,
            EndCause::NetworkLoss => self.report.network_losses += 1,
            _ => {}
        }
        Ok(())
    }

    fn rent(&mut self, p: usize, at: Timestamp) {
        let free = self.providers[p].free.len() as u64;
        let count = 1 + self.rng.below(free.min(4));
        let gpus: Vec<String> = self.providers[p]
            .free
            .iter()
            .take(count as usize)
            .cloned()
            .collect();
        let renter = self.renters[self.rng.below(self.renters.len() as u64) as usize];
        let hours = 1 + self.rng.below(24) as i64;
        let rental_id = self.rng.uuid(at);
        let provider = &self.providers[p];
        let started = RentalStarted {
            rental_id,
            renter_id: renter,
            provider_id: provider.provider_id,
            machine_id: provider.machine_id,
            gpu_uuids: gpus.clone(),
            model_id: provider.model_id.to_owned(),
            price_per_gpu_hour: provider.price,
            started_at: at,
            workload: Some(Workload {
                image: "nvcr.io/nvidia/pytorch:24.05-py3".to_owned(),
                command: vec!["python".to_owned(), "train.py".to_owned()],
                env: BTreeMap::from([("EPOCHS".to_owned(), hours.to_string())]),
            }),
        };
        let machine_id = provider.machine_id;
        let stream = format!("rental-{rental_id}");
        self.push(
            stream.clone(),
            at,
            DomainEvent::Rental(RentalEvent::Started(started.clone())),
        );
        for gpu in &gpus {
            self.providers[p].free.remove(gpu);
            self.push(
                format!("gpu_lease-{gpu}"),
                at,
                DomainEvent::Rental(RentalEvent::GpuLeased(GpuLease {
                    gpu_uuid: gpu.clone(),
                    rental_id,
                    at,
                })),
            );
        }
        self.push(
            stream,
            at,
            DomainEvent::Rental(RentalEvent::JobStarted(JobStarted {
                rental_id,
                machine_id,
                runtime: "docker".to_owned(),
                handle: format!("sim-{}", &rental_id.simple().to_string()[..12]),
                started_at: at,
            })),
        );
        self.rentals.insert(
            rental_id,
            SimRental {
                started,
                provider: p,
                meter: Meter::default(),
                planned_end: at_plus(at, hours * 3_600),
            },
        );
        self.report.rentals += 1;
    }

    async fn step(&mut self, step: i64, at: Timestamp) -> anyhow::Result<()> {
        let on_the_hour = step % STEPS_PER_HOUR == 0;
        // Presence: outages start (about one a week per machine) and end (1 to 8 hours later).
        for p in 0..self.providers.len() {
            let provider = &self.providers[p];
            if provider.online && self.rng.chance(1_000_000 / (7 * STEPS_PER_DAY as u64)) {
                let back = at_plus(at, 3_600 * (1 + self.rng.below(8) as i64));
                let provider = &mut self.providers[p];
                provider.online = false;
                provider.offline_since = Some(at);
                provider.back_at = Some(back);
                provider.transitions.push((false, at));
                let event = DomainEvent::Fleet(FleetEvent::MachineOffline(MachineOffline {
                    machine_id: provider.machine_id,
                    provider_id: provider.provider_id,
                    last_heartbeat_at: at,
                    detected_at: at_plus(at, 60),
                    grace_seconds: 60,
                }));
                self.report.outages += 1;
                let stream = self.machine_stream(p);
                self.push(stream, at, event);
            } else if !provider.online && provider.back_at.is_some_and(|b| b <= at) {
                let provider = &mut self.providers[p];
                provider.online = true;
                provider.back_at = None;
                provider.offline_since = None;
                provider.transitions.push((true, at));
                let event = DomainEvent::Fleet(FleetEvent::MachineOnline(MachineOnline {
                    machine_id: provider.machine_id,
                    provider_id: provider.provider_id,
                    at,
                }));
                let stream = self.machine_stream(p);
                self.push(stream, at, event);
            }
            // A fault clears.
            if let Some((gpu, clears)) = self.providers[p].fault.clone()
                && clears <= at
            {
                let provider = &mut self.providers[p];
                provider.fault = None;
                if !self
                    .rentals
                    .values()
                    .any(|r| r.started.gpu_uuids.contains(&gpu))
                {
                    provider.free.insert(gpu.clone());
                }
                let event = condition(provider, &gpu, false, at);
                let stream = self.machine_stream(p);
                self.push(stream, at, event);
            }
        }
        let ids: Vec<Uuid> = self.rentals.keys().copied().collect();
        for rental_id in ids {
            let (p, planned_end, gpus) = {
                let r = &self.rentals[&rental_id];
                (r.provider, r.planned_end, r.started.gpu_uuids.clone())
            };
            let provider = &self.providers[p];
            if let Some(since) = provider.offline_since {
                // No heartbeat, no meter; past the grace period the platform ends it.
                if at.unix_micros() - since.unix_micros() > seconds(RENTAL_GRACE_SECONDS) {
                    let evidence = JobEvidence {
                        detail: format!(
                            "machine offline: no heartbeat since {}",
                            since.unix_micros()
                        ),
                        ..JobEvidence::default()
                    };
                    self.finish(rental_id, at, since, EndCause::NetworkLoss, evidence, false)?;
                }
                continue;
            }
            if at >= planned_end {
                let evidence = JobEvidence {
                    exit_code: Some(0),
                    ..JobEvidence::default()
                };
                self.finish(rental_id, at, at, EndCause::Completed, evidence, true)?;
            } else if on_the_hour && self.rng.chance(20_000) {
                let evidence = JobEvidence {
                    signal: Some(15),
                    detail: "stopped: the rental ended".to_owned(),
                    ..JobEvidence::default()
                };
                self.finish(rental_id, at, at, EndCause::RenterCancelled, evidence, true)?;
            } else if on_the_hour && self.rng.chance(3_000) {
                let gpu = gpus[self.rng.below(gpus.len() as u64) as usize].clone();
                let provider = &mut self.providers[p];
                provider.fault = Some((gpu.clone(), at_plus(at, 2 * 3_600)));
                let event = condition(provider, &gpu, true, at);
                let stream = self.machine_stream(p);
                self.push(stream, at, event);
                let evidence = JobEvidence {
                    signal: Some(9),
                    gpu_uuid: Some(gpu.clone()),
                    condition: Some(GpuCondition::Lost),
                    detail: "stopped: GPU fell off the bus".to_owned(),
                    ..JobEvidence::default()
                };
                self.finish(rental_id, at, at, EndCause::HardwareFault, evidence, true)?;
            } else {
                let counter = Simulation::counter(&self.rentals[&rental_id], at);
                self.meter(rental_id, at, counter)?;
            }
        }
        if on_the_hour {
            // Renters take free GPUs: more readily when the price is below the model's usual.
            for p in 0..self.providers.len() {
                let provider = &self.providers[p];
                if !provider.online || provider.free.is_empty() {
                    continue;
                }
                let per_million = (250_000 * provider.base_price / provider.price.micros().max(1))
                    .clamp(20_000, 800_000);
                if self.rng.chance(u64::try_from(per_million).unwrap_or(0)) {
                    self.rent(p, at);
                }
            }
        }
        if step % STEPS_PER_DAY == 0 && step > 0 {
            // Some providers move their price by up to 10%.
            for p in 0..self.providers.len() {
                if self.rng.chance(150_000) {
                    let cents = self.providers[p].price.micros() / 10_000;
                    let moved = (cents * (90 + self.rng.below(21) as i64) / 100).clamp(1, 10_000);
                    let price = Usdc::from_micros(moved * 10_000);
                    self.set_price(p, at, price);
                    self.report.price_changes += 1;
                }
            }
        }
        Ok(())
    }
}

fn condition(provider: &SimProvider, gpu: &str, active: bool, at: Timestamp) -> DomainEvent {
    DomainEvent::Fleet(FleetEvent::GpuConditionChanged(GpuConditionChanged {
        machine_id: provider.machine_id,
        provider_id: provider.provider_id,
        gpu_uuid: gpu.to_owned(),
        condition: GpuCondition::Lost,
        active,
        observed_at: at,
        evidence: None,
    }))
}

/// Runs the simulation into `store`; `progress` sees each finished day.
pub async fn simulate(
    store: &Store,
    config: &SimConfig,
    progress: &(dyn Fn(u32) + Sync),
) -> anyhow::Result<SimReport> {
    anyhow::ensure!(
        (1..=10_000).contains(&config.providers),
        "--providers must be 1 to 10,000"
    );
    anyhow::ensure!((1..=64).contains(&config.gpus), "--gpus must be 1 to 64");
    anyhow::ensure!((1..=366).contains(&config.days), "--days must be 1 to 366");
    anyhow::ensure!(
        (1..=100_000).contains(&config.renters),
        "--renters must be 1 to 100,000"
    );
    let started = std::time::Instant::now();
    let t0 = Timestamp::from_unix_micros(
        config
            .start
            .and_hms_opt(0, 0, 0)
            .map_or(0, |d| d.and_utc().timestamp_micros()),
    );
    let mut sim = Simulation {
        store,
        config,
        rng: Rng(config.seed),
        versions: HashMap::new(),
        pending: Vec::new(),
        pending_index: HashMap::new(),
        providers: Vec::new(),
        renters: Vec::new(),
        rentals: BTreeMap::new(),
        reconciler: Reconciler::default(),
        digest: Sha256::new(),
        sequence: 0,
        report: SimReport {
            seed: config.seed,
            start: config.start.to_string(),
            days: config.days,
            providers: config.providers,
            gpus: config.providers * config.gpus,
            ..SimReport::default()
        },
    };
    for _ in 0..config.renters {
        let renter = sim.rng.uuid(t0);
        sim.renters.push(renter);
    }
    for index in 0..config.providers {
        sim.onboard(index, t0)?;
    }
    sim.flush().await?;
    let steps = i64::from(config.days) * STEPS_PER_DAY;
    for step in 1..=steps {
        let at = Timestamp::from_unix_micros(t0.unix_micros() + seconds(step * STEP_SECONDS));
        sim.step(step, at).await?;
        if step % STEPS_PER_HOUR == 0 {
            sim.flush().await?;
            let report = sim.reconciler.check(at, None);
            if !report.is_clean() {
                anyhow::bail!(
                    "money invariant broken at {}: {:?}",
                    at.unix_micros(),
                    report.mismatches
                );
            }
            sim.report.invariant_checks += 1;
        }
        if step % STEPS_PER_DAY == 0 {
            progress(u32::try_from(step / STEPS_PER_DAY).unwrap_or(u32::MAX));
        }
    }
    sim.flush().await?;
    let end = Timestamp::from_unix_micros(t0.unix_micros() + steps * seconds(STEP_SECONDS));
    // The simulated agents' last heartbeats: a server started on this database judges presence
    // (and ends the rentals of machines now silent) from them.
    for provider in sim.providers.iter().filter(|p| p.online) {
        store
            .record_heartbeat(
                provider.machine_id,
                provider.provider_id,
                end.unix_micros(),
                &[],
            )
            .await?;
    }
    let report = sim.reconciler.check(end, None);
    anyhow::ensure!(
        report.is_clean(),
        "money invariant broken at the end: {:?}",
        report.mismatches
    );
    anyhow::ensure!(
        report.totals.renter_charges_micro_usdc == sim.report.renter_charges_micro_usdc,
        "the reconciler and the simulation disagree on the charges"
    );
    sim.report.content_digest = hex::encode(sim.digest.finalize());
    sim.report.seconds = started.elapsed().as_secs_f64();
    Ok(sim.report)
}
