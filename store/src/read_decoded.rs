//! A catch-up's read of one page of the log: its rows read and decoded in one step, each
//! straight from the database's row (an [`EventRow`] borrowed from it, never copied into a
//! [`crate::RecordedEvent`]), and a long page read in two halves at once, each on its own
//! connection and thread (ADR 0015). A leaf module: the page runner (`pages.rs`) and the
//! ledger's rebuild (`rebuild.rs`) share it without importing one another.

use std::future::Future;

use crate::read_ahead::DecodedPage;
use crate::{EventRow, StoreError};

/// What a catch-up keeps of an event, decoded from its borrowed row: `None` for an event it
/// does not read.
pub(crate) type Decode<T> = fn(&EventRow<'_>) -> Option<Result<T, StoreError>>;

/// Which rows after a position a range read takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Every row up to and including this position.
    Through(u64),
    /// The next rows, at most this many.
    Next(usize),
}

impl Reach {
    /// The most rows a read after `after` takes (positions are gapless), bounded by a page:
    /// the room its decoded rows are given at once, rather than grown into.
    pub(crate) fn rows_at_most(self, after: u64) -> usize {
        let rows = match self {
            Reach::Through(through) => {
                usize::try_from(through.saturating_sub(after)).unwrap_or(usize::MAX)
            }
            Reach::Next(limit) => limit,
        };
        rows.min(crate::READ_BATCH_EVENTS_MAX)
    }
}

/// A range of the log, read and decoded.
#[derive(Debug)]
pub(crate) struct RangeRead<T> {
    /// How many rows it read.
    pub rows: u64,
    /// The position of its last row (`None`: it read none).
    pub last: Option<u64>,
    /// What the decoder kept, in log order.
    pub decoded: Vec<T>,
}

impl<T> RangeRead<T> {
    /// A read whose decoder keeps up to `rows` items without growing its vector.
    pub(crate) fn with_capacity(rows: usize) -> RangeRead<T> {
        RangeRead {
            rows: 0,
            last: None,
            decoded: Vec::with_capacity(rows),
        }
    }

    /// Adds a row read: decodes it and keeps what the decoder keeps. A row that does not decode
    /// fails the read.
    pub(crate) fn push(&mut self, row: &EventRow<'_>, decode: Decode<T>) -> Result<(), StoreError> {
        self.rows += 1;
        self.last = Some(row.position);
        if let Some(decoded) = decode(row) {
            self.decoded.push(decoded?);
        }
        Ok(())
    }
}

/// A database's ordered reads of the log for catch-ups: the rows after `after` within `reach`,
/// each decoded from its row on a blocking thread (the CPU work stays off the catch-up's task).
pub(crate) trait ReadRange: Sync {
    fn read_range<T: Send + 'static>(
        &self,
        after: u64,
        reach: Reach,
        decode: Decode<T>,
    ) -> impl Future<Output = Result<RangeRead<T>, StoreError>> + Send;
}

/// Pages shorter than this (a live catch-up's few new events) are read in one piece: two
/// reads would cost more than they save.
const HALVES_FROM_EVENTS: usize = 512;

