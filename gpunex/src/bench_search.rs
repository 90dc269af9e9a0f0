//! `gpunex bench search`: marketplace search latency over real HTTP with 100,000 listings, and
//! how long a price change takes to show in search.
//!
//! The listings are real events (approved applications, registered online machines, prices,
//! schedules) appended to a fresh SQLite store; the server is the real router on a loopback
//! port. Presence is frozen for the run (no watchdog), so every machine stays online.

use std::time::{Duration, Instant};

use gpunex_domain::DomainEvent;
use gpunex_domain::credentials::Role;
use gpunex_domain::fleet::{
    DetectedGpu, FleetEvent, GpuDetected, HostInfo, MachineOnline, MachineRegistered, ModelMatch,
    PcieLink,
};
use gpunex_domain::gpu::GPU_CATALOG;
use gpunex_domain::market::{AvailabilitySet, MarketEvent, PriceSet};
use gpunex_domain::money::Usdc;
use gpunex_domain::onboarding::{
    ApplicationApproved, ApplicationEvent, ApplicationForm, ApplicationSubmitted, Availability,
    GpuEntry, GpuModelChoice, Location, Tier, WeeklyWindow,
};
use gpunex_domain::time::{Timestamp, Weekday};
use gpunex_store::{ExpectedVersion, Metadata, NewEvent, Store, StoreOptions, StreamAppend};
use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, clap::Args)]
pub struct SearchBenchArgs {
    /// Listings (GPUs) to load: 8 per machine, 5 machines per provider.
    #[arg(long, default_value_t = 100_000)]
    pub listings: usize,
    /// Seconds each concurrency level runs.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Price changes timed until visible in search.
    #[arg(long, default_value_t = 20)]
    pub price_changes: usize,
    /// Print figures as JSON.
    #[arg(long)]
    pub json: bool,
}

const GPUS_PER_MACHINE: usize = 8;
const MACHINES_PER_PROVIDER: usize = 5;
/// GPUs of one provider ([`provider_events`]).
pub(crate) const GPUS_PER_PROVIDER: usize = GPUS_PER_MACHINE * MACHINES_PER_PROVIDER;
const REGIONS: [(&str, &str, &str); 12] = [
    ("Frankfurt", "DE", "Hesse"),
    ("Berlin", "DE", "Berlin"),
    ("Madrid", "ES", "Madrid"),
    ("Paris", "FR", "Ile-de-France"),
    ("Amsterdam", "NL", "North Holland"),
    ("Stockholm", "SE", "Stockholm"),
    ("Dallas", "US", "Texas"),
    ("Ashburn", "US", "Virginia"),
    ("San Jose", "US", "California"),
    ("Toronto", "CA", "Ontario"),
    ("Tokyo", "JP", "Tokyo"),
    ("Singapore", "SG", "Singapore"),
];

#[derive(Debug, Serialize)]
pub struct Latency {
    pub clients: usize,
    pub requests: u64,
    pub per_second: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

#[derive(Debug, Serialize)]
pub struct SearchReport {
    pub listings: usize,
    pub events_loaded: u64,
    pub load_seconds: u64,
    pub snapshot_build_ms_median: u64,
    /// `GET /healthz` through the same server and clients: the HTTP floor.
    pub reference_healthz: Vec<Latency>,
    pub search: Vec<Latency>,
    /// A price change through the API until a search returns it.
    pub price_change_visible_api_ms: Vec<u64>,
    /// A price change appended by another writer (as another server process would) until a
    /// search here returns it.
    pub price_change_visible_other_writer_ms: Vec<u64>,
}

fn percentile(sorted: &[u64], pct: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) * pct) / 100]
}

pub(crate) fn latency(clients: usize, mut samples: Vec<u64>, elapsed: Duration) -> Latency {
    samples.sort_unstable();
    let requests = samples.len() as u64;
    Latency {
        clients,
        requests,
        per_second: (u128::from(requests) * 1_000_000 / elapsed.as_micros().max(1)) as u64,
        p50_us: percentile(&samples, 50),
        p99_us: percentile(&samples, 99),
        max_us: samples.last().copied().unwrap_or(0),
    }
}

