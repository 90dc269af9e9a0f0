// Building pages with DOM calls only (never innerHTML): text from the API is never parsed as
// markup. Forms name their controls by the JSON Pointer of their field, so a problem document's
// field errors land next to their fields.

import { Problem } from "./api.js";
import { i18n, t } from "./i18n.js";

/** Set by the console: moves to a path of the console (History API); `notice` is shown on the
 *  next page. */
export const router = { go: (path) => { location.href = path; }, notice: null };

/** An element: `h("p", { class: "x" }, "text", child)`. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "value") element.value = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

/** Replaces an element's children (lists flattened, empty ones left out). */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function link(href, text, attributes = {}) {
  return h("a", { href, ...attributes, onclick: (event) => {
    if (event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    router.go(href);
  } }, text);
}

/** A section with a heading (h2), for the parts of a page. */
export function part(title, ...children) {
  const id = `part-${Math.random().toString(36).slice(2, 9)}`;
  return h("section", { "aria-labelledby": id }, h("h2", { id }, title), ...children);
}

/** A table: `columns` are `[label, row => cell, { numeric }]`; an empty list says `empty`. */
export function table(caption, columns, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty ?? t("common.none"));
  return h("div", { class: "scroll", role: "region", "aria-label": caption, tabindex: 0 },
    h("table", {},
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, columns.map(([label, , options]) =>
        h("th", { scope: "col", class: options?.numeric ? "num" : null }, label)))),
      h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell, options]) =>
        h("td", { class: options?.numeric ? "num" : null }, cell(row))))))));
}

/** A description list of `[term, value]` pairs (values null are left out). */
export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(([, v]) => v !== null && v !== undefined)
    .map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

export function badge(text, kind = "neutral") {
  return h("span", { class: `badge ${kind}` }, text);
}

/** What a problem says, in the reader's language where the catalog knows its code. */
export function problemText(problem) {
  const key = `error.${problem.code}`;
  if (key in i18n.strings) return t(key, { seconds: problem.body?.retry_after_seconds ?? "" });
  return problem.body?.detail ? `${problem.body.detail} (${problem.code})` : t("error.generic", { code: problem.code });
}

export function alertBox(problem) {
  return h("p", { class: "alert", role: "alert" }, problemText(problem));
}

let controlIds = 0;

/** A labelled control. `field`: { pointer, label, type ("text", "number", "select",
 *  "checkbox", "textarea", "email", ...), options ([value, label]), value, hint, required,
 *  attributes }. Its error slot is filled by `showErrors`. */
export function control(field) {
  controlIds += 1;
  const id = `c${controlIds}${(field.pointer ?? "").replaceAll("/", "-")}`;
  const described = [];
  const hint = field.hint ? h("p", { class: "hint", id: `${id}-hint` }, field.hint) : null;
  if (hint) described.push(`${id}-hint`);
  described.push(`${id}-error`);
  const common = {
    id, name: field.name ?? field.pointer, "data-pointer": field.pointer, required: field.required ?? false,
    "aria-describedby": described.join(" "), ...field.attributes,
  };
  let input;
  if (field.type === "select") {
    input = h("select", common, field.options.map(([value, label]) =>
      h("option", { value, selected: String(value) === String(field.value ?? "") }, label)));
  } else if (field.type === "textarea") {
    input = h("textarea", { ...common, rows: field.rows ?? 3 });
    input.value = field.value ?? "";
  } else if (field.type === "checkbox") {
    input = h("input", { ...common, type: "checkbox", checked: Boolean(field.value) });
  } else {
    input = h("input", { ...common, type: field.type ?? "text", value: field.value ?? "" });
  }
  const error = h("p", { class: "field-error", id: `${id}-error`, hidden: true });
  const label = h("label", { for: id }, field.label, field.required === false && field.optional ? ` ${t("common.optional")}` : "");
  const node = field.type === "checkbox"
    ? h("div", { class: "field check" }, input, label, hint, error)
    : h("div", { class: "field" }, label, input, hint, error);
  node.input = input;
  return node;
}

