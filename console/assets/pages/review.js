// Reviewers (admin, ADR 0009): the application queue, oldest first with overdue ones flagged,
// and an application in full with its decisions: approve as Enterprise or Community (the tier
// rules shown, and the API's refusal when they are not met), reject, request information.

import { api, get, query } from "../lib/api.js";
import { action, badge, control, facts, form, h, link, part, router, table } from "../lib/dom.js";
import { dateTime } from "../lib/format.js";
import { t } from "../lib/i18n.js";
import { gpuSummary, statusBadge } from "./account.js";
import { formSummary, stepsList } from "./apply.js";

const AS = { actAs: "admin" };
const STATUSES = ["under_review", "information_requested", "approved", "rejected", "withdrawn"];

export async function queue() {
  const params = new URLSearchParams(location.search);
  const status = params.get("status") ?? "";
  const overdue = params.get("overdue") === "true";
  const after = params.get("after") ?? "";
  const page = await get(`/v1/applications${query({ status, overdue: overdue ? "true" : "", after })}`, AS);
  const filter = h("form", { class: "filters", role: "search", "aria-label": t("review.filter") },
    control({ name: "status", label: t("application.status"), type: "select", value: status,
      options: [["", t("review.open_and_decided")], ...STATUSES.map((s) => [s, t(`status.${s}`)])] }),
    control({ name: "overdue", label: t("review.only_overdue"), type: "checkbox", value: overdue }),
    h("div", { class: "actions" }, h("button", { type: "submit" }, t("common.filter"))));
  filter.addEventListener("submit", (event) => {
    event.preventDefault();
    const chosen = filter.querySelector('[name="status"]').value;
    const late = filter.querySelector('[name="overdue"]').checked;
    router.go(`/console/review${query({ status: chosen, overdue: late ? "true" : "" })}`);
  });
  return h("div", {},
    h("h1", {}, t("review.title")),
    h("p", { class: "hint" }, t("review.about")),
    filter,
    table(t("review.queue"), [
      [t("application.submitted_at"), (a) => link(`/console/review/${a.application_id}`, dateTime(a.submitted_at))],
      [t("apply.full_legal_name"), (a) => [a.form.full_legal_name, a.form.company_name ? ` (${a.form.company_name})` : ""]],
      [t("application.gpus"), (a) => gpuSummary(a.form)],
      [t("application.status"), (a) => [statusBadge(a.status), a.overdue ? [" ", badge(t("review.overdue"), "bad")] : null]],
    ], page.applications, t("review.empty")),
    page.next_after ? h("p", {}, link(`/console/review${query({ status, overdue: overdue ? "true" : "", after: page.next_after })}`, t("common.next_page"))) : null);
}

export async function detail([id], context) {
  const application = await get(`/v1/applications/${id}`, AS);
  const open = ["under_review", "information_requested"].includes(application.status);
  const violations = application.enterprise_violations;
  const decided = async (what) => {
    router.notice = t(`review.done.${what}`);
    await context.rerender();
  };
  const message = (title, submit, path, what) => form({
    title, submit,
    body: [control({ pointer: "/text", label: t("review.message"), type: "textarea", required: true, rows: 3 })],
    onsubmit: async (element) => {
      await api("POST", `/v1/applications/${id}/${path}`, { text: element.querySelector('[data-pointer="/text"]').value }, AS);
      await decided(what);
    },
  });
  return h("div", {},
    h("p", {}, link("/console/review", t("review.back"))),
    h("h1", {}, t("review.application_of", { name: application.form.full_legal_name }), " ", statusBadge(application.status),
      application.overdue ? [" ", badge(t("review.overdue"), "bad")] : null),
    facts([
      [t("application.submitted_at"), dateTime(application.submitted_at)],
      [t("review.information_requests"), application.information_requests],
      [t("application.decided_at"), application.decided_at ? dateTime(application.decided_at) : null],
      [t("application.tier"), application.tier ? t(`tier.${application.tier}`) : null],
      [t("application.provider_id"), application.provider_id],
    ]),
    part(t("review.tier_rules"),
      violations.length
        ? [h("p", {}, t("review.enterprise_blocked")), h("ul", { class: "violations" }, violations.map((v) => h("li", {}, violation(v))))]
        : h("p", {}, t("review.enterprise_ok"))),
    open ? part(t("review.decide"),
      h("div", { class: "actions" },
        action(t("review.approve_enterprise"), async () => {
          await api("POST", `/v1/applications/${id}/approve`, { tier: "enterprise" }, AS);
          await decided("approved");
        }, { kind: "primary" }),
        action(t("review.approve_community"), async () => {
          await api("POST", `/v1/applications/${id}/approve`, { tier: "community" }, AS);
          await decided("approved");
        }, { kind: "primary" })),
      application.status === "under_review" ? message(t("review.request_information"), t("review.send_request"), "request-information", "requested") : null,
      message(t("review.reject"), t("review.reject_submit"), "reject", "rejected")) : null,
    part(t("application.steps"), stepsList(application.steps ?? [])),
    formSummary(application));
}

/** A tier rule an application breaks, in words (`{"rule": "commitment_too_short", ...}`). */
export function violation(v) {
  return t(`violation.${v.rule}`, { ...v, entry: (v.entry ?? 0) + 1, minimum_gbps: (v.minimum_mbps ?? 0) / 1000 });
}
