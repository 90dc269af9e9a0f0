//! The provider's earnings dashboard and the finance view, answered from the earnings
//! projection (`gpunex_projections::earnings`), never by replaying the log.
//!
//! Periods are local calendar days in the provider's time zone (the one of its weekly
//! availability, else UTC; `tz` overrides): this week starts on Monday, this month on the 1st.

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use crate::json::Json;
use crate::params::{Path, Query};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::NaiveDate;
use chrono_tz::Tz;
use gpunex_domain::calendar::{self, CalendarError};
use gpunex_domain::money::Usdc;
use gpunex_domain::onboarding::Availability;
use gpunex_domain::time::Timestamp;
use gpunex_projections::earnings::{Earnings, Figures, Line, Sums};
use gpunex_store::earnings::LineRange;
use gpunex_wire::earnings as we;
use uuid::Uuid;

use crate::auth::Caller;
use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;

fn usdc(micros: i64) -> String {
    Usdc::from_micros(micros).to_string()
}

pub fn totals(sums: Sums) -> we::Totals {
    we::Totals {
        gross_micro_usdc: sums.gross,
        fee_micro_usdc: sums.fee,
        net_micro_usdc: sums.net,
        gross_usdc: usdc(sums.gross),
        fee_usdc: usdc(sums.fee),
        net_usdc: usdc(sums.net),
        gpu_seconds: sums.gpu_seconds,
        lines: sums.lines,
    }
}

fn calendar_error(field: &str, error: CalendarError) -> ApiError {
    let code = match error {
        CalendarError::UnknownZone(_) => ErrorCode::UnknownTimeZone,
        CalendarError::BadDate(_) => ErrorCode::InvalidDate,
        CalendarError::BadInstant(_) => ErrorCode::InvalidTimestamp,
        CalendarError::BadRange => ErrorCode::InvalidRange,
    };
    ApiError::query(field, code, error.to_string())
}

/// The query of an earnings request: the zone and an optional day range.
struct Range {
    zone: Tz,
    zone_name: String,
    days: Option<(NaiveDate, NaiveDate)>,
}

fn parse_range(query: &HashMap<String, String>, default_zone: String) -> Result<Range, ApiError> {
    if let Some(key) = query
        .keys()
        .find(|k| !["tz", "from", "to", "by"].contains(&k.as_str()))
    {
        return Err(ApiError::query(
            key,
            ErrorCode::UnknownParameter,
            "known: tz, from, to (and by on /daily)",
        ));
    }
    let zone_name = query.get("tz").cloned().unwrap_or(default_zone);
    let zone = calendar::zone(&zone_name).map_err(|e| calendar_error("tz", e))?;
    let day = |name: &str| {
        query
            .get(name)
            .map(|t| calendar::date(t).map_err(|e| calendar_error(name, e)))
            .transpose()
    };
    let days = match (day("from")?, day("to")?) {
        (Some(from), Some(to)) => {
            calendar::days(from, to).map_err(|e| calendar_error("to", e))?;
            Some((from, to))
        }
        (None, None) => None,
        _ => {
            return Err(ApiError::query(
                "from",
                ErrorCode::InvalidRange,
                "give both from and to (YYYY-MM-DD), or neither",
            ));
        }
    };
    Ok(Range {
        zone,
        zone_name,
        days,
    })
}

/// The provider's time zone: its weekly availability's, else UTC.
fn provider_zone(state: &AppState, provider_id: Uuid) -> String {
    match state
        .credentials
        .with_market(|m| m.availability(provider_id))
    {
        Availability::Weekly { time_zone, .. } => time_zone,
        _ => "UTC".to_owned(),
    }
}

/// `[first, last]` local days as instants `[from, until)`.
fn span(zone: Tz, first: NaiveDate, last: NaiveDate) -> (Timestamp, Timestamp) {
    let after = last.succ_opt().unwrap_or(last);
    (
        calendar::day_start(zone, first),
        calendar::day_start(zone, after),
    )
}

async fn period(
    state: &AppState,
    provider_id: Uuid,
    zone: Tz,
    (first, last): (NaiveDate, NaiveDate),
    as_of: u64,
) -> Result<we::Period, ApiError> {
    let (from, until) = span(zone, first, last);
    Ok(we::Period {
        first_day: first.to_string(),
        last_day: last.to_string(),
        from: timestamp(from.unix_micros()),
        until: timestamp(until.unix_micros()),
        totals: totals(
            state
                .store
                .earnings_sums(provider_id, from, until, as_of)
                .await?,
        ),
    })
}

/// Lines read per page from the stored projection.
const LINES_PAGE: usize = 5_000;

