// The console in a real browser: Playwright (the library) driving Debian's Chromium against a
// running `gpunex serve` (scripts/console.sh starts it, in a debug build on the test clock).
//
//   node story.mjs BASE_URL SCREENSHOT_DIR [LABEL]
//
// Environment: CHROMIUM (the browser), AGENT (the gpunex-agent binary), SERVER_PID (to move
// the server's test clock with SIGUSR1), PASSWORD (of the staff accounts scripts/console.sh
// made: rita@gpunex.test holds admin, fiona@gpunex.test finance and treasury), WORK (a scratch
// directory).
//
// The provider guide's story through the pages: sign up, apply, the reviewer asks and then
// approves in the console, take the provider token, see the install steps, a simulated agent
// registers and the machine shows online with its telemetry, set prices, a schedule and a
// maintenance window, a renter rents through the API, earnings appear and the chart moves
// without a reload, payout settings, a payout batch run by treasury, the payout with its proof;
// the reviewer's and finance's pages; refusals of another provider's and a wrong role's pages;
// field errors. Every page is screenshotted (and at 375 px wide), checked with axe-core (no
// serious or critical violation) and for sideways scrolling. Figures (chart draw times, asset
// sizes) are printed at the end.
import { chromium } from "playwright-core";
import { readFileSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { createRequire } from "node:module";
import { spawn } from "node:child_process";
import { join } from "node:path";

/** A UUIDv7 (the agent API takes event ids of that version): milliseconds, then random bits. */
function uuidv7() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  let ms = BigInt(Date.now());
  for (let i = 5; i >= 0; i--) { bytes[i] = Number(ms & 0xffn); ms >>= 8n; }
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
import assert from "node:assert/strict";

const [base, shots, label = "console"] = process.argv.slice(2);
if (!base || !shots) throw new Error("usage: node story.mjs BASE_URL SCREENSHOT_DIR [LABEL]");
const PASSWORD = process.env.PASSWORD ?? "correct horse battery staple";
const WORK = process.env.WORK ?? "/tmp";
mkdirSync(shots, { recursive: true });
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const WALLET = "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH";
const figures = {};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
const failures = [];

/** A person's own browser (cookies apart), in Spanish unless told otherwise. */
async function person(locale = "es-ES") {
  const context = await browser.newContext({ locale, viewport: { width: 1100, height: 800 }, acceptDownloads: true });
  const page = await context.newPage();
  page.on("pageerror", (error) => { failures.push(`page error: ${error.message}`); console.error(`page error: ${error.stack}`); });
  page.on("console", (message) => {
    if (message.type() === "error" && !/status of (4\d\d)/.test(message.text())) failures.push(`console: ${message.text()}`);
  });
  page.setDefaultTimeout(20_000);
  pages.push(page);
  return { context, page };
}

let shot = 0;
/** Screenshots the page (and at 375 px), checks it with axe-core and for sideways scrolling. */
async function check(page, name) {
  await page.waitForLoadState("networkidle");
  shot += 1;
  const prefix = String(shot).padStart(2, "0");
  await page.screenshot({ path: `${shots}/${prefix}-${name}.jpg`, fullPage: true, type: "jpeg", quality: 70 });
  await page.evaluate(axeSource);
  const result = await page.evaluate(async () => window.axe.run(document, { resultTypes: ["violations"] }));
  const serious = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(serious.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target).join(", ")})`), [], `${name}: axe violations`);
  const width = page.viewportSize().width;
  await page.setViewportSize({ width: 375, height: 800 });
  const scroll = await page.evaluate(() => document.scrollingElement.scrollWidth);
  const wide = scroll <= 375 ? [] : await page.evaluate(() => [...document.querySelectorAll("body *")]
    .filter((e) => e.getBoundingClientRect().right > 376 && !e.closest(".scroll, pre"))
    .slice(-5).map((e) => `${e.tagName.toLowerCase()}.${e.className}: ${e.textContent.slice(0, 60)}`));
  assert.ok(scroll <= 375, `${name}: ${scroll} px wide at 375: ${wide.join(" | ")}`);
  await page.screenshot({ path: `${shots}/${prefix}-${name}-375px.jpg`, fullPage: true, type: "jpeg", quality: 70 });
  await page.setViewportSize({ width, height: 800 });
}

/** The API from here (a renter's program, or setting up the second provider): JSON in, JSON out. */
async function api(method, path, { token, body, actAs } = {}) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (actAs) headers["X-GPUnex-Act-As"] = actAs;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return json;
}

async function session(email) {
  return (await api("POST", "/v1/sessions", { body: { email, password: PASSWORD } })).token;
}

async function signIn(page, email) {
  await page.goto(base + "/console/sign-in");
  await page.locator('input[name="/email"]').fill(email);
  await page.locator('input[name="/password"]').fill(PASSWORD);
  await page.locator('form button[type="submit"]').click();
  await page.waitForURL("**/console/roles");
}

/** Waits until `read()` answers something `accept` takes, polling the API (not the page). */
async function until(what, read, accept, seconds = 30) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await read();
    if (accept(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

let agent = null;
const pages = [];
try {
  const ana = "ana@example.com";
  const { context: anaContext, page } = await person();

  // ---- Anyone: the root sends a stranger to sign in, in Spanish (Accept-Language es). ----------
  await page.goto(base + "/");
  await page.waitForURL("**/console/sign-in");
  assert.equal(await page.locator("html").getAttribute("lang"), "es");
  await page.getByRole("heading", { name: "Iniciar sesión" }).waitFor();
  await check(page, "sign-in");

  // Sign up: the API's field error appears next to its field.
  await page.locator("main").getByRole("link", { name: "Crear cuenta" }).click();
  await page.getByLabel("Correo electrónico").fill(ana);
  await page.getByLabel("Contraseña").fill("short");
  await page.getByRole("button", { name: "Crear cuenta" }).click();
  const passwordError = page.locator(".field-error").filter({ hasText: "La contraseña debe tener entre 12 y 128 caracteres." });
  await passwordError.waitFor();
  assert.equal(await page.getByLabel("Contraseña").getAttribute("aria-invalid"), "true");
  await check(page, "sign-up-field-error");
  await page.getByLabel("Contraseña").fill(PASSWORD);
  await page.getByRole("button", { name: "Crear cuenta" }).click();
  await page.waitForURL("**/console/sign-in");
  await page.getByRole("status").waitFor();

  // A wrong password is said without saying which part was wrong.
  await page.getByLabel("Correo electrónico").fill(ana);
  await page.getByLabel("Contraseña").fill("wrong horse battery staple");
  await page.getByRole("button", { name: "Entrar" }).click();
  await page.getByRole("alert").filter({ hasText: "Correo o contraseña incorrectos." }).waitFor();

  // Sign in with the keyboard only.
  await page.reload();
  await page.waitForLoadState("networkidle");
  for (let i = 0; i < 15 && (await page.evaluate(() => document.activeElement?.name)) !== "/email"; i++) {
    await page.keyboard.press("Tab");
  }
  assert.equal(await page.evaluate(() => document.activeElement?.name), "/email", "the email field is reachable by Tab");
  await page.keyboard.type(ana);
  await page.keyboard.press("Tab");
  await page.keyboard.type(PASSWORD);
  await page.keyboard.press("Enter");
  await page.waitForURL("**/console/roles");
  await page.locator("#whoami").filter({ hasText: ana }).waitFor();
  await page.locator('li[data-role="renter"]').filter({ hasText: "Arrendatario" }).waitFor();
  await check(page, "roles");

  // The session is out of script's reach: not in document.cookie, not in storage, not in the URL.
  assert.ok(!(await page.evaluate(() => document.cookie)).includes("gpunex_session"));
  assert.equal(await page.evaluate(() => localStorage.length + sessionStorage.length), 0);
  assert.ok(!page.url().includes("gpnx_"));
  const session_cookie = (await anaContext.cookies()).find((c) => c.name === "gpunex_session");
  assert.ok(session_cookie?.httpOnly && session_cookie.sameSite === "Strict", JSON.stringify(session_cookie));
  // A change without the CSRF header, made by script on the page with the cookie, is refused.
  assert.equal(await page.evaluate(async () => (await fetch("/v1/sessions/current/revoke", { method: "POST" })).status), 403);

  // ---- The application: every field of the guide, field errors from the API. ------------------
  await page.getByRole("link", { name: "Aplicar para proveer GPUs" }).click();
  await page.waitForURL("**/console/apply");
  await page.getByRole("heading", { name: "Aplicar para proveer GPUs" }).waitFor();
  assert.equal(await page.getByLabel("Correo electrónico").inputValue(), ana, "the email is filled from the account");
  await page.getByRole("button", { name: "Enviar", exact: true }).click();
  // The API answers every missing field at once; each shows next to its field.
  await page.locator('[data-pointer="/full_legal_name"][aria-invalid="true"]').waitFor();
  await page.locator('[data-pointer="/gpus/0/model"][aria-invalid="true"]').waitFor();
  await check(page, "apply-field-errors");
  await page.getByLabel("Nombre completo").fill("Ana García");
  await page.getByLabel("Nombre de la empresa").fill("García Cómputo SL");
  const entry = page.locator("fieldset.entry").first();
  await entry.getByLabel("Modelo GPU").selectOption("h100-80gb");
  await entry.getByLabel("Cantidad").fill("2");
  await entry.getByLabel("RAM del sistema (GB)").fill("512");
  await entry.getByLabel("Subida (Gbps)").fill("10");
  await entry.getByLabel("Bajada (Gbps)").fill("10");
  await entry.getByLabel("Ciudad").fill("Madrid");
  await entry.getByLabel("País").fill("es");
  await entry.getByLabel("Región").fill("Madrid");
  // A second entry, added and removed again.
  await page.getByRole("button", { name: "Agregar una entrada de GPU" }).click();
  assert.equal(await page.locator("fieldset.entry").count(), 2);
  await page.getByRole("button", { name: "Quitar la última entrada" }).click();
  assert.equal(await page.locator("fieldset.entry").count(), 1);
  await page.getByLabel("Protegido por un SAI (UPS)").check();
  await page.getByLabel("Período de compromiso").selectOption("3");
  await page.getByLabel("Notas de mantenimiento").fill("Ventana de mantenimiento planificada de 2 horas el primer domingo de cada mes.");
  await page.getByRole("button", { name: "Enviar", exact: true }).click();
  await page.waitForURL("**/console/applications/*");
  const applicationId = page.url().split("/").pop();
  await page.getByRole("heading", { name: /Solicitud de proveedor/ }).waitFor();
  await page.locator(".badge").filter({ hasText: "En revisión" }).first().waitFor();
  await check(page, "application-under-review");

  // Rex applies too (through the API) and nobody reviews him yet: ten days on he is overdue.
  await api("POST", "/v1/accounts", { body: { email: "rex@example.com", password: PASSWORD } });
  const rexApplication = await api("POST", "/v1/applications", { token: await session("rex@example.com"), body: {
    full_legal_name: "Rex Ortega", email: "rex@example.com",
    gpus: [{ model: "RTX 4090", quantity: 1, system_ram_gb: 64, upload_gbps: "0.5", download_gbps: "1",
      availability: { kind: "always_on" }, location: { city: "Sevilla", country: "ES", region: "Andalucía" } }],
    ups_protected: false, commitment_months: 1,
  } });

  // ---- The reviewer: the queue, a question, the tier rules, the approval. ----------------------
  const { context: ritaContext, page: rita } = await person();
  await until("the reviewer's grant", async () => (await api("GET", "/v1/me", { token: await session("rita@gpunex.test") })).roles, (r) => r.includes("admin"));
  await signIn(rita, "rita@gpunex.test");
  await rita.locator('li[data-role="admin"]').waitFor();
  await rita.getByRole("navigation", { name: "main" }).getByRole("link", { name: "Solicitudes" }).click();
  await rita.waitForURL("**/console/review");
  await rita.getByRole("link", { name: /\d/ }).first().waitFor();
  assert.ok(await rita.getByRole("cell", { name: /Ana García/ }).isVisible());
  await check(rita, "review-queue");
  await rita.goto(`${base}/console/review/${applicationId}`);
  await rita.getByRole("heading", { name: "Solicitud de Ana García" }).waitFor();
  // A 3-month commitment breaks an Enterprise rule: shown before deciding, and refused if tried.
  await rita.locator("ul.violations li").filter({ hasText: "Un compromiso de 3 meses; Enterprise necesita al menos 6." }).waitFor();
  await rita.locator("form").filter({ hasText: "Solicitar información" }).getByLabel("Mensaje al solicitante").fill("¿Puede enviar una foto de la etiqueta del SAI?");
  await rita.getByRole("button", { name: "Enviar la solicitud" }).click();
  await rita.getByRole("status").filter({ hasText: "Solicitud enviada al solicitante." }).waitFor();
  await check(rita, "review-application");

  // The applicant reads the question and answers it.
  await page.reload();
  await page.locator("blockquote").filter({ hasText: "¿Puede enviar una foto de la etiqueta del SAI?" }).waitFor();
  await page.getByLabel("Su respuesta").fill("Adjunta al correo: SAI APC Smart-UPS 3000.");
  await check(page, "application-information-requested");
  await page.getByRole("button", { name: "Enviar respuesta" }).click();
  await page.getByRole("status").filter({ hasText: "Respuesta enviada" }).waitFor();

  await rita.reload();
  await rita.locator("blockquote").filter({ hasText: "SAI APC Smart-UPS 3000" }).waitFor();
  await rita.getByRole("button", { name: "Aprobar como Enterprise" }).click();
  await rita.getByRole("alert").filter({ hasText: "no cumple las reglas de este nivel" }).waitFor();
  await rita.getByRole("button", { name: "Aprobar como Comunidad" }).click();
  await rita.getByRole("status").filter({ hasText: "Aprobada" }).waitFor();

  // ---- Approved: the provider token, once; the panel; an agent token and the install steps. ----
  await page.reload();
  await page.locator(".badge").filter({ hasText: "Aprobada" }).first().waitFor();
  await page.getByRole("button", { name: "Obtener el token de proveedor" }).click();
  const providerToken = await page.locator("input.secret").inputValue();
  assert.match(providerToken, /^gpnx_[0-9a-f]{32}_[0-9a-f]{64}$/);
  await check(page, "provider-token");
  await page.getByRole("button", { name: "Obtener el token de proveedor" }).click();
  await page.getByRole("alert").filter({ hasText: "ya se obtuvo" }).waitFor();
  await page.getByRole("link", { name: "Ir al Panel de proveedor" }).click();
  await page.waitForURL("**/console/provider/*/machines");
  const providerId = page.url().split("/").at(-2);
  await page.getByRole("heading", { name: "Panel de proveedor" }).waitFor();
  await page.locator(".empty").filter({ hasText: "Aún no se ha registrado ninguna máquina" }).waitFor();
  await page.getByLabel("Etiqueta").fill("rack 1, gpu-01");
  await page.getByRole("button", { name: "Emitir un token de agente" }).click();
  await page.locator(".issued pre.commands").first().waitFor();
  const agentToken = await page.locator(".issued input.secret").inputValue();
  const install = await page.locator(".issued pre.commands").allTextContents();
  assert.ok(install.some((c) => c.includes(`GPUNEX_AGENT_TOKEN=${agentToken} agent/docker/install.sh --server ${base}`)), install.join("\n"));
  assert.ok(install.some((c) => c.includes("nvidia-smi")) && install.some((c) => c.includes("docker ps | grep gpunex-agent")));
  await check(page, "machines-install-steps");

  // A simulated agent on this token: it registers, and the page shows the machine online by itself.
  agent = spawn(process.env.AGENT, [
    "run", "--server", base, "--state-dir", join(WORK, `agent-${label}`), "--simulate", "2xH100",
    "--runtime", "process", "--heartbeat-interval", "1s", "--poll-interval", "1s", "--usage-interval", "2s",
    "--benchmark-suite-duration", "2s",
  ], { env: { ...process.env, GPUNEX_AGENT_TOKEN: agentToken }, stdio: ["ignore", "ignore", "pipe"] });
  let agentLog = "";
  agent.stderr.on("data", (chunk) => { agentLog = (agentLog + chunk).slice(-4000); });
  try {
    await page.locator(".badge").filter({ hasText: "En línea" }).first().waitFor({ timeout: 40_000 });
  } catch (error) {
    throw new Error(`${error.message}\nagent: ${agentLog}`);
  }
  await page.locator(".summary").filter({ hasText: "1 de 1 máquinas en línea; 2 de 2 GPUs en línea." }).waitFor({ timeout: 20_000 });
  await page.locator(".badge").filter({ hasText: "Las GPUs detectadas coinciden con la solicitud." }).waitFor();
  await check(page, "machines-online");
  await page.getByRole("link", { name: /Gráficas de telemetría/ }).click();
  await page.locator("figure.chart svg polyline").first().waitFor();
  assert.equal(await page.locator("figure.chart").count(), 8, "four charts per GPU, two GPUs");
  await check(page, "telemetry");

  // ---- Precios: a refused price, a price, a schedule, a maintenance window, the rank. ---------
  await page.getByRole("link", { name: "Precios", exact: true }).click();
  await page.waitForURL("**/prices");
  const priceForm = page.locator("form").filter({ hasText: "Fijar el precio" }).first();
  await priceForm.getByLabel("Nuevo precio (USDC por GPU-hora)").fill("dos");
  await priceForm.getByRole("button", { name: "Fijar el precio" }).click();
  await priceForm.locator(".field-error").filter({ hasText: "escrito con punto" }).waitFor();
  await priceForm.getByLabel("Nuevo precio (USDC por GPU-hora)").fill("25.5");
  await priceForm.getByRole("button", { name: "Fijar el precio" }).click();
  await page.locator('[data-price="h100-80gb"]').filter({ hasText: "25,50 USDC" }).waitFor();
  // A weekly schedule open every day (so the GPUs stay listed) in Madrid's time.
  const schedule = page.locator("form").filter({ hasText: "Guardar el horario" });
  await schedule.getByLabel("Con un horario semanal").check();
  await schedule.getByLabel("Zona horaria").fill("Europe/Madrid");
  const days = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];
  for (const [i, day] of days.entries()) {
    await schedule.getByRole("button", { name: "Agregar una ventana" }).click();
    const row = schedule.locator("fieldset.window").nth(i);
    await row.locator("select.day").selectOption(day);
    await row.locator("input.from").fill("00:00");
    await row.locator("input.to").fill("00:00");
  }
  await schedule.getByRole("button", { name: "Guardar el horario" }).click();
  await page.locator(".badge").filter({ hasText: "Listado ahora" }).waitFor();
  await page.getByRole("table", { name: /Listado en los próximos 7 días \(Europe\/Madrid\)/ }).waitFor();
  // Maintenance: refused when it ends before it starts, then announced for tomorrow.
  const maintenance = page.locator("form").filter({ hasText: "Anunciar" });
  const local = (offsetHours) => {
    const d = new Date(Date.now() + offsetHours * 3_600_000);
    const pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:00`;
  };
  await maintenance.getByLabel("Desde").fill(local(30));
  await maintenance.getByLabel("Hasta").fill(local(26));
  await maintenance.getByLabel("Motivo").fill("cambio de fuente de alimentación");
  await maintenance.getByRole("button", { name: "Anunciar" }).click();
  await maintenance.locator(".field-error:not([hidden]), .alert:not([hidden])").first().waitFor();
  await maintenance.getByLabel("Hasta").fill(local(32));
  await maintenance.getByRole("button", { name: "Anunciar" }).click();
  await page.getByRole("cell", { name: "cambio de fuente de alimentación" }).waitFor();
  await page.locator(".recommendation").first().waitFor();
  await page.getByRole("cell", { name: "1 de 2" }).first().waitFor();
  await check(page, "prices");

  // ---- A renter rents through the API; earnings appear and move without a reload. -------------
  await api("POST", "/v1/accounts", { body: { email: "rene@example.com", password: PASSWORD } });
  const rene = await session("rene@example.com");
  const listings = await until("the listings", () => api("GET", "/v1/listings?model=h100-80gb"), (l) => l.listings.length === 2);
  const rental = await api("POST", "/v1/rentals", { token: rene, body: {
    gpu_uuids: listings.listings.map((l) => l.gpu_uuid),
    workload: { image: "nvidia/cuda:12.4.0-base-ubuntu22.04", command: ["sleep", "3600"] },
  } });
  await page.getByRole("link", { name: "Ganancias", exact: true }).click();
  await page.waitForURL("**/earnings");
  const week = page.locator('[data-figure="week"] .big');
  await week.waitFor();
  const before = await week.textContent();
  await page.locator('[data-figure="week"] .big').filter({ hasNotText: before }).waitFor({ timeout: 40_000 });
  const firstSeen = await week.textContent();
  await page.locator("figure.chart polyline, figure.chart circle").first().waitFor();
  // The figures move again while usage is metered: no reload.
  await page.locator('[data-figure="week"] .big').filter({ hasNotText: firstSeen }).waitFor({ timeout: 30_000 });
  figures.earnings_chart_draw_ms = Number(await page.locator("figure.chart").first().getAttribute("data-draw-ms"));
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.getByRole("button", { name: "Descargar el extracto (CSV)" }).click(),
  ]);
  const csv = readFileSync(await download.path(), "utf8");
  assert.ok(csv.startsWith("recorded_at,position,usage_event_id"), csv.slice(0, 200));
  assert.ok(csv.includes(rental.rental_id), "the statement names the rental");
  await check(page, "earnings");

  // ---- Pagos: a wallet that is not one, then the settings; the next payout. -------------------
  await page.getByRole("link", { name: "Pagos", exact: true }).click();
  await page.waitForURL("**/payouts");
  await page.getByLabel("Dirección de billetera Solana").fill("not-a-wallet");
  await page.getByRole("button", { name: "Guardar" }).click();
  await page.locator('[data-pointer="/method/wallet"][aria-invalid="true"]').waitFor();
  await page.getByLabel("Dirección de billetera Solana").fill(WALLET);
  await page.getByRole("button", { name: "Guardar" }).click();
  await page.getByText(`USDC en Solana a ${WALLET}`).waitFor();
  await page.locator('[data-figure="next_date"]').waitFor();
  // Then by bank transfer instead: an IBAN that is not one, then a SEPA account.
  await page.getByLabel("Se paga a").selectOption("bank");
  await page.getByLabel("Titular de la cuenta").fill("Ana García");
  await page.getByLabel("IBAN").fill("ES00 0000 0000 0000 0000 0000");
  await page.getByLabel("BIC").fill("CAIXESBBXXX");
  await page.getByLabel("Calle").fill("Calle Mayor");
  await page.getByLabel("Número").fill("5");
  await page.getByLabel("Código postal").fill("28013");
  await page.getByLabel("Ciudad").fill("Madrid");
  await page.locator('[data-pointer="/method/address/country"]').fill("ES");
  await page.getByRole("button", { name: "Guardar" }).click();
  // Both refused at once: the IBAN, and the holder's "í", which a SEPA transfer cannot carry.
  await page.locator('[data-pointer="/method/iban"][aria-invalid="true"]').waitFor();
  await page.locator('[data-pointer="/method/account_holder"][aria-invalid="true"]').waitFor();
  await page.getByLabel("IBAN").fill("ES9121000418450200051332");
  await page.getByLabel("Titular de la cuenta").fill("Ana Garcia");
  await page.getByRole("button", { name: "Guardar" }).click();
  await page.getByText("Transferencia a Ana Garcia, ES9121000418450200051332 (CAIXESBBXXX)").waitFor();
  await check(page, "payouts-settings");

  // The renter ends the rental; the job stops and its usage is metered to the end.
  await api("POST", `/v1/rentals/${rental.rental_id}/end`, { token: rene, body: { evidence: "done" } });
  const ended = await until("the job's end", () => api("GET", `/v1/rentals/${rental.rental_id}`, { token: rene }), (r) => r.job_status === "ended", 30);
  const lastUsage = Date.parse(ended.ended_at);

  // ---- Time moves (the server's test clock) to a Monday whose cutoff is after the usage. ------
  process.kill(Number(process.env.SERVER_PID), "SIGUSR1");
  const monday = (() => {
    for (let d = 4; d <= 10; d++) {
      const day = new Date(lastUsage + d * 86_400_000);
      if (day.getUTCDay() === 1) return day.toISOString().slice(0, 10);
    }
    throw new Error("no Monday in the window");
  })();

  // ---- Finance and treasury: reconcile, the batch, its payouts. -------------------------------
  const { page: fiona } = await person();
  await until("finance's grants", async () => (await api("GET", "/v1/me", { token: await session("fiona@gpunex.test") })).roles,
    (r) => r.includes("finance") && r.includes("treasury"));
  await signIn(fiona, "fiona@gpunex.test");
  await fiona.getByRole("navigation", { name: "main" }).getByRole("link", { name: "Finanzas" }).click();
  await fiona.waitForURL("**/console/finance");
  await fiona.getByRole("button", { name: "Conciliar ahora" }).click();
  await fiona.locator('[data-mismatches="0"]').waitFor({ timeout: 60_000 });
  await fiona.getByRole("cell", { name: providerId }).waitFor();
  const batchForm = fiona.locator("form").filter({ hasText: "Ejecutar un lote de pago" });
  await batchForm.getByLabel("Fecha de pago").fill(monday);
  await batchForm.getByRole("button", { name: "Ejecutar" }).click();
  await fiona.getByRole("status").filter({ hasText: "Pagaría 1 pagos" }).waitFor();
  await check(fiona, "finance");
  await batchForm.getByLabel("Solo mostrar lo que pagaría").uncheck();
  await batchForm.getByRole("button", { name: "Ejecutar" }).click();
  await fiona.waitForURL(`**/console/finance/batches/${monday}`);
  await fiona.getByRole("link", { name: providerId }).waitFor();
  // Treasury makes the SEPA file, downloads it, and imports the bank's answer to it.
  const makeFiles = fiona.locator("form").filter({ hasText: "Generar los ficheros SEPA" });
  await makeFiles.getByLabel("EUR por USDC").fill("1");
  await makeFiles.getByRole("button", { name: "Generar", exact: true }).click();
  const fileRow = fiona.getByRole("table", { name: "Ficheros bancarios" }).locator("tbody tr").first();
  await fileRow.waitFor();
  const [sepa] = await Promise.all([fiona.waitForEvent("download"), fileRow.getByRole("button", { name: "Descargar" }).click()]);
  const pain001 = readFileSync(await sepa.path(), "utf8");
  assert.ok(pain001.includes("pain.001.001.09") && pain001.includes("ES9121000418450200051332"), pain001.slice(0, 300));
  const messageId = pain001.match(/<MsgId>([^<]+)<\/MsgId>/)[1];
  const endToEnd = pain001.match(/<EndToEndId>([^<]+)<\/EndToEndId>/)[1];
  const amount = pain001.match(/<InstdAmt Ccy="EUR">([^<]+)<\/InstdAmt>/)[1];
  const pain002 = `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10"><CstmrPmtStsRpt>
<GrpHdr><MsgId>BANKREF-${label}</MsgId><CreDtTm>2026-12-01T09:00:00Z</CreDtTm></GrpHdr>
<OrgnlGrpInfAndSts><OrgnlMsgId>${messageId}</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId></OrgnlGrpInfAndSts>
<OrgnlPmtInfAndSts><OrgnlPmtInfId>${messageId}</OrgnlPmtInfId>
<TxInfAndSts><OrgnlEndToEndId>${endToEnd}</OrgnlEndToEndId><TxSts>ACSC</TxSts>
<OrgnlTxRef><Amt><InstdAmt Ccy="EUR">${amount}</InstdAmt></Amt></OrgnlTxRef></TxInfAndSts>
</OrgnlPmtInfAndSts></CstmrPmtStsRpt></Document>`;
  await fiona.getByLabel("Informe de estado (XML pain.002)").setInputFiles({ name: "pain002.xml", mimeType: "application/xml", buffer: Buffer.from(pain002) });
  await fiona.getByRole("button", { name: "Importar" }).click();
  await fiona.getByRole("status").filter({ hasText: "1 confirmados" }).waitFor();
  await check(fiona, "finance-batch");
  // Finance reads the provider's earnings too (as finance, not as the provider).
  await fiona.goto(`${base}/console/provider/${providerId}/earnings`);
  await fiona.locator(".badge").filter({ hasText: "leyendo como finance" }).waitFor();
  await fiona.locator('[data-figure="all_time"]').waitFor();

  // ---- The provider sees the payout and its proof, down to the usage lines. -------------------
  // Ten days on, the session of before has expired (12 hours): the console asks to sign in.
  await page.reload();
  await page.waitForURL("**/console/sign-in");
  await signIn(page, ana);
  await page.goto(`${base}/console/provider/${providerId}/payouts`);
  // Confirmed by the bank: in the history, with the bank's reference and the transfer's id.
  await page.getByRole("table", { name: "Historial de pagos" }).getByText(`referencia bancaria BANKREF-${label}`).waitFor();
  const payoutLink = page.getByRole("table", { name: "Historial de pagos" }).getByRole("link").first();
  await payoutLink.waitFor();
  await payoutLink.click();
  await page.waitForURL("**/payouts/*");
  await page.locator('[data-balanced="true"]').waitFor();
  const lines = await page.getByRole("table", { name: "Las líneas de uso que liquidó" }).locator("tbody tr").count();
  assert.ok(lines > 0, "the proof lists the usage lines");
  assert.ok(await page.getByRole("cell", { name: rental.rental_id }).first().isVisible());
  await check(page, "payout-proof");

  // ---- The other tabs show what exists, and the marketplace. ----------------------------------
  // Pruebas de rendimiento: the agent's suite ran on both GPUs (simulated, healthy): scores,
  // verdicts, the figures against the reference, and a re-test asked for from the tab.
  await page.getByRole("link", { name: "Pruebas de rendimiento" }).click();
  await page.getByRole("table", { name: "Puntuación de rendimiento por GPU" }).waitFor();
  await page.getByRole("table", { name: /Últimas cifras de .* frente a la referencia/ }).first().waitFor();
  assert.equal(await page.getByRole("table", { name: /Últimas cifras de/ }).count(), 2, "both GPUs benchmarked");
  assert.ok(await page.locator(".badge").filter({ hasText: "Aprobada" }).first().isVisible());
  assert.ok(await page.getByRole("cell", { name: "Productos de matrices FP16" }).first().isVisible());
  // What the run saw under load and of the GPU's health, beside the verdict.
  assert.ok(await page.getByText(/resultados verificados; errores ECC no corregibles 0/).first().isVisible());
  assert.ok(await page.getByText(/^Gen\d x16 \(máximo Gen\d x16\)/).first().isVisible());
  await page.getByRole("button", { name: "Pedir una nueva prueba" }).first().click();
  await page.getByText("Nueva prueba pedida").first().waitFor();
  await check(page, "benchmarks");
  // An agent that cannot run the suite on a GPU says why (here as its own API call would), and
  // the tab shows the reason beside the latest run.
  const asAgent = { authorization: `Bearer ${agentToken}`, "content-type": "application/json" };
  const machine = await (await fetch(`${base}/v1/agent/machine`, { headers: asAgent })).json();
  // Not the GPU whose re-test is waiting: its next run would end the skip before the check.
  const views = await Promise.all(machine.gpus.map(async (g) =>
    [g, await (await fetch(`${base}/v1/gpus/${encodeURIComponent(g.gpu_uuid)}/benchmarks`)).json()]));
  const [quiet] = views.find(([, view]) => view.retest === null && view.latest);
  const skipReason = "MIG is enabled: the suite measures whole GPUs; disable MIG to benchmark this GPU";
  const skipped = await fetch(`${base}/v1/agent/events`, {
    method: "POST", headers: asAgent, body: JSON.stringify({ events: [{
      event_id: uuidv7(), occurred_at: new Date().toISOString(), kind: "benchmark_skipped",
      body: { machine_id: machine.machine_id, gpu_uuid: quiet.gpu_uuid, reason: skipReason },
    }] }),
  });
  assert.equal(skipped.status, 200, await skipped.text());
  await page.reload();
  await page.getByText(`${skipReason} (desde`).first().waitFor();
  await page.getByRole("link", { name: "Rendimiento", exact: true }).click();
  await page.getByRole("table", { name: "Tiempo en línea por máquina" }).waitFor();
  await check(page, "performance");
  await page.getByRole("navigation", { name: "main" }).getByRole("link", { name: "Marketplace" }).click();
  await page.waitForURL("**/console/market");
  await page.getByLabel("Modelo").selectOption("h100-80gb");
  await page.getByRole("button", { name: "Buscar" }).click();
  await page.waitForURL("**/console/market?model=h100-80gb");
  await page.getByRole("button", { name: /H100/ }).first().click();
  await page.getByRole("heading", { name: "Posición en la búsqueda" }).waitFor();
  await check(page, "marketplace");

  // ---- Refusals: another provider's pages, and a wrong role's. --------------------------------
  // Otto becomes a provider through the API (a reviewer's session acting as admin approves him).
  await api("POST", "/v1/accounts", { body: { email: "otto@example.com", password: PASSWORD } });
  const otto = await session("otto@example.com");
  const ottoApplication = await api("POST", "/v1/applications", { token: otto, body: {
    full_legal_name: "Otto Weber", email: "otto@example.com",
    gpus: [{ model: "L40S", quantity: 1, system_ram_gb: 128, upload_gbps: "1", download_gbps: "1",
      availability: { kind: "always_on" }, location: { city: "Berlin", country: "DE", region: "Berlin" } }],
    ups_protected: false, commitment_months: 6,
  } });
  const approved = await api("POST", `/v1/applications/${ottoApplication.application_id}/approve`,
    { token: await session("rita@gpunex.test"), actAs: "admin", body: { tier: "community" } });
  const { page: ottoPage } = await person();
  await signIn(ottoPage, "otto@example.com");
  await ottoPage.goto(`${base}/console/provider/${approved.provider_id}/machines`);
  await ottoPage.getByRole("heading", { name: "Panel de proveedor" }).waitFor();
  await ottoPage.goto(`${base}/console/provider/${providerId}/earnings`);
  await ottoPage.getByRole("alert").filter({ hasText: "Su rol no permite ver ni hacer esto." }).waitFor();
  await check(ottoPage, "refused-other-provider");
  await ottoPage.goto(`${base}/console/review`);
  await ottoPage.getByRole("alert").filter({ hasText: "Su cuenta no tiene el rol que necesita esta página." }).waitFor();
  await ottoPage.goto(`${base}/console/finance/batches/${monday}`);
  await ottoPage.getByRole("alert").first().waitFor();

  // ---- The reviewer, ten days on: the overdue application, rejected with a reason. ------------
  await signIn(rita, "rita@gpunex.test");
  await rita.goto(`${base}/console/review`);
  await rita.getByLabel("Solo atrasadas").check();
  await rita.getByRole("button", { name: "Filtrar" }).click();
  await rita.waitForURL("**/console/review?overdue=true");
  // The URL changes before the filtered list arrives, and Rex is in the unfiltered list too: wait
  // for Ana's row to go (a filter that kept it would time out here), then for Rex's.
  await rita.getByRole("cell", { name: /Ana García/ }).waitFor({ state: "detached" });
  await rita.getByRole("cell", { name: /Rex Ortega/ }).waitFor();
  assert.equal(await rita.getByRole("cell", { name: /Ana García/ }).count(), 0, "only the overdue one");
  await rita.locator(".badge").filter({ hasText: "Atrasada" }).first().waitFor();
  await check(rita, "review-overdue");
  await rita.goto(`${base}/console/review/${rexApplication.application_id}`);
  const reject = rita.locator("form").filter({ hasText: "Rechazar la solicitud" });
  await reject.getByLabel("Mensaje al solicitante").fill("Hace falta un compromiso de al menos un mes más y más ancho de banda.");
  await reject.getByRole("button", { name: "Rechazar la solicitud" }).click();
  await rita.getByRole("status").filter({ hasText: "Rechazada" }).waitFor();
  // Rex reads the reason on his application's page.
  const { page: rexPage } = await person();
  await signIn(rexPage, "rex@example.com");
  await rexPage.goto(`${base}/console/applications/${rexApplication.application_id}`);
  await rexPage.locator("blockquote").filter({ hasText: "al menos un mes más" }).waitFor();
  await rexPage.locator(".badge").filter({ hasText: "Rechazada" }).first().waitFor();

  // ---- An applicant withdraws an open application. --------------------------------------------
  await api("POST", "/v1/accounts", { body: { email: "wanda@example.com", password: PASSWORD } });
  const wandaApplication = await api("POST", "/v1/applications", { token: await session("wanda@example.com"), body: {
    full_legal_name: "Wanda Li", email: "wanda@example.com",
    gpus: [{ model: "l4", quantity: 4, system_ram_gb: 128, upload_gbps: "1", download_gbps: "1",
      availability: { kind: "always_on" }, location: { city: "Lisboa", country: "PT", region: "Lisboa" } }],
    ups_protected: true, commitment_months: 6,
  } });
  const { page: wandaPage } = await person();
  await signIn(wandaPage, "wanda@example.com");
  await wandaPage.goto(`${base}/console/applications/${wandaApplication.application_id}`);
  wandaPage.once("dialog", (dialog) => dialog.accept());
  await wandaPage.getByRole("button", { name: "Retirar la solicitud" }).click();
  await wandaPage.locator(".badge").filter({ hasText: "Retirada" }).first().waitFor();
  await wandaPage.getByRole("navigation", { name: "main" }).getByRole("link", { name: "Roles" }).click();
  await wandaPage.getByRole("link", { name: "Aplicar para proveer GPUs" }).waitFor();

  // ---- English: the switch, at once and after a reload. ---------------------------------------
  await page.goto(`${base}/console/provider/${providerId}/earnings`);
  await page.getByLabel("Idioma").selectOption("en");
  await page.getByRole("heading", { name: "Earnings", exact: true }).waitFor();
  await page.reload();
  await page.getByRole("heading", { name: "Earnings", exact: true }).waitFor();
  assert.equal(await page.locator("html").getAttribute("lang"), "en");
  await check(page, "earnings-en");
  await page.getByRole("link", { name: "Roles" }).first().click();
  await page.locator("#whoami").filter({ hasText: `Signed in as ${ana}` }).waitFor();

  // Sign out: back to sign in, and the session no longer answers.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL("**/console/sign-in");
  assert.equal(await page.evaluate(async () => (await fetch("/v1/me")).status), 401);

  // ---- A 30-day chart of 8 GPUs, drawn by the console's own chart code in this browser. -------
  const { page: bench } = await person();
  await bench.goto(base + "/console/market");
  await bench.waitForLoadState("networkidle");
  figures.chart_8_gpus_30_days_ms = await bench.evaluate(async () => {
    const { lineChart } = await import("/assets/lib/chart.js");
    const start = Date.UTC(2026, 10, 1);
    const series = Array.from({ length: 8 }, (_, g) => ({
      name: `GPU ${g}`,
      points: Array.from({ length: 30 }, (_, d) => [start + d * 86_400_000, 1_000_000 * ((g * 7 + d * 13) % 41)]),
    }));
    const times = [];
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      const figure = lineChart({ title: "bench", series, y: (v) => String(v), timeZone: "UTC" });
      document.querySelector("main").append(figure);
      figure.getBoundingClientRect();
      times.push(performance.now() - t0);
      figure.remove();
    }
    times.sort((a, b) => a - b);
    return Math.round(times[Math.floor(times.length / 2)] * 10) / 10;
  });
} catch (error) {
  // What each open page showed when the story failed.
  for (const [i, open] of pages.entries()) {
    await open.screenshot({ path: `${shots}/failed-${i}.png`, fullPage: true }).catch(() => {});
  }
  agent?.kill("SIGTERM");
  await browser.close();
  throw error;
}

agent.kill("SIGTERM");
await browser.close();
assert.deepEqual(failures, [], "errors in the page");

const assets = new URL("../assets/", import.meta.url);
const files = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) => e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]);
const scripts = files(assets.pathname).filter((f) => f.endsWith(".js"));
const gzipped = (list) => list.reduce((sum, f) => sum + gzipSync(readFileSync(f)).length, 0);
figures.js_bytes = scripts.reduce((sum, f) => sum + statSync(f).size, 0);
figures.js_gzip_bytes = gzipped(scripts);
figures.css_gzip_bytes = gzipped(files(assets.pathname).filter((f) => f.endsWith(".css")));
console.log(`${label}: ${shot} pages, ${shot * 2} screenshots in ${shots}; ${JSON.stringify(figures)}`);
assert.ok(figures.js_gzip_bytes <= 50 * 1024, "the console's JavaScript stays within 50 KB gzipped");
