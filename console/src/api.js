// The console talks to Engram's own REST API with the signed-in key or token: it sees what that key sees,
// through the same visibility rule, quotas and audit. The credential lives in sessionStorage (gone with the tab),
// never in localStorage or a cookie.
const STORE = window.sessionStorage;

export const session = {
  get token() { return STORE.getItem("engram.token"); },
  get context() { return STORE.getItem("engram.context"); },
  get identity() {
    const raw = STORE.getItem("engram.identity");
    return raw ? JSON.parse(raw) : null;
  },
  save(token, context, identity) {
    STORE.setItem("engram.token", token);
    STORE.setItem("engram.context", context);
    STORE.setItem("engram.identity", JSON.stringify(identity));
  },
  setContext(context) { STORE.setItem("engram.context", context); },
  clear() {
    for (const k of ["engram.token", "engram.context", "engram.identity"]) STORE.removeItem(k);
  },
};

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && (body.error || body.detail)) || {};
    super(typeof err === "string" ? err : err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || "";
  }
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === "") continue;
    q.set(k, typeof v === "object" ? JSON.stringify(v) : String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

async function send(method, url, body, token, onProgress) {
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (onProgress && body !== undefined) return sendWithProgress(method, url, body, headers, onProgress);
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

function sendWithProgress(method, url, body, headers, onProgress) {
  // fetch reports no upload progress; XMLHttpRequest does
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(method, url);
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => e.lengthComputable && onProgress(e.loaded / e.total);
    xhr.onload = () => {
      const data = xhr.responseText ? JSON.parse(xhr.responseText) : null;
      if (xhr.status >= 200 && xhr.status < 300) resolve(data);
      else reject(new ApiError(xhr.status, data));
    };
    xhr.onerror = () => reject(new ApiError(0, { error: { message: "the upload did not reach the server" } }));
    xhr.send(JSON.stringify(body));
  });
}

/** One operation's REST route under /api/v1/{context}: GET and DELETE carry `params` in the query string. */
export function api(method, path, params, options = {}) {
  const context = options.context || session.context;
  const base = `/api/v1/${encodeURIComponent(context)}${path}`;
  if (method === "GET" || method === "DELETE") return send(method, base + query(params), undefined, session.token);
  return send(method, base, params || {}, session.token, options.onProgress);
}

/** The key's identity before a context is chosen: `current_identity` over MCP (the one call that needs none). */
export async function whoami(token) {
  const res = await fetch("/mcp", {
    method: "POST",
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": "2025-11-25",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "current_identity", arguments: {} } }),
  });
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, body);
  const result = body && body.result;
  if (!result || result.isError) throw new ApiError(401, result && result.structuredContent);
  return result.structuredContent;
}

export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString().replace("T", " ").slice(0, 16) + " UTC";
}
