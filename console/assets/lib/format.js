// Numbers, money and instants for people, in the reader's language. Money is exact: micro-USDC
// integers are formatted with BigInt arithmetic, never through a float.

import { i18n, t } from "./i18n.js";

const MICROS = 1_000_000n;

/** `12500000` micro-USDC as "12.50 USDC" ("12,50 USDC" in Spanish): every significant decimal
 *  kept (down to the micro-USDC), at least two. */
export function usdc(micros, { unit = true } = {}) {
  if (micros === null || micros === undefined) return "—";
  const value = BigInt(micros);
  const negative = value < 0n;
  const magnitude = negative ? -value : value;
  const whole = magnitude / MICROS;
  let fraction = (magnitude % MICROS).toString().padStart(6, "0");
  while (fraction.length > 2 && fraction.endsWith("0")) fraction = fraction.slice(0, -1);
  const wholeText = new Intl.NumberFormat(i18n.lang).format(whole);
  const decimal = new Intl.NumberFormat(i18n.lang).formatToParts(1.5).find((p) => p.type === "decimal")?.value ?? ".";
  const text = `${negative ? "−" : ""}${wholeText}${decimal}${fraction}`;
  return unit ? `${text} USDC` : text;
}

/** A decimal string from the API ("2.500000") as micro-USDC, for `usdc`. */
export function microsOf(decimal) {
  if (decimal === null || decimal === undefined) return null;
  const [whole, fraction = ""] = String(decimal).replace("-", "").split(".");
  const micros = BigInt(whole || "0") * MICROS + BigInt((fraction + "000000").slice(0, 6));
  return String(decimal).startsWith("-") ? -micros : micros;
}

export function integer(n) {
  return n === null || n === undefined ? "—" : new Intl.NumberFormat(i18n.lang).format(n);
}

/** Basis points as a percentage ("97.5 %"), exact to the basis point. */
export function percentBp(bp) {
  if (bp === null || bp === undefined) return "—";
  const whole = Math.trunc(bp / 100);
  const rest = bp % 100;
  const decimal = i18n.lang === "es" ? "," : ".";
  return rest === 0 ? `${whole} %` : `${whole}${decimal}${String(rest).padStart(2, "0").replace(/0$/, "")} %`;
}

/** An instant in `timeZone` (the provider's), with the zone's offset so DST shows. */
export function dateTime(iso, timeZone) {
  if (!iso) return "—";
  return new Intl.DateTimeFormat(i18n.lang, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
    timeZone: timeZone || undefined, timeZoneName: "shortOffset",
  }).format(new Date(iso));
}

export function dateOnly(text) {
  if (!text) return "—";
  const [y, m, d] = text.split("-").map(Number);
  return new Intl.DateTimeFormat(i18n.lang, { dateStyle: "medium", timeZone: "UTC" }).format(Date.UTC(y, m - 1, d));
}

/** Seconds as "3 h 20 min" (or "45 s"). */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return t("unit.seconds", { n: s });
  const hours = Math.floor(s / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  return hours ? t("unit.hours_minutes", { h: integer(hours), m: minutes }) : t("unit.minutes", { m: minutes });
}

/** GPU-seconds as GPU-hours with two decimals, exact (integer arithmetic). */
export function gpuHours(seconds) {
  const hundredths = Math.floor((seconds * 100) / 3600);
  if (seconds > 0 && hundredths === 0) return `< ${i18n.lang === "es" ? "0,01" : "0.01"}`;
  const decimal = i18n.lang === "es" ? "," : ".";
  return `${integer(Math.floor(hundredths / 100))}${decimal}${String(hundredths % 100).padStart(2, "0")}`;
}

/** Today's date (YYYY-MM-DD) in `timeZone`. */
export function today(timeZone) {
  return new Intl.DateTimeFormat("en-CA", { timeZone: timeZone || "UTC" }).format(new Date());
}

/** `date` (YYYY-MM-DD) moved by `days`. */
export function addDays(date, days) {
  const [y, m, d] = date.split("-").map(Number);
  return new Date(Date.UTC(y, m - 1, d + days)).toISOString().slice(0, 10);
}
