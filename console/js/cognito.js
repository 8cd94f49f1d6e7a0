// Sign-in for the console in AWS, with no SDK: Cognito's JSON APIs over plain fetch. A small form in
// <main> runs USER_PASSWORD_AUTH against the user pool (answering a new-password or TOTP challenge);
// the id token is the patient's bearer token, and the identity pool turns it into temporary AWS
// credentials for an operator (only members of the "operators" group are mapped to a role).
// Tokens and credentials live in sessionStorage (this tab only; every page is a fresh load) and are
// renewed a few minutes before they expire. Imported lazily by api.js when config.json says "cognito".

import { ApiError } from "/console/js/api.js";
import { h, replace } from "/console/js/dom.js";

const TOKENS_KEY = "flowledger.cognito.tokens";
const CREDENTIALS_KEY = "flowledger.cognito.credentials";
// Renewed once 80% of a token's or credentials' lifetime has passed (12 minutes early for an hour).
const RENEW_AFTER = 0.8;
const IDP = "AWSCognitoIdentityProviderService";
const IDENTITY = "AWSCognitoIdentityService";

let signingIn = null; // one sign-in form, shared by every call waiting for it

function endpoints(cfg) {
  const c = cfg.cognito || {};
  return {
    idp: c.idp_endpoint || `https://cognito-idp.${cfg.region}.amazonaws.com/`,
    identity: c.identity_endpoint || `https://cognito-identity.${cfg.region}.amazonaws.com/`,
  };
}

