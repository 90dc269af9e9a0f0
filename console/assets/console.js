// The GPUnex console: a client of the public /v1 API and nothing else (ADR 0008). The session
// lives in an HttpOnly cookie the page cannot read; every change sends the session's CSRF token,
// learned from GET /v1/sessions/current, and names the role it acts in (ADR 0009). Pages are
// built with DOM calls only (lib/dom.js), so text from the API is never parsed as markup.

import { Problem, refreshSession, session } from "./lib/api.js";
import { fill, h, link, problemText, router } from "./lib/dom.js";
import { i18n, loadStrings, t } from "./lib/i18n.js";
import * as account from "./pages/account.js";
import * as apply from "./pages/apply.js";
import * as review from "./pages/review.js";
import * as provider from "./pages/provider.js";
import * as finance from "./pages/finance.js";
import * as market from "./pages/market.js";

const ID = "([0-9a-f-]{36})";

/** Every page: its path, what builds it, and whether a stranger may see it. */
const routes = [
  [/^\/console\/sign-in$/, account.signIn, { public: true }],
  [/^\/console\/sign-up$/, account.signUp, { public: true }],
  [/^\/console\/market$/, market.search, { public: true }],
  [/^\/console\/roles$/, account.roles],
  [/^\/console\/apply$/, apply.applyPage],
  [new RegExp(`^/console/applications/${ID}$`), apply.applicationPage],
  [new RegExp(`^/console/provider/${ID}/machines/${ID}$`), provider.machinePage],
  [new RegExp(`^/console/provider/${ID}/payouts/${ID}$`), provider.payoutPage],
  [new RegExp(`^/console/provider/${ID}(?:/(machines|benchmarks|prices|earnings|payouts|performance))?$`), provider.panel],
  [/^\/console\/review$/, review.queue],
  [new RegExp(`^/console/review/${ID}$`), review.detail],
  [/^\/console\/finance$/, finance.overview],
  [/^\/console\/finance\/batches\/(\d{4}-\d{2}-\d{2})$/, finance.batch],
];

/** What the page being shown asked to stop when it is left (timers). */
let leaving = [];

function renderNav() {
  const roles = session.me?.roles ?? [];
  const providers = roles.filter((r) => r.startsWith("provider:")).map((r) => r.slice("provider:".length));
  const items = session.current
    ? [
      link("/console/roles", t("nav.roles")),
      link("/console/market", t("nav.market")),
      providers.map((id, i) => link(`/console/provider/${id}/machines`, providers.length > 1 ? t("nav.provider_n", { n: i + 1 }) : t("nav.provider"))),
      roles.includes("admin") ? link("/console/review", t("nav.review")) : null,
      roles.some((r) => ["admin", "finance", "treasury"].includes(r)) ? link("/console/finance", t("nav.finance")) : null,
      h("button", { type: "button", class: "link", onclick: signOut }, t("nav.sign_out")),
    ]
    : [link("/console/market", t("nav.market")), link("/console/sign-in", t("nav.sign_in")), link("/console/sign-up", t("nav.sign_up"))];
  const nav = document.getElementById("nav");
  fill(nav, items);
  for (const a of nav.querySelectorAll("a")) {
    if (location.pathname.startsWith(new URL(a.href).pathname.replace(/\/machines$/, ""))) a.setAttribute("aria-current", "page");
  }
  document.getElementById("lang-label").textContent = t("lang.label");
  document.getElementById("lang").value = i18n.lang;
}

async function signOut() {
  try { await account.signOut(); } catch (problem) { if (!(problem instanceof Problem)) throw problem; }
  session.current = null;
  session.me = null;
  go("/console/sign-in");
}

async function render() {
  for (const stop of leaving) stop();
  leaving = [];
  let path = location.pathname;
  let route = routes.find(([pattern]) => pattern.test(path));
  if (!route) {
    path = session.current ? "/console/roles" : "/console/sign-in";
    route = routes.find(([pattern]) => pattern.test(path));
  }
  if (!session.current && !route[2]?.public) {
    path = "/console/sign-in";
    route = routes[0];
  }
  if (path !== location.pathname) history.replaceState(null, "", path);
  renderNav();
  const main = document.getElementById("main");
  const notice = router.notice ? h("p", { class: "notice", role: "status" }, router.notice) : null;
  router.notice = null;
  const context = { onLeave: (stop) => leaving.push(stop), rerender: render };
  const params = path.match(route[0]).slice(1);
  try {
    fill(main, notice, await route[1](params, context));
  } catch (problem) {
    if (!(problem instanceof Problem)) {
      fill(main, h("h1", {}, t("page_error.title")), h("p", { class: "alert", role: "alert" }, t("error.generic", { code: "console" })));
      throw problem;
    }
    if (problem.status === 401) { session.current = null; session.me = null; return go("/console/sign-in"); }
    fill(main, h("h1", {}, t("page_error.title")), h("p", { class: "alert", role: "alert" }, problemText(problem)));
  }
  document.title = `GPUnex — ${main.querySelector("h1")?.textContent ?? ""}`;
  main.focus();
}

function go(path) {
  history.pushState(null, "", path);
  return render();
}
router.go = go;

window.addEventListener("popstate", render);
document.getElementById("lang").addEventListener("change", async (event) => {
  const lang = event.target.value;
  document.cookie = `gpunex_lang=${lang}; Path=/; Max-Age=31536000; SameSite=Strict`;
  await loadStrings(lang);
  await render();
});

await loadStrings(i18n.lang);
await refreshSession();
await render();
