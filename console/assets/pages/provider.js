// The Panel de proveedor: one provider's tabs (Máquinas, Pruebas de rendimiento, Precios,
// Ganancias, Pagos, Rendimiento). The person acts as the provider they hold, or finance and
// admins read any provider (ADR 0009); the API decides, and a refusal is shown as such.

import { actAsFor, api, get, staffRole } from "../lib/api.js";
import { action, badge, facts, h, link, part, table } from "../lib/dom.js";
import { lineChart } from "../lib/chart.js";
import { dateTime, duration, percentBp } from "../lib/format.js";
import { i18n, t } from "../lib/i18n.js";
import * as machines from "./machines.js";
import * as prices from "./prices.js";
import * as earnings from "./earnings.js";
import * as payouts from "./payouts.js";

const TABS = ["machines", "benchmarks", "prices", "earnings", "payouts", "performance"];

/** What every tab needs: the provider, the role the requests act in, the provider's zone. */
async function providerContext(providerId) {
  const actAs = actAsFor(providerId);
  const as = { actAs };
  const availability = await get(`/v1/providers/${providerId}/availability`, as).catch((problem) => {
    // Finance reads earnings and payouts but not schedules: the zone is then UTC, as the API's.
    if (problem.status === 403 && actAs !== `provider:${providerId}`) return null;
    throw problem;
  });
  const zone = availability?.availability.kind === "weekly" ? availability.availability.time_zone : "UTC";
  return { providerId, as, zone, own: actAs === `provider:${providerId}`, availability };
}

function header(ctx, tab) {
  return [
    h("h1", {}, t("panel.title")),
    h("p", { class: "hint" }, t("panel.provider", { id: ctx.providerId }), " · ", t("panel.zone", { zone: ctx.zone }),
      ctx.own ? null : [" · ", badge(t("panel.reading_as", { role: ctx.as.actAs ?? "—" }), "info")]),
    h("nav", { class: "tabs", "aria-label": t("panel.tabs") }, TABS.map((name) =>
      link(`/console/provider/${ctx.providerId}/${name}`, t(`tab.${name}`), { "aria-current": name === tab ? "page" : null }))),
  ];
}

export async function panel([providerId, tab = "machines"], context) {
  const ctx = await providerContext(providerId);
  const body = {
    machines: machines.tab,
    benchmarks,
    prices: prices.tab,
    earnings: earnings.tab,
    payouts: payouts.tab,
    performance,
  }[tab];
  return h("div", {}, header(ctx, tab), h("div", { class: "tab" }, await body(ctx, context)));
}

export async function machinePage([providerId, machineId], context) {
  const ctx = await providerContext(providerId);
  return h("div", {}, header(ctx, "machines"), await machines.telemetryPage(ctx, machineId, context));
}

export async function payoutPage([providerId, payoutId]) {
  const ctx = await providerContext(providerId);
  return h("div", {}, header(ctx, "payouts"), await payouts.proofPage(ctx, payoutId));
}

/** Units of each figure the suite measures (thousandths in the API). */
const METRIC_UNITS = {
  fp32_tflops: "TFLOPS", tf32_tflops: "TFLOPS", fp16_tflops: "TFLOPS", bf16_tflops: "TFLOPS",
  fp8_tflops: "TFLOPS", mem_read_gb_s: "GB/s", mem_write_gb_s: "GB/s", mem_copy_gb_s: "GB/s",
  host_to_device_gb_s: "GB/s", device_to_host_gb_s: "GB/s", ssd_read_mb_s: "MB/s",
  ssd_write_mb_s: "MB/s", network_rtt_us: "µs", network_mbit_s: "Mbit/s",
};

function figure(milli, metric) {
  const value = (milli / 1000).toLocaleString(i18n.lang, { maximumFractionDigits: 1 });
  return `${value} ${METRIC_UNITS[metric] ?? ""}`;
}

/** The host's figures: reported and compared across the fleet, not scored against the model. */
const HOST_METRICS = ["ssd_read_mb_s", "ssd_write_mb_s", "network_rtt_us", "network_mbit_s"];

const OUTCOME_KIND = { pass: "ok", warn: "warn", fail: "bad" };
const LISTING_KIND = { listed: "ok", delisted: "bad", overridden: "warn", not_benchmarked: "neutral" };

/** Pruebas de rendimiento: each GPU's score and verdict, its runs over time, the latest figures
 *  against the model's reference with the reasons and what to fix, and a re-test button. */
