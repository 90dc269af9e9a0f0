//! The command executor on both databases: a decision is appended at the version its state was
//! read at and answered once the read models folded it; another writer moving the stream makes it
//! load and decide again, up to its named bound, then `Contended`; a rule's refusal, an empty
//! decision and an event id stored with other content each write nothing and answer as such; a
//! store that fails is an `AppError`, never a rejection.

use std::sync::atomic::{AtomicUsize, Ordering};

use gpunex_app::command::{Done, Executor, Rejection, Retry};
use gpunex_app::{AppError, ReadModels};
use gpunex_domain::StreamId;
use gpunex_domain::market::{MarketCommand, MarketEvent, MarketRejection};
use gpunex_domain::time::Timestamp;
use gpunex_store::{ExpectedVersion, NewEvent, Store, StreamAppend};
use gpunex_tests::{TestDb, conformance, credit, new_event, provider, stream};
use uuid::Uuid;

conformance!(
    a_decision_lands_at_the_version_it_read_and_is_folded,
    a_moved_stream_is_decided_again_up_to_the_bound,
    refusals_and_empty_decisions_write_nothing,
    an_id_stored_with_other_content_is_named,
    market_changes_that_race_are_decided_one_after_the_other,
    racing_decisions_of_one_adjustment_land_once,
    racing_sign_ups_and_catalog_additions_land_once,
    tokens_are_decided_on_what_the_streams_hold,
);

const RETRY: Retry = Retry {
    name: "test",
    attempts: 3,
};

/// The stream's version as stored (0: no stream).
async fn version(store: &Store, stream: &StreamId) -> u64 {
    store
        .read_stream(stream, 0, 10_000)
        .await
        .unwrap()
        .last()
        .map_or(0, |e| e.stream_version)
}

fn at(version: u64) -> ExpectedVersion {
    match version {
        0 => ExpectedVersion::NoStream,
        v => ExpectedVersion::Exact(v),
    }
}

fn one(stream_id: &StreamId, version: u64, event: NewEvent) -> Vec<StreamAppend> {
    vec![StreamAppend {
        stream_id: stream_id.clone(),
        expected: at(version),
        events: vec![event],
    }]
}

async fn a_decision_lands_at_the_version_it_read_and_is_folded(db: &TestDb) {
    let store = db.open().await;
    let models = ReadModels::load(&store).await.unwrap();
    let exec = Executor::new(&store, &models);
    let target = stream("executor-one");
    let done = exec
        .execute(
            RETRY,
            async || Ok(version(&store, &target).await),
            |v: &u64, _now| -> Result<_, ()> {
                Ok(one(&target, *v, new_event(&credit(provider(1), 5_000))))
            },
        )
        .await
        .unwrap()
        .unwrap();
    let Done::Committed(committed) = done else {
        panic!("nothing written")
    };
    assert!(!committed.replayed);
    assert_eq!(committed.events[0].stream_version, 1);
    // Read-your-writes of its own position.
    assert!(models.position() >= committed.last_position());
    assert_eq!(version(&store, &target).await, 1);
}

