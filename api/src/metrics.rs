//! `GET /metrics`: the server's figures in the Prometheus text exposition format (0.0.4).
//!
//! - HTTP: requests by route template, method and status; latency histograms per route (from
//!   the request's arrival at the router to its response's headers); requests in flight;
//!   connections open, accepted, closed to make room or for idling, refused `server_busy`.
//! - The log: appends by outcome, group commits, events written, appends per group and commit
//!   times (the store's writer counts them), appends waiting for the writer, the head position.
//! - Read models: each SQL projection's checkpoint and lag, the in-memory registry's lag, the
//!   notification outbox's lag.
//! - Money in motion: payouts and their micro-USDC per rail and status (the payout queues),
//!   adjustment proposals waiting for their second person.
//!
//! Admitted to admins, and to requests from the loopback interface without credentials (a
//! Prometheus on the same host; turn that off with `--metrics-loopback false` when a proxy on
//! the same host forwards outside traffic). Route labels are the router's own templates
//! (`/v1/machines/{machine_id}`), never the raw path, so a client cannot grow the label set;
//! anything the router does not know is `route="unmatched"`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, State};
use axum::http::Method;
use axum::response::Response;
use gpunex_store::stats::{Histogram, HistogramSnapshot};

use gpunex_app::ReadModels;
use gpunex_store::Store;

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Request latency bounds in microseconds: 500 µs to 60 s (assignments long-poll for up to 30 s).
pub const LATENCY_MICROS_BOUNDS: &[u64] = &[
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// The label of requests no route matched.
const UNMATCHED: &str = "unmatched";

/// What the server has counted since it started.
pub struct Metrics {
    /// Route template → method → figures.
    http: Mutex<HashMap<String, HashMap<&'static str, RouteStats>>>,
    in_flight: AtomicU64,
    pub connections: Arc<ConnectionStats>,
    /// When this process started, in seconds since the Unix epoch.
    started_at_s: u64,
}

struct RouteStats {
    statuses: BTreeMap<u16, u64>,
    latency: Histogram,
}

/// The HTTP loop's connection figures (`http_server` counts them).
#[derive(Debug, Default)]
pub struct ConnectionStats {
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    /// Closed because the server was full and this one was idle or only waiting for a body.
    pub closed_for_room: AtomicU64,
    /// Closed after idling longer than the idle timeout.
    pub closed_idle: AtomicU64,
    /// Closed because a request's headers did not all arrive within the header deadline.
    pub closed_header_timeout: AtomicU64,
    /// Answered `503 server_busy` and closed: every connection was busy.
    pub refused_busy: AtomicU64,
}

impl Metrics {
    /// Figures of a process that started at `started_at`.
    pub fn started_at(started_at: gpunex_domain::time::Timestamp) -> Metrics {
        Metrics {
            http: Mutex::default(),
            in_flight: AtomicU64::new(0),
            connections: Arc::default(),
            started_at_s: u64::try_from(started_at.unix_micros() / 1_000_000).unwrap_or(0),
        }
    }
}

impl Metrics {
    fn observe(&self, route: Option<&str>, method: &'static str, status: u16, micros: u64) {
        let mut http = self.http.lock().unwrap_or_else(|p| p.into_inner());
        let route = route.unwrap_or(UNMATCHED);
        let methods = match http.get_mut(route) {
            Some(methods) => methods,
            None => http.entry(route.to_owned()).or_default(),
        };
        let stats = methods.entry(method).or_insert_with(|| RouteStats {
            statuses: BTreeMap::new(),
            latency: Histogram::new(LATENCY_MICROS_BOUNDS),
        });
        *stats.statuses.entry(status).or_insert(0) += 1;
        stats.latency.observe(micros);
    }
}

/// The method as a label: the standard ones by name, anything else as `other` (a client cannot
/// make up labels).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Counts every request: the outermost layer of the router, run after routing (so the matched
/// route template is known) and after every other layer (so the status is the one sent).
pub async fn record(
    State(metrics): State<Arc<Metrics>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned());
    let method = method_label(request.method());
    let started = Instant::now();
    metrics.in_flight.fetch_add(1, Ordering::Relaxed);
    let response = next.run(request).await;
    metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    metrics.observe(route.as_deref(), method, response.status().as_u16(), micros);
    response
}

