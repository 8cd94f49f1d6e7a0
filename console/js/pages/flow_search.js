// The console's landing page: every flow, newest first, a page at a time (GET /admin/v1/reasoning/flows,
// SigV4), narrowed by state, trigger type, outcome, agent, patient and a time window; the search by trace;
// and a field to open a flow by id. Filters, page size and cursor live in the address, so a list reloads
// and can be shared; applying a filter or paging is a navigation to that address (see app.js).

import { operatorFetch } from "/console/js/api.js";
import { age, h, plural, problem, replace, stylesheet } from "/console/js/dom.js";

// The same patterns the API checks: a malformed value is refused here, before any call.
const TRACE_ID = /^[A-Za-z0-9_.:-]{1,128}$/;
const FLOW_ID = /^fl_[0-9A-Z]{26}$/;
const PAGE_SIZES = [10, 25, 50, 100];
const DEFAULT_LIMIT = 25;
const STATE_PILL = { completed: "ok", active: "warn", aborted: "bad" };
const NAME = /^[a-z][a-z0-9_.-]{0,63}$/;
const STATES = ["active", "completed", "aborted"];
const OUTCOMES = ["claim_created", "recommendation_delivered", "no_action", "insufficient_evidence", "error", "timeout"];
const DAY = /^\d{4}-\d{2}-\d{2}$/;
// The list's filters: the query parameter, its label, and why a value is refused (null when it is fine).
const FILTERS = [
  { name: "state", label: "State", choices: STATES },
  { name: "trigger_type", label: "Trigger type", check: (v) => (NAME.test(v) ? null : "Lower-case letters, digits and _ . - (a letter first).") },
  { name: "outcome", label: "Outcome", choices: OUTCOMES },
  { name: "agent", label: "Agent", check: (v) => (NAME.test(v) ? null : "Lower-case letters, digits and _ . - (a letter first).") },
  { name: "patient_id", label: "Patient id", check: (v) => (TRACE_ID.test(v) ? null : "Letters, digits and _ . : - (at most 128).") },
  { name: "from", label: "Started from", type: "date", check: (v) => (DAY.test(v) ? null : "A date.") },
  { name: "to", label: "Started until", type: "date", check: (v) => (DAY.test(v) ? null : "A date.") },
];

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
    h("p", { class: "muted" }, `${plural(flows.length, "flow")} on this page, oldest first.`),
    h("div", { class: "table-wrap" }, table),
    pager,
  );
}

// ---- the flows list -------------------------------------------------------------------------------------

/** The filters an address asks for, each checked as the API will ({values, refused: {name: why}}). */
export function readFilters(query) {
  const values = {};
  const refused = {};
  for (const filter of FILTERS) {
    const value = (query.get(filter.name) || "").trim();
    if (!value) continue;
    const why = filter.choices ? (filter.choices.includes(value) ? null : "Pick one of the choices.") : filter.check(value);
    if (why) refused[filter.name] = why;
    else values[filter.name] = value;
  }
  if (values.from && values.to && values.from > values.to) refused.to = "The end is before the start.";
  return { values, refused };
}

function listAddress(values, limit, cursor, page) {
  const query = new URLSearchParams(values);
  if (limit !== DEFAULT_LIMIT) query.set("limit", String(limit));
  if (cursor) {
    query.set("cursor", cursor);
    query.set("page", String(page));
  }
  const text = query.toString();
  return text ? `/console/flows?${text}` : "/console/flows";
}

function filterControl(filter, value, why) {
  const id = `filter-${filter.name.replace("_", "-")}`;
  const attrs = { id, name: filter.name, "aria-describedby": `${id}-error` };
  if (why) attrs["aria-invalid"] = "true";
  const control = filter.choices
    ? h("select", attrs, h("option", { value: "" }, "Any"), filter.choices.map((c) => h("option", { value: c, selected: c === value }, c.replaceAll("_", " "))))
    : h("input", { ...attrs, type: filter.type || "text", value: value || "", autocomplete: "off", spellcheck: "false" });
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, filter.label),
    control,
    h("p", { class: "field-error", id: `${id}-error`, hidden: !why }, why || ""),
  );
}

