// The console's only way to the API: operator calls signed with SigV4 (aws4fetch), patient calls with a
// bearer token. Where the credentials come from depends on /console/config.json: locally the dev server
// hands a loopback page its admin credentials and a demo patient token; in AWS, Cognito (cognito.js).

import { AwsClient } from "/console/vendor/aws4fetch-1.0.20/aws4fetch.esm.js";

const PATIENT_TOKEN_KEY = "flowledger.patientToken";
const USER_TOKEN_KEY = "flowledger.userToken";
// The configuration is kept per tab (sessionStorage), so a page load after the first makes no round trip
// for it: for at most half an hour, and never past five minutes before a token in it expires.
const CONFIG_KEY = "flowledger.config";
const CONFIG_KEEP_SECONDS = 1800;
const CONFIG_MARGIN_SECONDS = 300;
let configPromise = null;
let configKept = false; // this page's configuration came from the tab's copy (which may be stale)
let operatorClient = null;

/** A refusal or failure the API answered with: its status, error code and message. */
export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

function tokenExpiry(token) {
  try {
    return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))).exp;
  } catch {
    return NaN; // not a JWT we can read: the half hour alone bounds it
  }
}

function keepConfig(cfg) {
  const now = Date.now() / 1000;
  const expiries = [cfg.patient_token, cfg.user_token].filter(Boolean).map(tokenExpiry).filter(Number.isFinite);
  const until = Math.min(now + CONFIG_KEEP_SECONDS, ...expiries.map((exp) => exp - CONFIG_MARGIN_SECONDS));
  try {
    sessionStorage.setItem(CONFIG_KEY, JSON.stringify({ until, config: cfg }));
  } catch {
    // storage full or refused: the next page fetches it again
  }
}

function keptConfig() {
  try {
    const kept = JSON.parse(sessionStorage.getItem(CONFIG_KEY));
    return kept && kept.until > Date.now() / 1000 ? kept.config : null;
  } catch {
    return null;
  }
}

function takeBootConfig() {
  const boot = globalThis.flowledgerBoot;
  const early = boot?.config ?? null;
  if (boot) boot.config = null;
  return early;
}

/** The console's configuration: the tab's kept copy, else fetched (once per page) and kept. */
export function config() {
  configPromise ??= (async () => {
    const kept = keptConfig();
    configKept = Boolean(kept);
    if (kept) return kept;
    // boot.js asked for it as the page began, unless the tab kept a copy then; taken once (a refused kept
    // copy is replaced by a fresh fetch below, never by this first answer again).
    const early = await takeBootConfig();
    const response = early ?? (await fetch("/console/config.json", { cache: "no-store" }));
    if (!response.ok) throw new ApiError(response.status, "config", "the console configuration could not be loaded");
    const cfg = await response.json();
    keepConfig(cfg);
    return cfg;
  })();
  return configPromise;
}

/** ``call()``, once more with a fetched configuration if the kept one was refused (a restarted dev server). */
async function withConfig(call) {
  try {
    return await call();
  } catch (error) {
    if (!configKept || !(error instanceof ApiError) || (error.status !== 401 && error.status !== 403)) throw error;
    sessionStorage.removeItem(CONFIG_KEY);
    configPromise = null;
    return call(); // a refusal did nothing, so asking again is safe
  }
}