/// The exposition, read now.
pub async fn render(metrics: &Metrics, store: &Store, models: &ReadModels) -> String {
    let mut out = Exposition::default();

    out.family(
        "gpunex_build_info",
        "gauge",
        "The running version (always 1).",
    );
    out.sample(
        "gpunex_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    out.family(
        "gpunex_process_start_time_seconds",
        "gauge",
        "When this process started, in seconds since the Unix epoch.",
    );
    out.sample(
        "gpunex_process_start_time_seconds",
        &[],
        metrics.started_at_s,
    );

    http_figures(&mut out, metrics);
    store_figures(&mut out, store);
    read_model_figures(&mut out, store, models).await;
    money_figures(&mut out, store, models).await;
    out.text
}

fn http_figures(out: &mut Exposition, metrics: &Metrics) {
    // Copy under the lock, print outside it: a scrape does not hold up requests.
    let routes: Vec<(String, &'static str, BTreeMap<u16, u64>, HistogramSnapshot)> = {
        let http = metrics.http.lock().unwrap_or_else(|p| p.into_inner());
        let mut routes: Vec<_> = http
            .iter()
            .flat_map(|(route, methods)| {
                methods.iter().map(|(method, stats)| {
                    (
                        route.clone(),
                        *method,
                        stats.statuses.clone(),
                        stats.latency.snapshot(),
                    )
                })
            })
            .collect();
        routes.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        routes
    };
    out.family(
        "gpunex_http_requests_total",
        "counter",
        "Requests answered, by route template, method and status.",
    );
    for (route, method, statuses, _) in &routes {
        for (status, count) in statuses {
            out.sample(
                "gpunex_http_requests_total",
                &[
                    ("route", route),
                    ("method", method),
                    ("status", &status.to_string()),
                ],
                *count,
            );
        }
    }
    out.family(
        "gpunex_http_request_duration_seconds",
        "histogram",
        "Time from a request's arrival at the router to its response's headers, by route template and method.",
    );
    for (route, method, _, latency) in &routes {
        out.histogram(
            "gpunex_http_request_duration_seconds",
            &[("route", route), ("method", method)],
            latency,
            Unit::Micros,
        );
    }
    out.gauge(
        "gpunex_http_requests_in_flight",
        "Requests being handled now.",
        metrics.in_flight.load(Ordering::Relaxed),
    );
    let connections = &metrics.connections;
    out.gauge(
        "gpunex_http_connections_open",
        "Connections open now.",
        connections.open.load(Ordering::Relaxed),
    );
    out.counter(
        "gpunex_http_connections_accepted_total",
        "Connections accepted.",
        connections.accepted.load(Ordering::Relaxed),
    );
    out.family(
        "gpunex_http_connections_closed_total",
        "counter",
        "Connections the server closed: `room` (full, and this one idle or only waiting for a body), `idle` (past the idle timeout), `header_timeout` (a request's headers late).",
    );
    out.sample(
        "gpunex_http_connections_closed_total",
        &[("reason", "room")],
        connections.closed_for_room.load(Ordering::Relaxed),
    );
    out.sample(
        "gpunex_http_connections_closed_total",
        &[("reason", "idle")],
        connections.closed_idle.load(Ordering::Relaxed),
    );
    out.sample(
        "gpunex_http_connections_closed_total",
        &[("reason", "header_timeout")],
        connections.closed_header_timeout.load(Ordering::Relaxed),
    );
    out.counter(
        "gpunex_http_connections_refused_total",
        "Connections answered 503 server_busy: every connection allowed was busy.",
        connections.refused_busy.load(Ordering::Relaxed),
    );
}

