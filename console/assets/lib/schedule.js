// The weekly availability editor (the application's GPU entries and the Precios tab): always
// on, or windows of local time on weekdays in an IANA time zone. Its value is the API's
// `Availability`; its controls carry the pointers of the API's field errors.

import { h } from "./dom.js";
import { t } from "./i18n.js";

export const WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

const pad = (n) => String(n).padStart(2, "0");
const clock = (minute) => `${pad(Math.floor((minute % 1440) / 60))}:${pad(minute % 60)}`;

function minutes(text, end) {
  const [hours, mins] = (text || "").split(":").map(Number);
  if (!Number.isInteger(hours) || !Number.isInteger(mins)) return null;
  const value = hours * 60 + mins;
  return end && value === 0 ? 1440 : value;
}

let editors = 0;

/** An editor for `availability` whose errors are under `pointer`; `.value()` reads it. */
export function scheduleEditor(pointer, availability = { kind: "always_on" }, defaultZone) {
  editors += 1;
  const name = `schedule-${editors}`;
  const weekly = availability.kind === "weekly";
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  const zoneId = `${name}-zone`;
  const zone = h("input", {
    id: zoneId, type: "text", list: `${name}-zones`, value: weekly ? availability.time_zone : (defaultZone ?? Intl.DateTimeFormat().resolvedOptions().timeZone),
    "data-pointer": `${pointer}/time_zone`, autocomplete: "off", "aria-describedby": `${zoneId}-error`,
  });
  const rows = h("div", { class: "windows" });
  const addRow = (window = { day: "monday", start_minute: 480, end_minute: 1200 }) => {
    const index = rows.children.length;
    const id = `${name}-w${editors}-${index}-${Math.random().toString(36).slice(2, 6)}`;
    const row = h("fieldset", { class: "window" },
      h("legend", { class: "visually-hidden" }, t("schedule.window")),
      h("label", { for: `${id}-day` }, t("schedule.day")),
      h("select", { id: `${id}-day`, class: "day" }, WEEKDAYS.map((d) => h("option", { value: d, selected: d === window.day }, t(`weekday.${d}`)))),
      h("label", { for: `${id}-from` }, t("schedule.from")),
      h("input", { id: `${id}-from`, type: "time", class: "from", value: clock(window.start_minute) }),
      h("label", { for: `${id}-to` }, t("schedule.to")),
      h("input", { id: `${id}-to`, type: "time", class: "to", value: clock(window.end_minute) }),
      h("button", { type: "button", class: "secondary", onclick: () => { row.remove(); renumber(); } }, t("schedule.remove")));
    rows.append(row);
    renumber();
  };
  const renumber = () => [...rows.children].forEach((row, i) => row.setAttribute("data-pointer", `${pointer}/windows/${i}`));
  if (weekly) availability.windows.forEach(addRow);
  // The windows' errors go to the first error slot of their group, before the rows.
  const windowsGroup = h("div", { class: "group", "data-pointer": `${pointer}/windows` },
    h("p", { class: "field-error", hidden: true }), rows);
  const weeklyPart = h("div", { hidden: !weekly },
    h("div", { class: "field" }, h("label", { for: zoneId }, t("schedule.time_zone")), zone,
      h("datalist", { id: `${name}-zones` }, zones.map((z) => h("option", { value: z }))),
      h("p", { class: "field-error", id: `${zoneId}-error`, hidden: true })),
    h("p", { class: "hint" }, t("schedule.midnight_hint")),
    windowsGroup,
    h("button", { type: "button", class: "secondary", onclick: () => addRow() }, t("schedule.add_window")));
  const choice = (value, label) => h("label", { class: "inline" },
    h("input", { type: "radio", name, value, checked: (value === "weekly") === weekly, onchange: () => { weeklyPart.hidden = value !== "weekly"; } }), " ", label);
  const editor = h("fieldset", { class: "schedule group", "data-pointer": pointer },
    h("legend", {}, t("schedule.legend")),
    choice("always_on", t("schedule.always_on")), choice("weekly", t("schedule.weekly")),
    h("p", { class: "field-error", hidden: true }),
    weeklyPart);
  editor.value = () => {
    const kind = editor.querySelector(`input[name="${name}"]:checked`)?.value ?? "always_on";
    if (kind === "always_on") return { kind };
    return {
      kind,
      time_zone: zone.value.trim(),
      windows: [...rows.children].map((row) => ({
        day: row.querySelector(".day").value,
        start_minute: minutes(row.querySelector(".from").value, false),
        end_minute: minutes(row.querySelector(".to").value, true),
      })),
    };
  };
  return editor;
}

/** A schedule in words: "Monday 08:00–20:00 · ..." in its zone. */
export function describeSchedule(availability) {
  if (!availability || availability.kind === "always_on") return t("schedule.always_on");
  const windows = availability.windows.map((w) => `${t(`weekday.${w.day}`)} ${clock(w.start_minute)}–${w.end_minute === 1440 ? "24:00" : clock(w.end_minute)}`);
  return `${windows.join(" · ")} (${availability.time_zone})`;
}
