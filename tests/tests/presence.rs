//! The presence watchdog's outage record across a failure, on both databases: a pass that
//! stores a platform outage and then fails to move the liveness tick leaves the tick where it
//! was, so the next pass finds the same gap; the outage, whose id derives from where it began,
//! is stored once with what the first pass saw, and the tick then moves. The failure is real: a
//! trigger on the liveness table refuses the tick's write, as a lost connection would.

use gpunex_app::ReadModels;
use gpunex_app::command::Executor;
use gpunex_app::presence::{FleetConfig, OUTAGE_STREAM, watch_once};
use gpunex_domain::DomainEvent;
use gpunex_domain::StreamId;
use gpunex_domain::clock::Clock;
use gpunex_domain::fleet::{
    FleetEvent, HostInfo, MachineOffline, MachineOnline, MachineRegistered,
};
use gpunex_domain::metering::FeeSchedule;
use gpunex_domain::money::Usdc;
use gpunex_domain::rental::{RentalEvent, RentalStarted};
use gpunex_domain::time::{MICROS_PER_DAY, Timestamp};
use gpunex_store::ExpectedVersion;
use gpunex_store::Store;
use gpunex_store::audit::AuditFinding;
use gpunex_store::fleet::Heartbeat;
use gpunex_tests::{TestDb, conformance, manual_clock, provider};
use uuid::Uuid;

conformance!(
    an_outage_stored_before_a_failed_tick_is_kept_once,
    heartbeats_recorded_together_are_each_recorded,
    a_rental_older_than_memory_is_metered_from_the_stored_history,
);

const FAIL_TICK_SQLITE: [&str; 2] = [
    "CREATE TRIGGER tick_fails_insert BEFORE INSERT ON platform_liveness \
     BEGIN SELECT RAISE(ABORT, 'injected: the liveness tick is not written'); END",
    "CREATE TRIGGER tick_fails_update BEFORE UPDATE ON platform_liveness \
     BEGIN SELECT RAISE(ABORT, 'injected: the liveness tick is not written'); END",
];
const FAIL_TICK_POSTGRES: [&str; 2] = [
    "CREATE FUNCTION tick_fails() RETURNS trigger LANGUAGE plpgsql AS \
     $$ BEGIN RAISE EXCEPTION 'injected: the liveness tick is not written'; END $$",
    "CREATE TRIGGER tick_fails BEFORE INSERT OR UPDATE ON platform_liveness \
     FOR EACH ROW EXECUTE FUNCTION tick_fails()",
];
const HEAL_SQLITE: [&str; 2] = [
    "DROP TRIGGER tick_fails_insert",
    "DROP TRIGGER tick_fails_update",
];
const HEAL_POSTGRES: [&str; 2] = [
    "DROP TRIGGER tick_fails ON platform_liveness",
    "DROP FUNCTION tick_fails()",
];

