// The research backlog panel: status chips, age call-outs, retries, recent failures and the loop-health
// pill, all from GET /admin/v1/reasoning/research/backlog (the server decides the health verdict).

import { operatorFetch } from "/console/js/api.js";
import { age, h, plural, problem, replace } from "/console/js/dom.js";

const STATUS_LABELS = {
  pending: "Pending",
  dispatched: "Dispatched",
  completed: "Completed",
  failed_voluntary: "Failed (voluntary)",
  failed_after_retries: "Failed after retries",
};
const HEALTH = {
  healthy: ["ok", "Loop healthy"],
  warn: ["warn", "Loop needs attention"],
  critical: ["bad", "Loop critical"],
};

/** "45 s", "12 min", "3 h", "2 d" for a number of seconds; "none" without one. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "none";
  if (seconds < 90) return `${seconds} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 129600) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

function healthPill(verdict) {
  const [tone, text] = HEALTH[verdict] || ["warn", `Loop ${verdict}`];
  return h("span", { class: `pill ${tone}`, dataset: { health: verdict } }, text);
}

function chips(view) {
  return h(
    "ul",
    { class: "chips", "aria-label": "Backlog rows by status" },
    Object.entries(view.status_distribution).map(([status, count]) =>
      h("li", { class: "chip", dataset: { status, count: String(count) } }, `${STATUS_LABELS[status] || status}: ${count}`),
    ),
  );
}

function ages(view) {
  const retries = Object.entries(view.retry_distribution || {});
  return h(
    "dl",
    { class: "grid callouts" },
    h("div", { dataset: { callout: "oldest-pending" } }, h("dt", {}, "Oldest pending"), h("dd", {}, duration(view.oldest_pending_age_seconds))),
    h(
      "div",
      { dataset: { callout: "oldest-dispatched" } },
      h("dt", {}, "Oldest dispatched"),
      h("dd", {}, duration(view.oldest_dispatched_age_seconds)),
    ),
    h(
      "div",
      { dataset: { callout: "retries" } },
      h("dt", {}, "Retries"),
      h("dd", {}, retries.length ? retries.map(([n, count]) => `${count} with ${plural(Number(n), "retry", "retries")}`).join(", ") : "none"),
    ),
  );
}

function failures(view) {
  if (!view.recent_failures.length) return h("p", { class: "muted failures-empty" }, "No recent failures.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "failures", "aria-labelledby": "failures-heading" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Request"), h("th", { scope: "col" }, "Status"), h("th", { scope: "col" }, "Reason"), h("th", { scope: "col" }, "When"))),
      h(
        "tbody",
        {},
        view.recent_failures.map((failure) =>
          h(
            "tr",
            { dataset: { requestId: failure.request_id } },
            h("td", { class: "mono" }, failure.request_id),
            h("td", {}, STATUS_LABELS[failure.status] || failure.status),
            h("td", {}, failure.failure_reason || "—"),
            h("td", {}, failure.completed_at ? age(failure.completed_at) : "—"),
          ),
        ),
      ),
    ),
  );
}

/** The backlog panel: its body re-renders on ``refresh()`` (after an enqueue, or on the button). */
export function backlogPanel() {
  const body = h("div", { class: "backlog-body" }, h("p", { class: "muted" }, "Loading the backlog…"));
  const pill = h("span", { class: "health" });
  const refreshButton = h("button", { type: "button", class: "secondary" }, "Refresh backlog");
  const section = h(
    "section",
    { class: "panel backlog", "aria-labelledby": "backlog-heading" },
    h("div", { class: "panel-head" }, h("h2", { id: "backlog-heading" }, "Research backlog"), pill, refreshButton),
    body,
  );

  async function refresh() {
    try {
      const { body: view } = await operatorFetch("/admin/v1/reasoning/research/backlog");
      replace(pill, healthPill(view.loop_health));
      replace(body, chips(view), ages(view), h("h3", { id: "failures-heading" }, "Recent failures"), failures(view));
    } catch (error) {
      replace(body, problem(error));
    }
  }
  refreshButton.addEventListener("click", refresh);
  return { section, refresh };
}
