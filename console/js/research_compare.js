// The comparison radar: two ticked candidates → POST /admin/v1/reasoning/pathways/compare → both
// polygons on one chart, the axes ranked by absolute delta, and the server's dominant pick with its reason.

import { operatorFetch } from "/console/js/api.js";
import { radarSvg } from "/console/js/radar.js";
import { h, problem, replace } from "/console/js/dom.js";
import { AXIS_LABELS, seriesOf } from "/console/js/research_radar.js";

function nameOf(view) {
  return `${view.trigger_ref} (${view.pathway_id})`;
}

function legend(first, second) {
  return h(
    "ul",
    { class: "legend", "aria-label": "Legend" },
    [first, second].map((view, n) => h("li", {}, h("span", { class: `swatch series-${n}`, "aria-hidden": "true" }), nameOf(view))),
  );
}

function deltaList(comparison) {
  return h(
    "ol",
    { class: "deltas", "aria-labelledby": "deltas-heading" },
    comparison.deltas.map((d) =>
      h(
        "li",
        { dataset: { axis: d.axis, delta: String(d.delta) } },
        h("span", { class: "axis" }, AXIS_LABELS[d.axis] || d.axis),
        ` ${d.first ?? "not rated"} → ${d.second ?? "not rated"} `,
        h("strong", {}, d.delta === null ? "no delta" : d.delta > 0 ? `+${d.delta}` : String(d.delta)),
        d.axis === "risk" && d.delta ? h("span", { class: "muted" }, d.delta > 0 ? " (second is riskier)" : " (second is safer)") : null,
      ),
    ),
  );
}

function dominance(comparison) {
  const { first, second, dominant } = comparison;
  const winner = dominant === first.pathway_id ? first : dominant === second.pathway_id ? second : null;
  return h(
    "div",
    { class: "dominant banner info", dataset: { dominant: dominant || "" } },
    h("p", { class: "dominant-pick" }, winner ? ["Dominant pick: ", h("strong", {}, nameOf(winner))] : "Neither pathway dominates."),
    h("p", { class: "dominant-reason" }, comparison.reasoning),
  );
}

/** The comparison panel; ``show([idA, idB])`` compares, ``show([])`` or one id shows the hint. */
export function comparePanel() {
  const body = h("div", { class: "compare-body" });
  const section = h(
    "section",
    { class: "panel compare", "aria-labelledby": "compare-heading" },
    h("h2", { id: "compare-heading" }, "Compare two pathways"),
    body,
  );
  let asked = 0; // the latest request wins when ticks change quickly

  async function show(ids) {
    const mine = ++asked;
    if (ids.length < 2) {
      section.classList.remove("active");
      replace(body, h("p", { class: "muted" }, ids.length ? "Tick one more candidate to compare." : "Tick two candidates to compare their radars."));
      return;
    }
    replace(body, h("p", { class: "muted" }, "Comparing…"));
    try {
      const { body: comparison } = await operatorFetch("/admin/v1/reasoning/pathways/compare", {
        method: "POST",
        body: { pathway_ids: ids },
      });
      if (mine !== asked) return;
      section.classList.add("active");
      const chart = radarSvg([seriesOf(nameOf(comparison.first), comparison.first.dimensions), seriesOf(nameOf(comparison.second), comparison.second.dimensions)], {
        size: 320,
        title: "Comparison radar",
      });
      replace(
        body,
        h(
          "div",
          { class: "compare-layout" },
          h("figure", { class: "compare-chart" }, chart, h("figcaption", {}, legend(comparison.first, comparison.second))),
          h("div", { class: "compare-text" }, dominance(comparison), h("h3", { id: "deltas-heading" }, "Differences, largest first"), deltaList(comparison)),
        ),
      );
    } catch (error) {
      if (mine === asked) replace(body, problem(error));
    }
  }
  show([]);
  return { section, show };
}
