//! `gpunex simulate` on SQLite and PostgreSQL: deterministic from the seed, every hourly money
//! check clean, and what it wrote passes `audit verify` and `audit reconcile` and reads back
//! through the earnings API to the same totals.

use gpunex::simulate::{SimConfig, simulate};
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};

conformance!(a_simulated_marketplace_is_deterministic_and_reconciles);

mod common;

fn config(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        providers: 6,
        gpus: 4,
        days: 2,
        renters: 10,
        start: chrono::NaiveDate::from_ymd_opt(2026, 11, 1).unwrap(),
        fees: gpunex_domain::metering::FeeSchedule::default(),
    }
}

async fn a_simulated_marketplace_is_deterministic_and_reconciles(db: &TestDb) {
    let store = db.open().await;
    let report = simulate(&store, &config(11), &|_| {}).await.unwrap();
    assert!(report.usage_events > 1_000, "{report:?}");
    // Every command the simulated parties sent was taken: they ask only for what is offered.
    assert_eq!(report.refused, 0, "{report:?}");
    assert!(report.completed > 0 && report.outages > 0, "{report:?}");
    // Every GPU ran its first suite; a delisting needs a degraded GPU, a relisting a delisting.
    assert!(report.benchmark_runs >= 24, "{report:?}");
    assert!(
        report.benchmark_delistings <= report.degraded_gpus
            && report.benchmark_relistings <= report.benchmark_delistings,
        "{report:?}"
    );
    assert!(
        report.rentals > 10 && report.invariant_checks == 48,
        "{report:?}"
    );
    assert_eq!(
        report.renter_charges_micro_usdc,
        report.provider_earnings_micro_usdc + report.platform_fees_micro_usdc
    );

    // The same seed gives the same events elsewhere; another seed does not.
    let again = TestDb::sqlite();
    let same = simulate(&again.open().await, &config(11), &|_| {})
        .await
        .unwrap();
    assert_eq!(same.content_digest, report.content_digest);
    let other = TestDb::sqlite();
    let different = simulate(&other.open().await, &config(12), &|_| {})
        .await
        .unwrap();
    assert_ne!(different.content_digest, report.content_digest);

    // The audits agree with what was written.
    store.run_projections().await.unwrap();
    let audit = store.audit(&|_| {}).await.unwrap();
    assert!(audit.is_clean(), "{audit:?}");
    let head = store.head_position().await.unwrap();
    let reconciled = gpunex_api::reconcile::replay(&store, head, &|_| {})
        .await
        .unwrap()
        .check(
            gpunex_domain::clock::Clock::now(&gpunex_store::SystemClock),
            None,
        );
    assert!(reconciled.is_clean(), "{:?}", reconciled.mismatches);
    assert_eq!(
        reconciled.totals.renter_charges_micro_usdc,
        report.renter_charges_micro_usdc
    );

    // The server's earnings projection and finance view show the same money.
    let state = AppState::load(store).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let (status, _, finance) = common::request(
        &base,
        "GET",
        "/v1/earnings?from=2026-10-31&to=2026-11-03",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, 200, "{finance}");
    assert_eq!(
        finance["totals"]["gross_micro_usdc"],
        report.renter_charges_micro_usdc
    );
    assert_eq!(
        finance["totals"]["net_micro_usdc"],
        report.provider_earnings_micro_usdc
    );
    assert_eq!(finance["providers"].as_array().unwrap().len(), 6);
    let (_, _, reconcile) =
        common::request(&base, "GET", "/v1/audit/reconcile", Some(&admin), None).await;
    assert_eq!(
        reconcile["mismatches"],
        serde_json::json!([]),
        "{reconcile}"
    );

    // A server watching presence finds the simulated agents silent since the simulation's end:
    // their machines go offline at their last heartbeat and the rentals end there, still
    // reconciled.
    let config = gpunex_api::fleet::FleetConfig {
        heartbeat_interval: std::time::Duration::from_millis(100),
        offline_grace: std::time::Duration::from_millis(300),
        rental_grace: std::time::Duration::from_millis(300),
        ..gpunex_api::fleet::FleetConfig::default()
    };
    let watchdog = tokio::spawn(gpunex_api::fleet::run_watchdog(
        state.store.clone(),
        state.credentials.clone(),
        config,
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while state
        .credentials
        .with_market(|m| !m.active_rentals().is_empty())
    {
        assert!(std::time::Instant::now() < deadline, "rentals still active");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    watchdog.abort();
    let (_, _, reconcile) =
        common::request(&base, "GET", "/v1/audit/reconcile", Some(&admin), None).await;
    assert_eq!(
        reconcile["mismatches"],
        serde_json::json!([]),
        "{reconcile}"
    );
}
