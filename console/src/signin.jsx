// Sign in with an API key, or with OAuth: authorization code + PKCE (S256) against an issuer the deployment names
// in its protected resource metadata, the console being a public client (registered dynamically where the issuer
// allows, RFC 7591). The token is then used exactly as a key is.
import { useState } from "preact/hooks";
import { ApiError, session, whoami } from "./api.js";
import { Failure, Field } from "./ui.jsx";

const PENDING = "engram.oauth";
const redirectUri = () => `${window.location.origin}/console/index.html`;

function b64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function random(n = 32) {
  return b64url(crypto.getRandomValues(new Uint8Array(n)));
}

async function getJson(url, init) {
  const res = await fetch(url, init);
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, body);
  return body;
}

async function metadata(issuer) {
  const base = issuer.replace(/\/$/, "");
  try {
    return await getJson(`${base}/.well-known/oauth-authorization-server`);
  } catch {
    return getJson(`${base}/.well-known/openid-configuration`);
  }
}

export async function issuers() {
  const prm = await getJson("/.well-known/oauth-protected-resource/api/v1");
  return prm.authorization_servers || [];
}

async function startOAuth(issuer, context) {
  const meta = await metadata(issuer);
  let clientId = "engram-console";
  if (meta.registration_endpoint) {
    const reg = await getJson(meta.registration_endpoint, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_name: "Engram console", redirect_uris: [redirectUri()], token_endpoint_auth_method: "none",
        grant_types: ["authorization_code"], response_types: ["code"] }),
    });
    clientId = reg.client_id;
  }
  const verifier = random(48);
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const state = random(16);
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, clientId, token: meta.token_endpoint, context }));
  const q = new URLSearchParams({ response_type: "code", client_id: clientId, redirect_uri: redirectUri(),
    code_challenge: challenge, code_challenge_method: "S256", state, resource: `${window.location.origin}/api/v1` });
  window.location.assign(`${meta.authorization_endpoint}?${q}`);
}

/** Back from the issuer with `?code=&state=`: the code exchanged for a token (then the address cleaned). */
export async function finishOAuth() {
  const params = new URLSearchParams(window.location.search);
  const raw = sessionStorage.getItem(PENDING);
  if (!params.get("code") || !raw) return;
  sessionStorage.removeItem(PENDING);
  const pending = JSON.parse(raw);
  window.history.replaceState(null, "", "/console/index.html");
  if (params.get("state") !== pending.state) return; // not the request this tab made
  const body = new URLSearchParams({ grant_type: "authorization_code", code: params.get("code"),
    redirect_uri: redirectUri(), client_id: pending.clientId, code_verifier: pending.verifier });
  const token = await getJson(pending.token, { method: "POST", body,
    headers: { "Content-Type": "application/x-www-form-urlencoded" } });
  const identity = await whoami(token.access_token);
  session.save(token.access_token, pending.context || identity.context_id || identity.contexts[0], identity);
}

export function SignIn({ onDone }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(null);
  const [servers, setServers] = useState(null);
  async function withKey(e) {
    e.preventDefault();
    setError(null);
    try {
      const identity = await whoami(key.trim());
      session.save(key.trim(), identity.context_id || identity.contexts[0], identity);
      onDone();
    } catch (err) {
      setError(err.status === 401 ? new ApiError(401, { error: { message: "this key is not valid here" } }) : err);
    }
  }
  async function withOAuth() {
    setError(null);
    try {
      const found = servers || (await issuers());
      setServers(found);
      if (found.length === 1) await startOAuth(found[0]);
      else if (found.length === 0) setError(new Error("no OAuth issuer is trusted here: sign in with a key"));
    } catch (err) {
      setError(err);
    }
  }
  return (
    <main class="signin" id="content">
      <h1>Engram console</h1>
      <p>See what your agents remember. You see exactly what your key sees.</p>
      <form onSubmit={withKey}>
        <Field label="API key" hint="Kept in this tab only (sessionStorage), never stored on disk.">
          <input type="password" autocomplete="off" required value={key} onInput={(e) => setKey(e.target.value)} />
        </Field>
        <button type="submit">Sign in with a key</button>
      </form>
      <p class="or">or</p>
      <button type="button" onClick={withOAuth}>Sign in with OAuth</button>
      {servers && servers.length > 1 ? (
        <ul class="issuers">
          {servers.map((s) => <li><button type="button" onClick={() => startOAuth(s).catch(setError)}>{s}</button></li>)}
        </ul>
      ) : null}
      <Failure error={error} />
    </main>
  );
}
