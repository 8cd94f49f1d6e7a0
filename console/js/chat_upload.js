// Uploads into a chosen workspace, with progress. A small file travels inline (content_base64, within
// the API's 256 KiB request bound); a larger one is declared (size, SHA-256), PUT to the presigned URL
// the documents API answers with, then completed, which checks it and converts or indexes it.
// The PUT goes to the storage endpoint, another origin: the console's CSP (connect-src) and the documents
// bucket's CORS (PUT from the console's origins) both allow it, locally and in AWS.

import { ApiError, apiUrl, userFetch, userToken } from "/console/js/api.js";
import { h, problem, replace } from "/console/js/dom.js";

/** Files up to this size go inline: base64 grows them by a third, and the JSON request must fit 256 KiB. */
export const INLINE_LIMIT = 180 * 1024;
const KINDS = { ".txt": "text", ".md": "markdown", ".markdown": "markdown", ".pdf": "pdf", ".csv": "csv", ".xlsx": "xlsx" };

/** The document kind a file name's extension says, or null. */
export function kindOf(name) {
  const dot = name.lastIndexOf(".");
  return dot === -1 ? null : KINDS[name.slice(dot).toLowerCase()] || null;
}

function base64(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

async function sha256Hex(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** An XHR (fetch reports no upload progress): resolves {status, body}, rejects an ApiError.
 * ``where`` names the far end in the messages ("the server", "the storage"). */
function send(method, url, { headers = {}, body, onProgress, where = "the server" }) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(method, url);
    for (const [key, value] of Object.entries(headers)) xhr.setRequestHeader(key, value);
    xhr.upload.onprogress = (e) => e.lengthComputable && onProgress?.(e.loaded, e.total);
    // A refused preflight (CORS) or a blocked address (CSP) ends here too: the browser tells the page no more.
    xhr.onerror = () => reject(new ApiError(0, "network", `the upload could not reach ${where}`));
    xhr.onload = () => {
      let parsed = null;
      try {
        parsed = xhr.responseText ? JSON.parse(xhr.responseText) : null;
      } catch {
        parsed = null; // S3 answers errors in XML: the status says enough
      }
      if (xhr.status >= 200 && xhr.status < 300) resolve({ status: xhr.status, body: parsed });
      else reject(new ApiError(xhr.status, parsed?.error, parsed?.message || `${where} refused the upload (HTTP ${xhr.status})`, parsed));
    };
    xhr.send(body);
  });
}

/** PUT the bytes to the presigned URL as it was signed: it signs the host alone, so the request carries no
 * header of the page's (a BufferSource body gets no content-type), and the bucket's CORS allows it as it is. */
function putPresigned(upload, bytes, onProgress) {
  return send(upload.method || "PUT", upload.url, { body: bytes, onProgress, where: "the storage" });
}

async function apiSend(path, body, onProgress) {
  const headers = { authorization: `Bearer ${await userToken()}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  return send("POST", await apiUrl(path), { headers, body: body === undefined ? null : JSON.stringify(body), onProgress });
}

/** The upload form: ``node``, ``setWorkspaces(list)``; ``onUploaded(document)`` after each success. */
export class UploadForm {
  constructor({ onUploaded }) {
    this.onUploaded = onUploaded;
    this.workspace = h("select", { id: "upload-workspace" });
    this.file = h("input", { type: "file", id: "upload-file", accept: Object.keys(KINDS).join(",") });
    this.progress = h("progress", { id: "upload-progress", max: "100", value: "0", "aria-label": "Upload progress", hidden: true });
    this.status = h("p", { class: "upload-status", role: "status", "aria-live": "polite" });
    this.create = h("button", { type: "button", class: "secondary", hidden: true, onclick: () => this.createPersonal() }, "Create my personal workspace");
    this.button = h("button", { type: "submit" }, "Upload");
    this.node = h(
      "form",
      { class: "upload", "aria-labelledby": "upload-heading" },
      h("h3", { id: "upload-heading" }, "Upload a document"),
      h("div", { class: "row" }, h("label", { for: "upload-workspace" }, "Into workspace", this.workspace), h("label", { for: "upload-file" }, "File", this.file), this.button),
      this.create,
      this.progress,
      this.status,
    );
    this.node.addEventListener("submit", (e) => {
      e.preventDefault();
      this.upload();
    });
  }

  /** Offer the workspaces the caller may write to (editor or owner). */
  setWorkspaces(workspaces) {
    const writable = workspaces.filter((w) => w.role === "editor" || w.role === "owner");
    replace(this.workspace, writable.map((w) => h("option", { value: w.workspace_id }, `${w.name} (${w.kind})`)));
    this.button.disabled = !writable.length;
    this.create.hidden = workspaces.some((w) => w.kind === "personal" && w.role === "owner");
  }

  async createPersonal() {
    try {
      await userFetch("/api/workspaces", { method: "POST", body: { kind: "personal", name: "My documents" } });
      replace(this.status, "Created your personal workspace.");
      await this.onUploaded(null);
    } catch (error) {
      replace(this.status, problem(error));
    }
  }

  showProgress(loaded, total) {
    this.progress.hidden = false;
    this.progress.value = String(Math.round((loaded / Math.max(total, 1)) * 100));
  }

  async upload() {
    const file = this.file.files[0];
    const workspaceId = this.workspace.value;
    if (!file || !workspaceId) {
      replace(this.status, problem(new Error("Choose a workspace and a file.")));
      return;
    }
    const kind = kindOf(file.name);
    if (!kind) {
      replace(this.status, problem(new Error("That file type is not supported (txt, md, pdf, csv, xlsx).")));
      return;
    }
    this.button.disabled = true;
    this.showProgress(0, 1);
    replace(this.status, `Uploading ${file.name}…`);
    try {
      const bytes = new Uint8Array(await file.arrayBuffer());
      const fields = { workspace_id: workspaceId, file_name: file.name, kind };
      let answer;
      if (bytes.length <= INLINE_LIMIT) {
        answer = (await apiSend("/api/documents", { ...fields, content_base64: base64(bytes) }, (l, t) => this.showProgress(l, t))).body;
      } else {
        const declared = await apiSend("/api/documents", { ...fields, size_bytes: bytes.length, sha256: await sha256Hex(bytes) });
        const upload = declared.body.upload;
        await putPresigned(upload, bytes, (l, t) => this.showProgress(l, t));
        replace(this.status, `Checking ${file.name}…`);
        answer = (await apiSend(upload.complete_path, undefined)).body;
      }
      this.showProgress(1, 1);
      replace(this.status, `Uploaded ${answer.document.file_name} (v${answer.version.version}).`);
      this.file.value = "";
      await this.onUploaded(answer.document);
    } catch (error) {
      this.progress.hidden = true;
      replace(this.status, problem(error));
    } finally {
      this.button.disabled = false;
    }
  }
}
