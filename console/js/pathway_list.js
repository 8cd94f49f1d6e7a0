// The library's pathways themselves (GET /admin/v1/pathways): a filter form (family, status, trigger-ref
// prefix) and a card per pathway with its radar, its facts and its seed flow, a page at a time.

import { operatorFetch } from "/console/js/api.js";
import { radarSvg } from "/console/js/radar.js";
import { age, h, plural, problem, replace } from "/console/js/dom.js";
import { seriesOf } from "/console/js/research_radar.js";

const PAGE = 20;
// A filtered page can come back empty with a cursor (the list goes on): read on, a few pages at most.
const PAGES_PER_LOAD = 5;

function card(view) {
  const demoted = Boolean(view.demoted_at);
  const research = `/console/research?${new URLSearchParams({ trigger_type: view.trigger_type, trigger_ref: view.trigger_ref })}`;
  return h(
    "li",
    { class: "pathway-card", dataset: { pathwayId: view.pathway_id, status: demoted ? "demoted" : "active" } },
    radarSvg([seriesOf(view.trigger_ref, view.dimensions)], { size: 96, compact: true, title: `Radar of ${view.trigger_ref}` }),
    h(
      "div",
      { class: "pathway-facts" },
      h("h3", {}, h("a", { href: research }, view.trigger_ref)),
      h(
        "p",
        { class: "muted" },
        h("span", { class: `chip ${demoted ? "maturity-sparse" : "maturity-mature"}` }, demoted ? "demoted" : "active"),
        `${view.trigger_type} · ${view.outcome_type} · `,
        h("span", { class: "hits" }, plural(view.hit_count, "hit")),
        view.last_hit_at ? ` · last reused ${age(view.last_hit_at)}` : "",
      ),
      h("p", { class: "pathway-summary" }, view.trigger_summary),
      h("p", { class: "muted pathway-ids" }, "Seed flow ", h("a", { href: `/console/flows/${encodeURIComponent(view.seed_flow_id)}`, class: "mono" }, view.seed_flow_id)),
      demoted ? h("p", { class: "muted" }, `Demoted: ${view.demotion_reason || age(view.demoted_at)}`) : null,
    ),
  );
}

function field(label, control) {
  return h("label", { class: "field" }, label, control);
}

/** The list panel: ``node`` to place, ``families(names)`` to offer the known families, ``load()`` to read. */
export function pathwayList(query) {
  const family = h("select", { name: "trigger_type" }, h("option", { value: "" }, "All families"));
  const status = h(
    "select",
    { name: "status" },
    h("option", { value: "" }, "Active and demoted"),
    h("option", { value: "active" }, "Active"),
    h("option", { value: "demoted" }, "Demoted"),
  );
  const prefix = h("input", { name: "ref_prefix", maxlength: "256", autocomplete: "off", placeholder: "chat/" });
  family.value = query.get("trigger_type") || "";
  status.value = query.get("status") || "";
  prefix.value = query.get("ref_prefix") || "";
  const form = h(
    "form",
    { class: "row pathway-filters", role: "search", "aria-label": "Filter the pathways" },
    field("Trigger family", family),
    field("Status", status),
    field("Trigger ref starts with", prefix),
    h("button", { type: "submit" }, "Filter"),
  );
  const list = h("ul", { class: "pathway-cards", "aria-labelledby": "pathways-heading" });
  const summary = h("p", { class: "muted pathway-count", role: "status", "aria-live": "polite" });
  const more = h("button", { type: "button", class: "secondary more", hidden: true }, "More pathways");
  let cursor = null;
  let shown = 0;
  let known = null; // the families offered, as last drawn

  function filters() {
    const chosen = { trigger_type: family.value, status: status.value, ref_prefix: prefix.value.trim() };
    return Object.fromEntries(Object.entries(chosen).filter(([, value]) => value));
  }

  async function load(fresh) {
    if (fresh) {
      cursor = null;
      shown = 0;
      list.replaceChildren();
    }
    more.disabled = true;
    try {
      let pages = 0;
      let added = 0;
      do {
        const { body } = await operatorFetch("/admin/v1/pathways", { query: { ...filters(), limit: PAGE, cursor } });
        list.append(...body.pathways.map(card));
        added += body.pathways.length;
        cursor = body.next_cursor;
        pages += 1;
      } while (cursor && !added && pages < PAGES_PER_LOAD);
      shown += added;
      replace(summary, shown ? `${plural(shown, "pathway")} shown${cursor ? "; more may follow" : ""}.` : cursor ? "None yet; more may follow." : "No pathway matches.");
    } catch (error) {
      replace(summary, problem(error));
    } finally {
      more.hidden = !cursor;
      more.disabled = false;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const address = new URL(window.location.href);
    address.search = new URLSearchParams(filters()).toString();
    window.history.replaceState(null, "", address); // a copied address reopens this filter
    load(true);
  });
  more.addEventListener("click", () => load(false));

  const node = h(
    "section",
    { class: "panel pathways-list", "aria-labelledby": "pathways-heading" },
    h("h2", { id: "pathways-heading" }, "Pathways"),
    form,
    summary,
    list,
    more,
  );
  return {
    node,
    load: () => load(true),
    families(names) {
      if (names.join("\n") === known) return; // unchanged: a select being used is left alone
      known = names.join("\n");
      const chosen = family.value;
      replace(family, h("option", { value: "" }, "All families"), names.map((name) => h("option", { value: name }, name)));
      if (chosen && !names.includes(chosen)) family.append(h("option", { value: chosen }, chosen));
      family.value = chosen;
    },
  };
}
