// The Panel de proveedor: one provider's tabs (Máquinas, Pruebas de rendimiento, Precios,
// Ganancias, Pagos, Rendimiento). The person acts as the provider they hold, or finance and
// admins read any provider (ADR 0009); the API decides, and a refusal is shown as such.

import { actAsFor, get } from "../lib/api.js";
import { badge, h, link, table } from "../lib/dom.js";
import { duration } from "../lib/format.js";
import { t } from "../lib/i18n.js";
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

/** Pruebas de rendimiento: no benchmark has run on any GPU yet (the benchmark suite is still
 *  to come), so the tab says what the marketplace shows instead: the datasheet figure. */
async function benchmarks(ctx) {
  const [fleet, listings] = await Promise.all([
    get(`/v1/providers/${ctx.providerId}/machines`, ctx.as),
    get(`/v1/providers/${ctx.providerId}/listings`, ctx.as).catch(() => ({ gpus: [] })),
  ]);
  const gpus = fleet.machines.flatMap((m) => m.gpus.map((g) => ({ ...g, machine: m })));
  const detail = new Map();
  await Promise.all(listings.gpus.filter((g) => g.listed).map(async (g) => {
    detail.set(g.gpu_uuid, (await get(`/v1/listings/${encodeURIComponent(g.gpu_uuid)}`)).listing);
  }));
  return [
    h("h2", {}, t("tab.benchmarks")),
    h("p", {}, t("benchmarks.none_yet")),
    table(t("benchmarks.gpus"), [
      [t("gpu.name"), (g) => `${g.name} (#${g.index})`],
      [t("gpu.machine"), (g) => g.machine.host.hostname],
      [t("benchmarks.score"), () => t("benchmarks.not_run")],
      [t("benchmarks.shown_to_renters"), (g) => detail.has(g.gpu_uuid)
        ? t("benchmarks.datasheet", { tflops: detail.get(g.gpu_uuid).fp16_tflops }) : t("benchmarks.not_listed")],
    ], gpus, t("machines.none")),
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

