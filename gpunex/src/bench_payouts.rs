//! `gpunex bench payouts`: one weekly payout batch for many providers on an empty database, as
//! the server and `gpunex payouts run` make it: the plan (a dry run), the batch written as
//! events beside a bare append of as many events in the same chunks (measured in the same run),
//! a rerun, the SEPA files of the bank payouts, and the replay `audit reconcile` makes beside a
//! bare ordered read of the same log.

use std::time::{Duration, Instant};

use chrono::NaiveDate;
use gpunex_domain::DomainEvent;
use gpunex_domain::fleet::{FleetEvent, MachineOnline};
use gpunex_domain::metering::{FeeSchedule, Meter};
use gpunex_domain::money::Usdc;
use gpunex_domain::onboarding::Tier;
use gpunex_domain::payouts::{
    BankAddress, BankDetails, PayoutEvent, PayoutMethod, PayoutPolicy, PayoutSettingsChanged,
    Schedule,
};
use gpunex_domain::rental::{RentalEvent, RentalStarted, UsageInput, meter_usage};
use gpunex_domain::time::Timestamp;
use gpunex_store::{ExpectedVersion, Metadata, NewEvent, StreamAppend};
use serde::Serialize;
use uuid::Uuid;

use crate::bench_earnings::{bare_read, rate, ratio};

#[derive(Debug, clap::Args)]
pub struct PayoutBenchArgs {
    /// Providers paid weekly, half to a Solana wallet, half by bank transfer; every fifth earns
    /// too little and rolls forward.
    #[arg(long, default_value_t = 10_000)]
    pub providers: u32,
    /// Usage lines each provider earned before the cutoff (six GPU-hours each, 12 USDC net).
    #[arg(long, default_value_t = 10)]
    pub lines: u32,
    /// Print figures as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct PayoutReport {
    pub providers: u32,
    pub lines_per_provider: u32,
    pub seeded_events: u64,
    pub seed_ms: u64,
    /// Every projection folded from the log (what `gpunex payouts run` does first).
    pub load_ms: u64,
    /// The dry run: every provider's payable amount planned from the projection.
    pub plan_ms: u64,
    pub plan_providers_per_second: u64,
    /// The batch: `payout.scheduled` per provider and `payout.batch_created`, in appends of 64.
    pub batch_ms: u64,
    pub batch_events: u64,
    pub batch_events_per_second: u64,
    /// The reference: as many single-event streams appended in the same chunks.
    pub reference_append_events_per_second: u64,
    pub rerun_ms: u64,
    /// The batch's pain.001.001.09 files (500 transfers each), rendered and written as events.
    pub bank_files: u64,
    pub bank_transfers: u64,
    pub bank_files_ms: u64,
    /// `audit reconcile`'s replay and checks over the whole log, and a bare ordered read.
    pub log_events: u64,
    pub reconcile_events_per_second: u64,
    pub bare_read_events_per_second: u64,
}

fn ms(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// The ed25519 base point, a valid wallet address.
const WALLET: &str = "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH";
/// Providers written per append (three streams each, under the 64-stream limit).
const PROVIDERS_PER_APPEND: usize = 21;

/// The platform's own account, the debtor of every file.
fn debtor() -> BankDetails {
    BankDetails {
        iban: "DE89370400440532013000".to_owned(),
        bic: "COBADEFFXXX".to_owned(),
        account_holder: "GPUnex Treasury".to_owned(),
        address: BankAddress {
            street: "Friedrichstrasse".to_owned(),
            building_number: Some("68".to_owned()),
            post_code: "10117".to_owned(),
            town: "Berlin".to_owned(),
            country: "DE".to_owned(),
        },
    }
}

/// Whether the `n`-th provider earns too little to be paid (12 USDC, under the 20 minimum).
fn rolls_forward(n: u32) -> bool {
    n % 5 == 4
}

fn payout_date() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 11, 2).unwrap_or(NaiveDate::MIN)
}

fn at(date: NaiveDate, hour: u32) -> Timestamp {
    let time = date
        .and_hms_opt(hour, 0, 0)
        .unwrap_or_default()
        .and_utc()
        .timestamp_micros();
    Timestamp::from_unix_micros(time)
}

fn method(n: u32) -> PayoutMethod {
    if n.is_multiple_of(2) {
        return PayoutMethod::Solana {
            wallet: WALLET.to_owned(),
        };
    }
    PayoutMethod::Bank(BankDetails {
        iban: "NL91ABNA0417164300".to_owned(),
        bic: "ABNANL2A".to_owned(),
        account_holder: format!("Provider {n}"),
        address: BankAddress {
            street: "Damrak".to_owned(),
            building_number: Some("1".to_owned()),
            post_code: "1012 LG".to_owned(),
            town: "Amsterdam".to_owned(),
            country: "NL".to_owned(),
        },
    })
}

fn new_event(event: &DomainEvent) -> NewEvent {
    NewEvent::from_domain(Uuid::now_v7(), event, Metadata::actor("system:bench"))
}

