// A step's inputs and outputs, readable and bounded: text as text, rows as a small table, anything else as
// indented JSON, each cut at a fixed size with a button that shows the rest. A sealed PII field arrives as
// {"__sealed__": true}; its "Show sealed value" button opens it through the audited admin read.

import { h, plural, replace } from "/console/js/dom.js";

export const SEALED_KEY = "__sealed__";
const TEXT_CHARS = 1200; // text or JSON shown before "Show all"
const ROWS_SHOWN = 20; // rows of a list of records shown as a table
const COLUMNS_SHOWN = 12;
const CELL_CHARS = 80;

/** Whether ``value`` is the page's placeholder for a sealed field. */
export function isSealed(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) && value[SEALED_KEY] === true;
}

function isRecord(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function inline(value) {
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}

function cut(text, chars) {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

/** ``text`` in a pre, the first TEXT_CHARS characters shown until "Show all" is pressed. */
function longText(text, className) {
  // tabindex: the box scrolls, so a keyboard must be able to reach it.
  const pre = h("pre", { class: className, tabindex: "0" }, text.length > TEXT_CHARS ? text.slice(0, TEXT_CHARS) : text);
  if (text.length <= TEXT_CHARS) return pre;
  const more = h("button", { type: "button", class: "secondary show-all" }, `Show all ${text.length.toLocaleString("en")} characters`);
  more.addEventListener("click", () => {
    pre.textContent = text;
    more.remove();
  });
  return h("div", { class: "long-value" }, pre, h("p", { class: "muted cut-note" }, `Cut at ${TEXT_CHARS.toLocaleString("en")} characters. `, more));
}

/** A list of records (query rows, documents) as a table of its first rows and columns. */
function recordsTable(rows) {
  const columns = [...new Set(rows.slice(0, ROWS_SHOWN).flatMap((row) => Object.keys(row)))];
  const shownColumns = columns.slice(0, COLUMNS_SHOWN);
  const shown = rows.slice(0, ROWS_SHOWN);
  const note = [
    rows.length > shown.length ? `first ${shown.length} of ${rows.length} rows` : plural(rows.length, "row"),
    columns.length > shownColumns.length ? `${shownColumns.length} of ${columns.length} columns` : null,
  ].filter(Boolean);
  return h(
    "div",
    { class: "table-wrap value-table", tabindex: "0", role: "region", "aria-label": `Table of ${plural(rows.length, "row")}` },
    h(
      "table",
      {},
      h("caption", { class: "muted" }, note.join(", ")),
      h("thead", {}, h("tr", {}, shownColumns.map((name) => h("th", { scope: "col" }, name)))),
      h(
        "tbody",
        {},
        shown.map((row) => h("tr", {}, shownColumns.map((name) => h("td", {}, name in row ? cut(inline(row[name]), CELL_CHARS) : "")))),
      ),
    ),
  );
}

/** One value, readable and bounded. */
export function valueView(value) {
  if (value === null || typeof value === "number" || typeof value === "boolean") return h("code", {}, String(value));
  if (typeof value === "string") return value.length <= 120 && !value.includes("\n") ? h("span", { class: "value-text" }, value) : longText(value, "value-text");
  if (Array.isArray(value) && value.length && value.every(isRecord)) return recordsTable(value);
  return longText(JSON.stringify(value, null, 2), "value-json");
}

/**
 * The fields of one side ("inputs" or "outputs") as a definition list; each sealed field gets a button
 * calling ``open(field)`` (a promise of the value) and shows the value once opened.
 */
export function fieldsView(fields, side, open) {
  const names = Object.keys(fields || {});
  if (!names.length) return h("p", { class: "muted" }, `No ${side} recorded.`);
  return h(
    "dl",
    { class: "fields", dataset: { side } },
    names.map((name) => {
      const value = fields[name];
      const dd = h("dd", {}, isSealed(value) ? sealedView(name, side, open) : valueView(value));
      return h("div", { class: "field", dataset: { field: name } }, h("dt", {}, name), dd);
    }),
  );
}

function sealedView(name, side, open) {
  const status = h("span", { class: "muted", role: "status" });
  const button = h("button", { type: "button", class: "secondary open-sealed", "aria-label": `Show sealed value of ${side} ${name}` }, "Show sealed value");
  const box = h("div", { class: "sealed" }, h("span", { class: "pill warn" }, "sealed PII"), " ", button, " ", status);
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = "Opening (recorded in the audit log)…";
    try {
      const value = await open(name);
      replace(box, h("span", { class: "pill warn" }, "opened, audited"), " ", valueView(value));
    } catch (error) {
      button.disabled = false;
      status.textContent = "";
      status.append(h("span", { class: "problem" }, error?.status ? `${error.message} (HTTP ${error.status})` : String(error?.message || error)));
    }
  });
  return box;
}
