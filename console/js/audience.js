// Who is signed in, as far as the console's pages go: an operator (the /admin/v1 pages), a patient (their
// own explanations) and a chat user. The nav shows each only the pages they can use.
//  - Locally, config.json says it: a loopback page gets operator credentials and the demo tokens; a page
//    opened from another host gets none, and a token pasted in this tab (the profile page's field) counts.
//  - In AWS, the signed-in user's id token says it: the operators group, the reasoning.read scope with a
//    patient id, the chat scope. Before anyone signs in nothing is known (null).

import { config } from "/console/js/api.js";

// Where cognito.js keeps the signed-in user's tokens, and api.js a tab's own pasted tokens.
const COGNITO_TOKENS = "flowledger.cognito.tokens";
const PATIENT_TOKEN = "flowledger.patientToken";
const USER_TOKEN = "flowledger.userToken";

/** The claims of a JWT (not verified: the API verifies; this only picks the links to show), or null. */
export function claims(jwt) {
  try {
    const part = String(jwt).split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
  } catch {
    return null;
  }
}

/** What a token's claims let its holder use: ``{operator, patient, chat}``. */
export function audienceOfClaims(values) {
  const groups = values?.["cognito:groups"] || [];
  const scopes = String(values?.scope || "").split(/\s+/);
  return {
    operator: groups.includes("operators"),
    patient: scopes.includes("reasoning.read") && Boolean(values?.patient_id),
    chat: scopes.includes("chat"),
  };
}

function stored(key) {
  try {
    return sessionStorage.getItem(key);
  } catch {
    return null;
  }
}

/** ``{operator, patient, chat}`` for whoever uses this tab, or null while nobody has signed in. */
export async function audience() {
  const cfg = await config().catch(() => ({}));
  if (cfg.mode === "cognito") {
    let tokens = null;
    try {
      tokens = JSON.parse(stored(COGNITO_TOKENS) || "null");
    } catch {
      tokens = null;
    }
    return tokens?.idToken ? audienceOfClaims(claims(tokens.idToken)) : null;
  }
  return {
    operator: Boolean(cfg.operator),
    patient: Boolean(stored(PATIENT_TOKEN) || cfg.patient_token),
    chat: Boolean(stored(USER_TOKEN) || cfg.user_token),
  };
}