fn stream(text: String) -> anyhow::Result<gpunex_domain::StreamId> {
    gpunex_domain::StreamId::parse(text).map_err(|e| anyhow::anyhow!("{e}"))
}

fn settings(provider_id: Uuid, n: u32) -> anyhow::Result<StreamAppend> {
    let changed = PayoutSettingsChanged {
        provider_id,
        schedule: Schedule::Weekly,
        method: method(n),
        changed_at: at(payout_date() - chrono::Days::new(30), 0),
        changed_by: "system:bench".to_owned(),
    };
    Ok(StreamAppend {
        stream_id: stream(format!("payout_settings-{provider_id}"))?,
        expected: ExpectedVersion::Any,
        events: vec![new_event(&DomainEvent::Payout(
            PayoutEvent::SettingsChanged(changed),
        ))],
    })
}

/// One provider: its settings, its machine online, a rental and `lines` usage lines of six
/// hours each, ending an hour before the payout date's cutoff.
fn provider_streams(provider_id: Uuid, n: u32, lines: u32) -> anyhow::Result<Vec<StreamAppend>> {
    const LINE_MICROS: i64 = 6 * 3_600_000_000;
    let cutoff = PayoutPolicy::default().cutoff(payout_date()).unix_micros();
    let start =
        Timestamp::from_unix_micros(cutoff - 3_600_000_000 - i64::from(lines) * LINE_MICROS);
    let machine_id = Uuid::now_v7();
    let online = DomainEvent::Fleet(FleetEvent::MachineOnline(MachineOnline {
        machine_id,
        provider_id,
        at: start,
    }));
    let rental = RentalStarted {
        rental_id: Uuid::now_v7(),
        renter_id: Uuid::from_u128(1),
        provider_id,
        machine_id,
        gpu_uuids: vec![format!("GPU-{machine_id}")],
        model_id: "h100-80gb".to_owned(),
        price_per_gpu_hour: Usdc::from_micros(2_500_000),
        started_at: start,
        workload: None,
    };
    let mut events = vec![new_event(&DomainEvent::Rental(RentalEvent::Started(
        rental.clone(),
    )))];
    let mut meter = Meter::default();
    for line in 1..=lines {
        let seconds = u64::from(line) * 6 * 3_600;
        let metered = meter_usage(&UsageInput {
            rental: &rental,
            meter,
            tier: Tier::Community,
            fees: FeeSchedule::default(),
            reported_gpu_seconds: seconds,
            online_gpu_seconds: seconds,
            report_id: Uuid::now_v7(),
            at: Timestamp::from_unix_micros(start.unix_micros() + i64::from(line) * LINE_MICROS),
        })?
        .ok_or_else(|| anyhow::anyhow!("nothing metered"))?;
        meter = Meter {
            gpu_seconds: metered.to_gpu_seconds,
            charged: meter.charged.checked_add(metered.gross)?,
        };
        events.push(new_event(&DomainEvent::Rental(RentalEvent::UsageMetered(
            metered,
        ))));
    }
    Ok(vec![
        settings(provider_id, n)?,
        StreamAppend {
            stream_id: stream(format!("machine-{machine_id}"))?,
            expected: ExpectedVersion::Any,
            events: vec![new_event(&online)],
        },
        StreamAppend {
            stream_id: stream(format!("rental-{}", rental.rental_id))?,
            expected: ExpectedVersion::NoStream,
            events,
        },
    ])
}