/** Places a problem's field errors next to the controls with their pointers under `root`
 *  (or, for a pointer inside a group, the group's nearest control); answers whether any was
 *  placed. */
export function showErrors(root, problem) {
  clearErrors(root);
  let placed = false;
  for (const fieldError of problem.errors ?? []) {
    const target = nearest(root, fieldError.field ?? "");
    if (!target) continue;
    const slot = target.closest(".field, .group")?.querySelector(".field-error");
    if (!slot) continue;
    const key = `error.${fieldError.code}`;
    slot.textContent = key in i18n.strings ? t(key) : fieldError.message;
    slot.hidden = false;
    if (target.matches("input, select, textarea")) target.setAttribute("aria-invalid", "true");
    placed = true;
  }
  return placed;
}

function nearest(root, pointer) {
  for (let p = pointer; p; p = p.slice(0, p.lastIndexOf("/"))) {
    const found = [...root.querySelectorAll("[data-pointer]")].find((e) => e.dataset.pointer === p);
    if (found) return found;
  }
  return null;
}

export function clearErrors(root) {
  for (const slot of root.querySelectorAll(".field-error")) { slot.hidden = true; slot.textContent = ""; }
  for (const input of root.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
}

/** A form that calls `onsubmit(form)` and shows a refusal: field errors at their fields, the
 *  rest above the button. `body` is a list of nodes (controls, groups). */
export function form({ title, body, submit, onsubmit, footer, headingLevel = "h2", className }) {
  const alert = h("p", { class: "alert", role: "alert", hidden: true });
  const button = h("button", { type: "submit" }, submit);
  const element = h("form", { novalidate: true, class: className },
    title ? h(headingLevel, {}, title) : null, body, alert, h("div", { class: "actions" }, button), footer);
  element.addEventListener("submit", async (event) => {
    event.preventDefault();
    alert.hidden = true;
    clearErrors(element);
    button.disabled = true;
    try {
      await onsubmit(element);
    } catch (problem) {
      if (!(problem instanceof Problem)) throw problem;
      if (!showErrors(element, problem)) {
        alert.textContent = problemText(problem);
        alert.hidden = false;
      }
    } finally {
      button.disabled = false;
    }
  });
  return element;
}

/** A button that runs `action`, disabled while it runs, its refusal shown beside it. */
export function action(label, run, { kind = "secondary", confirm: question } = {}) {
  const status = h("span", { class: "alert", role: "alert", hidden: true });
  const button = h("button", { type: "button", class: kind }, label);
  button.addEventListener("click", async () => {
    if (question && !window.confirm(question)) return;
    status.hidden = true;
    button.disabled = true;
    try {
      await run();
    } catch (problem) {
      if (!(problem instanceof Problem)) throw problem;
      status.textContent = problemText(problem);
      status.hidden = false;
    } finally {
      button.disabled = false;
    }
  });
  return h("span", { class: "action" }, button, status);
}

/** A secret shown once (a token), with a button that copies it. */
export function secret(label, value) {
  const field = h("input", { type: "text", readonly: true, value, "aria-label": label, class: "secret" });
  const copied = h("span", { role: "status", class: "hint" });
  return h("div", { class: "secret-box" },
    h("p", {}, h("strong", {}, label)), field,
    h("button", { type: "button", class: "secondary", onclick: async () => {
      field.select();
      try { await navigator.clipboard.writeText(value); copied.textContent = t("common.copied"); } catch { copied.textContent = t("common.copy_by_hand"); }
    } }, t("common.copy")), copied,
    h("p", { class: "hint" }, t("common.shown_once")));
}

/** A block of commands, as a provider copies them into a terminal. */
export function commands(lines) {
  return h("pre", { class: "commands", tabindex: 0 }, h("code", {}, lines.join("\n")));
}