/// A provider's lines dated in `[from, until)` as of `as_of`, oldest first, read page by page.
async fn lines_of(
    state: &AppState,
    provider_id: Uuid,
    from: Timestamp,
    until: Timestamp,
    as_of: u64,
) -> Result<Vec<Line>, ApiError> {
    let range = LineRange::Dated { from, until, as_of };
    let mut lines: Vec<Line> = Vec::new();
    loop {
        let after = lines.last().map_or(0, |l| l.position);
        let page = state
            .store
            .earnings_lines(provider_id, range, after, LINES_PAGE)
            .await?;
        let full = page.len() == LINES_PAGE;
        lines.extend(page);
        if !full {
            return Ok(lines);
        }
    }
}

/// The in-memory earnings' position, once the stored lines have been folded to it too: what
/// reads combining the two are `as of`.
pub async fn earnings_as_of(state: &AppState) -> Result<u64, ApiError> {
    let as_of = state.credentials.with_earnings(Earnings::position);
    state.store.earnings_reached(as_of).await?;
    Ok(as_of)
}

/// The checks every provider dashboard endpoint makes: the caller may see this provider, the
/// provider exists, and the query names a valid zone and range.
fn dashboard_request(
    state: &AppState,
    caller: &Caller,
    provider_id: Uuid,
    query: &HashMap<String, String>,
) -> Result<Range, ApiError> {
    caller.for_provider(provider_id)?;
    if state
        .credentials
        .provider_application(&provider_id)
        .is_none()
    {
        return Err(ApiError::NotFound("provider"));
    }
    parse_range(query, provider_zone(state, provider_id))
}

/// `GET /v1/providers/{provider_id}/earnings?tz=&from=&to=`: this week, this month, all time,
/// the pending balance, and per GPU and per model over `from..=to` (default: this month).
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/earnings",
    operation_id = "earnings_summary",
    tag = "earnings",
    summary = "this week, this month, all time, pending balance, per GPU and per model (tz, from, to)",
    params(
        ("tz" = Option<String>, Query, description = "an IANA time zone for days, weeks and months (default the provider's)"),
        ("from" = Option<String>, Query, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "first day, YYYY-MM-DD"),
        ("to" = Option<String>, Query, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "last day, YYYY-MM-DD (at most 366 days after from)"),
    ),
    responses((status = 200, description = "this week, this month, all time, pending balance, per GPU and per model (tz, from, to)", body = we::EarningsSummary)),
)]
pub async fn summary(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
    Query(query): Query,
) -> Result<Json<we::EarningsSummary>, ApiError> {
    let range = dashboard_request(&state, &caller, provider_id, &query)?;
    let at = state.clock.now();
    let zone = range.zone;
    let week = calendar::week_of(zone, at);
    let month = calendar::month_of(zone, at);
    let month_last = calendar::next_month(month).pred_opt().unwrap_or(month);
    let (first, last) = range.days.unwrap_or((month, month_last));
    let (as_of, all_time, pending) = state.credentials.with_earnings(|earnings| {
        (
            earnings.position(),
            earnings.lifetime(provider_id),
            earnings.pending_balance(provider_id),
        )
    });
    state.store.earnings_reached(as_of).await?;
    let chosen = period(&state, provider_id, zone, (first, last), as_of).await?;
    let this_week = period(
        &state,
        provider_id,
        zone,
        (week, week + chrono::Days::new(6)),
        as_of,
    )
    .await?;
    let this_month = period(&state, provider_id, zone, (month, month_last), as_of).await?;
    let (from, until) = span(zone, first, last);
    let figures = state
        .store
        .earnings_figures(provider_id, &[from, until], as_of)
        .await?
        .pop()
        .unwrap_or_default();
    let summary = we::EarningsSummary {
        provider_id,
        time_zone: range.zone_name.clone(),
        as_of: timestamp(at.unix_micros()),
        this_week,
        this_month,
        all_time: totals(all_time),
        pending_balance_micro_usdc: pending,
        pending_balance_usdc: usdc(pending),
        period: chosen,
        per_gpu: gpu_earnings(&figures),
        per_model: figures
            .per_model
            .into_iter()
            .map(|(model_id, sums)| we::ModelEarnings {
                model_id,
                totals: totals(sums),
            })
            .collect(),
    };
    Ok(Json(summary))
}

/// The most days `by=gpu` splits per GPU (a quarter), in one grouped read.
const DAILY_BY_GPU_DAYS_MAX: usize = gpunex_store::earnings::SHARE_DAYS_MAX;

fn gpu_earnings(figures: &Figures) -> Vec<we::GpuEarnings> {
    figures
        .per_gpu
        .iter()
        .map(|((gpu_uuid, model_id), sums)| we::GpuEarnings {
            gpu_uuid: gpu_uuid.clone(),
            model_id: model_id.clone(),
            totals: totals(*sums),
        })
        .collect()
}

