//! `gpunex simulate`: a marketplace driven deterministically from a seed, written into a real
//! database by the platform's own application commands. It is the demo a newcomer runs and the
//! load the benchmarks use.
//!
//! There is one command layer: every write is a `gpunex_app` command on the command executor,
//! the ones the HTTP handlers call: applications submitted and approved
//! (`applications::execute`), machines registered and GPU conditions reported
//! (`fleet::register`, `fleet::condition`), heartbeats stored and a machine back online
//! (`fleet::heartbeat_online`), machines declared offline and abandoned rentals ended by the
//! presence watchdog's own pass (`presence::presence_pass`), prices set (`market::execute`),
//! GPUs rented from the listing snapshot (`rentals::start`), usage metered
//! (`rentals::meter`), rentals cancelled by renters (`rentals::end`) and jobs ended by agents
//! (`rentals::job_ended`). The agents and renters are simulated (machines are registered
//! `simulated: true`, listed only by a `--dev-mode` server); what they do is drawn from the seed.
//! After every simulated hour the money invariants are checked over what was stored, with the
//! same `Reconciler` as `gpunex audit reconcile`; a mismatch stops the run.
//!
//! Time is simulated: the commands decide at a manual clock moved in 5-minute steps from the
//! start date's midnight (UTC); the log's own `recorded_at` is the real clock. Within a step the
//! commands of different rentals (and of different providers' rentals starting) run
//! concurrently, so the log interleaves streams differently from run to run, but every stream's
//! events are the same: the same seed, sizes and start date give the same content digest (each
//! stream's event types and payloads, streams in name order). Event ids are fresh.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::NaiveDate;
use gpunex_app::command::{Executor, Rejection};
use gpunex_app::listings::ListingIndex;
use gpunex_app::presence::FleetConfig;
use gpunex_app::{AppError, ReadModels};
use gpunex_domain::DomainEvent;
use gpunex_domain::benchmark::simulated::{self, Profile};
use gpunex_domain::benchmark_log::{Environment, Submitted};
use gpunex_domain::clock::{ManualClock, SharedClock};
use gpunex_domain::fleet::{
    DetectedGpu, FleetEvent, GpuCondition, GpuConditionChanged, HostInfo, PcieLink, Registration,
};
use gpunex_domain::gpu::GPU_CATALOG;
use gpunex_domain::market::{MarketCommand, MarketEvent};
use gpunex_domain::metering::FeeSchedule;
use gpunex_domain::money::Usdc;
use gpunex_domain::onboarding::{
    ApplicationCommand, ApplicationForm, Availability, GpuEntry, GpuModelChoice, Location, Tier,
};
use gpunex_domain::rental::{EndCause, JobEnded, JobEvidence, RentalEvent, Workload};
use gpunex_domain::time::{MICROS_PER_SECOND, Timestamp};
use gpunex_projections::reconcile::Reconciler;
use gpunex_store::fleet::Heartbeat;
use gpunex_store::{Metadata, READ_BATCH_EVENTS_MAX, Store, StoreError};
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

const STEP_SECONDS: i64 = 300;
const STEPS_PER_HOUR: i64 = 3_600 / STEP_SECONDS;
const STEPS_PER_DAY: i64 = 24 * STEPS_PER_HOUR;
/// A machine silent longer than this is offline: a little over one step, so one missed
/// heartbeat is an outage.
const OFFLINE_GRACE_SECONDS: u64 = 360;
/// A rental whose machine is silent longer than this ends `network_loss` (the server default).
const RENTAL_GRACE_SECONDS: u64 = 600;
/// The reviewer who approves the simulated applications.
const REVIEWER: Uuid = Uuid::from_u128(1);

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
    /// Commands the platform refused (a renter's GPU taken meanwhile, say); 0 in a run whose
    /// drivers only ask for what the platform offers.
    pub refused: u64,
    pub renter_charges_micro_usdc: i64,
    pub provider_earnings_micro_usdc: i64,
    pub platform_fees_micro_usdc: i64,
    /// Hourly reconciliations run, all clean.
    pub invariant_checks: u64,
    /// Benchmark suites run on simulated GPUs (the first after registration, weekly re-tests of
    /// idle GPUs, re-tests after a repair).
    pub benchmark_runs: u64,
    /// GPUs given a degraded benchmark profile at registration (repaired 1 to 3 days later).
    pub degraded_gpus: u64,
    /// Automatic delistings and relistings on the verdicts.
    pub benchmark_delistings: u64,
    pub benchmark_relistings: u64,
    /// SHA-256 over every stream (in name order) of its name and the SHA-256 of its events'
    /// types and payloads in stream order: equal for equal inputs.
    pub content_digest: String,
    pub seconds: f64,
}

