// The flow page's view (pages/flow.js starts its reads, then loads this): a flow's metadata, its step graph (flow_graph.js), the selected step's details (inputs,
// outputs, sealed fields opened one at a time, back-refs) and the steps as a virtualized table.
//
// Read in pages: the flow (GET /admin/v1/reasoning/flows/{id}) and its first page of steps
// (GET .../steps?limit=) are asked for together and shown at once; the other pages follow, each asked for
// while the one before is being drawn. Marks on the performance timeline: flowledger:flow-first-view (metadata,
// graph and first page shown), flowledger:flow-ready (every step loaded and drawn), flowledger:step-shown
// (details filled after a selection) with the measure flowledger:step-select from the click or key press.

import { operatorFetch } from "/console/js/api.js";
import { mountFlowGraph } from "/console/js/flow_graph.js";
import { mountStepsTable } from "/console/js/flow_steps_table.js";
import { fieldsView } from "/console/js/flow_values.js";
import { axisWords } from "/console/js/radar.js";
import { age, h, plural, problem, replace } from "/console/js/dom.js";

const OPEN_TABLE_UP_TO = 30; // a longer table starts folded: the graph is the first view
const INPUT_WINDOW_MS = 1000; // a selection this soon after a click or key press is measured from it
const BACK_REFS = [
  ["llm_call_log_ref", "LLM call log"],
  ["experiment_trace_ref", "Experiment trace"],
  ["decision_graph_node_ref", "Decision graph node"],
  ["memory_claim_ref", "Memory claim"],
];
const AXES = ["confidence", "coverage", "maturity", "recency", "consensus", "risk"];
const STATE_PILL = { completed: "ok", active: "warn", aborted: "bad" };

