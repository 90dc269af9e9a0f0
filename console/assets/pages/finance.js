// Finance and treasury (ADR 0009): the reconciliation of the money against the log, every
// provider's earnings (each a link to that provider's pages, read as finance), the payout
// batches with their payouts and bank files, and, for treasury, running a batch, making its
// SEPA files and importing the bank's status report.

import { api, download, get, query, staffRole } from "../lib/api.js";
import { action, badge, control, facts, fill, form, h, link, part, router, table } from "../lib/dom.js";
import { addDays, dateOnly, dateTime, gpuHours, integer, today, usdc } from "../lib/format.js";
import { t, tOr } from "../lib/i18n.js";

const reader = () => ({ actAs: staffRole("finance", "admin", "treasury") });
const operator = () => ({ actAs: staffRole("treasury", "admin") });

function reconcilePart() {
  const result = h("div", { "aria-live": "polite" });
  const as = { actAs: staffRole("finance", "admin") };
  return part(t("finance.reconcile"),
    h("p", {}, t("finance.reconcile_about")),
    as.actAs ? action(t("finance.reconcile_run"), async () => {
      const report = await get("/v1/audit/reconcile", as);
      const tot = report.totals;
      fill(result,
        h("p", { "data-mismatches": report.mismatches.length }, report.mismatches.length === 0
          ? badge(t("finance.reconcile_clean"), "ok") : badge(t("finance.reconcile_mismatches", { n: report.mismatches.length }), "bad"),
        " ", t("finance.as_of_position", { position: integer(report.as_of_position) })),
        facts([
          [t("finance.renter_charges"), usdc(tot.renter_charges_micro_usdc)],
          [t("finance.provider_earnings"), usdc(tot.provider_earnings_micro_usdc)],
          [t("finance.platform_fees"), usdc(tot.platform_fees_micro_usdc)],
          [t("earnings.gpu_hours"), gpuHours(tot.gpu_seconds)],
          [t("earnings.lines"), integer(tot.usage_lines)],
          [t("finance.rentals"), integer(tot.rentals)],
          [t("finance.providers"), integer(tot.providers)],
        ]),
        table(t("finance.mismatches"), [
          [t("finance.kind"), (m) => m.kind],
          [t("finance.expected"), (m) => m.expected],
          [t("finance.found"), (m) => m.found],
          [t("proof.position"), (m) => m.position ?? "—"],
        ], report.mismatches, t("finance.no_mismatches")));
    }, { kind: "primary" }) : h("p", {}, t("finance.reconcile_not_held")),
    result);
}

async function earningsPart() {
  const as = { actAs: staffRole("finance", "admin") };
  if (!as.actAs) return null;
  const params = new URLSearchParams(location.search);
  const to = params.get("to") ?? today("UTC");
  const from = params.get("from") ?? addDays(to, -29);
  const earnings = await get(`/v1/earnings${query({ from, to })}`, as);
  const filter = h("form", { class: "filters", "aria-label": t("earnings.filter") },
    control({ name: "from", label: t("earnings.from"), type: "date", value: from }),
    control({ name: "to", label: t("earnings.to"), type: "date", value: to }),
    h("div", { class: "actions" }, h("button", { type: "submit" }, t("common.show"))));
  filter.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = (name) => filter.querySelector(`[name="${name}"]`).value;
    router.go(`/console/finance${query({ from: value("from"), to: value("to") })}`);
  });
  return part(t("finance.earnings"),
    filter,
    facts([
      [t("finance.period"), `${dateOnly(earnings.first_day)} – ${dateOnly(earnings.last_day)} (${earnings.time_zone})`],
      [t("finance.renter_charges"), usdc(earnings.totals.gross_micro_usdc)],
      [t("finance.platform_fees"), usdc(earnings.totals.fee_micro_usdc)],
      [t("finance.provider_earnings"), usdc(earnings.totals.net_micro_usdc)],
      [t("finance.all_time"), usdc(earnings.all_time.net_micro_usdc)],
    ]),
    table(t("finance.providers"), [
      [t("finance.provider"), (p) => link(`/console/provider/${p.provider_id}/earnings${query({ from, to })}`, p.provider_id)],
      [t("earnings.gpu_hours"), (p) => gpuHours(p.period.gpu_seconds), { numeric: true }],
      [t("earnings.net"), (p) => usdc(p.period.net_micro_usdc), { numeric: true }],
      [t("earnings.pending_balance"), (p) => usdc(p.pending_balance_micro_usdc), { numeric: true }],
      ["", (p) => link(`/console/provider/${p.provider_id}/payouts`, t("finance.payouts_of"))],
    ], earnings.providers, t("earnings.nothing")));
}