fn store_figures(out: &mut Exposition, store: &gpunex_store::Store) {
    let stats = store.writer_stats();
    out.family(
        "gpunex_store_appends_total",
        "counter",
        "Appends by outcome: committed (events written), replayed (every event already stored alike; nothing written), refused (the store's rules), failed (the database).",
    );
    for (outcome, counter) in [
        ("committed", &stats.appends_committed),
        ("replayed", &stats.appends_replayed),
        ("refused", &stats.appends_refused),
        ("failed", &stats.appends_failed),
    ] {
        out.sample(
            "gpunex_store_appends_total",
            &[("outcome", outcome)],
            counter.load(Ordering::Relaxed),
        );
    }
    out.counter(
        "gpunex_store_commits_total",
        "Group transactions committed.",
        stats.commits.load(Ordering::Relaxed),
    );
    out.counter(
        "gpunex_store_commit_failures_total",
        "Group transactions that failed (nothing of them written).",
        stats.commit_failures.load(Ordering::Relaxed),
    );
    out.counter(
        "gpunex_store_events_total",
        "Events written to the log.",
        stats.events.load(Ordering::Relaxed),
    );
    out.family(
        "gpunex_store_group_size_appends",
        "histogram",
        "Appends per committed group transaction.",
    );
    out.histogram(
        "gpunex_store_group_size_appends",
        &[],
        &stats.group_size.snapshot(),
        Unit::Count,
    );
    out.family(
        "gpunex_store_commit_duration_seconds",
        "histogram",
        "How long each committed group transaction took.",
    );
    out.histogram(
        "gpunex_store_commit_duration_seconds",
        &[],
        &stats.commit_micros.snapshot(),
        Unit::Micros,
    );
    out.gauge(
        "gpunex_store_append_queue",
        "Appends waiting for the writer now.",
        store.append_queue_len() as u64,
    );
}

async fn read_model_figures(out: &mut Exposition, store: &Store, models: &ReadModels) {
    let registry = models.position();
    let read = async {
        let projections = store.projection_status().await?;
        let head = match projections.first() {
            Some(status) => status.head,
            None => store.head_position().await?,
        };
        let outbox = store
            .consumer_checkpoint(gpunex_app::outbox::OUTBOX)
            .await?;
        Ok::<_, gpunex_store::StoreError>((projections, head, outbox))
    };
    let read = read.await;
    out.gauge(
        "gpunex_database_up",
        "Whether the database answered this scrape (the figures read from it are missing when not).",
        u64::from(read.is_ok()),
    );
    out.gauge(
        "gpunex_registry_position",
        "The last log position the in-memory read models (credentials, fleet, market, earnings, payouts) applied.",
        registry,
    );
    let Ok((projections, head, outbox)) = read else {
        return;
    };
    out.gauge("gpunex_log_head_position", "The log's last position.", head);
    out.gauge(
        "gpunex_registry_lag_events",
        "Events in the log the in-memory read models have not applied yet.",
        head.saturating_sub(registry),
    );
    out.family(
        "gpunex_projection_checkpoint",
        "gauge",
        "The last log position each SQL read model applied.",
    );
    for status in &projections {
        out.sample(
            "gpunex_projection_checkpoint",
            &[("projection", status.projection)],
            status.checkpoint,
        );
    }
    out.family(
        "gpunex_projection_lag_events",
        "gauge",
        "Events in the log each SQL read model has not applied yet.",
    );
    for status in &projections {
        out.sample(
            "gpunex_projection_lag_events",
            &[("projection", status.projection)],
            status.lag(),
        );
    }
    out.gauge(
        "gpunex_outbox_lag_events",
        "Events the notification outbox has not looked at yet (each may carry a message to send).",
        head.saturating_sub(outbox),
    );
}

async fn money_figures(out: &mut Exposition, store: &Store, models: &ReadModels) {
    use gpunex_projections::payouts::{PayoutQueue, PayoutStatus};
    // The queues (open payouts) from memory; what settled from the stored payouts projection
    // (left out of this scrape if the database does not answer).
    let mut queues = models.with_earnings(|earnings| earnings.payouts().queues());
    match store.payout_totals().await {
        Ok(totals) => queues.extend(totals.into_iter().filter_map(|total| {
            let rail = match total.rail.as_str() {
                "solana" => gpunex_domain::payouts::Rail::Solana,
                "bank" => gpunex_domain::payouts::Rail::Bank,
                _ => return None,
            };
            matches!(total.status, PayoutStatus::Confirmed | PayoutStatus::Failed).then_some(
                PayoutQueue {
                    rail,
                    status: total.status,
                    payouts: total.payouts,
                    micro_usdc: total.micro_usdc,
                },
            )
        })),
        Err(error) => tracing::warn!(%error, "metrics: settled payouts not read"),
    }
    queues.sort_by_key(|q| (q.rail as u8, q.status as u8));
    let label = |queue: &PayoutQueue| {
        let rail = match queue.rail {
            gpunex_domain::payouts::Rail::Solana => "solana",
            gpunex_domain::payouts::Rail::Bank => "bank",
        };
        (rail, gpunex_store::payouts::status_text(queue.status))
    };
    out.family(
        "gpunex_payouts",
        "gauge",
        "Payouts by rail and status: scheduled (waiting for its rail), submitted (waiting to settle), confirmed, failed.",
    );
    for queue in &queues {
        let (rail, status) = label(queue);
        out.sample(
            "gpunex_payouts",
            &[("rail", rail), ("status", status)],
            queue.payouts,
        );
    }
    out.family(
        "gpunex_payouts_micro_usdc",
        "gauge",
        "The amount of those payouts, in micro-USDC (exact integers).",
    );
    for queue in &queues {
        let (rail, status) = label(queue);
        out.sample_signed(
            "gpunex_payouts_micro_usdc",
            &[("rail", rail), ("status", status)],
            queue.micro_usdc,
        );
    }
    let undecided = models.with_adjustments(|adjustments| {
        adjustments.all().filter(|p| p.decided.is_none()).count() as u64
    });
    out.gauge(
        "gpunex_adjustments_awaiting_decision",
        "Ledger adjustments proposed and not yet approved or rejected by a second person.",
        undecided,
    );
}

