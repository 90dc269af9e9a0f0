// Anyone: sign up, sign in, sign out, and the Roles page (GET /v1/me) with the way into each
// role: the application form, an application, the Panel de proveedor, review and finance.

import { api, get, refreshSession, session } from "../lib/api.js";
import { badge, control, form, h, link, part, router, table } from "../lib/dom.js";
import { dateTime } from "../lib/format.js";
import { t } from "../lib/i18n.js";

function credentials(passwordHint, autocomplete) {
  return [
    control({ pointer: "/email", label: t("field.email"), type: "email", required: true, attributes: { autocomplete: "username" } }),
    control({ pointer: "/password", label: t("field.password"), type: "password", required: true, hint: passwordHint, attributes: { autocomplete } }),
  ];
}

const values = (element) => ({
  email: element.querySelector('[name="/email"]').value,
  password: element.querySelector('[name="/password"]').value,
});

export function signIn() {
  return form({
    title: t("sign_in.title"), headingLevel: "h1",
    body: credentials(null, "current-password"),
    submit: t("sign_in.submit"),
    footer: h("p", {}, t("sign_in.no_account"), " ", link("/console/sign-up", t("nav.sign_up"))),
    onsubmit: async (element) => {
      await api("POST", "/v1/browser-sessions", values(element));
      await refreshSession();
      router.go("/console/roles");
    },
  });
}

export function signUp() {
  return form({
    title: t("sign_up.title"), headingLevel: "h1",
    body: credentials(t("sign_up.password_hint"), "new-password"),
    submit: t("sign_up.submit"),
    footer: h("p", {}, t("sign_up.have_account"), " ", link("/console/sign-in", t("nav.sign_in"))),
    onsubmit: async (element) => {
      await api("POST", "/v1/accounts", values(element));
      router.notice = t("sign_up.created");
      router.go("/console/sign-in");
    },
  });
}

export function signOut() {
  return api("POST", "/v1/sessions/current/revoke");
}

/** An application's status as a badge. */
export function statusBadge(status) {
  const kind = { approved: "ok", rejected: "bad", withdrawn: "neutral", information_requested: "warn" }[status] ?? "info";
  return badge(t(`status.${status}`), kind);
}

export async function roles() {
  const me = await get("/v1/me");
  session.me = me;
  const own = (await get("/v1/applications")).applications;
  const open = own.find((a) => ["under_review", "information_requested"].includes(a.status));
  const expires = dateTime(session.current.expires_at);
  const items = me.roles.map((role) => {
    const [name, id] = role.split(":");
    const where = {
      renter: link("/console/market", t("roles.renter.go")),
      applicant: open ? link(`/console/applications/${open.application_id}`, t("roles.applicant.go")) : null,
      provider: link(`/console/provider/${id}/machines`, t("roles.provider.go")),
      admin: link("/console/review", t("roles.admin.go")),
      finance: link("/console/finance", t("roles.finance.go")),
      treasury: link("/console/finance", t("roles.finance.go")),
    }[name];
    return h("li", { "data-role": name },
      h("strong", {}, t(`roles.${name}`)), " — ", t(`roles.${name}.about`, { id }), where ? [" ", where] : null);
  });
  return h("div", {},
    h("section", {},
      h("h1", {}, t("roles.title")),
      h("p", { id: "whoami" }, t("roles.signed_in_as", { email: me.email })),
      h("ul", { class: "roles" }, items),
      open ? null : h("p", {}, link("/console/apply", t("roles.apply"), { class: "button" })),
      h("p", { class: "hint" }, t("roles.session_until", { at: expires }))),
    own.length ? part(t("roles.applications"), table(t("roles.applications"), [
      [t("application.submitted_at"), (a) => link(`/console/applications/${a.application_id}`, dateTime(a.submitted_at))],
      [t("application.status"), (a) => statusBadge(a.status)],
      [t("application.gpus"), (a) => gpuSummary(a.form)],
    ], own)) : null);
}

/** A form's GPU entries in a line: "8 × h100-80gb, 2 × My GPU". */
export function gpuSummary(form) {
  return form.gpus.map((g) => `${g.quantity} × ${g.model.catalog ?? g.model.unlisted}`).join(", ");
}
