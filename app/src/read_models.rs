//! The read models this process keeps in memory, folded from the log and kept current by a
//! subscription (ADR 0005). Authentication reads the credentials here: a token reads
//! `gpnx_<token id, 32 hex>_<secret, 64 hex>`; the presented secret is hashed with SHA-256 and
//! compared in constant time.
//!
//! Issue 15 moves what grows with history (earnings lines, payouts, rentals, presence history)
//! into stored projections; what stays here is bounded live state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use gpunex_domain::DomainEvent;
use gpunex_projections::accounts::{UserRecord, Users};
use gpunex_projections::applications::Applications;
use gpunex_projections::credentials::{CredentialRecord, Credentials};
use gpunex_projections::fleet::Fleet;
use gpunex_projections::market::Market;
use gpunex_store::{Store, StoreError};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::error::AppError;
use crate::snapshot::{
    Body, BodyRef, SNAPSHOT_EVERY_EVENTS, SNAPSHOT_FORMAT, SNAPSHOT_NAME, SnapshotCheck,
    differing_models,
};

/// What every token starts with.
pub const TOKEN_PREFIX: &str = "gpnx";
/// Compared against when a token id is unknown: no secret hashes to it in practice.
const UNKNOWN_TOKEN_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The SHA-256 of a token's secret, as the log stores it (hex).
pub fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The read models a process keeps in memory, shared by every request handler and background
/// task: credentials, users, applications, the catalog's additions, the fleet, the market,
/// earnings and payouts, and adjustments.
///
/// It fails closed: if a credential event cannot be decoded (say a newer binary wrote a schema
/// this one does not know, which could be a revocation) or the registry cannot follow the log,
/// authentication answers 503 until it can again, rather than trust a stale registry.
#[derive(Clone)]
pub struct ReadModels {
    inner: Arc<RwLock<Credentials>>,
    /// Provider applications, folded in log order (only from the subscription).
    applications: Arc<RwLock<Applications>>,
    /// The last log position the follower has applied, for read-your-writes.
    position: Arc<tokio::sync::watch::Sender<u64>>,
    /// People who can sign in, folded from `account.*` events.
    users: Arc<RwLock<Users>>,
    /// Models admins added to the catalog.
    models: Arc<RwLock<Vec<gpunex_domain::gpu::ModelAdded>>>,
    /// Machines, GPUs and presence (only from the subscription).
    fleet: Arc<RwLock<Fleet>>,
    /// Prices, schedules, maintenance, delistings (only from the subscription).
    market: Arc<RwLock<Market>>,
    /// Providers' earnings lines (only from the subscription).
    earnings: Arc<RwLock<gpunex_projections::earnings::Earnings>>,
    /// Ledger adjustment proposals and decisions (only from the subscription).
    adjustments: Arc<RwLock<gpunex_projections::adjustments::Adjustments>>,
    /// Sticky: a credential event this binary cannot read.
    undecodable: Arc<AtomicBool>,
    /// Cleared while the follower cannot read the log.
    behind: Arc<AtomicBool>,
    /// The position of the snapshot the models started from (0: they folded the whole log).
    started_from: Arc<std::sync::atomic::AtomicU64>,
}

impl Default for ReadModels {
    fn default() -> Self {
        ReadModels {
            inner: Arc::default(),
            applications: Arc::default(),
            position: Arc::new(tokio::sync::watch::channel(0).0),
            users: Arc::default(),
            models: Arc::default(),
            fleet: Arc::default(),
            market: Arc::default(),
            earnings: Arc::default(),
            adjustments: Arc::default(),
            undecodable: Arc::default(),
            behind: Arc::default(),
            started_from: Arc::default(),
        }
    }
}

/// Events folded at start after which the start writes a snapshot at once.
const SNAPSHOT_AT_START_EVENTS: u64 = 10_000;