function runBatchForm() {
  const preview = h("div", { "aria-live": "polite" });
  return [form({
    title: t("finance.run_batch"),
    submit: t("finance.run"),
    body: [
      control({ pointer: "/date", label: t("finance.batch_date"), type: "date", value: today("UTC"), hint: t("finance.batch_date_hint"), required: true }),
      control({ pointer: "/dry_run", label: t("finance.dry_run"), type: "checkbox", value: true, hint: t("finance.dry_run_hint") }),
    ],
    onsubmit: async (element) => {
      const date = element.querySelector('[data-pointer="/date"]').value;
      const dryRun = element.querySelector('[data-pointer="/dry_run"]').checked;
      const batch = await api("POST", "/v1/payout-batches", { date, dry_run: dryRun }, operator());
      if (!dryRun) return router.go(`/console/finance/batches/${batch.date}`);
      fill(preview, h("p", { role: "status" }, t("finance.dry_run_result", {
        count: batch.payout_count, total: usdc(batch.total_micro_usdc), rolled: batch.rolled_forward.length,
      })));
    },
  }), preview];
}

export async function overview() {
  const batches = await get("/v1/payout-batches", reader());
  return h("div", {},
    h("h1", {}, t("finance.title")),
    h("p", { class: "hint" }, t("finance.acting", { role: reader().actAs ?? "—" })),
    reconcilePart(),
    await earningsPart(),
    part(t("finance.batches"),
      operator().actAs ? runBatchForm() : null,
      table(t("finance.batches"), [
        [t("finance.batch_date"), (b) => link(`/console/finance/batches/${b.date}`, dateOnly(b.date))],
        [t("finance.payouts"), (b) => integer(b.payout_count), { numeric: true }],
        [t("finance.total"), (b) => usdc(b.total_micro_usdc), { numeric: true }],
        [t("finance.by_status"), (b) => Object.entries(b.by_status).map(([s, n]) => `${tOr(`payout.status.${s}`, s)}: ${n}`).join(", ")],
        [t("finance.rolled_forward"), (b) => integer(b.rolled_forward_count), { numeric: true }],
        [t("finance.bank_files"), (b) => integer(b.bank_files.length), { numeric: true }],
      ], batches, t("finance.no_batches"))));
}