function backToSearch() {
  return h("p", {}, h("a", { href: "/console/flows" }, "Back to the flows"));
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
  return value === null || value === undefined ? "not rated" : value.toFixed(2);
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

/** The chat page's address of the conversation a chat turn's flow came from (its trace id is the session id). */
export function conversationHref(flow) {
  if (flow.trigger_type !== "chat_turn" || !flow.trace_id) return null;
  return `/console/chat?session=${encodeURIComponent(flow.trace_id)}`;
}

function metadata(flow) {
  const trace = flow.trace_id
    ? h("a", { href: `/console/flows?trace_id=${encodeURIComponent(flow.trace_id)}` }, flow.trace_id)
    : h("span", { class: "muted" }, "none");
  const conversation = conversationHref(flow);
  return h(
    "dl",
    { class: "grid", "aria-label": "Flow details" },
    item("Trigger type", flow.trigger_type, "trigger_type"),
    item("Trigger ref", flow.trigger_ref, "trigger_ref"),
    item("Trace", trace, "trace_id"),
    conversation ? item("Conversation", h("a", { href: conversation, class: "conversation-link" }, "Open the conversation"), "conversation") : null,
    item("Patient", flow.patient_id || h("span", { class: "muted" }, "none"), "patient_id"),
    item("State", h("span", { class: `pill ${STATE_PILL[flow.flow_state] || "warn"}` }, flow.flow_state), "flow_state"),
    item("Outcome", outcome(flow), "outcome"),
    flow.abort_reason ? item("Abort reason", flow.abort_reason, "abort_reason") : null,
    item("Started", when(flow.created_at), "created_at"),
    item("Closed", when(flow.closed_at), "closed_at"),
    item("Duration", flowDuration(flow), "duration"),
    item("Steps", flow.step_count.toLocaleString("en"), "step_count"),
    item("Recorded by", flow.created_by, "created_by"),
  );
}

function dimensions(radar) {
  if (!radar) return null;
  return h(
    "dl",
    { class: "grid dimensions", "aria-label": "Decision dimensions" },
    AXES.filter((axis) => radar[axis]).map((axis) => item(axis[0].toUpperCase() + axis.slice(1), axisWords(radar[axis]), `dimension-${axis}`)),
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

/** Everything the page knows of the steps so far, kept as pages arrive. */
class Steps {
  constructor() {
    this.byId = new Map();
    this.numberOf = new Map();
    this.childrenOf = new Map();
    this.count = 0;
  }

  add(page) {
    for (const step of page) {
      this.count += 1;
      this.byId.set(step.step_id, step);
      this.numberOf.set(step.step_id, this.count);
      for (const parent of new Set(step.parent_step_ids || [])) {
        if (!this.childrenOf.has(parent)) this.childrenOf.set(parent, []);
        this.childrenOf.get(parent).push(step.step_id);
      }
    }
  }

  name(id) {
    const step = this.byId.get(id);
    return `#${this.numberOf.get(id)} ${step.step_kind}`;
  }
}

function refused(main, heading, message) {
  document.title = `${heading} · Flowledger`;
  replace(main, h("h1", {}, heading), h("p", { class: "problem", role: "alert" }, message), backToSearch());
}

function afterPaint() {
  if (document.hidden) return Promise.resolve();
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

/**
 * Render the flow ``id`` into ``main`` from ``reads`` (pages/flow.js): ``overview`` and ``firstPage``
 * (promises of the flow and of its first page of steps, both from the page's one first read),
 * ``readPage(limit, cursor)`` and the size of the later pages; no ``reads`` when ``id`` is not a flow id.
 */
export async function render(main, { id, reads }) {
  if (!reads) {
    refused(main, "Not a flow id", `“${id}” is not a flow id: a flow id is fl_ followed by 26 capital letters and digits.`);
    return;
  }
  document.title = `Flow ${id} · Flowledger`;
  replace(main, h("h1", {}, `Flow ${id}`), h("p", { class: "muted" }, "Loading the flow…"));
  const { readPage } = reads;
  const base = `/admin/v1/reasoning/flows/${encodeURIComponent(id)}`;
  let view;
  let first;
  try {
    view = await reads.overview;
    first = await reads.firstPage;
  } catch (error) {
    if (error.status === 404) {
      refused(main, "Flow not found", `There is no flow ${id}. It may have been mistyped, or it has expired.`);
      return;
    }
    replace(main, h("h1", {}, `Flow ${id}`), problem(error), backToSearch());
    return;
  }
  const { flow } = view;
  const steps = new Steps();
  let lastInput = 0;
  let graph = null;
  let table = null;

  const panel = h(
    "section",
    { class: "panel step-panel", "aria-live": "polite", "aria-labelledby": "step-heading" },
    h("h2", { id: "step-heading" }, "Selected step"),
    h("p", { class: "muted" }, flow.step_count ? "Select a step in the graph or the table (click, or Tab to it and press Enter)." : "This flow has no steps yet."),
  );

  const openSealed = (step, side) => async (field) => {
    const { body } = await operatorFetch(`${base}/steps/${encodeURIComponent(step.step_id)}/sealed`, { query: { side, field } });
    return body.value;
  };

  const stepLinks = (ids) => {
    const known = ids.filter((stepId) => steps.byId.has(stepId));
    if (!known.length) return h("span", { class: "muted" }, "none");
    return h("ul", { class: "step-links" }, known.map((stepId) => h("li", {}, h("button", { type: "button", class: "secondary", dataset: { goto: stepId } }, steps.name(stepId)))));
  };

  function showStep(step) {
    const number = steps.numberOf.get(step.step_id);
    replace(
      panel,
      h("h2", { id: "step-heading" }, `Step ${number}: ${step.step_kind}`),
      h(
        "dl",
        { class: "grid step-grid" },
        item("Kind", step.step_kind, "step_kind"),
        item("Agent", step.agent, "agent"),
        item("Summary", step.summary_text, "summary_text"),
        item("Latency", latency(step.latency_ms), "latency_ms"),
        item("Confidence", confidence(step.confidence), "confidence"),
        item("Parents", stepLinks(step.parent_step_ids || []), "parents"),
        item("Children", stepLinks(steps.childrenOf.get(step.step_id) || []), "children"),
        item("Back-refs", backRefs(step), "back_refs"),
        item("Recorded", when(step.created_at), "created_at"),
        item("Step id", h("code", {}, step.step_id), "step_id"),
      ),
      h("h3", {}, "Inputs"),
      fieldsView(step.inputs, "inputs", openSealed(step, "inputs")),
      h("h3", {}, "Outputs"),
      fieldsView(step.outputs, "outputs", openSealed(step, "outputs")),
    );
    table?.select(step.step_id, number - 1);
    const start = performance.now() - lastInput < INPUT_WINDOW_MS ? lastInput : performance.now();
    lastInput = 0;
    afterPaint().then(() => {
      performance.mark("flowledger:step-shown");
      performance.measure("flowledger:step-select", { start, end: performance.now() });
    });
  }

  const graphBox = h("div", { class: "flow-graph-box", id: "flow-graph" });
  const tableBox = h("div", { class: "steps-table-box" });
  const loading = h("div", { class: "muted load-status", role: "status" });
  const layout = h(
    "div",
    { class: "flow-layout" },
    h("section", { class: "flow-graph", "aria-labelledby": "graph-heading" }, h("h2", { id: "graph-heading" }, `Steps (${flow.step_count.toLocaleString("en")})`), graphBox, loading),
    panel,
  );
  const tableSection = h(
    "details",
    { class: "panel steps-table", open: flow.step_count <= OPEN_TABLE_UP_TO },
    h("summary", {}, flow.step_count === 1 ? "The step as a table" : `All ${plural(flow.step_count, "step")} as a table`),
    tableBox,
  );
  replace(
    main,
    h("h1", {}, `Flow ${flow.flow_id}`),
    h("p", { class: "lead" }, flow.trigger_summary),
    metadata(flow),
    dimensions(view.dimensions),
    layout,
    tableSection,
    backToSearch(),
  );

  // When the selection came from a click or a key: the measure runs from that input to the filled panel.
  for (const type of ["pointerdown", "keydown"]) layout.addEventListener(type, (event) => (lastInput = event.timeStamp), { capture: true });
  tableSection.addEventListener("pointerdown", (event) => (lastInput = event.timeStamp), { capture: true });
  tableSection.addEventListener("keydown", (event) => (lastInput = event.timeStamp), { capture: true });
  // Parent and child buttons in the panel: one listener for all of them.
  panel.addEventListener("click", (event) => {
    const target = event.target.closest("button[data-goto]");
    if (target) graph?.select(target.dataset.goto, { focus: true });
  });

  graph = mountFlowGraph(graphBox, {
    label: `Step graph of flow ${flow.flow_id}; the table below lists the same steps`,
    onSelect: showStep,
  });
  table = mountStepsTable(tableBox, { numberOf: steps.numberOf, onSelect: (stepId) => graph.select(stepId, { focus: false }) });

  const add = (page) => {
    steps.add(page);
    table.append(page);
    return graph.append(page);
  };
  const status = () => {
    loading.textContent = steps.count < flow.step_count ? `Loaded ${steps.count.toLocaleString("en")} of ${plural(flow.step_count, "step")}…` : "";
  };

  if (!first.steps.length && !first.next_cursor) {
    await graph.finish();
    performance.mark("flowledger:flow-first-view");
    performance.mark("flowledger:flow-ready");
    return;
  }
  const drawn = add(first.steps);
  if (!first.next_cursor) {
    // The whole flow came in one page: it is drawn finished in the same frame, not drawn and then drawn again.
    const finished = graph.finish();
    await drawn;
    status();
    performance.mark("flowledger:flow-first-view");
    await finished;
    performance.mark("flowledger:flow-ready");
    return;
  }
  await drawn;
  status();
  performance.mark("flowledger:flow-first-view");

  const size = reads.pageSize;
  let next = first.next_cursor ? readPage(size, first.next_cursor) : null;
  try {
    while (next) {
      const page = await next;
      if (!main.contains(layout)) return; // the reader went elsewhere
      next = page.next_cursor ? readPage(size, page.next_cursor) : null; // asked for while this one is drawn
      add(page.steps);
      status();
    }
  } catch (error) {
    replace(loading, problem(error));
    loading.prepend(`Loaded ${steps.count.toLocaleString("en")} of ${plural(flow.step_count, "step")}. `);
    return;
  }
  await graph.finish();
  performance.mark("flowledger:flow-ready");
}