/// The simulation's randomness: SplitMix64, the same everywhere.
struct Rng(gpunex_domain::splitmix::SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
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
    model_id: &'static str,
    base_price: i64,
    price: Usdc,
    machine_id: Uuid,
    /// Whether its agent is heartbeating.
    online: bool,
    back_at: Option<Timestamp>,
    /// A GPU with an active fault, and when it clears.
    fault: Option<(String, Timestamp)>,
    /// Each GPU's benchmark state.
    bench: Vec<SimBench>,
}

/// A simulated GPU's benchmark profile and schedule.
struct SimBench {
    gpu_uuid: String,
    profile: Profile,
    /// When the provider repairs a degraded GPU (and asks for a re-test).
    repair_at: Option<Timestamp>,
    /// The next periodic suite.
    next_at: Timestamp,
}

struct SimRental {
    provider: usize,
    machine_id: Uuid,
    renter_id: Uuid,
    gpus: u64,
    started_at: Timestamp,
    planned_end: Timestamp,
}

/// What a rental's simulated renter and agent do in one step, decided before any of it runs.
enum Act {
    /// The agent reports its counter.
    Meter,
    /// The job finished: the last counter, then the agent's job end.
    Complete,
    /// The renter cancels; the agent then reports the job stopped.
    Cancel,
    /// A GPU fell off the bus (its condition is reported first): the last counter, then the
    /// agent's job end.
    Fault(String),
}

/// What every command runs against: the store, the read models and listing snapshot this
/// process hosts, and the simulated clock the commands decide at.
struct Platform<'a> {
    store: &'a Store,
    models: ReadModels,
    listings: ListingIndex,
    manual: Arc<ManualClock>,
    clock: SharedClock,
    presence: FleetConfig,
    fees: FeeSchedule,
}

impl Platform<'_> {
    fn exec(&self) -> Executor<'_> {
        Executor::new(self.store, &self.models).with_clock(&self.clock)
    }
}

/// What reading the log back found: the money check, the digest and the counts.
#[derive(Default)]
struct ReadBack {
    after: u64,
    reconciler: Reconciler,
    streams: BTreeMap<String, Sha256>,
    prices: u64,
}

struct Simulation<'a> {
    platform: &'a Platform<'a>,
    config: &'a SimConfig,
    rng: Rng,
    /// The benchmarks' own randomness, so the rest of a run draws what it drew before them.
    bench_rng: Rng,
    providers: Vec<SimProvider>,
    renters: Vec<Uuid>,
    rentals: BTreeMap<Uuid, SimRental>,
    read: ReadBack,
    t0: Timestamp,
    report: SimReport,
}

fn seconds(s: i64) -> i64 {
    s * MICROS_PER_SECOND
}

fn at_plus(at: Timestamp, secs: i64) -> Timestamp {
    Timestamp::from_unix_micros(at.unix_micros() + seconds(secs))
}

fn agent(machine_id: Uuid) -> Metadata {
    Metadata::actor(format!("agent:{machine_id}"))
}

/// A command the platform refused: counted, and the run goes on (the simulated party gives up,
/// as a person would).
fn refused<R: std::fmt::Debug>(report: &mut SimReport, what: &str, rejection: &Rejection<R>) {
    tracing::warn!(?rejection, "simulation: {what} refused");
    report.refused += 1;
}

