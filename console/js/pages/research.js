// The Research console: a trigger → the library's ranked candidates (radar, Reuse, Compare), deeper
// research for the trigger, the backlog with its loop-health verdict, and the claims pending review.

import { operatorFetch } from "/console/js/api.js";
import { h, plural, problem, replace, stylesheet } from "/console/js/dom.js";
import { backlogPanel } from "/console/js/research_backlog.js";
import { candidateList } from "/console/js/research_candidates.js";
import { claimsPanel } from "/console/js/research_claims.js";
import { comparePanel } from "/console/js/research_compare.js";

const TRIGGER_TYPE = "^[a-z][a-z0-9_.\\-]{0,63}$";

/** An idempotency key for one enqueue (the API accepts [A-Za-z0-9_.:-]{8,128}). */
function newKey() {
  if (globalThis.crypto?.randomUUID) return `console-${crypto.randomUUID()}`;
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `console-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function deeperResearch(trigger, { announce, backlog }) {
  const framing = h(
    "textarea",
    { id: "deeper-framing", rows: "3", maxlength: "2000", required: true },
    `Research ${trigger.trigger_type} ${trigger.trigger_ref} further: which evidence would settle it?`,
  );
  const result = h("div", { class: "deeper-result", "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "deeper" }, "Trigger deeper research");
  let key = null; // kept across a failed attempt so a retry of the same request stays idempotent
  framing.addEventListener("input", () => {
    key = null;
  });
  const form = h(
    "form",
    { class: "panel deeper-form", "aria-labelledby": "deeper-heading" },
    h("h3", { id: "deeper-heading" }, "Deeper research"),
    h("label", { for: "deeper-framing" }, "Question for the researchers", framing),
    h("div", { class: "row" }, button),
    result,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const question = framing.value.trim();
    if (!question) {
      replace(result, h("p", { class: "problem", role: "alert" }, "Say what the research should answer."));
      framing.focus();
      return;
    }
    key ??= newKey();
    button.disabled = true;
    replace(result, "Queueing…");
    try {
      const { status, body: row } = await operatorFetch("/admin/v1/reasoning/research/deeper-request", {
        method: "POST",
        body: { idempotency_key: key, ...trigger, reason: "operator_request", question_framing: question },
      });
      key = null; // done: the next click is a new request
      replace(
        result,
        h("p", { class: "deeper-created" }, status === 201 ? "Queued a deeper-research request." : "This request was already queued."),
        h(
          "dl",
          { class: "grid", dataset: { requestId: row.request_id } },
          h("div", {}, h("dt", {}, "Request"), h("dd", { class: "mono request-id" }, row.request_id)),
          h("div", {}, h("dt", {}, "Status"), h("dd", { class: "request-status" }, row.status)),
          // The API's count of pending requests up to this one (the backlog's pending count bounds it),
          // not its ticket: a ticket numbers every request ever queued.
          h("div", {}, h("dt", {}, "Place in queue"), h("dd", { class: "queue-place" }, row.place_in_queue ?? "—")),
          h("div", {}, h("dt", {}, "Reason"), h("dd", {}, row.reason)),
        ),
      );
      announce(`Deeper research ${row.request_id} is ${row.status}.`);
      await backlog.refresh();
    } catch (error) {
      replace(result, problem(error));
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

export async function render(main, { query }) {
  stylesheet("/console/css/research.css");
  document.title = "Research · Flowledger";
  const announcer = h("p", { class: "visually-hidden", role: "status", "aria-live": "polite" });
  const announce = (text) => replace(announcer, text);
  const backlog = backlogPanel();
  const claims = claimsPanel(announce);
  const compare = comparePanel();

  const typeInput = h("input", {
    id: "trigger-type",
    name: "trigger_type",
    required: true,
    pattern: TRIGGER_TYPE,
    list: "trigger-types",
    autocomplete: "off",
    value: query.get("trigger_type") || "user_question",
    title: "lower case letters, digits, '_', '.', '-'",
  });
  const refInput = h("input", { id: "trigger-ref", name: "trigger_ref", required: true, maxlength: "256", autocomplete: "off", value: query.get("trigger_ref") || "" });
  const families = h("datalist", { id: "trigger-types" }, h("option", { value: "user_question" }));
  const results = h("div", { class: "results" });
  // The comparison shows under the candidate whose tick completed the pair (not below the whole list):
  // inserted after that tick, it moves nothing above the pointer; with fewer ticks it waits here.
  const compareHome = h("div", { class: "compare-home" }, compare.section);
  const compareSlot = h("li", { class: "compare-slot" });
  const deeper = h("div", { class: "deeper" }); // after the comparison, so ticking never moves it under the pointer
  const searchForm = h(
    "form",
    { class: "panel trigger-form", role: "search", "aria-label": "Find pathways for a trigger" },
    h(
      "div",
      { class: "row" },
      h("label", { for: "trigger-type" }, "Trigger type", typeInput),
      h("label", { for: "trigger-ref", class: "grow" }, "Trigger ref", refInput),
      h("button", { type: "submit" }, "Find pathways"),
    ),
    families,
  );

  async function search() {
    const trigger = { trigger_type: typeInput.value.trim(), trigger_ref: refInput.value.trim() };
    const address = new URL(window.location.href);
    address.search = new URLSearchParams(trigger).toString();
    window.history.replaceState(null, "", address); // a copied address reopens this search
    replace(results, h("p", { class: "muted" }, "Matching…"));
    replace(deeper);
    compare.show([]);
    compareHome.append(compare.section); // out of the old list before it goes
    compareSlot.remove();
    let picked = [];
    try {
      const { body: match } = await operatorFetch("/admin/v1/reasoning/pathways/match", { query: trigger });
      const count = match.candidates.length;
      replace(
        results,
        h("h2", { id: "candidates-heading" }, plural(count, "candidate")),
        h("p", { class: "muted" }, `For ${match.trigger_type} · ${match.trigger_ref}, ranked by the library${match.query_model ? ` (model ${match.query_model})` : ""}.`),
        candidateList(match, {
          announce,
          onPick: (ids, item) => {
            picked = ids;
            compare.show(ids);
            if (ids.length === 2) {
              compareSlot.append(compare.section);
              item.after(compareSlot);
            } else if (compareSlot.isConnected) {
              compareHome.append(compare.section);
              compareSlot.remove();
            }
          },
          onReuse: (view) => {
            if (picked.length === 2 && picked.includes(view.pathway_id)) compare.show(picked); // its radar moved
          },
        }),
      );
      replace(deeper, deeperResearch(trigger, { announce, backlog }));
      announce(`${plural(count, "candidate")} for ${match.trigger_ref}.`);
    } catch (error) {
      replace(results, problem(error));
      replace(deeper, deeperResearch(trigger, { announce, backlog })); // the library failing is no reason not to ask
    }
  }
  searchForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (searchForm.reportValidity()) search();
  });

  replace(
    main,
    h("h1", {}, "Research console"),
    announcer,
    h(
      "div",
      { class: "research-layout" },
      h("div", { class: "research-main" }, searchForm, results, compareHome, deeper),
      h("div", { class: "research-side" }, backlog.section, claims.section),
    ),
  );
  const known = operatorFetch("/admin/v1/reasoning/pathways/stats")
    .then(({ body }) => replace(families, Object.keys(body.by_trigger_type).sort().map((value) => h("option", { value }))))
    .catch(() => {}); // suggestions only: the field takes any family
  await Promise.all([backlog.refresh(), claims.load(), known, refInput.value ? search() : null]);
}
