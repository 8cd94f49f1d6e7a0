// The trace search: flows of one trace, a page at a time (GET /admin/v1/reasoning/flows, SigV4), and a
// field to open a flow by id. The trace id, page size and cursor live in the address, so a result reloads
// and can be shared; a search is a navigation to that address (pages are plain links, see app.js).

import { operatorFetch } from "/console/js/api.js";
import { age, h, problem, replace, stylesheet } from "/console/js/dom.js";

// The same patterns the API checks: a malformed value is refused here, before any call.
const TRACE_ID = /^[A-Za-z0-9_.:-]{1,128}$/;
const FLOW_ID = /^fl_[0-9A-Z]{26}$/;
const PAGE_SIZES = [10, 25, 50, 100];
const DEFAULT_LIMIT = 25;
const STATE_PILL = { completed: "ok", active: "warn", aborted: "bad" };

/** Why ``value`` is not a trace id, or null when it is one. */
export function traceIdProblem(value) {
  if (!value) return "Enter a trace id.";
  if (!TRACE_ID.test(value)) return "A trace id has only letters, digits and _ . : - (at most 128 characters).";
  return null;
}

/** Why ``value`` is not a flow id, or null when it is one. */
export function flowIdProblem(value) {
  if (!value) return "Enter a flow id.";
  if (!FLOW_ID.test(value)) return "A flow id is fl_ followed by 26 capital letters and digits, e.g. fl_01M8T2XQTMCDAQYP8DXR18F5T3.";
  return null;
}

function pageSize(raw) {
  const value = Number.parseInt(raw || "", 10);
  return Number.isInteger(value) && value >= 1 && value <= 100 ? value : DEFAULT_LIMIT;
}

function searchAddress(traceId, limit, cursor, page) {
  const query = new URLSearchParams({ trace_id: traceId });
  if (limit !== DEFAULT_LIMIT) query.set("limit", String(limit));
  if (cursor) {
    query.set("cursor", cursor);
    query.set("page", String(page));
  }
  return `/console/flows?${query}`;
}

/** A labelled text field with a hint and an error line the field points at (shown on a refused value). */
function field({ id, name, label, value, hint, placeholder }) {
  const error = h("p", { class: "field-error", id: `${id}-error`, hidden: true });
  const input = h("input", {
    id,
    name,
    type: "text",
    value: value || "",
    placeholder,
    autocomplete: "off",
    spellcheck: "false",
    "aria-describedby": `${id}-hint ${id}-error`,
  });
  const box = h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    input,
    h("span", { class: "hint", id: `${id}-hint` }, hint),
    error,
  );
  const show = (message) => {
    error.hidden = !message;
    error.textContent = message || "";
    if (message) input.setAttribute("aria-invalid", "true");
    else input.removeAttribute("aria-invalid");
  };
  return { box, input, show };
}

function traceForm(traceId, limit) {
  const trace = field({
    id: "trace-id",
    name: "trace_id",
    label: "Trace id",
    value: traceId,
    hint: "Letters, digits and _ . : - (up to 128)",
    placeholder: "trace-…",
  });
  const sizes = h(
    "select",
    { id: "page-size", name: "limit" },
    [...new Set([...PAGE_SIZES, limit])].sort((a, b) => a - b).map((size) => h("option", { value: String(size), selected: size === limit }, String(size))),
  );
  const form = h(
    "form",
    {
      class: "panel",
      role: "search",
      "aria-label": "Flows by trace",
      novalidate: true,
      onsubmit: (event) => {
        event.preventDefault();
        const value = trace.input.value.trim();
        const refusal = traceIdProblem(value);
        trace.show(refusal);
        if (refusal) {
          trace.input.focus();
          return;
        }
        window.location.assign(searchAddress(value, pageSize(sizes.value), null, 1));
      },
    },
    h("h2", {}, "Flows by trace"),
    h("div", { class: "row" }, trace.box, h("label", { for: "page-size" }, "Per page", sizes), h("button", { type: "submit" }, "Search")),
  );
  return { form, trace };
}

