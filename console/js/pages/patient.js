// A patient's own explanations (/console/patient/flows): newest first, a page at a time, each opening its
// explanation; what an item says of a flow is what its explanation would (what it was about only once it
// can be read). Then one explanation (/console/patient/flows/{id}), in plain language: what it
// was about, the steps, the result, the radar with the audience labels the API sends, and the disclaimer.
// While the flow is still running (202) the page says so and checks again by itself; a refusal (403) is
// said gently. The patient narrative route allows 30 reads per 5 minutes, so the re-checks slow down.

import { ApiError, patientFetch } from "/console/js/api.js";
import { h, plural, replace, stylesheet } from "/console/js/dom.js";
import { axisWords, radarSvg } from "/console/js/radar.js";

const PROFILE = "/console/patient";
const AXIS_MAX = 7; // the API's radar axes score 0..7
const MAX_CHECKS = 40; // about 17 minutes of re-checks, then the patient asks for the next one

/** Milliseconds before re-check ``n`` (0, 1, ...): 3 s, then 2 s more each time, never over 30 s. */
export function recheckDelay(n) {
  return Math.min(30_000, 3_000 + 2_000 * n);
}

export async function render(main, { id, query }) {
  stylesheet("/console/css/patient.css");
  if (!id) return renderList(main, query);
  document.title = "Your explanation · Flowledger";
  const view = new ExplanationView(main, id);
  await view.load();
}

class ExplanationView {
  constructor(main, flowId) {
    this.main = main;
    this.flowId = flowId;
    this.checks = 0;
    this.timer = null;
  }

  async load() {
    this.show(await this.fetch());
  }

  async fetch() {
    try {
      return await patientFetch(`/api/reasoning/flows/${encodeURIComponent(this.flowId)}`);
    } catch (error) {
      return { error };
    }
  }

  show(result) {
    if (result.error) {
      this.showRefusal(result.error);
    } else if (result.status === 202) {
      this.showInProgress(result.body);
    } else {
      replace(this.main, ...narrative(result.body));
    }
  }

  showInProgress(progress) {
    const count = progress?.steps_so_far ?? 0;
    const steps = `${plural(count, "step")} so far`;
    const more = this.checks < MAX_CHECKS;
    replace(
      this.main,
      h("h1", {}, "Your explanation"),
      h(
        "div",
        { class: "banner info patient-progress", role: "status" },
        h("h2", {}, "We're still working on this"),
        h("p", {}, `The system is still taking steps (${steps}).`),
        more
          ? h("p", { class: "muted" }, "This page checks again by itself. You can leave it open.")
          : h("p", {}, "This is taking longer than usual. ", h("button", { type: "button", onclick: () => this.recheckNow() }, "Check again")),
      ),
      backLink(),
    );
    if (more) this.schedule();
  }

  showRefusal(error) {
    // A call that never reached the API (offline) is retried while we were waiting; otherwise say what happened.
    if (!(error instanceof ApiError) && this.timer !== null && this.checks < MAX_CHECKS) return this.schedule();
    replace(this.main, h("h1", {}, "Your explanation"), refusal(error), backLink());
  }

  schedule() {
    const delay = recheckDelay(this.checks);
    this.checks += 1;
    this.timer = window.setTimeout(() => this.recheck(), delay);
  }

  async recheck() {
    const result = await this.fetch();
    // Too many reads in a short while: keep the banner and wait for the next, slower check.
    if (result.error instanceof ApiError && result.error.status === 429 && this.checks < MAX_CHECKS) return this.schedule();
    this.show(result);
  }

  recheckNow() {
    this.checks = 0;
    this.recheck();
  }
}

function narrative(story) {
  return [
    h("h1", {}, "Your explanation"),
    h("section", { class: "panel patient-section", "aria-labelledby": "about" }, h("h2", { id: "about" }, "What this was about"), h("p", { class: "patient-trigger" }, story.trigger_summary)),
    h(
      "section",
      { class: "panel patient-section", "aria-labelledby": "steps" },
      h("h2", { id: "steps" }, "How the system got there"),
      story.steps.length
        ? h("ol", { class: "patient-steps" }, story.steps.map(step))
        : h("p", { class: "muted" }, "No steps were recorded."),
    ),
    h(
      "section",
      { class: "panel patient-section", "aria-labelledby": "result" },
      h("h2", { id: "result" }, "The result"),
      h("p", { class: "patient-outcome" }, story.outcome_summary || "No result was recorded."),
    ),
    story.radar?.length ? profile(story.radar) : null,
    h("p", { class: "banner gentle patient-disclaimer" }, story.disclaimer),
    backLink(),
  ];
}

function step(one) {
  return h(
    "li",
    { class: "patient-step" },
    h("p", { class: "patient-agent" }, one.agent_label),
    h("p", {}, one.summary),
    h("time", { datetime: one.at, class: "muted" }, when(one.at)),
  );
}