/// The outages stored: `(from, until)` of each, in log order.
async fn outages(store: &Store) -> Vec<(i64, i64)> {
    let stream = StreamId::parse(OUTAGE_STREAM).unwrap();
    store
        .read_stream(&stream, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|event| {
            let payload: serde_json::Value = serde_json::from_str(&event.payload).unwrap();
            (
                payload["from"].as_i64().unwrap(),
                payload["until"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn an_outage_stored_before_a_failed_tick_is_kept_once(db: &TestDb) {
    let clock = manual_clock();
    let store = db.open_with_clock(clock.clone()).await;
    let models = ReadModels::load(&store).await.unwrap();
    let config = FleetConfig::default();
    let threshold = i64::try_from(config.outage_threshold().as_micros()).unwrap();
    let started = clock.now();
    let mut pruned = started.unix_micros();

    // A first pass ticks.
    watch_once(&store, &models, &config, started, &mut pruned)
        .await
        .unwrap();
    let down_from = store.platform_tick().await.unwrap().unwrap();
    assert_eq!(down_from, started.unix_micros());
    assert!(outages(&store).await.is_empty());

    // The platform is down longer than the threshold; the pass that comes back stores the outage,
    // then cannot write its tick.
    clock.advance_micros(threshold * 3);
    let back_at = clock.now().unix_micros();
    db.execute_raw(&FAIL_TICK_SQLITE, &FAIL_TICK_POSTGRES).await;
    let failed = watch_once(&store, &models, &config, started, &mut pruned).await;
    assert!(failed.is_err(), "the tick's write was refused: {failed:?}");
    assert_eq!(outages(&store).await, vec![(down_from, back_at)]);
    assert_eq!(
        store.platform_tick().await.unwrap(),
        Some(down_from),
        "a failed pass leaves the tick where it was"
    );

    // The next pass finds the same gap: the outage is not stored again (same id, later end), and
    // the tick moves at last.
    db.execute_raw(&HEAL_SQLITE, &HEAL_POSTGRES).await;
    clock.advance_micros(1_000_000);
    let healed_at = clock.now().unix_micros();
    watch_once(&store, &models, &config, started, &mut pruned)
        .await
        .unwrap();
    assert_eq!(outages(&store).await, vec![(down_from, back_at)]);
    assert_eq!(store.platform_tick().await.unwrap(), Some(healed_at));

    // Passes within the threshold record nothing more.
    clock.advance_micros(threshold / 2);
    watch_once(&store, &models, &config, started, &mut pruned)
        .await
        .unwrap();
    assert_eq!(outages(&store).await, vec![(down_from, back_at)]);
}

/// A step's heartbeats recorded in one transaction (as the simulation does) land as if each had
/// been recorded alone: every machine's last heartbeat and count, a later one never moved back.
async fn heartbeats_recorded_together_are_each_recorded(db: &TestDb) {
    let store = db.open().await;
    let (a, b) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
    let beat = |machine_id, at_us| Heartbeat {
        machine_id,
        provider_id: provider(1),
        at_us,
        samples: &[],
    };
    store.record_heartbeats(&[]).await.unwrap();
    store
        .record_heartbeats(&[beat(a, 2_000), beat(b, 2_000)])
        .await
        .unwrap();
    store
        .record_heartbeats(&[beat(a, 1_000), beat(b, 3_000)])
        .await
        .unwrap();
    store
        .record_heartbeat(a, provider(1), 4_000, &[])
        .await
        .unwrap();
    let mut seen: Vec<(Uuid, i64, u64)> = store
        .presences(None)
        .await
        .unwrap()
        .iter()
        .map(|p| (p.machine_id, p.last_heartbeat_us, p.heartbeats))
        .collect();
    seen.sort();
    assert_eq!(seen, vec![(a, 4_000, 3), (b, 3_000, 2)]);
}

/// Appends one event at the store's clock.
async fn append_at(store: &Store, stream: &str, event: DomainEvent) -> u64 {
    store
        .append(
            gpunex_tests::stream(stream),
            ExpectedVersion::Any,
            vec![gpunex_tests::new_event(&event)],
        )
        .await
        .unwrap()
        .last_position()
}

/// Memory keeps a month of a machine's presence; a rental that began before that is metered
/// from the stored presence history, which `audit verify` compares with the log and a rebuild
/// restores.
async fn a_rental_older_than_memory_is_metered_from_the_stored_history(db: &TestDb) {
    const DAYS: i64 = 45;
    const ONLINE_PER_DAY: i64 = 8 * 3_600;
    let clock = manual_clock();
    let store = db.open_with_clock(clock.clone()).await;
    let provider_id = provider(1);
    let machine_id = Uuid::now_v7();
    let machine = format!("machine-{machine_id}");
    let began = clock.now();
    let registered = FleetEvent::MachineRegistered(MachineRegistered {
        machine_id,
        provider_id,
        host: HostInfo::named("rig"),
        agent_version: "1".to_owned(),
        simulated: false,
        gpu_count: 1,
        detected_at: began,
    });
    append_at(&store, &machine, DomainEvent::Fleet(registered)).await;
    let started = RentalStarted {
        rental_id: Uuid::now_v7(),
        renter_id: Uuid::from_u128(99),
        provider_id,
        machine_id,
        gpu_uuids: vec![format!("GPU-{machine_id}")],
        model_id: "h100-80gb".to_owned(),
        price_per_gpu_hour: Usdc::from_micros(3_600_000),
        started_at: began,
        workload: None,
    };
    let rental_id = started.rental_id;
    append_at(
        &store,
        &format!("rental-{rental_id}"),
        DomainEvent::Rental(RentalEvent::Started(started)),
    )
    .await;
    // Online eight hours a day, for 45 days.
    for day in 0..DAYS {
        clock.set(Timestamp::from_unix_micros(
            began.unix_micros() + day * MICROS_PER_DAY,
        ));
        let online = FleetEvent::MachineOnline(MachineOnline {
            machine_id,
            provider_id,
            at: clock.now(),
        });
        append_at(&store, &machine, DomainEvent::Fleet(online)).await;
        let last_heartbeat_at = clock.advance_seconds(ONLINE_PER_DAY);
        let detected_at = clock.advance_seconds(60);
        let offline = FleetEvent::MachineOffline(MachineOffline {
            machine_id,
            provider_id,
            last_heartbeat_at,
            detected_at,
            grace_seconds: 60,
        });
        append_at(&store, &machine, DomainEvent::Fleet(offline)).await;
    }
    clock.advance_seconds(3_600);

    // Memory forgot the first two weeks, so it cannot answer for the rental.
    let models = ReadModels::load(&store).await.unwrap();
    let forgotten = models.with_fleet(|f| {
        let m = f.machine(&machine_id).unwrap();
        (m.transitions.len(), m.transitions_cover(began))
    });
    assert!(forgotten.0 < 2 * DAYS as usize, "{forgotten:?}");
    assert!(!forgotten.1, "memory still holds the rental's start");
    let stored = store
        .machine_transitions(machine_id, began, models.position())
        .await
        .unwrap();
    assert_eq!(stored.len(), 2 * DAYS as usize);

    // A counter of more than the rental's whole length is billed for the time it was online.
    let exec = Executor::new(&store, &models);
    let delivered = gpunex_app::rentals::meter(
        &exec,
        FeeSchedule::default(),
        Uuid::now_v7(),
        &gpunex_tests::actor(),
        rental_id,
        u64::try_from(DAYS * 86_400).unwrap(),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(delivered.position.is_some(), "{delivered:?}");
    let rental = gpunex_app::rentals::rental_of(&store, &models, rental_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        rental.meter.gpu_seconds,
        u64::try_from(DAYS * ONLINE_PER_DAY).unwrap()
    );

    // `audit verify` compares every stored transition; one deleted and one edited are found,
    // and a rebuild restores them.
    store.run_projections().await.unwrap();
    let report = store.audit(&|_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.presence_checked, 2 * DAYS as u64);
    assert_eq!(
        report.presence_checkpoint,
        store.head_position().await.unwrap()
    );
    // The first transition is the log's third event (after the registration and the rental).
    let delete = "DELETE FROM presence_transitions WHERE position = 3";
    let edit_sqlite = "UPDATE presence_transitions SET online = 1 - online \
                       WHERE position = (SELECT MAX(position) FROM presence_transitions)";
    let edit_postgres = "UPDATE presence_transitions SET online = NOT online \
                         WHERE position = (SELECT MAX(position) FROM presence_transitions)";
    db.execute_raw(&[delete, edit_sqlite], &[delete, edit_postgres])
        .await;
    let report = store.audit(&|_| {}).await.unwrap();
    let found: Vec<(Option<String>, Option<String>)> = report
        .findings
        .iter()
        .filter_map(|f| match f {
            AuditFinding::PresenceMismatch {
                stored, replayed, ..
            } => Some((stored.clone(), replayed.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 2, "{:?}", report.findings);
    assert!(found[0].0.is_none() && found[0].1.as_deref().unwrap().contains("online"));
    assert!(found[1].0.as_deref().unwrap().contains(" online at "));
    assert!(found[1].1.as_deref().unwrap().contains(" offline at "));
    store.rebuild_projections(&|_| {}).await.unwrap();
    let report = store.audit(&|_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.presence_checked, 2 * DAYS as u64);
}
