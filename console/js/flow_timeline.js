// The timeline (waterfall) view of a flow: one row a step in creation order, a bar from when the step started to
// when it was recorded. A step is recorded when it is done, so its bar ends at created_at and lasts latency_ms;
// a step without a latency is a tick at created_at, its length shown as "—". Virtualized: only the rows in view
// (and the focused one) are in the DOM. One Tab stop: the focused row; arrows, Home/End, Page Up/Down move it.

import { h } from "/console/js/dom.js";

const ROW = 28;
const OVERSCAN = 8;

function latencyText(ms) {
  return ms === null || ms === undefined ? "—" : `${Math.round(ms)} ms`;
}

function spanText(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** Mount the timeline in ``box``; ``onSelect(index)`` when a row is chosen, ``label(index)`` names a step. */
export function mountTimeline(box, { onSelect, label }) {
  const axis = h("div", { class: "fg-axis", "aria-hidden": "true" });
  const rows = h("div", { class: "fg-rows" });
  const list = h("div", { class: "fg-scroll", role: "listbox", "aria-label": "Steps on a timeline, in the order they were recorded" }, rows);
  box.append(axis, list);
  let flow = null;
  let ends = new Float64Array(0);
  let t0 = Infinity;
  let t1 = -Infinity;
  let active = 0;
  let selected = -1;
  const shown = new Map(); // index -> row element
  let pending = false;

  function measure() {
    const n = flow.size;
    const from = ends.length;
    const grown = new Float64Array(n);
    grown.set(ends);
    for (let i = from; i < n; i += 1) {
      const step = flow.steps[i];
      const end = Date.parse(step.created_at);
      grown[i] = end;
      if (!Number.isFinite(end)) continue;
      const start = end - (step.latency_ms || 0);
      if (start < t0) t0 = start;
      if (end > t1) t1 = end;
    }
    ends = grown;
  }

  function row(i) {
    const step = flow.steps[i];
    const span = Math.max(1, t1 - t0);
    const end = ends[i];
    const length = step.latency_ms || 0;
    const left = Number.isFinite(end) ? ((end - length - t0) / span) * 100 : 0;
    const width = (length / span) * 100;
    const bar = h("span", { class: step.latency_ms === null || step.latency_ms === undefined ? "fg-bar fg-tick" : "fg-bar" });
    // Through the CSSOM: the console's CSP (style-src 'self') refuses style attributes.
    bar.style.left = `${left.toFixed(3)}%`;
    bar.style.width = `${width.toFixed(3)}%`;
    const element = h(
      "div",
      {
        class: "fg-row",
        role: "option",
        id: `fg-row-${i}`,
        tabindex: i === active ? "0" : "-1",
        "aria-selected": i === selected ? "true" : "false",
        "aria-label": `${label(i)}. Latency ${latencyText(step.latency_ms)}.`,
        dataset: { index: String(i), stepId: step.step_id },
      },
      h("span", { class: "fg-row-name" }, `#${i + 1} ${step.step_kind} · ${step.agent}`),
      h("span", { class: "fg-track" }, bar),
      h("span", { class: "fg-row-latency" }, latencyText(step.latency_ms)),
    );
    element.style.top = `${i * ROW}px`;
    return element;
  }

  function draw() {
    pending = false;
    if (!flow || box.hidden) return;
    const n = flow.size;
    rows.style.height = `${n * ROW}px`;
    const first = Math.max(0, Math.floor(list.scrollTop / ROW) - OVERSCAN);
    const last = Math.min(n - 1, Math.ceil((list.scrollTop + list.clientHeight) / ROW) + OVERSCAN);
    for (const [i, element] of shown) {
      if ((i < first || i > last) && i !== active) {
        element.remove();
        shown.delete(i);
      }
    }
    for (let i = first; i <= last; i += 1) if (!shown.has(i)) shown.set(i, rows.appendChild(row(i)));
    if (n && !shown.has(active)) shown.set(active, rows.appendChild(row(active)));
    const span = Number.isFinite(t1 - t0) ? t1 - t0 : 0;
    axis.textContent = n ? `0 … ${spanText(span)} (bars end when a step was recorded and last its latency)` : "";
  }

  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(draw);
  }

  function refresh() {
    for (const element of shown.values()) element.remove();
    shown.clear();
    schedule();
  }

  function moveTo(i, { focus = true } = {}) {
    if (!flow || !flow.size) return;
    const target = Math.max(0, Math.min(flow.size - 1, i));
    const old = shown.get(active);
    if (old) old.tabIndex = -1;
    active = target;
    const top = target * ROW;
    if (top < list.scrollTop) list.scrollTop = top;
    else if (top + ROW > list.scrollTop + list.clientHeight) list.scrollTop = top + ROW - list.clientHeight;
    draw();
    const element = shown.get(active);
    if (!element) return; // hidden: drawn when shown
    element.tabIndex = 0;
    if (focus) element.focus({ preventScroll: true });
  }

  list.addEventListener("scroll", schedule, { passive: true });
  list.addEventListener("click", (event) => {
    const element = event.target.closest(".fg-row");
    if (!element) return;
    moveTo(Number(element.dataset.index));
    onSelect(active);
  });
  list.addEventListener("keydown", (event) => {
    const page = Math.max(1, Math.floor(list.clientHeight / ROW) - 1);
    const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page };
    if (event.key in moves) moveTo(active + moves[event.key]);
    else if (event.key === "Home") moveTo(0);
    else if (event.key === "End") moveTo(flow.size - 1);
    else if (event.key === "Enter" || event.key === " ") onSelect(active);
    else return;
    event.preventDefault();
  });

  return {
    /** New steps were appended to ``steps`` (a FlowSteps); a wider time span redraws every row. */
    update(steps) {
      flow = steps;
      const before = [t0, t1];
      measure();
      if (before[0] !== t0 || before[1] !== t1) refresh();
      else schedule();
    },
    /** Mark row ``i`` selected (and make it the focused row). */
    select(i, { focus = false } = {}) {
      const old = shown.get(selected);
      if (old) old.setAttribute("aria-selected", "false");
      selected = i;
      moveTo(i, { focus });
      shown.get(i)?.setAttribute("aria-selected", "true");
    },
    redraw: schedule,
    focus: () => moveTo(active),
  };
}
