// The marketplace, for renters (beyond the guide): search the listings with the API's filters
// and sort orders, and see each listing's rank breakdown. Renting stays in the API.

import { get, query } from "../lib/api.js";
import { badge, control, facts, fill, h, link, part, router, table } from "../lib/dom.js";
import { dateTime, integer, microsOf, usdc } from "../lib/format.js";
import { t } from "../lib/i18n.js";

const FILTERS = ["model", "min_vram_gb", "country", "region", "max_price_usdc", "tier", "min_gpus", "sort"];
const money = (decimal) => usdc(microsOf(decimal));

function breakdown(rank) {
  const later = (v) => v === null ? t("rank.not_yet") : integer(v);
  return facts([
    [t("rank.total"), h("strong", {}, integer(rank.total))],
    [t("rank.uptime"), `${integer(rank.uptime_points)} (${rank.uptime_pct} %)`],
    [t("rank.price"), `${integer(rank.price_points)} (${money(rank.price_usdc)} / ${t("rank.median")} ${money(rank.median_price_usdc)})`],
    [t("rank.tier"), integer(rank.tier_points)],
    [t("rank.commitment"), `${integer(rank.commitment_points)} (${t("apply.months", { n: rank.commitment_months })})`],
    [t("rank.reliability"), later(rank.reliability_points)],
    [t("rank.performance"), later(rank.performance_points)],
  ]);
}

export async function search() {
  const params = new URLSearchParams(location.search);
  const chosen = Object.fromEntries(FILTERS.map((f) => [f, params.get(f) ?? ""]));
  const [catalog, page] = await Promise.all([
    get("/v1/catalog/models"),
    get(`/v1/listings${query({ ...chosen, after: params.get("after"), limit: 50 })}`),
  ]);
  const filters = h("form", { class: "filters", role: "search", "aria-label": t("market.filters") },
    control({ name: "model", label: t("gpu.model"), type: "select", value: chosen.model,
      options: [["", t("market.any_model")], ...catalog.map((m) => [m.model_id, m.name])] }),
    control({ name: "min_vram_gb", label: t("market.min_vram"), type: "number", value: chosen.min_vram_gb, attributes: { min: 1 } }),
    control({ name: "country", label: t("apply.country"), value: chosen.country, attributes: { maxlength: 2 } }),
    control({ name: "region", label: t("apply.region"), value: chosen.region }),
    control({ name: "max_price_usdc", label: t("market.max_price"), value: chosen.max_price_usdc, attributes: { inputmode: "decimal" } }),
    control({ name: "tier", label: t("application.tier"), type: "select", value: chosen.tier,
      options: [["", t("market.any_tier")], ["enterprise", t("tier.enterprise")], ["community", t("tier.community")]] }),
    control({ name: "min_gpus", label: t("market.min_gpus"), type: "number", value: chosen.min_gpus, attributes: { min: 1 } }),
    control({ name: "sort", label: t("market.sort"), type: "select", value: chosen.sort,
      options: [["", t("market.sort.rank")], ["price", t("market.sort.price")], ["perf_per_dollar", t("market.sort.perf_per_dollar")]] }),
    h("div", { class: "actions" }, h("button", { type: "submit" }, t("market.search"))));
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = Object.fromEntries(FILTERS.map((f) => [f, filters.querySelector(`[name="${f}"]`).value.trim()]));
    router.go(`/console/market${query(values)}`);
  });
  const detail = h("div", { "aria-live": "polite" });
  const show = async (uuid) => {
    const listing = await get(`/v1/listings/${encodeURIComponent(uuid)}`);
    fill(detail, part(t("market.listing", { model: listing.listing.model_name }),
      facts([
        [t("gpu.uuid"), listing.listing.gpu_uuid],
        [t("market.where"), `${listing.listing.city}, ${listing.listing.region} (${listing.listing.country})`],
        [t("prices.price"), `${money(listing.listing.price_usdc)} ${t("prices.per_gpu_hour")}`],
        [t("market.performance"), t("market.fp16", { tflops: listing.listing.fp16_tflops, source: listing.listing.performance_source })],
        [t("market.uptime"), `${listing.listing.uptime_pct} %`],
        [t("market.as_of"), dateTime(listing.as_of)],
      ]),
      h("h3", {}, t("rank.title")), breakdown(listing.rank)));
    detail.querySelector("h2")?.setAttribute("tabindex", "-1");
    detail.querySelector("h2")?.focus();
  };
  return h("div", {},
    h("h1", {}, t("market.title")),
    h("p", { class: "hint" }, t("market.about")),
    filters,
    table(t("market.results"), [
      [t("market.rank"), (l) => integer(l.rank), { numeric: true }],
      [t("gpu.model"), (l) => h("button", { type: "button", class: "link", onclick: () => show(l.gpu_uuid) }, `${l.model_name} · ${l.vram_gb} GB`)],
      [t("prices.price"), (l) => money(l.price_usdc), { numeric: true }],
      [t("market.where"), (l) => `${l.city}, ${l.region} (${l.country})`],
      [t("application.tier"), (l) => badge(t(`tier.${l.tier}`), l.tier === "enterprise" ? "info" : "neutral")],
      [t("market.uptime"), (l) => `${l.uptime_pct} %`, { numeric: true }],
      [t("market.gpus_on_machine"), (l) => integer(l.gpus_on_machine), { numeric: true }],
    ], page.listings, t("market.none")),
    page.next_after ? h("p", {}, link(`/console/market${query({ ...chosen, after: page.next_after })}`, t("common.next_page"))) : null,
    detail);
}