function listForm(values, refused, limit) {
  const sizes = h(
    "select",
    { id: "list-size", name: "limit" },
    [...new Set([...PAGE_SIZES, limit])].sort((a, b) => a - b).map((size) => h("option", { value: String(size), selected: size === limit }, String(size))),
  );
  const form = h(
    "form",
    {
      class: "panel flow-filters",
      role: "search",
      "aria-label": "Filter the flows",
      novalidate: true,
      onsubmit: (event) => {
        event.preventDefault();
        const data = new URLSearchParams();
        for (const filter of FILTERS) data.set(filter.name, form.elements[filter.name].value.trim());
        const { values: wanted, refused: wrong } = readFilters(data);
        const first = Object.keys(wrong)[0];
        if (first) {
          // Re-render the page's own way of showing refusals: the address with the refused values.
          for (const filter of FILTERS) {
            const box = form.elements[filter.name].closest(".field").querySelector(".field-error");
            box.hidden = !wrong[filter.name];
            box.textContent = wrong[filter.name] || "";
            if (wrong[filter.name]) form.elements[filter.name].setAttribute("aria-invalid", "true");
            else form.elements[filter.name].removeAttribute("aria-invalid");
          }
          form.elements[first].focus();
          return;
        }
        window.location.assign(listAddress(wanted, pageSize(sizes.value), null, 1));
      },
    },
    h("h2", {}, "Filter the flows"),
    h("div", { class: "row" }, FILTERS.map((f) => filterControl(f, values[f.name] || "", refused[f.name]))),
    h(
      "div",
      { class: "row" },
      h("label", { for: "list-size" }, "Per page", sizes),
      h("button", { type: "submit" }, "Apply filters"),
      Object.keys(values).length ? h("a", { href: "/console/flows" }, "Clear filters") : null,
    ),
  );
  return form;
}

/** How long a flow ran ("850 ms", "12 s", "4 min", "2 h 5 min"), or that it still runs. */
export function duration(flow) {
  if (!flow.closed_at) return "running";
  const ms = Math.max(0, Date.parse(flow.closed_at) - Date.parse(flow.created_at));
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${Math.round(ms / 100) / 10} s`;
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)} min`;
  const hours = Math.floor(ms / 3_600_000);
  return `${hours} h ${Math.round((ms % 3_600_000) / 60_000)} min`;
}

function startedCell(flow) {
  return h("td", {}, h("time", { datetime: flow.created_at }, flow.created_at.replace("T", " ").replace(/\.\d+Z$/, "Z")), h("br"), h("span", { class: "muted" }, age(flow.created_at)));
}

/** Where a flow came from, in a word: chat, OTLP and the traces' service, an agent in process, or an SDK. */
export function sourceOf(flow) {
  if (flow.source === "otlp") return flow.source_service ? `OTLP · ${flow.source_service}` : "OTLP";
  if (flow.trigger_type === "chat_turn") return "Chat";
  if (flow.source === "agent") return "Agent";
  if (flow.source === "api") return "SDK";
  return ""; // a flow from before the source was kept
}

/** The agents and the first step: what tells apart flows whose triggers read alike (every chat turn's does). */
function stepsCell(flow) {
  const first = flow.first_step;
  return h(
    "td",
    { class: "flow-first-step" },
    (flow.agents || []).length ? h("span", {}, flow.agents.join(", ")) : h("span", { class: "muted" }, "no steps yet"),
    first ? h("br") : null,
    first ? h("span", { class: "muted" }, `${first.step_kind.replaceAll("_", " ")}: ${first.summary_text}`) : null,
  );
}

