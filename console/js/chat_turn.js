// One turn of a conversation: the question, progress while it runs, then the public answer with its
// tables, references and limitations, its outcome (a FALLBACK, FAILED or CANCELLED run says so), the
// source-context line and "How this was answered" (the turn's reasoning flow). Drawn the same from a
// stored run (the runs history) and from a live stream.

import { h, plural, replace } from "/console/js/dom.js";
import { sourceIndicator } from "/console/js/chat_indicator.js";

/** Short progress labels for the API's fixed status codes. */
export const PROGRESS = {
  ROUTING: "Routing",
  ROUTED_SYSTEM_CHAT: "Answering",
  ROUTED_KNOWLEDGE_QUERY: "Knowledge question",
  ROUTED_DIAGNOSIS: "Investigating",
  RESOLVING_SOURCES: "Resolving sources",
  ANALYZING_TABLE: "Analysing the table",
  LOOKING_UP_KNOWLEDGE: "Looking up",
  COMPOSING_ANSWER: "Composing the answer",
  DIAGNOSING: "Diagnosing",
  QUERYING_DATABASE: "Querying the database",
  QUERYING_LOGS: "Querying the logs",
  CHECKING_EVIDENCE: "Checking the evidence",
  RELEASING: "Releasing",
};

const OUTCOME = {
  fallback: ["warn", "Fallback: no conclusion was released"],
  failed: ["bad", "Failed"],
  cancelled: ["warn", "Cancelled"],
  refused: ["bad", "Refused"],
};

/** The state a finished run is shown in: answer, fallback, failed or cancelled. */
export function stateOf(status, releaseOutcome) {
  if (status === "CANCELLED" || releaseOutcome === "CANCELLED") return "cancelled";
  if (status === "FAILED" || releaseOutcome === "FAILED") return "failed";
  if (status === "RUNNING") return "running";
  return releaseOutcome === "FALLBACK" ? "fallback" : "answer";
}

const FLOW_ID = /^fl_[0-9A-Z]{26}$/;

/** The link to a turn's flow, or nothing when the turn names none (capture off, or not recorded). */
export function flowLink(flowId) {
  if (typeof flowId !== "string" || !FLOW_ID.test(flowId)) return null;
  return h("a", { href: `/console/flows/${flowId}`, class: "flow-link", dataset: { flowId } }, "How this was answered");
}

function isNumber(value) {
  return typeof value === "number";
}

/** A table answer's result as a table: its rows in the plan's order, and how many of how many are shown. */
export function answerTable(table) {
  const columns = table.columns || [];
  const numeric = columns.map((_, i) => table.rows.every((row) => row[i] == null || isNumber(row[i])));
  const cut = table.rows_shown < table.total_rows;
  const caption = `${table.title}: ${cut ? `${table.rows_shown} of ${table.total_rows} rows` : plural(table.total_rows, "row")}`;
  return h(
    "div",
    { class: "answer-table", dataset: { documentId: table.document_id } },
    h(
      "table",
      {},
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, columns.map((name, i) => h("th", { scope: "col", class: numeric[i] ? "num" : null }, name)))),
      h(
        "tbody",
        {},
        table.rows.map((row) => h("tr", {}, row.map((cell, i) => h("td", { class: numeric[i] ? "num" : null }, cell == null ? "" : String(cell))))),
      ),
    ),
  );
}

function answerBlock(content) {
  const references = content.references || [];
  return [
    h("div", { class: "answer-text" }, content.text),
    (content.tables || []).map(answerTable),
    references.length
      ? h(
          "div",
          { class: "references" },
          h("h3", { class: "references-heading" }, "References"),
          h(
            "ul",
            { "aria-label": "References" },
            references.map((ref) =>
              h(
                "li",
                { dataset: { documentId: ref.document_id } },
                h("span", { class: "ref-title" }, ref.title),
                ref.version != null ? h("span", { class: "chip ref-version", "aria-label": `version ${ref.version}` }, `v${ref.version}`) : null,
              ),
            ),
          ),
        )
      : null,
    content.limitations ? h("p", { class: "limitations" }, h("strong", {}, "Limitations: "), content.limitations) : null,
  ];
}

/** A turn element; ``update`` methods change it in place as events arrive. */
export class Turn {
  constructor(query, runId = null) {
    this.codes = [];
    this.outcome = h("p", { class: "outcome" });
    this.progress = h("p", { class: "turn-progress muted" });
    this.answer = h("div", { class: "answer" });
    this.context = h("div", { class: "context" });
    this.flow = h("p", { class: "flow" });
    this.node = h(
      "li",
      { class: "turn", dataset: { state: "streaming", phase: "sent", runId: runId || "" } },
      h("p", { class: "query" }, h("span", { class: "who" }, "You: "), query),
      this.progress,
      this.answer,
      this.outcome,
      this.context,
      this.flow,
    );
  }

  /** "How this was answered": shown once the flow is written (done and error name it only then). */
  showFlow(flowId) {
    this.node.dataset.flowId = flowId || "";
    replace(this.flow, flowLink(flowId));
  }

  /** Apply one stream event (start, status, content, done, error). */
  apply(event) {
    const node = this.node;
    node.dataset.phase = event.type === "status" ? `status:${event.code}` : event.type;
    if (event.type === "start") {
      node.dataset.runId = event.run_id;
    } else if (event.type === "status") {
      this.codes.push(event.code);
      node.dataset.codes = this.codes.join(" ");
      replace(this.progress, PROGRESS[event.code] || event.code);
    } else if (event.type === "content") {
      this.showContent(event.content);
    } else if (event.type === "done") {
      this.finish(stateOf(event.status, event.release_outcome));
      this.showFlow(event.flow_id);
    } else if (event.type === "error") {
      this.finish(event.code === "CANCELLED" ? "cancelled" : "failed", event.message);
      this.showFlow(event.flow_id);
    }
  }

  showContent(content) {
    replace(this.answer, answerBlock(content));
    replace(this.context, sourceIndicator(content.source_context));
  }

  /** The turn's final state; ``message`` is shown with a failure. */
  finish(state, message) {
    this.node.dataset.state = state === "answer" ? "done" : state;
    replace(this.progress);
    const shown = OUTCOME[state];
    if (shown) {
      const [tone, label] = shown;
      replace(this.outcome, h("span", { class: `pill ${tone}` }, label), message ? h("span", { class: "outcome-message" }, ` ${message}`) : null);
    }
  }

  /** A turn as the runs history stores it. */
  static fromRun(run) {
    const turn = new Turn(run.query, run.run_id);
    if (run.content) turn.showContent(run.content);
    const state = stateOf(run.status, run.release_outcome);
    if (state === "running") {
      turn.node.dataset.state = "running";
      replace(turn.progress, "Still running");
    } else {
      turn.finish(state);
      turn.showFlow(run.flow_id); // a running turn's flow is not written yet
    }
    return turn;
  }
}