/// The events of one provider: an approved application for its model and region, its machines
/// registered and online, a price, and (for one provider in four) a weekday schedule.
pub(crate) fn provider_events(index: usize, at: Timestamp) -> Vec<StreamAppend> {
    let provider_id = Uuid::now_v7();
    let application_id = Uuid::now_v7();
    let model = &GPU_CATALOG[index % GPU_CATALOG.len()];
    let (city, country, region) = REGIONS[(index / GPU_CATALOG.len()) % REGIONS.len()];
    let tier = if index.is_multiple_of(5) {
        Tier::Enterprise
    } else {
        Tier::Community
    };
    let meta = Metadata::actor("bench");
    let event = |e: DomainEvent| NewEvent::from_domain(Uuid::now_v7(), &e, meta.clone());
    let stream =
        |name: String| gpunex_domain::StreamId::parse(name).unwrap_or_else(|_| unreachable!());
    let form = ApplicationForm {
        full_legal_name: format!("Provider {index}"),
        email: format!("p{index}@bench.gpunex"),
        company_name: None,
        gpus: vec![GpuEntry {
            model: GpuModelChoice::Catalog(model.id.to_owned()),
            quantity: (GPUS_PER_MACHINE * MACHINES_PER_PROVIDER) as u32,
            system_ram_gb: 1_024,
            upload_mbps: 10_000,
            download_mbps: 10_000,
            availability: Availability::AlwaysOn,
            location: Location {
                city: city.to_owned(),
                country: country.to_owned(),
                region: region.to_owned(),
            },
        }],
        ups_protected: true,
        commitment_months: [3, 6, 12, 24, 36][index % 5],
        maintenance_notes: String::new(),
    };
    let mut streams = vec![StreamAppend {
        stream_id: stream(format!("application-{application_id}")),
        expected: ExpectedVersion::NoStream,
        events: vec![
            event(DomainEvent::Application(ApplicationEvent::Submitted(
                ApplicationSubmitted {
                    application_id,
                    applicant_user_id: Uuid::now_v7(),
                    form,
                    submitted_at: at,
                },
            ))),
            event(DomainEvent::Application(ApplicationEvent::Approved(
                ApplicationApproved {
                    application_id,
                    reviewer_user_id: Uuid::now_v7(),
                    tier,
                    provider_id,
                    decided_at: at,
                    review_seconds: 0,
                },
            ))),
        ],
    }];
    // Prices spread around a model-typical level: 60% to 140% of (FP16 TFLOPS / 400) USDC.
    let base = i64::from(model.variants[0].fp16_tensor_tflops_tenths) * 250;
    let price = (base * (60 + (index as i64 * 37) % 81) / 100).clamp(10_000, 100_000_000);
    let mut market = vec![event(DomainEvent::Market(MarketEvent::PriceSet(
        PriceSet {
            provider_id,
            model_id: model.id.to_owned(),
            price_micro_usdc: Usdc::from_micros(price),
            effective_at: at,
            set_at: at,
            set_by: "bench".to_owned(),
        },
    )))];
    if index.is_multiple_of(4) {
        let windows = Weekday::ALL
            .into_iter()
            .map(|day| WeeklyWindow {
                day,
                start_minute: 0,
                end_minute: 1_440,
            })
            .collect();
        market.push(event(DomainEvent::Market(MarketEvent::AvailabilitySet(
            AvailabilitySet {
                provider_id,
                availability: Availability::Weekly {
                    time_zone: "Europe/Madrid".to_owned(),
                    windows,
                },
                set_at: at,
            },
        ))));
    }
    streams.push(StreamAppend {
        stream_id: stream(format!("provider_market-{provider_id}")),
        expected: ExpectedVersion::Any,
        events: market,
    });
    for m in 0..MACHINES_PER_PROVIDER {
        let machine_id = Uuid::now_v7();
        let mut events = vec![event(DomainEvent::Fleet(FleetEvent::MachineRegistered(
            MachineRegistered {
                machine_id,
                provider_id,
                host: HostInfo {
                    hostname: format!("p{index}-m{m}"),
                    cpu_model: None,
                    cpu_cores: Some(128),
                    ram_mib: Some(1_048_576),
                    disk_total_gib: None,
                    disk_free_gib: None,
                    os: None,
                    kernel: None,
                },
                agent_version: "bench".to_owned(),
                simulated: false,
                gpu_count: GPUS_PER_MACHINE as u32,
                detected_at: at,
            },
        )))];
        for g in 0..GPUS_PER_MACHINE {
            let hex = machine_id.simple().to_string();
            events.push(event(DomainEvent::Fleet(FleetEvent::GpuDetected(
                GpuDetected {
                    machine_id,
                    provider_id,
                    gpu: DetectedGpu {
                        gpu_uuid: format!("GPU-{hex}-{g:04x}"),
                        index: g as u32,
                        name: model.name.to_owned(),
                        pci_device_id: model.variants[0].pci_device_id,
                        pci_bus_id: None,
                        vram_mib: u64::from(model.vram_gb) * 1_000,
                        driver_version: None,
                        cuda_driver_version: None,
                        pcie_current: PcieLink::default(),
                        pcie_max: PcieLink::default(),
                        power_limit_w: None,
                        default_power_limit_w: None,
                        ecc_enabled: None,
                        mig_enabled: None,
                    },
                    model_id: Some(model.id.to_owned()),
                    model_match: ModelMatch::PciDeviceId,
                    vram_below_model: false,
                    power_limit_lowered: None,
                },
            ))));
        }
        events.push(event(DomainEvent::Fleet(FleetEvent::MachineOnline(
            MachineOnline {
                machine_id,
                provider_id,
                at,
            },
        ))));
        streams.push(StreamAppend {
            stream_id: stream(format!("machine-{machine_id}")),
            expected: ExpectedVersion::NoStream,
            events,
        });
    }
    streams
}

