// Máquinas: machines and GPUs online or offline with when they were last seen, what the agent
// detected against what the application declared, live telemetry charts over the retained
// window, and the agent tokens with the guide's install steps filled in.

import { api, get, query } from "../lib/api.js";
import { action, badge, commands, control, facts, fill, form, h, link, part, secret, table } from "../lib/dom.js";
import { dateTime, duration, integer } from "../lib/format.js";
import { lineChart } from "../lib/chart.js";
import { t, tOr } from "../lib/i18n.js";

/** How often the machines and telemetry pages read the API again, in milliseconds. */
const REFRESH_MS = 15_000;
/** The telemetry window drawn (the server keeps 24 hours by default). */
const TELEMETRY_WINDOW_MS = 24 * 3_600_000;
/** Pages of telemetry read per GPU at most (5,000 samples each). */
const TELEMETRY_PAGES_MAX = 4;

export function statusBadge(status) {
  return badge(tOr(`machine.status.${status}`, status), status === "online" ? "ok" : "bad");
}

function gpuRows(machine) {
  return table(t("machines.gpus_of", { host: machine.host.hostname }), [
    [t("gpu.index"), (g) => g.index, { numeric: true }],
    [t("gpu.name"), (g) => g.name],
    [t("gpu.model"), (g) => g.model_id ? [g.model_id, " ", h("span", { class: "hint" }, tOr(`gpu.match.${g.model_match}`, g.model_match))] : badge(t("gpu.unknown_model"), "warn")],
    [t("gpu.vram"), (g) => [`${integer(g.vram_mib)} MiB`, g.vram_below_model ? [" ", badge(t("gpu.vram_below"), "warn")] : null], { numeric: true }],
    [t("machines.status"), (g) => [statusBadge(g.status), ...g.conditions.map((c) => [" ", badge(tOr(`condition.${c}`, c), "warn")])]],
    [t("gpu.driver"), (g) => [g.driver_version ?? "—", g.cuda_driver_version ? ` · CUDA ${g.cuda_driver_version}` : ""]],
    [t("gpu.power_limit"), (g) => g.power_limit_w ? [`${g.power_limit_w} W`, g.power_limit_lowered ? [" ", badge(t("gpu.lowered", { w: g.default_power_limit_w }), "warn")] : null] : "—", { numeric: true }],
    [t("gpu.pcie"), (g) => `Gen${g.pcie_current.generation ?? "?"} x${g.pcie_current.width ?? "?"} / Gen${g.pcie_max.generation ?? "?"} x${g.pcie_max.width ?? "?"}`],
    [t("gpu.now"), (g) => g.telemetry ? t("gpu.now_value", {
      util: g.telemetry.utilization_pct ?? "—", temp: g.telemetry.temperature_c ?? "—",
      power: g.telemetry.power_draw_mw === null ? "—" : Math.round(g.telemetry.power_draw_mw / 1000),
    }) : "—"],
  ], machine.gpus);
}

function machinePart(ctx, machine) {
  const host = machine.host;
  return part(host.hostname,
    h("p", {}, statusBadge(machine.status), machine.simulated ? [" ", badge(t("machines.simulated"), "warn")] : null, " ",
      machine.status === "online" ? t("machines.online_since", { at: dateTime(machine.since, ctx.zone) }) : t("machines.offline_since", { at: dateTime(machine.since, ctx.zone) })),
    facts([
      [t("machines.last_seen"), dateTime(machine.last_seen, ctx.zone)],
      [t("machines.machine_id"), machine.machine_id],
      [t("machines.agent_version"), machine.agent_version],
      [t("machines.registered_at"), dateTime(machine.registered_at, ctx.zone)],
      [t("machines.host"), [host.cpu_model ?? "—", host.cpu_cores ? ` · ${host.cpu_cores} ${t("machines.cores")}` : "",
        host.ram_mib ? ` · ${integer(Math.round(host.ram_mib / 1024))} GiB RAM` : "",
        host.disk_total_gib ? ` · ${t("machines.disk", { free: integer(host.disk_free_gib), total: integer(host.disk_total_gib) })}` : ""]],
      [t("machines.os"), [host.os ?? "—", host.kernel ? ` (${host.kernel})` : ""]],
      [t("machines.downtime"), t("machines.downtime_value", { day: duration(machine.downtime_seconds_24h), month: duration(machine.downtime_seconds_30d) })],
    ]),
    gpuRows(machine),
    h("p", {}, link(`/console/provider/${ctx.providerId}/machines/${machine.machine_id}`, t("machines.telemetry_link", { host: host.hostname }))));
}

function declarationPart(declaration) {
  if (!declaration) return part(t("machines.declared_vs_detected"), h("p", {}, t("machines.no_declaration")));
  const models = [...new Set([...declaration.declared, ...declaration.detected].map((m) => m.model))];
  const count = (list, model) => list.find((m) => m.model === model)?.count ?? 0;
  return part(t("machines.declared_vs_detected"),
    table(t("machines.declared_vs_detected"), [
      [t("gpu.model"), (m) => m],
      [t("machines.declared"), (m) => count(declaration.declared, m), { numeric: true }],
      [t("machines.detected"), (m) => count(declaration.detected, m), { numeric: true }],
    ], models),
    declaration.discrepancies.length
      ? h("ul", { class: "violations" }, declaration.discrepancies.map((d) => h("li", {}, t(`discrepancy.${d.kind}`, d))))
      : h("p", {}, badge(t("machines.matches"), "ok")));
}

