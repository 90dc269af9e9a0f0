//! Catch-up subscriptions that turn live without a gap.
//!
//! A subscription is just a reader that remembers its position: it reads the next batch after
//! that position; when there is none it waits for a head notification (this process's writer,
//! or PostgreSQL `NOTIFY` from other processes) or a poll timeout with backoff, then reads again.
//! Because positions are assigned in commit order, reading `position > p` can never skip a row
//! that commits later, so catch-up and live delivery are the same loop.

use std::time::Duration;

use tokio::sync::watch;

use crate::{RecordedEvent, Store, StoreError};

/// First wait when there is nothing new; doubles up to [`POLL_INTERVAL_MAX`].
const POLL_INTERVAL_MIN: Duration = Duration::from_millis(2);
/// Longest wait between polls: bounds delivery delay when a notification is lost.
const POLL_INTERVAL_MAX: Duration = Duration::from_millis(250);

pub struct Subscription {
    store: Store,
    position: u64,
    head: watch::Receiver<u64>,
    poll_interval: Duration,
}

impl Store {
    /// A subscription that delivers every event after `after` exactly once, in order, first
    /// catching up and then waiting for new commits.
    pub async fn subscribe(&self, after: u64) -> Subscription {
        Subscription::new(self.clone(), after, self.head_watch().await)
    }
}

impl Subscription {
    fn new(store: Store, after: u64, head: watch::Receiver<u64>) -> Subscription {
        Subscription {
            store,
            position: after,
            head,
            poll_interval: POLL_INTERVAL_MIN,
        }
    }

    /// The position of the last event delivered.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The next events after the last delivered one, waiting until there is at least one.
    /// Each event is delivered exactly once, in strictly increasing, gapless position order.
    pub async fn next_batch(&mut self, limit: usize) -> Result<Vec<RecordedEvent>, StoreError> {
        loop {
            self.head.borrow_and_update();
            let events = self.store.read_all(self.position, limit).await?;
            if !events.is_empty() {
                self.check_contiguous(&events)?;
                self.poll_interval = POLL_INTERVAL_MIN;
                return Ok(events);
            }
            // Woken by a commit, or by the timeout as a fallback poll.
            let _ = tokio::time::timeout(self.poll_interval, self.head.changed()).await;
            self.poll_interval = (self.poll_interval * 2).min(POLL_INTERVAL_MAX);
        }
    }

    /// Moves the position past `events` only if they continue it without a gap; otherwise the
    /// position stays, nothing counts as delivered, and the caller gets the error every time.
    fn check_contiguous(&mut self, events: &[RecordedEvent]) -> Result<(), StoreError> {
        let mut position = self.position;
        for event in events {
            if event.position != position + 1 {
                return Err(StoreError::CorruptRow {
                    position: event.position,
                    reason: format!(
                        "expected position {} next: the log has a gap (run `gpunex audit verify`)",
                        position + 1
                    ),
                });
            }
            position = event.position;
        }
        self.position = position;
        Ok(())
    }
}