/// Realistic searches: by model and region, by price cap and machine size, the whole market by
/// rank, a country by value.
fn queries() -> Vec<String> {
    let mut queries = Vec::new();
    for (i, model) in GPU_CATALOG.iter().enumerate() {
        let (_, country, region) = REGIONS[i % REGIONS.len()];
        queries.push(format!(
            "/v1/listings?model={}&region={}&sort=price&limit=50",
            model.id,
            region.replace(' ', "%20")
        ));
        queries.push(format!(
            "/v1/listings?model={}&max_price_usdc=3&min_gpus=8&limit=50",
            model.id
        ));
        queries.push(format!(
            "/v1/listings?country={country}&sort=perf_per_dollar&limit=50"
        ));
    }
    queries.push("/v1/listings?sort=rank&limit=50".to_owned());
    queries.push("/v1/listings?tier=enterprise&min_vram_gb=80&limit=50".to_owned());
    queries
}

/// Sends GETs of `paths` in turn from `clients` concurrent clients for `seconds`, with an optional
/// bearer token; every answer must be a success.
pub(crate) async fn hammer(
    base: &str,
    paths: &[String],
    clients: usize,
    seconds: u64,
    token: Option<&str>,
) -> anyhow::Result<Latency> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let http = http.clone();
        let urls: Vec<String> = paths.iter().map(|p| format!("{base}{p}")).collect();
        let token = token.map(str::to_owned);
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = client;
            while Instant::now() < deadline {
                let url = &urls[i % urls.len()];
                i += 1;
                let sent = Instant::now();
                let mut request = http.get(url);
                if let Some(token) = &token {
                    request = request.bearer_auth(token);
                }
                let response = request.send().await?;
                anyhow::ensure!(
                    response.status().is_success(),
                    "{url}: {}",
                    response.status()
                );
                response.bytes().await?;
                samples.push(sent.elapsed().as_micros() as u64);
            }
            anyhow::Ok(samples)
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await??);
    }
    Ok(latency(clients, samples, started.elapsed()))
}

