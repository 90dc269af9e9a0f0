// Line charts as SVG, drawn from the API's figures: no canvas (a screen reader reads an SVG's
// name, and a data table beside it), no library. Each chart records how long it took to draw
// (`data-draw-ms`), which the browser suite reports.

import { h } from "./dom.js";
import { i18n, t } from "./i18n.js";

const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#0b5cad", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#be185d"];
const WIDTH = 720;
const MARGIN = { top: 12, right: 16, bottom: 28, left: 76 };

function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  for (const child of children.flat()) if (child) element.append(child);
  return element;
}

/** About `count` round values covering [min, max]. */
function ticks(min, max, count = 5) {
  if (min === max) { max = min + 1; }
  const raw = (max - min) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? raw;
  const first = Math.floor(min / step) * step;
  const values = [];
  for (let v = first; v <= max + step / 2 && values.length < 12; v += step) values.push(v);
  return values;
}

function timeTicks(from, until, timeZone) {
  const span = until - from;
  const hour = 3_600_000;
  const day = 24 * hour;
  const step = span <= 2 * day ? (span <= 8 * hour ? hour : 4 * hour) : day * Math.max(1, Math.ceil(span / day / 8));
  const format = new Intl.DateTimeFormat(i18n.lang, span <= 2 * day
    ? { hour: "2-digit", minute: "2-digit", timeZone }
    : { day: "numeric", month: "short", timeZone });
  const values = [];
  for (let v = Math.ceil(from / step) * step; v <= until; v += step) values.push([v, format.format(v)]);
  return values;
}

/**
 * A line chart. `series`: [{ name, points: [[x, y], ...] }] with x in epoch milliseconds;
 * `y` formats a value for the axis and the table; `table`: also a data table (off for long
 * series); `height` in pixels.
 */
export function lineChart({ title, series, y: formatY, timeZone, table: withTable = true, height = 220, yMin }) {
  const started = performance.now();
  const points = series.flatMap((s) => s.points);
  const figure = h("figure", { class: "chart" }, h("figcaption", {}, title));
  if (!points.length) {
    figure.append(h("p", { class: "empty" }, t("chart.no_data")));
    figure.dataset.drawMs = "0";
    return figure;
  }
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs) || Math.min(...xs) + 1];
  const yTicks = ticks(yMin ?? Math.min(0, ...ys), Math.max(...ys));
  const [y0, y1] = [yTicks[0], yTicks[yTicks.length - 1]];
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;
  const px = (x) => MARGIN.left + (x1 === x0 ? plotW / 2 : ((x - x0) / (x1 - x0)) * plotW);
  const py = (v) => MARGIN.top + plotH - ((v - y0) / (y1 - y0 || 1)) * plotH;
  const grid = yTicks.map((v) => svg("g", {},
    svg("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: py(v), y2: py(v), class: "grid" }),
    svg("text", { x: MARGIN.left - 6, y: py(v) + 4, "text-anchor": "end", class: "tick" }, formatY(v))));
  const xAxis = timeTicks(x0, x1, timeZone).map(([v, label]) => svg("g", {},
    svg("line", { x1: px(v), x2: px(v), y1: MARGIN.top + plotH, y2: MARGIN.top + plotH + 4, class: "axis" }),
    svg("text", { x: px(v), y: height - 8, "text-anchor": "middle", class: "tick" }, label)));
  const lines = series.map((s, i) => s.points.length === 1
    ? svg("circle", { cx: px(s.points[0][0]), cy: py(s.points[0][1]), r: 3, fill: COLORS[i % COLORS.length] })
    : svg("polyline", {
      points: s.points.map(([x, v]) => `${px(x).toFixed(1)},${py(v).toFixed(1)}`).join(" "),
      fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 2, "stroke-linejoin": "round",
    }));
  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${height}`, role: "img", "aria-label": title, preserveAspectRatio: "none" },
    grid, svg("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: MARGIN.top + plotH, y2: MARGIN.top + plotH, class: "axis" }),
    xAxis, lines);
  figure.append(chart);
  if (series.length > 1) {
    figure.append(h("ul", { class: "legend" }, series.map((s, i) =>
      h("li", {}, h("span", { class: `swatch c${i % COLORS.length}`, "aria-hidden": "true" }), s.name))));
  }
  if (withTable) figure.append(dataTable(title, series, formatY, timeZone));
  figure.dataset.drawMs = (performance.now() - started).toFixed(1);
  return figure;
}

function dataTable(title, series, formatY, timeZone) {
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  const format = new Intl.DateTimeFormat(i18n.lang, { dateStyle: "medium", timeZone });
  const values = series.map((s) => new Map(s.points));
  return h("details", {}, h("summary", {}, t("chart.show_data")),
    h("div", { class: "scroll", role: "region", "aria-label": title, tabindex: 0 }, h("table", {},
      h("caption", {}, title),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, t("chart.when")), series.map((s) => h("th", { scope: "col", class: "num" }, s.name)))),
      h("tbody", {}, xs.map((x) => h("tr", {}, h("th", { scope: "row" }, format.format(x)),
        values.map((v) => h("td", { class: "num" }, v.has(x) ? formatY(v.get(x)) : "—"))))))));
}
