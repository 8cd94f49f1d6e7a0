// The chat page, the reference client of /api/chat: the caller's sessions, the selected session's turns
// (from the runs history), new turns streamed over POST /api/chat, cancel, the selection panel, the
// per-turn source-context line and uploads. The request body is built from state only.

import { userFetch } from "/console/js/api.js";
import { age, h, problem, replace, stylesheet } from "/console/js/dom.js";
import { SelectionPanel, newSelection, sourceFields } from "/console/js/chat_panel.js";
import { streamTurn } from "/console/js/chat_stream.js";
import { PROGRESS, Turn, stateOf } from "/console/js/chat_turn.js";
import { UploadForm } from "/console/js/chat_upload.js";

const SESSION = /^ses_[0-9A-Z]{26}$/;
const SESSIONS_PAGE = 20;
const RUNS_PAGE = 20;
const FINAL_LABEL = { done: "Answered", fallback: "Fallback", failed: "Failed", cancelled: "Cancelled", refused: "Refused" };
// As chat.css stacks the page: below this width the conversation list starts folded, after the message box.
const NARROW = "(max-width: 700px)";

/** The bytes of one chat request: the query, the session, and the selection's source fields, in that order. */
export function requestBody(state, query) {
  return JSON.stringify({
    query,
    ...(state.sessionId ? { session_id: state.sessionId } : {}),
    ...sourceFields(state.selection),
  });
}

function sessionList(state) {
  const list = h("ul", { class: "session-list" });
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "More conversations");
  let cursor = null;
  async function load() {
    try {
      const { body } = await userFetch("/api/chat/sessions", { query: { limit: SESSIONS_PAGE, cursor } });
      for (const session of body.sessions) {
        const here = session.session_id === state.sessionId;
        list.append(
          h(
            "li",
            { dataset: { sessionId: session.session_id } },
            h(
              "a",
              { href: `/console/chat?session=${encodeURIComponent(session.session_id)}`, "aria-current": here ? "page" : null },
              h("span", { class: "session-title" }, session.title || session.session_id),
              h("span", { class: "muted session-age" }, age(session.last_active_at)),
            ),
          ),
        );
      }
      cursor = body.next_cursor;
      more.hidden = !cursor;
      if (!list.children.length) list.append(h("li", { class: "muted" }, "No conversations yet."));
    } catch (error) {
      list.append(h("li", {}, problem(error)));
    }
  }
  more.addEventListener("click", load);
  const node = h(
    "nav",
    { class: "sessions panel", "aria-labelledby": "sessions-heading" },
    h(
      "details",
      { open: !window.matchMedia(NARROW).matches },
      h("summary", {}, h("h2", { id: "sessions-heading" }, "Conversations")),
      h("p", {}, h("a", { href: "/console/chat", class: "new-session" }, "New conversation")),
      list,
      more,
    ),
  );
  return {
    node,
    load,
    reload: () => {
      cursor = null;
      list.replaceChildren();
      return load();
    },
  };
}

function turnHistory(state, turns) {
  const earlier = h("button", { type: "button", class: "secondary earlier", hidden: true }, "Earlier turns");
  let cursor = null;
  async function load() {
    const { body } = await userFetch(`/api/chat/sessions/${state.sessionId}/runs`, { query: { limit: RUNS_PAGE, cursor } });
    // Newest first from the API; a conversation reads oldest first, so this page goes above what is shown.
    const nodes = body.runs.map((run) => Turn.fromRun(run).node).reverse();
    turns.prepend(...nodes);
    cursor = body.next_cursor;
    earlier.hidden = !cursor;
  }
  earlier.addEventListener("click", () => load().catch((error) => earlier.after(problem(error))));
  return { earlier, load };
}

