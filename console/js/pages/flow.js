// The flow page: a flow's metadata, its step DAG (SVG, laid out by dagre), the selected step's details,
// and the steps as a table (the graph's text alternative). One signed call: GET /admin/v1/reasoning/flows/{id}.

import { operatorFetch } from "/console/js/api.js";
import { renderDag } from "/console/js/dag.js";
import { age, h, problem, replace, stylesheet } from "/console/js/dom.js";

const FLOW_ID = /^fl_[0-9A-Z]{26}$/;
const OPEN_TABLE_UP_TO = 30; // a longer table starts folded: the graph is the first view
const BACK_REFS = [
  ["llm_call_log_ref", "LLM call log"],
  ["experiment_trace_ref", "Experiment trace"],
  ["decision_graph_node_ref", "Decision graph node"],
  ["memory_claim_ref", "Memory claim"],
];
const STATE_PILL = { completed: "ok", active: "warn", aborted: "bad" };

function backToSearch() {
  return h("p", {}, h("a", { href: "/console/flows" }, "Search flows by trace"));
}

function when(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  return [h("time", { datetime: iso }, iso.replace("T", " ").replace(/\.\d+Z$/, "Z")), ` (${age(iso)})`];
}

/** "850 ms", "4.2 s", "3 min 5 s", "2 h 10 min". */
export function duration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

function flowDuration(flow) {
  if (!flow.closed_at) return h("span", { class: "muted" }, "still active");
  return duration(Date.parse(flow.closed_at) - Date.parse(flow.created_at));
}

function confidence(value) {
  return value === null || value === undefined ? "—" : value.toFixed(2);
}

function latency(ms) {
  return ms === null || ms === undefined ? "—" : `${ms} ms`;
}

function item(name, value, key) {
  return h("div", { dataset: { field: key } }, h("dt", {}, name), h("dd", {}, value));
}

function outcome(flow) {
  if (!flow.outcome) return h("span", { class: "muted" }, flow.flow_state === "active" ? "none yet" : "—");
  const { type, summary } = flow.outcome;
  const conf = flow.outcome.confidence;
  return [h("strong", {}, type), `: ${summary}`, conf === null || conf === undefined ? "" : ` (confidence ${confidence(conf)})`];
}

function metadata(flow) {
  const trace = flow.trace_id
    ? h("a", { href: `/console/flows?trace_id=${encodeURIComponent(flow.trace_id)}` }, flow.trace_id)
    : h("span", { class: "muted" }, "none");
  return h(
    "dl",
    { class: "grid", "aria-label": "Flow details" },
    item("Trigger type", flow.trigger_type, "trigger_type"),
    item("Trigger ref", flow.trigger_ref, "trigger_ref"),
    item("Trace", trace, "trace_id"),
    item("Patient", flow.patient_id || h("span", { class: "muted" }, "none"), "patient_id"),
    item("State", h("span", { class: `pill ${STATE_PILL[flow.flow_state] || "warn"}` }, flow.flow_state), "flow_state"),
    item("Outcome", outcome(flow), "outcome"),
    flow.abort_reason ? item("Abort reason", flow.abort_reason, "abort_reason") : null,
    item("Started", when(flow.created_at), "created_at"),
    item("Closed", when(flow.closed_at), "closed_at"),
    item("Duration", flowDuration(flow), "duration"),
    item("Steps", String(flow.step_count), "step_count"),
    item("Recorded by", flow.created_by, "created_by"),
  );
}

function stepName(step, numberOf) {
  return `#${numberOf.get(step.step_id)} ${step.step_kind}`;
}

/** Buttons that select each of ``ids`` in the graph (parents, children). */
function stepLinks(ids, byId, numberOf, select) {
  const known = ids.filter((id) => byId.has(id));
  if (!known.length) return h("span", { class: "muted" }, "none");
  return h(
    "ul",
    { class: "step-links" },
    known.map((id) =>
      h("li", {}, h("button", { type: "button", class: "secondary", onclick: () => select(id, { focus: true }) }, stepName(byId.get(id), numberOf))),
    ),
  );
}

function backRefs(step) {
  const refs = BACK_REFS.filter(([key]) => step.back_refs?.[key]);
  if (!refs.length) return h("span", { class: "muted" }, "none");
  return h(
    "ul",
    { class: "back-refs" },
    refs.map(([key, name]) => h("li", { dataset: { ref: key } }, `${name}: `, h("code", {}, step.back_refs[key]))),
  );
}

function stepDetails(step, context) {
  const { byId, numberOf, childrenOf, select } = context;
  return [
    h("h2", { id: "step-heading" }, `Step ${numberOf.get(step.step_id)}: ${step.step_kind}`),
    h(
      "dl",
      { class: "grid step-grid" },
      item("Kind", step.step_kind, "step_kind"),
      item("Agent", step.agent, "agent"),
      item("Summary", step.summary_text, "summary_text"),
      item("Latency", latency(step.latency_ms), "latency_ms"),
      item("Confidence", confidence(step.confidence), "confidence"),
      item("Parents", stepLinks(step.parent_step_ids || [], byId, numberOf, select), "parents"),
      item("Children", stepLinks(childrenOf.get(step.step_id) || [], byId, numberOf, select), "children"),
      item("Back-refs", backRefs(step), "back_refs"),
      item("Recorded", when(step.created_at), "created_at"),
      item("Step id", h("code", {}, step.step_id), "step_id"),
    ),
  ];
}

