//! `gpunex bench store`: event store throughput beside the database's own ceiling, measured in
//! the same run, so each figure also reads as a ratio that means something on a noisy machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpunex_domain::events::AdjustmentPosted;
use gpunex_domain::{Account, DomainEvent, JournalEntry, Posting, StreamId, Usdc};
use gpunex_store::bench::{Ceiling, PgScratch, SampleRow};
use gpunex_store::envelope::canonical_json;
use gpunex_store::{ExpectedVersion, Metadata, NewEvent, Store, StoreOptions};
use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, clap::Args)]
pub struct StoreBenchArgs {
    /// Print figures as JSON.
    #[arg(long)]
    pub json: bool,
    /// PostgreSQL server to benchmark: a fresh database is created there and dropped after.
    #[arg(
        long,
        env = "GPUNEX_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub postgres_url: String,
    /// Only benchmark SQLite.
    #[arg(long)]
    pub skip_postgres: bool,
    /// Events appended in batches of 1,000 (half as many in batches of 100).
    #[arg(long, default_value_t = 100_000)]
    pub batched_events: usize,
    /// Seconds each concurrency level of single appends runs.
    #[arg(long, default_value_t = 3)]
    pub seconds: u64,
}

/// Concurrent single-event writers measured.
const WRITER_COUNTS: [usize; 3] = [1, 16, 64];

#[derive(Debug, Serialize)]
pub struct Figure {
    pub name: String,
    /// Events (or rows) per second.
    pub per_second: u64,
    pub ceiling_name: String,
    pub ceiling_per_second: u64,
    /// `per_second / ceiling_per_second`, in thousandths (1000 = at the ceiling).
    pub ratio_permille: u64,
}

#[derive(Debug, Serialize)]
pub struct BackendFigures {
    pub backend: String,
    pub events_in_log: u64,
    pub figures: Vec<Figure>,
}

fn rate(count: u64, elapsed: Duration) -> u64 {
    let micros = elapsed.as_micros().max(1);
    u64::try_from(u128::from(count) * 1_000_000 / micros).unwrap_or(u64::MAX)
}

fn figure(name: &str, per_second: u64, ceiling_name: &str, ceiling_per_second: u64) -> Figure {
    Figure {
        name: name.to_owned(),
        per_second,
        ceiling_name: ceiling_name.to_owned(),
        ceiling_per_second,
        ratio_permille: per_second.saturating_mul(1_000) / ceiling_per_second.max(1),
    }
}

fn sample_event(provider: Uuid, amount: i64) -> DomainEvent {
    let amount = Usdc::from_micros(amount);
    DomainEvent::AdjustmentPosted(AdjustmentPosted {
        entry_id: Uuid::now_v7(),
        reason: "benchmark credit".to_owned(),
        postings: JournalEntry::new(vec![
            Posting::debit(Account::PlatformAdjustments, amount),
            Posting::credit(Account::ProviderPayable(provider), amount),
        ])
        .unwrap_or_else(|_| unreachable!("a two-line entry of one positive amount is balanced")),
    })
}

pub(crate) fn new_events(count: usize, seed: usize) -> Vec<NewEvent> {
    let metadata = Metadata::system("bench");
    (0..count)
        .map(|i| {
            let provider = Uuid::from_u128(((seed + i) % 97) as u128 + 1);
            NewEvent::from_domain(
                Uuid::now_v7(),
                &sample_event(provider, 1_000 + i as i64),
                metadata.clone(),
            )
        })
        .collect()
}

fn sample_row() -> SampleRow {
    let event = &new_events(1, 0)[0];
    SampleRow {
        event_type: event.event_type.clone(),
        payload: canonical_json(&event.payload),
        metadata: canonical_json(&serde_json::to_value(&event.metadata).unwrap_or_default()),
    }
}

pub(crate) fn stream(prefix: &str) -> StreamId {
    StreamId::parse(format!("bench-{prefix}-{}", Uuid::now_v7().simple()))
        .unwrap_or_else(|_| unreachable!("letters, digits and dashes are a valid stream id"))
}

async fn batched(store: &Store, events: usize, batch: usize) -> anyhow::Result<u64> {
    // Build every batch first: the figure is the store's, not the generator's.
    let batches: Vec<Vec<NewEvent>> = (0..events.div_ceil(batch))
        .map(|b| new_events(batch, b))
        .collect();
    let started = Instant::now();
    for events in batches {
        store
            .append(stream("batch"), ExpectedVersion::NoStream, events)
            .await?;
    }
    Ok(rate(events as u64, started.elapsed()))
}

async fn single_appends(store: &Store, writers: usize, seconds: u64) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(writers);
    for w in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let stream = stream("single");
            let mut version = 0;
            while Instant::now() < deadline {
                let events = new_events(1, w);
                let expected = if version == 0 {
                    ExpectedVersion::NoStream
                } else {
                    ExpectedVersion::Exact(version)
                };
                store.append(stream.clone(), expected, events).await?;
                version += 1;
            }
            Ok::<u64, anyhow::Error>(version)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(rate(total, started.elapsed()))
}