export async function render(main, { query }) {
  stylesheet("/console/css/chat.css");
  document.title = "Chat · Flowledger";
  const wanted = query.get("session");
  const state = { sessionId: wanted && SESSION.test(wanted) ? wanted : null, selection: newSelection(), running: null };

  const live = h("p", { id: "chat-progress", class: "progress", role: "status", "aria-live": "polite", "aria-atomic": "true" });
  const turns = h("ol", { class: "turns", "aria-label": "Turns of this conversation" });
  const input = h("textarea", { id: "chat-input", rows: "3", maxlength: "4000", required: true });
  const sendButton = h("button", { type: "submit", class: "send" }, "Send");
  const cancelButton = h("button", { type: "button", class: "secondary cancel", disabled: true }, "Cancel");
  const toggle = h("button", { type: "button", class: "secondary panel-toggle", "aria-expanded": "false", "aria-controls": "chat-panel" }, "Sources");
  const formProblem = h("div", { class: "form-problem" });

  const sessions = sessionList(state);
  const history = turnHistory(state, turns);
  const panel = new SelectionPanel(state.selection, {});
  const upload = new UploadForm({
    onUploaded: async (document) => {
      await panel.load();
      upload.setWorkspaces(panel.workspaces);
      if (document) panel.select(document.document_id);
    },
  });
  panel.node.append(upload.node);

  toggle.addEventListener("click", () => {
    // Only visibility changes: the selection state, and so the request, stays as it is.
    panel.node.hidden = !panel.node.hidden;
    toggle.setAttribute("aria-expanded", String(!panel.node.hidden));
  });

  function announce(text) {
    replace(live, text);
  }

  async function finishCancelled(run) {
    // The cancel route answered 409: the run ended first. Show what it really ended as.
    try {
      const { body } = await userFetch(`/api/chat/sessions/${state.sessionId}/runs`, { query: { limit: RUNS_PAGE } });
      const stored = body.runs.find((r) => r.run_id === run.runId);
      if (stored) {
        if (stored.content) run.turn.showContent(stored.content);
        run.turn.finish(stateOf(stored.status, stored.release_outcome));
      }
    } catch (error) {
      run.turn.finish("failed", error.message);
    }
  }

  async function cancel() {
    const run = state.running;
    if (!run) return;
    cancelButton.disabled = true;
    run.cancelling = true;
    announce("Cancelling");
    let ended = false;
    if (run.runId) {
      try {
        await userFetch(`/api/chat/runs/${run.runId}/cancel`, { method: "POST" });
        run.turn.finish("cancelled");
      } catch (error) {
        if (error.status === 409) ended = true;
        else run.turn.finish("failed", error.message);
      }
    }
    run.controller.abort(); // the stream too: nothing more is read, and the server sees the client go
    if (!run.runId) run.turn.finish("cancelled"); // no run id yet: the disconnect cancels it on the server
    if (ended) await finishCancelled(run);
    announce(FINAL_LABEL[run.turn.node.dataset.state] || "Cancelled");
  }

  async function send() {
    const text = input.value;
    replace(formProblem);
    if (!text.trim()) {
      replace(formProblem, problem(new Error("Write a message first.")));
      input.focus();
      return;
    }
    const s = state.selection;
    if (s.action === "compare" && (!s.source || !s.documentIds.some((id) => id !== s.source))) {
      replace(formProblem, problem(new Error("Compare needs a source document and at least one checked target (open Sources).")));
      return;
    }
    const body = requestBody(state, text);
    const turn = new Turn(text);
    turns.append(turn.node);
    const run = { turn, controller: new AbortController(), runId: null, cancelling: false };
    state.running = run;
    sendButton.disabled = true;
    cancelButton.disabled = false;
    announce("Sending");
    input.value = "";
    try {
      await streamTurn(body, {
        signal: run.controller.signal,
        onEvent: (event) => {
          if (run.cancelling) return;
          turn.apply(event);
          if (event.type === "start") {
            run.runId = event.run_id;
            if (state.sessionId !== event.session_id) {
              state.sessionId = event.session_id;
              window.history.replaceState(null, "", `/console/chat?session=${encodeURIComponent(event.session_id)}`);
            }
          } else if (event.type === "status") {
            announce(PROGRESS[event.code] || event.code);
          } else if (event.type === "done" || event.type === "error") {
            announce(FINAL_LABEL[turn.node.dataset.state] || "Done");
          }
        },
      });
      if (!run.cancelling && turn.node.dataset.state === "streaming") {
        turn.finish("failed", "the stream ended before the turn did");
        announce("Failed");
      }
    } catch (error) {
      if (error.name !== "AbortError") {
        turn.finish(error.status ? "refused" : "failed", error.status ? `${error.message} (HTTP ${error.status})` : error.message);
        announce(FINAL_LABEL[turn.node.dataset.state]);
      }
    } finally {
      if (state.running === run) state.running = null;
      sendButton.disabled = false;
      cancelButton.disabled = true;
      sessions.reload();
    }
  }

  const form = h(
    "form",
    { class: "composer", "aria-label": "New message" },
    h("label", { for: "chat-input" }, "Message", input),
    h("div", { class: "row" }, sendButton, cancelButton, toggle),
    formProblem,
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  input.addEventListener("keydown", (e) => {
    // Enter sends, Shift+Enter is a new line (as chat boxes do).
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (!state.running) send();
    }
  });
  cancelButton.addEventListener("click", cancel);

  replace(
    main,
    h("h1", {}, "Chat"),
    h(
      "div",
      { class: "chat-layout" },
      // The conversation comes first (on a phone the message box is on screen at once); chat.css puts the
      // list beside it on wide screens.
      h(
        "section",
        { class: "conversation", "aria-labelledby": "conversation-heading" },
        h("h2", { id: "conversation-heading" }, state.sessionId ? "Conversation" : "New conversation"),
        history.earlier,
        turns,
        live,
        form,
        panel.node,
      ),
      sessions.node,
    ),
  );
  input.focus(); // the page is for writing: no Tab through the header and the list to reach the box
  const loading = [sessions.load(), panel.load().then(() => upload.setWorkspaces(panel.workspaces))];
  if (state.sessionId) loading.push(history.load().catch((error) => turns.before(problem(error))));
  await Promise.all(loading);
}