async fn a_moved_stream_is_decided_again_up_to_the_bound(db: &TestDb) {
    let store = db.open().await;
    let models = ReadModels::load(&store).await.unwrap();
    let exec = Executor::new(&store, &models);
    let target = stream("executor-moved");

    // Another writer lands between the first load and its append: the second attempt reads the
    // new version and lands after it.
    let loads = AtomicUsize::new(0);
    let done = exec
        .execute(
            RETRY,
            async || {
                let v = version(&store, &target).await;
                if loads.fetch_add(1, Ordering::SeqCst) == 0 {
                    store
                        .append(
                            target.clone(),
                            at(v),
                            vec![new_event(&credit(provider(2), 1_000))],
                        )
                        .await
                        .unwrap();
                }
                Ok(v)
            },
            |v: &u64, _now| -> Result<_, ()> {
                Ok(one(&target, *v, new_event(&credit(provider(2), 2_000))))
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(loads.load(Ordering::SeqCst), 2);
    assert_eq!(done.position(), Some(store.head_position().await.unwrap()));
    assert_eq!(version(&store, &target).await, 2);

    // A writer that moves it before every attempt: refused after the bound, nothing of ours
    // written.
    let loads = AtomicUsize::new(0);
    let refused = exec
        .execute(
            RETRY,
            async || {
                loads.fetch_add(1, Ordering::SeqCst);
                let v = version(&store, &target).await;
                store
                    .append(
                        target.clone(),
                        at(v),
                        vec![new_event(&credit(provider(3), 1_000))],
                    )
                    .await
                    .unwrap();
                Ok(v)
            },
            |v: &u64, _now| -> Result<_, ()> {
                Ok(one(&target, *v, new_event(&credit(provider(3), 9_999))))
            },
        )
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        refused,
        Rejection::Contended {
            retry: "test",
            attempts: 3
        }
    );
    assert_eq!(loads.load(Ordering::SeqCst), 3);
    assert_eq!(version(&store, &target).await, 2 + 3);
}

async fn refusals_and_empty_decisions_write_nothing(db: &TestDb) {
    let store = db.open().await;
    let models = ReadModels::load(&store).await.unwrap();
    let exec = Executor::new(&store, &models);
    let head = store.head_position().await.unwrap();
    let refused = exec
        .execute(
            RETRY,
            async || Ok(()),
            |_: &(), _now| -> Result<Vec<StreamAppend>, &str> { Err("not allowed") },
        )
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused, Rejection::Rule("not allowed"));
    let nothing = exec
        .execute(
            RETRY,
            async || Ok(()),
            |_: &(), _now| -> Result<_, ()> {
                Ok(vec![StreamAppend {
                    stream_id: stream("executor-empty"),
                    expected: ExpectedVersion::Any,
                    events: Vec::new(),
                }])
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(nothing, Done::Nothing));
    // A load that fails is the infrastructure's failure, not a refusal.
    let failed = exec
        .execute(
            RETRY,
            async || -> Result<(), AppError> { Err(AppError::ReadModelsBehind) },
            |_: &(), _now| -> Result<Vec<StreamAppend>, ()> { unreachable!("never decided") },
        )
        .await;
    assert!(matches!(failed, Err(AppError::ReadModelsBehind)));
    assert_eq!(store.head_position().await.unwrap(), head);
}

async fn an_id_stored_with_other_content_is_named(db: &TestDb) {
    let store = db.open().await;
    let models = ReadModels::load(&store).await.unwrap();
    let exec = Executor::new(&store, &models);
    let target = stream("executor-ids");
    let id = Uuid::now_v7();
    let first = credit(provider(4), 1_000);
    let event = |e| NewEvent::from_domain(id, e, gpunex_tests::actor());
    store
        .append(target.clone(), ExpectedVersion::Any, vec![event(&first)])
        .await
        .unwrap();
    // The same id and content again: stored once, answered as a replay.
    let replay = exec
        .execute(
            RETRY,
            async || Ok(()),
            |_: &(), _now| -> Result<_, ()> {
                Ok(vec![StreamAppend {
                    stream_id: target.clone(),
                    expected: ExpectedVersion::Any,
                    events: vec![event(&first)],
                }])
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(replay, Done::Committed(c) if c.replayed));
    // Other content under that id: named, nothing written.
    let other = credit(provider(4), 2_000);
    let refused = exec
        .execute(
            RETRY,
            async || Ok(()),
            |_: &(), _now| -> Result<_, ()> {
                Ok(vec![StreamAppend {
                    stream_id: target.clone(),
                    expected: ExpectedVersion::Any,
                    events: vec![event(&other)],
                }])
            },
        )
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(refused, Rejection::IdTaken { event_id, .. } if event_id == id));
    assert_eq!(version(&store, &target).await, 1);
}

/// Two cancels of one maintenance window at once: both load it, one lands, the other finds the
/// stream moved, decides again on the new state and is refused by the rule. One cancel is stored.
async fn market_changes_that_race_are_decided_one_after_the_other(db: &TestDb) {
    let store = db.open().await;
    let models = ReadModels::load(&store).await.unwrap();
    let exec = Executor::new(&store, &models);
    let provider_id = provider(5);
    let meta = gpunex_tests::actor();
    let now = store.clock().now();
    let hours = |h: i64| Timestamp::from_unix_micros(now.unix_micros() + h * 3_600_000_000);
    let maintenance_id = Uuid::now_v7();
    let announce = MarketCommand::AnnounceMaintenance {
        maintenance_id,
        machine_id: None,
        from: hours(1),
        until: hours(3),
        reason: "cooling".to_owned(),
    };
    let announced = gpunex_app::market::execute(&exec, provider_id, announce, &meta, |_, _| {})
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        announced.events[..],
        [MarketEvent::MaintenanceAnnounced(_)]
    ));
    // A machine the provider does not have is refused, and writes nothing.
    let elsewhere = MarketCommand::AnnounceMaintenance {
        maintenance_id: Uuid::now_v7(),
        machine_id: Some(Uuid::now_v7()),
        from: hours(1),
        until: hours(3),
        reason: "cooling".to_owned(),
    };
    let refused = gpunex_app::market::execute(&exec, provider_id, elsewhere, &meta, |_, _| {})
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused, Rejection::Rule(MarketRejection::UnknownMachine));

    let prepared = AtomicUsize::new(0);
    let cancel = || {
        gpunex_app::market::execute(
            &exec,
            provider_id,
            MarketCommand::CancelMaintenance { maintenance_id },
            &meta,
            |market, _| {
                assert!(
                    market
                        .maintenance
                        .iter()
                        .any(|m| m.maintenance_id == maintenance_id)
                );
                prepared.fetch_add(1, Ordering::SeqCst);
            },
        )
    };
    let (a, b) = futures_util::future::join(cancel(), cancel()).await;
    let (a, b) = (a.unwrap(), b.unwrap());
    let refusals: Vec<_> = [&a, &b]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .collect();
    assert_eq!(
        refusals,
        [&Rejection::Rule(MarketRejection::NoSuchMaintenance)],
        "one cancel lands, the other is refused"
    );
    let market = gpunex_app::market::market_stream(provider_id);
    let events = store.read_stream(&market, 0, 100).await.unwrap();
    let cancels = events
        .iter()
        .filter(|e| e.event_type == "market.maintenance_cancelled")
        .count();
    assert_eq!((events.len(), cancels), (2, 1));
    assert!(prepared.load(Ordering::SeqCst) >= 1);
    assert_eq!(
        models.with_market(|m| m.market_version(provider_id)),
        2,
        "the read models know the stream's version"
    );
}

