// A flow's step DAG as one SVG: laid out once with dagre, built detached, attached in one go. Nothing
// here reads the layout back (no getBBox, no offsetWidth), so a 500-step flow costs one reflow, not 500.

import { graphlib, layout } from "/console/vendor/dagre-3.1.3/dagre.esm.js";
import { s } from "/console/js/dom.js";

const NODE_WIDTH = 176;
const NODE_HEIGHT = 46;
const LABEL_CHARS = 24; // text is cut by length, not measured: measuring would reflow per node

function cut(text, chars = LABEL_CHARS) {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

/** The accessible name of a step's node: its number, kind, agent and summary. */
export function stepLabel(step, index) {
  return `Step ${index + 1}: ${step.step_kind} by ${step.agent}. ${step.summary_text}`;
}

/**
 * Lay the steps out top to bottom: one node per step, one edge per (parent, child) pair.
 * A parent the flow does not hold is skipped (the API refuses such steps; an old record must not break the page).
 */
export function layoutDag(steps) {
  const graph = new graphlib.Graph();
  graph.setGraph({ rankdir: "TB", nodesep: 20, ranksep: 34, edgesep: 8, marginx: 12, marginy: 12 });
  graph.setDefaultEdgeLabel(() => ({}));
  steps.forEach((step, index) => graph.setNode(step.step_id, { width: NODE_WIDTH, height: NODE_HEIGHT, step, index }));
  for (const step of steps) {
    for (const parent of new Set(step.parent_step_ids || [])) {
      if (graph.hasNode(parent)) graph.setEdge(parent, step.step_id);
    }
  }
  layout(graph);
  const size = graph.graph();
  return {
    width: Math.ceil(size.width || NODE_WIDTH),
    height: Math.ceil(size.height || NODE_HEIGHT),
    nodes: graph.nodes().map((id) => graph.node(id)),
    edges: graph.edges().map((e) => ({ from: e.v, to: e.w, points: graph.edge(e).points || [] })),
  };
}

function edgePath(points) {
  return points.map((p, i) => `${i ? "L" : "M"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join("");
}

function nodeGroup(node) {
  const { step, index } = node;
  const left = node.x - node.width / 2;
  const top = node.y - node.height / 2;
  return s(
    "g",
    {
      class: "node",
      transform: `translate(${left.toFixed(1)},${top.toFixed(1)})`,
      tabindex: "0",
      role: "button",
      "aria-pressed": "false",
      "aria-label": stepLabel(step, index),
      dataset: { stepId: step.step_id },
    },
    s("title", {}, step.summary_text),
    s("rect", { width: node.width, height: node.height, rx: 4 }),
    s("text", { class: "kind", x: 8, y: 18 }, cut(`${index + 1} · ${step.step_kind}`)),
    s("text", { class: "agent", x: 8, y: 36 }, cut(step.agent)),
  );
}

/** Build the SVG of a laid-out DAG (detached: the caller attaches it once). */
export function dagSvg(laid, { label } = {}) {
  const edges = s(
    "g",
    { class: "edges", "aria-hidden": "true" },
    laid.edges.map((edge) =>
      s("path", {
        class: "edge",
        d: edgePath(edge.points),
        "marker-end": "url(#dag-arrow)",
        dataset: { from: edge.from, to: edge.to },
      }),
    ),
  );
  return s(
    "svg",
    {
      xmlns: "http://www.w3.org/2000/svg",
      width: laid.width,
      height: laid.height,
      viewBox: `0 0 ${laid.width} ${laid.height}`,
      // A group, not an image: its nodes are buttons a keyboard reaches.
      role: "group",
      "aria-label": label || `Step graph: ${laid.nodes.length} steps, ${laid.edges.length} links`,
    },
    s(
      "defs",
      {},
      s(
        "marker",
        {
          id: "dag-arrow",
          viewBox: "0 0 10 10",
          refX: 9,
          refY: 5,
          markerWidth: 7,
          markerHeight: 7,
          orient: "auto-start-reverse",
          markerUnits: "strokeWidth",
        },
        s("path", { class: "arrowhead", d: "M0,0L10,5L0,10z" }),
      ),
    ),
    edges,
    s("g", { class: "nodes" }, laid.nodes.map(nodeGroup)),
  );
}

function nextFrame() {
  // After this frame's style, layout and paint: rAF runs before them, a task queued from it after.
  if (document.hidden) return Promise.resolve();
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

/**
 * Draw ``steps`` into ``container`` and wire selection (click, Enter, Space) to ``onSelect(step)``.
 * Timings go to the performance timeline (``flowledger:dag-layout``, ``flowledger:dag-draw``,
 * ``flowledger:dag``) and to the container's ``data-layout-ms`` / ``data-draw-ms``.
 * Returns ``{select(stepId, {focus}), svg}``.
 */
export async function renderDag(container, steps, { onSelect, label } = {}) {
  performance.mark("flowledger:dag-start");
  const laid = layoutDag(steps);
  performance.mark("flowledger:dag-laid-out");
  const svg = dagSvg(laid, { label });
  container.replaceChildren(svg);
  await nextFrame();
  performance.mark("flowledger:dag-painted");
  const layoutMs = performance.measure("flowledger:dag-layout", "flowledger:dag-start", "flowledger:dag-laid-out");
  const drawMs = performance.measure("flowledger:dag-draw", "flowledger:dag-laid-out", "flowledger:dag-painted");
  performance.measure("flowledger:dag", "flowledger:dag-start", "flowledger:dag-painted");
  container.dataset.layoutMs = layoutMs.duration.toFixed(1);
  container.dataset.drawMs = drawMs.duration.toFixed(1);

  const byId = new Map(steps.map((step) => [step.step_id, step]));
  const nodeOf = new Map([...svg.querySelectorAll(".node")].map((node) => [node.dataset.stepId, node]));
  let selected = null;

  function select(stepId, { focus = false } = {}) {
    const node = nodeOf.get(stepId);
    if (!node) return;
    if (selected) {
      selected.classList.remove("selected");
      selected.setAttribute("aria-pressed", "false");
      for (const edge of svg.querySelectorAll(".edge.lit")) edge.classList.remove("lit");
    }
    selected = node;
    node.classList.add("selected");
    node.setAttribute("aria-pressed", "true");
    for (const edge of svg.querySelectorAll(".edge")) {
      if (edge.dataset.to === stepId || edge.dataset.from === stepId) edge.classList.add("lit");
    }
    if (focus) {
      node.scrollIntoView({ block: "center", inline: "center" });
      node.focus({ preventScroll: true });
    }
    onSelect?.(byId.get(stepId));
  }

  // One listener for the whole graph, not one per node.
  svg.addEventListener("click", (event) => {
    const node = event.target.closest(".node");
    if (node) select(node.dataset.stepId);
  });
  svg.addEventListener("keydown", (event) => {
    const node = event.target.closest(".node");
    if (!node || (event.key !== "Enter" && event.key !== " ")) return;
    event.preventDefault(); // Space would scroll the page
    select(node.dataset.stepId);
  });
  return { select, svg };
}
