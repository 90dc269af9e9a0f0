//! The marketplace over real HTTP, on SQLite and PostgreSQL: prices (history, effective times,
//! bad input), availability schedules and maintenance hiding GPUs, delisting, search filters,
//! sorts and cursor pages, the rank breakdown, and changes showing in search within a second.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use uuid::Uuid;

conformance!(
    prices_schedules_and_maintenance_decide_what_is_listed,
    search_filters_sorts_pages_and_ranks,
    rentals_lock_the_price_and_never_double_book,
    agents_run_jobs_and_report_how_they_end,
    a_rental_on_a_silent_machine_ends_at_its_last_heartbeat,
    price_recommendations_follow_the_market_and_say_when_they_fall_back,
    a_rental_of_the_documented_maximum_of_gpus_starts_and_ends,
    a_price_history_older_than_memory_is_served_whole_from_the_store
);

mod common;

async fn call(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, body) = common::request(base, method, path, token, body).await;
    (status, body)
}

fn entry(model: &str, quantity: u32, country: &str, region: &str) -> Value {
    json!({
        "model": model, "quantity": quantity, "system_ram_gb": 1024,
        "upload_gbps": "10", "download_gbps": "10",
        "availability": {"kind": "always_on"},
        "location": {"city": "Somewhere", "country": country, "region": region}
    })
}

struct Host {
    provider: Uuid,
    token: String,
    agent: String,
    machine: Uuid,
    gpus: Vec<String>,
}

/// What a test host offers.
struct Spec<'a> {
    email: &'a str,
    tier: &'a str,
    model: &'a str,
    device: u16,
    vram_mib: u64,
    count: u32,
    country: &'a str,
    region: &'a str,
}