function stepTable(steps, numberOf, select) {
  const rows = steps.map((step) =>
    h(
      "tr",
      { dataset: { stepRow: step.step_id } },
      h("td", {}, String(numberOf.get(step.step_id))),
      h("td", {}, step.step_kind),
      h("td", {}, step.agent),
      h("td", {}, step.summary_text),
      h("td", {}, latency(step.latency_ms)),
      h("td", {}, confidence(step.confidence)),
      h("td", {}, (step.parent_step_ids || []).map((id) => `#${numberOf.get(id) ?? "?"}`).join(", ") || "—"),
      h("td", {}, h("button", { type: "button", class: "secondary", onclick: () => select(step.step_id, { focus: true }), "aria-label": `Show step ${numberOf.get(step.step_id)} in the graph` }, "Show")),
    ),
  );
  return h(
    "details",
    { class: "panel steps-table", open: steps.length <= OPEN_TABLE_UP_TO },
    h("summary", {}, `All ${steps.length} steps as a table`),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h("caption", { class: "muted" }, "Steps in the order they were recorded; parents by step number"),
        h(
          "thead",
          {},
          h("tr", {}, ["#", "Kind", "Agent", "Summary", "Latency", "Confidence", "Parents", "Graph"].map((name) => h("th", { scope: "col" }, name))),
        ),
        h("tbody", {}, rows),
      ),
    ),
  );
}

function refused(main, heading, message) {
  document.title = `${heading} · Flowledger`;
  replace(main, h("h1", {}, heading), h("p", { class: "problem", role: "alert" }, message), backToSearch());
}

/** Render the flow ``id`` into ``main``. */
export async function render(main, { id }) {
  stylesheet("/console/css/flow.css");
  if (!FLOW_ID.test(id || "")) {
    refused(main, "Not a flow id", `“${id}” is not a flow id: a flow id is fl_ followed by 26 capital letters and digits.`);
    return;
  }
  document.title = `Flow ${id} · Flowledger`;
  replace(main, h("h1", {}, `Flow ${id}`), h("p", { class: "muted" }, "Loading the flow…"));
  let view;
  try {
    view = (await operatorFetch(`/admin/v1/reasoning/flows/${encodeURIComponent(id)}`)).body;
  } catch (error) {
    if (error.status === 404) {
      refused(main, "Flow not found", `There is no flow ${id}. It may have been mistyped, or it has expired.`);
      return;
    }
    replace(main, h("h1", {}, `Flow ${id}`), problem(error), backToSearch());
    return;
  }
  const { flow, steps } = view;
  const byId = new Map(steps.map((step) => [step.step_id, step]));
  const numberOf = new Map(steps.map((step, index) => [step.step_id, index + 1]));
  const childrenOf = new Map();
  for (const step of steps) {
    for (const parent of new Set(step.parent_step_ids || [])) {
      if (!childrenOf.has(parent)) childrenOf.set(parent, []);
      childrenOf.get(parent).push(step.step_id);
    }
  }

  const panel = h(
    "section",
    { class: "panel step-panel", "aria-live": "polite", "aria-labelledby": "step-heading" },
    h("h2", { id: "step-heading" }, "Selected step"),
    h("p", { class: "muted" }, steps.length ? "Select a step in the graph (click, or Tab to it and press Enter)." : "This flow has no steps yet."),
  );
  const graphBox = h("div", { class: "dag", id: "dag" });
  let dag = null;
  const select = (stepId, options) => dag?.select(stepId, options);
  const context = { byId, numberOf, childrenOf, select };

  replace(
    main,
    h("h1", {}, `Flow ${flow.flow_id}`),
    h("p", { class: "lead" }, flow.trigger_summary),
    metadata(flow),
    h(
      "div",
      { class: "flow-layout" },
      h(
        "section",
        { class: "flow-graph", "aria-labelledby": "graph-heading" },
        h("h2", { id: "graph-heading" }, `Steps (${steps.length})`),
        steps.length ? graphBox : h("p", { class: "muted" }, "No steps recorded."),
      ),
      panel,
    ),
    steps.length ? stepTable(steps, numberOf, select) : null,
    backToSearch(),
  );
  if (steps.length) {
    const edges = steps.reduce((sum, step) => sum + new Set(step.parent_step_ids || []).size, 0);
    dag = await renderDag(graphBox, steps, {
      label: `Step graph of ${steps.length} steps and ${edges} links; the table below lists the same steps`,
      onSelect: (step) => replace(panel, stepDetails(step, context)),
    });
  }
  performance.mark("flowledger:flow-ready");
}
