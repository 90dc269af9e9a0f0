// The console in a real browser: Playwright (the library) driving Debian's Chromium against a
// running `gpunex serve`. Usage: node story.mjs BASE_URL SCREENSHOT_DIR [LABEL]
// (CHROMIUM: the browser's executable, default /usr/bin/chromium). Every page is
// screenshotted; every page is checked with axe-core (no serious or critical violation), at
// 375 px wide (no sideways scrolling), and the session is kept out of script's reach.
import { chromium } from "playwright-core";
import { readFileSync, mkdirSync, statSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const [base, shots, label = "console"] = process.argv.slice(2);
if (!base || !shots) throw new Error("usage: node story.mjs BASE_URL SCREENSHOT_DIR [LABEL]");
mkdirSync(shots, { recursive: true });
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const context = await browser.newContext({ locale: "es-ES", viewport: { width: 1100, height: 800 } });
const page = await context.newPage();
const failures = [];
page.on("pageerror", (error) => failures.push(`page error: ${error.message}`));
page.on("console", (message) => { if (message.type() === "error" && !/the server responded with a status of 4\d\d/.test(message.text())) failures.push(`console: ${message.text()}`); });

let shot = 0;
async function check(name) {
  await page.waitForLoadState("networkidle");
  shot += 1;
  await page.screenshot({ path: `${shots}/${String(shot).padStart(2, "0")}-${name}.png`, fullPage: true });
  await page.evaluate(axeSource);
  const result = await page.evaluate(async () => window.axe.run(document, { resultTypes: ["violations"] }));
  const serious = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(serious.map((v) => `${v.id}: ${v.help}`), [], `${name}: axe violations`);
  const width = page.viewportSize().width;
  await page.setViewportSize({ width: 375, height: 800 });
  const scroll = await page.evaluate(() => document.scrollingElement.scrollWidth);
  assert.ok(scroll <= 375, `${name}: ${scroll} px wide at 375`);
  shot += 1;
  await page.screenshot({ path: `${shots}/${String(shot).padStart(2, "0")}-${name}-375px.png`, fullPage: true });
  await page.setViewportSize({ width, height: 800 });
}

const email = "ana@example.com"; // each run starts from an empty database
const password = "correct horse battery staple";

// Anyone: the root sends a stranger to sign in, in Spanish (Accept-Language es).
await page.goto(base + "/");
await page.waitForURL("**/console/sign-in");
assert.equal(await page.locator("html").getAttribute("lang"), "es");
await page.getByRole("heading", { name: "Iniciar sesión" }).waitFor();
await check("sign-in");

// Sign up: the API's field error appears next to its field.
await page.getByRole("link", { name: "Crear cuenta" }).first().click();
await page.getByLabel("Correo electrónico").fill(email);
await page.getByLabel("Contraseña").fill("short");
await page.getByRole("button", { name: "Crear cuenta" }).click();
const passwordError = page.locator("#f-password-error");
await passwordError.waitFor({ state: "visible" });
assert.equal(await passwordError.textContent(), "La contraseña debe tener entre 12 y 128 caracteres.");
assert.equal(await page.getByLabel("Contraseña").getAttribute("aria-invalid"), "true");
await check("sign-up-field-error");
await page.getByLabel("Contraseña").fill(password);
await page.getByRole("button", { name: "Crear cuenta" }).click();
await page.waitForURL("**/console/sign-in");
await page.getByRole("status").waitFor();

// A wrong password is said without saying which part was wrong.
await page.getByLabel("Correo electrónico").fill(email);
await page.getByLabel("Contraseña").fill("wrong horse battery staple");
await page.getByRole("button", { name: "Entrar" }).click();
await page.getByRole("alert").filter({ hasText: "Correo o contraseña incorrectos." }).waitFor();

// Sign in with the keyboard only.
await page.reload();
await page.waitForLoadState("networkidle");
for (let i = 0; i < 12 && (await page.evaluate(() => document.activeElement?.id)) !== "f-email"; i++) {
  await page.keyboard.press("Tab");
}
assert.equal(await page.evaluate(() => document.activeElement?.id), "f-email", "the email field is reachable by Tab");
await page.keyboard.type(email);
await page.keyboard.press("Tab");
await page.keyboard.type(password);
await page.keyboard.press("Enter");
await page.waitForURL("**/console/roles");
await page.locator("#whoami").filter({ hasText: email }).waitFor();
await page.locator('li[data-role="renter"]').filter({ hasText: "Arrendatario" }).waitFor();
await check("roles");

// The session is out of script's reach: not in document.cookie, not in storage, not in the URL.
assert.ok(!(await page.evaluate(() => document.cookie)).includes("gpunex_session"));
assert.equal(await page.evaluate(() => localStorage.length + sessionStorage.length), 0);
assert.ok(!page.url().includes("gpnx_"));
const cookies = await context.cookies();
const session = cookies.find((c) => c.name === "gpunex_session");
assert.ok(session?.httpOnly && session.sameSite === "Strict", JSON.stringify(session));

// A change without the CSRF header, made by script on the page with the cookie, is refused.
const forged = await page.evaluate(async () => (await fetch("/v1/sessions/current/revoke", { method: "POST" })).status);
assert.equal(forged, 403);

// The switch: English at once, and still English after a reload.
await page.getByLabel("Idioma").selectOption("en");
await page.locator('li[data-role="renter"]').filter({ hasText: "Renter" }).waitFor();
await page.reload();
await page.getByRole("heading", { name: "Roles" }).waitFor();
assert.equal(await page.locator("html").getAttribute("lang"), "en");
await page.locator("#whoami").filter({ hasText: `Signed in as ${email}` }).waitFor();
await check("roles-en");

// Sign out: back to sign in, and the session no longer answers.
await page.getByRole("button", { name: "Sign out" }).click();
await page.waitForURL("**/console/sign-in");
assert.equal(await page.evaluate(async () => (await fetch("/v1/me")).status), 401);

await browser.close();
assert.deepEqual(failures, [], "errors in the page");

const size = (path) => gzipSync(readFileSync(new URL(path, import.meta.url))).length;
const js = size("../assets/console.js");
const css = size("../assets/console.css");
console.log(`${label}: ${shot} screenshots in ${shots}; console.js ${statSync(new URL("../assets/console.js", import.meta.url)).size} bytes (${js} gzipped), console.css ${css} gzipped`);
assert.ok(js <= 50 * 1024, "the console's JavaScript stays within 50 KB gzipped");