/// An approved provider with one registered, online machine of `count` GPUs of `model`.
async fn host(base: &str, admin: &str, spec: Spec<'_>) -> Host {
    let Spec {
        email,
        tier,
        model,
        device,
        vram_mib,
        count,
        country,
        region,
    } = spec;
    let (provider, token) = common::approved_provider_as(
        base,
        admin,
        email,
        json!([entry(model, count, country, region)]),
        tier,
    )
    .await;
    let (machine, agent) = common::agent_token(base, &token).await;
    let gpus: Vec<Value> = (0..count)
        .map(|i| {
            json!({
                "gpu_uuid": format!("GPU-{}-{i:04x}", &machine.simple().to_string()[..20]),
                "index": i, "name": "NVIDIA GPU", "pci_device_id": device, "pci_bus_id": null,
                "vram_mib": vram_mib, "driver_version": "550.54.15", "cuda_driver_version": "12.4",
                "pcie_current": {"generation": 4, "width": 16}, "pcie_max": {"generation": 4, "width": 16},
                "power_limit_w": null, "default_power_limit_w": null, "ecc_enabled": null, "mig_enabled": null
            })
        })
        .collect();
    let uuids: Vec<String> = gpus
        .iter()
        .map(|g| g["gpu_uuid"].as_str().unwrap().to_owned())
        .collect();
    let registration = json!({"events": [{
        "event_id": Uuid::now_v7(), "occurred_at": chrono::Utc::now().to_rfc3339(), "kind": "registration",
        "body": {"machine_id": machine, "agent_version": "test", "simulated": false,
                 "host": {"hostname": email, "cpu_model": null, "cpu_cores": null, "ram_mib": null,
                          "disk_total_gib": null, "disk_free_gib": null, "os": null, "kernel": null},
                 "gpus": gpus}
    }]});
    let (status, answer) = call(
        base,
        "POST",
        "/v1/agent/events",
        Some(&agent),
        Some(registration),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let beat = json!({"machine_id": machine, "gpus": []});
    let (status, ack) = call(
        base,
        "POST",
        "/v1/agent/heartbeat",
        Some(&agent),
        Some(beat),
    )
    .await;
    assert_eq!(
        (status, ack["status"].as_str()),
        (StatusCode::OK, Some("online"))
    );
    Host {
        provider,
        token,
        agent,
        machine,
        gpus: uuids,
    }
}

async fn set_price(base: &str, h: &Host, model: &str, price: &str) -> (StatusCode, Value) {
    call(
        base,
        "POST",
        &format!("/v1/providers/{}/prices", h.provider),
        Some(&h.token),
        Some(json!({"model_id": model, "price_usdc": price})),
    )
    .await
}

async fn provider_listings(base: &str, h: &Host) -> Value {
    call(
        base,
        "GET",
        &format!("/v1/providers/{}/listings", h.provider),
        Some(&h.token),
        None,
    )
    .await
    .1
}

async fn search(base: &str, query: &str) -> Value {
    let (status, page) = call(base, "GET", &format!("/v1/listings{query}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page
}

fn uuids(page: &Value) -> Vec<String> {
    page["listings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["gpu_uuid"].as_str().unwrap().to_owned())
        .collect()
}

async fn prices_schedules_and_maintenance_decide_what_is_listed(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let h = host(
        &base,
        &admin,
        Spec {
            email: "h@example.com",
            tier: "community",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 2,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;

    // Online and approved, but no price yet: not listed, and the provider sees why.
    let status = provider_listings(&base, &h).await;
    assert_eq!(status["gpus"][0]["listed"], false);
    assert_eq!(status["gpus"][0]["hidden"], json!(["no_price"]));
    assert!(uuids(&search(&base, "").await).is_empty());

    // Bad prices: precise errors, nothing stored.
    let head = state.store.head_position().await.unwrap();
    for (price, code) in [
        ("-1", "price_not_positive"),
        ("0", "price_not_positive"),
        ("0.001", "price_out_of_range"),
        ("100000", "price_out_of_range"),
        ("2.1234567", "invalid_price"),
        ("two", "invalid_price"),
    ] {
        let (status, problem) = set_price(&base, &h, "h100-80gb", price).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{price}: {problem}");
        assert_eq!(problem["errors"][0]["code"], code, "{price}: {problem}");
        assert_eq!(problem["errors"][0]["field"], "/price_usdc");
    }
    let (status, problem) = set_price(&base, &h, "l40s", "1.00").await;
    assert_eq!(
        (status, problem["errors"][0]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("model_not_offered"))
    );
    let (status, problem) = set_price(&base, &h, "b300", "1.00").await;
    assert_eq!(
        (status, problem["errors"][0]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("model_not_offered"))
    );
    let (status, _) = call(&base, "POST", &format!("/v1/providers/{}/prices", h.provider), Some(&h.token),
        Some(json!({"model_id": "h100-80gb", "price_usdc": "2", "effective_at": "2020-01-01T00:00:00Z"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let other = host(
        &base,
        &admin,
        Spec {
            email: "o@example.com",
            tier: "community",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 1,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;
    let (status, _) = call(
        &base,
        "POST",
        &format!("/v1/providers/{}/prices", h.provider),
        Some(&other.token),
        Some(json!({"model_id": "h100-80gb", "price_usdc": "2"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let after_other = state.store.head_position().await.unwrap();
    assert!(after_other > head, "the second host registered");
    let (_, prices) = call(
        &base,
        "GET",
        &format!("/v1/providers/{}/prices", h.provider),
        Some(&h.token),
        None,
    )
    .await;
    assert_eq!(prices["models"], json!([]), "nothing stored for h");

    // A price (by name, any case): listed at once, in search.
    let started = Instant::now();
    let (status, prices) = set_price(&base, &h, "NVIDIA H100 80GB", "2.5").await;
    assert_eq!(status, StatusCode::OK, "{prices}");
    assert_eq!(prices["models"][0]["current"]["price_usdc"], "2.500000");
    let page = search(&base, "").await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(uuids(&page).len(), 2);
    assert_eq!(page["listings"][0]["price_micro_usdc"], 2_500_000);
    assert_eq!(page["listings"][0]["gpus_on_machine"], 2);

    // A later price is history until it takes effect; a new price now shows within a second.
    let later = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let (status, prices) = call(
        &base,
        "POST",
        &format!("/v1/providers/{}/prices", h.provider),
        Some(&h.token),
        Some(json!({"model_id": "h100-80gb", "price_usdc": "3.10", "effective_at": later})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{prices}");
    assert_eq!(prices["models"][0]["current"]["price_usdc"], "2.500000");
    assert_eq!(prices["models"][0]["history"].as_array().unwrap().len(), 2);
    let started = Instant::now();
    set_price(&base, &h, "h100-80gb", "2.25").await;
    loop {
        if search(&base, "?sort=price").await["listings"][0]["price_usdc"] == "2.250000" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "price change not visible within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Schedules: unknown zones, inverted and overlapping windows are refused.
    let path = format!("/v1/providers/{}/availability", h.provider);
    for (availability, code) in [
        (
            json!({"kind": "weekly", "time_zone": "Mars/Olympus", "windows": [{"day": "monday", "start_minute": 0, "end_minute": 60}]}),
            "unknown_time_zone",
        ),
        (
            json!({"kind": "weekly", "time_zone": "Europe/Madrid", "windows": [{"day": "monday", "start_minute": 600, "end_minute": 60}]}),
            "invalid_schedule",
        ),
        (
            json!({"kind": "weekly", "time_zone": "Europe/Madrid", "windows": [{"day": "monday", "start_minute": 0, "end_minute": 600}, {"day": "monday", "start_minute": 500, "end_minute": 700}]}),
            "invalid_schedule",
        ),
    ] {
        let (status, problem) = call(
            &base,
            "POST",
            &path,
            Some(&h.token),
            Some(json!({"availability": availability})),
        )
        .await;
        assert_eq!(
            (status, problem["errors"][0]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some(code)),
            "{problem}"
        );
    }
    // Open every day but today (in UTC): hidden now; the whole of today too: listed.
    let today = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ][chrono::Datelike::weekday(&chrono::Utc::now()).num_days_from_monday() as usize];
    let days: Vec<&str> = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ]
    .into_iter()
    .filter(|d| *d != today)
    .collect();
    let windows: Vec<Value> = days
        .iter()
        .map(|d| json!({"day": d, "start_minute": 0, "end_minute": 1440}))
        .collect();
    let (status, view) = call(
        &base,
        "POST",
        &path,
        Some(&h.token),
        Some(json!({"availability": {"kind": "weekly", "time_zone": "UTC", "windows": windows}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["open_now"], false);
    // Over the next 7 days it lists from tomorrow's midnight until today's next week (UTC).
    let midnight = chrono::Utc::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let instant = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    assert_eq!(
        view["upcoming"],
        json!([{
            "from": instant(midnight + chrono::Days::new(1)),
            "until": instant(midnight + chrono::Days::new(7)),
        }])
    );
    assert!(!uuids(&search(&base, "").await).contains(&h.gpus[0]));
    assert_eq!(
        provider_listings(&base, &h).await["gpus"][0]["hidden"],
        json!(["outside_availability"])
    );
    let (_, view) = call(&base, "POST", &path, Some(&h.token),
        Some(json!({"availability": {"kind": "weekly", "time_zone": "UTC", "windows": [{"day": today, "start_minute": 0, "end_minute": 1440}]}}))).await;
    assert_eq!(view["open_now"], true);
    assert_eq!(view["upcoming"].as_array().unwrap().len(), 2, "{view}");
    assert_eq!(
        view["upcoming"][0]["until"],
        json!(instant(midnight + chrono::Days::new(1)))
    );
    assert_eq!(
        view["upcoming"][1]["from"],
        json!(instant(midnight + chrono::Days::new(7)))
    );
    assert!(uuids(&search(&base, "").await).contains(&h.gpus[0]));

    // Maintenance now, on this machine: hidden; cancelled: back.
    let now = chrono::Utc::now();
    let mpath = format!("/v1/providers/{}/maintenance", h.provider);
    let (status, problem) = call(&base, "POST", &mpath, Some(&h.token), Some(json!({
        "from": (now + chrono::Duration::hours(2)).to_rfc3339(), "until": (now + chrono::Duration::hours(1)).to_rfc3339(), "reason": "PSU"
    }))).await;
    assert_eq!(
        (status, problem["errors"][0]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_maintenance"))
    );
    let (status, maintenance) = call(&base, "POST", &mpath, Some(&h.token), Some(json!({
        "machine_id": h.machine, "from": now.to_rfc3339(), "until": (now + chrono::Duration::hours(1)).to_rfc3339(), "reason": "PSU swap"
    }))).await;
    assert_eq!(status, StatusCode::CREATED, "{maintenance}");
    assert_eq!(maintenance["active_now"], true);
    assert!(!uuids(&search(&base, "").await).contains(&h.gpus[0]));
    assert_eq!(
        provider_listings(&base, &h).await["gpus"][0]["hidden"],
        json!(["maintenance"])
    );
    let id = maintenance["maintenance_id"].as_str().unwrap();
    let (status, _) = call(
        &base,
        "POST",
        &format!("{mpath}/{id}/cancel"),
        Some(&h.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(uuids(&search(&base, "").await).contains(&h.gpus[0]));
    let (status, _) = call(
        &base,
        "POST",
        &format!("{mpath}/{id}/cancel"),
        Some(&h.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Delisted by an operator: hidden, with the reason; relisted: back.
    let (status, delisted) = call(
        &base,
        "POST",
        &format!("/v1/gpus/{}/delist", h.gpus[1]),
        Some(&admin),
        Some(json!({"reason": "failed memory test"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{delisted}");
    assert_eq!(delisted["hidden"], json!(["delisted"]));
    assert_eq!(
        search(&base, "").await["listings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["machine_id"] == json!(h.machine))
            .count(),
        1
    );
    let (status, _) = call(
        &base,
        "POST",
        &format!("/v1/gpus/{}/delist", h.gpus[1]),
        Some(&h.token),
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    call(
        &base,
        "POST",
        &format!("/v1/gpus/{}/relist", h.gpus[1]),
        Some(&admin),
        Some(json!({"reason": "passed"})),
    )
    .await;
    assert_eq!(
        search(&base, "").await["listings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["machine_id"] == json!(h.machine))
            .count(),
        2
    );

    // Offline (the watchdog): out of search within a second of the event.
    let config = gpunex_api::fleet::FleetConfig {
        heartbeat_interval: Duration::from_millis(100),
        offline_grace: Duration::from_millis(300),
        ..gpunex_api::fleet::FleetConfig::default()
    };
    let watchdog = tokio::spawn(gpunex_api::fleet::run_watchdog(
        state.store.clone(),
        state.credentials.clone(),
        config,
    ));
    let mut offline_seen = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let machine = call(
            &base,
            "GET",
            &format!("/v1/machines/{}", h.machine),
            Some(&admin),
            None,
        )
        .await
        .1;
        if machine["status"] == "offline" && offline_seen.is_none() {
            offline_seen = Some(Instant::now());
        }
        if !uuids(&search(&base, "").await).contains(&h.gpus[0]) {
            break;
        }
        assert!(Instant::now() < deadline, "never went offline");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let offline_seen = offline_seen.unwrap_or_else(Instant::now);
    assert!(offline_seen.elapsed() < Duration::from_secs(1));
    watchdog.abort();
    let _ = (h.agent, other.agent);
}

async fn search_filters_sorts_pages_and_ranks(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    // Three hosts: enterprise H100 x4 in Hesse at 2.00, community H100 x1 in Hesse at 3.00,
    // community L40S x2 in Texas at 1.00.
    let a = host(
        &base,
        &admin,
        Spec {
            email: "a@example.com",
            tier: "enterprise",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 4,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;
    let b = host(
        &base,
        &admin,
        Spec {
            email: "b@example.com",
            tier: "community",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 1,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;
    let c = host(
        &base,
        &admin,
        Spec {
            email: "c@example.com",
            tier: "community",
            model: "l40s",
            device: 0x26b9,
            vram_mib: 46_068,
            count: 2,
            country: "US",
            region: "Texas",
        },
    )
    .await;
    set_price(&base, &a, "h100-80gb", "2.00").await;
    set_price(&base, &b, "h100-80gb", "3.00").await;
    set_price(&base, &c, "l40s", "1.00").await;

    let all = search(&base, "").await;
    assert_eq!(uuids(&all).len(), 7);
    // Rank: a (enterprise, below the Hesse H100 median of 2.00... it is the median) first.
    assert_eq!(all["listings"][0]["provider_id"], json!(a.provider));
    let by_price = search(&base, "?sort=price").await;
    let prices: Vec<&str> = by_price["listings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["price_usdc"].as_str().unwrap())
        .collect();
    assert_eq!(
        prices,
        [
            "1.000000", "1.000000", "2.000000", "2.000000", "2.000000", "2.000000", "3.000000"
        ]
    );
    // Perf per dollar: H100 989 TFLOPS at 2.00 (494.5/USDC) beats L40S 362 at 1.00.
    let ppd = search(&base, "?sort=perf_per_dollar").await;
    assert_eq!(ppd["listings"][0]["provider_id"], json!(a.provider));
    assert_eq!(ppd["listings"][0]["tflops_per_usdc_hour"], "494.500");
    assert_eq!(ppd["listings"][6]["provider_id"], json!(b.provider));

    // Each provider sees where its GPUs stand in a search for their model (rank order).
    let h100 = uuids(&search(&base, "?model=h100-80gb").await);
    for host in [&a, &b] {
        for gpu in provider_listings(&base, host).await["gpus"]
            .as_array()
            .unwrap()
        {
            let uuid = gpu["gpu_uuid"].as_str().unwrap();
            let place = h100.iter().position(|u| u == uuid).unwrap() + 1;
            assert_eq!(gpu["search_place"], json!(place), "{gpu}");
            assert_eq!(gpu["model_listed"], json!(h100.len()));
        }
    }

    // Filters.
    assert_eq!(uuids(&search(&base, "?model=l40s").await).len(), 2);
    assert_eq!(
        uuids(&search(&base, "?model=NVIDIA%20H100%2080GB&max_price_usdc=2.5").await).len(),
        4
    );
    assert_eq!(uuids(&search(&base, "?min_vram_gb=80").await).len(), 5);
    assert_eq!(uuids(&search(&base, "?country=us").await).len(), 2);
    assert_eq!(
        uuids(&search(&base, "?region=hesse&tier=community").await),
        b.gpus
    );
    assert_eq!(uuids(&search(&base, "?min_gpus=2").await).len(), 6);
    assert_eq!(
        uuids(&search(&base, "?min_gpus=4&model=h100-80gb").await).len(),
        4
    );
    assert_eq!(
        uuids(&search(&base, "?min_reliability=0.5").await).len(),
        0,
        "no reliability scores yet"
    );
    for (query, field) in [
        ("?model=b300", "model"),
        ("?max_price_usdc=-1", "max_price_usdc"),
        ("?tier=gold", "tier"),
        ("?sort=random", "sort"),
        ("?limit=1000", "limit"),
        ("?min_reliability=2", "min_reliability"),
        ("?after=garbage", "after"),
        ("?colour=red", "colour"),
    ] {
        let (status, problem) =
            call(&base, "GET", &format!("/v1/listings{query}"), None, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(problem["errors"][0]["field"], field, "{query}: {problem}");
    }

    // Cursor pages: every listing once, in order, whatever the page size.
    for sort in ["rank", "price", "perf_per_dollar"] {
        let full = uuids(&search(&base, &format!("?sort={sort}")).await);
        let mut paged = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let query = match &after {
                Some(cursor) => format!("?sort={sort}&limit=3&after={cursor}"),
                None => format!("?sort={sort}&limit=3"),
            };
            let page = search(&base, &query).await;
            paged.extend(uuids(&page));
            match page["next_after"].as_str() {
                Some(cursor) => after = Some(cursor.to_owned()),
                None => break,
            }
        }
        assert_eq!(paged, full, "{sort}");
    }
    let (status, _) = call(
        &base,
        "GET",
        &format!("/v1/listings?sort=price&after={}", "rank:0:GPU-00"),
        None,
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a cursor from another sort is refused"
    );

    // The rank breakdown adds up, following the documented formula.
    let (status, detail) = call(
        &base,
        "GET",
        &format!("/v1/listings/{}", b.gpus[0]),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let r = &detail["rank"];
    assert_eq!(
        r["median_price_usdc"], "2.000000",
        "median of the Hesse H100s (2,2,2,2,3)"
    );
    assert_eq!(r["price_points"], 0, "1.5 x the median or more");
    assert_eq!(r["tier_points"], 0);
    assert_eq!(r["commitment_points"], 750, "12 of 24 months");
    assert_eq!(r["reliability_points"], Value::Null);
    let total = [
        "uptime_points",
        "price_points",
        "tier_points",
        "commitment_points",
    ]
    .iter()
    .map(|k| r[k].as_u64().unwrap())
    .sum::<u64>();
    assert_eq!(r["total"].as_u64().unwrap(), total);
    let (_, ours) = call(
        &base,
        "GET",
        &format!("/v1/providers/{}/listings", a.provider),
        Some(&a.token),
        None,
    )
    .await;
    assert_eq!(ours["gpus"][0]["rank"]["tier_points"], 1_500);
    assert_eq!(ours["gpus"][0]["rank"]["price_points"], 1_500);
    let (status, _) = call(
        &base,
        "GET",
        &format!("/v1/providers/{}/listings", a.provider),
        Some(&b.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let _ = (c.agent, a.agent, b.agent);
}

/// A rental of `gpus` running a short command.
fn rent_body(gpus: Value) -> Value {
    json!({
        "gpu_uuids": gpus,
        "workload": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["sleep", "1"]}
    })
}

/// A renter token, as a new customer gets one without an admin: sign up, then issue a renter
/// token for yourself.
async fn renter(base: &str) -> String {
    let person = common::person(base, &format!("renter-{}@example.com", Uuid::now_v7())).await;
    let (status, issued) = call(
        base,
        "POST",
        "/v1/tokens",
        Some(&person),
        Some(json!({"role": {"kind": "renter"}, "label": "renter"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    issued["token"].as_str().unwrap().to_owned()
}

async fn rentals_lock_the_price_and_never_double_book(db: &TestDb) {
    let clock = gpunex_tests::manual_clock();
    let state = AppState::load(db.open_with_clock(clock.clone()).await)
        .await
        .unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let h = host(
        &base,
        &admin,
        Spec {
            email: "r@example.com",
            tier: "community",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 4,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;
    let other = host(
        &base,
        &admin,
        Spec {
            email: "s@example.com",
            tier: "community",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 1,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;
    set_price(&base, &h, "h100-80gb", "2.00").await;
    set_price(&base, &other, "h100-80gb", "2.00").await;
    let (r1, r2) = (renter(&base).await, renter(&base).await);

    // Rent two GPUs: the price in force is locked in; they leave the listings.
    let (status, rental) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&r1),
        Some(rent_body(json!([h.gpus[0], h.gpus[1]]))),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{rental}");
    assert_eq!(rental["price_per_gpu_hour_usdc"], "2.000000");
    assert_eq!(rental["status"], "active");
    let listed = uuids(&search(&base, "").await);
    assert!(
        !listed.contains(&h.gpus[0]) && !listed.contains(&h.gpus[1]) && listed.contains(&h.gpus[2])
    );
    assert_eq!(
        provider_listings(&base, &h).await["gpus"][0]["hidden"],
        json!(["rented"])
    );
    // A later price change does not touch it.
    set_price(&base, &h, "h100-80gb", "3.00").await;
    let id = rental["rental_id"].as_str().unwrap().to_owned();
    let (_, again) = call(&base, "GET", &format!("/v1/rentals/{id}"), Some(&r1), None).await;
    assert_eq!(again["price_per_gpu_hour_micro_usdc"], 2_000_000);
    assert_eq!(
        call(
            &base,
            "GET",
            &format!("/v1/rentals/{id}"),
            Some(&h.token),
            None
        )
        .await
        .0,
        StatusCode::OK
    );
    assert_eq!(
        call(&base, "GET", &format!("/v1/rentals/{id}"), Some(&r2), None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );

    // Taken, unknown, mixed, malformed: clean refusals, nothing written.
    let head = state.store.head_position().await.unwrap();
    for (gpus, status, code) in [
        (
            json!([h.gpus[1]]),
            StatusCode::CONFLICT,
            "gpu_not_available",
        ),
        (
            json!(["GPU-00000000"]),
            StatusCode::CONFLICT,
            "gpu_not_available",
        ),
        (
            json!([h.gpus[2], other.gpus[0]]),
            StatusCode::BAD_REQUEST,
            "mixed_machines",
        ),
        (
            json!([h.gpus[2], h.gpus[2]]),
            StatusCode::BAD_REQUEST,
            "invalid_gpus",
        ),
        (json!([]), StatusCode::BAD_REQUEST, "invalid_gpus"),
    ] {
        let (got, problem) = call(
            &base,
            "POST",
            "/v1/rentals",
            Some(&r2),
            Some(rent_body(json!(gpus))),
        )
        .await;
        assert_eq!(got, status, "{problem}");
        let found = problem["code"].as_str().unwrap() == code
            || problem["errors"][0]["code"].as_str() == Some(code);
        assert!(found, "{code}: {problem}");
    }
    assert_eq!(state.store.head_position().await.unwrap(), head);
    assert_eq!(
        call(
            &base,
            "POST",
            "/v1/rentals",
            Some(&h.token),
            Some(rent_body(json!([h.gpus[2]])))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );

    // Eight renters race for one GPU: exactly one gets it.
    let mut racers = Vec::new();
    for _ in 0..8 {
        let token = renter(&base).await;
        let (base, gpu) = (base.clone(), h.gpus[3].clone());
        racers.push(tokio::spawn(async move {
            call(
                &base,
                "POST",
                "/v1/rentals",
                Some(&token),
                Some(rent_body(json!([gpu]))),
            )
            .await
            .0
        }));
    }
    let mut outcomes = Vec::new();
    for racer in racers {
        outcomes.push(racer.await.unwrap());
    }
    assert_eq!(
        outcomes
            .iter()
            .filter(|s| **s == StatusCode::CREATED)
            .count(),
        1,
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT),
        "{outcomes:?}"
    );

    // Usage, as the agent reports it: cumulative GPU-seconds, re-sent and out of order. Nothing
    // can be billed beyond the time the machine was online since the rental started (2 GPUs x
    // elapsed seconds): 3.2 s later 6 GPU-seconds are possible; the heartbeats keep going.
    clock.advance_micros(3_200_000);
    let beat = json!({"machine_id": h.machine, "gpus": []});
    call(
        &base,
        "POST",
        "/v1/agent/heartbeat",
        Some(&h.agent),
        Some(beat),
    )
    .await;
    let usage = |seconds: u64| {
        json!({
            "event_id": Uuid::now_v7(),
            "occurred_at": chrono::Utc::now().to_rfc3339(),
            "kind": "usage",
            "body": {"machine_id": h.machine, "rental_id": id, "gpu_seconds": seconds}
        })
    };
    let first = usage(2);
    let (status, answer) = call(
        &base,
        "POST",
        "/v1/agent/events",
        Some(&h.agent),
        Some(json!({"events": [first.clone(), first.clone()]})),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the same id twice in one request: {answer}"
    );
    let (status, answer) = call(
        &base,
        "POST",
        "/v1/agent/events",
        Some(&h.agent),
        Some(json!({"events": [first.clone(), usage(1), usage(5)]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let statuses: Vec<&str> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["recorded", "absorbed", "recorded"]);
    let (_, answer) = call(
        &base,
        "POST",
        "/v1/agent/events",
        Some(&h.agent),
        Some(json!({"events": [first, usage(6)]})),
    )
    .await;
    assert_eq!(answer["results"][0]["status"], "duplicate");
    assert_eq!(answer["results"][1]["status"], "recorded");
    // Another machine's agent cannot meter this rental.
    let (status, _) = call(&base, "POST", "/v1/agent/events", Some(&other.agent), Some(json!({"events": [{
        "event_id": Uuid::now_v7(), "occurred_at": chrono::Utc::now().to_rfc3339(), "kind": "usage",
        "body": {"machine_id": other.machine, "rental_id": id, "gpu_seconds": 99_999}
    }]}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    state.store.run_projections().await.unwrap();
    let (_, accounts) = call(&base, "GET", "/v1/ledger/accounts", Some(&admin), None).await;
    let balance = |name: String| {
        accounts["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["account"] == name.as_str())
            .map(|a| a["balance_micro_usdc"].as_i64().unwrap())
    };
    let renter_id = rental["renter_id"].as_str().unwrap();
    // At 2.00 USDC per GPU-hour the cumulative totals are round(2,000,000 x S / 3,600) for S = 2,
    // 5, 6: 1,111, 2,778, 3,333, so the charges are 1,111 + 1,667 + 555 = 3,333. Fees, floor(20%)
    // of each: 222 + 333 + 111 = 666; the provider's net 2,667.
    assert_eq!(
        balance(format!("renter_receivable:{renter_id}")),
        Some(3_333)
    );
    assert_eq!(balance("platform_revenue".to_owned()), Some(666));
    assert_eq!(
        balance(format!("provider_payable:{}", h.provider)),
        Some(2_667)
    );
    // No heartbeat, no meter: a counter beyond the machine's online time is billed only up to it.
    clock.advance_micros(1_100_000);
    let (_, answer) = call(
        &base,
        "POST",
        "/v1/agent/events",
        Some(&h.agent),
        Some(json!({"events": [usage(7_200)]})),
    )
    .await;
    assert_eq!(answer["results"][0]["status"], "recorded", "{answer}");
    let (_, metered) = call(&base, "GET", &format!("/v1/rentals/{id}"), Some(&r1), None).await;
    let billed = metered["gpu_seconds"].as_u64().unwrap();
    // 4.3 s since the rental began, the machine still online: 2 GPUs x 4 whole seconds.
    assert_eq!(billed, 8, "{metered}");

    // Ended by the renter: its GPUs come back; ending twice is refused.
    let (status, ended) = call(
        &base,
        "POST",
        &format!("/v1/rentals/{id}/end"),
        Some(&r1),
        Some(json!({"evidence": "done early"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(
        (ended["status"].as_str(), ended["cause"].as_str()),
        (Some("ended"), Some("renter_cancelled"))
    );
    let listed = uuids(&search(&base, "").await);
    assert!(listed.contains(&h.gpus[0]) && listed.contains(&h.gpus[1]));
    let (status, problem) = call(
        &base,
        "POST",
        &format!("/v1/rentals/{id}/end"),
        Some(&r1),
        None,
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_ended"))
    );
    let (_, mine) = call(&base, "GET", "/v1/rentals", Some(&r1), None).await;
    assert_eq!(mine.as_array().unwrap().len(), 1);
    // The released GPU can be rented again, now at the new price.
    let (status, next) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&r2),
        Some(rent_body(json!([h.gpus[0]]))),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{next}");
    assert_eq!(next["price_per_gpu_hour_usdc"], "3.000000");

    // The renter's rentals page newest first: the one that is over comes from the stored
    // rentals projection, behind the `Link` of the first page.
    let (status, _) = call(
        &base,
        "POST",
        &format!("/v1/rentals/{}/end", next["rental_id"].as_str().unwrap()),
        Some(&r2),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, newest) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&r2),
        Some(rent_body(json!([h.gpus[0]]))),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{newest}");
    let (status, headers, page) =
        common::request(&base, "GET", "/v1/rentals?limit=1", Some(&r2), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page[0]["rental_id"], newest["rental_id"]);
    assert_eq!(page.as_array().unwrap().len(), 1);
    let link = headers["link"].to_str().unwrap().to_owned();
    let target = link
        .strip_prefix('<')
        .and_then(|l| l.split_once(">; rel=\"next\""))
        .map(|(t, _)| t.to_owned())
        .unwrap_or_else(|| panic!("{link}"));
    let (status, headers, older) = common::request(&base, "GET", &target, Some(&r2), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(older.as_array().unwrap().len(), 1);
    assert_eq!(older[0]["rental_id"], next["rental_id"]);
    assert_eq!(older[0]["status"], "ended");
    assert!(headers.get("link").is_none(), "the last page has no next");
    for (query, code) in [
        ("limit=0", "out_of_range"),
        ("before=x", "invalid_cursor"),
        ("page=2", "unknown_parameter"),
    ] {
        let (status, problem) = call(
            &base,
            "GET",
            &format!("/v1/rentals?{query}"),
            Some(&r2),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(problem["errors"][0]["code"], code, "{problem}");
    }
}

fn agent_event(kind: &str, body: Value) -> Value {
    json!({"events": [{
        "event_id": Uuid::now_v7(), "occurred_at": chrono::Utc::now().to_rfc3339(),
        "kind": kind, "body": body
    }]})
}

async fn assignments(base: &str, h: &Host, query: &str) -> Value {
    let (status, answer) = call(
        base,
        "GET",
        &format!("/v1/agent/assignments{query}"),
        Some(&h.agent),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

async fn agents_run_jobs_and_report_how_they_end(db: &TestDb) {
    let clock = gpunex_tests::manual_clock();
    let state = AppState::load(db.open_with_clock(clock.clone()).await)
        .await
        .unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let spec = |email, count| Spec {
        email,
        tier: "enterprise",
        model: "h100-80gb",
        device: 0x2330,
        vram_mib: 81_559,
        count,
        country: "DE",
        region: "Hesse",
    };
    let h = host(&base, &admin, spec("jobs@example.com", 4)).await;
    let small = host(&base, &admin, spec("small@example.com", 1)).await;
    set_price(&base, &h, "h100-80gb", "2.00").await;
    set_price(&base, &small, "h100-80gb", "1.00").await;
    let r = renter(&base).await;
    let workload = json!({"image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["python", "train.py"],
                          "env": {"EPOCHS": "1"}});

    // By filter: the best-ranked machine with two matching GPUs listed (the cheaper host has one).
    let head = state.store.head_position().await.unwrap();
    for (body, status, code) in [
        (
            json!({"gpus": 2, "filter": {"model": "h100-80gb", "colour": "red"}, "workload": workload}),
            StatusCode::BAD_REQUEST,
            "unknown_parameter",
        ),
        (
            json!({"gpus": 5, "filter": {"model": "h100-80gb"}, "workload": workload}),
            StatusCode::CONFLICT,
            "no_match",
        ),
        (
            json!({"gpus": 2, "filter": {}, "gpu_uuids": [h.gpus[0]], "workload": workload}),
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
        (
            json!({"gpus": 2, "filter": {}, "workload": {"image": "nvidia/cuda", "env": {"CUDA_VISIBLE_DEVICES": "0"}}}),
            StatusCode::BAD_REQUEST,
            "invalid_workload",
        ),
        (
            json!({"gpu_uuids": [h.gpus[0]]}),
            StatusCode::BAD_REQUEST,
            "missing_field",
        ),
    ] {
        let (got, problem) = call(&base, "POST", "/v1/rentals", Some(&r), Some(body)).await;
        assert_eq!(got, status, "{problem}");
        let found = problem["code"].as_str() == Some(code)
            || problem["errors"][0]["code"].as_str() == Some(code);
        assert!(found, "{code}: {problem}");
    }
    assert_eq!(state.store.head_position().await.unwrap(), head);
    let (status, rental) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&r),
        Some(json!({"gpus": 2, "filter": {"model": "h100-80gb", "country": "de"}, "workload": workload})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{rental}");
    assert_eq!(rental["machine_id"], json!(h.machine));
    assert_eq!(rental["job_status"], "pending");
    let id = rental["rental_id"].as_str().unwrap().to_owned();
    let gpus: Vec<String> = serde_json::from_value(rental["gpu_uuids"].clone()).unwrap();

    // The agent learns it, with the workload and only the rented GPUs; another agent does not.
    let first = assignments(&base, &h, "").await;
    assert_eq!(first["assignments"].as_array().unwrap().len(), 1);
    let assignment = &first["assignments"][0];
    assert_eq!(assignment["rental_id"], json!(id));
    assert_eq!(assignment["gpu_uuids"], json!(gpus));
    assert_eq!(
        assignment["workload"]["command"],
        json!(["python", "train.py"])
    );
    assert_eq!(
        (
            assignment["status"].as_str(),
            assignment["job_started"].as_bool()
        ),
        (Some("active"), Some(false))
    );
    assert_eq!(
        assignments(&base, &small, "").await["assignments"],
        json!([])
    );
    let (status, _) = call(
        &base,
        "GET",
        "/v1/agent/assignments?wait_seconds=99",
        Some(&h.agent),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The job starts, then completes: the final counter is metered and the rental ends
    // `completed`, its GPUs listed again.
    let (status, answer) = call(&base, "POST", "/v1/agent/events", Some(&h.agent), Some(agent_event(
        "job_started", json!({"machine_id": h.machine, "rental_id": id, "runtime": "process", "handle": "4242"}),
    ))).await;
    assert_eq!(
        (status, answer["results"][0]["status"].as_str()),
        (StatusCode::OK, Some("recorded")),
        "{answer}"
    );
    let (_, running) = call(&base, "GET", &format!("/v1/rentals/{id}"), Some(&r), None).await;
    assert_eq!(running["job_status"], "running");
    clock.advance_micros(1_100_000);
    let ended = agent_event(
        "job_ended",
        json!({"machine_id": h.machine, "rental_id": id, "cause": "completed",
        "evidence": {"exit_code": 0, "signal": null, "gpu_uuid": null, "condition": null, "detail": ""},
        "gpu_seconds": 2}),
    );
    let (status, answer) = call(
        &base,
        "POST",
        "/v1/agent/events",
        Some(&h.agent),
        Some(ended.clone()),
    )
    .await;
    assert_eq!(
        (status, answer["results"][0]["status"].as_str()),
        (StatusCode::OK, Some("recorded")),
        "{answer}"
    );
    let (_, again) = call(
        &base,
        "POST",
        "/v1/agent/events",
        Some(&h.agent),
        Some(ended),
    )
    .await;
    assert_eq!(again["results"][0]["status"], "duplicate");
    let (_, done) = call(&base, "GET", &format!("/v1/rentals/{id}"), Some(&r), None).await;
    assert_eq!(
        (done["status"].as_str(), done["cause"].as_str()),
        (Some("ended"), Some("completed")),
        "{done}"
    );
    assert_eq!(
        (
            done["job_status"].as_str(),
            done["job_evidence"]["exit_code"].as_i64()
        ),
        (Some("ended"), Some(0))
    );
    // 2 GPU-seconds at 2.00/h: round(1,111.1) = 1,111 micro-USDC.
    assert_eq!(
        (
            done["gpu_seconds"].as_u64(),
            done["charged_micro_usdc"].as_i64()
        ),
        (Some(2), Some(1_111))
    );
    let listed = uuids(&search(&base, "").await);
    assert!(gpus.iter().all(|g| listed.contains(g)));
    assert_eq!(assignments(&base, &h, "").await["assignments"], json!([]));

    // Earned at the Enterprise rate (15%): fee floor(1,111 x 0.15) = 166, net 945, shared by the
    // two GPUs as 473 + 472.
    let earnings_path = format!("/v1/providers/{}/earnings", h.provider);
    let (status, earned) = call(&base, "GET", &earnings_path, Some(&h.token), None).await;
    assert_eq!(status, StatusCode::OK, "{earned}");
    assert_eq!(
        (
            earned["all_time"]["fee_micro_usdc"].as_i64(),
            earned["all_time"]["net_micro_usdc"].as_i64()
        ),
        (Some(166), Some(945))
    );
    let shares: Vec<i64> = earned["per_gpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["totals"]["net_micro_usdc"].as_i64().unwrap())
        .collect();
    assert_eq!(shares.iter().sum::<i64>(), 945);
    assert!(shares.contains(&473) && shares.contains(&472), "{shares:?}");
    // Per day and per GPU (the console's chart): the same split, day by day. Yesterday and today
    // in the provider's zone (UTC here), so a run across midnight still sees every line.
    let today = chrono::Utc::now().date_naive();
    let yesterday = today.pred_opt().unwrap();
    let (status, daily) = call(
        &base,
        "GET",
        &format!("{earnings_path}/daily?from={yesterday}&to={today}&by=gpu"),
        Some(&h.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{daily}");
    let mut by_gpu: std::collections::BTreeMap<String, i64> = Default::default();
    for day in daily["days"].as_array().unwrap() {
        let split: i64 = day["per_gpu"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                *by_gpu
                    .entry(g["gpu_uuid"].as_str().unwrap().to_owned())
                    .or_default() += g["totals"]["net_micro_usdc"].as_i64().unwrap();
                g["totals"]["net_micro_usdc"].as_i64().unwrap()
            })
            .sum();
        assert_eq!(
            Some(split),
            day["totals"]["net_micro_usdc"].as_i64(),
            "{day}"
        );
    }
    let mut daily_shares: Vec<i64> = by_gpu.into_values().collect();
    let mut month_shares = shares.clone();
    daily_shares.sort_unstable();
    month_shares.sort_unstable();
    assert_eq!(daily_shares, month_shares);
    let (status, plain) = call(
        &base,
        "GET",
        &format!("{earnings_path}/daily?from={yesterday}&to={today}"),
        Some(&h.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(plain["days"][0].get("per_gpu").is_none(), "{plain}");
    for (query, code) in [
        (
            format!("from={yesterday}&to={today}&by=model"),
            "invalid_value",
        ),
        (
            "from=2026-01-01&to=2026-06-30&by=gpu".to_owned(),
            "invalid_range",
        ),
    ] {
        let (status, problem) = call(
            &base,
            "GET",
            &format!("{earnings_path}/daily?{query}"),
            Some(&h.token),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {problem}");
        assert_eq!(
            problem["errors"][0]["code"].as_str(),
            Some(code),
            "{problem}"
        );
    }
    for (query, token, status, code) in [
        (
            "?tz=Mars/Olympus",
            &h.token,
            StatusCode::BAD_REQUEST,
            "unknown_time_zone",
        ),
        (
            "?from=2026-01-10&to=2026-01-01",
            &h.token,
            StatusCode::BAD_REQUEST,
            "invalid_range",
        ),
        (
            "?from=2026-01-10",
            &h.token,
            StatusCode::BAD_REQUEST,
            "invalid_range",
        ),
        (
            "?from=2026-13-01&to=2026-12-01",
            &h.token,
            StatusCode::BAD_REQUEST,
            "invalid_date",
        ),
        ("", &small.token, StatusCode::FORBIDDEN, "other_provider"),
        ("", &r, StatusCode::FORBIDDEN, "forbidden"),
    ] {
        let (got, problem) = call(
            &base,
            "GET",
            &format!("{earnings_path}{query}"),
            Some(token),
            None,
        )
        .await;
        assert_eq!(got, status, "{query}: {problem}");
        let found = problem["code"].as_str() == Some(code)
            || problem["errors"][0]["code"].as_str() == Some(code);
        assert!(found, "{code}: {problem}");
    }
    let (status, _) = call(
        &base,
        "GET",
        &format!("{earnings_path}/daily"),
        Some(&h.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(
        &base,
        "GET",
        &format!("/v1/providers/{}/earnings", Uuid::now_v7()),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Long poll: the agent waits; a new rental wakes it at once.
    let since = assignments(&base, &h, "").await["version"]
        .as_str()
        .unwrap()
        .to_owned();
    let poll = {
        let (base, agent) = (base.clone(), h.agent.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let (_, answer) = call(
                &base,
                "GET",
                &format!("/v1/agent/assignments?since={since}&wait_seconds=20"),
                Some(&agent),
                None,
            )
            .await;
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, cancelled) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&r),
        Some(rent_body(json!([h.gpus[3]]))),
    )
    .await;
    let cancel_id = cancelled["rental_id"].as_str().unwrap().to_owned();
    let (woken, waited) = poll.await.unwrap();
    assert_eq!(woken["assignments"][0]["rental_id"], json!(cancel_id));
    assert!(waited < Duration::from_secs(10), "{waited:?}");

    // The renter cancels a running job: the agent is told to stop it and reports the cause.
    call(&base, "POST", "/v1/agent/events", Some(&h.agent), Some(agent_event(
        "job_started", json!({"machine_id": h.machine, "rental_id": cancel_id, "runtime": "process", "handle": "4243"}),
    ))).await;
    call(
        &base,
        "POST",
        &format!("/v1/rentals/{cancel_id}/end"),
        Some(&r),
        None,
    )
    .await;
    let told = assignments(&base, &h, "").await;
    assert_eq!(
        (
            told["assignments"][0]["status"].as_str(),
            told["assignments"][0]["end_cause"].as_str()
        ),
        (Some("ended"), Some("renter_cancelled")),
        "{told}"
    );
    let (_, answer) = call(&base, "POST", "/v1/agent/events", Some(&h.agent), Some(agent_event(
        "job_ended", json!({"machine_id": h.machine, "rental_id": cancel_id, "cause": "renter_cancelled",
            "evidence": {"exit_code": null, "signal": 15, "gpu_uuid": null, "condition": null, "detail": "stopped: the rental ended"},
            "gpu_seconds": 0}),
    ))).await;
    assert_eq!(answer["results"][0]["status"], "recorded", "{answer}");
    let (_, view) = call(
        &base,
        "GET",
        &format!("/v1/rentals/{cancel_id}"),
        Some(&r),
        None,
    )
    .await;
    assert_eq!(
        (view["cause"].as_str(), view["job_cause"].as_str()),
        (Some("renter_cancelled"), Some("renter_cancelled"))
    );
    assert_eq!(assignments(&base, &h, "").await["assignments"], json!([]));

    // A GPU fault interrupts a job: the provider's side, with the GPU and condition as evidence.
    let (_, faulty) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&r),
        Some(rent_body(json!([h.gpus[2]]))),
    )
    .await;
    let fault_id = faulty["rental_id"].as_str().unwrap().to_owned();
    let (status, answer) = call(&base, "POST", "/v1/agent/events", Some(&h.agent), Some(agent_event(
        "job_ended", json!({"machine_id": h.machine, "rental_id": fault_id, "cause": "hardware_fault",
            "evidence": {"exit_code": null, "signal": 9, "gpu_uuid": h.gpus[2], "condition": "lost", "detail": "stopped: GPU fell off the bus"},
            "gpu_seconds": 0}),
    ))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (_, view) = call(
        &base,
        "GET",
        &format!("/v1/rentals/{fault_id}"),
        Some(&r),
        None,
    )
    .await;
    assert_eq!(view["cause"], "hardware_fault");
    assert!(
        view["evidence"].as_str().unwrap().contains(&h.gpus[2]),
        "{view}"
    );
    assert_eq!(view["job_evidence"]["condition"], "lost");
    // Bad reports are refused whole, writing nothing.
    let head = state.store.head_position().await.unwrap();
    for body in [
        agent_event(
            "job_started",
            json!({"machine_id": h.machine, "rental_id": id, "runtime": "vm", "handle": "1"}),
        ),
        agent_event(
            "job_started",
            json!({"machine_id": h.machine, "rental_id": Uuid::now_v7(), "runtime": "process", "handle": "1"}),
        ),
        agent_event(
            "job_ended",
            json!({"machine_id": h.machine, "rental_id": id, "cause": "completed",
            "evidence": {"exit_code": 0, "signal": null, "gpu_uuid": "not a gpu", "condition": null, "detail": ""}, "gpu_seconds": 1}),
        ),
    ] {
        let (status, _) = call(
            &base,
            "POST",
            "/v1/agent/events",
            Some(&h.agent),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
    assert_eq!(state.store.head_position().await.unwrap(), head);
}

async fn a_rental_on_a_silent_machine_ends_at_its_last_heartbeat(db: &TestDb) {
    let config = gpunex_api::fleet::FleetConfig {
        heartbeat_interval: Duration::from_millis(100),
        offline_grace: Duration::from_millis(400),
        rental_grace: Duration::from_millis(600),
        ..gpunex_api::fleet::FleetConfig::default()
    };
    let clock = gpunex_tests::manual_clock();
    let state = AppState::load(db.open_with_clock(clock.clone()).await)
        .await
        .unwrap()
        .with_fleet_config(config);
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let h = host(
        &base,
        &admin,
        Spec {
            email: "silent@example.com",
            tier: "community",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 1,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;
    set_price(&base, &h, "h100-80gb", "2.00").await;
    let r = renter(&base).await;
    let (_, rental) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&r),
        Some(rent_body(json!([h.gpus[0]]))),
    )
    .await;
    let id = rental["rental_id"].as_str().unwrap().to_owned();
    // One more heartbeat a second later, then silence.
    clock.advance_micros(1_000_000);
    let (status, _) = call(
        &base,
        "POST",
        "/v1/agent/heartbeat",
        Some(&h.agent),
        Some(json!({"machine_id": h.machine, "gpus": []})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let watchdog = tokio::spawn(gpunex_api::fleet::run_watchdog(
        state.store.clone(),
        state.credentials.clone(),
        config,
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    let view = loop {
        let (_, view) = call(&base, "GET", &format!("/v1/rentals/{id}"), Some(&r), None).await;
        if view["status"] == "ended" || Instant::now() > deadline {
            break view;
        }
        // Time passes in steps shorter than the platform-outage threshold, so the watchdog
        // sees a silent machine, not a platform that was down.
        clock.advance_micros(100_000);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    watchdog.abort();
    assert_eq!(
        (view["status"].as_str(), view["cause"].as_str()),
        (Some("ended"), Some("network_loss")),
        "{view}"
    );
    assert!(
        view["evidence"]
            .as_str()
            .unwrap()
            .contains("last heartbeat"),
        "{view}"
    );
    // Ended at the last heartbeat: a second after it started, not when the watchdog noticed.
    let at =
        |field: &str| chrono::DateTime::parse_from_rfc3339(view[field].as_str().unwrap()).unwrap();
    let lasted = at("ended_at") - at("started_at");
    assert_eq!(lasted.num_milliseconds(), 1_000, "{view}");
    // Usage the agent counted while unreachable is billed only up to the last heartbeat.
    let (_, answer) = call(
        &base,
        "POST",
        "/v1/agent/events",
        Some(&h.agent),
        Some(agent_event(
            "usage",
            json!({"machine_id": h.machine, "rental_id": id, "gpu_seconds": 30}),
        )),
    )
    .await;
    assert_eq!(answer["results"][0]["status"], "recorded", "{answer}");
    let (_, view) = call(&base, "GET", &format!("/v1/rentals/{id}"), Some(&r), None).await;
    assert_eq!(view["gpu_seconds"], 1, "{view}");
    // The GPU is free again (listed once the machine is back online).
    assert_eq!(
        state.credentials.with_market(|m| m.lease_of(&h.gpus[0])),
        None
    );
}

async fn price_recommendations_follow_the_market_and_say_when_they_fall_back(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let mut hosts = Vec::new();
    for (i, (region, price)) in [
        ("Hesse", "2.00"),
        ("Hesse", "2.20"),
        ("Hesse", "2.40"),
        ("Hesse", "2.60"),
        ("Bavaria", "3.00"),
    ]
    .into_iter()
    .enumerate()
    {
        let email = format!("rec{i}@example.com");
        let h = host(
            &base,
            &admin,
            Spec {
                email: &email,
                tier: "community",
                model: "h100-80gb",
                device: 0x2330,
                vram_mib: 81_559,
                count: 1,
                country: "DE",
                region,
            },
        )
        .await;
        set_price(&base, &h, "h100-80gb", price).await;
        hosts.push(h);
    }
    let recommend = |query: &'static str| {
        let base = base.clone();
        async move {
            let (status, answer) = call(
                &base,
                "GET",
                &format!("/v1/market/recommendations{query}"),
                None,
                None,
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            answer
        }
    };
    // No rentals yet: the region's listed prices (a fallback), nearest-rank median 2.20.
    let listed = recommend("?model=h100-80gb&region=hesse").await;
    assert_eq!(
        (listed["basis"].as_str(), listed["fallback"].as_bool()),
        (Some("region_listings"), Some(true)),
        "{listed}"
    );
    assert_eq!(listed["recommended_price_usdc"], "2.200000");
    assert_eq!(
        (listed["low_usdc"].as_str(), listed["high_usdc"].as_str()),
        (Some("2.000000"), Some("2.400000"))
    );
    assert_eq!(listed["region_market"]["supply"], 4);
    assert_eq!(listed["model_market"]["supply"], 5);
    assert_eq!(
        listed["region_market"]["idle_price_quartiles_usdc"],
        json!(["2.000000", "2.200000", "2.400000"])
    );

    // Three rentals in Hesse: the rented prices decide, the pick within them follows demand.
    let r = renter(&base).await;
    for h in &hosts[..3] {
        let (status, _) = call(
            &base,
            "POST",
            "/v1/rentals",
            Some(&r),
            Some(rent_body(json!([h.gpus[0]]))),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let rented = recommend("?model=h100-80gb&region=Hesse").await;
    assert_eq!(
        (rented["basis"].as_str(), rented["fallback"].as_bool()),
        (Some("region_rentals"), Some(false)),
        "{rented}"
    );
    assert_eq!(rented["region_market"]["rentals"], 3);
    assert_eq!(rented["region_market"]["supply"], 1);
    assert_eq!(
        rented["region_market"]["rented_price_quartiles_usdc"],
        json!(["2.000000", "2.200000", "2.400000"])
    );
    let demand = rented["demand_bp"].as_u64().unwrap();
    let expected = if demand >= 8_000 {
        "2.400000"
    } else if demand < 3_000 {
        "2.000000"
    } else {
        "2.200000"
    };
    assert_eq!(rented["recommended_price_usdc"], expected, "{rented}");

    // A region without data: the model everywhere; a model without data: the reference.
    let elsewhere = recommend("?model=h100-80gb&region=Saxony").await;
    assert_eq!(
        (elsewhere["basis"].as_str(), elsewhere["fallback"].as_bool()),
        (Some("model_rentals"), Some(true))
    );
    assert!(elsewhere["reason"].as_str().unwrap().contains("too little"));
    // Listed now: Hesse 2.60 and Bavaria 3.00, both H100 (989.0 TFLOPS FP16): the median price
    // per TFLOPS is 2.60's, so an A100 80GB (312.0) is 2.60 x 3,120 / 9,890 = 0.820222.
    let reference = recommend("?model=a100-80gb").await;
    assert_eq!(reference["basis"], "reference", "{reference}");
    assert_eq!(reference["recommended_price_micro_usdc"], 820_222);
    assert_eq!(reference["region_market"], Value::Null);
    for (query, code) in [
        ("?region=Hesse", "required"),
        ("?model=z9000", "unknown_model"),
        ("?model=h100-80gb&colour=red", "unknown_parameter"),
    ] {
        let (status, problem) = call(
            &base,
            "GET",
            &format!("/v1/market/recommendations{query}"),
            None,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(problem["errors"][0]["code"], code, "{problem}");
    }
}

/// `gpu_uuids` takes 1 to 64 GPUs: a rental of all 64 GPUs of a machine starts (its rental and 64
/// leases in one append) and ends (64 releases), and 65 are refused before anything is written.
async fn a_rental_of_the_documented_maximum_of_gpus_starts_and_ends(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let h = host(
        &base,
        &admin,
        Spec {
            email: "big@example.com",
            tier: "community",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 64,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;
    set_price(&base, &h, "h100-80gb", "2.00").await;
    let renter = renter(&base).await;
    let mut too_many = h.gpus.clone();
    too_many.push("GPU-00000000-0000-0000-0000-000000000000".to_owned());
    let head = state.store.head_position().await.unwrap();
    let (status, problem) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&renter),
        Some(rent_body(json!(too_many))),
    )
    .await;
    assert_eq!(
        (status, problem["errors"][0]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_gpus")),
        "{problem}"
    );
    assert_eq!(state.store.head_position().await.unwrap(), head);
    let (status, rental) = call(
        &base,
        "POST",
        "/v1/rentals",
        Some(&renter),
        Some(rent_body(json!(h.gpus))),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{rental}");
    assert_eq!(rental["gpu_uuids"].as_array().unwrap().len(), 64);
    assert!(
        uuids(&search(&base, "").await).is_empty(),
        "all 64 are rented"
    );
    let id = rental["rental_id"].as_str().unwrap();
    let (status, ended) = call(
        &base,
        "POST",
        &format!("/v1/rentals/{id}/end"),
        Some(&renter),
        None,
    )
    .await;
    assert_eq!(
        (status, ended["status"].as_str()),
        (StatusCode::OK, Some("ended")),
        "{ended}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while search(&base, "?limit=100").await["listings"]
        .as_array()
        .unwrap()
        .len()
        < 64
    {
        assert!(Instant::now() < deadline, "the 64 GPUs are listed again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The prices of a provider's view: `(model, price_usdc)` of each price in its history, in order.
fn history_of(view: &Value) -> Vec<(String, String)> {
    view["models"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|model| model["history"].as_array().unwrap().iter())
        .map(|p| {
            (
                p["model_id"].as_str().unwrap().to_owned(),
                p["price_usdc"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Memory keeps only the prices that can still be in force and those set in the last day; the
/// prices API shows the whole history from the stored price history (ADR 0007), the same after
/// a restart, and `audit verify` checks every stored price.
async fn a_price_history_older_than_memory_is_served_whole_from_the_store(db: &TestDb) {
    use gpunex_store::audit::AuditFinding;
    const DAY: i64 = 86_400_000_000;
    let clock = gpunex_tests::manual_clock();
    let state = AppState::load(db.open_with_clock(clock.clone()).await)
        .await
        .unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let h = host(
        &base,
        &admin,
        Spec {
            email: "history@example.com",
            tier: "community",
            model: "h100-80gb",
            device: 0x2330,
            vram_mib: 81_559,
            count: 1,
            country: "DE",
            region: "Hesse",
        },
    )
    .await;
    let at = |offset: i64| {
        chrono::DateTime::from_timestamp_micros(
            gpunex_domain::clock::Clock::now(&*clock).unix_micros() + offset,
        )
        .unwrap()
        .to_rfc3339()
    };
    let price = |model: &'static str, usdc: &'static str, effective_at: Option<String>| {
        let base = base.clone();
        let token = h.token.clone();
        let provider = h.provider;
        async move {
            let mut body = json!({"model_id": model, "price_usdc": usdc});
            if let Some(at) = effective_at {
                body["effective_at"] = json!(at);
            }
            let (status, view) = call(
                &base,
                "POST",
                &format!("/v1/providers/{provider}/prices"),
                Some(&token),
                Some(body),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{view}");
            view
        }
    };
    // Day 0: 2.00 now, 1.50 from day 1, 3.00 from day 2.
    price("h100-80gb", "2.00", None).await;
    price("h100-80gb", "1.50", Some(at(DAY))).await;
    price("h100-80gb", "3.00", Some(at(2 * DAY))).await;
    // Day 4: 2.50 now. A day before it (day 3), 3.00 was in force: 2.00 and 1.50 can never
    // be again, and were set more than a day before, so memory forgets them.
    clock.advance_micros(4 * DAY);
    let view = price("h100-80gb", "2.50", None).await;
    let live: Vec<i64> = state.credentials.with_market(|m| {
        m.live_prices(h.provider, "h100-80gb")
            .map(|p| p.price_micro_usdc.micros())
            .collect()
    });
    assert_eq!(live, [3_000_000, 2_500_000]);
    let whole = vec![
        ("h100-80gb".to_owned(), "2.000000".to_owned()),
        ("h100-80gb".to_owned(), "1.500000".to_owned()),
        ("h100-80gb".to_owned(), "3.000000".to_owned()),
        ("h100-80gb".to_owned(), "2.500000".to_owned()),
    ];
    assert_eq!(history_of(&view), whole, "{view}");
    assert_eq!(view["models"][0]["current"]["price_usdc"], "2.500000");
    // Set within the day, right after the last: its answer holds what memory still has.
    let view = price("h100-80gb", "2.40", None).await;
    let mut expected = whole.clone();
    expected.push(("h100-80gb".to_owned(), "2.400000".to_owned()));
    assert_eq!(history_of(&view), expected, "{view}");
    assert_eq!(view["models"][0]["current"]["price_usdc"], "2.400000");
    let path = format!("/v1/providers/{}/prices", h.provider);
    let (status, read) = call(&base, "GET", &path, Some(&h.token), None).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read, view);
    // Listed and rented at the price in force, from memory.
    let page = search(&base, "").await;
    assert_eq!(page["listings"][0]["price_usdc"], "2.400000", "{page}");

    // A restart folds the same memory and serves the same history.
    let restarted = AppState::load(state.store.clone()).await.unwrap();
    let again = common::serve(restarted.clone()).await;
    let (status, reread) = call(&again, "GET", &path, Some(&h.token), None).await;
    assert_eq!(status, StatusCode::OK, "{reread}");
    assert_eq!(history_of(&reread), expected);
    assert_eq!(
        restarted
            .credentials
            .with_market(|m| m.live_prices(h.provider, "h100-80gb").count()),
        3
    );

    // `audit verify` compares every stored price; an edited and a deleted one are found, and a
    // rebuild restores them.
    let store = &state.store;
    store.run_projections().await.unwrap();
    let report = store.audit(&|_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.prices_checked, 5);
    assert_eq!(
        report.prices_checkpoint,
        store.head_position().await.unwrap()
    );
    let edit = "UPDATE price_history SET price_micro_usdc = 1 \
                WHERE position = (SELECT MAX(position) FROM price_history)";
    let delete = "DELETE FROM price_history \
                  WHERE position = (SELECT MIN(position) FROM price_history)";
    // The second price's provider id in capitals: the same UUID, but a read by provider would no
    // longer find it.
    let capitals = "UPDATE price_history SET provider_id = upper(provider_id) \
                    WHERE position = (SELECT MIN(position) FROM price_history)";
    db.execute_raw(&[edit, delete, capitals], &[edit, delete, capitals])
        .await;
    let report = store.audit(&|_| {}).await.unwrap();
    let found: Vec<(Option<String>, Option<String>)> = report
        .findings
        .iter()
        .filter_map(|f| match f {
            AuditFinding::PriceMismatch {
                stored, replayed, ..
            } => Some((stored.clone(), replayed.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 3, "{:?}", report.findings);
    assert!(found[0].0.is_none() && found[0].1.as_deref().unwrap().contains("price 2000000 "));
    let provider = h.provider.to_string();
    assert!(
        found[1]
            .0
            .as_deref()
            .unwrap()
            .contains(&provider.to_uppercase())
    );
    assert!(found[1].1.as_deref().unwrap().contains(&provider));
    assert!(found[2].0.as_deref().unwrap().contains("price 1 "));
    assert!(found[2].1.as_deref().unwrap().contains("price 2400000 "));
    store.rebuild_projections(&|_| {}).await.unwrap();
    let report = store.audit(&|_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.prices_checked, 5);
    let (_, rebuilt) = call(&again, "GET", &path, Some(&h.token), None).await;
    assert_eq!(history_of(&rebuilt), expected);
}
