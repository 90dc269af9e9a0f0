// Precios: the hourly USDC price per model with its history, the weekly availability schedule
// (its zone, its windows, and the next week's open intervals as instants, so daylight-saving
// changes show), maintenance windows, the platform's price recommendation with the inputs it
// shows, and where each GPU ranks in search with the breakdown of its points.

import { api, get, query } from "../lib/api.js";
import { action, badge, control, facts, form, h, part, table } from "../lib/dom.js";
import { dateTime, integer, microsOf, percentBp, usdc } from "../lib/format.js";
import { t, tOr } from "../lib/i18n.js";
import { describeSchedule, scheduleEditor } from "../lib/schedule.js";

const money = (decimal) => usdc(microsOf(decimal));

/** A `datetime-local` value (the browser's zone) as an RFC 3339 instant, or null if empty. */
function instant(value) {
  return value ? new Date(value).toISOString() : null;
}

async function region(ctx) {
  if (!ctx.own) return null;
  // The person's own applications say where the approved one's hardware is.
  const own = (await get("/v1/applications")).applications;
  return own.find((a) => a.provider_id === ctx.providerId)?.form.gpus[0]?.location.region ?? null;
}

function recommendationPart(recommendation) {
  const sample = (m) => m ? t("prices.market_sample", {
    supply: m.supply, rentals: m.rentals, demand: percentBp(m.demand_bp),
    median: m.rented_price_quartiles_usdc ? money(m.rented_price_quartiles_usdc[1]) : "—",
    idle: m.idle_price_quartiles_usdc ? money(m.idle_price_quartiles_usdc[1]) : "—",
  }) : "—";
  return h("div", { class: "recommendation" },
    h("p", {}, recommendation.recommended_price_micro_usdc === null
      ? t("prices.no_recommendation")
      : [t("prices.recommended"), " ", h("strong", {}, usdc(recommendation.recommended_price_micro_usdc)), " ",
        recommendation.low_usdc ? t("prices.range", { low: money(recommendation.low_usdc), high: money(recommendation.high_usdc) }) : ""]),
    facts([
      [t("prices.basis"), [tOr(`basis.${recommendation.basis}`, recommendation.basis), recommendation.fallback ? [" ", badge(t("prices.fallback"), "warn")] : null]],
      [t("prices.reason"), tOr(`reason.${recommendation.basis}`, recommendation.reason, { window: recommendation.window_days })],
      [t("prices.window"), t("prices.window_days", { n: recommendation.window_days })],
      [t("prices.region_market", { region: recommendation.region ?? "—" }), sample(recommendation.region_market)],
      [t("prices.model_market"), sample(recommendation.model_market)],
    ]));
}

function modelPart(ctx, model, prices, recommendation, context) {
  const current = prices?.current;
  return part(model,
    h("p", {}, current ? [t("prices.current"), " ", h("strong", { "data-price": model }, money(current.price_usdc)), " ", t("prices.per_gpu_hour")] : badge(t("prices.none"), "warn")),
    form({
      submit: t("prices.set"),
      body: [
        h("div", { class: "row" },
          control({ pointer: "/price_usdc", label: t("prices.new_price"), hint: t("prices.price_hint"), required: true, attributes: { inputmode: "decimal" } }),
          control({ pointer: "/effective_at", label: t("prices.effective_at"), type: "datetime-local", hint: t("prices.effective_hint"), required: false, optional: true })),
      ],
      onsubmit: async (element) => {
        const value = (p) => element.querySelector(`[data-pointer="${p}"]`).value;
        await api("POST", `/v1/providers/${ctx.providerId}/prices`, {
          model_id: model, price_usdc: value("/price_usdc").trim(), effective_at: instant(value("/effective_at")),
        }, ctx.as);
        await context.rerender();
      },
    }),
    recommendation ? recommendationPart(recommendation) : null,
    table(t("prices.history", { model }), [
      [t("prices.effective_at"), (p) => dateTime(p.effective_at, ctx.zone)],
      [t("prices.price"), (p) => money(p.price_usdc), { numeric: true }],
      [t("prices.set_at"), (p) => dateTime(p.set_at, ctx.zone)],
    ], [...(prices?.history ?? [])].reverse(), t("prices.no_history")));
}

function schedulePart(ctx, view, context) {
  const editor = scheduleEditor("/availability", view.availability, ctx.zone === "UTC" ? undefined : ctx.zone);
  const zone = view.availability.kind === "weekly" ? view.availability.time_zone : ctx.zone;
  return part(t("schedule.title"),
    h("p", {}, view.open_now ? badge(t("schedule.open_now"), "ok") : badge(t("schedule.closed_now"), "warn"), " ", describeSchedule(view.availability)),
    form({
      submit: t("schedule.save"),
      body: [editor],
      onsubmit: async () => {
        await api("POST", `/v1/providers/${ctx.providerId}/availability`, { availability: editor.value() }, ctx.as);
        await context.rerender();
      },
    }),
    table(t("schedule.upcoming", { zone }), [
      [t("schedule.opens"), (i) => dateTime(i.from, zone)],
      [t("schedule.closes"), (i) => dateTime(i.until, zone)],
    ], view.upcoming, t("schedule.never_open")),
    h("p", { class: "hint" }, t("schedule.dst_hint")));
}

