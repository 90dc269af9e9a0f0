// The applicant: the guide's "Aplicar para proveer GPUs" form with every field (contact and
// organization; GPU entries; UPS, commitment, maintenance notes), and an application's page:
// its status and steps, answering a request for information, withdrawing, and, once approved,
// taking the provider token.

import { api, get, refreshSession, session } from "../lib/api.js";
import { action, control, facts, fill, form, h, link, part, router, secret, table } from "../lib/dom.js";
import { dateTime } from "../lib/format.js";
import { t } from "../lib/i18n.js";
import { describeSchedule, scheduleEditor } from "../lib/schedule.js";
import { gpuSummary, statusBadge } from "./account.js";

const COMMITMENTS = [1, 3, 6, 12, 24, 36];
const OTHER = "__other__";

function gpuEntry(index, catalog) {
  const base = `/gpus/${index}`;
  const model = control({
    pointer: `${base}/model`, label: t("apply.model"), type: "select", required: true,
    options: [["", t("apply.model_choose")], ...catalog.map((m) => [m.model_id, `${m.name} (${m.vram_gb} GB)`]), [OTHER, t("apply.model_other")]],
  });
  const other = control({ pointer: `${base}/model_name`, label: t("apply.model_name"), hint: t("apply.model_name_hint") });
  other.hidden = true;
  model.input.addEventListener("change", () => { other.hidden = model.input.value !== OTHER; });
  const field = (name, label, type, hint, value) => control({ pointer: `${base}/${name}`, label, type, hint, value, required: true,
    attributes: type === "number" ? { min: 1, step: 1, inputmode: "numeric" } : { inputmode: "decimal" } });
  const entry = h("fieldset", { class: "entry group", "data-pointer": base },
    h("legend", {}, t("apply.gpu_entry", { n: index + 1 })),
    h("p", { class: "field-error", hidden: true }),
    model, other,
    h("div", { class: "row" },
      field("quantity", t("apply.quantity"), "number", null, 1),
      field("system_ram_gb", t("apply.system_ram_gb"), "number", t("apply.system_ram_hint"))),
    h("div", { class: "row" },
      field("upload_gbps", t("apply.upload_gbps"), "text", t("apply.gbps_hint")),
      field("download_gbps", t("apply.download_gbps"), "text", t("apply.gbps_hint"))),
    scheduleEditor(`${base}/availability`),
    h("div", { class: "row" },
      control({ pointer: `${base}/location/city`, label: t("apply.city"), required: true }),
      control({ pointer: `${base}/location/country`, label: t("apply.country"), hint: t("apply.country_hint"), required: true, attributes: { maxlength: 2, autocomplete: "country" } }),
      control({ pointer: `${base}/location/region`, label: t("apply.region"), required: true })));
  entry.value = () => {
    const value = (name) => entry.querySelector(`[data-pointer="${base}/${name}"]`).value.trim();
    const chosen = model.input.value;
    return {
      model: chosen === OTHER ? other.input.value.trim() : chosen,
      quantity: Number(value("quantity")),
      system_ram_gb: Number(value("system_ram_gb")),
      upload_gbps: value("upload_gbps"),
      download_gbps: value("download_gbps"),
      availability: entry.querySelector(".schedule").value(),
      location: { city: value("location/city"), country: value("location/country").toUpperCase(), region: value("location/region") },
    };
  };
  return entry;
}

export async function applyPage() {
  const catalog = await get("/v1/catalog/models");
  // Entries are added and removed at the end, so each keeps the pointers (/gpus/<i>/...) of
  // its place in the body sent.
  const entries = h("div", { class: "entries" }, gpuEntry(0, catalog));
  const removeLast = h("button", { type: "button", class: "secondary", hidden: true, onclick: () => {
    entries.lastElementChild.remove();
    removeLast.hidden = entries.children.length < 2;
  } }, t("apply.remove_entry"));
  const addEntry = () => {
    entries.append(gpuEntry(entries.children.length, catalog));
    removeLast.hidden = false;
    entries.lastElementChild.querySelector("select")?.focus();
  };
  const commitment = control({
    pointer: "/commitment_months", label: t("apply.commitment"), type: "select", hint: t("apply.commitment_hint"), value: 12,
    options: COMMITMENTS.map((m) => [m, t("apply.months", { n: m })]),
  });
  return h("div", {},
    h("h1", {}, t("apply.title")),
    h("p", {}, t("apply.intro")),
    form({
      body: [
        part(t("apply.contact"),
          control({ pointer: "/full_legal_name", label: t("apply.full_legal_name"), hint: t("apply.full_legal_name_hint"), required: true, attributes: { autocomplete: "name" } }),
          control({ pointer: "/email", label: t("field.email"), type: "email", value: session.me?.email, required: true, hint: t("apply.email_hint"), attributes: { autocomplete: "email" } }),
          control({ pointer: "/company_name", label: t("apply.company_name"), optional: true, required: false, attributes: { autocomplete: "organization" } })),
        part(t("apply.gpus"), h("p", { class: "hint" }, t("apply.gpus_hint")), h("div", { class: "group", "data-pointer": "/gpus" }, h("p", { class: "field-error", hidden: true }), entries),
          h("div", { class: "actions" }, h("button", { type: "button", class: "secondary", onclick: addEntry }, t("apply.add_entry")), removeLast)),
        part(t("apply.infrastructure"),
          control({ pointer: "/ups_protected", label: t("apply.ups"), type: "checkbox", hint: t("apply.ups_hint") }),
          commitment,
          control({ pointer: "/maintenance_notes", label: t("apply.maintenance_notes"), type: "textarea", hint: t("apply.maintenance_hint"), required: false, optional: true })),
      ],
      submit: t("apply.submit"),
      onsubmit: async (element) => {
        const value = (pointer) => element.querySelector(`[data-pointer="${pointer}"]`);
        const body = {
          full_legal_name: value("/full_legal_name").value.trim(),
          email: value("/email").value.trim(),
          company_name: value("/company_name").value.trim() || null,
          gpus: [...entries.children].map((e) => e.value()),
          ups_protected: value("/ups_protected").checked,
          commitment_months: Number(value("/commitment_months").value),
          maintenance_notes: value("/maintenance_notes").value.trim(),
        };
        const application = await api("POST", "/v1/applications", body);
        await refreshSession();
        router.notice = t("apply.submitted");
        router.go(`/console/applications/${application.application_id}`);
      },
    }));
}

