// One chat turn over POST /api/chat as Server-Sent Events. EventSource cannot POST, so this is fetch
// with a streamed body: bytes are decoded as they arrive and each complete frame is handed on at once.

import { ApiError, apiUrl, userToken } from "/console/js/api.js";

/**
 * Split SSE text into frames incrementally: feed chunks, get back the frames they completed.
 * A frame is `event: <type>` and `data: <json>` lines ended by a blank line (LF or CRLF).
 */
export class SseParser {
  constructor() {
    this.buffer = "";
  }

  /** The complete frames in ``chunk`` (with what was left over from before), as {event, data}. */
  push(chunk) {
    this.buffer += chunk.replace(/\r\n?/g, "\n");
    const frames = [];
    let end = this.buffer.indexOf("\n\n");
    while (end !== -1) {
      const frame = parseFrame(this.buffer.slice(0, end));
      this.buffer = this.buffer.slice(end + 2);
      if (frame) frames.push(frame);
      end = this.buffer.indexOf("\n\n");
    }
    return frames;
  }
}

function parseFrame(text) {
  let event = "message";
  const data = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith(":")) continue; // a comment or keep-alive
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  return { event, data: JSON.parse(data.join("\n")) };
}

/**
 * Send one turn and call ``onEvent(event)`` for each event as its frame arrives. Resolves when the
 * stream ends; rejects with an ApiError for a refusal (4xx before any stream) and with the fetch's
 * AbortError when ``signal`` aborts it.
 */
export async function streamTurn(body, { signal, onEvent }) {
  const response = await fetch(await apiUrl("/api/chat"), {
    method: "POST",
    headers: {
      authorization: `Bearer ${await userToken()}`,
      "content-type": "application/json",
      accept: "text/event-stream",
    },
    body,
    signal,
  });
  if (!response.ok) {
    let problem = null;
    try {
      problem = await response.json();
    } catch {
      problem = null;
    }
    throw new ApiError(response.status, problem?.error, problem?.message, problem);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    for (const frame of parser.push(value)) onEvent(frame.data);
  }
}