function url(cfg, path, query) {
  // Appended, not resolved: an API base such as https://id.execute-api.../v1 keeps its stage path.
  const base = cfg.api_base ? cfg.api_base.replace(/\/+$/, "") : window.location.origin;
  const target = new URL(base + path);
  // RFC 3986 encoding (a space is %20, never "+"): the form SigV4 canonicalises, whatever the verifier.
  const pairs = Object.entries(query || {})
    .filter(([, value]) => value !== undefined && value !== null && value !== "")
    .map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(String(value))}`);
  target.search = pairs.join("&");
  return target.toString();
}

async function read(response) {
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = { message: text };
  }
  if (!response.ok && response.status !== 202) {
    throw new ApiError(response.status, body?.error, body?.message, body);
  }
  return { status: response.status, body };
}

async function signer(cfg) {
  let credentials;
  if (cfg.operator) {
    credentials = { accessKeyId: cfg.operator.access_key_id, secretAccessKey: cfg.operator.secret_access_key };
  } else if (cfg.mode === "cognito") {
    // Asked on every call: cognito.js keeps them in sessionStorage and renews them before they expire.
    const { operatorCredentials } = await import("/console/js/cognito.js");
    credentials = await operatorCredentials(cfg);
  } else {
    throw new ApiError(403, "forbidden", "operator pages need operator credentials (open the console on loopback)");
  }
  if (operatorClient?.accessKeyId !== credentials.accessKeyId) {
    operatorClient = new AwsClient({ ...credentials, service: "execute-api", region: cfg.region });
  }
  return operatorClient;
}

/** The signed request an operator call sends (exposed for the signature test). */
export async function signOperatorRequest(path, { method = "GET", query, body, datetime } = {}) {
  const cfg = await config();
  const client = await signer(cfg);
  const init = { method, headers: body === undefined ? {} : { "content-type": "application/json" } };
  if (body !== undefined) init.body = JSON.stringify(body);
  const aws = datetime ? { datetime } : undefined;
  return client.sign(url(cfg, path, query), { ...init, aws });
}

/** An admin call (``/admin/v1/...``), SigV4-signed: ``{status, body}`` or an ApiError.
 *
 * ``options.onSend``, when given, is called as the signed request is handed to the browser. */
export function operatorFetch(path, options = {}) {
  return withConfig(async () => {
    const request = await signOperatorRequest(path, options);
    options.onSend?.();
    return read(await fetch(request));
  });
}

/** The patient's bearer token: one pasted on the profile page, else the configured one. */
export async function patientToken() {
  const stored = sessionStorage.getItem(PATIENT_TOKEN_KEY);
  if (stored) return stored;
  const cfg = await config();
  if (cfg.patient_token) return cfg.patient_token;
  if (cfg.mode === "cognito") {
    const { patientIdToken } = await import("/console/js/cognito.js");
    return patientIdToken(cfg);
  }
  throw new ApiError(401, "unauthenticated", "sign in to read your explanations");
}

/** Use ``token`` for patient calls in this tab (empty: back to the configured one). */
export function setPatientToken(token) {
  if (token) sessionStorage.setItem(PATIENT_TOKEN_KEY, token);
  else sessionStorage.removeItem(PATIENT_TOKEN_KEY);
}

/** A patient call (``/api/...``) with the bearer token: ``{status, body}`` (202 included) or an ApiError. */
export function patientFetch(path, options = {}) {
  return withConfig(() => bearerFetch(path, patientToken, options));
}

async function bearerFetch(path, token, { method = "GET", query, body, signal } = {}) {
  const cfg = await config();
  const headers = { authorization: `Bearer ${await token()}` };
  const init = { method, headers, signal };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  return read(await fetch(url(cfg, path, query), init));
}

/** The chat user's bearer token: one pasted in this tab, else the configured one (the local dev user). */
export async function userToken() {
  const stored = sessionStorage.getItem(USER_TOKEN_KEY);
  if (stored) return stored;
  const cfg = await config();
  if (cfg.user_token) return cfg.user_token;
  if (cfg.mode === "cognito") {
    const { patientIdToken } = await import("/console/js/cognito.js");
    return patientIdToken(cfg); // one user pool: a signed-in user's token carries their scopes
  }
  throw new ApiError(401, "unauthenticated", "sign in to chat");
}

/** Use ``token`` for chat and document calls in this tab (empty: back to the configured one). */
export function setUserToken(token) {
  if (token) sessionStorage.setItem(USER_TOKEN_KEY, token);
  else sessionStorage.removeItem(USER_TOKEN_KEY);
}

/** The full URL of an API ``path`` with ``query`` (for streamed calls made with fetch directly). */
export async function apiUrl(path, query) {
  return url(await config(), path, query);
}

/** A chat-user call (``/api/chat``, ``/api/documents``, ...) with the bearer token: ``{status, body}``. */
export function userFetch(path, options = {}) {
  return withConfig(() => bearerFetch(path, userToken, options));
}