async fn racing_decisions_of_one_adjustment_land_once(db: &TestDb) {
    use gpunex_app::adjustments::{self, Propose, Refusal};
    use gpunex_domain::adjustments::{AdjustmentRejection, Decision};
    use gpunex_domain::ledger::{Account, Posting};
    use gpunex_domain::money::Usdc;

    let store = db.open().await;
    let models = ReadModels::load(&store).await.unwrap();
    let exec = Executor::new(&store, &models);
    let proposal_id = Uuid::now_v7();
    let amount = Usdc::from_micros(5_000_000);
    let proposed = adjustments::propose(
        &exec,
        Propose {
            proposal_id,
            entry_id: Uuid::now_v7(),
            reason: "goodwill for an outage",
            evidence: "ticket 1",
            postings: vec![
                Posting::debit(Account::PlatformAdjustments, amount),
                Posting::credit(Account::ProviderPayable(provider(9)), amount),
            ],
        },
        "token:alice",
        |_| {},
    )
    .await
    .unwrap()
    .unwrap();
    assert!(proposed.decided.is_none());
    // The proposer may not decide it.
    let own = adjustments::decide(
        &exec,
        proposal_id,
        Decision::Approved,
        "",
        "token:alice",
        |_| {},
    )
    .await
    .unwrap()
    .unwrap_err();
    assert_eq!(
        own,
        Rejection::Rule(Refusal::Rule(AdjustmentRejection::SamePerson))
    );
    let unknown = adjustments::decide(
        &exec,
        Uuid::now_v7(),
        Decision::Approved,
        "",
        "token:bob",
        |_| {},
    )
    .await
    .unwrap()
    .unwrap_err();
    assert_eq!(unknown, Rejection::Rule(Refusal::NotFound));

    let (a, b) = futures_util::future::join(
        adjustments::decide(
            &exec,
            proposal_id,
            Decision::Approved,
            "",
            "token:bob",
            |_| {},
        ),
        adjustments::decide(
            &exec,
            proposal_id,
            Decision::Rejected,
            "no",
            "token:carol",
            |_| {},
        ),
    )
    .await;
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        usize::from(a.is_ok()) + usize::from(b.is_ok()),
        1,
        "one decision lands: {a:?} {b:?}"
    );
    let refused = a.as_ref().err().or(b.as_ref().err()).unwrap();
    assert!(
        matches!(
            refused,
            Rejection::Rule(Refusal::Rule(AdjustmentRejection::AlreadyDecided(_)))
        ),
        "{refused:?}"
    );
    let events = store
        .read_stream(&adjustments::stream_of(proposal_id), 0, 100)
        .await
        .unwrap();
    let decided = events
        .iter()
        .filter(|e| e.event_type == "ledger.adjustment_decided")
        .count();
    assert_eq!(decided, 1);
    assert_eq!(
        events.len(),
        if a.is_ok() { 3 } else { 2 },
        "an approval posts"
    );
}