async function benchmarks(ctx, context) {
  const [fleet, listings] = await Promise.all([
    get(`/v1/providers/${ctx.providerId}/machines`, ctx.as),
    get(`/v1/providers/${ctx.providerId}/listings`, ctx.as).catch(() => ({ gpus: [] })),
  ]);
  const gpus = fleet.machines.flatMap((m) => m.gpus.map((g) => ({ ...g, machine: m })));
  const views = new Map(await Promise.all(gpus.map(async (g) =>
    [g.gpu_uuid, await get(`/v1/gpus/${encodeURIComponent(g.gpu_uuid)}/benchmarks`)])));
  const detail = new Map();
  await Promise.all(listings.gpus.filter((g) => g.listed).map(async (g) => {
    detail.set(g.gpu_uuid, (await get(`/v1/listings/${encodeURIComponent(g.gpu_uuid)}`)).listing);
  }));
  const canRetest = ctx.own || staffRole("admin");
  const retest = (g) => canRetest ? action(t("benchmarks.retest"), async () => {
    await api("POST", `/v1/gpus/${encodeURIComponent(g.gpu_uuid)}/benchmarks/retest`,
      { reason: t("benchmarks.retest_reason") }, ctx.as);
    await context.rerender();
  }) : null;
  const paused = [...views.values()].find((v) => v.delisting_paused)?.delisting_paused;
  const sections = gpus.filter((g) => views.get(g.gpu_uuid).latest).map((g) => {
    const view = views.get(g.gpu_uuid);
    const latest = view.latest;
    return part(t("benchmarks.gpu_title", { name: g.name, index: g.index, host: g.machine.host.hostname }),
      facts([
        [t("benchmarks.score"), view.score_pct ? percentBp(view.score_bp) : "—"],
        [t("benchmarks.verdict"), badge(t(`benchmarks.outcome.${latest.verdict.outcome}`), OUTCOME_KIND[latest.verdict.outcome])],
        [t("benchmarks.listing"), badge(t(`benchmarks.listing.${view.benchmark_listing}`), LISTING_KIND[view.benchmark_listing])],
        [t("benchmarks.last_run"), dateTime(latest.run.recorded_at, ctx.zone)],
        [t("benchmarks.environment"), t("benchmarks.environment_text", { driver: latest.environment.driver_version, cuda: latest.environment.cuda_version })],
        [t("benchmarks.consistency"), t("benchmarks.consistency_text", {
          runs: view.consistency.runs,
          spread: view.consistency.spread_bp === null ? "—" : percentBp(view.consistency.spread_bp),
          drift: view.consistency.last_vs_first_bp === null ? "—" : percentBp(view.consistency.last_vs_first_bp),
        })],
        [t("benchmarks.under_load"), t("benchmarks.under_load_text", {
          max: latest.health.max_temperature_c, sustained: latest.health.sustained_temperature_c,
          sm: latest.environment.sm_clock_mhz, seconds: latest.environment.sustained_seconds,
          ratio: percentBp(latest.health.sustained_ratio_bp),
        })],
        [t("benchmarks.power"), t("benchmarks.power_text", { limit: latest.health.power_limit_w, default: latest.health.default_power_limit_w })],
        latest.health.pcie ? [t("benchmarks.pcie"), t("benchmarks.pcie_text", {
          generation: latest.health.pcie.generation, width: latest.health.pcie.width,
          max_generation: latest.health.pcie.max_generation, max_width: latest.health.pcie.max_width,
          replays: latest.health.pcie_replays ?? 0,
        })] : null,
        [t("benchmarks.health"), t("benchmarks.health_text", {
          verified: t(latest.health.results_verified ? "benchmarks.verified" : "benchmarks.wrong"),
          ecc: latest.health.ecc_uncorrected, retired: latest.health.retired_pages,
          xids: latest.health.xids.length ? latest.health.xids.join(", ") : "—",
        })],
        latest.figures.some((f) => HOST_METRICS.includes(f.metric)) ? [t("benchmarks.host"),
          latest.figures.filter((f) => HOST_METRICS.includes(f.metric))
            .map((f) => `${t(`metric.${f.metric}`)} ${figure(f.median_milli, f.metric)}`).join(" · ")] : null,
        view.suite_skipped ? [t("benchmarks.skipped_since"), t("benchmarks.skipped_text", {
          reason: view.suite_skipped.reason, at: dateTime(view.suite_skipped.at, ctx.zone),
        })] : null,
        latest.run.simulated_profile ? [t("benchmarks.simulated"), latest.run.simulated_profile] : null,
        view.retest ? [t("benchmarks.retest_waiting"), dateTime(view.retest.at, ctx.zone)] : null,
        view.override ? [t("benchmarks.override"), `${view.override.reason} (${view.override.by})`] : null,
      ].filter(Boolean)),
      latest.verdict.reasons.length
        ? h("ul", { class: "reasons" }, latest.verdict.reasons.map((r) => h("li", {},
          badge(t(`benchmarks.outcome.${r.outcome}`), OUTCOME_KIND[r.outcome]), " ",
          h("strong", {}, r.code), ": ", r.evidence, h("br"), t("benchmarks.what_to_do"), " ", r.guidance)))
        : h("p", {}, t("benchmarks.no_reasons")),
      table(t("benchmarks.figures", { name: g.name, index: g.index }), [
        [t("benchmarks.metric"), (p) => t(`metric.${p.metric}`)],
        [t("benchmarks.measured"), (p) => figure(p.measured_milli, p.metric), { numeric: true }],
        [t("benchmarks.reference"), (p) => figure(p.reference.value_milli, p.metric), { numeric: true }],
        [t("benchmarks.reference_source"), (p) => p.reference.source.kind === "fleet"
          ? t("benchmarks.fleet_median", { gpus: p.reference.source.gpus }) : t("benchmarks.datasheet_reference")],
        [t("benchmarks.ratio"), (p) => percentBp(p.ratio_bp), { numeric: true }],
      ], latest.parts),
      lineChart({
        title: t("benchmarks.score_over_time", { name: g.name, index: g.index }), timeZone: ctx.zone, height: 160,
        series: [{ name: g.name, points: view.runs.map((r) => [Date.parse(r.recorded_at), r.score_bp / 100]) }],
        y: (v) => `${v.toLocaleString(i18n.lang, { maximumFractionDigits: 1 })} %`,
      }),
      view.refused.length ? table(t("benchmarks.refused"), [
        [t("benchmarks.when"), (r) => dateTime(r.recorded_at, ctx.zone)],
        [t("benchmarks.why"), (r) => r.reason.kind === "above_physical_limit"
          ? t("benchmarks.above_limit", { metric: t(`metric.${r.reason.metric}`), measured: figure(r.reason.measured_milli, r.reason.metric), limit: figure(r.reason.limit_milli, r.reason.metric) })
          : r.reason.kind],
      ], view.refused) : null,
      h("p", {}, retest(g)));
  });
  return [
    h("h2", {}, t("tab.benchmarks")),
    h("p", { class: "hint" }, t("benchmarks.about")),
    paused ? h("p", { class: "alert", role: "status" }, t("benchmarks.paused", { evidence: paused })) : null,
    table(t("benchmarks.gpus"), [
      [t("gpu.name"), (g) => `${g.name} (#${g.index})`],
      [t("gpu.machine"), (g) => g.machine.host.hostname],
      [t("benchmarks.score"), (g) => {
        const view = views.get(g.gpu_uuid);
        if (view.score_pct) return percentBp(view.score_bp);
        return view.suite_skipped ? t("benchmarks.skipped", { reason: view.suite_skipped.reason }) : t("benchmarks.not_run");
      }, { numeric: true }],
      [t("benchmarks.verdict"), (g) => {
        const latest = views.get(g.gpu_uuid).latest;
        return latest ? badge(t(`benchmarks.outcome.${latest.verdict.outcome}`), OUTCOME_KIND[latest.verdict.outcome]) : "—";
      }],
      [t("benchmarks.listing"), (g) => {
        const state = views.get(g.gpu_uuid).benchmark_listing;
        return badge(t(`benchmarks.listing.${state}`), LISTING_KIND[state]);
      }],
      [t("benchmarks.runs"), (g) => String(views.get(g.gpu_uuid).runs_total), { numeric: true }],
      [t("benchmarks.shown_to_renters"), (g) => detail.has(g.gpu_uuid)
        ? t(detail.get(g.gpu_uuid).performance_source === "benchmark" ? "benchmarks.measured_figure" : "benchmarks.datasheet",
          { tflops: detail.get(g.gpu_uuid).fp16_tflops })
        : t("benchmarks.not_listed")],
      [t("benchmarks.action"), (g) => retest(g)],
    ], gpus, t("machines.none")),
    sections,
  ];
}