/** One Cognito JSON call; a refusal becomes an Error carrying Cognito's own message and type. */
async function call(endpoint, target, body) {
  const response = await fetch(endpoint, {
    method: "POST",
    headers: { "content-type": "application/x-amz-json-1.1", "x-amz-target": target },
    body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const type = String(data.__type || "").split("#").pop();
    const error = new Error(data.message || data.Message || `Cognito answered HTTP ${response.status}`);
    error.type = type;
    throw error;
  }
  return data;
}

function load(key) {
  try {
    const value = JSON.parse(sessionStorage.getItem(key) || "null");
    return value && value.renewAt > Date.now() ? value : null;
  } catch {
    return null;
  }
}

function save(key, value, expiresAt) {
  const renewAt = Date.now() + (expiresAt - Date.now()) * RENEW_AFTER;
  sessionStorage.setItem(key, JSON.stringify({ ...value, renewAt }));
  return value;
}

function tokensFrom(result, refreshToken) {
  const value = { idToken: result.IdToken, refreshToken: result.RefreshToken || refreshToken };
  return save(TOKENS_KEY, value, Date.now() + result.ExpiresIn * 1000);
}

/** Valid user-pool tokens: stored ones, renewed with the refresh token, or a sign-in through the form. */
async function tokens(cfg) {
  const stored = load(TOKENS_KEY);
  if (stored) return stored;
  const previous = JSON.parse(sessionStorage.getItem(TOKENS_KEY) || "null");
  if (previous?.refreshToken) {
    try {
      const { AuthenticationResult } = await call(endpoints(cfg).idp, `${IDP}.InitiateAuth`, {
        AuthFlow: "REFRESH_TOKEN_AUTH",
        ClientId: cfg.cognito.client_id,
        AuthParameters: { REFRESH_TOKEN: previous.refreshToken },
      });
      return tokensFrom(AuthenticationResult, previous.refreshToken);
    } catch {
      sessionStorage.removeItem(TOKENS_KEY); // revoked or expired: sign in again
    }
  }
  signingIn ??= signIn(cfg).finally(() => {
    signingIn = null;
  });
  return signingIn;
}

// The challenges the form can answer: the field it asks for and the response key Cognito expects.
const CHALLENGES = {
  NEW_PASSWORD_REQUIRED: { label: "Choose a new password", key: "NEW_PASSWORD", type: "password", autocomplete: "new-password" },
  SOFTWARE_TOKEN_MFA: { label: "Code from your authenticator app", key: "SOFTWARE_TOKEN_MFA_CODE", type: "text", autocomplete: "one-time-code" },
};

/** Render the sign-in form into <main>; resolves with tokens once Cognito accepts, then puts <main> back. */
function signIn(cfg) {
  const main = document.getElementById("main");
  const before = [...main.childNodes];
  const title = document.title;
  const idp = endpoints(cfg).idp;
  return new Promise((resolve) => {
    let challenge = null; // {name, session, username} once Cognito asks for more
    const username = h("input", { id: "signin-username", name: "username", autocomplete: "username", required: true });
    const password = h("input", { id: "signin-password", name: "password", type: "password", autocomplete: "current-password", required: true });
    const extra = h("div", { class: "row" });
    const status = h("p", { class: "problem", role: "alert", id: "signin-error" });
    const submit = h("button", { type: "submit" }, "Sign in");

    async function answer() {
      if (!challenge) {
        return call(idp, `${IDP}.InitiateAuth`, {
          AuthFlow: "USER_PASSWORD_AUTH",
          ClientId: cfg.cognito.client_id,
          AuthParameters: { USERNAME: username.value.trim(), PASSWORD: password.value },
        });
      }
      const field = extra.querySelector("input");
      return call(idp, `${IDP}.RespondToAuthChallenge`, {
        ChallengeName: challenge.name,
        ClientId: cfg.cognito.client_id,
        Session: challenge.session,
        ChallengeResponses: { USERNAME: challenge.username, [CHALLENGES[challenge.name].key]: field.value.trim() },
      });
    }

    async function onsubmit(event) {
      event.preventDefault();
      submit.disabled = true;
      status.textContent = "";
      try {
        const result = await answer();
        if (result.AuthenticationResult) {
          replace(main, ...before);
          document.title = title;
          resolve(tokensFrom(result.AuthenticationResult));
          return;
        }
        const asked = CHALLENGES[result.ChallengeName];
        if (!asked) throw new Error(`This account needs ${result.ChallengeName}, which the console cannot do; ask an administrator.`);
        challenge = {
          name: result.ChallengeName,
          session: result.Session,
          username: result.ChallengeParameters?.USER_ID_FOR_SRP || username.value.trim(),
        };
        const input = h("input", { id: "signin-extra", type: asked.type, autocomplete: asked.autocomplete, required: true });
        replace(extra, h("label", { for: "signin-extra" }, asked.label, input));
        input.focus();
      } catch (error) {
        status.textContent = `Sign-in failed: ${error.message}`;
      } finally {
        submit.disabled = false;
      }
    }

    document.title = "Sign in · Flowledger";
    const form = h(
      "form",
      { class: "panel", onsubmit },
      h("label", { for: "signin-username" }, "User name or email", username),
      h("label", { for: "signin-password" }, "Password", password),
      extra,
      status,
      h("div", { class: "row" }, submit),
    );
    replace(main, h("h1", {}, "Sign in"), h("p", { class: "muted" }, "Sign in with your Flowledger account."), form);
    username.focus();
  });
}

/** Temporary AWS credentials for an operator, in the key names aws4fetch's AwsClient takes. */
export async function operatorCredentials(cfg) {
  let stored = load(CREDENTIALS_KEY);
  if (!stored) {
    const { idToken } = await tokens(cfg);
    const { identity } = endpoints(cfg);
    const Logins = { [`cognito-idp.${cfg.region}.amazonaws.com/${cfg.cognito.user_pool_id}`]: idToken };
    try {
      const { IdentityId } = await call(identity, `${IDENTITY}.GetId`, { IdentityPoolId: cfg.cognito.identity_pool_id, Logins });
      const { Credentials } = await call(identity, `${IDENTITY}.GetCredentialsForIdentity`, { IdentityId, Logins });
      const value = { accessKeyId: Credentials.AccessKeyId, secretAccessKey: Credentials.SecretKey, sessionToken: Credentials.SessionToken };
      stored = save(CREDENTIALS_KEY, value, Credentials.Expiration * 1000); // Cognito gives epoch seconds
    } catch (error) {
      // A signed-in patient is in no mapped group: the identity pool gives them no credentials.
      throw new ApiError(403, "forbidden", `operator pages need an operator account (${error.message})`);
    }
  }
  const { accessKeyId, secretAccessKey, sessionToken } = stored;
  return { accessKeyId, secretAccessKey, sessionToken };
}

/** The signed-in user's id token (a JWT), the bearer token of patient calls. */
export async function patientIdToken(cfg) {
  return (await tokens(cfg)).idToken;
}

/** Forget this tab's tokens and credentials (the next call shows the sign-in form). */
export function signOut() {
  sessionStorage.removeItem(TOKENS_KEY);
  sessionStorage.removeItem(CREDENTIALS_KEY);
}
