// Ranked match candidates, in the API's order: a compact radar each (a button that expands the full
// radar), the pathway's facts, "Reuse pathway" (POST .../hit) and a Compare tick (at most two).

import { operatorFetch } from "/console/js/api.js";
import { radarSvg } from "/console/js/radar.js";
import { age, h, plural, problem, replace } from "/console/js/dom.js";
import { axesGrid, seriesOf } from "/console/js/research_radar.js";

const MAX_PICKED = 2;

/**
 * The candidate list for a MatchResult. ``onPick(ids, item)`` hears the ticked pathway ids (in tick order)
 * and the candidate whose box changed,
 * ``onReuse(view)`` a pathway's view after a hit, ``announce(text)`` a polite status line.
 */
export function candidateList(result, { onPick, onReuse, announce }) {
  const picked = [];
  const boxes = [];

  function syncBoxes() {
    // At most two ticks: the unticked boxes are disabled while two are ticked.
    for (const box of boxes) box.disabled = !box.checked && picked.length >= MAX_PICKED;
  }

  function item(candidate, index) {
    let view = candidate.pathway;
    const id = view.pathway_id;
    const headingId = `cand-${index}`;
    const fullId = `cand-full-${index}`;
    const hits = h("span", { class: "hit-count" }, String(view.hit_count));
    const lastHit = h("span", { class: "last-hit" }, view.last_hit_at ? age(view.last_hit_at) : "never");
    const status = h("div", { class: "candidate-status", "aria-live": "polite" });
    const full = h("div", { class: "radar-full", id: fullId, hidden: true });
    const toggle = h("button", {
      type: "button",
      class: "radar-toggle",
      "aria-expanded": "false",
      "aria-controls": fullId,
      "aria-label": `Show the full radar of ${view.trigger_ref}`,
    });

    function drawRadars() {
      const series = [seriesOf(view.trigger_ref, view.dimensions)];
      replace(toggle, radarSvg(series, { size: 84, compact: true, title: `Radar of ${view.trigger_ref}` }));
      if (!full.hidden) replace(full, radarSvg(series, { size: 300, title: `Radar of ${view.trigger_ref}` }), axesGrid(view.dimensions));
    }

    toggle.addEventListener("click", () => {
      const open = full.hidden;
      full.hidden = !open;
      toggle.setAttribute("aria-expanded", String(open));
      toggle.setAttribute("aria-label", `${open ? "Hide" : "Show"} the full radar of ${view.trigger_ref}`);
      drawRadars();
    });

    const box = h("input", { type: "checkbox", class: "compare-pick", "aria-describedby": headingId });
    box.addEventListener("change", () => {
      if (box.checked && picked.length >= MAX_PICKED) {
        box.checked = false; // a script or a quick double tick: the third one never counts
        return;
      }
      if (box.checked) picked.push(id);
      else picked.splice(picked.indexOf(id), 1);
      syncBoxes();
      onPick([...picked], box.closest("li.candidate"));
    });
    boxes.push(box);

    const reuse = h("button", { type: "button", class: "reuse", "aria-describedby": headingId, disabled: Boolean(view.demoted_at) }, "Reuse pathway");
    reuse.addEventListener("click", async () => {
      reuse.disabled = true;
      replace(status, "Recording the reuse…");
      try {
        const { body } = await operatorFetch(`/admin/v1/reasoning/pathways/${encodeURIComponent(id)}/hit`, { method: "POST" });
        view = body;
        replace(hits, String(view.hit_count));
        replace(lastHit, view.last_hit_at ? age(view.last_hit_at) : "never");
        drawRadars();
        replace(status, h("span", { class: "reused" }, `Reused: ${plural(view.hit_count, "hit")} now.`));
        announce(`Reused ${view.trigger_ref}: ${plural(view.hit_count, "hit")}.`);
        onReuse(view);
      } catch (error) {
        replace(status, problem(error));
      } finally {
        reuse.disabled = Boolean(view.demoted_at);
      }
    });

    drawRadars();
    return h(
      "li",
      { class: "candidate", dataset: { pathwayId: id, rank: String(index + 1) } },
      h(
        "div",
        { class: "candidate-head" },
        h("span", { class: "rank", "aria-hidden": "true" }, `#${index + 1}`),
        h("h3", { id: headingId, class: "candidate-ref" }, view.trigger_ref),
        h("span", { class: "chip reason" }, candidate.reason),
        h("span", { class: "score" }, `score ${candidate.score.toFixed(2)}`),
        view.demoted_at ? h("span", { class: "pill bad" }, "Demoted") : null,
      ),
      h(
        "div",
        { class: "candidate-body" },
        toggle,
        h(
          "div",
          { class: "candidate-facts" },
          h("p", { class: "candidate-summary" }, view.trigger_summary),
          h(
            "dl",
            { class: "grid" },
            h("div", {}, h("dt", {}, "Pathway"), h("dd", { class: "mono" }, id)),
            h("div", {}, h("dt", {}, "Outcome"), h("dd", {}, view.outcome_type)),
            h("div", {}, h("dt", {}, "Hits"), h("dd", {}, hits)),
            h("div", {}, h("dt", {}, "Last reused"), h("dd", {}, lastHit)),
            h("div", {}, h("dt", {}, "Seed flow"), h("dd", {}, h("a", { href: `/console/flows/${encodeURIComponent(view.seed_flow_id)}` }, view.seed_flow_id))),
            view.demoted_at ? h("div", {}, h("dt", {}, "Demoted"), h("dd", {}, view.demotion_reason || age(view.demoted_at))) : null,
          ),
          h("div", { class: "row actions" }, reuse, h("label", { class: "tick" }, box, "Compare"), status),
        ),
      ),
      full,
    );
  }

  if (!result.candidates.length) return h("p", { class: "muted no-candidates" }, "No pathway matches this trigger yet: trigger deeper research below.");
  return h("ol", { class: "candidates", "aria-label": `Candidates for ${result.trigger_type} ${result.trigger_ref}` }, result.candidates.map(item));
}
