// The GPUnex console: a client of the public /v1 API and nothing else (ADR 0008). The session
// lives in an HttpOnly cookie the page cannot read; every change sends the session's CSRF token,
// learned from GET /v1/sessions/current. Pages are built with DOM calls only (no innerHTML), so
// text from the API is never parsed as markup.

const state = { lang: document.documentElement.lang === "en" ? "en" : "es", strings: {}, session: null, me: null };

// --- strings ------------------------------------------------------------------------------

async function loadStrings(lang) {
  const response = await fetch(`/assets/i18n/${lang}.json`, { credentials: "same-origin" });
  state.strings = await response.json();
  state.lang = lang;
  document.documentElement.lang = lang;
}

/** The catalog's string for `key`, with `{name}` filled from `values`. */
export function t(key, values = {}) {
  const text = state.strings[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => String(values[name] ?? ""));
}

// --- the API ------------------------------------------------------------------------------

class Problem extends Error {
  constructor(status, body) {
    super(body?.detail ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.code ?? "network";
    this.errors = body?.errors ?? [];
    this.body = body;
  }
}

/** Calls the API; resolves with the JSON body (null for 204), rejects with a Problem. */
async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.session?.csrf_token) headers["X-CSRF-Token"] = state.session.csrf_token;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new Problem(0, { code: "network" });
  }
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (!response.ok) throw new Problem(response.status, json);
  return json;
}

// --- building pages -----------------------------------------------------------------------

/** An element: `h("p", { class: "x" }, "text", child)`. */
function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

function link(href, text) {
  return h("a", { href, onclick: (event) => { event.preventDefault(); go(href); } }, text);
}

/** What a problem says, in the reader's language where the catalog knows its code. */
function problemText(problem) {
  const key = `error.${problem.code}`;
  if (key in state.strings) return t(key, { seconds: problem.body?.retry_after_seconds ?? "" });
  return problem.body?.detail ? `${problem.body.detail} (${problem.code})` : t("error.generic", { code: problem.code });
}

/** A form whose inputs are named by the JSON Pointer of their field (`/email`): a problem's
 *  field errors are shown next to their fields, anything else above the button. */
function form({ title, fields, submit, onsubmit, footer }) {
  const alert = h("p", { class: "alert", role: "alert", hidden: true });
  const inputs = fields.map((field) => {
    const id = `f${field.pointer.replaceAll("/", "-")}`;
    const error = h("p", { class: "field-error", id: `${id}-error`, hidden: true });
    const hint = field.hint ? h("p", { class: "hint", id: `${id}-hint` }, field.hint) : null;
    const input = h("input", {
      id, name: field.pointer, type: field.type ?? "text", autocomplete: field.autocomplete,
      required: true, "aria-describedby": [hint && `${id}-hint`, `${id}-error`].filter(Boolean).join(" "),
    });
    return { field, input, error, node: h("div", { class: "field" }, h("label", { for: id }, field.label), input, hint, error) };
  });
  const button = h("button", { type: "submit" }, submit);
  const element = h("form", { novalidate: true }, h("h1", {}, title), inputs.map((i) => i.node), alert, button, footer);
  element.addEventListener("submit", async (event) => {
    event.preventDefault();
    alert.hidden = true;
    for (const i of inputs) { i.error.hidden = true; i.input.removeAttribute("aria-invalid"); }
    const values = Object.fromEntries(inputs.map((i) => [i.field.pointer.slice(1), i.input.value]));
    button.disabled = true;
    try {
      await onsubmit(values);
    } catch (problem) {
      if (!(problem instanceof Problem)) throw problem;
      let placed = false;
      for (const fieldError of problem.errors) {
        const target = inputs.find((i) => i.field.pointer === fieldError.field);
        if (!target) continue;
        const key = `error.${fieldError.code}`;
        target.error.textContent = key in state.strings ? t(key) : fieldError.message;
        target.error.hidden = false;
        target.input.setAttribute("aria-invalid", "true");
        placed = true;
      }
      if (!placed) { alert.textContent = problemText(problem); alert.hidden = false; }
    } finally {
      button.disabled = false;
    }
  });
  return element;
}

// --- pages --------------------------------------------------------------------------------

