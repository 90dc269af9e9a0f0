// The string catalogs (console/i18n/<lang>.json): every word the console shows comes from one.

export const i18n = { lang: document.documentElement.lang === "en" ? "en" : "es", strings: {} };

export async function loadStrings(lang) {
  const response = await fetch(`/assets/i18n/${lang}.json`, { credentials: "same-origin" });
  i18n.strings = await response.json();
  i18n.lang = lang;
  document.documentElement.lang = lang;
}

/** The catalog's string for `key`, with `{name}` filled from `values`. */
export function t(key, values = {}) {
  const text = i18n.strings[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => String(values[name] ?? ""));
}

/** The catalog's string for a key built at run time (`prefix + value`), or the value itself. */
export function tOr(key, fallback, values = {}) {
  return key in i18n.strings ? t(key, values) : fallback;
}
