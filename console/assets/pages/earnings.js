// Ganancias: this week and this month, per GPU and per model, a chart per GPU over time, the
// history of a date range, and the CSV statement; the figures are read again every few seconds,
// so usage metered while the page is open shows without a reload.

import { download, get, query } from "../lib/api.js";
import { action, control, facts, fill, h, part, router, table } from "../lib/dom.js";
import { addDays, dateOnly, gpuHours, integer, today, usdc } from "../lib/format.js";
import { lineChart } from "../lib/chart.js";
import { t } from "../lib/i18n.js";

/** How often the figures are read again while the tab is open, in milliseconds. */
const REFRESH_MS = 5_000;
/** The longest range drawn per GPU (the API splits at most 92 days per GPU). */
const CHART_DAYS_MAX = 92;

function totalsFacts(totals) {
  return facts([
    [t("earnings.net"), h("strong", {}, usdc(totals.net_micro_usdc))],
    [t("earnings.gross"), usdc(totals.gross_micro_usdc)],
    [t("earnings.fee"), usdc(totals.fee_micro_usdc)],
    [t("earnings.gpu_hours"), gpuHours(totals.gpu_seconds)],
    [t("earnings.lines"), integer(totals.lines)],
  ]);
}

function figures(summary) {
  return h("div", { class: "cards" },
    h("div", { class: "card", "data-figure": "week" }, h("h3", {}, t("earnings.this_week")), h("p", { class: "big" }, usdc(summary.this_week.totals.net_micro_usdc)),
      h("p", { class: "hint" }, `${dateOnly(summary.this_week.first_day)} – ${dateOnly(summary.this_week.last_day)}`)),
    h("div", { class: "card", "data-figure": "month" }, h("h3", {}, t("earnings.this_month")), h("p", { class: "big" }, usdc(summary.this_month.totals.net_micro_usdc)),
      h("p", { class: "hint" }, `${dateOnly(summary.this_month.first_day)} – ${dateOnly(summary.this_month.last_day)}`)),
    h("div", { class: "card", "data-figure": "pending" }, h("h3", {}, t("earnings.pending_balance")), h("p", { class: "big" }, usdc(summary.pending_balance_micro_usdc)),
      h("p", { class: "hint" }, t("earnings.pending_about"))),
    h("div", { class: "card", "data-figure": "all_time" }, h("h3", {}, t("earnings.all_time")), h("p", { class: "big" }, usdc(summary.all_time.net_micro_usdc)),
      h("p", { class: "hint" }, t("earnings.gpu_hours_value", { hours: gpuHours(summary.all_time.gpu_seconds) }))));
}

function chart(daily, zone, names) {
  const gpus = new Map();
  for (const day of daily.days) {
    for (const gpu of day.per_gpu ?? []) {
      if (!gpus.has(gpu.gpu_uuid)) gpus.set(gpu.gpu_uuid, { model: gpu.model_id, values: new Map() });
      gpus.get(gpu.gpu_uuid).values.set(day.date, gpu.totals.net_micro_usdc);
    }
  }
  // Every day of the range on every line (a day without usage earned 0).
  const series = [...gpus.entries()].map(([uuid, gpu]) => ({
    name: names.get(uuid) ?? `${gpu.model} …${uuid.slice(-6)}`,
    points: daily.days.map((day) => [Date.parse(day.from), gpu.values.get(day.date) ?? 0]),
  }));
  return lineChart({ title: t("earnings.chart_title"), series, timeZone: zone, yMin: 0, y: (v) => usdc(Math.round(v)) });
}