impl Simulation<'_> {
    /// A provider applies, is approved, its agent registers the machine and heartbeats, and it
    /// sets a price.
    async fn onboard(&mut self, index: u32) -> anyhow::Result<()> {
        let platform = self.platform;
        let exec = platform.exec();
        let t0 = self.t0;
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
        platform.manual.set(submitted_at);
        let submit = ApplicationCommand::Submit {
            application_id,
            applicant_user_id: applicant,
            form,
            at: submitted_at,
        };
        let actor = format!("user:{applicant}");
        if let Err(rejection) =
            gpunex_app::applications::execute(&exec, &actor, application_id, &submit).await?
        {
            anyhow::bail!("simulated application {index} refused: {rejection:?}");
        }
        let approved_at = at_plus(t0, -86_400);
        platform.manual.set(approved_at);
        let approve = |tier| ApplicationCommand::Approve {
            reviewer_user_id: REVIEWER,
            tier,
            provider_id,
            at: approved_at,
        };
        let reviewer = format!("user:{REVIEWER}");
        // An Enterprise approval the tier rules refuse becomes Community, as a reviewer would.
        let mut approval =
            gpunex_app::applications::execute(&exec, &reviewer, application_id, &approve(tier))
                .await?;
        if approval.is_err() && tier == Tier::Enterprise {
            approval = gpunex_app::applications::execute(
                &exec,
                &reviewer,
                application_id,
                &approve(Tier::Community),
            )
            .await?;
        }
        if let Err(rejection) = approval {
            anyhow::bail!("simulated application {index} not approved: {rejection:?}");
        }

        // The machine, registered by a simulated agent, and its GPUs as NVML would show them.
        platform.manual.set(t0);
        let machine_id = self.rng.uuid(t0);
        let catalog = GPU_CATALOG
            .iter()
            .find(|m| m.id == model_id)
            .ok_or_else(|| anyhow::anyhow!("{model_id} is not in the catalog"))?;
        let variant = catalog.variants[0];
        let mut detected = Vec::new();
        for i in 0..gpus {
            let id = self.rng.uuid(t0).simple().to_string();
            detected.push(DetectedGpu {
                gpu_uuid: format!(
                    "GPU-{}-{}-{}-{}-{}",
                    &id[..8],
                    &id[8..12],
                    &id[12..16],
                    &id[16..20],
                    &id[20..]
                ),
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
            });
        }
        let host = HostInfo {
            hostname: format!("sim-{index}"),
            cpu_model: Some("Simulated EPYC".to_owned()),
            cpu_cores: Some(64),
            ram_mib: Some(u64::from(64 * gpus) * 1_024),
            disk_total_gib: Some(4_000),
            disk_free_gib: Some(3_000),
            os: Some("Ubuntu 22.04".to_owned()),
            kernel: Some("6.5.0".to_owned()),
        };
        let report_id = self.rng.uuid(t0);
        let registration = Registration {
            machine_id,
            provider_id,
            host: &host,
            agent_version: "simulation",
            simulated: true,
            gpus: &detected,
            detected_at: t0,
        };
        if let Err(rejection) =
            gpunex_app::fleet::register(&exec, report_id, &agent(machine_id), &registration).await?
        {
            anyhow::bail!("simulated registration {index} refused: {rejection:?}");
        }
        self.providers.push(SimProvider {
            provider_id,
            model_id,
            base_price,
            price: Usdc::from_micros(0),
            machine_id,
            online: true,
            back_at: None,
            fault: None,
            bench: Vec::new(),
        });
        let p = self.providers.len() - 1;
        let platform = self.platform;
        platform
            .store
            .record_heartbeat(
                machine_id,
                provider_id,
                platform.clock.now().unix_micros(),
                &[],
            )
            .await?;
        gpunex_app::fleet::heartbeat_online(&platform.exec(), machine_id).await?;
        // A price near the model's typical one, to the cent.
        let cents = base_price / 10_000 * (80 + self.rng.below(46) as i64) / 100;
        self.set_price(p, cents).await?;
        // The agent's first suite on each GPU; about one GPU in twelve is degraded, and its
        // provider repairs it one to three days later.
        for gpu in &detected {
            let degraded = self.bench_rng.chance(83_000);
            let profile = if degraded {
                Profile::ALL[1 + self.bench_rng.below(Profile::ALL.len() as u64 - 1) as usize]
            } else {
                Profile::Healthy
            };
            let repair_at =
                degraded.then(|| at_plus(t0, 86_400 * (1 + self.bench_rng.below(3) as i64)));
            let next_at = at_plus(
                t0,
                7 * 86_400 + self.bench_rng.below(7 * 86_400 / 10) as i64,
            );
            self.report.degraded_gpus += u64::from(degraded);
            self.providers[p].bench.push(SimBench {
                gpu_uuid: gpu.gpu_uuid.clone(),
                profile,
                repair_at,
                next_at,
            });
            self.benchmark(p, self.providers[p].bench.len() - 1, t0)
                .await?;
        }
        Ok(())
    }

    /// The provider's agent runs the suite on GPU `g` at `at` (a run of its profile).
    async fn benchmark(&mut self, p: usize, g: usize, at: Timestamp) -> anyhow::Result<()> {
        let platform = self.platform;
        let provider = &self.providers[p];
        let bench = &provider.bench[g];
        let Some(gpu) = gpunex_app::benchmarks::benched_gpu(
            &platform.models,
            provider.machine_id,
            &bench.gpu_uuid,
        ) else {
            anyhow::bail!("simulated GPU {} is not registered", bench.gpu_uuid);
        };
        let catalog = GPU_CATALOG
            .iter()
            .find(|m| m.id == provider.model_id)
            .ok_or_else(|| anyhow::anyhow!("{} is not in the catalog", provider.model_id))?;
        let run = simulated::run(
            catalog,
            &catalog.variants[0],
            &bench.gpu_uuid,
            bench.profile,
            self.bench_rng.next(),
        );
        let submitted = Submitted {
            run_id: self.bench_rng.uuid(at),
            simulated_profile: Some(bench.profile.name().to_owned()),
            environment: Environment::simulated("550.54.15", "12.4", false, 60),
            run,
            started_at: at_plus(at, -150),
            finished_at: at,
        };
        let machine_id = provider.machine_id;
        match gpunex_app::benchmarks::record_run(
            &platform.exec(),
            submitted.run_id,
            &agent(machine_id),
            &gpu,
            &submitted,
        )
        .await?
        {
            Ok(_) => self.report.benchmark_runs += 1,
            Err(rejection) => refused(&mut self.report, "benchmark run", &rejection),
        }
        Ok(())
    }

    /// Benchmarks at `at`: repaired GPUs' providers ask for a re-test, which runs; idle GPUs
    /// whose week is up run their periodic suite; on the hour, the automatic listing actions.
    async fn benchmarks(&mut self, at: Timestamp, on_the_hour: bool) -> anyhow::Result<()> {
        let platform = self.platform;
        for p in 0..self.providers.len() {
            if !self.providers[p].online {
                continue;
            }
            for g in 0..self.providers[p].bench.len() {
                let (gpu_uuid, repair_at, next_at) = {
                    let b = &self.providers[p].bench[g];
                    (b.gpu_uuid.clone(), b.repair_at, b.next_at)
                };
                let rented = platform
                    .models
                    .with_market(|m| m.lease_of(&gpu_uuid).is_some());
                if rented {
                    continue;
                }
                if repair_at.is_some_and(|r| r <= at) {
                    let bench = &mut self.providers[p].bench[g];
                    bench.profile = Profile::Healthy;
                    bench.repair_at = None;
                    let provider_id = self.providers[p].provider_id;
                    let meta = Metadata::actor(format!("provider:{provider_id}"));
                    if let Err(rejection) = gpunex_app::benchmarks::request_retest(
                        &platform.exec(),
                        &gpu_uuid,
                        provider_id,
                        false,
                        "repaired: replaced the part the benchmark named",
                        &meta,
                    )
                    .await?
                    {
                        refused(&mut self.report, "re-test request", &rejection);
                    }
                    self.benchmark(p, g, at).await?;
                } else if next_at <= at {
                    self.providers[p].bench[g].next_at = at_plus(at, 7 * 86_400);
                    self.benchmark(p, g, at).await?;
                }
            }
        }
        if on_the_hour {
            let done = gpunex_app::benchmarks::actions_pass(&platform.exec()).await?;
            self.report.benchmark_delistings += done.delisted as u64;
            self.report.benchmark_relistings += done.relisted as u64;
        }
        Ok(())
    }

    /// Every online provider's agent heartbeats at the clock's now, the step's heartbeats
    /// arriving together (one transaction); a machine that was offline comes back online.
    async fn heartbeats(&mut self) -> anyhow::Result<()> {
        let platform = self.platform;
        let at_us = platform.clock.now().unix_micros();
        let online: Vec<&SimProvider> = self.providers.iter().filter(|p| p.online).collect();
        let beats: Vec<Heartbeat<'_>> = online
            .iter()
            .map(|provider| Heartbeat {
                machine_id: provider.machine_id,
                provider_id: provider.provider_id,
                at_us,
                samples: &[],
            })
            .collect();
        platform.store.record_heartbeats(&beats).await?;
        for provider in online {
            gpunex_app::fleet::heartbeat_online(&platform.exec(), provider.machine_id).await?;
        }
        Ok(())
    }

    async fn set_price(&mut self, p: usize, cents: i64) -> anyhow::Result<()> {
        let platform = self.platform;
        let provider = &self.providers[p];
        let command = MarketCommand::SetPrice {
            model_id: provider.model_id.to_owned(),
            price: format!("{}.{:02}", cents / 100, cents % 100),
            effective_at: None,
            by: "system:simulation".to_owned(),
        };
        let meta = Metadata::actor(format!("provider:{}", provider.provider_id));
        let outcome = gpunex_app::market::execute(
            &platform.exec(),
            provider.provider_id,
            command,
            &meta,
            |_, _| {},
        )
        .await?;
        match outcome {
            Ok(decided) => {
                for event in decided.events {
                    if let MarketEvent::PriceSet(set) = event {
                        self.providers[p].price = set.price_micro_usdc;
                    }
                }
            }
            Err(rejection) => refused(&mut self.report, "a price", &rejection),
        }
        Ok(())
    }

    /// A GPU condition reported by the provider's agent.
    async fn condition(&mut self, p: usize, gpu: &str, active: bool) -> anyhow::Result<()> {
        let platform = self.platform;
        let now = platform.clock.now();
        let report_id = self.rng.uuid(now);
        let provider = &self.providers[p];
        let changed = GpuConditionChanged {
            machine_id: provider.machine_id,
            provider_id: provider.provider_id,
            gpu_uuid: gpu.to_owned(),
            condition: GpuCondition::Lost,
            active,
            observed_at: now,
            evidence: None,
        };
        let outcome = gpunex_app::fleet::condition(
            &platform.exec(),
            report_id,
            &agent(provider.machine_id),
            &changed,
        )
        .await?;
        if let Err(rejection) = outcome {
            refused(&mut self.report, "a GPU condition", &rejection);
        }
        Ok(())
    }

    /// One 5-minute step at `at`: agents heartbeat (or fall silent), faults clear, the watchdog
    /// judges presence, every running rental's agent and renter act, renters rent on the hour
    /// and providers move prices once a day.
    async fn step(&mut self, step: i64, at: Timestamp) -> anyhow::Result<()> {
        let platform = self.platform;
        platform.manual.set(at);
        let on_the_hour = step % STEPS_PER_HOUR == 0;
        // Presence: outages start (about one a week per machine) and end (1 to 8 hours later).
        for p in 0..self.providers.len() {
            let provider = &self.providers[p];
            if provider.online && self.rng.chance(1_000_000 / (7 * STEPS_PER_DAY as u64)) {
                let back = at_plus(at, 3_600 * (1 + self.rng.below(8) as i64));
                let provider = &mut self.providers[p];
                provider.online = false;
                provider.back_at = Some(back);
            } else if !provider.online && provider.back_at.is_some_and(|b| b <= at) {
                let provider = &mut self.providers[p];
                provider.online = true;
                provider.back_at = None;
            }
            if let Some((gpu, clears)) = self.providers[p].fault.clone()
                && clears <= at
            {
                self.providers[p].fault = None;
                self.condition(p, &gpu, false).await?;
            }
        }
        self.heartbeats().await?;
        let exec = platform.exec();
        gpunex_app::presence::presence_pass(&exec, &platform.presence, self.t0).await?;
        // Rentals the watchdog ended (their machine silent past the grace) are over.
        self.rentals.retain(|rental_id, _| {
            platform.models.with_market(|m| {
                m.open_rental(rental_id)
                    .is_some_and(|rental| rental.ended.is_none())
            })
        });

        // What each running rental's agent and renter do, drawn in rental order.
        let mut acts = Vec::new();
        let ids: Vec<Uuid> = self.rentals.keys().copied().collect();
        for rental_id in ids {
            let (p, planned_end, gpus) = {
                let r = &self.rentals[&rental_id];
                (r.provider, r.planned_end, r.gpus)
            };
            if !self.providers[p].online {
                // No heartbeat, no report: the watchdog ends it past the rental grace.
                continue;
            }
            let act = if at >= planned_end {
                Act::Complete
            } else if on_the_hour && self.rng.chance(20_000) {
                Act::Cancel
            } else if on_the_hour && self.providers[p].fault.is_none() && self.rng.chance(3_000) {
                let machine_gpus = self.rental_gpus(rental_id);
                let gpu = machine_gpus[self.rng.below(gpus) as usize].clone();
                Act::Fault(gpu)
            } else {
                Act::Meter
            };
            let reports = (self.rng.uuid(at), self.rng.uuid(at));
            acts.push((rental_id, act, reports));
        }
        // Faults are reported first, one machine stream at a time.
        for (rental_id, act, _) in &acts {
            if let Act::Fault(gpu) = act {
                let p = self.rentals[rental_id].provider;
                self.providers[p].fault = Some((gpu.clone(), at_plus(at, 2 * 3_600)));
                self.condition(p, gpu, true).await?;
            }
        }
        let runs = acts.iter().map(|(rental_id, act, reports)| {
            let rental = &self.rentals[rental_id];
            rental_act(platform, *rental_id, rental, act, *reports, at)
        });
        let results = futures_util::future::join_all(runs).await;
        for ((rental_id, act, _), result) in acts.iter().zip(results) {
            self.report.refused += result?;
            if !matches!(act, Act::Meter) {
                self.rentals.remove(rental_id);
            }
        }

        self.benchmarks(at, on_the_hour).await?;
        if on_the_hour {
            self.rent(at).await?;
        }
        if step % STEPS_PER_DAY == 0 && step > 0 {
            // Some providers move their price by up to 10%.
            for p in 0..self.providers.len() {
                if self.rng.chance(150_000) {
                    let cents = self.providers[p].price.micros() / 10_000;
                    let moved = (cents * (90 + self.rng.below(21) as i64) / 100).clamp(1, 10_000);
                    self.set_price(p, moved).await?;
                }
            }
        }
        Ok(())
    }

    /// The rental's GPUs, as the read models hold it.
    fn rental_gpus(&self, rental_id: Uuid) -> Vec<String> {
        self.platform
            .models
            .with_market(|m| {
                m.open_rental(&rental_id)
                    .map(|r| r.started.gpu_uuids.clone())
            })
            .unwrap_or_default()
    }

    /// Renters take listed GPUs: of each online provider, more readily when its price is below
    /// the model's usual. The starts of different providers' GPUs run concurrently.
    async fn rent(&mut self, at: Timestamp) -> anyhow::Result<()> {
        let platform = self.platform;
        platform.listings.rebuild(&platform.models, at);
        let snapshot = platform.listings.current();
        let mut asks = Vec::new();
        for p in 0..self.providers.len() {
            let provider = &self.providers[p];
            if !provider.online {
                continue;
            }
            let mut free: Vec<String> = snapshot
                .listings
                .iter()
                .filter(|l| l.machine_id == provider.machine_id)
                .map(|l| l.gpu_uuid.to_string())
                .collect();
            if free.is_empty() {
                continue;
            }
            free.sort();
            let per_million = (250_000 * provider.base_price / provider.price.micros().max(1))
                .clamp(20_000, 800_000);
            if !self.rng.chance(u64::try_from(per_million).unwrap_or(0)) {
                continue;
            }
            let count = 1 + self.rng.below((free.len() as u64).min(4));
            free.truncate(count as usize);
            let renter = self.renters[self.rng.below(self.renters.len() as u64) as usize];
            let hours = 1 + self.rng.below(24) as i64;
            let rental_id = self.rng.uuid(at);
            let workload = Workload {
                image: "nvcr.io/nvidia/pytorch:24.05-py3".to_owned(),
                command: vec!["python".to_owned(), "train.py".to_owned()],
                env: BTreeMap::from([("EPOCHS".to_owned(), hours.to_string())]),
            };
            asks.push((p, rental_id, renter, free, workload, hours));
        }
        let starts = asks
            .iter()
            .map(|(_, rental_id, renter, gpus, workload, _)| {
                start(platform, *rental_id, *renter, gpus, workload)
            });
        let results = futures_util::future::join_all(starts).await;
        for ((p, rental_id, renter, gpus, _, hours), result) in asks.into_iter().zip(results) {
            match result? {
                Ok(()) => {
                    self.rentals.insert(
                        rental_id,
                        SimRental {
                            provider: p,
                            machine_id: self.providers[p].machine_id,
                            renter_id: renter,
                            gpus: gpus.len() as u64,
                            started_at: at,
                            planned_end: at_plus(at, hours * 3_600),
                        },
                    );
                }
                Err(()) => self.report.refused += 1,
            }
        }
        Ok(())
    }

    /// Reads back what the commands stored since the last look: every event goes into the
    /// money check and its stream's digest.
    async fn read_back(&mut self) -> anyhow::Result<()> {
        let store = self.platform.store;
        loop {
            let page = store
                .read_all(self.read.after, READ_BATCH_EVENTS_MAX)
                .await?;
            let Some(last) = page.last().map(|e| e.position) else {
                return Ok(());
            };
            for recorded in &page {
                let event = recorded.decode().map_err(|e| StoreError::CorruptRow {
                    position: recorded.position,
                    reason: e.to_string(),
                })?;
                self.read.reconciler.apply(recorded.position, &event);
                let digest = self
                    .read
                    .streams
                    .entry(recorded.stream_id.clone())
                    .or_default();
                digest.update(recorded.event_type.as_bytes());
                digest.update(recorded.payload.as_bytes());
                let report = &mut self.report;
                report.events += 1;
                match &event {
                    DomainEvent::Rental(RentalEvent::Started(_)) => report.rentals += 1,
                    DomainEvent::Rental(RentalEvent::UsageMetered(m)) => {
                        report.usage_events += 1;
                        report.renter_charges_micro_usdc += m.gross.micros();
                        report.provider_earnings_micro_usdc += m.net.micros();
                        report.platform_fees_micro_usdc += m.fee.micros();
                    }
                    DomainEvent::Rental(RentalEvent::Ended(ended)) => match ended.cause {
                        EndCause::Completed => report.completed += 1,
                        EndCause::RenterCancelled => report.cancelled += 1,
                        EndCause::HardwareFault => report.hardware_faults += 1,
                        EndCause::NetworkLoss => report.network_losses += 1,
                        _ => {}
                    },
                    DomainEvent::Fleet(FleetEvent::MachineOffline(_)) => report.outages += 1,
                    DomainEvent::Market(MarketEvent::PriceSet(_)) => self.read.prices += 1,
                    _ => {}
                }
            }
            self.read.after = last;
        }
    }
}

