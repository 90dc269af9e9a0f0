//! `gpunex events copy`: moves a platform's log to another database (the embedded SQLite file to
//! PostgreSQL as a marketplace grows, or a copy for investigation), byte for byte.

use std::time::Instant;

use anyhow::{Context, bail};
use gpunex_store::copy::TelemetryTable;
use gpunex_store::{Store, StoreError};

use crate::database::redact;

/// Events per imported transaction.
const PAGE_EVENTS: usize = 5_000;
/// Rows per page of the side tables.
const PAGE_ROWS: usize = 1_000;

/// What a copy did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CopyReport {
    /// The target's head position before the copy (0: it was empty).
    pub resumed_from: u64,
    pub events_copied: u64,
    pub head_position: u64,
    pub head_hash: String,
    pub idempotency_records_copied: u64,
    pub deliveries_copied: u64,
    /// Machines' last heartbeats written.
    pub presence_rows_copied: u64,
    /// GPU telemetry rows written (series and latest samples).
    pub telemetry_rows_copied: u64,
    pub seconds: f64,
}

/// Copies `source`'s events after the target's head through `through` (default: the source's
/// head when the copy starts), then, for a whole copy, the tables outside the log that decide
/// what the platform does next (see `gpunex_store::copy`). With `--through` they are not
/// copied: they describe the source's present, not the prefix's. The target must be empty or hold a prefix of the source's log (a copy that
/// stopped resumes); anything else is refused before a row is written.
pub async fn events_copy(
    source: &Store,
    target: &Store,
    target_url: &str,
    through: Option<u64>,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> anyhow::Result<CopyReport> {
    let started = Instant::now();
    let (source_head, _) = source.head().await?;
    if source_head == 0 {
        bail!("the source database holds no events: nothing to copy (is --database-url right?)");
    }
    let end = match through {
        Some(through) if through > source_head => {
            bail!("--through {through} is past the source's head at position {source_head}")
        }
        Some(through) => through,
        None => source_head,
    };
    let (resumed_from, target_hash) = target.head().await?;
    if resumed_from > 0 {
        let at = source.event_at(resumed_from).await?;
        match at {
            Some(event) if hex::encode(event.hash) == target_hash => {}
            _ => bail!(
                "the target {} holds a different log: its head (position {resumed_from}, hash \
                 {target_hash}) is not an event of the source",
                redact(target_url)
            ),
        }
    }
    if resumed_from > end {
        bail!(
            "the target {} is already at position {resumed_from}, past {end}",
            redact(target_url)
        );
    }
    let mut position = resumed_from;
    while position < end {
        let limit = PAGE_EVENTS.min(usize::try_from(end - position).unwrap_or(PAGE_EVENTS));
        let page = source.read_all(position, limit).await?;
        let Some(last) = page.last().map(|event| event.position) else {
            bail!("the source's log ends at position {position}, before its head at {end}");
        };
        position = target
            .import_events(&page)
            .await
            .with_context(|| format!("copying events {}..={last}", position + 1))?;
        progress(position, end);
    }
    let (head_position, head_hash) = target.head().await?;
    target.settle_tables(&["events"]).await?;
    let whole = end == source_head;
    let mut side = (0, 0, 0, 0);
    if whole {
        side.0 = copy_idempotency_records(source, target).await?;
        side.1 = copy_deliveries(source, target).await?;
        side.2 = copy_presence(source, target).await?;
        side.3 = copy_telemetry(source, target, TelemetryTable::Latest).await?
            + copy_telemetry(source, target, TelemetryTable::Series).await?;
        if let Some(tick) = source.liveness_tick().await? {
            target.import_liveness_tick(tick).await?;
        }
    }
    let (
        idempotency_records_copied,
        deliveries_copied,
        presence_rows_copied,
        telemetry_rows_copied,
    ) = side;
    Ok(CopyReport {
        resumed_from,
        events_copied: head_position - resumed_from,
        head_position,
        head_hash,
        idempotency_records_copied,
        deliveries_copied,
        presence_rows_copied,
        telemetry_rows_copied,
        seconds: started.elapsed().as_secs_f64(),
    })
}

async fn copy_idempotency_records(source: &Store, target: &Store) -> Result<u64, StoreError> {
    let mut copied = 0;
    let mut after: Option<(String, String)> = None;
    loop {
        let page = source
            .idempotency_records(
                after.as_ref().map(|(c, k)| (c.as_str(), k.as_str())),
                PAGE_ROWS,
            )
            .await?;
        let Some(last) = page.last() else {
            return Ok(copied);
        };
        after = Some((last.caller.clone(), last.key.clone()));
        copied += target.import_idempotency_records(&page).await?;
    }
}

async fn copy_deliveries(source: &Store, target: &Store) -> Result<u64, StoreError> {
    let mut copied = 0;
    let mut after: Option<String> = None;
    loop {
        let page = source.deliveries(after.as_deref(), PAGE_ROWS).await?;
        let Some(last) = page.last() else {
            return Ok(copied);
        };
        after = Some(last.message_id.clone());
        copied += target.import_deliveries(&page).await?;
    }
}

async fn copy_presence(source: &Store, target: &Store) -> Result<u64, StoreError> {
    let mut copied = 0;
    let mut after: Option<String> = None;
    loop {
        let page = source.presence_rows(after.as_deref(), PAGE_ROWS).await?;
        let Some(last) = page.last() else {
            return Ok(copied);
        };
        after = Some(last.machine_id.clone());
        copied += target.import_presence(&page).await?;
    }
}

async fn copy_telemetry(
    source: &Store,
    target: &Store,
    table: TelemetryTable,
) -> Result<u64, StoreError> {
    let mut copied = 0;
    let mut after: Option<(String, i64)> = None;
    loop {
        let page = source
            .telemetry_rows(
                table,
                after.as_ref().map(|(gpu, at)| (gpu.as_str(), *at)),
                PAGE_ROWS,
            )
            .await?;
        let Some(last) = page.last() else {
            return Ok(copied);
        };
        after = Some((last.gpu_uuid.clone(), last.at_us));
        copied += target.import_telemetry(table, &page).await?;
    }
}