/** The form as submitted, for the applicant and the reviewers. */
export function formSummary(application) {
  const f = application.form;
  const unlisted = new Set(application.unlisted_models.map((u) => u.field));
  return [
    part(t("apply.contact"), facts([
      [t("apply.full_legal_name"), f.full_legal_name],
      [t("field.email"), f.email],
      [t("apply.company_name"), f.company_name ?? t("common.none")],
    ])),
    part(t("apply.gpus"), table(t("apply.gpus"), [
      [t("apply.model"), (g) => [g.model.catalog ?? g.model.unlisted, unlisted.has(`/gpus/${f.gpus.indexOf(g)}/model`) ? [" ", h("span", { class: "badge warn" }, t("apply.unlisted"))] : null]],
      [t("apply.quantity"), (g) => g.quantity, { numeric: true }],
      [t("apply.system_ram_gb"), (g) => g.system_ram_gb, { numeric: true }],
      [t("apply.speeds"), (g) => t("apply.speeds_value", { up: g.upload_mbps / 1000, down: g.download_mbps / 1000 })],
      [t("apply.availability"), (g) => describeSchedule(g.availability)],
      [t("apply.location"), (g) => `${g.location.city}, ${g.location.region} (${g.location.country})`],
    ], f.gpus)),
    application.unlisted_models.length ? h("p", { class: "hint" }, application.unlisted_models[0].note) : null,
    part(t("apply.infrastructure"), facts([
      [t("apply.ups"), f.ups_protected ? t("common.yes") : t("common.no")],
      [t("apply.commitment"), t("apply.months", { n: f.commitment_months })],
      [t("apply.maintenance_notes"), f.maintenance_notes || t("common.none")],
    ])),
  ];
}

/** The application's steps, oldest first. */
export function stepsList(steps) {
  return h("ol", { class: "steps" }, steps.map((step) => h("li", { "data-step": step.kind },
    h("strong", {}, t(`step.${step.kind}`)), " · ", dateTime(step.at),
    step.tier ? [" · ", t(`tier.${step.tier}`)] : null,
    step.text ? h("blockquote", {}, step.text) : null)));
}

export async function applicationPage([id], context) {
  const application = await get(`/v1/applications/${id}`);
  const open = ["under_review", "information_requested"].includes(application.status);
  const claimed = h("div", {});
  return h("div", {},
    h("h1", {}, t("application.title"), " ", statusBadge(application.status)),
    facts([
      [t("application.submitted_at"), dateTime(application.submitted_at)],
      [t("application.decided_at"), application.decided_at ? dateTime(application.decided_at) : null],
      [t("application.tier"), application.tier ? t(`tier.${application.tier}`) : null],
      [t("application.provider_id"), application.provider_id],
    ]),
    h("p", { class: "hint" }, t(`application.about.${application.status}`)),
    part(t("application.steps"), stepsList(application.steps ?? [])),
    application.status === "information_requested" ? form({
      title: t("application.answer_title"),
      body: [control({ pointer: "/text", label: t("application.answer"), type: "textarea", required: true, rows: 4 })],
      submit: t("application.answer_submit"),
      onsubmit: async (element) => {
        await api("POST", `/v1/applications/${id}/answer`, { text: element.querySelector('[data-pointer="/text"]').value });
        router.notice = t("application.answered");
        await context.rerender();
      },
    }) : null,
    application.status === "approved" ? part(t("application.provider_token"),
      h("p", {}, t("application.provider_token_about")),
      action(t("application.claim"), async () => {
        const issued = await api("POST", `/v1/applications/${id}/provider-token`);
        fill(claimed, secret(t("application.provider_token"), issued.token));
      }, { kind: "primary" }),
      claimed,
      h("p", {}, link(`/console/provider/${application.provider_id}/machines`, t("application.go_panel")))) : null,
    open ? h("p", {}, action(t("application.withdraw"), async () => {
      await api("POST", `/v1/applications/${id}/withdraw`);
      await refreshSession();
      await context.rerender();
    }, { confirm: t("application.withdraw_confirm") })) : null,
    formSummary(application));
}
