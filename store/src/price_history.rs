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
use gpunex_projections::price_history::{EVENT_TYPES, PRICES, StoredPrice, price};
use gpunex_projections::{ProjectedEvent, RunReport};
use uuid::Uuid;

use crate::audit::{AuditFinding, AuditReport};
use crate::event_rows::{EventRows, expected_row};
use crate::row_audit::verify_rows;
use crate::sql::Bound;
use crate::{Store, StoreError, to_i64, to_u64};

/// The columns of a stored price, in the order [`Row`] holds them.
const COLUMNS: [&str; 7] = [
    "position",
    "provider_id",
    "model_id",
    "price_micro_usdc",
    "effective_at_us",
    "set_at_us",
    "set_by",
];

/// A stored row: position, provider, model, price, effective, set, set by.
type Row = (i64, String, String, i64, i64, i64, String);

/// A price as `audit verify` compares and shows it: a row's columns as stored (a provider id
/// written in another form than the fold writes would no longer be found by its reads).
fn describe(row: &Row) -> String {
    let (_, provider, model, price, effective, set_at, by) = row;
    format!(
        "provider {provider} model {model} price {price} micro-USDC effective at {effective} us, \
         set at {set_at} us by {by}"
    )
}

/// The row the fold writes for a price.
fn row_of(price: &StoredPrice) -> Row {
    let set = &price.set;
    (
        to_i64(price.position),
        set.provider_id.to_string(),
        set.model_id.clone(),
        set.price_micro_usdc.micros(),
        set.effective_at.unix_micros(),
        set.set_at.unix_micros(),
        set.set_by.clone(),
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

/// The price history as a projection of one row per event ([`crate::event_rows`]).
pub(crate) struct PriceRows;

impl EventRows for PriceRows {
    const NAME: &'static str = PRICES;
    const TABLE: &'static str = "price_history";
    const COLUMNS: &'static [&'static str] = &COLUMNS;
    const EVENT_TYPES: &'static [&'static str] = &EVENT_TYPES;
    type Row = StoredPrice;

    fn row(event: &ProjectedEvent) -> Option<StoredPrice> {
        price(event.position, &event.event)
    }

    fn values(price: &StoredPrice) -> Vec<Bound> {
        let (position, provider, model, micros, effective, set_at, by) = row_of(price);
        vec![
            Bound::Int(position),
            Bound::Text(provider),
            Bound::Text(model),
            Bound::Int(micros),
            Bound::Int(effective),
            Bound::Int(set_at),
            Bound::Text(by),
        ]
    }

    fn lock(store: &Store) -> &tokio::sync::Mutex<()> {
        &store.inner.prices_fold
    }
}

impl Store {
    /// How far the price history has folded the log.
    pub async fn prices_checkpoint(&self) -> Result<u64, StoreError> {
        self.consumer_checkpoint(PRICES).await
    }

    /// Folds every event after the price history's checkpoint (see [`Store::catch_up_rows`]).
    pub async fn catch_up_prices(&self) -> Result<RunReport, StoreError> {
        self.catch_up_rows::<PriceRows>().await
    }

    /// Whether the price history has folded the log up to `position`; if not, folds what is
    /// missing here and now (see [`Store::rows_reached`]).
    pub async fn prices_reached(&self, position: u64) -> Result<(), StoreError> {
        self.rows_reached::<PriceRows>(position).await
    }

    /// Folds with the runner's lock held (the projection runner's entry point).
    pub(crate) async fn run_prices(&self) -> Result<RunReport, StoreError> {
        self.run_rows::<PriceRows>().await
    }

    /// Empties the price history and folds the log again.
    pub async fn rebuild_prices(&self) -> Result<crate::Rebuilt, StoreError> {
        self.rebuild_rows::<PriceRows>().await
    }

    /// Every price the provider set, with its position, in log order, as folded by `as_of` at
    /// least (one index range). A provider's history grows only with its own price changes. The
    /// rows are read in one snapshot with the checkpoint, so a rebuild emptying the table
    /// meanwhile (another process's `projections rebuild`) is seen and waited out, never
    /// answered as a short history.
    pub async fn provider_prices(
        &self,
        provider_id: Uuid,
        as_of: u64,
    ) -> Result<Vec<(u64, PriceSet)>, StoreError> {
        const ATTEMPTS: usize = 5;
        let sql = format!(
            "SELECT {} FROM price_history WHERE provider_id = $1 ORDER BY position",
            COLUMNS.join(", ")
        );
        for _ in 0..ATTEMPTS {
            self.prices_reached(as_of).await?;
            let (checkpoint, rows): (i64, Vec<Row>) = in_read_snapshot!(self, |tx| {
                let checkpoint: i64 = sqlx::query_scalar(
                    "SELECT position FROM projection_checkpoints WHERE projection = $1",
                )
                .bind(PRICES)
                .fetch_one(&mut *tx)
                .await?;
                let rows = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(provider_id.to_string())
                    .fetch_all(&mut *tx)
                    .await?;
                (checkpoint, rows)
            });
            if to_u64(checkpoint, 0, "checkpoint")? >= as_of {
                return rows
                    .iter()
                    .map(|row| {
                        price_set(row).ok_or_else(|| StoreError::CorruptRow {
                            position: u64::try_from(row.0).unwrap_or(0),
                            reason: "price_history row".to_owned(),
                        })
                    })
                    .collect();
            }
        }
        Err(StoreError::CheckpointMoved {
            projection: PRICES.to_owned(),
            expected: as_of,
        })
    }

    /// The stored rows with positions in `(after, through]`, in position order.
    async fn price_rows(&self, after: u64, through: u64) -> Result<Vec<Row>, StoreError> {
        Ok(on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {} FROM price_history \
                 WHERE position > $1 AND position <= $2 ORDER BY position",
                COLUMNS.join(", ")
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
                let price = expected_row::<PriceRows>(event)?;
                Some((price.position, describe(&row_of(&price))))
            },
            |after, through| async move {
                Ok(self
                    .price_rows(after, through)
                    .await?
                    .iter()
                    .map(|row| (u64::try_from(row.0).unwrap_or(0), describe(row)))
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