const pages = {
  "/console/sign-in": () => form({
    title: t("sign_in.title"),
    fields: [
      { pointer: "/email", label: t("field.email"), type: "email", autocomplete: "username" },
      { pointer: "/password", label: t("field.password"), type: "password", autocomplete: "current-password" },
    ],
    submit: t("sign_in.submit"),
    footer: h("p", {}, t("sign_in.no_account"), " ", link("/console/sign-up", t("nav.sign_up"))),
    onsubmit: async (values) => {
      state.session = await api("POST", "/v1/browser-sessions", values);
      await refreshSession();
      go("/console/roles");
    },
  }),
  "/console/sign-up": () => form({
    title: t("sign_up.title"),
    fields: [
      { pointer: "/email", label: t("field.email"), type: "email", autocomplete: "username" },
      { pointer: "/password", label: t("field.password"), type: "password", autocomplete: "new-password", hint: t("sign_up.password_hint") },
    ],
    submit: t("sign_up.submit"),
    footer: h("p", {}, t("sign_up.have_account"), " ", link("/console/sign-in", t("nav.sign_in"))),
    onsubmit: async (values) => {
      await api("POST", "/v1/accounts", values);
      state.notice = t("sign_up.created");
      go("/console/sign-in");
    },
  }),
  "/console/roles": async () => {
    const me = await api("GET", "/v1/me");
    const expires = new Intl.DateTimeFormat(state.lang, { dateStyle: "long", timeStyle: "short" })
      .format(new Date(state.session.expires_at));
    const items = me.roles.map((role) => {
      const [name, id] = role.split(":");
      return h("li", { "data-role": name },
        h("strong", {}, t(`roles.${name}`)), " — ", t(`roles.${name}.about`, { id }));
    });
    return h("section", {},
      h("h1", {}, t("roles.title")),
      h("p", { id: "whoami" }, t("roles.signed_in_as", { email: me.email })),
      h("ul", { class: "roles" }, items),
      h("p", { class: "hint" }, t("roles.session_until", { at: expires })));
  },
};

async function refreshSession() {
  try {
    state.session = await api("GET", "/v1/sessions/current");
  } catch (problem) {
    if (problem instanceof Problem && problem.status === 401) state.session = null;
    else throw problem;
  }
}

function renderNav() {
  const nav = document.getElementById("nav");
  const items = state.session
    ? [link("/console/roles", t("nav.roles")),
       h("button", { type: "button", class: "link", onclick: signOut }, t("nav.sign_out"))]
    : [link("/console/sign-in", t("nav.sign_in")), link("/console/sign-up", t("nav.sign_up"))];
  nav.replaceChildren(...items);
  document.getElementById("lang-label").textContent = t("lang.label");
  document.getElementById("lang").value = state.lang;
}

async function signOut() {
  try { await api("POST", "/v1/sessions/current/revoke"); } catch (problem) { if (!(problem instanceof Problem)) throw problem; }
  state.session = null;
  go("/console/sign-in");
}

const publicPages = new Set(["/console/sign-in", "/console/sign-up"]);

async function render() {
  let path = location.pathname;
  if (!pages[path]) path = state.session ? "/console/roles" : "/console/sign-in";
  if (!state.session && !publicPages.has(path)) path = "/console/sign-in";
  if (path !== location.pathname) history.replaceState(null, "", path);
  renderNav();
  const main = document.getElementById("main");
  const notice = state.notice ? h("p", { class: "notice", role: "status" }, state.notice) : null;
  state.notice = null;
  try {
    main.replaceChildren(...[notice, await pages[path]()].filter(Boolean));
  } catch (problem) {
    if (!(problem instanceof Problem)) throw problem;
    if (problem.status === 401) { state.session = null; return go("/console/sign-in"); }
    main.replaceChildren(h("p", { class: "alert", role: "alert" }, problemText(problem)));
  }
  document.title = `GPUnex — ${main.querySelector("h1")?.textContent ?? ""}`;
  main.focus();
}

function go(path) {
  history.pushState(null, "", path);
  return render();
}

window.addEventListener("popstate", render);
document.getElementById("lang").addEventListener("change", async (event) => {
  const lang = event.target.value;
  document.cookie = `gpunex_lang=${lang}; Path=/; Max-Age=31536000; SameSite=Strict`;
  await loadStrings(lang);
  await render();
});

await loadStrings(state.lang);
await refreshSession();
await render();