export async function tab(ctx, context) {
  const params = new URLSearchParams(location.search);
  const base = `/v1/providers/${ctx.providerId}/earnings`;
  const fleet = await get(`/v1/providers/${ctx.providerId}/machines`, ctx.as);
  // The provider's zone, as the API's own periods use it (its schedule's, else UTC).
  const zone = ctx.zone;
  // A GPU by its machine and index ("gpu-07 #3"), as the provider knows it.
  const names = new Map(fleet.machines.flatMap((m) => m.gpus.map((g) => [g.gpu_uuid, `${m.host.hostname} #${g.index} (${g.model_id ?? g.name})`])));
  const to = params.get("to") ?? today(zone);
  const from = params.get("from") ?? addDays(to, -29);
  const range = { from, to };
  const region = h("div", { "aria-live": "off" });
  let shownFor = "";
  const split = spanDays(range) <= CHART_DAYS_MAX;
  const draw = async () => {
    // Within the per-GPU limit, the range's per-GPU and per-model figures are the sums of its
    // days' (integers, exact), and the summary is asked only for today; beyond it, the summary
    // of the whole range gives them.
    const period = split ? { from: today(zone), to: today(zone) } : range;
    const [summary, daily] = await Promise.all([
      get(`${base}${query(period)}`, ctx.as),
      get(`${base}/daily${query({ ...range, by: split ? "gpu" : undefined })}`, ctx.as),
    ]);
    const perGpu = split ? sumDays(daily.days) : summary.per_gpu;
    const perModel = split ? byModel(perGpu) : summary.per_model;
    // Redraw only what changed (a new usage line changes the summary's position).
    const key = JSON.stringify([summary.all_time, summary.pending_balance_micro_usdc, daily.totals]);
    if (key === shownFor) return;
    shownFor = key;
    fill(region,
      figures(summary),
      part(t("earnings.period", { from: dateOnly(range.from), to: dateOnly(range.to) }),
        totalsFacts(daily.totals),
        split ? chart(daily, zone, names) : h("p", { class: "hint" }, t("earnings.chart_too_long", { days: CHART_DAYS_MAX })),
        table(t("earnings.per_gpu"), [
          [t("gpu.name"), (g) => names.get(g.gpu_uuid) ?? g.gpu_uuid],
          [t("gpu.uuid"), (g) => h("code", { class: "id" }, g.gpu_uuid)],
          [t("gpu.model"), (g) => g.model_id],
          [t("earnings.gpu_hours"), (g) => gpuHours(g.totals.gpu_seconds), { numeric: true }],
          [t("earnings.net"), (g) => usdc(g.totals.net_micro_usdc), { numeric: true }],
        ], perGpu, t("earnings.nothing")),
        table(t("earnings.per_model"), [
          [t("gpu.model"), (m) => m.model_id],
          [t("earnings.gpu_hours"), (m) => gpuHours(m.totals.gpu_seconds), { numeric: true }],
          [t("earnings.gross"), (m) => usdc(m.totals.gross_micro_usdc), { numeric: true }],
          [t("earnings.fee"), (m) => usdc(m.totals.fee_micro_usdc), { numeric: true }],
          [t("earnings.net"), (m) => usdc(m.totals.net_micro_usdc), { numeric: true }],
        ], perModel, t("earnings.nothing"))),
      part(t("earnings.history"),
        h("p", { class: "hint" }, t("earnings.history_about")),
        table(t("earnings.history"), [
          [t("earnings.day"), (d) => dateOnly(d.date)],
          [t("earnings.gpu_hours"), (d) => gpuHours(d.totals.gpu_seconds), { numeric: true }],
          [t("earnings.gross"), (d) => usdc(d.totals.gross_micro_usdc), { numeric: true }],
          [t("earnings.fee"), (d) => usdc(d.totals.fee_micro_usdc), { numeric: true }],
          [t("earnings.net"), (d) => usdc(d.totals.net_micro_usdc), { numeric: true }],
        ], daily.days.filter((d) => d.totals.lines > 0).reverse(), t("earnings.nothing"))),
      h("p", { class: "hint", "data-as-of": summary.as_of }, t("earnings.as_of", { at: new Date(summary.as_of).toLocaleTimeString(document.documentElement.lang, { timeZone: zone }) })));
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), REFRESH_MS);
  context.onLeave(() => clearInterval(timer));
  const filter = h("form", { class: "filters", "aria-label": t("earnings.filter") },
    control({ name: "from", label: t("earnings.from"), type: "date", value: from, required: true }),
    control({ name: "to", label: t("earnings.to"), type: "date", value: to, required: true }),
    h("div", { class: "actions" }, h("button", { type: "submit" }, t("common.show"))));
  filter.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = (name) => filter.querySelector(`[name="${name}"]`).value;
    router.go(`${location.pathname}${query({ from: value("from"), to: value("to") })}`);
  });
  return [
    h("h2", {}, t("tab.earnings")),
    h("p", { class: "hint" }, t("earnings.zone", { zone })),
    filter,
    h("p", {}, action(t("earnings.download_csv"), () =>
      download(`${base}/statement.csv${query(range)}`, `gpunex-statement-${from}-${to}.csv`, ctx.as))),
    region,
  ];
}

const FIGURES = ["gross_micro_usdc", "fee_micro_usdc", "net_micro_usdc", "gpu_seconds", "lines"];

function add(into, totals) {
  for (const figure of FIGURES) into[figure] = (into[figure] ?? 0) + totals[figure];
  return into;
}

/** Each GPU's totals over the days (per_gpu of each day summed), highest earner first. */
function sumDays(days) {
  const gpus = new Map();
  for (const day of days) {
    for (const gpu of day.per_gpu ?? []) {
      const entry = gpus.get(gpu.gpu_uuid) ?? { gpu_uuid: gpu.gpu_uuid, model_id: gpu.model_id, totals: {} };
      add(entry.totals, gpu.totals);
      gpus.set(gpu.gpu_uuid, entry);
    }
  }
  return [...gpus.values()].sort((a, b) => b.totals.net_micro_usdc - a.totals.net_micro_usdc);
}

function byModel(gpus) {
  const models = new Map();
  for (const gpu of gpus) {
    const entry = models.get(gpu.model_id) ?? { model_id: gpu.model_id, totals: {} };
    add(entry.totals, gpu.totals);
    models.set(gpu.model_id, entry);
  }
  return [...models.values()];
}

function spanDays({ from, to }) {
  return Math.round((Date.parse(to) - Date.parse(from)) / 86_400_000) + 1;
}