function listRow(flow) {
  const source = sourceOf(flow);
  return h(
    "tr",
    { dataset: { flowId: flow.flow_id } },
    h(
      "td",
      {},
      h("a", { href: `/console/flows/${encodeURIComponent(flow.flow_id)}` }, flow.trigger_summary),
      h("br"),
      source ? h("span", { class: "pill source" }, source) : null,
      source ? " " : null,
      h("span", { class: "muted" }, flow.trigger_type),
    ),
    stepsCell(flow),
    h("td", {}, h("span", { class: `pill ${STATE_PILL[flow.flow_state] || "warn"}` }, flow.flow_state)),
    h("td", {}, outcomeText(flow)),
    h("td", { class: "num" }, String(flow.step_count)),
    startedCell(flow),
    h("td", {}, duration(flow)),
  );
}

async function listResults(values, limit, cursor, page) {
  const section = h("section", { class: "results", "aria-labelledby": "list-heading" });
  const filtered = Object.keys(values).length > 0;
  const heading = h("h2", { id: "list-heading" }, filtered ? "Flows that match" : "All flows");
  let body;
  try {
    body = (await operatorFetch("/admin/v1/reasoning/flows", { query: { ...values, limit, cursor } })).body;
  } catch (error) {
    return replace(section, heading, problem(error));
  }
  const { flows, next_cursor: next } = body;
  const pager = h(
    "nav",
    { class: "pager", "aria-label": "Flow pages" },
    h("span", { class: "muted" }, `Page ${page}`),
    cursor ? h("a", { href: listAddress(values, limit, null, 1) }, "Newest") : null,
    next ? h("a", { href: listAddress(values, limit, next, page + 1), rel: "next" }, "Older") : null,
  );
  if (!flows.length) {
    // A filtered page can come back empty and still go on: the index read a page of flows, none matched.
    let none = filtered ? "No flow matches these filters." : "No flows yet.";
    if (next) none = "No flow on this page matches; older flows may.";
    else if (cursor) none = "No older flows.";
    return replace(section, heading, h("p", { class: "empty" }, none), pager);
  }
  const table = h(
    "table",
    { class: "flow-list" },
    h("caption", { class: "visually-hidden" }, "Flows, newest first"),
    h("thead", {}, h("tr", {}, ["Trigger", "Agents and first step", "State", "Outcome", "Steps", "Started", "Duration"].map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, flows.map(listRow)),
  );
  const count = `${plural(flows.length, "flow")} on this page, newest first.`;
  const short = next && flows.length < limit ? " Fewer than a page matched here; there may be more in older flows." : "";
  return replace(section, heading, h("p", { class: "muted" }, count + short), h("div", { class: "table-wrap" }, table), pager);
}

/** Render the landing page into ``main``: the flows list, or with ``?trace_id=`` that trace's flows. */
export async function render(main, { query }) {
  stylesheet("/console/css/flow.css");
  const traceId = (query.get("trace_id") || "").trim();
  const limit = pageSize(query.get("limit"));
  const cursor = query.get("cursor") || null;
  const page = Math.max(1, Number.parseInt(query.get("page") || "1", 10) || 1);
  document.title = traceId ? `Flows of ${traceId} · Flowledger` : "Flows · Flowledger";
  const { form, trace } = traceForm(traceId, limit);
  const { values, refused } = readFilters(query);
  const wrapper = h("div", { class: "flow-search" }, h("h1", {}, "Flows"));
  replace(main, wrapper);
  if (traceId) {
    wrapper.append(form, openForm(), h("p", {}, h("a", { href: "/console/flows" }, "Back to all flows")));
    const refusal = traceIdProblem(traceId);
    if (refusal) {
      trace.show(refusal);
      return;
    }
    wrapper.append(await results(traceId, limit, cursor, page));
    return;
  }
  const searches = h("div", { class: "flow-searches" }, form, openForm());
  wrapper.append(listForm(values, refused, limit));
  if (Object.keys(refused).length) {
    wrapper.append(h("p", { class: "problem", role: "alert" }, "Some filters are not valid; fix them above."), searches);
    return;
  }
  wrapper.append(await listResults(values, limit, cursor, page), searches);
}