/// One rental's step: the agent's counter (the rental's GPUs times the seconds since it
/// started), then what ends it. Answers how many of its commands were refused.
async fn rental_act(
    platform: &Platform<'_>,
    rental_id: Uuid,
    rental: &SimRental,
    act: &Act,
    (meter_report, end_report): (Uuid, Uuid),
    at: Timestamp,
) -> Result<u64, AppError> {
    let exec = platform.exec();
    let meta = agent(rental.machine_id);
    let secs = (at.unix_micros() - rental.started_at.unix_micros()) / MICROS_PER_SECOND;
    let counter = u64::try_from(secs).unwrap_or(0) * rental.gpus;
    let mut refusals = 0;
    let metered = gpunex_app::rentals::meter(
        &exec,
        platform.fees,
        meter_report,
        &meta,
        rental_id,
        counter,
    )
    .await?;
    if let Err(rejection) = metered {
        tracing::warn!(?rejection, "simulation: a usage report refused");
        refusals += 1;
    }
    let (cause, evidence) = match act {
        Act::Meter => return Ok(refusals),
        Act::Complete => (
            EndCause::Completed,
            JobEvidence {
                exit_code: Some(0),
                ..JobEvidence::default()
            },
        ),
        Act::Cancel => {
            let ended = gpunex_app::rentals::end(
                &exec,
                rental_id,
                EndCause::RenterCancelled,
                &format!("renter:{}", rental.renter_id),
                "the renter cancelled",
            )
            .await?;
            if let Err(rejection) = ended {
                tracing::warn!(?rejection, "simulation: a cancellation refused");
                refusals += 1;
            }
            (
                EndCause::RenterCancelled,
                JobEvidence {
                    signal: Some(15),
                    detail: "stopped: the rental ended".to_owned(),
                    ..JobEvidence::default()
                },
            )
        }
        Act::Fault(gpu) => (
            EndCause::HardwareFault,
            JobEvidence {
                signal: Some(9),
                gpu_uuid: Some(gpu.clone()),
                condition: Some(GpuCondition::Lost),
                detail: "stopped: GPU fell off the bus".to_owned(),
                ..JobEvidence::default()
            },
        ),
    };
    let job = JobEnded {
        rental_id,
        machine_id: rental.machine_id,
        cause,
        evidence,
        gpu_seconds: counter,
        ended_at: at,
    };
    let ended = gpunex_app::rentals::job_ended(&exec, end_report, &job, at, &meta).await?;
    if let Err(rejection) = ended {
        tracing::warn!(?rejection, "simulation: a job end refused");
        refusals += 1;
    }
    Ok(refusals)
}