pub async fn run(args: SearchBenchArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("gpunex-bench-search-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir)?;
    let result = bench(&args, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(())
}

async fn bench(args: &SearchBenchArgs, dir: &std::path::Path) -> anyhow::Result<SearchReport> {
    let url = format!("sqlite://{}", dir.join("bench.sqlite").display());
    let store = Store::open(&url, &StoreOptions::default()).await?;
    let providers = args
        .listings
        .div_ceil(GPUS_PER_MACHINE * MACHINES_PER_PROVIDER);
    eprintln!(
        "loading {providers} providers, {} listings ...",
        providers * GPUS_PER_MACHINE * MACHINES_PER_PROVIDER
    );
    let loading = Instant::now();
    let at = store.clock().now();
    // Five providers (seven streams each) per append, eight appends in flight.
    let mut pending = Vec::new();
    for chunk in (0..providers).collect::<Vec<_>>().chunks(5) {
        let streams: Vec<StreamAppend> =
            chunk.iter().flat_map(|&i| provider_events(i, at)).collect();
        let store = store.clone();
        pending.push(tokio::spawn(
            async move { store.append_streams(streams).await },
        ));
        if pending.len() == 8 {
            for task in pending.drain(..) {
                task.await??;
            }
        }
    }
    for task in pending {
        task.await??;
    }
    let events_loaded = store.head_position().await?;
    let state = gpunex_api::AppState::load(store.clone()).await?;
    let load_seconds = loading.elapsed().as_secs();

    // The snapshot build itself, five times.
    let mut builds = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        state
            .listings
            .rebuild(&state.credentials, state.clock.now());
        builds.push(started.elapsed().as_millis() as u64);
    }
    builds.sort_unstable();
    let listed = state.listings.current().listings.len();
    anyhow::ensure!(
        listed >= args.listings,
        "only {listed} of {} listings are listed",
        args.listings
    );
    eprintln!(
        "{listed} listings; snapshot built in {} ms (median of 5)",
        builds[2]
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let router = gpunex_api::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });

    let searches = queries();
    let health = vec!["/healthz".to_owned()];
    let mut reference_healthz = Vec::new();
    let mut search = Vec::new();
    for clients in [1, 64] {
        eprintln!(
            "{clients} client(s): /healthz then searches, {} s each ...",
            args.seconds
        );
        reference_healthz.push(hammer(&base, &health, clients, args.seconds, None).await?);
        search.push(hammer(&base, &searches, clients, args.seconds, None).await?);
    }

    // Price changes: through the API (which answers once the snapshot has it), and appended by
    // another writer, each until a search returns the new price.
    let snapshot = state.listings.current();
    let http = reqwest::Client::new();
    let mut price_change_visible_api_ms = Vec::new();
    let mut price_change_visible_other_writer_ms = Vec::new();
    // Tokens first, so no other change is in flight when a price changes.
    let mut tokens = Vec::new();
    for round in 0..args.price_changes {
        let listing = &snapshot.listings[(round * 7_919) % snapshot.listings.len()];
        let (token, _) = gpunex_api::tokens::issue_token(
            &state.store,
            &state.credentials,
            gpunex_api::tokens::TokenRequest::new(
                Role::Provider {
                    provider_id: listing.provider_id,
                },
                "bench",
                "cli",
            ),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        tokens.push(token);
    }
    state
        .listings
        .wait_for(state.store.head_position().await?)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (round, token) in tokens.iter().enumerate() {
        let listing = &snapshot.listings[(round * 7_919) % snapshot.listings.len()];
        let new_price = Usdc::from_micros(listing.price.micros() + 1_000 + round as i64);
        let detail = format!("{base}/v1/listings/{}", listing.gpu_uuid);
        let started = Instant::now();
        let response = http
            .post(format!("{base}/v1/providers/{}/prices", listing.provider_id))
            .bearer_auth(&token.token)
            .json(&serde_json::json!({"model_id": listing.model_id, "price_usdc": new_price.to_string()}))
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "price change: {}",
            response.status()
        );
        tokio::time::timeout(
            Duration::from_secs(10),
            wait_visible(&detail, &new_price.to_string()),
        )
        .await??;
        price_change_visible_api_ms.push(started.elapsed().as_millis() as u64);

        let other = Usdc::from_micros(new_price.micros() + 1_000);
        let event = DomainEvent::Market(MarketEvent::PriceSet(PriceSet {
            provider_id: listing.provider_id,
            model_id: listing.model_id.to_string(),
            price_micro_usdc: other,
            effective_at: state.clock.now(),
            set_at: state.clock.now(),
            set_by: "bench:other-writer".to_owned(),
        }));
        let started = Instant::now();
        store
            .append(
                gpunex_domain::StreamId::parse(format!("provider_market-{}", listing.provider_id))?,
                ExpectedVersion::Any,
                vec![NewEvent::from_domain(
                    Uuid::now_v7(),
                    &event,
                    Metadata::actor("bench"),
                )],
            )
            .await?;
        tokio::time::timeout(
            Duration::from_secs(10),
            wait_visible(&detail, &other.to_string()),
        )
        .await??;
        price_change_visible_other_writer_ms.push(started.elapsed().as_millis() as u64);
    }
    Ok(SearchReport {
        listings: listed,
        events_loaded,
        load_seconds,
        snapshot_build_ms_median: builds[2],
        reference_healthz,
        search,
        price_change_visible_api_ms,
        price_change_visible_other_writer_ms,
    })
}

/// Polls one listing until it shows `price`.
async fn wait_visible(url: &str, price: &str) -> anyhow::Result<()> {
    loop {
        let body: serde_json::Value = reqwest::get(url).await?.json().await?;
        if body["listing"]["price_usdc"] == price {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn print(report: &SearchReport) {
    println!(
        "\n{} listings ({} events, loaded and folded in {} s); snapshot build {} ms (median of 5)\n",
        report.listings, report.events_loaded, report.load_seconds, report.snapshot_build_ms_median
    );
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "over real HTTP", "clients", "req/s", "p50 ms", "p99 ms", "max ms"
    );
    let ms = |us: u64| format!("{}.{:02}", us / 1_000, (us % 1_000) / 10);
    for (name, rows) in [
        ("GET /healthz (reference)", &report.reference_healthz),
        ("GET /v1/listings (search)", &report.search),
    ] {
        for row in rows {
            println!(
                "{:<28} {:>8} {:>10} {:>10} {:>10} {:>10}",
                name,
                row.clients,
                row.per_second,
                ms(row.p50_us),
                ms(row.p99_us),
                ms(row.max_us)
            );
        }
    }
    let summary = |values: &[u64]| {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        format!(
            "p50 {} ms, max {} ms over {}",
            percentile(&sorted, 50),
            sorted.last().copied().unwrap_or(0),
            sorted.len()
        )
    };
    println!(
        "\nprice change -> visible in search, through the API:     {}",
        summary(&report.price_change_visible_api_ms)
    );
    println!(
        "price change -> visible in search, from another writer: {}",
        summary(&report.price_change_visible_other_writer_ms)
    );
}