/// How a histogram's integer observations print.
#[derive(Clone, Copy)]
enum Unit {
    /// Microseconds, printed as seconds.
    Micros,
    /// Plain counts.
    Count,
}

impl Unit {
    fn print(self, value: u64) -> String {
        match self {
            Unit::Micros => seconds(value),
            Unit::Count => value.to_string(),
        }
    }
}

/// Microseconds as a decimal number of seconds, exactly (no floating point).
fn seconds(micros: u64) -> String {
    let whole = micros / 1_000_000;
    let fraction = micros % 1_000_000;
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:06}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A label value escaped as the format requires (backslash, double quote, line feed).
fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The text being written.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn labels(labels: &[(&str, &str)]) -> String {
        if labels.is_empty() {
            return String::new();
        }
        let inner: Vec<String> = labels
            .iter()
            .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
            .collect();
        format!("{{{}}}", inner.join(","))
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        let _ = writeln!(self.text, "{name}{} {value}", Self::labels(labels));
    }

    fn sample_signed(&mut self, name: &str, labels: &[(&str, &str)], value: i64) {
        let _ = writeln!(self.text, "{name}{} {value}", Self::labels(labels));
    }

    fn gauge(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "gauge", help);
        self.sample(name, &[], value);
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "counter", help);
        self.sample(name, &[], value);
    }

    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        snapshot: &HistogramSnapshot,
        unit: Unit,
    ) {
        let bucket = format!("{name}_bucket");
        for (bound, count) in snapshot.bounds.iter().zip(&snapshot.cumulative) {
            let le = unit.print(*bound);
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, *count);
        }
        let mut with_le = labels.to_vec();
        with_le.push(("le", "+Inf"));
        self.sample(&bucket, &with_le, snapshot.count);
        let _ = writeln!(
            self.text,
            "{name}_sum{} {}",
            Self::labels(labels),
            unit.print(snapshot.sum)
        );
        self.sample(&format!("{name}_count"), labels, snapshot.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_print_as_exact_seconds() {
        assert_eq!(seconds(0), "0");
        assert_eq!(seconds(500), "0.0005");
        assert_eq!(seconds(1_000), "0.001");
        assert_eq!(seconds(2_500_000), "2.5");
        assert_eq!(seconds(60_000_000), "60");
        assert_eq!(seconds(1_234_567), "1.234567");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("a\nb"), "a\\nb");
    }

    #[test]
    fn a_histogram_prints_cumulative_buckets_then_sum_and_count() {
        let histogram = Histogram::new(&[1_000, 10_000]);
        histogram.observe(900);
        histogram.observe(5_000);
        histogram.observe(20_000);
        let mut out = Exposition::default();
        out.histogram("x", &[("route", "/r")], &histogram.snapshot(), Unit::Micros);
        assert_eq!(
            out.text,
            "x_bucket{route=\"/r\",le=\"0.001\"} 1\n\
             x_bucket{route=\"/r\",le=\"0.01\"} 2\n\
             x_bucket{route=\"/r\",le=\"+Inf\"} 3\n\
             x_sum{route=\"/r\"} 0.0259\n\
             x_count{route=\"/r\"} 3\n"
        );
    }

    #[test]
    fn only_standard_methods_become_labels() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(
            method_label(&Method::from_bytes(b"BREW").unwrap_or(Method::GET)),
            "other"
        );
    }
}