/** Rendimiento: the reliability score is still to come; what exists now is each machine's
 *  downtime and the uptime the rank formula uses. */
async function performance(ctx) {
  const [fleet, listings] = await Promise.all([
    get(`/v1/providers/${ctx.providerId}/machines`, ctx.as),
    get(`/v1/providers/${ctx.providerId}/listings`, ctx.as).catch(() => ({ gpus: [] })),
  ]);
  const uptime = new Map(listings.gpus.filter((g) => g.rank).map((g) => [g.machine_id, g.rank.uptime_pct]));
  return [
    h("h2", {}, t("tab.performance")),
    h("p", {}, t("performance.no_score_yet")),
    table(t("performance.machines"), [
      [t("gpu.machine"), (m) => m.host.hostname],
      [t("machines.status"), (m) => machines.statusBadge(m.status)],
      [t("performance.downtime_24h"), (m) => duration(m.downtime_seconds_24h), { numeric: true }],
      [t("performance.downtime_30d"), (m) => duration(m.downtime_seconds_30d), { numeric: true }],
      [t("performance.uptime_30d"), (m) => uptime.has(m.machine_id) ? `${uptime.get(m.machine_id)} %` : t("performance.not_listed"), { numeric: true }],
    ], fleet.machines, t("machines.none")),
    h("p", { class: "hint" }, t("performance.about")),
  ];
}

