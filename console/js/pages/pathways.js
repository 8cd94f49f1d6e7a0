// The Pathway library: the pathways themselves, filtered, each with its radar (pathway_list.js), then
// totals, embedding models, demotions, the most reused pathways and each trigger family's maturity, from
// GET /admin/v1/reasoning/pathways/stats. The statistics refresh in place (a button, and every ~15 s while
// the tab is visible; the button reloads the list too): only they re-render, and the update is announced politely.

import { operatorFetch } from "/console/js/api.js";
import { h, replace, stylesheet } from "/console/js/dom.js";
import { pathwayList } from "/console/js/pathway_list.js";

const EVERY_SECONDS = 15;
const TOP_SHOWN = 5;

function table(caption, headings, rows, empty) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, headings.map((text) => h("th", { scope: "col" }, text)))),
      h("tbody", {}, rows),
    ),
  );
}

function totals(stats) {
  const cell = (key, label, value) => h("div", { dataset: { total: key } }, h("dt", {}, label), h("dd", {}, String(value)));
  return h(
    "section",
    { class: "panel totals", "aria-labelledby": "totals-heading" },
    h("h2", { id: "totals-heading" }, "Totals"),
    h("dl", { class: "grid" }, cell("total", "Pathways", stats.total), cell("active", "Active", stats.active), cell("embedded", "Embedded", stats.embedded), cell("demoted", "Demoted", stats.demoted)),
  );
}

function byModel(stats) {
  const degraded = new Set(stats.degraded_models || []);
  const rows = Object.entries(stats.by_model)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([model, count]) =>
      h("tr", { dataset: { model } }, h("td", { class: "mono" }, model), h("td", {}, String(count)), h("td", {}, degraded.has(model) ? h("span", { class: "chip maturity-sparse" }, "degraded") : "full")),
    );
  return h(
    "section",
    { class: "panel by-model", "aria-labelledby": "models-heading" },
    h("h2", { id: "models-heading" }, "By embedding model"),
    table("Pathways by embedding model", ["Model", "Pathways", "Vectors"], rows, "No pathway is embedded yet."),
  );
}

function topHits(stats) {
  const rows = stats.top_hits.slice(0, TOP_SHOWN).map((top, n) =>
    h("tr", { dataset: { pathwayId: top.pathway_id } }, h("td", {}, String(n + 1)), h("td", { class: "mono" }, top.pathway_id), h("td", {}, top.trigger_type), h("td", { class: "hits" }, String(top.hit_count))),
  );
  return h(
    "section",
    { class: "panel top-hits", "aria-labelledby": "top-heading" },
    h("h2", { id: "top-heading" }, `Top ${TOP_SHOWN} by reuse`),
    table("The most reused active pathways", ["#", "Pathway", "Trigger type", "Hits"], rows, "No pathway has been reused yet."),
  );
}

function maturity(stats) {
  const families = [...new Set([...Object.keys(stats.by_trigger_type), ...Object.keys(stats.maturity_by_trigger_type)])].sort();
  const rows = families.map((family) => {
    const level = stats.maturity_by_trigger_type[family] || "sparse";
    const research = `/console/research?${new URLSearchParams({ trigger_type: family })}`;
    return h(
      "tr",
      { dataset: { family, maturity: level } },
      h("td", {}, h("a", { href: research, "aria-label": `${family}: open in the Research console` }, family)),
      h("td", {}, String(stats.by_trigger_type[family] ?? 0)),
      h("td", {}, h("span", { class: `chip maturity-${level}` }, level)),
    );
  });
  return h(
    "section",
    { class: "panel maturity", "aria-labelledby": "maturity-heading" },
    h("h2", { id: "maturity-heading" }, "Maturity per trigger family"),
    table("Maturity per trigger family", ["Trigger family", "Active pathways", "Maturity"], rows, "No trigger family has a pathway yet."),
    h("p", { class: "muted" }, "Mature: at least 5 active pathways, one reused 3 times or more. Growing: at least one active. Sparse: none."),
  );
}

function clock(date) {
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}

export async function render(main, { query }) {
  stylesheet("/console/css/research.css");
  document.title = "Pathways · Flowledger";
  // ?every=N (seconds, at least 1) changes the cadence: the browser tests use it to see one automatic refresh.
  const every = Math.max(1, Number(query.get("every")) || EVERY_SECONDS);
  const data = h("div", { class: "library-data" });
  const updated = h("p", { class: "updated muted", role: "status", "aria-live": "polite" });
  const refreshButton = h("button", { type: "button", class: "secondary refresh" }, "Refresh");
  const pathways = pathwayList(query);
  let inFlight = null;

  async function refresh() {
    if (inFlight) return inFlight; // a tick during a slow call joins it rather than racing it
    inFlight = (async () => {
      try {
        const { body: stats } = await operatorFetch("/admin/v1/reasoning/pathways/stats");
        replace(data, totals(stats), h("div", { class: "library-tables" }, byModel(stats), topHits(stats), maturity(stats)));
        data.dataset.total = String(stats.total);
        pathways.families(Object.keys(stats.by_trigger_type).sort());
        replace(updated, `Updated ${clock(new Date())}`);
      } catch (error) {
        // A span, not problem()'s paragraph: this sits inside the status line.
        replace(updated, h("span", { class: "problem" }, `Refresh failed: ${error.message || error}${error.status ? ` (HTTP ${error.status})` : ""}`));
      } finally {
        inFlight = null;
      }
    })();
    return inFlight;
  }
  refreshButton.addEventListener("click", () => Promise.all([refresh(), pathways.load()]));

  replace(
    main,
    h("h1", {}, "Pathway library"),
    h("div", { class: "library-bar" }, refreshButton, h("span", { class: "muted" }, `Statistics refresh every ${every} s.`), updated),
    pathways.node,
    data,
  );
  await Promise.all([refresh(), pathways.load()]);
  const timer = setInterval(() => {
    if (!data.isConnected) clearInterval(timer); // the page was replaced
    else if (!document.hidden) refresh();
  }, every * 1000);
}
