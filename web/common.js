// What the chat page (app.js) and the operator's console (console.js) share: JSON calls to the
// API and their errors, and server-sent events split out of a fetch() body (EventSource cannot
// send the x-api-key header). Loaded before either page's script; no build step.
"use strict";

window.mpakt = (() => {
  class ApiError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  /** The `error` sentence of a failed reply, or a description of what came back instead. */
  async function errorOf(res) {
    let text = "";
    try { text = await res.text(); } catch (_) { /* the body could not be read */ }
    let message = "";
    try {
      const j = JSON.parse(text);
      if (j && typeof j.error === "string") message = j.error;
    } catch (_) { /* not JSON */ }
    if (!message) message = text.trim().slice(0, 300) || res.statusText || "no message";
    return new ApiError(message, res.status);
  }

  function networkError(e) {
    return new ApiError(`cannot reach the server (${e.message || e})`, 0);
  }

  /** One JSON call with a key (x-api-key) or a login token (Bearer). Resolves to the reply's
   *  JSON; throws ApiError (an aborted call throws its AbortError). */
  async function request(method, path, { body, key, token, signal } = {}) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    else if (key) headers["x-api-key"] = key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    try {
      res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw networkError(e);
    }
    if (!res.ok) throw await errorOf(res);
    const text = await res.text();
    return text ? JSON.parse(text) : null;
  }

  function describe(e) {
    if (e instanceof ApiError) return e.status ? `${e.message} (HTTP ${e.status})` : e.message;
    return String(e && e.message ? e.message : e);
  }

  /** Splits server-sent events out of a text buffer; returns [events, rest]. */
  function takeEvents(buffer) {
    const events = [];
    const blocks = buffer.split(/\r\n\r\n|\n\n|\r\r/);
    const rest = blocks.pop();
    for (const block of blocks) {
      let event = "message";
      const data = [];
      for (const line of block.split(/\r\n|\n|\r/)) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
      if (data.length) events.push({ event, data: data.join("\n") });
    }
    return [events, rest];
  }

  // ---- a page's key: signed in for, kept for the next visit, and forgotten (items: the
  // storage names the page keeps its key, user and grant under)

  /** Signs in and makes a key labelled `label` for this page: {key, user, grant}. */
  async function signIn(username, password, label) {
    const { token } = await request("POST", "/api/accounts/login", { body: { username, password }, key: "" });
    const made = await request("POST", "/api/keys", { body: { label }, token });
    return { key: made.key, user: username, grant: { token, keyId: made.keyId } };
  }

  /** Keeps a key, who it belongs to (or ""), and the login that made it (or null: a pasted
   *  key) — the grant in sessionStorage only. */
  function storeKey(items, key, user, grant) {
    localStorage.setItem(items.key, key);
    if (user) localStorage.setItem(items.user, user); else localStorage.removeItem(items.user);
    if (grant) sessionStorage.setItem(items.grant, JSON.stringify(grant)); else sessionStorage.removeItem(items.grant);
  }

  /** Forgets the kept key; one this page made is revoked too, while its login token is at hand. */
  function dropKey(items) {
    try {
      const grant = JSON.parse(sessionStorage.getItem(items.grant) || "null");
      if (grant && grant.token && grant.keyId)
        request("DELETE", "/api/keys/" + encodeURIComponent(grant.keyId), { token: grant.token }).catch(() => {});
    } catch (_) { /* nothing to revoke */ }
    sessionStorage.removeItem(items.grant);
    localStorage.removeItem(items.key);
    localStorage.removeItem(items.user);
  }

  return { ApiError, errorOf, networkError, request, describe, takeEvents, signIn, storeKey, dropKey };
})();
