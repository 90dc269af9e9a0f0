//! The stored price history (`price_history`): its runner, its rebuild, its reads and its part
//! of `audit verify`. The fold is `gpunex_projections::price_history`; this module moves its rows.
//!
//! Memory keeps the prices that can still be in force and those set in the last day
//! (`gpunex_projections::market::KeptPrice`); a provider's whole history is read here. A read
//! first makes sure the projection has folded the log up to the position the caller's in-memory
//! models are at ([`Store::prices_reached`]).

use gpunex_domain::market::PriceSet;
use gpunex_domain::money::Usdc;
use gpunex_domain::time::Timestamp;
use gpunex_projections::RunReport;
use gpunex_projections::price_history::{EVENT_TYPES, PRICES, StoredPrice, fold_batch};
use uuid::Uuid;

use crate::audit::{AuditFinding, AuditReport};
use crate::pages::{PageFold, fold_pages};
use crate::row_audit::verify_rows;
use crate::sql::{MOVE_CHECKPOINT, values};
use crate::{RecordedEvent, Store, StoreError, to_i64, to_u64};

/// Rows per multi-row insert (7 parameters a row).
const ROWS_PER_STATEMENT: usize = 200;

/// The columns of a stored price, in the order [`Row`] holds them.
const COLUMNS: &str =
    "position, provider_id, model_id, price_micro_usdc, effective_at_us, set_at_us, set_by";

/// A stored row: position, provider, model, price, effective, set, set by.
type Row = (i64, String, String, i64, i64, i64, String);

/// Whether a recorded event is one the fold reads (the others are not decoded).
fn is_price(event: &RecordedEvent) -> bool {
    EVENT_TYPES.contains(&event.event_type.as_str())
}

/// The prices a page of the log sets, in log order.
fn prices_of(events: &[RecordedEvent]) -> Result<Vec<StoredPrice>, StoreError> {
    let projected = events
        .iter()
        .filter(|e| is_price(e))
        .map(RecordedEvent::to_projected)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(fold_batch(&projected))
}

/// A price as `audit verify` compares and shows it.
fn describe(set: &PriceSet) -> String {
    format!(
        "provider {} model {} price {} micro-USDC effective at {} us, set at {} us by {}",
        set.provider_id,
        set.model_id,
        set.price_micro_usdc.micros(),
        set.effective_at.unix_micros(),
        set.set_at.unix_micros(),
        set.set_by
    )
}

/// A stored row as a price set; `None` when a column does not hold a valid value.
fn price_set(row: &Row) -> Option<(u64, PriceSet)> {
    let (position, provider, model, price, effective, set_at, by) = row;
    Some((
        to_u64(*position, 0, "position").ok()?,
        PriceSet {
            provider_id: Uuid::parse_str(provider).ok()?,
            model_id: model.clone(),
            price_micro_usdc: Usdc::from_micros(*price),
            effective_at: Timestamp::from_unix_micros(*effective),
            set_at: Timestamp::from_unix_micros(*set_at),
            set_by: by.clone(),
        },
    ))
}

/// The price history's page steps ([`crate::pages`]): a price set is one event, so a page's
/// fold needs nothing from the page before it.
struct PricePages<'a>(&'a Store);

impl PageFold for PricePages<'_> {
    type Batch = Vec<StoredPrice>;
    type Carried = ();

    async fn read(&self, after: u64) -> Result<Vec<RecordedEvent>, StoreError> {
        self.0.read_all(after, self.0.inner.fold_page_events).await
    }

    async fn fold(&self, events: &[RecordedEvent], (): &()) -> Result<Self::Batch, StoreError> {
        prices_of(events)
    }

    fn carry(_: &Self::Batch) {}

    async fn commit(&self, batch: Self::Batch, from: u64, to: u64) -> Result<(), StoreError> {
        self.0.commit_prices(&batch, from, to).await
    }
}

impl Store {
    /// How far the price history has folded the log.
    pub async fn prices_checkpoint(&self) -> Result<u64, StoreError> {
        self.consumer_checkpoint(PRICES).await
    }

    /// Folds every event after the price history's checkpoint, one transaction per page, and
    /// returns when there is nothing left. Another process doing the same is harmless: a page
    /// moves the checkpoint only from where it started (`CheckpointMoved` for the loser).
    pub async fn catch_up_prices(&self) -> Result<RunReport, StoreError> {
        fold_pages(self.prices_checkpoint().await?, &PricePages(self)).await
    }

    /// Whether the price history has folded the log up to `position`; if not, folds what is
    /// missing here and now (a read never waits for a background runner that may not be
    /// there). Fails with `CheckpointMoved` only if another process keeps moving it.
    pub async fn prices_reached(&self, position: u64) -> Result<(), StoreError> {
        crate::pages::reach(self, PRICES, &self.inner.prices_fold, position, || {
            self.catch_up_prices()
        })
        .await
    }