/** The guide's install steps with the agent token and this platform's address filled in. */
function installSteps(token) {
  return [
    h("p", {}, t("install.intro")),
    h("ol", { class: "install" },
      h("li", {}, t("install.docker")),
      h("li", {}, t("install.toolkit"), commands(["nvidia-smi", "docker run --rm --gpus all nvidia/cuda:12.4.0-base-ubuntu22.04 nvidia-smi"])),
      h("li", {}, t("install.run"), commands([`GPUNEX_AGENT_TOKEN=${token} agent/docker/install.sh --server ${location.origin}`])),
      h("li", {}, t("install.check"), commands(["docker ps | grep gpunex-agent"])),
      h("li", {}, t("install.online"))),
  ];
}

function tokensTable(ctx, list, context) {
  return table(t("tokens.list"), [
    [t("tokens.label"), (token) => token.label],
    [t("machines.machine_id"), (token) => token.role.machine_id],
    [t("tokens.issued_at"), (token) => dateTime(token.issued_at, ctx.zone)],
    [t("tokens.state"), (token) => token.revoked_at ? badge(t("tokens.revoked"), "neutral") : badge(t("tokens.active"), "ok")],
    [t("tokens.action"), (token) => token.revoked_at ? "" : action(t("tokens.revoke"), async () => {
      await api("POST", `/v1/tokens/${token.token_id}/revoke`, { reason: "revoked in the console" }, ctx.as);
      await context.rerender();
    }, { confirm: t("tokens.revoke_confirm") })],
  ], list, t("tokens.none"));
}

async function agentTokens(ctx) {
  return (await get("/v1/tokens", ctx.as)).tokens.filter((token) => token.role.kind === "agent");
}

async function tokensPart(ctx, context) {
  const issued = h("div", { class: "issued" });
  const listed = h("div", {}, tokensTable(ctx, await agentTokens(ctx), context));
  return part(t("tokens.title"),
    h("p", {}, t("tokens.about")),
    form({
      submit: t("tokens.issue"),
      body: [control({ pointer: "/label", label: t("tokens.label"), hint: t("tokens.label_hint"), required: false, optional: true })],
      onsubmit: async (element) => {
        const label = element.querySelector('[data-pointer="/label"]').value.trim();
        const token = await api("POST", "/v1/tokens", { role: { kind: "agent" }, label: label || null }, ctx.as);
        fill(issued,
          h("p", {}, t("tokens.issued_for", { machine: token.role.machine_id })),
          secret(t("tokens.agent_token"), token.token),
          installSteps(token.token));
        fill(listed, tokensTable(ctx, await agentTokens(ctx), context));
        issued.querySelector("input")?.focus();
      },
    }),
    issued,
    listed);
}

export async function tab(ctx, context) {
  const region = h("div", { "aria-live": "polite" });
  const draw = async () => {
    const fleet = await get(`/v1/providers/${ctx.providerId}/machines`, ctx.as);
    const gpus = fleet.machines.flatMap((m) => m.gpus);
    fill(region,
      h("p", { class: "summary" }, t("machines.summary", {
        online: fleet.machines.filter((m) => m.status === "online").length, machines: fleet.machines.length,
        gpus_online: gpus.filter((g) => g.status === "online").length, gpus: gpus.length,
      })),
      fleet.machines.length ? fleet.machines.map((m) => machinePart(ctx, m)) : h("p", { class: "empty" }, t("machines.none_yet")),
      declarationPart(fleet.declaration));
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), REFRESH_MS);
  context.onLeave(() => clearInterval(timer));
  return [h("h2", {}, t("tab.machines")), region, ctx.own ? await tokensPart(ctx, context) : null];
}

/** Every sample of a GPU in the window, page by page. */
async function samples(ctx, machineId, gpuUuid) {
  const all = [];
  let from = new Date(Date.now() - TELEMETRY_WINDOW_MS).toISOString();
  for (let page = 0; page < TELEMETRY_PAGES_MAX && from; page += 1) {
    const series = await get(`/v1/machines/${machineId}/gpus/${encodeURIComponent(gpuUuid)}/telemetry${query({ from, limit: 5000 })}`, ctx.as);
    all.push(...series.samples);
    from = series.next_from;
  }
  return all;
}

const METRICS = [
  ["utilization_pct", "telemetry.utilization", (v) => `${v} %`, 1],
  ["temperature_c", "telemetry.temperature", (v) => `${v} °C`, 1],
  ["power_draw_mw", "telemetry.power", (v) => `${Math.round(v)} W`, 1 / 1000],
  ["sm_clock_mhz", "telemetry.clock", (v) => `${Math.round(v)} MHz`, 1],
];

export async function telemetryPage(ctx, machineId, context) {
  const region = h("div", {});
  let machine = await get(`/v1/machines/${machineId}`, ctx.as);
  const draw = async () => {
    machine = await get(`/v1/machines/${machineId}`, ctx.as);
    const perGpu = await Promise.all(machine.gpus.map(async (g) => [g, await samples(ctx, machineId, g.gpu_uuid)]));
    fill(region, ...perGpu.map(([gpu, rows]) => part(t("telemetry.gpu", { index: gpu.index, name: gpu.name }),
      h("p", { class: "hint" }, t("telemetry.samples", { n: integer(rows.length) }), " · ", statusBadge(gpu.status)),
      h("div", { class: "charts" }, METRICS.map(([key, label, format, scale]) => lineChart({
        title: t(label), timeZone: ctx.zone, table: false, height: 160, yMin: 0,
        series: [{ name: gpu.name, points: rows.filter((s) => s[key] !== null).map((s) => [Date.parse(s.at), s[key] * scale]) }],
        y: format,
      }))))));
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), REFRESH_MS);
  context.onLeave(() => clearInterval(timer));
  return [
    h("p", {}, link(`/console/provider/${ctx.providerId}/machines`, t("telemetry.back"))),
    h("h2", {}, t("telemetry.title", { host: machine.host.hostname })),
    h("p", { class: "hint" }, t("telemetry.about")),
    region,
  ];
}