function bankFilesPart(batch, context) {
  const treasury = operator().actAs;
  const importResult = h("div", { "aria-live": "polite" });
  const fileInput = h("input", { type: "file", id: "status-report", accept: ".xml,application/xml,text/xml" });
  return part(t("finance.bank_files"),
    table(t("finance.bank_files"), [
      [t("finance.message_id"), (id) => h("code", { class: "id" }, id)],
      ["", (id) => action(t("finance.download"), () =>
        download(`/v1/payout-batches/${batch.date}/bank-files/${encodeURIComponent(id)}`, `${id}.xml`, reader()))],
    ], batch.bank_files, t("finance.no_bank_files")),
    treasury ? form({
      title: t("finance.make_bank_files"), submit: t("finance.make"),
      body: [h("div", { class: "row" },
        control({ pointer: "/eur_per_usdc", label: t("finance.eur_per_usdc"), hint: t("finance.eur_per_usdc_hint"), required: true, attributes: { inputmode: "decimal" } }),
        control({ pointer: "/execution_date", label: t("finance.execution_date"), type: "date", required: false, optional: true }))],
      onsubmit: async (element) => {
        const value = (p) => element.querySelector(`[data-pointer="${p}"]`).value.trim();
        const files = await api("POST", `/v1/payout-batches/${batch.date}/bank-files`, { eur_per_usdc: value("/eur_per_usdc"), execution_date: value("/execution_date") || null }, operator());
        router.notice = files.map((f) => t("finance.file_made", {
          id: f.message_id, transfers: f.transfers, date: dateOnly(f.execution_date),
          sum: `${(BigInt(f.control_sum_cents) / 100n).toString()}.${String(BigInt(f.control_sum_cents) % 100n).padStart(2, "0")} ${f.currency}`,
        })).join(" ");
        await context.rerender();
      },
    }) : null,
    treasury ? h("div", { class: "group" },
      h("h3", {}, t("finance.import_report")),
      h("label", { for: "status-report" }, t("finance.report_file")), fileInput,
      h("div", { class: "actions" }, action(t("finance.import"), async () => {
        const file = fileInput.files[0];
        if (!file) {
          fill(importResult, h("p", { class: "alert", role: "alert" }, t("finance.choose_file")));
          return;
        }
        const report = await api("POST", "/v1/bank-status-reports", await file.text(), { ...operator(), contentType: "application/xml" });
        fill(importResult, h("p", { role: "status" }, t("finance.imported", {
          confirmed: report.confirmed.length, failed: report.failed.length, pending: report.pending.length, unchanged: report.unchanged.length,
        })));
      }, { kind: "primary" })),
      importResult) : null);
}

export async function batch([date], context) {
  const params = new URLSearchParams(location.search);
  const view = await get(`/v1/payout-batches/${date}${query({ after: params.get("after") })}`, reader());
  return h("div", {},
    h("p", {}, link("/console/finance", t("finance.back"))),
    h("h1", {}, t("finance.batch_title", { date: dateOnly(view.date) })),
    facts([
      [t("finance.payouts"), integer(view.payout_count)],
      [t("finance.total"), usdc(view.total_micro_usdc)],
      [t("payouts.cutoff_label"), dateTime(view.cutoff)],
      [t("finance.batch_id"), h("code", { class: "id" }, view.batch_id)],
    ]),
    part(t("finance.payouts"), table(t("finance.payouts"), [
      [t("finance.provider"), (p) => link(`/console/provider/${p.provider_id}/payouts/${p.payout_id}`, p.provider_id)],
      [t("payouts.amount"), (p) => usdc(p.amount_micro_usdc), { numeric: true }],
      [t("payouts.rail"), (p) => t(`payouts.rail.${p.rail}`)],
      [t("payouts.status"), (p) => tOr(`payout.status.${p.status}`, p.status)],
      [t("payouts.transaction"), (p) => p.signature ?? p.bank_end_to_end_id ?? "—"],
    ], view.payouts, t("finance.no_payouts")),
    view.next_after ? link(`/console/finance/batches/${date}${query({ after: view.next_after })}`, t("common.next_page")) : null),
    part(t("finance.rolled_forward"), table(t("finance.rolled_forward"), [
      [t("finance.provider"), (r) => r.provider_id],
      [t("payouts.available_label"), (r) => usdc(r.available_micro_usdc), { numeric: true }],
      [t("payouts.minimum"), (r) => usdc(r.minimum_micro_usdc), { numeric: true }],
    ], view.rolled_forward, t("common.none"))),
    view.without_method.length ? part(t("finance.without_method"), h("ul", {}, view.without_method.map((id) => h("li", {}, id)))) : null,
    bankFilesPart(view, context));
}