/// A lock's contents for reading, also after a panic elsewhere poisoned it.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A lock's contents for writing, also after a panic elsewhere poisoned it.
fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long the registry's follower pauses after the log could not be read.
const FOLLOWER_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Longest a request waits for the registry to reach its own write.
const READ_YOUR_WRITES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl ReadModels {
    /// Starts from the newest snapshot this binary can read (else position 0), folds every event
    /// after it up to the current head, then follows the log in the background so what other
    /// processes write takes effect here too. The follower writes a new snapshot every
    /// [`SNAPSHOT_EVERY_EVENTS`] events, so a later start folds at most that many.
    pub async fn load(store: &Store) -> Result<ReadModels, StoreError> {
        let cache = ReadModels::default();
        let start = cache.restore_snapshot(store).await?;
        cache.started_from.store(start, Ordering::SeqCst);
        let head = store.head_position().await?;
        let mut subscription = store.subscribe(start).await;
        let mut last_hash = None;
        while subscription.position() < head {
            let events = subscription
                .next_batch(gpunex_store::READ_BATCH_EVENTS_MAX)
                .await?;
            cache.apply_recorded(&events);
            last_hash = events.last().map(|e| e.hash).or(last_hash);
        }
        let position = subscription.position();
        cache.position.send_replace(position);
        let mut snapshot_at = start;
        if let Some(hash) = last_hash
            && position - start >= SNAPSHOT_AT_START_EVENTS
            && cache.write_snapshot(store, position, &hash).await
        {
            snapshot_at = position;
        }
        tracing::info!(
            snapshot = start,
            folded = position - start,
            head = position,
            "read models loaded"
        );
        let follower = cache.clone();
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                // After a failure the registry is trusted again only once it is known to be at
                // the head: a fresh read of it, since waiting for the next batch would wait for
                // the next write.
                if follower.behind.load(Ordering::SeqCst) {
                    match store.head_position().await {
                        Ok(head) if subscription.position() >= head => {
                            follower.behind.store(false, Ordering::SeqCst);
                            tracing::info!(head, "credential registry caught up again");
                        }
                        Ok(_) => {}
                        Err(error) => {
                            tracing::warn!(%error, "credential registry cannot read the log head");
                            tokio::time::sleep(FOLLOWER_RETRY_PAUSE).await;
                            continue;
                        }
                    }
                }
                match subscription
                    .next_batch(gpunex_store::READ_BATCH_EVENTS_MAX)
                    .await
                {
                    Ok(events) => {
                        follower.apply_recorded(&events);
                        let position = subscription.position();
                        follower.position.send_replace(position);
                        follower.behind.store(false, Ordering::SeqCst);
                        if let Some(last) = events.last()
                            && position - snapshot_at >= SNAPSHOT_EVERY_EVENTS
                            && follower.write_snapshot(&store, position, &last.hash).await
                        {
                            snapshot_at = position;
                        }
                    }
                    Err(error) => {
                        follower.behind.store(true, Ordering::SeqCst);
                        tracing::warn!(%error, "credential registry cannot follow the log");
                        tokio::time::sleep(FOLLOWER_RETRY_PAUSE).await;
                    }
                }
            }
        });
        Ok(cache)
    }

    /// Installs the stored snapshot if this binary can read it and it belongs to this log;
    /// returns its position (0 when none is used). A snapshot it cannot use is logged and
    /// ignored: the models then fold from position 0.
    async fn restore_snapshot(&self, store: &Store) -> Result<u64, StoreError> {
        let Some(stored) = store.read_snapshot(SNAPSHOT_NAME).await? else {
            return Ok(0);
        };
        if stored.format != SNAPSHOT_FORMAT {
            tracing::info!(
                format = stored.format,
                expected = SNAPSHOT_FORMAT,
                "read-model snapshot of another format: folding the log from position 0"
            );
            return Ok(0);
        }
        let body: Body = match serde_json::from_str(&stored.body) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(%error, "read-model snapshot unreadable: folding the log from position 0");
                return Ok(0);
            }
        };
        if !store
            .event_hash_is(stored.position, &body.position_hash)
            .await?
        {
            tracing::warn!(
                position = stored.position,
                "read-model snapshot does not match the log at its position: folding the log from position 0"
            );
            return Ok(0);
        }
        *write(&self.inner) = body.credentials;
        *write(&self.users) = body.users;
        *write(&self.applications) = body.applications;
        *write(&self.models) = body.models;
        *write(&self.fleet) = body.fleet;
        *write(&self.market) = body.market;
        *write(&self.earnings) = body.earnings;
        *write(&self.adjustments) = body.adjustments;
        Ok(stored.position)
    }

    /// Every model as a snapshot at `position` (whose event has `hash`), serialized.
    fn snapshot_body(&self, hash: &[u8; 32]) -> Result<String, serde_json::Error> {
        let hash = hex::encode(hash);
        let (credentials, users, applications, models) = (
            read(&self.inner),
            read(&self.users),
            read(&self.applications),
            read(&self.models),
        );
        let (fleet, market, earnings, adjustments) = (
            read(&self.fleet),
            read(&self.market),
            read(&self.earnings),
            read(&self.adjustments),
        );
        serde_json::to_string(&BodyRef {
            position_hash: &hash,
            credentials: &credentials,
            users: &users,
            applications: &applications,
            models: &models,
            fleet: &fleet,
            market: &market,
            earnings: &earnings,
            adjustments: &adjustments,
        })
    }

    /// Writes a snapshot at `position` unless the models cannot be trusted; says whether one was
    /// written. Failures are logged: a snapshot only makes the next start faster.
    async fn write_snapshot(&self, store: &Store, position: u64, hash: &[u8; 32]) -> bool {
        if self.undecodable.load(Ordering::SeqCst) {
            return false;
        }
        let body = match self.snapshot_body(hash) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(%error, "cannot serialize the read models");
                return false;
            }
        };
        match store
            .write_snapshot(SNAPSHOT_NAME, position, SNAPSHOT_FORMAT, &body)
            .await
        {
            Ok(written) => {
                tracing::debug!(position, bytes = body.len(), written, "read-model snapshot");
                written
            }
            Err(error) => {
                tracing::warn!(%error, "cannot store a read-model snapshot");
                false
            }
        }
    }

    /// Whether the stored snapshot equals the fold of the log up to its position: `audit
    /// verify`'s check of it. Folds the log from position 0 in memory.
    pub async fn verify_snapshot(store: &Store) -> Result<SnapshotCheck, StoreError> {
        let Some(stored) = store.read_snapshot(SNAPSHOT_NAME).await? else {
            return Ok(SnapshotCheck::Missing);
        };
        let position = stored.position;
        if stored.format != SNAPSHOT_FORMAT {
            return Ok(SnapshotCheck::OtherFormat {
                position,
                format: stored.format,
            });
        }
        let differs = |reason: String| SnapshotCheck::Differs {
            position,
            models: Vec::new(),
            reason: Some(reason),
        };
        let stored_value: serde_json::Value = match serde_json::from_str(&stored.body) {
            Ok(value) => value,
            Err(error) => return Ok(differs(format!("unreadable: {error}"))),
        };
        if let Err(error) = serde_json::from_value::<Body>(stored_value.clone()) {
            return Ok(differs(format!("unreadable: {error}")));
        }
        let fresh = ReadModels::default();
        let mut after = 0;
        let mut hash = None;
        while after < position {
            let limit = usize::try_from(position - after)
                .unwrap_or(usize::MAX)
                .min(gpunex_store::READ_BATCH_EVENTS_MAX);
            let events = store.read_all(after, limit).await?;
            let Some(last) = events.last() else { break };
            after = last.position;
            hash = Some(last.hash);
            fresh.apply_recorded(&events);
        }
        let Some(hash) = hash.filter(|_| after == position) else {
            return Ok(differs(format!(
                "the log ends at {after}, before the snapshot's position"
            )));
        };
        let folded: serde_json::Value = match fresh
            .snapshot_body(&hash)
            .and_then(|body| serde_json::from_str(&body))
        {
            Ok(value) => value,
            Err(error) => return Ok(differs(format!("cannot serialize the fold: {error}"))),
        };
        if stored_value.get("position_hash") != folded.get("position_hash") {
            return Ok(differs(
                "it was folded from another log (the hash at its position differs)".to_owned(),
            ));
        }
        let models = differing_models(&stored_value, &folded);
        Ok(if models.is_empty() {
            SnapshotCheck::Matches { position }
        } else {
            SnapshotCheck::Differs {
                position,
                models,
                reason: None,
            }
        })
    }

    fn apply_recorded(&self, events: &[gpunex_store::RecordedEvent]) {
        let relevant = |e: &&gpunex_store::RecordedEvent| {
            e.event_type.starts_with("credential.")
                || e.event_type.starts_with("account.")
                || e.event_type.starts_with("provider.application_")
                || e.event_type.starts_with("catalog.")
                || e.event_type.starts_with("fleet.")
                || e.event_type.starts_with("platform.")
                || e.event_type.starts_with("market.")
                || e.event_type.starts_with("benchmark.")
                || e.event_type.starts_with("rental.")
                || e.event_type.starts_with("payout.")
                || e.event_type.starts_with("ledger.adjustment_")
        };
        for event in events.iter().filter(relevant) {
            match event.decode() {
                Ok(decoded) => {
                    self.apply(event.recorded_at_us, &decoded);
                    if let Ok(mut applications) = self.applications.write() {
                        applications.apply(event.position, &decoded);
                    }
                    if let Ok(mut fleet) = self.fleet.write() {
                        fleet.apply(event.stream_version, event.recorded_at_us, &decoded);
                    }
                    if let Ok(mut market) = self.market.write() {
                        market.apply(
                            event.position,
                            event.stream_version,
                            event.recorded_at_us,
                            &decoded,
                        );
                    }
                    if let Ok(mut earnings) = self.earnings.write() {
                        earnings.apply(event.position, event.stream_version, &decoded);
                    }
                    if let Ok(mut adjustments) = self.adjustments.write() {
                        adjustments.apply(event.position, &decoded);
                    }
                }
                Err(error) => {
                    self.undecodable.store(true, Ordering::SeqCst);
                    tracing::error!(position = event.position, %error, "undecodable credential event: refusing all tokens");
                }
            }
        }
    }

    /// Waits until the registry has applied the log up to `position` (a write just made).
    pub async fn wait_for(&self, position: u64) -> Result<(), AppError> {
        let mut seen = self.position.subscribe();
        match tokio::time::timeout(READ_YOUR_WRITES_TIMEOUT, seen.wait_for(|p| *p >= position))
            .await
        {
            Ok(Ok(_)) => Ok(()),
            _ => Err(AppError::ReadModelsBehind),
        }
    }

    /// Waits until the registry has applied every event of `streams` committed so far: what a
    /// command reading those streams' state needs, without waiting for everyone else's writes
    /// (the log head).
    pub async fn wait_for_streams(
        &self,
        store: &Store,
        streams: &[&gpunex_domain::StreamId],
    ) -> Result<(), AppError> {
        let position = store.streams_position(streams).await?;
        self.wait_for(position).await
    }

    /// Waits until the read models have folded every event of `stream` stored now, and answers
    /// the stream's version: a command reads the models after this and appends at that version
    /// (should the stream move in between, the append is refused and the command decides again).
    pub async fn at_stream(
        &self,
        store: &Store,
        stream: &gpunex_domain::StreamId,
    ) -> Result<u64, AppError> {
        let tip = store.stream_tip(stream).await?;
        self.wait_for(tip.position).await?;
        Ok(tip.version)
    }

    pub fn application(&self, id: &Uuid) -> Option<gpunex_domain::onboarding::Application> {
        self.applications.read().ok()?.get(id).cloned()
    }

    /// The application that made a provider (its tier, contact, time zone).
    pub fn provider_application(
        &self,
        provider_id: &Uuid,
    ) -> Option<gpunex_domain::onboarding::Application> {
        self.applications
            .read()
            .ok()?
            .of_provider(provider_id)
            .cloned()
    }

    /// Every application with the log position of its submission, in that order.
    pub fn applications(&self) -> Vec<(u64, gpunex_domain::onboarding::Application)> {
        self.applications
            .read()
            .map(|a| a.all().into_iter().map(|(p, a)| (p, a.clone())).collect())
            .unwrap_or_default()
    }

    /// Reads the fleet (machines, GPUs, presence) as of the registry's position.
    pub fn with_fleet<T>(&self, read: impl FnOnce(&Fleet) -> T) -> T {
        match self.fleet.read() {
            Ok(fleet) => read(&fleet),
            Err(poisoned) => read(&poisoned.into_inner()),
        }
    }

    /// Reads the providers' earnings as of the registry's position.
    pub fn with_earnings<T>(
        &self,
        read: impl FnOnce(&gpunex_projections::earnings::Earnings) -> T,
    ) -> T {
        match self.earnings.read() {
            Ok(earnings) => read(&earnings),
            Err(poisoned) => read(&poisoned.into_inner()),
        }
    }

    /// Reads the ledger adjustment proposals as of the registry's position.
    pub fn with_adjustments<T>(
        &self,
        read: impl FnOnce(&gpunex_projections::adjustments::Adjustments) -> T,
    ) -> T {
        match self.adjustments.read() {
            Ok(adjustments) => read(&adjustments),
            Err(poisoned) => read(&poisoned.into_inner()),
        }
    }

    /// Reads the marketplace state as of the registry's position.
    pub fn with_market<T>(&self, read: impl FnOnce(&Market) -> T) -> T {
        match self.market.read() {
            Ok(market) => read(&market),
            Err(poisoned) => read(&poisoned.into_inner()),
        }
    }

    /// The position of the snapshot these models started from; 0 when they folded the whole
    /// log.
    pub fn started_from(&self) -> u64 {
        self.started_from.load(Ordering::SeqCst)
    }

    /// The last log position the registry has applied.
    pub fn position(&self) -> u64 {
        *self.position.borrow()
    }

    /// Changes whenever the registry applies new events.
    pub fn watch_position(&self) -> tokio::sync::watch::Receiver<u64> {
        self.position.subscribe()
    }

    /// Whether the registry can be trusted to authenticate.
    pub fn is_healthy(&self) -> bool {
        !self.undecodable.load(Ordering::SeqCst) && !self.behind.load(Ordering::SeqCst)
    }

    /// Applies one event to the credentials, users and catalog additions (the follower's work;
    /// writers wait for their position instead, so a snapshot is exactly the fold of the log).
    fn apply(&self, recorded_at_us: i64, event: &DomainEvent) {
        if let Ok(mut credentials) = self.inner.write() {
            credentials.apply(recorded_at_us, event);
        }
        if let Ok(mut users) = self.users.write() {
            users.apply(event);
        }
        if let DomainEvent::ModelAdded(added) = event
            && let Ok(mut models) = self.models.write()
            && !models.iter().any(|m| m.model_id == added.model_id)
        {
            models.push(added.clone());
        }
    }

    /// Models admins added to the catalog, in the order they were added.
    pub fn added_models(&self) -> Vec<gpunex_domain::gpu::ModelAdded> {
        self.models.read().map(|m| m.clone()).unwrap_or_default()
    }

    pub fn user(&self, user_id: &Uuid) -> Option<UserRecord> {
        self.users.read().ok()?.get(user_id).cloned()
    }

    /// The staff roles a person holds now.
    pub fn staff_roles(
        &self,
        user_id: &Uuid,
    ) -> std::collections::BTreeSet<gpunex_domain::accounts::StaffRole> {
        self.users
            .read()
            .map(|users| users.staff_roles(user_id))
            .unwrap_or_default()
    }

    /// The addresses of everyone who holds the staff role `role` now.
    pub fn staff_emails(&self, role: gpunex_domain::accounts::StaffRole) -> Vec<String> {
        self.users
            .read()
            .map(|users| users.emails_with(role))
            .unwrap_or_default()
    }

    pub fn user_by_email(&self, email: &str) -> Option<UserRecord> {
        self.users.read().ok()?.by_email(email).cloned()
    }

    pub fn get(&self, token_id: &Uuid) -> Option<CredentialRecord> {
        self.inner.read().ok()?.get(token_id).cloned()
    }

    /// The provider holding `machine_id`: its registered owner, else the provider of the first
    /// agent token bound to it.
    pub fn machine_holder(&self, machine_id: &Uuid) -> Option<Uuid> {
        self.with_fleet(|f| f.machine(machine_id).map(|m| m.provider_id))
            .or_else(|| self.inner.read().ok()?.machine_holder(machine_id))
    }

    /// A person's renter tokens, oldest first.
    pub fn list_of_user(&self, user_id: Uuid) -> Vec<CredentialRecord> {
        self.inner
            .read()
            .map(|c| c.list_of_user(user_id).into_iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn list(&self, provider: Option<Uuid>) -> Vec<CredentialRecord> {
        self.inner
            .read()
            .map(|credentials| credentials.list(provider).into_iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The active credential a presented token string belongs to, if the secret matches and,
    /// for a session, it has not expired at `now`.
    pub fn authenticate(
        &self,
        token: &str,
        now: gpunex_domain::Timestamp,
    ) -> Option<CredentialRecord> {
        let rest = token.strip_prefix(TOKEN_PREFIX)?.strip_prefix('_')?;
        let (id, secret) = rest.split_once('_')?;
        if id.len() != 32 || secret.len() != 64 {
            return None;
        }
        let token_id = Uuid::try_parse(id).ok()?;
        // Hash and compare whether or not the id is known, so timing does not reveal ids.
        let presented = sha256_hex(secret);
        let record = self.get(&token_id);
        let expected = record
            .as_ref()
            .map_or(UNKNOWN_TOKEN_HASH, |r| r.secret_sha256.as_str());
        let matches: bool = presented.as_bytes().ct_eq(expected.as_bytes()).into();
        record.filter(|record| {
            matches
                && record.revoked_at.is_none()
                && record.expires_at.is_none_or(|expires| now < expires)
        })
    }
}

/// A freshly issued token: the full string is shown once and never stored.
pub struct NewToken {
    pub token_id: Uuid,
    pub token: String,
    pub secret_sha256: String,
}

/// The secret never reaches a log line or a test failure.
impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewToken")
            .field("token_id", &self.token_id)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl NewToken {
    /// A new token id (UUIDv7) and a 244-bit random secret (two UUIDv4s).
    pub fn generate() -> NewToken {
        let token_id = Uuid::now_v7();
        let secret = format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
        NewToken {
            token_id,
            token: format!("{TOKEN_PREFIX}_{}_{secret}", token_id.simple()),
            secret_sha256: sha256_hex(&secret),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::credentials::Role;
    use gpunex_domain::credentials::{CredentialEvent, issue};
    use gpunex_domain::time::Timestamp;

    #[test]
    fn sessions_expire() {
        let cache = ReadModels::default();
        let new = NewToken::generate();
        let user = Role::User {
            user_id: Uuid::now_v7(),
        };
        let mut event = issue(
            new.token_id,
            user,
            "session",
            &new.secret_sha256,
            "user:x",
            None,
            Timestamp::from_unix_micros(0),
        )
        .unwrap();
        event.expires_at = Some(Timestamp::from_unix_micros(1_000));
        cache.apply(0, &DomainEvent::Credential(CredentialEvent::Issued(event)));
        assert!(
            cache
                .authenticate(&new.token, Timestamp::from_unix_micros(999))
                .is_some()
        );
        assert!(
            cache
                .authenticate(&new.token, Timestamp::from_unix_micros(1_000))
                .is_none()
        );
    }

    #[test]
    fn an_unreadable_credential_event_fails_closed() {
        let cache = ReadModels::default();
        assert!(cache.is_healthy());
        let from_the_future = gpunex_store::RecordedEvent {
            position: 1,
            event_id: Uuid::now_v7(),
            stream_id: "credential-x".to_owned(),
            stream_version: 2,
            event_type: "credential.token_revoked".to_owned(),
            schema_version: 9,
            recorded_at_us: 0,
            payload: "{}".to_owned(),
            metadata: "{}".to_owned(),
            hash: [0; 32],
        };
        cache.apply_recorded(&[from_the_future]);
        assert!(
            !cache.is_healthy(),
            "a revocation it cannot read must not leave tokens working"
        );
    }

    #[test]
    fn tokens_authenticate_only_with_their_secret() {
        let cache = ReadModels::default();
        let new = NewToken::generate();
        let event = issue(
            new.token_id,
            Role::Finance,
            "books",
            &new.secret_sha256,
            "cli",
            None,
            Timestamp::from_unix_micros(0),
        )
        .unwrap();
        cache.apply(0, &DomainEvent::Credential(CredentialEvent::Issued(event)));
        assert_eq!(
            cache
                .authenticate(&new.token, Timestamp::from_unix_micros(0))
                .map(|r| r.role),
            Some(Role::Finance)
        );
        let mut tampered = new.token.clone();
        tampered.pop();
        tampered.push(if new.token.ends_with('0') { '1' } else { '0' });
        for bad in [
            tampered.as_str(),
            "",
            "gpnx",
            "gpnx__",
            &new.token[..new.token.len() - 1],
            "Bearer x",
        ] {
            assert!(
                cache
                    .authenticate(bad, Timestamp::from_unix_micros(0))
                    .is_none(),
                "{bad}"
            );
        }
    }
}