/// `GET /v1/providers/{provider_id}/earnings/daily?from=&to=&tz=&by=`: one entry per local day
/// (at most 366), empty days included; with `by=gpu`, each day split per GPU.
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/earnings/daily",
    operation_id = "earnings_daily",
    tag = "earnings",
    summary = "earnings per local day over from..to (at most 366 days)",
    params(
        ("tz" = Option<String>, Query, description = "an IANA time zone for days, weeks and months (default the provider's)"),
        ("from" = String, Query, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "first day, YYYY-MM-DD"),
        ("to" = String, Query, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "last day, YYYY-MM-DD (at most 366 days after from)"),
        ("by" = Option<String>, Query, pattern = "^gpu$", description = "`gpu`: each day also split per GPU (`per_gpu`), at most 92 days"),
    ),
    responses((status = 200, description = "earnings per local day over from..to (at most 366 days)", body = we::DailyEarnings)),
)]
pub async fn daily(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
    Query(query): Query,
) -> Result<Json<we::DailyEarnings>, ApiError> {
    let range = dashboard_request(&state, &caller, provider_id, &query)?;
    let (first, last) = range.days.ok_or_else(|| {
        ApiError::query(
            "from",
            ErrorCode::Required,
            "from and to (YYYY-MM-DD) are required",
        )
    })?;
    let days = calendar::days(first, last).map_err(|e| calendar_error("to", e))?;
    let by_gpu = match query.get("by").map(String::as_str) {
        None => false,
        Some("gpu") if days.len() <= DAILY_BY_GPU_DAYS_MAX => true,
        Some("gpu") => {
            return Err(ApiError::query(
                "by",
                ErrorCode::InvalidRange,
                format!("by=gpu covers at most {DAILY_BY_GPU_DAYS_MAX} days"),
            ));
        }
        Some(_) => {
            return Err(ApiError::query(
                "by",
                ErrorCode::InvalidValue,
                "by is `gpu` or absent",
            ));
        }
    };
    let zone = range.zone;
    let as_of = earnings_as_of(&state).await?;
    let bounds: Vec<Timestamp> = days
        .iter()
        .chain(days.last().and_then(|d| d.succ_opt()).as_ref())
        .map(|day| calendar::day_start(zone, *day))
        .collect();
    // Each day's sums: split per GPU, the day's figures (from the stored hours and, for what
    // they cannot say, the lines), whose totals are the day's; else the provider's running sums
    // through each day's start (one lookup per boundary).
    let per_day: Vec<(Sums, Option<Vec<we::GpuEarnings>>)> = if by_gpu {
        state
            .store
            .earnings_figures(provider_id, &bounds, as_of)
            .await?
            .iter()
            .map(|figures| (figures.totals(), Some(gpu_earnings(figures))))
            .collect()
    } else {
        let mut through = Vec::with_capacity(bounds.len());
        for start in &bounds {
            through.push(
                state
                    .store
                    .earnings_before(provider_id, *start, as_of)
                    .await?
                    .0,
            );
        }
        through
            .windows(2)
            .map(|pair| (pair[1].minus(pair[0]), None))
            .collect()
    };
    let mut range_sums = Sums::default();
    let days: Vec<we::Day> = days
        .iter()
        .zip(bounds.windows(2))
        .zip(per_day)
        .map(|((day, pair), (sums, per_gpu))| {
            range_sums.add_sums(sums);
            we::Day {
                date: day.to_string(),
                from: timestamp(pair[0].unix_micros()),
                until: timestamp(pair[1].unix_micros()),
                totals: totals(sums),
                per_gpu,
            }
        })
        .collect();
    Ok(Json(we::DailyEarnings {
        provider_id,
        time_zone: range.zone_name.clone(),
        days,
        totals: totals(range_sums),
    }))
}

/// The statement's columns.
pub const STATEMENT_HEADER: &str = "recorded_at,position,usage_event_id,agent_report_id,rental_id,machine_id,model_id,gpu_uuids,from_gpu_seconds,to_gpu_seconds,gpu_seconds,price_per_gpu_hour_usdc,gross_usdc,fee_bp,fee_usdc,net_usdc";

/// One statement row. Every field is an id, a number or a catalog id: nothing needs quoting,
/// and GPU UUIDs are separated by spaces.
pub fn statement_row(line: &Line) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        timestamp(line.at.unix_micros()),
        line.position,
        line.entry_id,
        line.report_id,
        line.rental.rental_id,
        line.rental.machine_id,
        line.rental.model_id,
        line.rental.gpu_uuids.join(" "),
        line.from_gpu_seconds,
        line.to_gpu_seconds,
        line.gpu_seconds(),
        line.price_per_gpu_hour,
        line.gross,
        line.fee_bp,
        line.fee,
        line.net,
    )
}

