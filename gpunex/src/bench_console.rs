//! `gpunex bench console`: the server's time for each page of the web console, on a database
//! written by `gpunex simulate`. The console is a client of `/v1` (ADR 0008), so a page's server
//! time is the time of the API calls it makes, in the stages it makes them (the calls of a stage
//! at once, as the browser sends them), plus its shell. It starts `gpunex serve` as a separate
//! process, picks the provider with the most usage in the last 30 days and acts as its
//! applicant (a person's session naming the provider, ADR 0009), and loads each page from
//! `clients` concurrent clients for `seconds`, beside `GET /healthz` through the same clients
//! (the HTTP floor). The browser's own time (a 30-day chart of 8 GPUs, the asset sizes) is
//! measured by the browser suite (`console/tests/story.mjs`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpunex_domain::credentials::Role;
use serde::Serialize;

use crate::bench_search::{Latency, hammer, latency};

#[derive(Debug, clap::Args)]
pub struct ConsoleBenchArgs {
    /// Refuse to measure on fewer events than this (simulate first).
    #[arg(long, default_value_t = 100_000)]
    pub min_events: u64,
    /// Seconds each page is loaded, again and again.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Longest wait for the server to become ready.
    #[arg(long, default_value_t = 900)]
    pub ready_timeout_seconds: u64,
    /// Print figures as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct ConsoleReport {
    pub database: String,
    pub events: u64,
    pub provider_gpus: usize,
    pub provider_lines_30_days: u64,
    /// `GET /healthz` through the same clients: the HTTP floor.
    pub reference_healthz: Latency,
    pub pages: Vec<PageFigures>,
}

#[derive(Debug, Serialize)]
pub struct PageFigures {
    pub page_name: String,
    /// Loading the whole page: every stage of its calls, one after the other.
    pub page: Latency,
    /// Each API call behind it (by path, ids and dates left in).
    pub calls: BTreeMap<String, Latency>,
}

/// One API call of a page: its path and the role it acts in.
#[derive(Debug, Clone)]
struct Call {
    path: String,
    act_as: Option<String>,
    /// A 404 is an answer the page shows (no payout settings yet), not a failure.
    may_be_absent: bool,
}

/// A page: the stages of calls the console makes, each stage at once.
struct Page {
    name: &'static str,
    stages: Vec<Vec<Call>>,
}

fn call(path: impl Into<String>, act_as: Option<&str>) -> Call {
    Call {
        path: path.into(),
        act_as: act_as.map(str::to_owned),
        may_be_absent: false,
    }
}

/// The server process, killed when dropped.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn run(database_url: &str, args: ConsoleBenchArgs) -> anyhow::Result<()> {
    let report = bench(database_url, &args).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(())
}

