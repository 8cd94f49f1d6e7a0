// The pending-review panel and the recently-resolved strip (GET/PATCH /admin/v1/reasoning/claims-pending-review):
// Resolve or Dismiss takes a claim off the panel and puts the server's terminal entry on the strip.

import { operatorFetch } from "/console/js/api.js";
import { age, h, problem, replace } from "/console/js/dom.js";

const QUEUE = "/admin/v1/reasoning/claims-pending-review";
const STRIP_SHOWN = 10; // the server's own "recently resolved" window: the last 10 of the past 24 h
const REASONS = {
  no_evidence_hits: "No evidence hits",
  weak_composite_k: "Weak composite",
  claim_rejected: "Claim rejected",
  operator_request: "Operator request",
};

function resolvedItem(entry) {
  return h(
    "li",
    { class: `resolved ${entry.status}`, dataset: { claimId: entry.claim_id, status: entry.status } },
    h("span", { class: "mono" }, entry.claim_id),
    " ",
    h("span", { class: `chip status-${entry.status}` }, entry.status === "resolved" ? "Resolved" : "Dismissed"),
    h("span", { class: "muted" }, ` ${entry.resolved_at ? age(entry.resolved_at) : ""}${entry.resolved_by ? ` by ${entry.resolved_by}` : ""}`),
    entry.note ? h("span", { class: "note" }, ` · ${entry.note}`) : null,
  );
}

/** The panel and strip; ``load()`` fetches the queue and draws both. */
export function claimsPanel(announce) {
  const pendingList = h("ul", { class: "claims", "aria-labelledby": "pending-heading" });
  const strip = h("ul", { class: "resolved-strip", "aria-labelledby": "resolved-heading" });
  const pendingBody = h("div", {}, h("p", { class: "muted" }, "Loading the claims…"));
  const stripBody = h("div", {});
  const section = h(
    "section",
    { class: "panel claims-panel", "aria-labelledby": "pending-heading" },
    h("h2", { id: "pending-heading", tabindex: "-1" }, "Pending review"),
    pendingBody,
    h("h3", { id: "resolved-heading" }, "Recently resolved"),
    stripBody,
  );
  let resolved = [];

  function drawStrip() {
    if (!resolved.length) replace(stripBody, h("p", { class: "muted strip-empty" }, "Nothing resolved in the past 24 hours."));
    else replace(stripBody, replace(strip, resolved.map(resolvedItem)));
  }

  function drawEmptyIfNone() {
    if (!pendingList.children.length) replace(pendingBody, h("p", { class: "muted pending-empty" }, "No claims are waiting for review."));
  }

  async function settle(entry, item, resolution, note, status) {
    for (const button of item.querySelectorAll("button")) button.disabled = true;
    replace(status, "Saving…");
    try {
      const body = { resolution };
      if (note.value.trim()) body.note = note.value.trim();
      const { body: done } = await operatorFetch(`${QUEUE}/${encodeURIComponent(entry.claim_id)}`, { method: "PATCH", body });
      // Focus moves to the next claim (or the heading) so a keyboard user keeps their place.
      const next = item.nextElementSibling || item.previousElementSibling;
      item.remove();
      resolved = [done, ...resolved.filter((e) => e.claim_id !== done.claim_id)].slice(0, STRIP_SHOWN);
      drawStrip();
      drawEmptyIfNone();
      (next?.querySelector("button") || section.querySelector("#pending-heading")).focus();
      announce(`Claim ${done.claim_id} ${done.status}.`);
    } catch (error) {
      replace(status, problem(error));
      for (const button of item.querySelectorAll("button")) button.disabled = false;
    }
  }

  function pendingItem(entry, index) {
    const noteId = `claim-note-${index}`;
    const headingId = `claim-${index}`;
    const note = h("input", { id: noteId, type: "text", maxlength: "1000", autocomplete: "off" });
    const status = h("div", { class: "claim-status", "aria-live": "polite" });
    const item = h(
      "li",
      { class: "claim", dataset: { claimId: entry.claim_id } },
      h("h3", { class: "claim-id mono", id: headingId }, entry.claim_id),
      h("p", { class: "claim-summary" }, entry.rejection_summary),
      h(
        "p",
        { class: "muted claim-meta" },
        `${REASONS[entry.reason] || entry.reason} · marked ${age(entry.created_at)} by ${entry.marked_by}`,
        entry.flow_id ? [" · ", h("a", { href: `/console/flows/${encodeURIComponent(entry.flow_id)}` }, `flow ${entry.flow_id}`)] : null,
      ),
      h(
        "div",
        { class: "row" },
        h("label", { for: noteId }, "Note (optional)", note),
        h("button", { type: "button", class: "resolve", "aria-describedby": headingId, onclick: () => settle(entry, item, "resolved", note, status) }, "Resolve"),
        h("button", { type: "button", class: "secondary dismiss", "aria-describedby": headingId, onclick: () => settle(entry, item, "dismissed", note, status) }, "Dismiss"),
      ),
      status,
    );
    return item;
  }

  async function load() {
    try {
      const { body: queue } = await operatorFetch(QUEUE);
      resolved = queue.recent_resolutions.slice(0, STRIP_SHOWN);
      replace(pendingList, queue.pending.map(pendingItem));
      replace(pendingBody, pendingList);
      drawEmptyIfNone();
      drawStrip();
    } catch (error) {
      replace(pendingBody, problem(error));
    }
  }
  return { section, load };
}