pub async fn run(database_url: &str, args: PayoutBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.providers > 0, "--providers must be at least 1");
    anyhow::ensure!(
        (1..=1_000).contains(&args.lines),
        "--lines must be 1 to 1,000"
    );
    let store = crate::database::open_store(database_url).await?;
    anyhow::ensure!(
        store.head_position().await? == 0,
        "bench payouts writes a payout batch: give it an empty database (DATABASE_URL)"
    );
    eprintln!(
        "seeding {} providers x {} usage lines ...",
        args.providers, args.lines
    );
    let providers: Vec<Uuid> = (0..args.providers).map(|_| Uuid::now_v7()).collect();
    let started = Instant::now();
    for (chunk_index, chunk) in providers.chunks(PROVIDERS_PER_APPEND).enumerate() {
        let mut streams = Vec::with_capacity(chunk.len() * 3);
        for (i, provider_id) in chunk.iter().enumerate() {
            let n = u32::try_from(chunk_index * PROVIDERS_PER_APPEND + i).unwrap_or(u32::MAX);
            // Every fifth provider earned one line only: below the minimum, it rolls forward.
            let lines = if rolls_forward(n) { 1 } else { args.lines };
            streams.extend(provider_streams(*provider_id, n, lines)?);
        }
        store.append_streams(streams).await?;
    }
    let seed = started.elapsed();
    let seeded_events = store.head_position().await?;

    let started = Instant::now();
    let state = gpunex_api::AppState::load(store.clone())
        .await?
        .with_payout_config(gpunex_api::payout_run::PayoutConfig {
            policy: PayoutPolicy::default(),
            debtor: Some(debtor()),
        });
    let credentials = state.credentials.clone();
    let load = started.elapsed();
    let policy = PayoutPolicy::default();
    let date = payout_date();
    let run = |dry_run: bool| {
        gpunex_api::payout_run::run_batch(
            &store,
            &credentials,
            &policy,
            date,
            dry_run,
            "system:bench",
        )
    };

    let providers_count = providers.len() as u64;
    let started = Instant::now();
    let planned = run(true).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let plan = started.elapsed();
    let paid = (0..args.providers).filter(|n| !rolls_forward(*n)).count();
    let bank = (0..args.providers)
        .filter(|n| !rolls_forward(*n) && !n.is_multiple_of(2))
        .count() as u64;
    anyhow::ensure!(
        planned.payouts.len() == paid && planned.rolled_forward.len() == providers.len() - paid,
        "planned {} payouts and {} rolled forward for {} providers",
        planned.payouts.len(),
        planned.rolled_forward.len(),
        providers.len()
    );

    // The reference: the same number of single-event streams, in appends of 64.
    let started = Instant::now();
    let reference_events = providers.len() + 1;
    let mut written = 0;
    for (chunk_index, chunk) in providers.chunks(64).enumerate() {
        let streams = chunk
            .iter()
            .enumerate()
            .map(|(i, p)| settings(*p, u32::try_from(chunk_index * 64 + i).unwrap_or(0)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        written += streams.len();
        store.append_streams(streams).await?;
    }
    if written < reference_events {
        store
            .append_streams(vec![settings(providers[0], 0)?])
            .await?;
    }
    let reference = started.elapsed();

    let head = store.head_position().await?;
    let started = Instant::now();
    let batch = run(false).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let batch_time = started.elapsed();
    let batch_events = store.head_position().await? - head;
    anyhow::ensure!(
        batch.created
            && batch.payouts.len() == paid
            && batch.rolled_forward.len() == providers.len() - paid,
        "the batch differs from its plan"
    );

    let started = Instant::now();
    let again = run(false).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let rerun = started.elapsed();
    anyhow::ensure!(!again.created, "a rerun created a batch");

    // The bank files of the batch (500 transfers each), at 0.92 euros per USDC, written as events.
    let started = Instant::now();
    let files = gpunex_api::payouts::make_bank_files(
        &state,
        date,
        rust_decimal::Decimal::new(92, 2),
        gpunex_app::payout_run::today_utc(state.clock.now()),
        "system:bench",
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let sepa = started.elapsed();
    let bank_transfers: u64 = files.iter().map(|f| f.transfers).sum();
    anyhow::ensure!(
        bank_transfers == bank,
        "{bank_transfers} bank transfers filed for {bank} bank payouts"
    );

    let head = store.head_position().await?;
    let (log_events, bare) = bare_read(&store, head).await?;
    let started = Instant::now();
    let reconciler = gpunex_api::reconcile::replay(&store, head, &|_| {}).await?;
    let report = reconciler.check(state.clock.now(), None);
    let reconcile = started.elapsed();
    anyhow::ensure!(
        report.is_clean(),
        "reconcile found mismatches: {:?}",
        report.mismatches.first()
    );

    let report = PayoutReport {
        providers: args.providers,
        lines_per_provider: args.lines,
        seeded_events,
        seed_ms: ms(seed),
        load_ms: ms(load),
        plan_ms: ms(plan),
        plan_providers_per_second: rate(providers_count, plan),
        batch_ms: ms(batch_time),
        batch_events,
        batch_events_per_second: rate(batch_events, batch_time),
        reference_append_events_per_second: rate(reference_events as u64, reference),
        rerun_ms: ms(rerun),
        bank_files: files.len() as u64,
        bank_transfers,
        bank_files_ms: ms(sepa),
        log_events,
        reconcile_events_per_second: rate(log_events, reconcile),
        bare_read_events_per_second: rate(log_events, bare),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print(&report);
    Ok(())
}

fn print(r: &PayoutReport) {
    println!(
        "{} providers x {} lines: {} events seeded in {} ms; projections loaded in {} ms",
        r.providers, r.lines_per_provider, r.seeded_events, r.seed_ms, r.load_ms
    );
    println!(
        "plan (dry run)     {:>7} ms  {:>9} providers/s",
        r.plan_ms, r.plan_providers_per_second
    );
    println!(
        "batch written      {:>7} ms  {:>9} events/s   reference append {:>9} events/s   ratio {}",
        r.batch_ms,
        r.batch_events_per_second,
        r.reference_append_events_per_second,
        ratio(
            r.batch_events_per_second,
            r.reference_append_events_per_second
        )
    );
    println!("rerun (no change)  {:>7} ms", r.rerun_ms);
    println!(
        "SEPA files         {:>7} ms  {} files, {} transfers",
        r.bank_files_ms, r.bank_files, r.bank_transfers
    );
    println!(
        "reconcile replay   {:>9} events/s   bare ordered read {:>9} events/s   ratio {}",
        r.reconcile_events_per_second,
        r.bare_read_events_per_second,
        ratio(r.reconcile_events_per_second, r.bare_read_events_per_second)
    );
}
