//! The listing snapshot every search reads, and the reactor that keeps it current: rebuilt from
//! the read models whenever they apply new events, at the next instant the listings change with
//! time alone (a schedule's minute, a price taking effect, maintenance starting or ending), and
//! at least every [`LISTING_REFRESH_MAX`]. What it shows equals
//! `ListingSnapshot::build(events, now)` (visibility is a function of the events and an instant).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use gpunex_domain::clock::SharedClock;
use gpunex_domain::time::Timestamp;
use gpunex_projections::market::{BuildInputs, ListingSnapshot};

use crate::read_models::ReadModels;

/// The current listing snapshot, shared by every request.
#[derive(Clone)]
pub struct ListingIndex {
    snapshot: Arc<RwLock<Arc<ListingSnapshot>>>,
    dev_mode: Arc<AtomicBool>,
    /// Log position the snapshot was built at.
    built_at: Arc<tokio::sync::watch::Sender<u64>>,
}

/// The longest the snapshot goes unrebuilt: uptimes (and so ranks) drift with time alone.
pub const LISTING_REFRESH_MAX: Duration = Duration::from_secs(60);

impl Default for ListingIndex {
    fn default() -> Self {
        ListingIndex {
            snapshot: Arc::new(RwLock::new(Arc::new(ListingSnapshot::empty()))),
            dev_mode: Arc::default(),
            built_at: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

impl ListingIndex {
    pub fn current(&self) -> Arc<ListingSnapshot> {
        match self.snapshot.read() {
            Ok(snapshot) => Arc::clone(&snapshot),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    pub fn set_dev_mode(&self, dev_mode: bool) {
        self.dev_mode.store(dev_mode, Ordering::SeqCst);
    }

    /// Rebuilds the snapshot from the registry at `at`.
    pub fn rebuild(&self, registry: &ReadModels, at: Timestamp) {
        // The position first: everything read after it includes at least that much of the log,
        // so `wait_for(position)` never returns a snapshot that misses a write.
        let position = registry.position();
        let applications: Vec<_> = registry
            .applications()
            .into_iter()
            .map(|(_, a)| a)
            .collect();
        let added = registry.added_models();
        let snapshot = registry.with_fleet(|fleet| {
            registry.with_market(|market| {
                ListingSnapshot::build(
                    &BuildInputs {
                        fleet,
                        market,
                        applications: &applications,
                        added_models: &added,
                        dev_mode: self.dev_mode.load(Ordering::SeqCst),
                    },
                    at,
                )
            })
        });
        if let Ok(mut current) = self.snapshot.write() {
            *current = Arc::new(snapshot);
        }
        self.built_at.send_replace(position);
    }

    /// Waits until a snapshot built at or after log position `position` is in place.
    pub async fn wait_for(&self, position: u64) {
        let mut built = self.built_at.subscribe();
        let _ =
            tokio::time::timeout(Duration::from_secs(5), built.wait_for(|p| *p >= position)).await;
    }
}

/// Keeps the snapshot current: rebuilds as soon as the registry applies new events, at the next
/// instant the listings change with time alone (a schedule's minute, a price taking effect,
/// maintenance starting or ending), and at least every [`LISTING_REFRESH_MAX`].
/// The first snapshot is built by `AppState::load`; this waits for the first reason to rebuild.
pub async fn run_listing_index(registry: ReadModels, index: ListingIndex, clock: SharedClock) {
    let mut position = registry.watch_position();
    loop {
        // Events applied since the last build (including before this task started) rebuild at
        // once; otherwise wait for new events or the next boundary.
        if registry.position() > *index.built_at.borrow() {
            position.mark_unchanged();
        } else {
            let wait = index
                .current()
                .next_change
                .map(|next| {
                    Duration::from_micros(
                        u64::try_from(next.unix_micros() - clock.now().unix_micros()).unwrap_or(0),
                    )
                })
                .unwrap_or(LISTING_REFRESH_MAX)
                .clamp(Duration::from_millis(1), LISTING_REFRESH_MAX);
            let _ = tokio::time::timeout(wait, position.changed()).await;
        }
        let at = clock.now();
        // Building takes a core for a while at scale: off the async workers that serve requests.
        let (building, registry_for_build) = (index.clone(), registry.clone());
        if tokio::task::spawn_blocking(move || building.rebuild(&registry_for_build, at))
            .await
            .is_err()
        {
            tracing::error!("the listing snapshot build panicked; keeping the previous one");
        }
    }
}
