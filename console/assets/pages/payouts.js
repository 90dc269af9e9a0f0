// Pagos: payout settings (USDC to a Solana wallet or a SEPA bank transfer, weekly or monthly),
// the next payout with what is available and the minimum, pending payouts, the history with
// each transaction's details, and a payout's proof down to the usage lines it settled.

import { Problem, api, get } from "../lib/api.js";
import { badge, control, facts, form, h, link, part, table } from "../lib/dom.js";
import { dateOnly, dateTime, gpuHours, integer, usdc } from "../lib/format.js";
import { t, tOr } from "../lib/i18n.js";

function statusBadge(status) {
  const kind = { confirmed: "ok", failed: "bad", scheduled: "info", submitted: "info" }[status] ?? "neutral";
  return badge(tOr(`payout.status.${status}`, status), kind);
}

function methodText(method) {
  if (!method) return "—";
  return method.kind === "solana"
    ? t("payouts.solana_to", { wallet: method.wallet })
    : t("payouts.bank_to", { holder: method.account_holder, iban: method.iban, bic: method.bic });
}

function transaction(p) {
  if (p.rail === "solana") {
    return p.signature ? [h("code", { class: "id" }, p.signature), p.slot !== null ? ` · ${t("payouts.slot", { slot: integer(p.slot) })}` : ""] : "—";
  }
  return [p.bank_reference ? t("payouts.bank_reference", { reference: p.bank_reference }) : null,
    p.bank_end_to_end_id ? [" · ", t("payouts.end_to_end", { id: p.bank_end_to_end_id })] : null,
    p.bank_message_id ? [" · ", t("payouts.bank_file", { id: p.bank_message_id })] : null].filter(Boolean);
}

function payoutsTable(ctx, caption, payouts, empty) {
  return table(caption, [
    [t("payouts.date"), (p) => link(`/console/provider/${ctx.providerId}/payouts/${p.payout_id}`, dateOnly(p.payout_date))],
    [t("payouts.amount"), (p) => usdc(p.amount_micro_usdc), { numeric: true }],
    [t("payouts.status"), (p) => [statusBadge(p.status), p.failure_reason ? [" ", h("span", { class: "hint" }, p.failure_reason)] : null]],
    [t("payouts.rail"), (p) => t(`payouts.rail.${p.rail}`)],
    [t("payouts.transaction"), transaction],
    [t("payouts.lines"), (p) => integer(p.lines), { numeric: true }],
  ], payouts, empty);
}

function settingsForm(ctx, settings, context) {
  const method = settings?.method ?? { kind: "solana" };
  const bank = method.kind === "bank" ? method : { address: {} };
  const kind = control({ pointer: "/method/kind", label: t("payouts.method"), type: "select", value: method.kind,
    options: [["solana", t("payouts.rail.solana")], ["bank", t("payouts.rail.bank")]] });
  const solana = h("div", { class: "group", "data-pointer": "/method" },
    control({ pointer: "/method/wallet", label: t("payouts.wallet"), hint: t("payouts.wallet_hint"), value: method.wallet, required: true, attributes: { autocomplete: "off", spellcheck: "false" } }));
  const bankPart = h("div", { class: "group", "data-pointer": "/method" },
    control({ pointer: "/method/account_holder", label: t("payouts.account_holder"), value: bank.account_holder, required: true }),
    h("div", { class: "row" },
      control({ pointer: "/method/iban", label: "IBAN", value: bank.iban, required: true, attributes: { autocomplete: "off" } }),
      control({ pointer: "/method/bic", label: "BIC", value: bank.bic, required: true, attributes: { autocomplete: "off" } })),
    h("div", { class: "row" },
      control({ pointer: "/method/address/street", label: t("payouts.street"), value: bank.address.street, required: true }),
      control({ pointer: "/method/address/building_number", label: t("payouts.building_number"), value: bank.address.building_number, required: false, optional: true })),
    h("div", { class: "row" },
      control({ pointer: "/method/address/post_code", label: t("payouts.post_code"), value: bank.address.post_code, required: true }),
      control({ pointer: "/method/address/town", label: t("payouts.town"), value: bank.address.town, required: true }),
      control({ pointer: "/method/address/country", label: t("apply.country"), value: bank.address.country, hint: t("apply.country_hint"), required: true, attributes: { maxlength: 2 } })));
  const show = () => { solana.hidden = kind.input.value !== "solana"; bankPart.hidden = kind.input.value !== "bank"; };
  kind.input.addEventListener("change", show);
  show();
  return form({
    title: settings ? t("payouts.change_settings") : t("payouts.choose_settings"),
    submit: t("payouts.save_settings"),
    body: [
      control({ pointer: "/schedule", label: t("payouts.schedule"), type: "select", value: settings?.schedule ?? "weekly",
        hint: t("payouts.schedule_hint"), options: [["weekly", t("payouts.schedule.weekly")], ["monthly", t("payouts.schedule.monthly")]] }),
      kind, solana, bankPart,
    ],
    onsubmit: async (element) => {
      const value = (p) => element.querySelector(`[data-pointer="${p}"]`)?.value.trim();
      const chosen = kind.input.value === "solana"
        ? { kind: "solana", wallet: value("/method/wallet") }
        : {
          kind: "bank", account_holder: value("/method/account_holder"), iban: value("/method/iban"), bic: value("/method/bic"),
          address: {
            street: value("/method/address/street"), building_number: value("/method/address/building_number") || null,
            post_code: value("/method/address/post_code"), town: value("/method/address/town"), country: value("/method/address/country").toUpperCase(),
          },
        };
      await api("PUT", `/v1/providers/${ctx.providerId}/payout-settings`, { schedule: value("/schedule"), method: chosen }, ctx.as);
      await context.rerender();
    },
  });
}

