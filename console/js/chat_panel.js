// The selection panel: the workspaces and documents the caller may read, multi-select, all documents,
// the action mode (compare with an explicit source and targets) and "include prior sources".
// Every control writes to the one `selection` state object; the request is built from that state, never
// from the DOM, so opening or closing the panel (it is only hidden) cannot change what is sent.

import { userFetch } from "/console/js/api.js";
import { h, problem, replace } from "/console/js/dom.js";

const PAGE = 100; // the documents API's largest page; a workspace with more shows its newest 100

/** A fresh selection: relevance, chat, nothing selected. */
export function newSelection() {
  return { mode: "relevance", documentIds: [], action: "chat", source: null, includePrior: false };
}

/** The source fields of a chat request for ``selection`` (selection_mode always explicit). */
export function sourceFields(selection) {
  if (selection.action === "compare") {
    const targets = selection.documentIds.filter((id) => id !== selection.source);
    return { selection_mode: "selected", action_mode: "compare", source: selection.source, targets };
  }
  const fields = { selection_mode: selection.mode, action_mode: selection.action };
  if (selection.mode === "selected") {
    fields.document_ids = [...selection.documentIds];
    if (selection.includePrior) fields.include_prior = true;
  }
  return fields;
}

const MODES = [
  ["relevance", "Relevant documents (search what I can read)"],
  ["selected", "Only the documents I check"],
  ["all", "All documents"],
  ["history", "This conversation's sources"],
];
const ACTIONS = [
  ["chat", "Chat"],
  ["search", "Search"],
  ["analyze", "Analyze"],
  ["compare", "Compare"],
];

/** The panel: ``node`` to place, ``load()`` to (re)read the catalog, ``documents`` once loaded. */
export class SelectionPanel {
  constructor(selection, { onChange }) {
    this.selection = selection;
    this.onChange = onChange;
    this.documents = new Map();
    this.workspaces = [];
    this.catalog = h("div", { class: "catalog" }, h("p", { class: "muted" }, "Loading your documents…"));
    this.modeInputs = MODES.map(([value, label]) =>
      h("input", { type: "radio", name: "selection-mode", value, id: `mode-${value}`, onchange: () => this.setMode(value) }),
    );
    this.action = h(
      "select",
      { id: "action-mode", onchange: (e) => this.setAction(e.target.value) },
      ACTIONS.map(([value, label]) => h("option", { value }, label)),
    );
    this.source = h("select", { id: "compare-source", onchange: (e) => this.setSource(e.target.value) });
    this.compare = h(
      "div",
      { class: "compare", hidden: true },
      h("label", { for: "compare-source" }, "Compare this document", this.source),
      h("p", { class: "muted" }, "with the documents checked below (its targets)."),
    );
    this.includePrior = h("input", {
      type: "checkbox",
      id: "include-prior",
      onchange: (e) => {
        this.selection.includePrior = e.target.checked;
        this.changed();
      },
    });
    this.summary = h("p", { class: "selection-summary", role: "status" });
    this.node = h(
      "section",
      { id: "chat-panel", class: "panel chat-panel", "aria-labelledby": "panel-heading", hidden: true },
      h("h2", { id: "panel-heading" }, "Sources"),
      h(
        "fieldset",
        { class: "modes" },
        h("legend", {}, "Answer from"),
        MODES.map(([value, label], i) => h("div", { class: "choice" }, this.modeInputs[i], h("label", { for: `mode-${value}` }, label))),
      ),
      h("label", { for: "action-mode" }, "Action", this.action),
      this.compare,
      h("div", { class: "choice" }, this.includePrior, h("label", { for: "include-prior" }, "Also use the previous turn's sources")),
      this.summary,
      this.catalog,
    );
    this.sync();
  }

  setMode(mode) {
    this.selection.mode = mode;
    if (mode !== "selected") {
      // Another basis: a checked document would otherwise linger unseen in the state.
      this.selection.documentIds = [];
      this.selection.includePrior = false;
    }
    this.changed();
  }

  setAction(action) {
    this.selection.action = action;
    if (action === "compare") this.selection.includePrior = false;
    this.changed();
  }

