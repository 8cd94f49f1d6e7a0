// A flow's step graph for flows of any size: steps arrive page by page (append), are laid out in layers
// (flow_layout.js, O(nodes + edges) a pass, at most one pass a frame), and only what is in view is drawn:
// the edges always on a canvas, the nodes as SVG buttons while at most MAX_DOM_NODES are in view, else as
// boxes on the canvas. Fit, zoom and pan (wheel, drag, buttons, + − 0), an overview with the viewport that a
// click moves, repeated model/tool loops folded into one node, and a timeline (flow_timeline.js).
//
// Keyboard: the graph is ONE Tab stop (roving tabindex: only the focused node has tabindex 0, and it is always
// in the DOM even when scrolled out of view). ↑ goes to a parent, ↓ to a child (the nearest one), ← → to the
// neighbours in the same rank, Home/End to the first/last step; Enter or Space selects a step or opens a loop,
// Escape folds the open loop the focused step is in. Focus moves announce the node (its aria-label).
//
// Timings go to the performance timeline: ``flowledger:dag-layout`` and ``flowledger:dag-draw`` (one of each
// per layout pass) and to the root's data-layout-ms / data-draw-ms (the last pass).

import { h, s, stylesheet } from "/console/js/dom.js";
import { FlowSteps, NODE_H, NODE_W, ROW_H, findLoops, layoutFlow, loopLabel } from "/console/js/flow_layout.js";
import { mountTimeline } from "/console/js/flow_timeline.js";

// Past this many nodes in view, boxes on the canvas (their text would be unreadable anyway): a pan that brings
// ~200 SVG nodes into view took 100-150 ms a frame, over the 100 ms an interaction may take.
const MAX_DOM_NODES = 150;
const MIN_SCALE = 0.0002; // a 20,000-step chain fits a screen
const MAX_SCALE = 2.5;
const ZOOM_STEP = 1.25;
const READABLE = 0.6; // the first view fits the whole flow only if its text stays this large; else 100% at the top
const MARGIN = 16;
const DRAG_PX = 4;
const LABEL_CHARS = 26; // text is cut by length, not measured: measuring would reflow per node
const PALETTE = ["#0b5cad", "#1a6b34", "#8a4b00", "#6b3fa0", "#a4161a", "#00687a", "#5c5c00", "#4d5661"];
let mounted = 0; // ids of several graphs on one page stay distinct