function when(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

/** The radar and the same facts as a list, both with the labels the API gives for patients. */
function profile(axes) {
  const svg = radarSvg([{ name: "This decision", axes }], { size: 300, title: "How this decision looks", max: AXIS_MAX });
  return h(
    "section",
    { class: "panel patient-section", "aria-labelledby": "profile" },
    h("h2", { id: "profile" }, "How this decision looks"),
    h(
      "div",
      { class: "patient-radar" },
      h("figure", {}, svg),
      h(
        "dl",
        { class: "patient-axes" },
        axes.map((a) => h("div", {}, h("dt", {}, a.label), h("dd", {}, axisWords(a, AXIS_MAX)))),
      ),
    ),
    h("p", { class: "muted" }, "Higher is stronger on every line but Caution flags, where higher means more reasons for care."),
  );
}

/** What a refused or failed read means for the patient, without the API's internals. */
function refusal(error) {
  const code = error instanceof ApiError ? error.code : null;
  const status = error instanceof ApiError ? error.status : null;
  if (code === "consent_required") {
    return gentle(
      "Explanations are turned off",
      "You have not turned on explanations of your care yet.",
      h("a", { href: PROFILE }, "Turn on explanations on your profile page"),
    );
  }
  if (code === "ask_care_team") {
    return gentle("Please ask your care team", "This explanation can only be shared with you by your care team. They can walk you through it.");
  }
  if (status === 403) {
    return gentle(
      "Please ask your care team",
      "This explanation is not available to you here. If you think it should be, your care team can help.",
    );
  }
  if (status === 404 || status === 422) {
    return gentle("We could not find this explanation", "Please check the link, or ask your care team for it.");
  }
  if (status === 401) {
    return gentle("Please sign in again", "Your sign-in has ended.", h("a", { href: PROFILE }, "Go to your profile page"));
  }
  if (status === 429) {
    return gentle("Please try again in a few minutes", "Explanations were opened many times in a short while.");
  }
  const detail = status ? `The service answered with an error (HTTP ${status}).` : "The service could not be reached.";
  return h(
    "div",
    { class: "banner gentle", role: "alert" },
    h("h2", {}, "Something went wrong"),
    h("p", {}, `We could not load this explanation. ${detail} Please try again later.`),
  );
}

function gentle(title, text, ...more) {
  return h("div", { class: "banner gentle patient-refusal", role: "status" }, h("h2", {}, title), h("p", {}, text), more.length ? h("p", {}, ...more) : null);
}

function backLink() {
  return h("p", {}, h("a", { href: LIST }, "Back to my explanations"));
}

// ---- the list ------------------------------------------------------------------------------------------

const LIST = "/console/patient/flows";
const CURSOR = /^[A-Za-z0-9_=-]{1,600}$/;

async function renderList(main, query) {
  document.title = "My explanations · Flowledger";
  const raw = query?.get("cursor") || "";
  const cursor = CURSOR.test(raw) ? raw : null;
  let page;
  try {
    page = (await patientFetch("/api/reasoning/flows", { query: { limit: 20, cursor } })).body;
  } catch (error) {
    replace(main, h("h1", {}, "My explanations"), listRefusal(error));
    return;
  }
  const items = page.flows.map(listItem);
  const nav = h(
    "nav",
    { class: "pager", "aria-label": "Older and newer explanations" },
    cursor ? h("a", { href: LIST }, "Newest explanations") : null,
    page.next_cursor ? h("a", { href: `${LIST}?cursor=${encodeURIComponent(page.next_cursor)}`, rel: "next" }, "Older explanations") : null,
  );
  replace(
    main,
    h("h1", {}, "My explanations"),
    h("p", { class: "muted" }, "What the system did before it suggested something for you, newest first."),
    items.length
      ? h("ol", { class: "patient-list" }, items)
      : h("p", { class: "empty" }, cursor ? "No older explanations." : "You have no explanations yet."),
    nav,
    h("p", {}, h("a", { href: PROFILE }, "Explanation settings")),
  );
}

function listItem(flow) {
  const href = `${LIST}/${encodeURIComponent(flow.flow_id)}`;
  const title = flow.explained
    ? flow.trigger_summary
    : flow.state === "active"
      ? "Still in progress"
      : "Ask your care team about this one";
  const status = flow.explained ? "Ready to read" : flow.state === "active" ? "In progress" : "Through your care team";
  return h(
    "li",
    { class: "patient-item" },
    h("a", { href }, title),
    h("p", { class: "muted" }, "Started ", h("time", { datetime: flow.started_at }, when(flow.started_at)), ` · ${status}`),
  );
}

function listRefusal(error) {
  const code = error instanceof ApiError ? error.code : null;
  if (code === "consent_required") {
    return gentle(
      "Explanations are turned off",
      "You have not turned on explanations of your care yet.",
      h("a", { href: PROFILE }, "Turn on explanations on your profile page"),
    );
  }
  if (error instanceof ApiError && error.status === 422) {
    return gentle("This list has changed", "Please start again from your newest explanations.", h("a", { href: LIST }, "Newest explanations"));
  }
  return refusal(error);
}
