//! Stored projections of at most one row per event, keyed by the event's log position: the
//! presence history (`presence_history.rs`) and the price history (`price_history.rs`). A row
//! needs nothing from before its page, so each is its table, its checkpoint, the event types it
//! decodes and the row one event makes; catch-up (through [`crate::pages`]), read-your-position,
//! rebuild and the runner's entry point are written once, here.

use std::marker::PhantomData;

use gpunex_projections::{ProjectedEvent, RunReport};

use crate::pages::{Folded, PageFold, fold_pages};
use crate::sql::{Bound, MOVE_CHECKPOINT, values};
use crate::{EventRow, Rebuilt, RecordedEvent, Store, StoreError, to_i64};

/// Most parameters in one multi-row insert (SQLite's default limit is 32,766).
const PARAMETERS_PER_STATEMENT: usize = 2_000;

/// One projection of at most one row per event.
pub(crate) trait EventRows: Sync {
    /// The projection's name, and its checkpoint's.
    const NAME: &'static str;
    /// Its table, with `position` as its key.
    const TABLE: &'static str;
    /// The table's columns, `position` first, in the order [`EventRows::values`] gives them.
    const COLUMNS: &'static [&'static str];
    /// The event types the fold reads (a page's other events are not decoded).
    const EVENT_TYPES: &'static [&'static str];
    type Row: Send + Sync + 'static;

    /// The row an event makes, if any.
    fn row(event: &ProjectedEvent) -> Option<Self::Row>;
    /// A row's values, `position` first.
    fn values(row: &Self::Row) -> Vec<Bound>;
    /// The lock held while the projection folds in this process.
    fn lock(store: &Store) -> &tokio::sync::Mutex<()>;

    /// Whether a stored event is one the fold reads.
    fn reads(event_type: &str) -> bool {
        Self::EVENT_TYPES.contains(&event_type)
    }
}

/// The row an event makes, if any; an event of a type the fold reads that does not decode is
/// an error.
fn row_of<P: EventRows>(event: &EventRow<'_>) -> Option<Result<P::Row, StoreError>> {
    if !P::reads(event.event_type) {
        return None;
    }
    match event.to_projected() {
        Ok(projected) => P::row(&projected).map(Ok),
        Err(error) => Some(Err(error)),
    }
}

/// The row an event makes, for `audit verify`: `None` for an event the fold does not read or
/// that does not decode (the log's part of the audit reports that).
pub(crate) fn expected_row<P: EventRows>(event: &RecordedEvent) -> Option<P::Row> {
    if !P::reads(&event.event_type) {
        return None;
    }
    P::row(&event.to_projected().ok()?)
}

/// The page steps of a projection of one row per event: no page needs anything from the page
/// before it.
struct RowPages<'a, P>(&'a Store, PhantomData<P>);

impl<P: EventRows> PageFold for RowPages<'_, P> {
    type Item = P::Row;
    type Batch = Vec<P::Row>;
    type Carried = ();

    fn store(&self) -> &Store {
        self.0
    }

    /// The rows need nothing from before their page: they are made here, ahead.
    fn decode(event: &EventRow<'_>) -> Option<Result<P::Row, StoreError>> {
        row_of::<P>(event)
    }

    async fn fold(&self, rows: Vec<P::Row>, (): &()) -> Result<Self::Batch, StoreError> {
        Ok(rows)
    }

    fn carry((): &mut (), _: &Self::Batch, _: usize) {}

    async fn commit(&self, batch: Self::Batch, from: u64, to: u64) -> Result<(), StoreError> {
        commit::<P>(self.0, &batch, from, to).await
    }
}

/// Writes `rows` and moves the checkpoint from `from` to `to`, in one transaction.
async fn commit<P: EventRows>(
    store: &Store,
    rows: &[P::Row],
    from: u64,
    to: u64,
) -> Result<(), StoreError> {
    let now = store.now_us();
    let columns = P::COLUMNS.len();
    let per_statement = (PARAMETERS_PER_STATEMENT / columns).max(1);
    in_transaction!(store, |tx| {
        let moved = sqlx::query(MOVE_CHECKPOINT)
            .bind(to_i64(to))
            .bind(now)
            .bind(P::NAME)
            .bind(to_i64(from))
            .execute(&mut *tx)
            .await?;
        if moved.rows_affected() != 1 {
            return Err(StoreError::CheckpointMoved {
                projection: P::NAME.to_owned(),
                expected: from,
            });
        }
        for chunk in rows.chunks(per_statement) {
            let sql = format!(
                "INSERT INTO {} ({}) VALUES {}",
                P::TABLE,
                P::COLUMNS.join(", "),
                values(store.backend(), chunk.len(), columns)
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for value in chunk.iter().flat_map(P::values) {
                query = match value {
                    Bound::Int(v) => query.bind(v),
                    Bound::Text(v) => query.bind(v),
                    Bound::Bool(v) => query.bind(v),
                };
            }
            query.execute(&mut *tx).await?;
        }
    });
    Ok(())
}

impl Store {
    /// Folds every event after projection `P`'s checkpoint, one transaction per page, and
    /// returns when there is nothing left. Another process doing the same is harmless: a page
    /// moves the checkpoint only from where it started (`CheckpointMoved` for the loser).
    pub(crate) async fn catch_up_rows<P: EventRows>(&self) -> Result<RunReport, StoreError> {
        Ok(self.fold_rows::<P>().await?.report)
    }

    async fn fold_rows<P: EventRows>(&self) -> Result<Folded, StoreError> {
        let checkpoint = self.consumer_checkpoint(P::NAME).await?;
        fold_pages(checkpoint, &RowPages::<P>(self, PhantomData)).await
    }

    /// Whether projection `P` has folded the log up to `position`; if not, folds what is
    /// missing here and now (a read never waits for a background runner that may not be
    /// there). Fails with `CheckpointMoved` only if another process keeps moving it.
    pub(crate) async fn rows_reached<P: EventRows>(&self, position: u64) -> Result<(), StoreError> {
        crate::pages::reach(self, P::NAME, P::lock(self), position, || {
            self.catch_up_rows::<P>()
        })
        .await
    }

    /// Folds with the projection's lock held (the projection runner's entry point).
    pub(crate) async fn run_rows<P: EventRows>(&self) -> Result<RunReport, StoreError> {
        let _folding = P::lock(self).lock().await;
        self.catch_up_rows::<P>().await
    }

    /// Empties projection `P` and sets its checkpoint to 0 in one transaction, then folds the
    /// log again.
    pub(crate) async fn rebuild_rows<P: EventRows>(&self) -> Result<Rebuilt, StoreError> {
        Rebuilt::timed(async {
            let folding = P::lock(self).lock().await;
            self.empty_projection(P::NAME, &[P::TABLE]).await?;
            let folded = self.fold_rows::<P>().await?;
            drop(folding);
            self.settle_tables(&[P::TABLE]).await?;
            Ok((folded.report.checkpoint, folded.times))
        })
        .await
    }
}