function maintenancePart(ctx, windows, machines, context) {
  const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return part(t("maintenance.title"),
    h("p", {}, t("maintenance.about")),
    form({
      submit: t("maintenance.announce"),
      body: [
        h("div", { class: "row" },
          control({ pointer: "/from", label: t("maintenance.from"), type: "datetime-local", hint: t("maintenance.browser_zone", { zone: browserZone }), required: true }),
          control({ pointer: "/until", label: t("maintenance.until"), type: "datetime-local", required: true })),
        control({ pointer: "/machine_id", label: t("maintenance.machine"), type: "select",
          options: [["", t("maintenance.all_machines")], ...machines.map((m) => [m.machine_id, m.host.hostname])] }),
        control({ pointer: "/reason", label: t("maintenance.reason"), required: true }),
      ],
      onsubmit: async (element) => {
        const value = (p) => element.querySelector(`[data-pointer="${p}"]`).value;
        await api("POST", `/v1/providers/${ctx.providerId}/maintenance`, {
          from: instant(value("/from")) ?? "", until: instant(value("/until")) ?? "",
          machine_id: value("/machine_id") || null, reason: value("/reason").trim(),
        }, ctx.as);
        await context.rerender();
      },
    }),
    table(t("maintenance.list"), [
      [t("maintenance.from"), (m) => dateTime(m.from, ctx.zone)],
      [t("maintenance.until"), (m) => dateTime(m.until, ctx.zone)],
      [t("maintenance.machine"), (m) => machines.find((x) => x.machine_id === m.machine_id)?.host.hostname ?? t("maintenance.all_machines")],
      [t("maintenance.reason"), (m) => [m.reason, m.active_now ? [" ", badge(t("maintenance.active"), "warn")] : null]],
      ["", (m) => action(t("maintenance.cancel"), async () => {
        await api("POST", `/v1/providers/${ctx.providerId}/maintenance/${m.maintenance_id}/cancel`, undefined, ctx.as);
        await context.rerender();
      })],
    ], windows, t("maintenance.none")));
}

function rankPart(ctx, listings, gpus) {
  const name = (uuid) => {
    const gpu = gpus.find((g) => g.gpu_uuid === uuid);
    return gpu ? `${gpu.name} #${gpu.index} (${gpu.machine})` : uuid;
  };
  const points = (value) => value === null || value === undefined ? t("rank.not_yet") : integer(value);
  return part(t("rank.title"),
    h("p", {}, t("rank.about")),
    table(t("rank.title"), [
      [t("gpu.name"), (g) => name(g.gpu_uuid)],
      [t("rank.place"), (g) => g.listed ? t("rank.place_value", { place: g.search_place, of: g.model_listed }) : g.hidden.map((r) => badge(tOr(`hidden.${r}`, r), "warn"))],
      [t("rank.total"), (g) => g.rank ? h("strong", {}, integer(g.rank.total)) : "—", { numeric: true }],
      [t("rank.uptime"), (g) => g.rank ? `${integer(g.rank.uptime_points)} (${g.rank.uptime_pct} %)` : "—", { numeric: true }],
      [t("rank.price"), (g) => g.rank ? `${integer(g.rank.price_points)} (${money(g.rank.price_usdc)} / ${t("rank.median")} ${money(g.rank.median_price_usdc)})` : "—", { numeric: true }],
      [t("rank.tier"), (g) => g.rank ? integer(g.rank.tier_points) : "—", { numeric: true }],
      [t("rank.commitment"), (g) => g.rank ? `${integer(g.rank.commitment_points)} (${t("apply.months", { n: g.rank.commitment_months })})` : "—", { numeric: true }],
      [t("rank.reliability"), (g) => points(g.rank?.reliability_points)],
      [t("rank.performance"), (g) => points(g.rank?.performance_points)],
    ], listings.gpus, t("machines.none")),
    h("p", { class: "hint" }, t("rank.formula")));
}

export async function tab(ctx, context) {
  const base = `/v1/providers/${ctx.providerId}`;
  const [prices, fleet, listings, maintenance, place] = await Promise.all([
    get(`${base}/prices`, ctx.as), get(`${base}/machines`, ctx.as), get(`${base}/listings`, ctx.as),
    get(`${base}/maintenance`, ctx.as), region(ctx),
  ]);
  const gpus = fleet.machines.flatMap((m) => m.gpus.map((g) => ({ ...g, machine: m.host.hostname })));
  const models = [...new Set([...gpus.map((g) => g.model_id).filter(Boolean), ...prices.models.map((m) => m.model_id)])].sort();
  const recommendations = await Promise.all(models.map((model) =>
    get(`/v1/market/recommendations${query({ model, region: place })}`).catch(() => null)));
  return [
    h("h2", {}, t("tab.prices")),
    h("p", { class: "hint" }, t("prices.about")),
    models.length ? models.map((model, i) => modelPart(ctx, model, prices.models.find((m) => m.model_id === model), recommendations[i], context))
      : h("p", { class: "empty" }, t("prices.no_models")),
    schedulePart(ctx, ctx.availability, context),
    maintenancePart(ctx, maintenance, fleet.machines, context),
    rankPart(ctx, listings, gpus),
  ];
}