async fn bench(database_url: &str, args: &ConsoleBenchArgs) -> anyhow::Result<ConsoleReport> {
    let store = crate::database::open_store(database_url).await?;
    let events = store.head_position().await?;
    anyhow::ensure!(
        events >= args.min_events,
        "the log holds {events} events, fewer than --min-events {}: run `gpunex simulate` first",
        args.min_events
    );
    let (admin, _) =
        gpunex_app::credentials::issue_unattended(&store, Role::Admin, "bench console", "cli")
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let now = store.clock().now();
    let today = gpunex_app::payout_run::today_utc(now);
    let month_ago = today - chrono::Days::new(29);

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let mailbox = tempfile::tempdir()?;
    eprintln!("starting `gpunex serve` on {base} ...");
    let _server = Server(
        std::process::Command::new(std::env::current_exe()?)
            .args(["--database-url", database_url, "serve", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--mailbox-dir")
            .arg(mailbox.path())
            .arg("--no-payout-scheduler")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?,
    );
    crate::bench_scale::wait_ready(&base, Duration::from_secs(args.ready_timeout_seconds)).await?;
    let http = reqwest::Client::new();
    let get = |path: String, token: String, act_as: Option<&'static str>| {
        let http = http.clone();
        let url = format!("{base}{path}");
        async move {
            let mut request = http.get(&url).bearer_auth(token);
            if let Some(role) = act_as {
                request = request.header("x-gpunex-act-as", role);
            }
            let response = request.send().await?;
            anyhow::ensure!(
                response.status().is_success(),
                "{url}: {}",
                response.status()
            );
            anyhow::Ok(response.json::<serde_json::Value>().await?)
        }
    };

    // The provider with the most usage lines in the last 30 days, and the person who applied.
    let finance = get(
        format!("/v1/earnings?from={month_ago}&to={today}"),
        admin.token.clone(),
        None,
    )
    .await?;
    let (provider_id, lines) = finance["providers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["provider_id"].as_str()?.to_owned(),
                p["period"]["lines"].as_u64()?,
            ))
        })
        .max_by_key(|(_, lines)| *lines)
        .ok_or_else(|| anyhow::anyhow!("the finance view lists no provider"))?;
    let applicant = applicant_of(&get, &admin.token, &provider_id).await?;
    let person = account_of(&store, &http, &base, applicant).await?;
    let me = format!("provider:{provider_id}");
    let fleet = get(
        format!("/v1/providers/{provider_id}/machines"),
        person.clone(),
        Some(leak(&me)),
    )
    .await?;
    let machines: Vec<(String, Vec<String>)> = fleet["machines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let gpus = m["gpus"]
                .as_array()?
                .iter()
                .filter_map(|g| g["gpu_uuid"].as_str().map(str::to_owned))
                .collect();
            Some((m["machine_id"].as_str()?.to_owned(), gpus))
        })
        .collect();
    let provider_gpus = machines.iter().map(|(_, gpus)| gpus.len()).sum();
    let models: Vec<String> = fleet["machines"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["gpus"].as_array().cloned().unwrap_or_default())
        .filter_map(|g| g["model_id"].as_str().map(str::to_owned))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();

    let day_ago = gpunex_api::convert::timestamp(now.unix_micros() - 86_400_000_000);
    let pages = pages(
        &provider_id,
        &me,
        &machines,
        &models,
        (today, month_ago, &day_ago),
    );
    let reference_healthz = hammer(
        &base,
        &["/healthz".to_owned()],
        args.clients,
        args.seconds,
        None,
    )
    .await?;
    let mut figures = Vec::new();
    for page in &pages {
        eprintln!("loading the {} page for {} s ...", page.name, args.seconds);
        figures.push(load(&base, page, &person, &admin.token, args).await?);
    }
    Ok(ConsoleReport {
        database: crate::database::redact(database_url),
        events,
        provider_gpus,
        provider_lines_30_days: lines,
        reference_healthz,
        pages: figures,
    })
}

/// The simulation's applicants have no account (it submits their applications directly): the
/// busiest one gets one here, under its own user id and an address of the bench's, written as
/// sign-up writes it (the user and the address's claim, each stream new), and signs in over
/// HTTP. Its session token.
async fn account_of(
    store: &gpunex_store::Store,
    http: &reqwest::Client,
    base: &str,
    user_id: uuid::Uuid,
) -> anyhow::Result<String> {
    use gpunex_domain::DomainEvent;
    use gpunex_domain::accounts::AccountEvent;
    const PASSWORD: &str = "correct horse battery staple";
    let email = format!("bench-{}@example.com", user_id.simple());
    let hash = gpunex_api::accounts::hash_password(PASSWORD.to_owned())
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let (user, claim) =
        gpunex_domain::accounts::decide_sign_up(false, user_id, &email, &hash, store.clock().now())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let meta = gpunex_store::Metadata::actor("bench console");
    let registered = store
        .append_streams(vec![
            gpunex_app::command::append_at(
                gpunex_app::accounts::user_stream(user_id),
                0,
                [DomainEvent::Account(AccountEvent::UserRegistered(user))],
                &meta,
            ),
            gpunex_app::command::append_at(
                gpunex_app::accounts::email_stream(&email),
                0,
                [DomainEvent::Account(AccountEvent::EmailClaimed(claim))],
                &meta,
            ),
        ])
        .await;
    match registered {
        // An earlier run registered it: the same address, the same password.
        Ok(_) | Err(gpunex_store::AppendError::WrongExpectedVersion { .. }) => {}
        Err(error) => anyhow::bail!("cannot register the applicant's account: {error}"),
    }
    // The server learns the account from the log (within moments), then the person signs in;
    // each early try counts as a failed sign-in, so a few only, a second apart (the limit is 5).
    for attempt in 1..=3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let response = http
            .post(format!("{base}/v1/sessions"))
            .json(&serde_json::json!({"email": email, "password": PASSWORD}))
            .send()
            .await?;
        if response.status().is_success() {
            let session: serde_json::Value = response.json().await?;
            return session["token"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("no session token"));
        }
        eprintln!("sign-in {attempt}: {}", response.status());
    }
    anyhow::bail!("the server did not learn the applicant's account")
}