function cut(text, chars = LABEL_CHARS) {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

function colour(kind) {
  let hash = 0;
  for (let i = 0; i < kind.length; i += 1) hash = (hash * 31 + kind.charCodeAt(i)) | 0;
  return PALETTE[Math.abs(hash) % PALETTE.length];
}

function latencyText(ms) {
  if (ms === null || ms === undefined) return "—";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function confidenceText(value) {
  return value === null || value === undefined ? "not rated" : value.toFixed(2);
}

function plural(count, one, many) {
  return `${count.toLocaleString("en")} ${count === 1 ? one : many}`;
}

function afterPaint() {
  // rAF runs before this frame's style, layout and paint; a task queued from it runs after them.
  if (document.hidden) return new Promise((resolve) => setTimeout(resolve, 0));
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

/**
 * Mount an empty graph in ``container``. ``label`` names it for assistive technology (the counts are added);
 * ``onSelect(step)`` is called when a step is selected (click, Enter/Space, or ``select``).
 * Returns ``{append(steps), finish(), select(stepId, {focus}), root}``; append and finish return a promise
 * settled once the graph with those steps has been painted.
 */
export function mountFlowGraph(container, { label, onSelect } = {}) {
  stylesheet("/console/css/flow_graph.css");
  mounted += 1;
  const hintId = `fg-hint-${mounted}`;
  const flow = new FlowSteps();
  let loops = [];
  let loopCount = 0;
  let expandAll = false;
  const toggled = new Set(); // loops opened (or, after "Open all loops", folded) one by one
  const isOpen = { has: (key) => expandAll !== toggled.has(key) };
  let laid = null;
  let finished = false;
  let view = { scale: 1, tx: 0, ty: 0 };
  let moved = false; // once the reader zooms or pans, new pages no longer move the view
  let width = 0;
  let height = 0;
  let activeKey = null;
  let selectedId = null;
  const elements = new Map(); // unit key -> its SVG node, for the nodes in view and the focused one
  let frame = 0;
  let layoutDue = false;
  let painted = [];

  const button = (text, name, onclick) => h("button", { type: "button", class: "secondary", "aria-label": name, title: name, onclick }, text);
  const graphButton = h("button", { type: "button", class: "secondary", "aria-pressed": "true", onclick: () => showView("graph") }, "Graph");
  const timelineButton = h("button", { type: "button", class: "secondary", "aria-pressed": "false", onclick: () => showView("timeline") }, "Timeline");
  const loopsButton = h("button", { type: "button", class: "secondary", hidden: true, onclick: toggleAllLoops }, "Open all loops");
  const status = h("span", { class: "fg-status muted" });
  const zoomButtons = h(
    "span",
    { class: "fg-zoom" },
    button("−", "Zoom out (−)", () => zoomBy(1 / ZOOM_STEP)),
    button("+", "Zoom in (+)", () => zoomBy(ZOOM_STEP)),
    button("Fit", "Fit the whole flow (0)", fit),
    loopsButton,
  );
  const toolbar = h("div", { class: "fg-toolbar" }, h("span", { class: "fg-views", role: "group", "aria-label": "View" }, graphButton, timelineButton), zoomButtons, status);
  const hint = h(
    "p",
    { class: "fg-hint muted", id: hintId },
    "Arrow keys move between steps (↑ parent, ↓ child, ← → neighbours), Enter selects or opens a loop, Escape folds it, + − 0 zoom; drag or scroll to pan, Ctrl + scroll to zoom.",
  );
  const canvas = h("canvas", { class: "fg-canvas", "aria-hidden": "true" });
  const nodes = s("g", { class: "fg-nodes" });
  const svg = s("svg", { class: "fg-svg", role: "group", "aria-describedby": hintId }, nodes);
  const overview = h("canvas", { class: "fg-overview", "aria-hidden": "true", title: "Overview: click to move there" });
  const stage = h("div", { class: "fg-stage" }, canvas, svg, overview);
  const timelineBox = h("div", { class: "fg-timeline", hidden: true });
  const live = h("p", { class: "visually-hidden", "aria-live": "polite" });
  const root = h("div", { class: "fg", dataset: { view: "graph" } }, toolbar, hint, stage, timelineBox, live);
  container.replaceChildren(root);
  const overviewBase = document.createElement("canvas");

  const timeline = mountTimeline(timelineBox, {
    label: (i) => stepName(i),
    onSelect: (i) => select(flow.steps[i].step_id, { focus: false, from: "timeline" }),
  });

  // ---- naming --------------------------------------------------------------------------------------------

  function stepName(i) {
    const step = flow.steps[i];
    return `Step ${i + 1}: ${step.step_kind} by ${step.agent}`;
  }

  function unitLabel(v) {
    const unit = laid.units[v];
    const parents = laid.unitParents[v].length;
    const children = laid.unitChildren[v].length;
    const links = `${plural(parents, "parent", "parents")}, ${plural(children, "child", "children")}`;
    if (unit.loop) {
      const { members } = unit.loop;
      return `Folded loop of ${members.length} steps, ${loopLabel(unit.loop)}, steps ${unit.first + 1} to ${unit.last + 1}. ${links}. Enter opens it.`;
    }
    const { step } = unit;
    return `${stepName(unit.first)}. ${step.summary_text}. Latency ${latencyText(step.latency_ms)}, confidence ${confidenceText(step.confidence)}. ${links}.`;
  }

  function describeGraph() {
    const name = label || "Step graph";
    const folded = loopCount ? `, ${plural(loopCount, "loop", "loops")} folded` : "";
    const named = `${name}: ${plural(flow.size, "step", "steps")}${finished ? "" : " so far"}${folded}`;
    if (svg.getAttribute("aria-label") !== named) svg.setAttribute("aria-label", named);
    const said = `${plural(flow.size, "step", "steps")}${finished ? "" : " (loading)"}${folded} · ${Math.round(view.scale * 100)}%`;
    if (status.textContent !== said) status.textContent = said;
    loopsButton.hidden = loops.length === 0;
    loopsButton.textContent = expandAll ? "Fold all loops" : "Open all loops";
  }

  // ---- layout --------------------------------------------------------------------------------------------

  function unitIndex(key) {
    // A step's node, or the loop holding it; a loop's key names its first step, so it survives the loop.
    if (key === null || !laid) return -1;
    const stepIndex = flow.indexOf.get(key.startsWith("loop:") ? key.slice(5) : key);
    return stepIndex === undefined ? -1 : laid.unitOf[stepIndex];
  }

  function relayout() {
    const start = performance.now();
    loops = findLoops(flow);
    const before = laid;
    laid = layoutFlow(flow, loops, isOpen);
    loopCount = laid.units.reduce((sum, unit) => sum + (unit.loop ? 1 : 0), 0);
    const end = performance.now();
    performance.measure("flowledger:dag-layout", { start, end });
    root.dataset.layoutMs = (end - start).toFixed(1);
    if (laid.units.length) activeKey = laid.units[Math.max(0, unitIndex(activeKey))].key;
    // Keys of nodes that moved or changed: every node is rebuilt in place (its element, and so focus, stays).
    if (before) for (const element of elements.values()) element.dataset.stale = "true";
    drawOverviewBase();
    return end;
  }

  function measureStage() {
    width = stage.clientWidth;
    height = stage.clientHeight;
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(width * ratio));
    canvas.height = Math.max(1, Math.round(height * ratio));
  }

  function boundsSize() {
    const { minX, maxX, minY, maxY } = laid.bounds;
    return { w: maxX - minX, h: maxY - minY, cx: (minX + maxX) / 2, cy: (minY + maxY) / 2 };
  }

  function fitScale() {
    const { w, h: tall } = boundsSize();
    return Math.min(MAX_SCALE, Math.max(MIN_SCALE, Math.min((width - 2 * MARGIN) / w, (height - 2 * MARGIN) / tall, 1)));
  }

  function fitView() {
    const scale = fitScale();
    const { cx, cy } = boundsSize();
    view = { scale, tx: width / 2 - cx * scale, ty: height / 2 - cy * scale };
  }

  function firstView() {
    if (!laid.units.length) return;
    if (fitScale() >= READABLE) return fitView();
    // Too big to read whole: 100% at the top, the first step centred; the overview shows the rest.
    view = { scale: 1, tx: width / 2 - laid.x[0], ty: MARGIN + NODE_H / 2 - laid.y[0] };
  }

  // ---- drawing -------------------------------------------------------------------------------------------

  function inView(v, pad = 0) {
    const { scale, tx, ty } = view;
    const left = (laid.x[v] - NODE_W / 2) * scale + tx;
    const top = (laid.y[v] - NODE_H / 2) * scale + ty;
    return left + NODE_W * scale >= -pad && left <= width + pad && top + NODE_H * scale >= -pad && top <= height + pad;
  }

  function visibleUnits() {
    const { scale, ty } = view;
    const firstRank = Math.max(0, Math.floor((-ty / scale - NODE_H) / ROW_H));
    const lastRank = Math.min(laid.byRank.length - 1, Math.ceil(((height - ty) / scale + NODE_H) / ROW_H));
    const shown = [];
    for (let r = firstRank; r <= lastRank; r += 1) for (const v of laid.byRank[r]) if (inView(v)) shown.push(v);
    return shown;
  }

  function fillNode(element, v) {
    const unit = laid.units[v];
    const left = laid.x[v] - NODE_W / 2;
    const top = laid.y[v] - NODE_H / 2;
    element.setAttribute("transform", `translate(${left},${top})`);
    element.setAttribute("class", unit.loop ? "fg-node fg-loop" : "fg-node");
    element.setAttribute("role", "button");
    element.setAttribute("aria-label", unitLabel(v));
    element.setAttribute("tabindex", unit.key === activeKey ? "0" : "-1");
    element.dataset.key = unit.key;
    delete element.dataset.stale;
    let lines;
    if (unit.loop) {
      element.setAttribute("aria-expanded", "false");
      element.removeAttribute("aria-pressed");
      element.dataset.loop = unit.key;
      delete element.dataset.stepId;
      const total = unit.loop.members.reduce((sum, i) => sum + (flow.steps[i].latency_ms ?? 0), 0);
      const timed = unit.loop.members.some((i) => flow.steps[i].latency_ms !== null && flow.steps[i].latency_ms !== undefined);
      lines = [cut(loopLabel(unit.loop)), `steps ${unit.first + 1}–${unit.last + 1} · open ▸`, `latency Σ ${timed ? latencyText(total) : "—"}`];
    } else {
      const { step } = unit;
      element.setAttribute("aria-pressed", step.step_id === selectedId ? "true" : "false");
      element.removeAttribute("aria-expanded");
      element.dataset.stepId = step.step_id;
      delete element.dataset.loop;
      lines = [cut(`${unit.first + 1} · ${step.step_kind}`), cut(step.agent), `${latencyText(step.latency_ms)} · conf ${confidenceText(step.confidence)}`];
    }
    element.classList.toggle("selected", !unit.loop && unit.step.step_id === selectedId);
    const kind = unit.loop ? unit.loop.pattern[0] : unit.step.step_kind;
    element.replaceChildren(
      s("rect", { class: "fg-box", width: NODE_W, height: NODE_H, rx: 5 }),
      s("rect", { class: "fg-stripe", width: 5, height: NODE_H, fill: colour(kind) }),
      s("text", { class: "fg-kind", x: 12, y: 17 }, lines[0]),
      s("text", { class: "fg-agent", x: 12, y: 34 }, lines[1]),
      s("text", { class: "fg-metrics", x: 12, y: 50 }, lines[2]),
    );
  }

  function drawNodes(shown) {
    const active = unitIndex(activeKey);
    const wanted = active >= 0 && !shown.includes(active) ? [...shown, active] : shown;
    const keep = new Set(wanted.map((v) => laid.units[v].key));
    let lostFocus = false;
    for (const [key, element] of elements) {
      if (keep.has(key)) continue;
      lostFocus ||= element === document.activeElement;
      element.remove();
      elements.delete(key);
    }
    for (const v of wanted) {
      const key = laid.units[v].key;
      let element = elements.get(key);
      if (!element) {
        element = s("g", {});
        fillNode(element, v);
        nodes.append(element);
        elements.set(key, element);
      } else if (element.dataset.stale) fillNode(element, v);
    }
    // The focused node was folded into a loop by a new page: focus moves to the node now holding its step.
    if (lostFocus && active >= 0) elements.get(laid.units[active].key)?.focus({ preventScroll: true });
  }

  function drawCanvas(shown, boxes) {
    const ctx = canvas.getContext("2d");
    const ratio = canvas.width / Math.max(1, width);
    const { scale, tx, ty } = view;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.setTransform(ratio * scale, 0, 0, ratio * scale, ratio * tx, ratio * ty);
    const x0 = -tx / scale;
    const x1 = (width - tx) / scale;
    const y0 = -ty / scale;
    const y1 = (height - ty) / scale;
    const curves = scale > 0.3;
    const selectedUnit = selectedId === null ? -1 : laid.unitOf[flow.indexOf.get(selectedId)];
    const path = (lit) => {
      ctx.beginPath();
      for (let v = 0; v < laid.units.length; v += 1) {
        const vx = laid.x[v];
        const vy = laid.y[v] - NODE_H / 2;
        for (const u of laid.unitParents[v]) {
          if (lit !== (u === selectedUnit || v === selectedUnit)) continue;
          const ux = laid.x[u];
          const uy = laid.y[u] + NODE_H / 2;
          if (uy > y1 || vy < y0 || Math.max(ux, vx) < x0 || Math.min(ux, vx) > x1) continue;
          ctx.moveTo(ux, uy);
          if (!curves) {
            ctx.lineTo(vx, vy);
            continue;
          }
          ctx.bezierCurveTo(ux, uy + ROW_H / 3, vx, vy - ROW_H / 3, vx, vy);
          ctx.moveTo(vx - 4, vy - 7); // the arrowhead: the curve ends straight down into the child
          ctx.lineTo(vx, vy);
          ctx.lineTo(vx + 4, vy - 7);
        }
      }
    };
    ctx.lineWidth = 1.2 / scale;
    ctx.strokeStyle = "#7a838c";
    path(false);
    ctx.stroke();
    if (selectedUnit >= 0) {
      ctx.lineWidth = 2.6 / scale;
      ctx.strokeStyle = "#0b5cad";
      path(true);
      ctx.stroke();
    }
    if (!boxes) return;
    const buckets = new Map();
    for (const v of shown) {
      const unit = laid.units[v];
      const fill = colour(unit.loop ? unit.loop.pattern[0] : unit.step.step_kind);
      if (!buckets.has(fill)) buckets.set(fill, []);
      buckets.get(fill).push(v);
    }
    for (const [fill, list] of buckets) {
      ctx.fillStyle = fill;
      ctx.beginPath();
      for (const v of list) ctx.rect(laid.x[v] - NODE_W / 2, laid.y[v] - NODE_H / 2, NODE_W, NODE_H);
      ctx.fill();
    }
  }

  function overviewScale() {
    const { w, h: tall } = boundsSize();
    return { sx: (overview.width - 8) / w, sy: (overview.height - 8) / tall };
  }

  function drawOverviewBase() {
    overview.width = 200;
    overview.height = 140;
    overviewBase.width = overview.width;
    overviewBase.height = overview.height;
    const ctx = overviewBase.getContext("2d");
    ctx.clearRect(0, 0, overviewBase.width, overviewBase.height);
    if (!laid.units.length) return;
    const { sx, sy } = overviewScale();
    const { minX, minY } = laid.bounds;
    ctx.fillStyle = "#4d5661";
    const w = Math.max(1, NODE_W * sx);
    const tall = Math.max(1, NODE_H * sy);
    for (let v = 0; v < laid.units.length; v += 1) {
      ctx.fillRect(4 + (laid.x[v] - NODE_W / 2 - minX) * sx, 4 + (laid.y[v] - NODE_H / 2 - minY) * sy, w, tall);
    }
  }

  function drawOverview() {
    const ctx = overview.getContext("2d");
    ctx.clearRect(0, 0, overview.width, overview.height);
    ctx.drawImage(overviewBase, 0, 0);
    if (!laid.units.length) return;
    const { sx, sy } = overviewScale();
    const { minX, minY } = laid.bounds;
    const { scale, tx, ty } = view;
    const left = 4 + (-tx / scale - minX) * sx;
    const top = 4 + (-ty / scale - minY) * sy;
    ctx.strokeStyle = "#0b5cad";
    ctx.lineWidth = 2;
    ctx.strokeRect(left, top, Math.max(3, (width / scale) * sx), Math.max(3, (height / scale) * sy));
  }

  function draw() {
    frame = 0;
    if (!laid) return;
    if (!width) measureStage();
    const shown = visibleUnits();
    const boxes = shown.length > MAX_DOM_NODES;
    drawNodes(boxes ? [] : shown);
    nodes.setAttribute("transform", `translate(${view.tx},${view.ty}) scale(${view.scale})`);
    drawCanvas(shown, boxes);
    drawOverview();
    root.dataset.scale = view.scale.toFixed(3);
    root.dataset.detail = boxes ? "overview" : "nodes";
    describeGraph();
  }

  function requestDraw() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  function pass() {
    layoutDue = false;
    const laidOut = relayout();
    if (!width) measureStage();
    if (!moved) firstView();
    draw();
    timeline.update(flow);
    const settle = painted;
    painted = [];
    afterPaint().then(() => {
      const end = performance.now();
      performance.measure("flowledger:dag-draw", { start: laidOut, end });
      root.dataset.drawMs = (end - laidOut).toFixed(1);
      for (const resolve of settle) resolve();
    });
  }

  function scheduleLayout() {
    const done = new Promise((resolve) => painted.push(resolve));
    if (!layoutDue) {
      layoutDue = true;
      if (document.hidden) setTimeout(pass, 0);
      else requestAnimationFrame(pass);
    }
    return done;
  }

  // ---- view: zoom, pan, fit ------------------------------------------------------------------------------

  function setView(next) {
    moved = true;
    view = next;
    requestDraw();
  }

  function zoomBy(factor, cx = width / 2, cy = height / 2) {
    const scale = Math.min(MAX_SCALE, Math.max(MIN_SCALE, view.scale * factor));
    const k = scale / view.scale;
    setView({ scale, tx: cx - (cx - view.tx) * k, ty: cy - (cy - view.ty) * k });
  }

  function fit() {
    if (!laid) return;
    fitView();
    setView(view);
  }

  function centreOn(v) {
    setView({ ...view, tx: width / 2 - laid.x[v] * view.scale, ty: height / 2 - laid.y[v] * view.scale });
  }

  function reveal(v) {
    // Move the view only as far as needed; a node more than a screen away is centred.
    if (inView(v, -MARGIN)) return;
    const { scale } = view;
    const left = (laid.x[v] - NODE_W / 2) * scale + view.tx;
    const top = (laid.y[v] - NODE_H / 2) * scale + view.ty;
    if (left < -width || left > 2 * width || top < -height || top > 2 * height) return centreOn(v);
    let { tx, ty } = view;
    if (left < MARGIN) tx += MARGIN - left;
    else if (left + NODE_W * scale > width - MARGIN) tx -= left + NODE_W * scale - (width - MARGIN);
    if (top < MARGIN) ty += MARGIN - top;
    else if (top + NODE_H * scale > height - MARGIN) ty -= top + NODE_H * scale - (height - MARGIN);
    setView({ scale, tx, ty });
  }

  // ---- focus, selection, loops ---------------------------------------------------------------------------

  function activate(v, { focus = true } = {}) {
    const previous = elements.get(activeKey);
    if (previous) previous.tabIndex = -1;
    activeKey = laid.units[v].key;
    reveal(v);
    draw(); // now, not next frame: the node must exist to take focus
    const element = elements.get(activeKey);
    if (!element) return; // the graph is hidden (timeline view)
    element.tabIndex = 0;
    if (focus) element.focus({ preventScroll: true });
  }

  function markSelected() {
    for (const element of elements.values()) {
      const on = element.dataset.stepId === selectedId;
      element.classList.toggle("selected", on);
      if (element.dataset.stepId) element.setAttribute("aria-pressed", on ? "true" : "false");
    }
  }

  function openLoopHolding(stepIndex) {
    const v = laid.unitOf[stepIndex];
    if (!laid.units[v].loop) return;
    toggleLoop(laid.units[v].key, { announce: false });
  }

  function select(stepId, { focus = false, from = "api" } = {}) {
    const index = flow.indexOf.get(stepId);
    if (index === undefined || !laid) return;
    openLoopHolding(index);
    selectedId = stepId;
    markSelected();
    const v = laid.unitOf[index];
    if (focus && from === "api" && root.dataset.view === "graph") centreOn(v);
    activate(v, { focus: focus && root.dataset.view === "graph" });
    if (from !== "timeline") timeline.select(index, { focus: focus && root.dataset.view === "timeline" });
    else timeline.select(index, { focus: true });
    onSelect?.(flow.steps[index]);
  }

  function toggleLoop(key, { announce = true } = {}) {
    const v = unitIndex(key);
    const before = v >= 0 ? { x: laid.x[v] * view.scale + view.tx, y: laid.y[v] * view.scale + view.ty } : null;
    const loop = loops.find((candidate) => candidate.key === key);
    if (!loop) return;
    const opening = !isOpen.has(key);
    if (toggled.has(key)) toggled.delete(key);
    else toggled.add(key);
    relayout();
    const focusKey = opening ? flow.steps[loop.members[0]].step_id : key;
    const after = unitIndex(focusKey);
    if (before) view = { ...view, tx: view.tx + before.x - (laid.x[after] * view.scale + view.tx), ty: view.ty + before.y - (laid.y[after] * view.scale + view.ty) };
    const hadFocus = svg.contains(document.activeElement);
    activeKey = focusKey;
    activate(after, { focus: hadFocus });
    if (announce) live.textContent = opening ? `Loop opened: ${loop.members.length} steps, ${loopLabel(loop)}.` : `Loop folded: ${loopLabel(loop)}.`;
  }

  function toggleAllLoops() {
    expandAll = !expandAll;
    toggled.clear();
    relayout();
    moved = true;
    draw();
    live.textContent = expandAll ? "All loops opened." : "All loops folded.";
  }

  function nearest(candidates, from) {
    let best = -1;
    for (const v of candidates) if (best < 0 || Math.abs(laid.x[v] - laid.x[from]) < Math.abs(laid.x[best] - laid.x[from])) best = v;
    return best;
  }

  function onKey(event) {
    if (!laid || !laid.units.length) return;
    const v = unitIndex(activeKey);
    const row = laid.byRank[laid.rank[v]];
    let target = -1;
    switch (event.key) {
      case "ArrowUp":
        target = nearest(laid.unitParents[v], v);
        break;
      case "ArrowDown":
        target = nearest(laid.unitChildren[v], v);
        break;
      case "ArrowLeft":
        target = row[laid.order[v] - 1] ?? -1;
        break;
      case "ArrowRight":
        target = row[laid.order[v] + 1] ?? -1;
        break;
      case "Home":
        target = 0;
        break;
      case "End":
        target = laid.units.length - 1;
        break;
      case "Enter":
      case " ": {
        const unit = laid.units[v];
        if (unit.loop) toggleLoop(unit.key);
        else select(unit.step.step_id, { focus: true, from: "graph" });
        break;
      }
      case "Escape": {
        const loop = loops.find((candidate) => isOpen.has(candidate.key) && candidate.members.includes(laid.units[v].first));
        if (!loop) return;
        toggleLoop(loop.key);
        break;
      }
      case "+":
      case "=":
        zoomBy(ZOOM_STEP);
        break;
      case "-":
      case "_":
        zoomBy(1 / ZOOM_STEP);
        break;
      case "0":
        fit();
        break;
      default:
        return;
    }
    event.preventDefault();
    if (target >= 0) activate(target);
  }

  // ---- pointer -------------------------------------------------------------------------------------------

  let drag = null;
  let dragged = false;
  stage.addEventListener("pointerdown", (event) => {
    if (event.button !== 0 || event.target === overview) return;
    drag = { x: event.clientX, y: event.clientY, tx: view.tx, ty: view.ty, id: event.pointerId };
    dragged = false;
  });
  // No focus (and so no scroll of the stage) on mouse down: a click focuses its node itself, without scrolling.
  stage.addEventListener("mousedown", (event) => event.preventDefault());
  stage.addEventListener("pointermove", (event) => {
    if (!drag || event.pointerId !== drag.id) return;
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (!dragged && Math.hypot(dx, dy) < DRAG_PX) return;
    if (!dragged) stage.setPointerCapture(event.pointerId);
    dragged = true;
    stage.classList.add("fg-dragging");
    setView({ ...view, tx: drag.tx + dx, ty: drag.ty + dy });
  });
  const endDrag = () => {
    drag = null;
    stage.classList.remove("fg-dragging");
  };
  stage.addEventListener("pointerup", endDrag);
  stage.addEventListener("pointercancel", endDrag);
  stage.addEventListener("click", (event) => {
    if (dragged) {
      dragged = false;
      return;
    }
    const element = event.target.closest?.(".fg-node");
    if (!element || !laid) return;
    if (element.dataset.loop) toggleLoop(element.dataset.loop);
    else select(element.dataset.stepId, { focus: true, from: "graph" });
  });
  stage.addEventListener(
    "wheel",
    (event) => {
      if (!laid) return;
      event.preventDefault();
      const box = stage.getBoundingClientRect();
      if (event.ctrlKey || event.metaKey) zoomBy(Math.exp(-event.deltaY * 0.002), event.clientX - box.left, event.clientY - box.top);
      else if (event.shiftKey) setView({ ...view, tx: view.tx - event.deltaY });
      else setView({ ...view, tx: view.tx - event.deltaX, ty: view.ty - event.deltaY });
    },
    { passive: false },
  );
  svg.addEventListener("keydown", onKey);

  const moveOverview = (event) => {
    if (!laid || !laid.units.length) return;
    const box = overview.getBoundingClientRect();
    const k = overview.width / box.width; // CSS pixels to the canvas's own (smaller on a phone)
    const { sx, sy } = overviewScale();
    const wx = ((event.clientX - box.left) * k - 4) / sx + laid.bounds.minX;
    const wy = ((event.clientY - box.top) * k - 4) / sy + laid.bounds.minY;
    setView({ ...view, tx: width / 2 - wx * view.scale, ty: height / 2 - wy * view.scale });
  };
  overview.addEventListener("pointerdown", (event) => {
    event.stopPropagation();
    overview.setPointerCapture(event.pointerId);
    moveOverview(event);
  });
  overview.addEventListener("pointermove", (event) => {
    if (overview.hasPointerCapture(event.pointerId)) moveOverview(event);
  });

  new ResizeObserver(() => {
    if (!laid) return;
    measureStage();
    if (!moved) firstView();
    requestDraw();
  }).observe(stage);

  function showView(which) {
    root.dataset.view = which;
    stage.hidden = which !== "graph";
    hint.hidden = which !== "graph";
    zoomButtons.hidden = which !== "graph";
    timelineBox.hidden = which !== "timeline";
    graphButton.setAttribute("aria-pressed", String(which === "graph"));
    timelineButton.setAttribute("aria-pressed", String(which === "timeline"));
    if (which === "graph") {
      measureStage();
      requestDraw();
    } else timeline.redraw();
  }

  return {
    root,
    /** Add a page of steps (creation order); laid out and drawn at the next frame. */
    append(steps) {
      flow.append(steps);
      return scheduleLayout();
    },
    /** Every page is in: the graph's name stops saying "so far". */
    finish() {
      finished = true;
      return scheduleLayout();
    },
    select: (stepId, options = {}) => select(stepId, { ...options, from: "api" }),
  };
}