/// A renter's start of a rental of `gpus`; `Err(())` when the platform refused it.
async fn start(
    platform: &Platform<'_>,
    rental_id: Uuid,
    renter_id: Uuid,
    gpus: &[String],
    workload: &Workload,
) -> Result<Result<(), ()>, AppError> {
    let rent = gpunex_app::rentals::Rent {
        rental_id,
        renter_id,
        gpu_uuids: gpus,
        workload,
    };
    let meta = Metadata::actor(format!("renter:{renter_id}"));
    let outcome =
        gpunex_app::rentals::start(&platform.exec(), &platform.listings, rent, &meta, |_| {})
            .await?;
    Ok(match outcome {
        Ok(_) => Ok(()),
        Err(rejection) => {
            tracing::warn!(?rejection, "simulation: a rental refused");
            Err(())
        }
    })
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
    let manual = ManualClock::starting_at(t0);
    let listings = ListingIndex::default();
    listings.set_dev_mode(true);
    let platform = Platform {
        store,
        models: ReadModels::load(store).await?,
        listings,
        clock: manual.clone(),
        manual,
        presence: FleetConfig {
            heartbeat_interval: std::time::Duration::from_secs(STEP_SECONDS as u64),
            offline_grace: std::time::Duration::from_secs(OFFLINE_GRACE_SECONDS),
            rental_grace: std::time::Duration::from_secs(RENTAL_GRACE_SECONDS),
            dev_mode: true,
            fees: config.fees,
            ..FleetConfig::default()
        },
        fees: config.fees,
    };
    let mut sim = Simulation {
        platform: &platform,
        config,
        rng: Rng(gpunex_domain::splitmix::SplitMix64(config.seed)),
        bench_rng: Rng(gpunex_domain::splitmix::SplitMix64(
            config.seed ^ 0x6265_6e63_6821_0018,
        )),
        providers: Vec::new(),
        renters: Vec::new(),
        rentals: BTreeMap::new(),
        read: ReadBack::default(),
        t0,
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
        sim.onboard(index).await?;
    }
    let steps = i64::from(config.days) * STEPS_PER_DAY;
    for step in 1..=steps {
        let at = Timestamp::from_unix_micros(t0.unix_micros() + seconds(step * STEP_SECONDS));
        sim.step(step, at).await?;
        if step % STEPS_PER_HOUR == 0 {
            sim.read_back().await?;
            let report = sim.read.reconciler.check(at, None);
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
    // The simulated agents' last heartbeats are the last step's: a server started on this
    // database judges presence (and ends the rentals of machines now silent) from them.
    sim.read_back().await?;
    let end = Timestamp::from_unix_micros(t0.unix_micros() + steps * seconds(STEP_SECONDS));
    let report = sim.read.reconciler.check(end, None);
    anyhow::ensure!(
        report.is_clean(),
        "money invariant broken at the end: {:?}",
        report.mismatches
    );
    anyhow::ensure!(
        report.totals.renter_charges_micro_usdc == sim.report.renter_charges_micro_usdc,
        "the reconciler and the simulation disagree on the charges"
    );
    sim.report.price_changes = sim.read.prices.saturating_sub(u64::from(config.providers));
    let mut digest = Sha256::new();
    for (stream, events) in std::mem::take(&mut sim.read.streams) {
        digest.update(stream.as_bytes());
        digest.update(events.finalize());
    }
    sim.report.content_digest = hex::encode(digest.finalize());
    sim.report.seconds = started.elapsed().as_secs_f64();
    Ok(sim.report)
}