/// A role name for a call (the few roles of one run live as long as the process).
fn leak(role: &str) -> &'static str {
    Box::leak(role.to_owned().into_boxed_str())
}

/// The person who applied for `provider_id`, from the reviewers' list of approved applications.
async fn applicant_of<F, Fut>(get: &F, admin: &str, provider_id: &str) -> anyhow::Result<uuid::Uuid>
where
    F: Fn(String, String, Option<&'static str>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<serde_json::Value>>,
{
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(cursor) => format!("/v1/applications?status=approved&after={cursor}"),
            None => "/v1/applications?status=approved".to_owned(),
        };
        let page = get(path, admin.to_owned(), None).await?;
        if let Some(found) = page["applications"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["provider_id"].as_str() == Some(provider_id))
        {
            return Ok(found["applicant_user_id"]
                .as_str()
                .unwrap_or_default()
                .parse()?);
        }
        match page["next_after"].as_str() {
            Some(cursor) => after = Some(cursor.to_owned()),
            None => anyhow::bail!("no approved application made provider {provider_id}"),
        }
    }
}

/// The pages and the calls each makes, as `console/assets/pages/*.js` make them.
fn pages(
    provider: &str,
    me: &str,
    machines: &[(String, Vec<String>)],
    models: &[String],
    (today, month_ago, day_ago): (chrono::NaiveDate, chrono::NaiveDate, &str),
) -> Vec<Page> {
    let p = format!("/v1/providers/{provider}");
    let own = Some(me);
    let shell = |page: &str| {
        vec![
            call(format!("/console/{page}"), None),
            call("/v1/sessions/current", None),
            call("/v1/me", None),
        ]
    };
    let panel = |tab: &str, calls: Vec<Call>| Page {
        name: leak(tab),
        stages: vec![
            shell(&format!("provider/{provider}/{tab}")),
            vec![call(format!("{p}/availability"), own)],
            calls,
        ],
    };
    let range = format!("from={month_ago}&to={today}");
    let telemetry: Vec<Call> = machines
        .first()
        .map(|(machine, gpus)| {
            let mut calls = vec![call(format!("/v1/machines/{machine}"), own)];
            calls.extend(gpus.iter().map(|gpu| {
                call(
                    format!(
                        "/v1/machines/{machine}/gpus/{gpu}/telemetry?from={day_ago}&limit=5000"
                    ),
                    own,
                )
            }));
            calls
        })
        .unwrap_or_default();
    let mut prices = vec![
        call(format!("{p}/prices"), own),
        call(format!("{p}/machines"), own),
        call(format!("{p}/listings"), own),
        call(format!("{p}/maintenance"), own),
        call("/v1/applications", None),
    ];
    prices.extend(
        models
            .iter()
            .map(|m| call(format!("/v1/market/recommendations?model={m}"), None)),
    );
    vec![
        Page {
            name: "roles",
            stages: vec![
                shell("roles"),
                vec![call("/v1/me", None), call("/v1/applications", None)],
            ],
        },
        panel(
            "machines",
            vec![call(format!("{p}/machines"), own), call("/v1/tokens", own)],
        ),
        Page {
            name: "telemetry",
            stages: vec![
                shell(&format!("provider/{provider}/machines/x")),
                vec![call(format!("{p}/availability"), own)],
                telemetry,
            ],
        },
        panel("prices", prices),
        panel(
            "earnings",
            vec![
                call(format!("{p}/machines"), own),
                call(format!("{p}/earnings?from={today}&to={today}"), own),
                call(format!("{p}/earnings/daily?{range}&by=gpu"), own),
            ],
        ),
        panel(
            "payouts",
            vec![
                Call {
                    may_be_absent: true,
                    ..call(format!("{p}/payout-settings"), own)
                },
                call(format!("{p}/payouts"), own),
            ],
        ),
        panel(
            "performance",
            vec![
                call(format!("{p}/machines"), own),
                call(format!("{p}/listings"), own),
            ],
        ),
        Page {
            name: "review",
            stages: vec![
                shell("review"),
                vec![call("/v1/applications", Some("admin"))],
            ],
        },
        Page {
            name: "finance",
            stages: vec![
                shell("finance"),
                vec![
                    call("/v1/payout-batches", Some("admin")),
                    call(format!("/v1/earnings?{range}"), Some("admin")),
                ],
            ],
        },
        Page {
            name: "market",
            stages: vec![
                shell("market"),
                vec![
                    call("/v1/catalog/models", None),
                    call("/v1/listings?limit=50", None),
                ],
            ],
        },
    ]
}

