// The mpakt operator's console: reads GET /api/v3/admin/actors/stream (a snapshot of every
// long-lived actor each second, and the grid's events as they happen) through fetch() and a
// body reader (EventSource cannot send x-api-key), and draws it: the actors as an SVG graph
// (coordinator → workers → their models, sessions and generations; pipelines across their
// parts), a table per kind, the event log, and one actor's full snapshot on click.
// Everything shown comes from the stream; nothing is made up between two pictures except
// workers that left, which stay drawn (marked lost, then recovered) from the events.
// No framework and no build step: the server hands this file out as it is.
"use strict";

(() => {
  // where the key, its user and the grant of a key this page made (sessionStorage only) are kept
  const ITEMS = { key: "mpakt.consoleKey", user: "mpakt.consoleUser", grant: "mpakt.consoleGrant" };
  const STREAM = "/api/v3/admin/actors/stream";
  const STALL_MS = 5000;       // no snapshot for this long: the stream is taken as dropped
  const EVENTS_KEPT = 200;     // entries in the event log
  const GONE_KEPT_MS = 10 * 60 * 1000; // how long a worker that left stays drawn
  const REJOINED_AFTER_MS = 5000;      // (see onSnapshot)
  const KIND_ORDER = ["worker", "model", "session", "generation", "pipeline", "load", "graph", "pool", "coordinator",
    "accounts"];
  const SVG = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);
  const el = {
    account: $("account"), accountStatus: $("account-status"), signOut: $("sign-out"), stream: $("stream-status"),
    banner: $("error-banner"), bannerText: $("error-text"), bannerDismiss: $("error-dismiss"),
    auth: $("auth"), loginForm: $("login-form"), loginUser: $("login-username"), loginPass: $("login-password"),
    keyForm: $("key-form"), keyInput: $("key-input"),
    forbidden: $("forbidden"), forbiddenMessage: $("forbidden-message"), forbiddenSignOut: $("forbidden-sign-out"),
    console: $("console"), health: $("health"), healthText: $("health-text"), snapshotAt: $("snapshot-at"),
    counts: $("counts"), gridMemBar: $("grid-mem-bar"), gridMemory: $("grid-memory"),
    graph: $("graph"), details: $("details"), detailsTitle: $("details-title"), detailsBody: $("details-body"),
    detailsClose: $("details-close"), eventLog: $("event-log"),
    filter: $("table-filter"), tabs: $("kind-tabs"), table: $("actor-table"),
  };

  const state = {
    key: localStorage.getItem(ITEMS.key) || "",
    user: localStorage.getItem(ITEMS.user) || "",
    controller: null,        // AbortController of the stream being read
    generation: 0,           // bumped on sign-out, so an old stream's loop stops
    snapshot: null,          // the last `snapshot` event's body
    previous: null,          // the actors of the one before (a worker missing since left)
    actors: new Map(),       // "kind:id" -> actor of the last snapshot
    gone: new Map(),         // worker id -> {actor, status: lost|recovered, lostAt, recoveredAt, detail}
    events: [],              // grid events seen, oldest first
    lastSeq: 0,
    selected: null,          // "kind:id" shown in the details panel
    kind: "worker",          // the table shown
    sort: { key: "id", dir: 1 },
  };

  // ------------------------------------------------------------------ HTTP

  const { ApiError, errorOf, describe, takeEvents } = window.mpakt;
  /** One JSON call (common.js), with this page's key unless `key` or `token` is given. */
  const api = (method, path, opts = {}) => window.mpakt.request(method, path, { key: state.key, ...opts });

  function showError(e, context) {
    el.bannerText.textContent = (context ? context + ": " : "") + describe(e);
    el.banner.hidden = false;
  }

  function clearError() {
    el.banner.hidden = true;
    el.bannerText.textContent = "";
  }

  // ------------------------------------------------------------------ formatting

  function mb(bytes) {
    if (typeof bytes !== "number") return "—";
    const v = bytes / 1e6;
    return (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(2)) + " MB";
  }

  function clock(iso) {
    // "2026-12-02T15:25:09.724Z" -> "15:25:09.724" (UTC, as the server writes it)
    return typeof iso === "string" && iso.length >= 23 ? iso.slice(11, 23) : String(iso ?? "");
  }

  function short(text, n) {
    const s = String(text ?? "");
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }

  const keyOf = (a) => `${a.kind}:${a.id}`;
  const num = (v) => (typeof v === "number" ? v : 0);

  // ------------------------------------------------------------------ accounts and keys

  /** view: auth (no key), connecting, forbidden (not an operator's key) or console. */
  function show(view) {
    el.auth.hidden = view !== "auth";
    el.forbidden.hidden = view !== "forbidden";
    el.console.hidden = view !== "console";
    el.account.hidden = view === "auth";
    if (state.key) {
      const tail = state.key.length > 10 ? "…" + state.key.slice(-4) : "";
      el.accountStatus.textContent = state.user ? `Signed in as ${state.user}` : `Using key ${state.key.slice(0, 4)}${tail}`;
    }
  }

  function keepKey(key, user, grant) {
    state.key = key;
    state.user = user || "";
    window.mpakt.storeKey(ITEMS, key, user, grant);
    clearError();
    start();
  }

  function forget() {
    stopStream();
    window.mpakt.dropKey(ITEMS);
    state.key = "";
    state.user = "";
    state.snapshot = null;
    state.previous = null;
    state.actors = new Map();
    state.gone = new Map();
    state.events = [];
    state.lastSeq = 0;
    state.selected = null;
    el.eventLog.replaceChildren();
    clearError();
    show("auth");
    el.loginUser.focus();
  }

  el.loginForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = $("login-submit");
    const username = el.loginUser.value.trim();
    submit.disabled = true;
    try {
      const signed = await window.mpakt.signIn(username, el.loginPass.value, "console page");
      el.loginPass.value = "";
      keepKey(signed.key, signed.user, signed.grant);
    } catch (e) {
      showError(e, "Sign in failed");
    } finally {
      submit.disabled = false;
    }
  });

  el.keyForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = el.keyInput.value.trim();
    if (!key) return;
    el.keyInput.value = "";
    keepKey(key, "", null);
  });

  el.signOut.addEventListener("click", forget);
  el.forbiddenSignOut.addEventListener("click", forget);
  el.bannerDismiss.addEventListener("click", clearError);

  // ------------------------------------------------------------------ the stream

  function setStream(s, text) {
    el.stream.dataset.state = s;
    el.stream.textContent = text;
  }

  function stopStream() {
    state.generation += 1;
    if (state.controller) state.controller.abort();
    state.controller = null;
  }


  /** Reads the stream until sign-out; reconnects (1 s, then up to 5 s apart) when it drops. */
  async function readStream() {
    const mine = state.generation;
    let wait = 1000;
    while (mine === state.generation) {
      const controller = new AbortController();
      state.controller = controller;
      let stall = null;
      const arm = () => {
        clearTimeout(stall);
        stall = setTimeout(() => controller.abort(), STALL_MS);
      };
      try {
        setStream(state.snapshot ? "reconnecting" : "connecting", state.snapshot ? "reconnecting…" : "connecting…");
        arm();
        const res = await fetch(STREAM, { headers: { Accept: "text/event-stream", "x-api-key": state.key },
          signal: controller.signal });
        if (!res.ok) {
          const e = await errorOf(res);
          if (e.status === 401 || e.status === 403) {
            clearTimeout(stall);
            return refused(e);
          }
          throw e;
        }
        if (mine !== state.generation) return;
        show("console");
        clearError();
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (mine !== state.generation) return;
          buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
          const [events, rest] = takeEvents(done ? buffer + "\n\n" : buffer);
          buffer = rest;
          for (const { event, data } of events) {
            let d;
            try { d = JSON.parse(data); } catch (_) { continue; }
            if (event === "snapshot") {
              arm();
              wait = 1000;
              setStream("live", "live");
              onSnapshot(d);
            } else if (event === "grid") {
              onGridEvent(d);
            }
          }
          if (done) break;
        }
        throw new ApiError("the stream ended", 0);
      } catch (e) {
        if (mine !== state.generation) return;
        const why = e.name === "AbortError" ? `no picture for ${STALL_MS / 1000} s` : describe(e);
        setStream("reconnecting", `reconnecting… (${why})`);
      } finally {
        clearTimeout(stall);
      }
      await new Promise((r) => setTimeout(r, wait));
      wait = Math.min(5000, wait * 2);
    }
  }

  function refused(e) {
    setStream("stopped", "not connected");
    if (e.status === 403) {
      el.forbiddenMessage.textContent = `${e.message} (HTTP ${e.status})`;
      show("forbidden");
    } else {
      show("auth");
      showError(e, "This key does not work");
      localStorage.removeItem(ITEMS.key);
      state.key = "";
    }
  }

  /** Opens the stream with the kept key; the console shows once the server accepted it. */
  function start() {
    stopStream();
    show("connecting");
    readStream();
  }

  // ------------------------------------------------------------------ what the stream says

  function onSnapshot(d) {
    state.snapshot = d;
    state.actors = new Map(d.actors.map((a) => [keyOf(a), a]));
    // a coordinator that restarted numbers its events from 1 again
    const last = state.actors.get("coordinator:coordinator")?.state.lastEvent;
    if (typeof last === "number" && last < state.lastSeq) state.lastSeq = last;
    const now = Date.now();
    // A worker that left is live again with its `joined` event; should that event have been
    // missed (the stream dropped meanwhile), when it answers a picture taken well after it left
    // (a picture gathered while it was lost may still hold its answer).
    for (const a of d.actors) {
      const g = a.kind === "worker" && a.answered ? state.gone.get(a.id) : null;
      if (g && d.atMs - Date.parse(g.recoveredAt || g.lostAt) > REJOINED_AFTER_MS) state.gone.delete(a.id);
    }
    for (const [id, g] of state.gone)
      if (now - g.seenAt > GONE_KEPT_MS) state.gone.delete(id);
    // a worker known before and absent now left the grid, whether or not its event was seen
    if (state.previous)
      for (const a of state.previous.values())
        if (a.kind === "worker" && !state.actors.has(keyOf(a)) && !state.gone.has(a.id))
          state.gone.set(a.id, { id: a.id, actor: a, status: "lost", lostAt: d.at, seenAt: now, detail: "gone from the picture" });
    // a worker that left is drawn from its last snapshot
    for (const g of state.gone.values()) {
      const cur = state.actors.get(`worker:${g.id}`);
      if (cur && cur.answered) g.actor = cur;
      else if (!g.actor) g.actor = state.previous?.get(`worker:${g.id}`) || cur || null;
    }
    state.previous = state.actors;
    render();
  }

  function onGridEvent(e) {
    if (e.seq <= state.lastSeq) return; // (seen before a reconnect)
    state.lastSeq = e.seq;
    state.events.push(e);
    if (state.events.length > EVENTS_KEPT) state.events.shift();
    if (e.kind === "worker") {
      const last = state.actors.get(`worker:${e.id}`) || state.gone.get(e.id)?.actor || null;
      if (e.what === "lost") {
        state.gone.set(e.id, { id: e.id, actor: last, status: "lost", lostAt: e.at, seenAt: Date.now(), detail: e.detail });
      } else if (e.what === "recovered") {
        const g = state.gone.get(e.id) || { id: e.id, actor: last, lostAt: null };
        Object.assign(g, { status: "recovered", recoveredAt: e.at, seenAt: Date.now(), detail: e.detail });
        state.gone.set(e.id, g);
      } else if (e.what === "joined") {
        state.gone.delete(e.id);
      }
    }
    addEventRow(e);
    if (state.snapshot) { renderHealth(); renderGraph(); }
  }

  // ------------------------------------------------------------------ event log

  function addEventRow(e) {
    const li = document.createElement("li");
    li.dataset.testid = "event";
    li.dataset.seq = e.seq;
    li.dataset.what = e.what;
    li.dataset.kind = e.kind;
    li.dataset.id = e.id;
    li.className = `ev ev-${e.what}`;
    const t = document.createElement("time");
    t.textContent = clock(e.at);
    const what = document.createElement("span");
    what.className = "ev-what";
    what.textContent = e.what;
    const who = document.createElement("button");
    who.type = "button";
    who.className = "link ev-who";
    who.textContent = `${e.kind} ${e.id}`;
    who.addEventListener("click", () => select(`${e.kind}:${e.id}`));
    const detail = document.createElement("span");
    detail.className = "ev-detail";
    detail.textContent = e.detail || "";
    li.append(t, what, who, detail);
    el.eventLog.prepend(li);
    while (el.eventLog.children.length > EVENTS_KEPT) el.eventLog.lastChild.remove();
  }

  // ------------------------------------------------------------------ drawing

  function render() {
    renderHealth();
    renderGraph();
    renderTable();
    renderDetails();
  }

  function byKind(kind) {
    return state.snapshot ? state.snapshot.actors.filter((a) => a.kind === kind) : [];
  }

  function renderHealth() {
    const d = state.snapshot;
    if (!d) return;
    el.snapshotAt.textContent = clock(d.at);
    el.snapshotAt.dateTime = d.at;
    el.snapshotAt.dataset.atMs = d.atMs;
    const workers = byKind("worker");
    const coord = state.actors.get("coordinator:coordinator");
    const counts = {};
    for (const k of KIND_ORDER) counts[k] = byKind(k).length;
    const lostSessions = byKind("session").filter((s) => s.state.lost === 1).length;
    const unanswered = d.actors.filter((a) => !a.answered);
    // lost and not yet recovered: by the events, or by a picture taken since the loss
    const lost = [...state.gone.values()].filter((g) => g.status === "lost" && (!g.lostAt || g.lostAt >= d.at)).map((g) => g.id);
    const recovering = num(coord?.state.workersRecovering) + byKind("load").filter((l) => l.state.recovery === 1).length;

    let s = "healthy";
    let text = `Healthy: ${workers.length} worker${workers.length === 1 ? "" : "s"}, every actor answered`;
    if (unanswered.length) {
      s = "degraded";
      text = `${unanswered.length} actor${unanswered.length === 1 ? "" : "s"} did not answer: ` +
        unanswered.map((a) => `${a.kind} ${a.id}`).join(", ");
    }
    if (lost.length || recovering) {
      s = "recovering";
      text = lost.length ? `Lost: worker ${lost.join(", ")}; placing what it held again`
        : "Recovering: placing a lost worker's models again";
    }
    if (!workers.length && s === "healthy") { s = "degraded"; text = "No worker in the pool"; }
    el.health.dataset.state = s;
    el.healthText.textContent = text;

    el.counts.replaceChildren();
    const add = (name, value, testid) => {
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      dd.dataset.testid = testid;
      dd.textContent = value;
      el.counts.append(dt, dd);
    };
    add("workers", counts.worker, "count-workers");
    add("models", counts.model, "count-models");
    add("sessions", counts.session, "count-sessions");
    add("lost sessions", lostSessions, "count-lost-sessions");
    add("generations", counts.generation, "count-generations");
    add("loads", counts.load, "count-loads");
    add("pipelines", counts.pipeline, "count-pipelines");
    add("graphs", counts.graph, "count-graphs");
    add("actors", d.actors.length, "count-actors");

    const total = workers.reduce((t, w) => t + num(w.state.totalBytes), 0);
    const free = workers.reduce((t, w) => t + num(w.state.freeBytes), 0);
    const resident = workers.reduce((t, w) => t + num(w.state.residentBytes), 0);
    el.gridMemory.dataset.totalBytes = total;
    el.gridMemory.dataset.freeBytes = free;
    el.gridMemory.textContent = `memory: ${mb(total - free)} used of ${mb(total)} (${mb(resident)} resident, ` +
      `${mb(free)} free) over ${workers.length} worker${workers.length === 1 ? "" : "s"}`;
    el.gridMemBar.style.width = total ? `${(100 * (total - free)) / total}%` : "0";
  }

  function svg(tag, attrs = {}, parent = null) {
    const n = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (parent) parent.append(n);
    return n;
  }

  const NODE_W = 260;
  const COL_W = 280;
  const CHARS = 33; // of 12 px monospace text across a box
  const LINE = 15;

  /** One actor as a box: a title line and text lines; returns its <g>. */
  function node(layer, a, x, y, lines, opts = {}) {
    const h = 10 + LINE * (lines.length + 1) + (opts.bar ? 12 : 0);
    const g = svg("g", { class: `node kind-${a.kind}`, transform: `translate(${x},${y})`, tabindex: "0",
      role: "button", "data-testid": "node", "data-kind": a.kind, "data-id": a.id,
      "data-answered": String(a.answered !== false), "data-state": opts.state || "up" }, layer);
    if (a.answered === false) g.classList.add("unanswered");
    if (opts.state && opts.state !== "up") g.classList.add(opts.state);
    if (state.selected === keyOf(a)) g.classList.add("selected");
    for (const [k, v] of Object.entries(opts.data || {})) g.setAttribute(`data-${k}`, v);
    svg("title", {}, g).textContent = `${a.kind} ${a.id}` + (a.answered === false ? " (did not answer)" : "");
    svg("rect", { width: NODE_W, height: h, rx: 7, class: "box" }, g);
    const title = svg("text", { x: 8, y: 17, class: "title" }, g);
    title.textContent = short(`${a.kind} ${a.id}`, CHARS - (opts.badge ? opts.badge.length + 1 : 0));
    if (opts.badge) {
      const b = svg("text", { x: NODE_W - 8, y: 17, class: "badge", "text-anchor": "end", "data-testid": "badge" }, g);
      b.textContent = opts.badge;
    }
    lines.forEach((line, i) => {
      const t = svg("text", { x: 8, y: 17 + LINE * (i + 1), class: "line" }, g);
      t.textContent = short(line, CHARS);
    });
    if (opts.bar) {
      const by = 10 + LINE * (lines.length + 1) - 4;
      svg("rect", { x: 8, y: by, width: NODE_W - 16, height: 8, rx: 3, class: "bar-bg" }, g);
      svg("rect", { x: 8, y: by, width: Math.max(0, Math.min(1, opts.bar)) * (NODE_W - 16), height: 8, rx: 3,
        class: "bar-fg", "data-testid": "bar" }, g);
    }
    g.addEventListener("click", () => select(keyOf(a)));
    g.addEventListener("keydown", (ev) => {
      if (ev.key !== "Enter" && ev.key !== " ") return;
      ev.preventDefault();
      select(keyOf(a));
    });
    return { g, x, y, w: NODE_W, h };
  }

  function renderGraph() {
    const d = state.snapshot;
    if (!d) return;
    const root = el.graph;
    root.replaceChildren();
    const edges = svg("g", { class: "edges" }, root);
    const layer = svg("g", { class: "nodes" }, root);
    const placed = new Map(); // "kind:id" -> box
    const put = (a, x, y, lines, opts) => {
      const box = node(layer, a, x, y, lines, opts);
      placed.set(keyOf(a), box);
      return box;
    };

    // a worker the events said left is drawn as such, even by a picture taken just before
    const workers = byKind("worker").filter((w) => !state.gone.has(w.id)).sort((a, b) => a.id.localeCompare(b.id));
    const gone = [...state.gone.entries()].sort(([a], [b]) => a.localeCompare(b));
    const columns = workers.length + gone.length;
    const width = Math.max(3, columns) * COL_W + 20;
    const mid = width / 2 - NODE_W / 2;

    // row 0: the coordinator, with the pool and the accounts beside it
    const coord = state.actors.get("coordinator:coordinator");
    const top = 10;
    let rowBottom = top;
    if (coord) {
      const c = coord.state;
      const b = put(coord, mid, top, [`${num(c.models)} models · ${num(c.sessions)} sessions · ${num(c.graphs)} graphs`,
        `${num(c.generations)} generations · ${num(c.loadsInProgress)} loads`,
        `${num(c.workersRecovering)} recovering · ${num(c.graphCallsInFlight)} calls in flight`]);
      rowBottom = Math.max(rowBottom, b.y + b.h);
    }
    for (const [k, dx] of [["pool:pool", COL_W], ["accounts:accounts", -COL_W]]) {
      const a = state.actors.get(k);
      if (!a) continue;
      const lines = a.kind === "pool" ? [`${num(a.state.workers)} workers`, `probe every ${num(a.state.probeEveryMs)} ms`]
        : [`store ${a.state.store ?? "—"}`];
      const b = put(a, Math.max(0, Math.min(width - NODE_W, mid + dx)), top, lines);
      rowBottom = Math.max(rowBottom, b.y + b.h);
    }

    // row 1: a column per worker (those that left at the end), its models, sessions and
    // generations below it
    const wy = rowBottom + 50;
    let bottom = wy;
    const sessionsOn = (wid) => byKind("session").filter((s) => s.state.worker === wid);
    const generationsOf = (sid) => byKind("generation").filter((g) => g.links.includes(`session:${sid}`));
    const stackSessions = (sessions, x, y) => {
      for (const s of sessions.sort((a, b) => a.id.localeCompare(b.id))) {
        const st = s.state;
        const b = put(s, x, y, [`${st.label ? st.label + " · " : ""}${num(st.steps)} steps · ${st.owner ?? ""}`,
          `model ${st.model ?? "—"}`], { state: st.lost === 1 ? "lost" : "up", badge: st.lost === 1 ? "lost" : "" });
        y = b.y + b.h + 8;
        for (const gen of generationsOf(s.id)) {
          const gs = gen.state;
          const gb = put(gen, x + 12, y, [`${num(gs.tokens)} of ${num(gs.maxNewTokens)} tokens · ${num(gs.tokensPerSecond)} tok/s`,
            `${(num(gs.elapsedMs) / 1000).toFixed(1)} s · ${gs.answer ?? (gs.workerLoop ? "worker loop" : "")}` +
              (gs.speculative ? ` · acceptance ${num(gs.acceptance).toFixed(2)}` : "")],
            { data: { tokens: num(gs.tokens) }, bar: gs.maxNewTokens ? num(gs.tokens) / gs.maxNewTokens : 0 });
          y = gb.y + gb.h + 8;
        }
      }
      return y;
    };

    workers.forEach((w, i) => {
      const x = 10 + i * COL_W;
      const st = w.state;
      const used = num(st.totalBytes) - num(st.freeBytes);
      const lines = w.answered === false ? ["did not answer: listed from the directory"] : [
        `${st.backend ?? "?"} · ${num(st.threads)} threads · ${num(st.callsInFlight)} calls`,
        `${mb(used)} used of ${mb(st.totalBytes)}`,
        `${mb(st.residentBytes)} resident · ${mb(st.freeBytes)} free`];
      if (num(st.busy)) lines.push(`busy ${num(st.busyStepsDone)}/${num(st.busySteps)} steps`);
      const data = { "total-bytes": st.totalBytes ?? "", "free-bytes": st.freeBytes ?? "",
        "used-bytes": st.totalBytes !== undefined ? used : "", "resident-bytes": st.residentBytes ?? "" };
      const b = put(w, x, wy, lines, { data, bar: st.totalBytes ? used / st.totalBytes : 0 });
      let y = b.y + b.h + 14;
      const models = byKind("model").filter((m) => m.state.placement === w.id);
      for (const m of models.sort((a, b) => a.id.localeCompare(b.id))) {
        const ms = m.state;
        const mbx = put(m, x, y, [short(ms.source ?? "", CHARS), `${mb(ms.residentBytes)} · ${num(ms.tensors)} tensors · ${ms.quantize ?? ""}`],
          { data: { "resident-bytes": ms.residentBytes ?? "" }, bar: st.totalBytes ? num(ms.residentBytes) / st.totalBytes : 0 });
        y = mbx.y + mbx.h + 8;
      }
      y = stackSessions(sessionsOn(w.id), x, y);
      bottom = Math.max(bottom, y);
    });

    gone.forEach(([id, g], j) => {
      const x = 10 + (workers.length + j) * COL_W;
      const a = g.actor ? { ...g.actor, answered: true } : { kind: "worker", id, links: [], state: {}, answered: true };
      const lines = [`lost at ${clock(g.lostAt) || "—"}`];
      if (g.status === "recovered") lines.push(`recovered at ${clock(g.recoveredAt)}`);
      if (g.detail) lines.push(short(g.detail, CHARS));
      const b = put(a, x, wy, lines, { state: g.status, badge: g.status });
      bottom = Math.max(bottom, b.y + b.h + 8);
    });

    // pipelines: below every column, each with its model and sessions, linked to its parts
    let py = bottom + 30;
    let px = 10;
    for (const p of byKind("pipeline")) {
      const ps = p.state;
      const b = put(p, px, py, [`${num(ps.parts)} parts · ${num(ps.partsLost)} lost`, `${mb(ps.residentBytes)} · ${num(ps.sessions)} sessions`],
        { state: num(ps.partsLost) ? "lost" : "up" });
      let y = b.y + b.h + 8;
      for (const m of byKind("model").filter((m) => m.links.includes(`pipeline:${p.id}`))) {
        const mbx = put(m, px, y, [short(m.state.source ?? "", CHARS), `${mb(m.state.residentBytes)} · ${m.state.placement ?? ""}`],
          { data: { "resident-bytes": m.state.residentBytes ?? "" } });
        y = mbx.y + mbx.h + 8;
      }
      y = stackSessions(sessionsOn(p.id), px, y);
      bottom = Math.max(bottom, y);
      px += COL_W;
    }

    // what has no place yet: models not on a worker, sessions whose worker left, loads
    const rest = d.actors.filter((a) => !placed.has(keyOf(a)) && ["model", "session", "load"].includes(a.kind));
    if (rest.length) {
      let x = 10;
      let y = bottom + 30;
      let rowH = 0;
      for (const a of rest) {
        if (x + NODE_W > width) { x = 10; y += rowH + 10; rowH = 0; }
        let b;
        if (a.kind === "load") {
          const ls = a.state;
          b = put(a, x, y, [`${ls.recovery === 1 ? "recovery · " : ""}${ls.phase ?? ""}`,
            `${num(ls.tensorsDone)} of ${num(ls.tensors)} tensors`,
            `${mb(ls.transferredBytes)} of ${mb(ls.publishedBytes)}`],
          { state: ls.recovery === 1 ? "recovering" : "up", bar: ls.publishedBytes ? num(ls.transferredBytes) / ls.publishedBytes : 0 });
        } else if (a.kind === "session") {
          const y0 = y;
          const yEnd = stackSessions([a], x, y);
          b = { x, y: y0, w: NODE_W, h: yEnd - y0 - 8 };
        } else {
          b = put(a, x, y, [short(a.state.source ?? "", CHARS), `placement ${a.state.placement ?? "—"}`], { badge: "unplaced" });
        }
        rowH = Math.max(rowH, b.h);
        x += COL_W;
      }
      bottom = y + rowH;
    }

    // edges from every actor's links between boxes drawn (the pool's to its workers are the
    // coordinator's too, so they are left out)
    const seen = new Set();
    for (const a of d.actors) {
      if (a.kind === "pool" || a.kind === "worker" && state.gone.has(a.id)) continue;
      const from = placed.get(keyOf(a));
      if (!from) continue;
      for (const link of a.links) {
        const to = link.startsWith("worker:") && state.gone.has(link.slice(7)) ? null : placed.get(link);
        if (!to || link === "pool:pool" && a.kind !== "coordinator") continue;
        const pair = [keyOf(a), link].sort().join("|");
        if (seen.has(pair)) continue;
        seen.add(pair);
        const [p, q] = from.y <= to.y ? [from, to] : [to, from];
        const x1 = p.x + p.w / 2, y1 = p.y + p.h, x2 = q.x + q.w / 2, y2 = q.y;
        const sameColumn = Math.abs(x1 - x2) < 1;
        // one under the other: a curve along their left edges; else from bottom to top
        const [ya, yb] = [p.y + p.h / 2, q.y + q.h / 2];
        const dpath = sameColumn ? `M${p.x + 4},${ya} C${p.x - 14},${ya} ${q.x - 14},${yb} ${q.x + 4},${yb}`
          : `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}`;
        svg("path", { d: dpath, class: "edge", "data-from": keyOf(a), "data-to": link }, edges);
      }
    }
    root.setAttribute("width", width);
    root.setAttribute("height", bottom + 20);
    root.setAttribute("viewBox", `0 0 ${width} ${bottom + 20}`);
  }

  // ------------------------------------------------------------------ tables

  function cells(a) {
    return { id: a.id, answered: a.answered ? "yes" : "no", mailbox: a.mailbox, messages: a.messages,
      errors: a.errors.length, links: a.links.join(" "), ...a.state };
  }

  function renderTable() {
    const d = state.snapshot;
    if (!d) return;
    const kinds = KIND_ORDER.filter((k) => d.actors.some((a) => a.kind === k));
    for (const a of d.actors) if (!kinds.includes(a.kind)) kinds.push(a.kind);
    if (!kinds.includes(state.kind) && kinds.length) state.kind = kinds[0];
    el.tabs.replaceChildren();
    for (const k of kinds) {
      const b = document.createElement("button");
      b.type = "button";
      b.setAttribute("role", "tab");
      b.className = "tab" + (k === state.kind ? " active" : "");
      b.setAttribute("aria-selected", String(k === state.kind));
      b.dataset.testid = "kind-tab";
      b.dataset.kind = k;
      b.textContent = `${k} (${d.actors.filter((a) => a.kind === k).length})`;
      b.addEventListener("click", () => { state.kind = k; state.sort = { key: "id", dir: 1 }; renderTable(); });
      el.tabs.append(b);
    }

    const rows = d.actors.filter((a) => a.kind === state.kind).map((a) => ({ a, c: cells(a) }));
    const columns = [];
    for (const { c } of rows) for (const k of Object.keys(c)) if (!columns.includes(k)) columns.push(k);
    const needle = el.filter.value.trim().toLowerCase();
    const shown = needle ? rows.filter(({ c }) => Object.values(c).some((v) => String(v).toLowerCase().includes(needle))) : rows;
    const { key, dir } = state.sort;
    shown.sort((p, q) => {
      const x = p.c[key], y = q.c[key];
      if (x === undefined && y === undefined) return 0;
      if (x === undefined) return 1;
      if (y === undefined) return -1;
      if (typeof x === "number" && typeof y === "number") return dir * (x - y);
      return dir * String(x).localeCompare(String(y), undefined, { numeric: true });
    });

    el.table.dataset.kind = state.kind;
    el.table.replaceChildren();
    const head = el.table.createTHead().insertRow();
    for (const col of columns) {
      const th = document.createElement("th");
      th.scope = "col";
      const b = document.createElement("button");
      b.type = "button";
      b.className = "link sort";
      b.dataset.testid = "column";
      b.dataset.column = col;
      b.textContent = col + (col === key ? (dir > 0 ? " ▲" : " ▼") : "");
      th.setAttribute("aria-sort", col === key ? (dir > 0 ? "ascending" : "descending") : "none");
      b.addEventListener("click", () => {
        state.sort = { key: col, dir: state.sort.key === col ? -state.sort.dir : 1 };
        renderTable();
      });
      th.append(b);
      head.append(th);
    }
    const body = el.table.createTBody();
    for (const { a, c } of shown) {
      const tr = body.insertRow();
      tr.dataset.testid = "actor-row";
      tr.dataset.kind = a.kind;
      tr.dataset.id = a.id;
      tr.dataset.answered = String(a.answered);
      if (!a.answered) tr.classList.add("unanswered");
      if (state.selected === keyOf(a)) tr.classList.add("selected");
      for (const col of columns) {
        const td = tr.insertCell();
        td.dataset.column = col;
        const v = c[col];
        td.textContent = v === undefined ? "" : v === null ? "null" : String(v);
        if (typeof v === "number") td.className = "n";
      }
      tr.addEventListener("click", () => select(keyOf(a)));
    }
    if (!shown.length) {
      const td = body.insertRow().insertCell();
      td.colSpan = Math.max(1, columns.length);
      td.className = "hint";
      td.textContent = rows.length ? "no actor of this kind matches the filter" : "none";
    }
  }

  el.filter.addEventListener("input", () => renderTable());

  // ------------------------------------------------------------------ details

  function select(k) {
    state.selected = k;
    renderGraph();
    renderTable();
    renderDetails();
    el.details.scrollIntoView({ block: "nearest" });
  }

  el.detailsClose.addEventListener("click", () => select(null));

  function renderDetails() {
    const k = state.selected;
    el.detailsClose.hidden = !k;
    if (!k) {
      el.detailsTitle.textContent = "Details";
      el.details.dataset.key = "";
      const p = document.createElement("p");
      p.className = "hint";
      p.textContent = "Click an actor in the graph or a table row to see its full snapshot.";
      el.detailsBody.replaceChildren(p);
      return;
    }
    const [kind, ...rest] = k.split(":");
    const id = rest.join(":");
    let a = state.actors.get(k);
    let note = "";
    if (!a && kind === "worker" && state.gone.has(id)) {
      const g = state.gone.get(id);
      a = g.actor;
      note = `left the grid at ${clock(g.lostAt)}` + (g.status === "recovered" ? `; recovered at ${clock(g.recoveredAt)}` : "") +
        ": its last snapshot";
    }
    el.details.dataset.key = k;
    el.detailsTitle.textContent = `${kind} ${id}`;
    const body = [];
    const para = (text, cls, testid) => {
      const p = document.createElement("p");
      if (cls) p.className = cls;
      if (testid) p.dataset.testid = testid;
      p.textContent = text;
      body.push(p);
      return p;
    };
    if (!a) {
      para("Not in the current picture: it is gone.", "hint", "details-gone");
      el.detailsBody.replaceChildren(...body);
      return;
    }
    if (note) para(note, "hint", "details-note");
    const facts = document.createElement("dl");
    facts.className = "facts";
    const fact = (name, value, testid) => {
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      dd.dataset.testid = testid;
      dd.textContent = value;
      facts.append(dt, dd);
    };
    fact("answered", a.answered ? "yes" : "no — listed from what the coordinator knows", "details-answered");
    fact("mailbox", String(a.mailbox), "details-mailbox");
    fact("messages", String(a.messages), "details-messages");
    body.push(facts);

    const h = (text) => { const e = document.createElement("h3"); e.textContent = text; body.push(e); };
    h(`links (${a.links.length})`);
    const links = document.createElement("ul");
    links.className = "links";
    links.dataset.testid = "details-links";
    for (const l of a.links) {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      b.className = "link";
      b.dataset.testid = "details-link";
      b.textContent = l;
      b.addEventListener("click", () => select(l));
      li.append(b);
      links.append(li);
    }
    body.push(links);

    h("state");
    const table = document.createElement("table");
    table.className = "state-table";
    table.dataset.testid = "details-state";
    for (const [name, v] of Object.entries(a.state)) {
      const tr = table.insertRow();
      tr.dataset.name = name;
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = name;
      const td = tr.insertCell();
      td.textContent = v === null ? "null" : String(v);
      tr.prepend(th);
    }
    body.push(table);

    h(`errors (${a.errors.length})`);
    const errors = document.createElement("ol");
    errors.className = "errors";
    errors.dataset.testid = "details-errors";
    for (const e of a.errors) {
      const li = document.createElement("li");
      li.textContent = e;
      errors.append(li);
    }
    body.push(errors);
    el.detailsBody.replaceChildren(...body);
  }

  // ------------------------------------------------------------------ start

  if (state.key) start();
  else { show("auth"); el.loginUser.focus(); }
})();
