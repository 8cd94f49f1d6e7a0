// The source-context indicator: one compact line per turn, from the answer's `source_context` only
// (which sources grounded it and how, which engine ran, what was stale, revoked or only partly read).

import { h } from "/console/js/dom.js";

const SHOWN = 5; // as the CLI's line: five sources, then a count of the rest
const NOT_REUSED = new Set(["revoked", "deleted", "changed", "failed"]);
const OUTCOME_TEXT = {
  revoked: "revoked, not reused",
  deleted: "deleted, not reused",
  changed: "changed since, not reused as it was",
  failed: "could not be read",
};

function sourceText(source) {
  const parts = [source.how];
  if (source.engine && source.engine !== "history") parts.push(source.engine);
  parts.push(OUTCOME_TEXT[source.outcome] || source.outcome);
  if (source.evidence_status === "partial") {
    parts.push(source.coverage != null ? `partial, coverage ${Math.round(source.coverage * 100)}%` : "partial");
  }
  const version = source.version != null ? ` v${source.version}` : "";
  return `${source.file_name}${version} (${parts.join(", ")})`;
}

/** The indicator line for ``context`` (null when the turn was not grounded: nothing is shown). */
export function sourceIndicator(context) {
  if (!context) return null;
  const sources = context.sources || [];
  const items = sources.slice(0, SHOWN).map((source) =>
    h(
      "span",
      {
        class: `source${NOT_REUSED.has(source.outcome) ? " not-reused" : ""}${source.evidence_status === "partial" ? " partial" : ""}`,
        dataset: { outcome: source.outcome, documentId: source.document_id },
      },
      sourceText(source),
    ),
  );
  const rest = sources.length > SHOWN ? ` +${sources.length - SHOWN} more` : "";
  const engines = context.engines?.length ? context.engines.join(" + ") : "none (answered from history)";
  return h(
    "p",
    {
      class: "source-context",
      dataset: { basis: context.basis, decision: context.decision, engines: (context.engines || []).join(" ") },
    },
    h("span", { class: "label" }, "Sources: "),
    items.length ? items.flatMap((item, i) => (i ? ["; ", item] : [item])) : `none (${context.basis})`,
    rest,
    " · ",
    h("span", { class: "engine" }, `engine ${engines}`),
  );
}