/// Loads `page` from `clients` clients for `seconds`: the time of each whole load and of each
/// call in it. The person's session makes every call; the reviewer's and finance's pages act as
/// admin with an admin token (the person holds no staff role).
async fn load(
    base: &str,
    page: &Page,
    person: &str,
    admin: &str,
    args: &ConsoleBenchArgs,
) -> anyhow::Result<PageFigures> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.clients * 8)
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let http = http.clone();
        let stages = page.stages.clone();
        let (base, person, admin) = (base.to_owned(), person.to_owned(), admin.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut loads = Vec::new();
            let mut calls: BTreeMap<String, Vec<u64>> = BTreeMap::new();
            while Instant::now() < deadline {
                let load_started = Instant::now();
                for stage in &stages {
                    let sent = stage.iter().map(|c| {
                        let http = http.clone();
                        let url = format!("{base}{}", c.path);
                        let token = if c.act_as.as_deref() == Some("admin") {
                            admin.clone()
                        } else {
                            person.clone()
                        };
                        let act_as = c.act_as.clone().filter(|role| role != "admin");
                        let may_be_absent = c.may_be_absent;
                        async move {
                            let sent = Instant::now();
                            let mut request = http.get(&url).bearer_auth(token);
                            if let Some(role) = act_as {
                                request = request.header("x-gpunex-act-as", role);
                            }
                            let response = request.send().await?;
                            let status = response.status();
                            anyhow::ensure!(
                                status.is_success()
                                    || (may_be_absent && status == reqwest::StatusCode::NOT_FOUND),
                                "{url}: {status}"
                            );
                            response.bytes().await?;
                            anyhow::Ok(sent.elapsed().as_micros() as u64)
                        }
                    });
                    for (c, took) in stage.iter().zip(futures_util::future::join_all(sent).await) {
                        calls.entry(c.path.clone()).or_default().push(took?);
                    }
                }
                loads.push(load_started.elapsed().as_micros() as u64);
            }
            anyhow::Ok((loads, calls))
        }));
    }
    let mut loads = Vec::new();
    let mut calls: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for task in tasks {
        let (l, c) = task.await??;
        loads.extend(l);
        for (path, samples) in c {
            calls.entry(path).or_default().extend(samples);
        }
    }
    let elapsed = started.elapsed();
    Ok(PageFigures {
        page_name: page.name.to_owned(),
        page: latency(args.clients, loads, elapsed),
        calls: calls
            .into_iter()
            .map(|(path, samples)| (path, latency(args.clients, samples, elapsed)))
            .collect(),
    })
}

/// Microseconds as milliseconds with one decimal (integer arithmetic: no floats here).
fn ms(us: u64) -> String {
    format!("{}.{}", us / 1000, (us % 1000) / 100)
}

fn print(report: &ConsoleReport) {
    println!(
        "console pages on {} ({} events); provider with {} GPUs and {} usage lines in 30 days; {} clients",
        report.database,
        report.events,
        report.provider_gpus,
        report.provider_lines_30_days,
        report.reference_healthz.clients
    );
    println!(
        "reference GET /healthz: p50 {} ms, p99 {} ms",
        ms(report.reference_healthz.p50_us),
        ms(report.reference_healthz.p99_us)
    );
    for page in &report.pages {
        let slowest = page.calls.iter().max_by_key(|(_, l)| l.p99_us);
        println!(
            "{:<12} page p50 {:>7} ms  p99 {:>7} ms  ({} loads); slowest call p99 {:>7} ms: {}",
            page.page_name,
            ms(page.page.p50_us),
            ms(page.page.p99_us),
            page.page.requests,
            slowest.map_or_else(String::new, |(_, l)| ms(l.p99_us)),
            slowest.map_or("", |(path, _)| path.as_str()),
        );
    }
}
