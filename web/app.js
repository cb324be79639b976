// The mpakt chat page: signs in (or takes a pasted key), lists and loads models, and chats
// through POST /api/v3/chat, reading its server-sent events from a fetch() body stream.
// No framework and no build step: the server hands this file out as it is.
"use strict";

(() => {
  // where the key, its user and the grant of a key this page made (sessionStorage only) are kept
  const ITEMS = { key: "mpakt.key", user: "mpakt.user", grant: "mpakt.grant" };
  const MODEL_ITEM = "mpakt.model";

  const $ = (id) => document.getElementById(id);
  const el = {
    account: $("account"), accountStatus: $("account-status"), signOut: $("sign-out"),
    banner: $("error-banner"), bannerText: $("error-text"), bannerDismiss: $("error-dismiss"),
    auth: $("auth"), workspace: $("workspace"),
    loginForm: $("login-form"), loginUser: $("login-username"), loginPass: $("login-password"),
    keyForm: $("key-form"), keyInput: $("key-input"),
    signupForm: $("signup-form"), signupUser: $("signup-username"), signupPass: $("signup-password"),
    signupResult: $("signup-result"),
    modelSelect: $("model-select"), refreshModels: $("refresh-models"), source: $("source-input"),
    load: $("load-button"), unload: $("unload-button"), loadProgress: $("load-progress"),
    loadElapsed: $("load-elapsed"), loadResult: $("load-result"), modelInfo: $("model-info"),
    maxTokens: $("max-tokens"), temperature: $("temperature"), penalty: $("repetition-penalty"),
    speculative: $("speculative"),
    newChat: $("new-chat"), baseNote: $("base-model-note"), messages: $("messages"),
    chatForm: $("chat-form"), prompt: $("prompt"), send: $("send-button"), stop: $("stop-button"),
  };

  const state = {
    key: localStorage.getItem(ITEMS.key) || "",
    user: localStorage.getItem(ITEMS.user) || "",
    models: [],
    formats: new Map(),       // modelId -> chat format seen in a `model` event ("plain" or "chat_template")
    conversation: [],         // [{role, content}], resent whole every turn
    controller: null,         // AbortController of the reply streaming now
  };

  // ------------------------------------------------------------------ HTTP

  const { ApiError, errorOf, networkError, describe, takeEvents } = window.mpakt;
  /** One JSON call (common.js), with this page's key unless `key` or `token` is given. */
  const api = (method, path, opts = {}) => window.mpakt.request(method, path, { key: state.key, ...opts });

  // ------------------------------------------------------------------ small UI helpers

  function showError(e, context) {
    let text = (context ? context + ": " : "") + describe(e);
    if (e instanceof ApiError && e.status === 401 && state.key)
      text += " — sign out and sign in again to get a new key.";
    el.bannerText.textContent = text;
    el.banner.hidden = false;
  }

  function clearError() {
    el.banner.hidden = true;
    el.bannerText.textContent = "";
  }

  function busy(button, on) {
    button.disabled = on;
    button.setAttribute("aria-busy", on ? "true" : "false");
  }

  function mb(bytes) {
    const v = bytes / 1e6;
    return (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(2)) + " MB";
  }

  /** Starts a seconds counter written into `node`; returns the function that stops it. */
  function elapsedCounter(node, prefix = "") {
    const start = performance.now();
    const tick = () => { node.textContent = `${prefix}${((performance.now() - start) / 1000).toFixed(1)} s`; };
    tick();
    const timer = setInterval(tick, 200);
    return () => clearInterval(timer);
  }

  // ------------------------------------------------------------------ accounts and keys

  function showSignedIn() {
    const signedIn = Boolean(state.key);
    el.auth.hidden = signedIn;
    el.workspace.hidden = !signedIn;
    el.account.hidden = !signedIn;
    if (signedIn) {
      const tail = state.key.length > 10 ? "…" + state.key.slice(-4) : "";
      el.accountStatus.textContent = state.user ? `Signed in as ${state.user}` : `Using key ${state.key.slice(0, 4)}${tail}`;
    }
  }

  function keepKey(key, user, grant) {
    state.key = key;
    state.user = user || "";
    window.mpakt.storeKey(ITEMS, key, user, grant);
    clearError();
    showSignedIn();
    refreshModels();
    el.prompt.focus();
  }

  el.loginForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = $("login-submit");
    const username = el.loginUser.value.trim();
    busy(submit, true);
    try {
      const signed = await window.mpakt.signIn(username, el.loginPass.value, "chat page");
      el.loginPass.value = "";
      keepKey(signed.key, signed.user, signed.grant);
    } catch (e) {
      showError(e, "Sign in failed");
    } finally {
      busy(submit, false);
    }
  });

  el.keyForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = $("key-submit");
    const key = el.keyInput.value.trim();
    busy(submit, true);
    try {
      await api("GET", "/api/v3/models", { key }); // proves the key before keeping it
      el.keyInput.value = "";
      keepKey(key, "", null);
    } catch (e) {
      showError(e, "That key does not work");
    } finally {
      busy(submit, false);
    }
  });

  el.signupForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = $("signup-submit");
    const username = el.signupUser.value.trim();
    busy(submit, true);
    el.signupResult.textContent = "";
    el.signupResult.dataset.status = "";
    try {
      const r = await api("POST", "/api/accounts", { body: { username, password: el.signupPass.value }, key: "" });
      el.signupPass.value = "";
      el.signupResult.dataset.status = r.status;
      el.signupResult.textContent = r.status === "approved"
        ? `Account ${r.username} is created and approved: sign in above.`
        : `Account ${r.username} is created and is pending approval by an operator. You can sign in once it is approved.`;
      el.loginUser.value = r.username;
    } catch (e) {
      el.signupResult.dataset.status = "error";
      el.signupResult.textContent = "Sign up failed: " + describe(e);
    } finally {
      busy(submit, false);
    }
  });

  el.signOut.addEventListener("click", () => {
    if (state.controller) state.controller.abort();
    // A key this page made is revoked too, while its login token is still at hand.
    window.mpakt.dropKey(ITEMS);
    state.key = "";
    state.user = "";
    state.models = [];
    newChat();
    clearError();
    el.loadResult.textContent = "";
    showSignedIn();
  });

  el.bannerDismiss.addEventListener("click", clearError);

  // ------------------------------------------------------------------ models

  function selectedModel() {
    return state.models.find((m) => m.modelId === el.modelSelect.value) || null;
  }

  /** What the chat request names: the selected model, or the source to load. */
  function chatModel() {
    return el.modelSelect.value || el.source.value.trim();
  }

  function renderModels(select) {
    const want = select ?? el.modelSelect.value ?? localStorage.getItem(MODEL_ITEM);
    el.modelSelect.replaceChildren();
    const none = new Option("— the source below (loaded on Send) —", "");
    el.modelSelect.add(none);
    for (const m of state.models) {
      const q = m.quantize && m.quantize !== "none" ? ` · ${m.quantize}` : "";
      el.modelSelect.add(new Option(`${m.source}${q} · ${m.modelId}`, m.modelId));
    }
    el.modelSelect.value = state.models.some((m) => m.modelId === want) ? want : "";
    modelChanged();
  }

  function modelChanged() {
    localStorage.setItem(MODEL_ITEM, el.modelSelect.value);
    const m = selectedModel();
    el.unload.disabled = !m;
    const notes = [];
    if (m) {
      notes.push(`${m.modelId}: ${m.tensors} tensors, ${mb(m.residentBytes)} resident.`);
      if (m.quantize && m.quantize !== "none") notes.push(`This model runs quantized: ${m.quantize}.`);
    } else {
      notes.push("Send loads the source above first when no loaded model is selected.");
    }
    el.modelInfo.textContent = notes.join(" ");
    const format = m ? state.formats.get(m.modelId) : null;
    el.baseNote.hidden = format !== "plain";
  }

  async function refreshModels(select) {
    if (!state.key) return;
    try {
      const r = await api("GET", "/api/v3/models");
      state.models = r.models || [];
      renderModels(select);
    } catch (e) {
      showError(e, "Could not list the models");
    }
  }

  el.modelSelect.addEventListener("change", () => modelChanged());
  el.refreshModels.addEventListener("click", () => refreshModels());

  el.load.addEventListener("click", async () => {
    const source = el.source.value.trim();
    if (!source) return showError(new Error("give a source to load, e.g. hf:local/stories260K"));
    clearError();
    const existing = state.models.find((m) => m.source === source);
    if (existing) {
      renderModels(existing.modelId);
      el.loadResult.textContent = `${source} is already loaded as ${existing.modelId}; it is selected.`;
      return;
    }
    busy(el.load, true);
    el.loadResult.textContent = "";
    el.loadProgress.hidden = false;
    const stop = elapsedCounter(el.loadElapsed, "loading… ");
    try {
      const r = await api("POST", "/api/v3/models", { body: { source, quantize: "auto" } });
      const q = r.quantize && r.quantize !== "none" ? ` This model runs quantized: ${r.quantize}.` : "";
      el.loadResult.textContent = `Loaded ${r.modelId}: ${mb(r.bytesTransferred)} in ${(r.elapsedMs / 1000).toFixed(1)} s ` +
        `(${r.throughputMBs} MB/s), quantize ${r.quantize}.${q}`;
      await refreshModels(r.modelId);
    } catch (e) {
      el.loadResult.textContent = "";
      showError(e, `Loading ${source} failed`);
    } finally {
      stop();
      el.loadProgress.hidden = true;
      busy(el.load, false);
    }
  });

  el.unload.addEventListener("click", async () => {
    const m = selectedModel();
    if (!m) return;
    busy(el.unload, true);
    try {
      await api("DELETE", "/api/v3/models/" + encodeURIComponent(m.modelId));
      el.loadResult.textContent = `Unloaded ${m.modelId}.`;
      await refreshModels("");
    } catch (e) {
      showError(e, `Unloading ${m.modelId} failed`);
    } finally {
      busy(el.unload, false);
    }
  });

  // ------------------------------------------------------------------ messages

  function addMessage(role, text) {
    const li = document.createElement("li");
    li.className = `message ${role}`;
    li.dataset.role = role;
    li.dataset.testid = role === "user" ? "user-message" : "assistant-message";
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Model";
    const content = document.createElement("div");
    content.className = "content";
    content.dataset.testid = "message-content";
    content.textContent = text;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.dataset.testid = "message-meta";
    li.append(who, content, meta);
    el.messages.append(li);
    li.scrollIntoView({ block: "end" });
    return { li, content, meta };
  }

  function metaItem(meta, testid, text) {
    const span = document.createElement("span");
    span.dataset.testid = testid;
    span.textContent = text;
    meta.append(span);
    return span;
  }

  function newChat() {
    if (state.controller) state.controller.abort();
    state.conversation = [];
    el.messages.replaceChildren();
  }

  el.newChat.addEventListener("click", () => {
    newChat();
    el.prompt.focus();
  });

  // ------------------------------------------------------------------ settings

  function readSettings() {
    const maxTokens = el.maxTokens.valueAsNumber;
    const temperature = el.temperature.valueAsNumber;
    const penalty = el.penalty.valueAsNumber;
    if (!Number.isInteger(maxTokens) || maxTokens < 1 || maxTokens > 4096)
      throw new Error("Max new tokens must be a whole number from 1 to 4096");
    if (!Number.isFinite(temperature) || temperature < 0 || temperature > 100)
      throw new Error("Temperature must be a number from 0 to 100");
    if (!Number.isFinite(penalty) || penalty < 1 || penalty > 10)
      throw new Error("Repetition penalty must be a number from 1 to 10");
    return { maxTokens, temperature, repetitionPenalty: penalty, speculative: el.speculative.checked };
  }

  // ------------------------------------------------------------------ chat


  function setStreaming(on) {
    el.send.hidden = on;
    el.send.disabled = on;
    el.stop.hidden = !on;
    el.messages.setAttribute("aria-busy", on ? "true" : "false");
  }

  function describeDone(meta, d) {
    const reasons = { stop: "finished: the model ended its reply (stop)", length: "finished: reached max new tokens (length)" };
    metaItem(meta, "finish-reason", reasons[d.finishReason] || `finished: ${d.finishReason}`);
    const t = d.timing || {};
    if (typeof t.tokensPerSecond === "number")
      metaItem(meta, "tokens-per-second", `${t.tokensPerSecond.toFixed(1)} tokens/s`);
    if (d.usage) {
      const cached = d.usage.cachedTokens ? `, ${d.usage.cachedTokens} of them kept from the last turn` : "";
      metaItem(meta, "usage", `${d.usage.completionTokens} tokens (prompt ${d.usage.promptTokens}${cached})`);
    }
    if (d.speculation && typeof d.speculation.acceptance === "number")
      metaItem(meta, "acceptance", `speculative acceptance ${Math.round(d.speculation.acceptance * 100)}% ` +
        `(${d.speculation.accepted} of ${d.speculation.drafted} drafts)`);
    if (d.quantize && d.quantize !== "none")
      metaItem(meta, "quantize-note", `this model runs quantized: ${d.quantize}`);
    if (d.batched) metaItem(meta, "batched", `${d.batched} tokens shared passes with other chats`);
  }

  async function send() {
    if (state.controller) return;
    const text = el.prompt.value;
    if (!text.trim()) return;
    const model = chatModel();
    let settings;
    try {
      if (!model) throw new Error("choose a loaded model or give a source to load");
      settings = readSettings();
    } catch (e) {
      return showError(e);
    }
    clearError();

    const turn = { role: "user", content: text };
    state.conversation.push(turn);
    const userMsg = addMessage("user", text);
    el.prompt.value = "";
    const reply = addMessage("assistant", "");
    reply.li.dataset.state = "waiting";

    const controller = new AbortController();
    state.controller = controller;
    setStreaming(true);
    let answer = "";
    let finished = false;
    let stopLoading = null;
    const status = document.createElement("div");
    status.className = "status";
    status.dataset.testid = "reply-status";

    const failed = (message) => {
      finished = true;
      reply.li.dataset.state = "error";
      metaItem(reply.meta, "reply-error", message).className = "error-text";
      showError(new Error(message), "The reply failed");
    };

    try {
      let res;
      try {
        res = await fetch("/api/v3/chat", {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "text/event-stream", "x-api-key": state.key },
          body: JSON.stringify({ model, messages: state.conversation, stream: true, ...settings }),
          signal: controller.signal,
        });
      } catch (e) {
        if (e.name === "AbortError") throw e;
        throw networkError(e);
      }
      if (!res.ok) throw await errorOf(res);
      reply.li.dataset.state = "streaming";
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
        const [events, rest] = takeEvents(done ? buffer + "\n\n" : buffer);
        buffer = rest;
        for (const { event, data } of events) {
          let d;
          try { d = JSON.parse(data); } catch (_) { continue; }
          if (event === "status") {
            if (d.phase === "loading") {
              status.textContent = "";
              const bar = document.createElement("progress");
              bar.setAttribute("aria-label", "Loading the model");
              const label = document.createElement("span");
              status.append(bar, label);
              reply.li.insertBefore(status, reply.content);
              stopLoading = elapsedCounter(label, `loading ${d.source}… `);
            }
          } else if (event === "model") {
            if (stopLoading) { stopLoading(); stopLoading = null; }
            status.remove();
            state.formats.set(d.modelId, d.format);
            el.baseNote.hidden = d.format !== "plain";
            if (d.loaded) el.loadResult.textContent = `Loaded ${d.modelId} for this chat (quantize ${d.quantize}).`;
            // The source resolved to a model: select it, so the next turn names it by modelId.
            if (d.loaded || el.modelSelect.value !== d.modelId) refreshModels(d.modelId);
          } else if (event === "delta") {
            answer += d.text;
            reply.content.textContent = answer;
            reply.li.scrollIntoView({ block: "end" });
          } else if (event === "done") {
            finished = true;
            if (typeof d.text === "string" && d.text !== answer) {
              answer = d.text;
              reply.content.textContent = answer;
            }
            if (d.ok === false) {
              failed(d.error || "the generation failed");
            } else {
              reply.li.dataset.state = "done";
              state.conversation.push({ role: "assistant", content: answer });
            }
            describeDone(reply.meta, d);
          } else if (event === "error") {
            failed(d.error || "the server reported an error");
          }
        }
        if (done || finished) break;
      }
      if (!finished) failed("the stream ended before the reply was complete");
    } catch (e) {
      if (e.name === "AbortError") {
        reply.li.dataset.state = "stopped";
        metaItem(reply.meta, "stopped", "stopped");
        const i = state.conversation.indexOf(turn); // -1 after "new chat" or "sign out"
        if (i >= 0 && answer) state.conversation.push({ role: "assistant", content: answer });
        else if (i >= 0) state.conversation.splice(i); // nothing came back: the turn is as if unsent
      } else {
        reply.li.dataset.state = "error";
        metaItem(reply.meta, "reply-error", describe(e)).className = "error-text";
        showError(e, "The reply failed");
      }
    } finally {
      if (stopLoading) stopLoading();
      status.remove();
      if (reply.li.dataset.state === "error") {
        // The turn did not happen: take it out of the conversation and give the text back.
        const i = state.conversation.indexOf(turn);
        if (i >= 0) state.conversation.splice(i);
        userMsg.li.dataset.state = "unsent";
        metaItem(userMsg.meta, "unsent", "not sent");
        if (!el.prompt.value) el.prompt.value = text;
      }
      if (state.controller === controller) state.controller = null;
      setStreaming(false);
    }
  }

  el.chatForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    send();
  });
  el.prompt.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      send();
    }
  });
  el.stop.addEventListener("click", () => {
    if (state.controller) state.controller.abort();
  });

  // ------------------------------------------------------------------ start

  showSignedIn();
  if (state.key) refreshModels(localStorage.getItem(MODEL_ITEM) || "");
  else el.loginUser.focus();
})();
