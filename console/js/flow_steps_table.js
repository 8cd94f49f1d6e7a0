// The steps as a table (the graph's text alternative), virtualized: only the rows in view (and a few around
// them) are in the DOM, between two spacer rows that keep the scroll height of all of them. Rows have a fixed
// height, so where a row is comes from arithmetic, never from measuring; one scroll listener reads the box's
// scrollTop and height once a frame.
//
// Accessibility: a real table with aria-rowcount (every step plus the header) and aria-rowindex on each row,
// so a screen reader says "row 1,234 of 20,001". Each row's first cell is a button that selects the step;
// ↑ ↓ Page Up/Down, Home and End move focus between those buttons across the whole flow (the row comes into
// view first), so the keyboard reaches every step without tabbing through all of them.

import { h } from "/console/js/dom.js";

export const ROW_HEIGHT = 34; // px, also in flow.css (.steps-table tbody tr)
const OVERSCAN = 8; // rows drawn above and below the box
const COLUMNS = ["#", "Kind", "Agent", "Summary", "Latency", "Confidence", "Parents"];

function latency(ms) {
  return ms === null || ms === undefined ? "—" : `${ms} ms`;
}

function confidence(value) {
  return value === null || value === undefined ? "not rated" : value.toFixed(2);
}

/**
 * Mount an empty table in ``container``; ``onSelect(stepId)`` when a row's button is pressed.
 * ``numberOf`` maps a step id to its 1-based number. Returns ``{append(steps), select(stepId), root}``.
 */
export function mountStepsTable(container, { numberOf, onSelect }) {
  const steps = [];
  let selectedId = null;
  let first = 0;
  let last = -1;
  let frame = 0;
  const top = h("tr", { class: "spacer", "aria-hidden": "true" }, h("td", { colspan: COLUMNS.length }));
  const bottom = h("tr", { class: "spacer", "aria-hidden": "true" }, h("td", { colspan: COLUMNS.length }));
  const body = h("tbody", {}, top, bottom);
  const table = h(
    "table",
    { "aria-rowcount": "1", "aria-describedby": "steps-table-help" },
    h("caption", { class: "muted" }, "Steps in the order they were recorded; parents by step number"),
    h("thead", {}, h("tr", { "aria-rowindex": "1" }, COLUMNS.map((name) => h("th", { scope: "col" }, name)))),
    body,
  );
  const box = h("div", { class: "steps-scroll", tabindex: "-1" }, table);
  const help = h(
    "p",
    { class: "muted steps-help", id: "steps-table-help" },
    "Only the rows in view are drawn. On a step's button, ↑ ↓, Page Up/Down, Home and End move through every step.",
  );
  container.replaceChildren(help, box);

  function row(index) {
    const step = steps[index];
    const number = index + 1;
    const parents = (step.parent_step_ids || []).map((id) => `#${numberOf.get(id) ?? "?"}`).join(", ") || "—";
    return h(
      "tr",
      {
        "aria-rowindex": String(number + 1),
        class: step.step_id === selectedId ? "selected" : null,
        dataset: { stepRow: step.step_id, index: String(index) },
      },
      h("td", {}, h("button", { type: "button", class: "secondary row-button", "aria-label": `Step ${number}: ${step.step_kind} by ${step.agent}` }, String(number))),
      h("td", {}, step.step_kind),
      h("td", {}, step.agent),
      h("td", { title: step.summary_text }, step.summary_text),
      h("td", {}, latency(step.latency_ms)),
      h("td", {}, confidence(step.confidence)),
      h("td", {}, parents),
    );
  }

  /** Draw the rows the box shows (one read of its scroll position and height). */
  function draw() {
    frame = 0;
    const height = box.clientHeight || ROW_HEIGHT * 12;
    const from = Math.max(0, Math.floor(box.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const to = Math.min(steps.length - 1, Math.ceil((box.scrollTop + height) / ROW_HEIGHT) + OVERSCAN);
    if (from === first && to === last) return;
    // Rows still in the window stay the same elements, never moved (moving one would drop its focus).
    const kept = new Map();
    for (const tr of [...body.querySelectorAll("tr[data-index]")]) {
      const index = Number(tr.dataset.index);
      if (index >= from && index <= to) kept.set(index, tr);
      else tr.remove();
    }
    let next = bottom;
    for (let i = to; i >= from; i -= 1) {
      const tr = kept.get(i) || row(i);
      if (tr.nextSibling !== next) body.insertBefore(tr, next);
      next = tr;
    }
    top.firstChild.style.height = `${from * ROW_HEIGHT}px`;
    bottom.firstChild.style.height = `${Math.max(0, steps.length - 1 - to) * ROW_HEIGHT}px`;
    top.hidden = from === 0;
    bottom.hidden = to >= steps.length - 1;
    first = from;
    last = to;
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  /** Bring row ``index`` into view, draw it now, and focus its button. */
  function focusRow(index) {
    const target = Math.max(0, Math.min(steps.length - 1, index));
    const rowTop = target * ROW_HEIGHT;
    const height = box.clientHeight;
    if (rowTop < box.scrollTop) box.scrollTop = rowTop;
    else if (rowTop + ROW_HEIGHT > box.scrollTop + height - ROW_HEIGHT) box.scrollTop = rowTop + 2 * ROW_HEIGHT - height;
    if (frame) cancelAnimationFrame(frame);
    first = last = -2; // force a redraw of the window around the new position
    draw();
    body.querySelector(`tr[data-index="${target}"] .row-button`)?.focus();
  }

  box.addEventListener("scroll", schedule, { passive: true });
  // One listener each for the whole table, not one per row.
  body.addEventListener("click", (event) => {
    const button = event.target.closest(".row-button");
    if (button) onSelect(steps[Number(button.closest("tr").dataset.index)].step_id);
  });
  body.addEventListener("keydown", (event) => {
    const tr = event.target.closest?.("tr[data-index]");
    if (!tr || !event.target.classList.contains("row-button")) return;
    const index = Number(tr.dataset.index);
    const page = Math.max(1, Math.floor(box.clientHeight / ROW_HEIGHT) - 1);
    const moves = { ArrowDown: index + 1, ArrowUp: index - 1, PageDown: index + page, PageUp: index - page, Home: 0, End: steps.length - 1 };
    if (!(event.key in moves)) return;
    event.preventDefault();
    focusRow(moves[event.key]);
  });

  return {
    root: box,
    /** Add a page of steps (creation order). */
    append(page) {
      for (const step of page) steps.push(step);
      table.setAttribute("aria-rowcount", String(steps.length + 1));
      first = last = -2;
      schedule();
    },
    /** Mark ``stepId``'s row selected and scroll it into view. */
    select(stepId, index) {
      selectedId = stepId;
      for (const tr of body.querySelectorAll("tr.selected")) tr.classList.remove("selected");
      body.querySelector(`tr[data-step-row="${stepId}"]`)?.classList.add("selected");
      if (index !== undefined && index >= 0) {
        const rowTop = index * ROW_HEIGHT;
        if (rowTop < box.scrollTop || rowTop + ROW_HEIGHT > box.scrollTop + box.clientHeight) {
          box.scrollTop = Math.max(0, rowTop - box.clientHeight / 2);
          schedule();
        }
      }
    },
    get size() {
      return steps.length;
    },
  };
}