  setSource(id) {
    this.selection.source = id || null;
    this.changed();
  }

  toggle(id, checked) {
    const ids = this.selection.documentIds.filter((d) => d !== id);
    if (checked) ids.push(id);
    this.selection.documentIds = ids;
    if (ids.length && this.selection.mode !== "selected") this.selection.mode = "selected";
    if (!ids.length && this.selection.mode === "selected") this.selection.mode = "relevance";
    this.changed();
  }

  /** Check ``id`` (an upload just made), as if the user had. */
  select(id) {
    if (!this.selection.documentIds.includes(id)) this.toggle(id, true);
  }

  changed() {
    this.sync();
    this.onChange?.();
  }

  /** Make every control show the state (the state is the truth; the controls only mirror it). */
  sync() {
    const s = this.selection;
    for (const input of this.modeInputs) input.checked = input.value === s.mode;
    this.action.value = s.action;
    this.compare.hidden = s.action !== "compare";
    this.includePrior.checked = s.includePrior;
    this.includePrior.disabled = s.mode !== "selected" || s.action === "compare";
    for (const box of this.catalog.querySelectorAll("input[type=checkbox]")) box.checked = s.documentIds.includes(box.value);
    if (s.action === "compare") this.source.value = s.source || "";
    replace(this.summary, this.describe());
  }

  /** A short sentence of what the next message will be grounded on. */
  describe() {
    const s = this.selection;
    const name = (id) => this.documents.get(id)?.file_name || id;
    if (s.action === "compare") {
      const targets = s.documentIds.filter((id) => id !== s.source);
      if (!s.source || !targets.length) return "Compare needs a source and at least one checked target.";
      return `Compare ${name(s.source)} with ${targets.map(name).join(", ")}.`;
    }
    const action = ACTIONS.find(([v]) => v === s.action)[1];
    if (s.mode === "selected") return `${action} over ${s.documentIds.map(name).join(", ")}${s.includePrior ? ", plus the previous sources" : ""}.`;
    return `${action}: ${MODES.find(([v]) => v === s.mode)[1]}.`;
  }

  /** Read the workspaces and their documents the caller may read. */
  async load() {
    try {
      const { body } = await userFetch("/api/workspaces", { query: { limit: PAGE } });
      this.workspaces = body.workspaces;
      const pages = await Promise.all(
        this.workspaces.map((w) => userFetch("/api/documents", { query: { workspace_id: w.workspace_id, limit: PAGE } })),
      );
      this.documents = new Map();
      const groups = this.workspaces.map((workspace, i) => {
        const documents = pages[i].body.documents;
        for (const d of documents) this.documents.set(d.document_id, d);
        return this.workspaceGroup(workspace, documents);
      });
      replace(this.catalog, groups.length ? groups : h("p", { class: "muted" }, "No workspaces yet."));
      replace(
        this.source,
        h("option", { value: "" }, "Choose a document"),
        [...this.documents.values()].map((d) => h("option", { value: d.document_id }, d.file_name)),
      );
      this.sync();
    } catch (error) {
      replace(this.catalog, problem(error));
    }
  }

  workspaceGroup(workspace, documents) {
    const role = workspace.role ? `, ${workspace.role}` : "";
    return h(
      "fieldset",
      { class: "workspace", dataset: { workspaceId: workspace.workspace_id } },
      h("legend", {}, `${workspace.name} (${workspace.kind}${role})`),
      documents.length
        ? documents.map((d) => {
            const id = `doc-${d.document_id}`;
            const ready = d.current_version != null;
            return h(
              "div",
              { class: "choice" },
              h("input", {
                type: "checkbox",
                id,
                value: d.document_id,
                disabled: !ready,
                onchange: (e) => this.toggle(d.document_id, e.target.checked),
              }),
              h("label", { for: id }, `${d.file_name} `, h("span", { class: "muted" }, ready ? `${d.kind}, v${d.current_version}` : "uploading")),
            );
          })
        : h("p", { class: "muted" }, "No documents."),
    );
  }
}