function openForm() {
  const flow = field({
    id: "flow-id",
    name: "flow_id",
    label: "Flow id",
    hint: "fl_ and 26 letters and digits",
    placeholder: "fl_…",
  });
  const form = h(
    "form",
    {
      class: "panel",
      "aria-label": "Open flow by id",
      novalidate: true,
      onsubmit: (event) => {
        event.preventDefault();
        // A pasted id may come in lower case; ULIDs are case-insensitive, the store's are upper case.
        const raw = flow.input.value.trim();
        const value = raw.startsWith("fl_") ? `fl_${raw.slice(3).toUpperCase()}` : raw;
        const refusal = flowIdProblem(value);
        flow.show(refusal);
        if (refusal) {
          flow.input.focus();
          return;
        }
        window.location.assign(`/console/flows/${value}`);
      },
    },
    h("h2", {}, "Open flow by id"),
    h("div", { class: "row" }, flow.box, h("button", { type: "submit" }, "Open flow")),
  );
  return form;
}

function outcomeText(flow) {
  if (!flow.outcome) return h("span", { class: "muted" }, "—");
  return [h("strong", {}, flow.outcome.type), `: ${flow.outcome.summary}`];
}

function flowRow(flow) {
  return h(
    "tr",
    { dataset: { flowId: flow.flow_id } },
    h("td", {}, h("a", { href: `/console/flows/${encodeURIComponent(flow.flow_id)}` }, h("code", {}, flow.flow_id))),
    h("td", {}, flow.trigger_type, h("br"), h("span", { class: "muted" }, flow.trigger_ref)),
    h("td", {}, h("span", { class: `pill ${STATE_PILL[flow.flow_state] || "warn"}` }, flow.flow_state)),
    h("td", {}, outcomeText(flow)),
    h("td", {}, h("time", { datetime: flow.created_at }, flow.created_at.replace("T", " ").replace(/\.\d+Z$/, "Z")), h("br"), h("span", { class: "muted" }, age(flow.created_at))),
    h("td", {}, String(flow.step_count)),
  );
}

async function results(traceId, limit, cursor, page) {
  const section = h("section", { class: "results", "aria-labelledby": "results-heading" });
  const heading = h("h2", { id: "results-heading" }, `Flows of trace ${traceId}`);
  let body;
  try {
    body = (await operatorFetch("/admin/v1/reasoning/flows", { query: { trace_id: traceId, limit, cursor } })).body;
  } catch (error) {
    return replace(section, heading, problem(error));
  }
  const { flows, next_cursor: next } = body;
  const pager = h(
    "nav",
    { class: "pager", "aria-label": "Result pages" },
    h("span", { class: "muted" }, `Page ${page}`),
    cursor ? h("a", { href: searchAddress(traceId, limit, null, 1) }, "First page") : null,
    next ? h("a", { href: searchAddress(traceId, limit, next, page + 1), rel: "next" }, "Next page") : null,
  );
  if (!flows.length) {
    // The store may hand a cursor for a page that turns out empty (the last page was exactly full).
    const none = cursor ? "No more flows in this trace." : "No flows in this trace.";
    return replace(section, heading, h("p", { class: "empty" }, none), pager);
  }
  const table = h(
    "table",
    {},
    h("thead", {}, h("tr", {}, ["Flow", "Trigger", "State", "Outcome", "Started", "Steps"].map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, flows.map(flowRow)),
  );
  return replace(
    section,
    heading,
    h("p", { class: "muted" }, `${flows.length} flow${flows.length === 1 ? "" : "s"} on this page, oldest first.`),
    h("div", { class: "table-wrap" }, table),
    pager,
  );
}

/** Render the trace search into ``main``; with ``?trace_id=`` it lists that trace's flows. */
export async function render(main, { query }) {
  stylesheet("/console/css/flow.css");
  const traceId = (query.get("trace_id") || "").trim();
  const limit = pageSize(query.get("limit"));
  const cursor = query.get("cursor") || null;
  const page = Math.max(1, Number.parseInt(query.get("page") || "1", 10) || 1);
  document.title = traceId ? `Flows of ${traceId} · Flowledger` : "Flows · Flowledger";
  const { form, trace } = traceForm(traceId, limit);
  const wrapper = h("div", { class: "flow-search" }, h("h1", {}, "Flows"), form, openForm());
  replace(main, wrapper);
  if (!traceId) return;
  const refusal = traceIdProblem(traceId);
  if (refusal) {
    trace.show(refusal);
    return;
  }
  wrapper.append(await results(traceId, limit, cursor, page));
}