    /// Folds with the runner's lock held (the projection runner's entry point).
    pub(crate) async fn run_prices(&self) -> Result<RunReport, StoreError> {
        let _folding = self.inner.prices_fold.lock().await;
        self.catch_up_prices().await
    }

    async fn commit_prices(
        &self,
        prices: &[StoredPrice],
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        let now = self.now_us();
        in_transaction!(self, |tx| {
            let moved = sqlx::query(MOVE_CHECKPOINT)
                .bind(to_i64(to))
                .bind(now)
                .bind(PRICES)
                .bind(to_i64(from))
                .execute(&mut *tx)
                .await?;
            if moved.rows_affected() != 1 {
                return Err(StoreError::CheckpointMoved {
                    projection: PRICES.to_owned(),
                    expected: from,
                });
            }
            for chunk in prices.chunks(ROWS_PER_STATEMENT) {
                let sql = format!(
                    "INSERT INTO price_history ({COLUMNS}) VALUES {}",
                    values(self.backend(), chunk.len(), 7)
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for price in chunk {
                    let set = &price.set;
                    query = query
                        .bind(to_i64(price.position))
                        .bind(set.provider_id.to_string())
                        .bind(set.model_id.clone())
                        .bind(set.price_micro_usdc.micros())
                        .bind(set.effective_at.unix_micros())
                        .bind(set.set_at.unix_micros())
                        .bind(set.set_by.clone());
                }
                query.execute(&mut *tx).await?;
            }
        });
        Ok(())
    }

    /// Empties the price history and sets its checkpoint to 0 in one transaction, then folds
    /// the log again. Returns the checkpoint reached.
    pub async fn rebuild_prices(&self) -> Result<u64, StoreError> {
        let now = self.now_us();
        let _folding = self.inner.prices_fold.lock().await;
        in_transaction!(self, |tx| {
            sqlx::query("DELETE FROM price_history")
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE projection_checkpoints SET position = 0, updated_at_us = $1 \
                 WHERE projection = $2",
            )
            .bind(now)
            .bind(PRICES)
            .execute(&mut *tx)
            .await?;
        });
        let checkpoint = self.catch_up_prices().await?.checkpoint;
        drop(_folding);
        self.settle_tables(&["price_history"]).await?;
        Ok(checkpoint)
    }

    /// Every price the provider set, with its position, in log order, as folded by `as_of` at
    /// least (one index range). A provider's history grows only with its own price changes.
    pub async fn provider_prices(
        &self,
        provider_id: Uuid,
        as_of: u64,
    ) -> Result<Vec<(u64, PriceSet)>, StoreError> {
        self.prices_reached(as_of).await?;
        let rows: Vec<Row> = on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM price_history WHERE provider_id = $1 ORDER BY position"
            )))
            .bind(provider_id.to_string())
            .fetch_all(conn)
            .await?
        });
        rows.iter()
            .map(|row| {
                price_set(row).ok_or_else(|| StoreError::CorruptRow {
                    position: u64::try_from(row.0).unwrap_or(0),
                    reason: "price_history row".to_owned(),
                })
            })
            .collect()
    }

    /// The stored rows with positions in `(after, through]`, in position order.
    async fn price_rows(&self, after: u64, through: u64) -> Result<Vec<Row>, StoreError> {
        Ok(on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM price_history \
                 WHERE position > $1 AND position <= $2 ORDER BY position"
            )))
            .bind(to_i64(after))
            .bind(to_i64(through))
            .fetch_all(conn)
            .await?
        }))
    }

    /// The price history's part of `audit verify` ([`crate::row_audit`]): each page's prices
    /// compared with the rows stored for the same positions.
    pub(crate) async fn verify_prices(&self, report: &mut AuditReport) -> Result<(), StoreError> {
        let checked = verify_rows(
            self,
            PRICES,
            |event| {
                if !is_price(event) {
                    return None;
                }
                let projected = event.to_projected().ok()?;
                let price =
                    gpunex_projections::price_history::price(projected.position, &projected.event)?;
                Some((price.position, describe(&price.set)))
            },
            |after, through| async move {
                Ok(self
                    .price_rows(after, through)
                    .await?
                    .iter()
                    .map(|row| match price_set(row) {
                        Some((position, set)) => (position, describe(&set)),
                        None => (
                            u64::try_from(row.0).unwrap_or(0),
                            format!("an unreadable row ({row:?})"),
                        ),
                    })
                    .collect())
            },
            |position, stored, replayed| AuditFinding::PriceMismatch {
                position,
                stored,
                replayed,
            },
            report,
        )
        .await?;
        report.prices_checkpoint = checked.checkpoint;
        report.prices_checked = checked.checked;
        Ok(())
    }
}
