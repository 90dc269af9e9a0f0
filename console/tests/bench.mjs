// The console's own time in a real browser, on a large database (scripts: docs/performance.md,
// "Console"): signs in as a provider's applicant, opens the Ganancias tab with a 30-day range,
// and reports how long the page took until its figures showed and how long the chart took to
// draw (the chart records it), as JSON.
//
//   node bench.mjs BASE_URL EMAIL PASSWORD PROVIDER_ID [LOADS]
import { chromium } from "playwright-core";

const [base, email, password, provider, loads = "10"] = process.argv.slice(2);
if (!provider) throw new Error("usage: node bench.mjs BASE_URL EMAIL PASSWORD PROVIDER_ID [LOADS]");
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
const page = await (await browser.newContext({ locale: "es-ES", viewport: { width: 1100, height: 800 } })).newPage();
page.setDefaultTimeout(60_000);
await page.goto(`${base}/console/sign-in`);
await page.locator('input[name="/email"]').fill(email);
await page.locator('input[name="/password"]').fill(password);
await page.locator('form button[type="submit"]').click();
await page.waitForURL("**/console/roles");
const loadsMs = [];
const drawMs = [];
let series = 0;
let points = 0;
for (let i = 0; i < Number(loads); i++) {
  const started = Date.now();
  await page.goto(`${base}/console/provider/${provider}/earnings`);
  await page.locator("figure.chart svg").first().waitFor();
  loadsMs.push(Date.now() - started);
  drawMs.push(Number(await page.locator("figure.chart").first().getAttribute("data-draw-ms")));
  series = await page.locator("figure.chart svg polyline").count();
  points = await page.evaluate(() => [...document.querySelectorAll("figure.chart svg polyline")]
    .reduce((n, line) => n + line.getAttribute("points").split(" ").length, 0));
}
await browser.close();
const median = (list) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)];
console.log(JSON.stringify({
  loads: loadsMs.length, series, points,
  page_to_chart_ms_median: median(loadsMs), page_to_chart_ms_max: Math.max(...loadsMs),
  chart_draw_ms_median: median(drawMs), chart_draw_ms_max: Math.max(...drawMs),
}));