/// Runs every measurement against one fresh database.
async fn bench_backend(
    name: &str,
    url: &str,
    args: &StoreBenchArgs,
) -> anyhow::Result<BackendFigures> {
    let store = Store::open(
        url,
        &StoreOptions {
            postgres_connections_max: 8,
            ..StoreOptions::default()
        },
    )
    .await?;
    let mut figures = Vec::new();
    let ceiling = Arc::new(Ceiling::connect(url, 64, sample_row()).await?);
    eprintln!("[{name}] batched appends");
    for (batch, events) in [(1_000, args.batched_events), (100, args.batched_events / 2)] {
        let bare = rate(
            events as u64,
            ceiling.multi_row_insert(events, batch).await?,
        );
        let store_rate = batched(&store, events, batch).await?;
        figures.push(figure(
            &format!("batched appends, {batch} events per append"),
            store_rate,
            &format!("bare multi-row INSERT, {batch} rows per transaction"),
            bare,
        ));
        // COPY only at 1,000 rows: at 100 rows per COPY the client's small writes meet the
        // server's delayed ACK and the figure measures TCP timers, not the database.
        if batch < 1_000 {
            continue;
        }
        if let Some(copy) = ceiling.copy(events, batch).await? {
            figures.push(figure(
                &format!("batched appends, {batch} events per append"),
                store_rate,
                &format!("bare COPY, {batch} rows per transaction"),
                rate(events as u64, copy),
            ));
        }
    }
    for writers in WRITER_COUNTS {
        eprintln!("[{name}] single appends, {writers} writers");
        let seconds = Duration::from_secs(args.seconds);
        let bare = ceiling.single_inserts(writers, seconds).await?;
        let bare = rate(bare, seconds);
        let store_rate = single_appends(&store, writers, args.seconds).await?;
        figures.push(figure(
            &format!("single-event appends, {writers} concurrent writers"),
            store_rate,
            &format!("bare single-row INSERT commits, {writers} connections"),
            bare,
        ));
    }
    let events_in_log = store.head_position().await?;
    eprintln!("[{name}] ordered read, replay and verify of {events_in_log} events");
    let (rows, read) = ceiling.ordered_read().await?;
    let read_rate = rate(rows, read);
    let started = Instant::now();
    store.rebuild_projections(&|_| {}).await?;
    let replay = rate(events_in_log, started.elapsed());
    figures.push(figure(
        "full replay through the projections (rebuild)",
        replay,
        "bare ordered read of the log",
        read_rate,
    ));
    // The write half of a replay: two journal rows per event here, ready-made.
    let lines = usize::try_from(events_in_log.saturating_mul(2)).unwrap_or(usize::MAX);
    let journal_ceiling = rate(lines as u64, ceiling.journal_insert(lines, 20_000).await?);
    figures.push(figure(
        "full replay, journal rows written per second",
        replay.saturating_mul(2),
        "bare insert of ready-made journal rows (no indexes)",
        journal_ceiling,
    ));
    let started = Instant::now();
    let report = store.audit(&|_| {}).await?;
    let verify = rate(report.events_checked, started.elapsed());
    anyhow::ensure!(
        report.is_clean(),
        "audit of the benchmark log found differences: {:?}",
        report.findings
    );
    figures.push(figure(
        "audit verify",
        verify,
        "bare ordered read of the log",
        read_rate,
    ));
    if let Some(path) = url.strip_prefix("sqlite://")
        && let Some((rows, elapsed)) = Ceiling::ordered_read_direct(path.into()).await?
    {
        // audit verify scans SQLite through rusqlite: compare it with the same driver's read.
        figures.push(figure(
            "audit verify",
            verify,
            "bare ordered read of the log (rusqlite)",
            rate(rows, elapsed),
        ));
    }
    if let Some(ceiling) = Arc::into_inner(ceiling) {
        ceiling.close().await;
    }
    Ok(BackendFigures {
        backend: name.to_owned(),
        events_in_log,
        figures,
    })
}

pub async fn run(args: StoreBenchArgs) -> anyhow::Result<()> {
    let mut results = Vec::new();
    let dir = tempfile_dir()?;
    let sqlite_url = format!("sqlite://{}", dir.join("bench.sqlite").display());
    results.push(bench_backend("sqlite", &sqlite_url, &args).await?);
    let _ = std::fs::remove_dir_all(&dir);
    if !args.skip_postgres {
        let database = PgScratch::create(&args.postgres_url).await?;
        let outcome = bench_backend("postgres", &database.url, &args).await;
        database.drop_database().await;
        results.push(outcome?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print_table(&results);
    }
    Ok(())
}

fn print_table(results: &[BackendFigures]) {
    for backend in results {
        println!(
            "\n{} ({} events in the log at the end)",
            backend.backend, backend.events_in_log
        );
        println!(
            "{:<52} {:>12}   {:<55} {:>12}  {:>6}",
            "measurement", "events/s", "ceiling (same run)", "rows/s", "ratio"
        );
        for f in &backend.figures {
            println!(
                "{:<52} {:>12}   {:<55} {:>12}  {:>3}.{:02}",
                f.name,
                f.per_second,
                f.ceiling_name,
                f.ceiling_per_second,
                f.ratio_permille / 1000,
                (f.ratio_permille % 1000) / 10
            );
        }
    }
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("gpunex-bench-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
