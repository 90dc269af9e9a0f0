//! The presence watchdog's outage record across a failure, on both databases: a pass that
//! stores a platform outage and then fails to move the liveness tick leaves the tick where it
//! was, so the next pass finds the same gap; the outage, whose id derives from where it began,
//! is stored once with what the first pass saw, and the tick then moves. The failure is real: a
//! trigger on the liveness table refuses the tick's write, as a lost connection would.

use gpunex_app::ReadModels;
use gpunex_app::presence::{FleetConfig, OUTAGE_STREAM, watch_once};
use gpunex_domain::StreamId;
use gpunex_domain::clock::Clock;
use gpunex_store::Store;
use gpunex_store::fleet::Heartbeat;
use gpunex_tests::{TestDb, conformance, manual_clock, provider};
use uuid::Uuid;

conformance!(
    an_outage_stored_before_a_failed_tick_is_kept_once,
    heartbeats_recorded_together_are_each_recorded,
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