async fn racing_sign_ups_and_catalog_additions_land_once(db: &TestDb) {
    use gpunex_domain::accounts::AccountRejection;
    use gpunex_domain::gpu::CatalogRejection;

    let store = db.open().await;
    let models = ReadModels::load(&store).await.unwrap();
    let exec = Executor::new(&store, &models);
    let hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA";
    let (a, b) = futures_util::future::join(
        gpunex_app::accounts::sign_up(&exec, Uuid::now_v7(), "ana@example.com", hash),
        gpunex_app::accounts::sign_up(&exec, Uuid::now_v7(), "ana@example.com", hash),
    )
    .await;
    let outcomes = [a.unwrap(), b.unwrap()];
    assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
    assert!(
        outcomes
            .iter()
            .any(|o| o == &Err(Rejection::Rule(AccountRejection::EmailTaken)))
    );
    // Case does not make another address.
    let again = gpunex_app::accounts::sign_up(&exec, Uuid::now_v7(), "ANA@example.com", hash)
        .await
        .unwrap();
    assert_eq!(again, Err(Rejection::Rule(AccountRejection::EmailTaken)));
    assert!(models.user_by_email("ana@example.com").is_some());

    let model = gpunex_app::catalog::NewModel {
        model_id: "b300-288gb",
        name: "NVIDIA B300 288GB",
        vram_gb: 288,
    };
    let (a, b) = futures_util::future::join(
        gpunex_app::catalog::add(&exec, model.clone(), "token:alice"),
        gpunex_app::catalog::add(&exec, model.clone(), "token:bob"),
    )
    .await;
    let outcomes = [a.unwrap(), b.unwrap()];
    assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
    assert!(
        outcomes
            .iter()
            .any(|o| o == &Err(Rejection::Rule(CatalogRejection::AlreadyListed)))
    );
    let stream = gpunex_app::catalog::model_stream("b300-288gb").unwrap();
    assert_eq!(version(&store, &stream).await, 1);
    assert_eq!(models.added_models().len(), 1);
}

async fn tokens_are_decided_on_what_the_streams_hold(db: &TestDb) {
    use gpunex_app::credentials::{self, TokenRequest};
    use gpunex_domain::credentials::{CredentialRejection, Role};

    let store = db.open().await;
    let models = ReadModels::load(&store).await.unwrap();
    let exec = Executor::new(&store, &models);
    let (admin, _) = credentials::issue_unattended(&store, Role::Admin, "ops", "cli")
        .await
        .unwrap()
        .unwrap();
    let actor = format!("token:{}", admin.token_id);
    let request = |label| TokenRequest {
        caller: Some(admin.token_id),
        ..TokenRequest::new(Role::Finance, label, &actor)
    };
    let (finance, _) = credentials::issue(&exec, &request("books"))
        .await
        .unwrap()
        .unwrap();
    // A rotation retires the old token in the same append; rotating it again is refused.
    let rotate = TokenRequest {
        replaces: Some(finance.token_id),
        ..request("books")
    };
    let (rotated, issued) = credentials::issue(&exec, &rotate).await.unwrap().unwrap();
    assert_eq!(issued.replaces, Some(finance.token_id));
    assert!(models.get(&finance.token_id).unwrap().revoked_at.is_some());
    assert_eq!(
        credentials::issue(&exec, &rotate)
            .await
            .unwrap()
            .unwrap_err(),
        Rejection::Rule(CredentialRejection::AlreadyRevoked)
    );

    // A provider's first token is claimed once, however many ask at once.
    let provider_id = provider(3);
    let first = TokenRequest {
        first_for_provider: Some((provider_id, Uuid::now_v7())),
        ..TokenRequest::new(Role::Provider { provider_id }, "first", &actor)
    };
    let (a, b) = futures_util::future::join(
        credentials::issue(&exec, &first),
        credentials::issue(&exec, &first),
    )
    .await;
    let outcomes = [a.unwrap(), b.unwrap()];
    assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
    assert!(outcomes.iter().any(|o| matches!(
        o,
        Err(Rejection::Rule(CredentialRejection::FirstTokenClaimed))
    )));
    assert_eq!(models.list(Some(provider_id)).len(), 1);

    // A token revoked issues and revokes nothing more.
    credentials::revoke(&exec, admin.token_id, None, &actor, "left")
        .await
        .unwrap()
        .unwrap();
    let before = store.head_position().await.unwrap();
    assert_eq!(
        credentials::issue(&exec, &request("late"))
            .await
            .unwrap()
            .unwrap_err(),
        Rejection::Rule(CredentialRejection::CallerRevoked)
    );
    assert_eq!(
        credentials::revoke(&exec, rotated.token_id, Some(admin.token_id), &actor, "")
            .await
            .unwrap()
            .unwrap_err(),
        Rejection::Rule(CredentialRejection::CallerRevoked)
    );
    assert_eq!(
        store.head_position().await.unwrap(),
        before,
        "nothing written"
    );
    assert_eq!(
        credentials::revoke(&exec, admin.token_id, None, &actor, "again")
            .await
            .unwrap()
            .unwrap_err(),
        Rejection::Rule(CredentialRejection::AlreadyRevoked)
    );
}
