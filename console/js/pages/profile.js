// The patient's profile (/console/patient): the consent toggle for reading explanations (the stored
// choice on load, saved on change), a field that opens an explanation by its number, and, on the local
// dev server, a field to use another sign-in token in this tab.

import { config, patientFetch, setPatientToken } from "/console/js/api.js";
import { h, replace, stylesheet } from "/console/js/dom.js";

const CONSENT = "/api/reasoning/consent";

export async function render(main) {
  stylesheet("/console/css/patient.css");
  document.title = "Explanation settings · Flowledger";
  const cfg = await config().catch(() => ({}));
  replace(
    main,
    h("h1", {}, "Explanation settings"),
    h("p", {}, h("a", { href: "/console/patient/flows" }, "See my explanations")),
    await consentPanel(),
    openPanel(),
    cfg.mode === "local" ? tokenPanel() : null,
  );
}

async function consentPanel() {
  const status = h("p", { class: "patient-status", role: "status", id: "consent-status" });
  const box = h("input", { type: "checkbox", id: "consent", "aria-describedby": "consent-help consent-status" });
  const panel = h(
    "section",
    { class: "panel patient-section", "aria-labelledby": "consent-heading" },
    h("h2", { id: "consent-heading" }, "Explanations of your care"),
    h(
      "p",
      { id: "consent-help", class: "muted" },
      "When this is on, you can read, in plain words, the steps the system took before it suggested something for you.",
    ),
    h("label", { class: "patient-switch", for: "consent" }, box, h("span", {}, "Let me read explanations")),
    status,
  );
  try {
    const { body } = await patientFetch(CONSENT);
    box.checked = body.reasoning_read === true;
  } catch (error) {
    box.disabled = true;
    status.classList.add("problem");
    status.textContent = `Your choice could not be loaded: ${error.message || error}. Please reload the page.`;
    return panel;
  }
  box.addEventListener("change", () => save(box, status));
  return panel;
}

async function save(box, status) {
  const wanted = box.checked;
  box.disabled = true;
  status.classList.remove("problem");
  status.textContent = "Saving…";
  try {
    const { body } = await patientFetch(CONSENT, { method: "PUT", body: { reasoning_read: wanted } });
    box.checked = body.reasoning_read === true;
    status.textContent = box.checked ? "Saved: explanations are on." : "Saved: explanations are off.";
  } catch (error) {
    box.checked = !wanted; // the stored choice did not change
    status.classList.add("problem");
    status.textContent = `Your choice was not saved: ${error.message || error}. Please try again.`;
  } finally {
    box.disabled = false;
    box.focus();
  }
}

function openPanel() {
  const input = h("input", {
    id: "flow-number",
    name: "flow",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    placeholder: "fl_…",
  });
  const form = h(
    "form",
    {
      class: "row",
      onsubmit: (event) => {
        event.preventDefault();
        const id = input.value.trim();
        if (id) window.location.assign(`/console/patient/flows/${encodeURIComponent(id)}`);
      },
    },
    h("label", { for: "flow-number" }, "Explanation number", input),
    h("button", { type: "submit" }, "Open"),
  );
  return h(
    "section",
    { class: "panel patient-section", "aria-labelledby": "open-heading" },
    h("h2", { id: "open-heading" }, "Open an explanation"),
    h("p", { class: "muted" }, "Your care team or a message from us gives you the number of an explanation."),
    form,
  );
}

function tokenPanel() {
  const input = h("input", { id: "sign-in-token", autocomplete: "off", spellcheck: "false" });
  const use = () => {
    setPatientToken(input.value.trim());
    window.location.reload();
  };
  return h(
    "details",
    { class: "panel" },
    h("summary", {}, "Use another sign-in token"),
    h("p", { class: "muted" }, "For local use: this tab then reads explanations as the patient of that token (make one with: flowledger token --sub SUB --scopes reasoning.read --patient-id ID)."),
    h(
      "form",
      { class: "row", onsubmit: (event) => (event.preventDefault(), use()) },
      h("label", { for: "sign-in-token" }, "Sign-in token", input),
      h("button", { type: "submit" }, "Use this token"),
      h("button", { type: "button", class: "secondary", onclick: () => (setPatientToken(""), window.location.reload()) }, "Back to the demo sign-in"),
    ),
  );
}