/// The page of at most `limit` events after `after`, read and decoded (`None`: the log has no
/// event after `after`).
///
/// A page of `limit` from [`HALVES_FROM_EVENTS`] up is read as the positions
/// `(after, after + limit / 2]` and `(after + limit / 2, after + limit]` at once. Positions are
/// gapless and commit in order (`docs/ARCHITECTURE.md`, invariants), so a first half that ends
/// at its last position was read whole, and the second half continues it. The two reads see
/// the log at different moments: a first half that ends short of its last position was read
/// when the head was inside it, and the second half, maybe read after more commits, is
/// dropped rather than joined to it across the positions the first did not see. A first half
/// with no row at all is the end of the log or (in a log `audit verify` reports as unsound) a
/// gap; the next `limit` rows are read instead, which crosses it.
pub(crate) async fn read_decoded<R: ReadRange, T: Send + 'static>(
    reader: &R,
    after: u64,
    limit: usize,
    decode: Decode<T>,
) -> Result<Option<DecodedPage<Vec<T>>>, StoreError> {
    let limit = limit.max(1);
    let page = if limit < HALVES_FROM_EVENTS {
        reader.read_range(after, Reach::Next(limit), decode).await?
    } else {
        let middle = after.saturating_add(limit as u64 / 2);
        let end = after.saturating_add(limit as u64);
        let (first, second) = tokio::join!(
            reader.read_range(after, Reach::Through(middle), decode),
            reader.read_range(middle, Reach::Through(end), decode)
        );
        let mut first = first?;
        match first.last {
            Some(last) if last == middle => {
                let second = second?;
                first.rows += second.rows;
                first.last = second.last.or(first.last);
                first.decoded.extend(second.decoded);
                first
            }
            Some(_) => first,
            None => reader.read_range(after, Reach::Next(limit), decode).await?,
        }
    };
    Ok(page.last.map(|last| DecodedPage {
        events: page.rows,
        last,
        decoded: page.decoded,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use uuid::Uuid;

    use super::*;

    /// A log in memory whose head moves between two reads, as another writer's commits move it.
    struct Log {
        positions: Vec<u64>,
        /// The head each read sees, in the order the reads run (the last repeats).
        heads: Mutex<Vec<u64>>,
    }

    impl Log {
        fn gapless(head: u64) -> Log {
            Log {
                positions: (1..=head).collect(),
                heads: Mutex::new(vec![head]),
            }
        }
    }

    impl ReadRange for Log {
        async fn read_range<T: Send + 'static>(
            &self,
            after: u64,
            reach: Reach,
            decode: Decode<T>,
        ) -> Result<RangeRead<T>, StoreError> {
            let head = {
                let mut heads = self.heads.lock().expect("heads");
                if heads.len() > 1 {
                    heads.remove(0)
                } else {
                    heads[0]
                }
            };
            let mut read = RangeRead::with_capacity(reach.rows_at_most(after));
            let visible = self
                .positions
                .iter()
                .copied()
                .filter(|&p| p > after && p <= head);
            let taken: Vec<u64> = match reach {
                Reach::Through(through) => visible.filter(|&p| p <= through).collect(),
                Reach::Next(n) => visible.take(n).collect(),
            };
            for position in taken {
                let row = EventRow {
                    position,
                    event_id: Uuid::nil(),
                    stream_id: "s",
                    stream_version: position,
                    event_type: if position % 2 == 0 { "even" } else { "odd" },
                    schema_version: 1,
                    recorded_at_us: 0,
                    payload: "{}",
                };
                read.push(&row, decode)?;
            }
            Ok(read)
        }
    }

    fn evens(row: &EventRow<'_>) -> Option<Result<u64, StoreError>> {
        (row.event_type == "even").then_some(Ok(row.position))
    }

    fn refuses_seven(row: &EventRow<'_>) -> Option<Result<u64, StoreError>> {
        Some(if row.position == 7 {
            Err(StoreError::CorruptRow {
                position: 7,
                reason: "bad".to_owned(),
            })
        } else {
            Ok(row.position)
        })
    }

    async fn pages(log: &Log, limit: usize) -> Vec<(u64, u64, Vec<u64>)> {
        let (mut after, mut pages) = (0, Vec::new());
        while let Some(page) = read_decoded(log, after, limit, evens).await.expect("read") {
            pages.push((page.events, page.last, page.decoded));
            after = page.last;
        }
        pages
    }

    #[tokio::test]
    async fn a_long_page_is_read_in_two_halves_that_join_without_a_gap() {
        let log = Log::gapless(2_500);
        let pages = pages(&log, 1_000).await;
        let counted: Vec<(u64, u64)> = pages.iter().map(|p| (p.0, p.1)).collect();
        assert_eq!(counted, vec![(1_000, 1_000), (1_000, 2_000), (500, 2_500)]);
        let kept: Vec<u64> = pages.into_iter().flat_map(|p| p.2).collect();
        assert_eq!(kept, (1..=1_250).map(|n| n * 2).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_short_page_is_read_in_one_piece() {
        let log = Log::gapless(10);
        let pages = pages(&log, 3).await;
        let lasts: Vec<u64> = pages.iter().map(|p| p.1).collect();
        assert_eq!(lasts, vec![3, 6, 9, 10]);
    }

    #[tokio::test]
    async fn a_second_half_read_after_more_commits_is_not_joined_to_a_short_first() {
        // The first half sees the head at 300; by the second half's read it is at 2,000.
        let log = Log {
            positions: (1..=2_000).collect(),
            heads: Mutex::new(vec![300, 2_000]),
        };
        let page = read_decoded(&log, 0, 1_000, evens)
            .await
            .expect("read")
            .expect("a page");
        assert_eq!((page.events, page.last), (300, 300));
        assert_eq!(page.decoded.len(), 150);
    }

    #[tokio::test]
    async fn a_gap_wider_than_half_a_page_is_crossed() {
        let mut positions: Vec<u64> = (1..=100).collect();
        positions.extend(2_000..=2_100);
        let log = Log {
            positions,
            heads: Mutex::new(vec![2_100]),
        };
        let lasts: Vec<u64> = pages(&log, 1_000).await.iter().map(|p| p.1).collect();
        assert_eq!(lasts.first(), Some(&100));
        assert_eq!(lasts.last(), Some(&2_100));
    }

    #[tokio::test]
    async fn the_end_of_the_log_is_no_page_and_a_row_that_does_not_decode_fails_it() {
        let log = Log::gapless(10);
        assert!(
            read_decoded(&log, 10, 1_000, evens)
                .await
                .expect("read")
                .is_none()
        );
        let failed = read_decoded(&log, 0, 1_000, refuses_seven).await;
        assert!(matches!(
            failed,
            Err(StoreError::CorruptRow { position: 7, .. })
        ));
    }
}