/// `GET /v1/providers/{provider_id}/earnings/statement.csv?from=&to=&tz=`: every usage line of
/// the period, each naming its rental and the usage event (and agent report) it comes from, and
/// a last `total` row.
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/earnings/statement.csv",
    operation_id = "earnings_statement",
    tag = "earnings",
    summary = "every usage line of from..to as CSV, naming its rental and usage event",
    params(
        ("tz" = Option<String>, Query, description = "an IANA time zone for days, weeks and months (default the provider's)"),
        ("from" = String, Query, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "first day, YYYY-MM-DD"),
        ("to" = String, Query, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "last day, YYYY-MM-DD (at most 366 days after from)"),
    ),
    responses((status = 200, description = "one row per usage line, with a header row", content_type = "text/csv", body = String)),
)]
pub async fn statement(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
    Query(query): Query,
) -> Result<Response, ApiError> {
    let range = dashboard_request(&state, &caller, provider_id, &query)?;
    let (first, last) = range.days.ok_or_else(|| {
        ApiError::query(
            "from",
            ErrorCode::Required,
            "from and to (YYYY-MM-DD) are required",
        )
    })?;
    let (from, until) = span(range.zone, first, last);
    let as_of = earnings_as_of(&state).await?;
    let lines = lines_of(&state, provider_id, from, until, as_of).await?;
    let mut body = String::with_capacity(64 + lines.len() * 300);
    body.push_str(STATEMENT_HEADER);
    body.push('\n');
    let mut sums = Sums::default();
    for line in &lines {
        body.push_str(&statement_row(line));
        body.push('\n');
        sums.add_sums(Sums::of(line));
    }
    body.push_str(&format!(
        "total,,,,,,,,,,{},,{},,{},{}\n",
        sums.gpu_seconds,
        usdc(sums.gross),
        usdc(sums.fee),
        usdc(sums.net)
    ));
    let filename = format!("gpunex-earnings-{provider_id}-{first}-{last}.csv");
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        body,
    )
        .into_response())
}

/// `GET /v1/earnings?from=&to=&tz=` (finance): every provider's earnings in the period (default:
/// this month, UTC), their pending balances, and the platform's totals.
#[utoipa::path(
    get,
    path = "/v1/earnings",
    operation_id = "earnings_finance",
    tag = "earnings",
    summary = "every provider's earnings in a period, pending balances and platform totals",
    params(
        ("tz" = Option<String>, Query, description = "an IANA time zone for days, weeks and months (default the provider's)"),
        ("from" = Option<String>, Query, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "first day, YYYY-MM-DD"),
        ("to" = Option<String>, Query, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "last day, YYYY-MM-DD (at most 366 days after from)"),
    ),
    responses((status = 200, description = "every provider's earnings in a period, pending balances and platform totals", body = we::FinanceEarnings)),
)]
pub async fn finance(
    State(state): State<AppState>,
    _caller: Caller,
    Query(query): Query,
) -> Result<Json<we::FinanceEarnings>, ApiError> {
    let range = parse_range(&query, "UTC".to_owned())?;
    let zone = range.zone;
    let month = calendar::month_of(zone, state.clock.now());
    let month_last = calendar::next_month(month).pred_opt().unwrap_or(month);
    let (first, last) = range.days.unwrap_or((month, month_last));
    let (from, until) = span(zone, first, last);
    let (as_of, pending, all_time) = state.credentials.with_earnings(|earnings| {
        let pending: Vec<(Uuid, i64)> = earnings
            .providers()
            .into_iter()
            .map(|provider_id| (provider_id, earnings.pending_balance(provider_id)))
            .collect();
        (earnings.position(), pending, earnings.totals())
    });
    state.store.earnings_reached(as_of).await?;
    let ids: Vec<Uuid> = pending.iter().map(|(id, _)| *id).collect();
    let period = state
        .store
        .earnings_sums_of(&ids, from, until, as_of)
        .await?;
    let mut all = Sums::default();
    let mut providers = Vec::with_capacity(pending.len());
    for ((provider_id, pending), sums) in pending.into_iter().zip(period) {
        all.add_sums(sums);
        providers.push(we::ProviderTotals {
            provider_id,
            period: totals(sums),
            pending_balance_micro_usdc: pending,
            pending_balance_usdc: usdc(pending),
        });
    }
    let answer = we::FinanceEarnings {
        time_zone: range.zone_name.clone(),
        first_day: first.to_string(),
        last_day: last.to_string(),
        from: timestamp(from.unix_micros()),
        until: timestamp(until.unix_micros()),
        providers,
        totals: totals(all),
        all_time: totals(all_time),
    };
    Ok(Json(answer))
}
