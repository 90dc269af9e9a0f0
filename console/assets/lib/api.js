// The console's one way to the server: the public /v1 API with the session cookie, the CSRF
// token on every change, and the role a request acts in (X-GPUnex-Act-As, ADR 0009).

export const session = { current: null, me: null };

export class Problem extends Error {
  constructor(status, body) {
    super(body?.detail ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.code ?? "network";
    this.errors = body?.errors ?? [];
    this.body = body;
  }
}

async function send(method, path, { body, actAs, raw, contentType } = {}) {
  const headers = { Accept: raw ? "*/*" : "application/json" };
  if (body !== undefined) headers["Content-Type"] = contentType ?? "application/json";
  if (method !== "GET" && session.current?.csrf_token) headers["X-CSRF-Token"] = session.current.csrf_token;
  if (actAs) headers["X-GPUnex-Act-As"] = actAs;
  try {
    return await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : (typeof body === "string" ? body : JSON.stringify(body)),
    });
  } catch {
    throw new Problem(0, { code: "network" });
  }
}

async function problemOf(response) {
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = { detail: text }; }
  return new Problem(response.status, body);
}

/** Calls the API; resolves with the JSON body (null for 204), rejects with a Problem. */
export async function api(method, path, body, options = {}) {
  const response = await send(method, path, { ...options, body });
  if (!response.ok) throw await problemOf(response);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path, options) => api("GET", path, undefined, options);

/** A query string from the defined values of `params`. */
export function query(params) {
  const pairs = Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "");
  return pairs.length ? "?" + new URLSearchParams(pairs).toString() : "";
}

/** Downloads what a GET answers (a CSV statement, a bank file) as a file named `name`. */
export async function download(path, name, options = {}) {
  const response = await send("GET", path, { ...options, raw: true });
  if (!response.ok) throw await problemOf(response);
  const url = URL.createObjectURL(await response.blob());
  const anchor = document.createElement("a");
  anchor.href = url;
  anchor.download = name;
  document.body.append(anchor);
  anchor.click();
  anchor.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** The role a page about provider `id` acts in: the provider itself when the person holds it,
 *  else a staff role that reads any provider (finance first: the least that suffices). */
export function actAsFor(providerId) {
  const roles = session.me?.roles ?? [];
  if (roles.includes(`provider:${providerId}`)) return `provider:${providerId}`;
  return ["finance", "admin"].find((role) => roles.includes(role)) ?? null;
}

/** The first of `wanted` staff roles the person holds. */
export function staffRole(...wanted) {
  const roles = session.me?.roles ?? [];
  return wanted.find((role) => roles.includes(role)) ?? null;
}

export function holds(role) {
  return (session.me?.roles ?? []).includes(role);
}

/** Reads the session and the person's roles again (null when signed out). */
export async function refreshSession() {
  try {
    session.current = await get("/v1/sessions/current");
    session.me = await get("/v1/me");
  } catch (problem) {
    if (!(problem instanceof Problem) || problem.status !== 401) throw problem;
    session.current = null;
    session.me = null;
  }
}