function nextPart(ctx, next) {
  if (!next) return part(t("payouts.next"), h("p", {}, t("payouts.no_settings")));
  return part(t("payouts.next"), h("div", { class: "cards" },
    h("div", { class: "card", "data-figure": "next_date" }, h("h3", {}, t("payouts.next_date")), h("p", { class: "big" }, dateOnly(next.date)),
      h("p", { class: "hint" }, t("payouts.cutoff", { at: dateTime(next.cutoff, ctx.zone) }))),
    h("div", { class: "card", "data-figure": "next_amount" }, h("h3", {}, t("payouts.amount_due")),
      h("p", { class: "big" }, next.amount_micro_usdc === null ? usdc(0) : usdc(next.amount_micro_usdc)),
      h("p", { class: "hint" }, next.amount_micro_usdc === null
        ? t("payouts.below_minimum", { available: usdc(next.available_micro_usdc), minimum: usdc(next.minimum_micro_usdc) })
        : t("payouts.available", { available: usdc(next.available_micro_usdc) }))),
    h("div", { class: "card" }, h("h3", {}, t("payouts.minimum")), h("p", { class: "big" }, usdc(next.minimum_micro_usdc)),
      h("p", { class: "hint" }, t(`payouts.schedule.${next.schedule}`)))),
  h("p", { class: "hint" }, t("payouts.next_about")));
}

export async function tab(ctx, context) {
  const base = `/v1/providers/${ctx.providerId}`;
  const [settings, history] = await Promise.all([
    get(`${base}/payout-settings`, ctx.as).catch((problem) => {
      if (problem instanceof Problem && problem.status === 404) return null;
      throw problem;
    }),
    get(`${base}/payouts`, ctx.as),
  ]);
  return [
    h("h2", {}, t("tab.payouts")),
    part(t("payouts.settings"),
      settings ? facts([
        [t("payouts.schedule"), t(`payouts.schedule.${settings.schedule}`)],
        [t("payouts.method"), methodText(settings.method)],
        [t("payouts.minimum"), usdc(settings.minimum_micro_usdc)],
        [t("payouts.changed_at"), dateTime(settings.changed_at, ctx.zone)],
      ]) : h("p", {}, t("payouts.no_settings")),
      ctx.own ? settingsForm(ctx, settings, context) : null),
    nextPart(ctx, history.next_payout),
    part(t("payouts.balance"), facts([
      [t("payouts.not_in_payout"), usdc(history.balance_micro_usdc)],
      [t("payouts.in_flight"), usdc(history.in_flight_micro_usdc)],
      [t("payouts.paid"), usdc(history.paid_micro_usdc)],
    ])),
    part(t("payouts.pending"), payoutsTable(ctx, t("payouts.pending"), history.pending, t("payouts.none_pending"))),
    part(t("payouts.history"), payoutsTable(ctx, t("payouts.history"), history.history, t("payouts.none_yet"))),
  ];
}

export async function proofPage(ctx, payoutId) {
  const proof = await get(`/v1/payouts/${payoutId}/proof`, ctx.as);
  const p = proof.payout;
  return [
    h("p", {}, link(`/console/provider/${ctx.providerId}/payouts`, t("payouts.back"))),
    h("h2", {}, t("proof.title", { date: dateOnly(p.payout_date) }), " ", statusBadge(p.status)),
    facts([
      [t("payouts.amount"), h("strong", {}, usdc(p.amount_micro_usdc))],
      [t("proof.period"), p.period],
      [t("payouts.method"), methodText(p.method)],
      [t("payouts.transaction"), transaction(p)],
      [t("proof.scheduled_at"), dateTime(p.scheduled_at, ctx.zone)],
      [t("proof.settled_at"), p.settled_at ? dateTime(p.settled_at, ctx.zone) : null],
      [t("payouts.cutoff_label"), dateTime(p.cutoff, ctx.zone)],
      [t("proof.payout_id"), h("code", { class: "id" }, p.payout_id)],
    ]),
    part(t("proof.arithmetic"),
      facts([
        [t("proof.lines_net", { n: integer(proof.lines.length) }), usdc(proof.lines_net_micro_usdc)],
        [t("proof.brought_forward"), usdc(proof.brought_forward_micro_usdc)],
        [t("proof.carried"), usdc(proof.carried_micro_usdc)],
        [t("payouts.amount"), usdc(proof.amount_micro_usdc)],
      ]),
      h("p", { "data-balanced": String(proof.balanced) }, proof.balanced ? badge(t("proof.balanced"), "ok") : badge(t("proof.unbalanced"), "bad"), " ", t("proof.equation"))),
    part(t("proof.lines"), table(t("proof.lines"), [
      [t("proof.at"), (l) => dateTime(l.at, ctx.zone)],
      [t("proof.position"), (l) => integer(l.position), { numeric: true }],
      [t("proof.rental"), (l) => h("code", { class: "id" }, l.rental_id)],
      [t("proof.usage_entry"), (l) => h("code", { class: "id" }, l.usage_entry_id)],
      [t("earnings.gpu_hours"), (l) => gpuHours(l.gpu_seconds), { numeric: true }],
      [t("earnings.gross"), (l) => usdc(l.gross_micro_usdc), { numeric: true }],
      [t("earnings.fee"), (l) => usdc(l.fee_micro_usdc), { numeric: true }],
      [t("earnings.net"), (l) => usdc(l.net_micro_usdc), { numeric: true }],
    ], proof.lines, t("proof.no_lines"))),
  ];
}
