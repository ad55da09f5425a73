// toolrelay dashboard: plain JavaScript, no build step.
//
// Reads over HTTP (Authorization header), follows events over two WebSockets
// (all sessions, and the selected session), and acts over HTTP. Every socket
// resumes with after=<last cursor> when it drops, so the views never miss or
// repeat an event. Untrusted text only ever reaches the page via textContent.
"use strict";

(() => {
  const TOKEN_KEY = "toolrelay.token";
  const NAME_KEY = "toolrelay.client";
  const MAX_TIMELINE = 400; // entries kept per timeline; older ones drop off
  const BACKOFF = { initialMs: 250, factor: 1.7, maxMs: 5000, attempts: 1000 };
  const TERMINAL_TURN = new Set(["turn.completed", "turn.failed", "turn.cancelled"]);
  // Close codes documented in specs/streaming-protocol.md.
  const CLOSE = { normal: 1000, unsupported: 1003, policy: 1008, badCursor: 4400, expired: 4410 };

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    clientName: sessionStorage.getItem(NAME_KEY),
    sessions: new Map(),
    selected: null, // SessionView of the selected session
    globalSocket: null,
    seenModels: new Map(), // session id -> the model its turns reported (server default)
  };

  // ---------------------------------------------------------------- HTTP

  class ApiError extends Error {
    constructor(status, body) {
      const err = body && typeof body === "object" ? body.error : null;
      super((err && err.message) || `HTTP ${status}`);
      this.status = status;
      this.body = body;
      this.code = err && err.code;
    }
  }

  async function api(method, path, body) {
    const headers = { Authorization: `Bearer ${state.token}`, "X-Client-Name": state.clientName };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
    let decoded = null;
    const text = await response.text();
    if (text) {
      try { decoded = JSON.parse(text); } catch { decoded = text; }
    }
    if (!response.ok) {
      if (response.status === 401) signOut("The server rejected the token.");
      throw new ApiError(response.status, decoded);
    }
    return decoded;
  }

  const listOf = (body, key) => (Array.isArray(body) ? body : (body && body[key]) || []);

  // The winning answer inside a 409 body, wherever the server nests it.
  function findResolution(body) {
    const err = body && typeof body === "object" ? body.error : null;
    const candidates = [body, err];
    for (const holder of [body, err]) {
      if (holder && typeof holder === "object") {
        candidates.push(holder.resolution, holder.winner, holder.winning);
      }
    }
    return candidates.find((c) => c && typeof c === "object" && "decision" in c) || null;
  }

  // ------------------------------------------------------- resumable sockets

  // One event stream that reconnects with after=<cursor> and checks ordering:
  // on a session stream session_seq must grow by exactly one, on the
  // all-sessions stream seq must increase. A repeat is dropped; a gap makes
  // the socket reconnect from the last good cursor so the server fills it.
  class ResumableSocket {
    constructor({ path, field, after, onEvent, onState, onEnd, onReconnect }) {
      Object.assign(this, { path, field, cursor: after, onEvent, onState, onEnd, onReconnect });
      this.ws = null;
      this.stopped = false;
      this.attempt = 0;
      this.timer = null;
      this.state = "connecting";
      this.connects = 0;
    }

    url() {
      const params = new URLSearchParams();
      if (this.cursor !== null && this.cursor !== undefined) params.set("after", this.cursor);
      params.set("token", state.token);
      params.set("client", state.clientName);
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      return `${scheme}://${location.host}${this.path}?${params}`;
    }

    setState(next, detail = "") {
      this.state = next;
      this.detail = detail;
      this.onState();
    }

    start() {
      if (this.stopped) return;
      this.setState(this.connects === 0 ? "connecting" : "reconnecting");
      const ws = new WebSocket(this.url());
      this.ws = ws;
      ws.onopen = () => {
        this.connects += 1;
        this.setState("open");
        if (this.connects > 1 && this.onReconnect) this.onReconnect();
      };
      ws.onmessage = (message) => this.receive(ws, message);
      ws.onclose = (closed) => this.closed(ws, closed);
    }

    receive(ws, message) {
      if (ws !== this.ws) return;
      let event;
      try { event = JSON.parse(message.data); } catch { return; }
      const value = event[this.field];
      if (this.cursor !== null && this.cursor !== undefined) {
        if (value <= this.cursor) return; // already shown
        if (this.field === "session_seq" && value !== this.cursor + 1) {
          // A hole: resume from the last event we have; the server replays it.
          ws.close(4000, "gap");
          return;
        }
      }
      this.cursor = value;
      this.attempt = 0;
      this.onEvent(event);
    }

    closed(ws, closed) {
      if (ws !== this.ws) return;
      this.ws = null;
      if (this.stopped) return;
      const { code, reason } = closed;
      if (code === CLOSE.normal && this.field === "session_seq") {
        this.stop("ended");
        this.onEnd && this.onEnd(reason || "the session ended");
        return;
      }
      if (code === CLOSE.expired) {
        // Events after our cursor are gone: start over from what the log still holds.
        const match = /after=(\d+)/.exec(reason || "");
        this.cursor = match ? Number(match[1]) : null;
        this.onEnd && this.onEnd("expired", true);
      } else if (code === CLOSE.badCursor) {
        this.cursor = null;
      } else if (code === CLOSE.policy || code === CLOSE.unsupported) {
        this.stop("closed");
        return;
      }
      this.attempt += 1;
      if (this.attempt > BACKOFF.attempts) {
        this.stop("offline");
        return;
      }
      const base = Math.min(BACKOFF.maxMs, BACKOFF.initialMs * BACKOFF.factor ** (this.attempt - 1));
      const delay = base * (0.8 + Math.random() * 0.4);
      this.setState("reconnecting", `retry ${this.attempt} in ${(delay / 1000).toFixed(1)} s`);
      this.timer = setTimeout(() => this.start(), delay);
    }

    stop(finalState = "stopped") {
      this.stopped = true;
      clearTimeout(this.timer);
      const ws = this.ws;
      this.ws = null;
      if (ws) ws.close(1000, "client closed");
      this.setState(finalState);
    }
  }

  function renderConnection() {
    const sockets = [state.globalSocket, state.selected && state.selected.socket].filter(
      (s) => s && s.state !== "stopped" && s.state !== "ended",
    );
    let label = "offline";
    let stateName = "offline";
    if (sockets.length && sockets.every((s) => s.state === "open")) {
      label = "live";
      stateName = "live";
    } else if (sockets.some((s) => s.state === "reconnecting" || s.state === "connecting")) {
      const waiting = sockets.find((s) => s.state === "reconnecting" || s.state === "connecting");
      label = waiting.state === "connecting" ? "connecting…" : "reconnecting…";
      stateName = "reconnecting";
    }
    $("connection").dataset.state = stateName;
    $("connection-text").textContent = label;
  }

  // ------------------------------------------------------------ formatting

  const shortId = (id) => (id && id.length > 14 ? `${id.slice(0, 14)}…` : id || "");
  const clock = (ts) => {
    const date = new Date(ts);
    return Number.isNaN(date.getTime()) ? ts : date.toLocaleTimeString();
  };
  const duration = (ms) => (typeof ms === "number" ? `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms` : "");

  function badge(sideEffects) {
    const value = sideEffects || "none";
    return el("span", { class: `badge fx-${value}`, title: `side effects: ${value}`, text: value });
  }

  function statusTag(status) {
    return el("span", { class: `status st-${status}`, text: status.replace(/_/g, " ") });
  }

  function summarizeInput(input) {
    if (!input || typeof input !== "object") return "";
    for (const key of ["command", "path", "pattern", "url", "task", "query"]) {
      if (typeof input[key] === "string") return input[key];
    }
    const text = JSON.stringify(input);
    return text.length > 120 ? `${text.slice(0, 119)}…` : text;
  }

  // A failed turn's reason and message, e.g. "model_error: anthropic: auth (HTTP 401): ...".
  function failureText(d) {
    const reason = d.reason || "failed";
    return d.message ? `${reason}: ${d.message}` : reason;
  }

  // A plan summary without the tool name it starts with (shown beside it).
  function withoutName(summary, name) {
    for (const prefix of [`${name}: `, `${name} `]) {
      if (name && summary && summary.startsWith(prefix)) return summary.slice(prefix.length);
    }
    return summary || "";
  }

  const agentTypeOf = (input) => (input && typeof input.agent_type === "string" ? input.agent_type : "");

  // "blocked by guardrail protected_files" when a guardrail or hook refused the call.
  function blockedText(d) {
    const by = d.blocked_by;
    if (!by || typeof by !== "object") return "";
    return `blocked by ${by.kind || "rule"} ${by.name || "?"}`;
  }

  function hookText(d) {
    let text = `hook ${d.hook || "?"} (${d.event || "?"}): ${d.decision || "?"}`;
    if (d.exit_code !== undefined && d.exit_code !== null) text += `, exit ${d.exit_code}`;
    if (typeof d.duration_ms === "number") text += ` · ${duration(d.duration_ms)}`;
    return text;
  }

  const hookLevel = (d) => ({ allow: "info", block: "error" }[d.decision] || "warn");

  function retryText(d) {
    const reason = d.error_kind || d.reason || "retryable error";
    let text = `Model call failed (${reason}), retry ${d.attempt ?? "?"}`;
    if (typeof d.delay_s === "number") text += ` in ${d.delay_s} s`;
    if (d.provider) text += ` [${d.provider}]`;
    if (d.message) text += `: ${d.message}`;
    return text;
  }

  function toolsChangedText(d) {
    const names = [...(d.added || []).map((n) => `+${n}`), ...(d.removed || []).map((n) => `-${n}`)];
    const text = `Tools changed${d.source ? ` (${d.source})` : ""}`;
    return names.length ? `${text}: ${names.join(", ")}` : text;
  }

  // key=value of the data's short scalar fields: how an unknown event reads.
  function genericText(d) {
    return Object.entries(d || {})
      .filter(([, v]) => ["string", "number", "boolean"].includes(typeof v) && String(v).length <= 60)
      .map(([k, v]) => `${k}=${v}`)
      .join(" ");
  }

  const basename = (path) => {
    const parts = String(path || "").split("/").filter(Boolean);
    return parts.length ? parts[parts.length - 1] : String(path || "");
  };

  function describe(event) {
    const d = event.data || {};
    switch (event.type) {
      case "session.created": return `workspace ${d.workspace || ""}`;
      case "session.deleted": return d.reason || "deleted";
      case "client.attached": return `${d.client_name} attached`;
      case "client.detached": return `${d.client_name} left${d.reason ? ` (${d.reason})` : ""}`;
      case "turn.started": return `${d.source || "turn"} by ${d.created_by || "?"}`;
      case "turn.failed": return failureText(d);
      case "turn.cancelled": return d.reason || "";
      case "message.delta": return d.text || "";
      case "message.completed": {
        const m = d.message || {};
        const texts = (m.content || []).filter((b) => b.type === "text").map((b) => b.text);
        const tools = (m.content || []).filter((b) => b.type === "tool_use").map((b) => b.name);
        const results = (m.content || []).filter((b) => b.type === "tool_result");
        const failed = results.filter((b) => b.is_error).length;
        let text = texts.join(" ");
        if (!text && tools.length) text = `calls ${tools.join(", ")}`;
        if (!text && results.length) {
          text = `${results.length} tool result${results.length > 1 ? "s" : ""}`
            + (failed ? `, ${failed} failed` : "");
        }
        return `${m.role}: ${text}`;
      }
      case "tool.called": return `${d.tool_name} ${summarizeInput(d.input)}`;
      case "tool.input_invalid": return `${d.tool_name}: ${(d.errors || []).map((e) => e.message).join("; ")}`;
      case "tool.confirmation_requested": return `${d.tool_name} asks: ${d.input_summary || ""}`;
      case "tool.confirmation_resolved":
        return `${d.decision} by ${d.resolved_by}${d.message ? `: ${d.message}` : ""}`;
      case "tool.output_delta": return (d.text || "").trim();
      case "tool.completed": return `${d.tool_name} in ${duration(d.duration_ms)}`;
      case "tool.failed": return `${d.tool_name}: ${blockedText(d) || d.error_class}: ${d.message}`;
      case "turn.completed":
        return Array.isArray(d.plan) ? `dry-run plan: ${plural(d.plan.length, "action")}` : "";
      case "tool.planned": return `${d.tool_name} planned: ${d.summary || ""}`;
      case "hook.completed": return hookText(d);
      case "guardrail.warning": return `${d.rule}: ${d.message}`;
      case "quality_gate.completed":
        return `${d.name} ${d.passed ? "passed" : "failed"}${d.exit_code !== undefined && d.exit_code !== null ? ` (exit ${d.exit_code})` : ""}`;
      case "model.retry": return retryText(d);
      case "tools.changed": return toolsChangedText(d);
      case "memory.added":
      case "memory.replaced":
      case "memory.deleted": return `${d.memory_id || ""} ${d.preview || ""}`.trim();
      default: return genericText(d);
    }
  }

  // A sub-agent's event, as its parent's stream carries it: say whose it is.
  function subagentPrefix(event) {
    const d = event.data || {};
    if (!d.subagent_session_id) return "";
    return `[sub-agent${d.agent_type ? ` ${d.agent_type}` : ""} ${shortId(d.subagent_session_id)}] `;
  }

  function appendTimeline(list, event, withSession) {
    // Streamed text arrives in many small deltas: grow one row per message
    // instead of adding a row per fragment. data-session-seqs lists every
    // event a row stands for, so nothing is hidden.
    const top = list.firstElementChild;
    if (
      event.type === "message.delta" && top && top.dataset.type === "message.delta"
      && top.dataset.sessionId === event.session_id && top.dataset.turnId === String(event.turn_id)
      && (top.dataset.subagentSessionId || "") === ((event.data && event.data.subagent_session_id) || "")
    ) {
      top.querySelector(".tl-text").textContent += (event.data && event.data.text) || "";
      top.dataset.sessionSeqs += ` ${event.session_seq}`;
      return;
    }
    const item = el(
      "li",
      {
        class: `tl tl-${event.type.replace(/\./g, "-")}`,
        "data-seq": event.seq,
        "data-session-seqs": String(event.session_seq),
        "data-session-id": event.session_id,
        "data-turn-id": String(event.turn_id),
        "data-type": event.type,
      },
      el("time", { datetime: event.ts, text: clock(event.ts) }),
      el("span", { class: "tl-type", text: event.type }),
      withSession
        ? el("span", { class: "tl-session", title: event.session_id, text: sessionLabel(event.session_id) })
        : null,
      el("span", { class: "tl-text", text: subagentPrefix(event) + describe(event) }),
    );
    const child = event.data && event.data.subagent_session_id;
    if (child) item.dataset.subagentSessionId = child;
    list.prepend(item);
    while (list.childElementCount > MAX_TIMELINE) list.lastElementChild.remove();
  }



  // ------------------------------------------------------------- sessions

  // Sessions are named for people: their name, else their workspace's last
  // component; ids stay in titles and data attributes only.
  function sessionLabel(id) {
    const session = state.sessions.get(id);
    if (!session) return shortId(id);
    return session.name || basename(session.workspace) || shortId(id);
  }

  function modelText(session) {
    if (!session) return "";
    if (session.model) return session.model;
    const resolved = session.resolved_model || state.seenModels.get(session.id);
    return resolved ? `${resolved} (server default)` : "server default";
  }

  function renderSessions() {
    const list = $("session-list");
    list.replaceChildren();
    const sessions = [...state.sessions.values()].sort((a, b) =>
      String(b.created_at || "").localeCompare(String(a.created_at || "")),
    );
    for (const session of sessions) {
      const selected = state.selected && state.selected.id === session.id;
      const status = session.status || "idle";
      const button = el(
        "button",
        {
          type: "button",
          class: "session-item",
          title: session.id,
          "data-session-id": session.id,
          "aria-current": selected ? "true" : undefined,
          onclick: () => selectSession(session.id),
        },
        el("span", { class: "session-name", text: sessionLabel(session.id) }),
        el("span", { class: "session-ws", text: session.workspace || "" }),
        el(
          "span",
          { class: "session-meta" },
          el("span", { class: "session-model", text: modelText(session) }),
          el("span", { class: `session-status st-${status}`, text: status }),
          session.agent ? el("span", { class: "session-agent", text: `agent ${session.agent}` }) : null,
          session.dry_run ? el("span", { class: "session-dry-run", text: "dry-run" }) : null,
          session.parent_session_id
            ? el("span", { class: "session-parent", text: `sub-agent of ${sessionLabel(session.parent_session_id)}` })
            : null,
          session.created_at ? el("span", { text: `created ${clock(session.created_at)}` }) : null,
        ),
      );
      list.append(el("li", {}, button));
    }
    $("no-sessions").hidden = sessions.length > 0;
  }

  async function loadSessions() {
    const body = await api("GET", "/sessions");
    state.sessions = new Map(listOf(body, "sessions").map((s) => [s.id, s]));
    renderSessions();
  }

  async function refreshSession(id) {
    try {
      const session = await api("GET", `/sessions/${encodeURIComponent(id)}`);
      state.sessions.set(id, session);
    } catch (err) {
      if (err.status === 404) state.sessions.delete(id);
    }
    renderSessions();
  }

  function onGlobalEvent(event) {
    appendTimeline($("global-timeline"), event, true);
    const known = state.sessions.get(event.session_id);
    if (event.type === "session.created") refreshSession(event.session_id);
    else if (event.type === "session.deleted") {
      state.sessions.delete(event.session_id);
      renderSessions();
    } else if (
      known && !(event.data && event.data.subagent_session_id)
      && (event.type === "turn.started" || TERMINAL_TURN.has(event.type))
    ) {
      // (A sub-agent's turn, carried on its parent's stream, is not the parent's.)
      known.status = event.type === "turn.started" ? "running" : "idle";
      if (event.data && event.data.model) state.seenModels.set(event.session_id, event.data.model);
      renderSessions();
    }
  }

  async function createSession(form) {
    const submit = form.querySelector("button[type=submit]");
    const body = { workspace: $("new-workspace").value.trim() };
    const name = $("new-name").value.trim();
    const model = $("new-model").value.trim();
    if (name) body.name = name;
    if (model) body.model = model;
    // Only what was set: an older server never sees fields it does not know.
    const profile = $("new-profile").value.trim();
    const agent = $("new-agent").value.trim();
    if (profile) body.profile = profile;
    if (agent) body.agent = agent;
    if ($("new-dry-run").checked) body.dry_run = true;
    $("new-session-error").textContent = "";
    submit.disabled = true;
    try {
      const session = await api("POST", "/sessions", body);
      state.sessions.set(session.id, session);
      renderSessions();
      form.reset();
      $("new-session-panel").open = false;
      selectSession(session.id);
      $("message-input").focus();
    } catch (err) {
      $("new-session-error").textContent = `Could not create the session: ${err.message}`;
    } finally {
      submit.disabled = false;
    }
  }

  // ---------------------------------------------------------- session view

  const OPEN_CALL = ["requested", "awaiting_confirmation", "running"];

  const plural = (n, word, before = "", after = "") => `${before}${n} ${word}${n === 1 ? "" : "s"}${after}`;

  function timeLeft(expiresAt) {
    const ms = Date.parse(expiresAt) - Date.now();
    if (Number.isNaN(ms)) return `expires ${expiresAt}`;
    if (ms <= 0) return "expired";
    const s = Math.ceil(ms / 1000);
    const m = Math.floor(s / 60);
    return m ? `${m} min ${String(s % 60).padStart(2, "0")} s left` : `${s} s left`;
  }

  // One conversation lane: the session's own, or a sub-agent's, nested under
  // the dispatch_subagent call that started it. Calls are kept per lane, so a
  // sub-agent's tool_use ids never collide with the parent's.
  class Lane {
    constructor(view, list, sub = null) {
      this.view = view;
      this.list = list;
      this.sub = sub; // null, or { sessionId, agentType, statusNode, labelNode }
      this.calls = new Map(); // tool_use_id -> call state (table row and conversation block)
      this.streaming = null; // the assistant message whose deltas are arriving
    }

    add(node) {
      this.list.append(node);
      if (!this.sub) this.view.renderEmpty();
      return node;
    }

    get label() {
      return this.sub ? `sub-agent${this.sub.agentType ? ` ${this.sub.agentType}` : ""}` : "";
    }

    setAgentType(agentType) {
      if (!this.sub || !agentType || this.sub.agentType) return;
      this.sub.agentType = agentType;
      this.sub.labelNode.textContent = this.label;
    }

    setStatus(status) {
      if (!this.sub) return;
      this.sub.statusNode.replaceChildren(statusTag(status));
      this.sub.box.dataset.status = status;
    }

    // A one-line note in the lane (kind: a class suffix; level: info|ok|warn|error).
    note(text, level = "info", kind = "note", detail = null) {
      return this.add(el(
        "li",
        { class: `turn-note note-${kind}`, "data-level": level },
        el("span", { class: "note-text", text }),
        detail,
      ));
    }

    // A line under the call it concerns (hooks, guardrail warnings), or a note.
    aboutCall(toolUseId, text, level, kind) {
      if (!toolUseId) return this.note(text, level, kind);
      const call = this.updateCall(toolUseId, {});
      if (!call.events) {
        call.events = el("ul", { class: "tool-events" });
        call.block.insertBefore(call.events, call.errorLine);
      }
      call.events.append(el("li", { class: `tool-event ev-${kind}`, "data-level": level, text }));
      return call.events;
    }

    // Streamed text grows one assistant message per model call.
    delta(event) {
      const d = event.data || {};
      const step = d.step === undefined ? null : d.step;
      let live = this.streaming;
      if (!live || live.turnId !== event.turn_id || live.step !== step) {
        const text = el("div", { class: "text" });
        const node = el(
          "li",
          { class: "msg msg-assistant streaming", "data-turn-id": event.turn_id },
          el("span", { class: "who", text: "assistant" }),
          text,
        );
        live = { turnId: event.turn_id, step, node, text };
        this.streaming = live;
        this.add(node);
      }
      live.text.textContent += d.text || "";
    }

    message(event) {
      const m = (event.data && event.data.message) || {};
      const blocks = m.content || [];
      const text = blocks.filter((b) => b.type === "text").map((b) => b.text).join("\n");
      if (m.role === "user") {
        if (text) {
          this.add(el(
            "li",
            { class: "msg msg-user", "data-turn-id": event.turn_id },
            el("span", { class: "who", text: this.sub ? "task" : "user" }),
            el("div", { class: "text", text }),
          ));
        }
      } else if (m.role === "assistant") {
        const live = this.streaming;
        if (live && live.turnId === event.turn_id) {
          // The complete message is the truth; the deltas were its preview.
          if (text) live.text.textContent = text;
          live.node.classList.remove("streaming");
          this.streaming = null;
        } else if (text) {
          this.add(el(
            "li",
            { class: "msg msg-assistant", "data-turn-id": event.turn_id },
            el("span", { class: "who", text: "assistant" }),
            el("div", { class: "text", text }),
          ));
        }
      }
      for (const block of blocks) {
        if (block.type === "tool_use") {
          this.updateCall(block.id, {
            name: block.name, input: summarizeInput(block.input), agentType: agentTypeOf(block.input),
          });
        }
      }
    }

    updateCall(toolUseId, patch) {
      if (!toolUseId) return null;
      let call = this.calls.get(toolUseId);
      if (!call) {
        call = {
          id: toolUseId, name: "?", fx: "", input: "", status: "requested", ms: null,
          confirmation: "", error: "", term: null, lastStream: null, lastSpan: null,
        };
        call.row = el("tr", { "data-tool-use-id": toolUseId });
        call.head = el("div", { class: "tool-head" });
        call.note = el("p", { class: "tool-note" });
        call.errorLine = el("p", { class: "tool-error", role: "status" });
        call.block = el(
          "li",
          { class: "tool-block", "data-tool-use-id": toolUseId },
          call.head, call.note, call.errorLine,
        );
        if (this.sub) {
          call.row.dataset.subagentSessionId = this.sub.sessionId;
          call.block.dataset.subagentSessionId = this.sub.sessionId;
        }
        this.calls.set(toolUseId, call);
        $("calls-body").append(call.row);
        this.add(call.block);
      }
      for (const [key, value] of Object.entries(patch)) {
        if (value !== undefined && value !== null && value !== "") call[key] = value;
      }
      // A sub-agent's calls sit in the same table, named after who made them.
      const tableName = this.sub ? `${this.label} › ${call.name}` : call.name;
      call.row.dataset.status = call.status;
      call.row.replaceChildren(
        el("td", { class: "call-name", text: tableName }),
        el("td", {}, call.fx ? badge(call.fx) : ""),
        el("td", { class: "call-input", title: call.input, text: call.input }),
        el("td", {}, statusTag(call.status), call.error ? el("div", { class: "call-error", text: call.error }) : null),
        el("td", { class: "call-duration", text: duration(call.ms) }),
        el("td", { class: "call-confirmation", text: call.confirmation }),
      );
      call.block.dataset.status = call.status;
      call.head.replaceChildren(
        el("span", { class: "tool-name", text: call.name }),
        call.fx ? badge(call.fx) : "",
        el("span", { class: "tool-input", text: call.input }),
        statusTag(call.status),
        call.ms !== null ? el("span", { class: "tool-duration", text: duration(call.ms) }) : "",
      );
      call.note.textContent = call.confirmation ? `confirmation: ${call.confirmation}` : "";
      call.note.hidden = !call.confirmation;
      call.errorLine.textContent = call.error;
      call.errorLine.hidden = !call.error;
      return call;
    }

    // One terminal per call: stdout and stderr interleaved in arrival order,
    // stderr in its own colour and marked data-stream="stderr".
    output(d) {
      const call = this.updateCall(d.tool_use_id, {});
      if (!call || !d.text) return;
      if (!call.term) {
        call.term = el("pre", {
          class: "terminal", tabindex: "0", role: "log", "aria-label": `Output of ${call.name}`,
        });
        call.legend = el(
          "p",
          { class: "terminal-legend" },
          "output: stdout, ",
          el("span", { class: "err", text: "stderr in red" }),
        );
        call.block.insertBefore(call.legend, call.errorLine);
        call.block.insertBefore(call.term, call.errorLine);
      }
      const stream = d.stream === "stderr" ? "stderr" : "stdout";
      if (call.lastSpan && call.lastStream === stream) {
        call.lastSpan.textContent += d.text;
      } else {
        call.lastSpan = el("span", { class: `out-${stream}`, "data-stream": stream, text: d.text });
        call.lastStream = stream;
        call.term.append(call.lastSpan);
      }
      const term = call.term;
      if (term.scrollHeight - term.scrollTop - term.clientHeight < 40) term.scrollTop = term.scrollHeight;
    }

    // A finished call's result, folded away: a click (or Enter) shows it.
    result(d) {
      const call = this.calls.get(d.tool_use_id);
      if (!call || call.resultNode) return;
      const text = (d.content || []).filter((b) => b.type === "text").map((b) => b.text).join("\n");
      if (!text) return;
      call.resultNode = el(
        "details",
        { class: "tool-result" },
        el("summary", { text: call.term ? "Result" : plural(text.split("\n").length, "line", "Result (", ")") }),
        el("pre", { class: "result-text", tabindex: "0", text }),
      );
      call.block.append(call.resultNode);
    }

    // A dry-run turn's plan: what it would have done, in order.
    plan(d, turnId) {
      const steps = Array.isArray(d.plan) ? d.plan : [];
      const list = el("ol", { class: "plan" });
      for (const step of steps) {
        list.append(el(
          "li",
          { "data-tool-use-id": (step && step.tool_use_id) || "" },
          el("span", { class: "plan-tool", text: (step && step.tool_name) || "?" }),
          " ",
          el("span", {
            class: "plan-summary",
            text: withoutName(step && step.summary, step && step.tool_name) || summarizeInput(step && step.input),
          }),
        ));
      }
      return this.add(el(
        "li",
        { class: "turn-note turn-plan", "data-turn-id": turnId },
        el("strong", { text: `Dry-run plan: ${plural(steps.length, "action")}, nothing was run` }),
        list,
      ));
    }

    gate(d) {
      const passed = d.passed === true;
      const level = passed ? "ok" : d.required === false ? "warn" : "error";
      const text = `Quality gate ${d.name || "?"} ${passed ? "passed" : "failed"}`
        + (d.exit_code !== undefined && d.exit_code !== null ? ` (exit ${d.exit_code})` : "");
      const output = !passed && d.output
        ? el("details", { class: "tool-result" }, el("summary", { text: "Output" }),
          el("pre", { class: "result-text", tabindex: "0", text: d.output }))
        : null;
      return this.note(text, level, "gate", output);
    }
  }

  class SessionView {
    constructor(id) {
      this.id = id;
      this.main = new Lane(this, $("conversation"));
      this.subs = new Map(); // child session id -> its Lane
      this.children = new Set(); // sub-agent sessions seen (GET /sessions/{id} and events)
      this.cards = new Map(); // request_id -> card state
      this.turn = null;
      this.turnStatus = "idle";
      this.socket = null;
      this.ticker = null;
      this.gone = false;
    }

    get path() {
      return `/sessions/${encodeURIComponent(this.id)}`;
    }

    start() {
      this.socket = new ResumableSocket({
        path: `${this.path}/events`,
        field: "session_seq",
        after: 0, // replay the whole session, then follow it live
        onEvent: (event) => this.apply(event),
        onState: renderConnection,
        onEnd: (why, restart) => {
          if (restart) this.reset();
          else this.ended(why);
        },
      });
      this.socket.start();
      this.loadPresence();
      // Pending confirmations count down their time left.
      this.ticker = setInterval(() => this.tick(), 1000);
    }

    stop() {
      if (this.socket) this.socket.stop();
      clearInterval(this.ticker);
    }

    reset() {
      this.main = new Lane(this, $("conversation"));
      this.subs.clear();
      this.cards.clear();
      $("calls-body").replaceChildren();
      $("confirmations").replaceChildren();
      $("conversation").replaceChildren();
      $("session-timeline").replaceChildren();
      this.setTurn(null, "idle");
      this.renderPendingHint();
      this.renderEmpty();
    }

    ended(why) {
      this.gone = true;
      $("session-turn").textContent = `session ended (${why})`;
      this.renderControls();
    }

    async loadPresence() {
      try {
        const body = await api("GET", `${this.path}/clients`);
        const names = listOf(body, "clients").map((c) => c.client_name);
        if (state.selected === this) $("session-clients").textContent = names.join(", ") || "-";
      } catch (err) {
        if (state.selected === this) $("session-clients").textContent = "?";
      }
    }

    setTurn(turnId, status) {
      this.turn = turnId;
      this.turnStatus = status;
      $("session-turn").textContent = status;
      $("session-turn").title = turnId ? `turn ${turnId}` : "";
      $("session-turn").dataset.status = status;
      this.renderControls();
    }

    renderControls() {
      const running = this.turnStatus === "running";
      $("cancel-turn").disabled = !running || this.gone;
      $("send-message").disabled = running || this.gone;
      $("delete-session").disabled = this.gone;
      $("message-input").disabled = this.gone;
    }

    renderEmpty() {
      $("empty-conversation").hidden = $("conversation").childElementCount > 0;
    }

    apply(event) {
      if (state.selected !== this) return;
      appendTimeline($("session-timeline"), event, false);
      const d = event.data || {};
      // A sub-agent's events arrive on this stream too, marked with its session.
      const child = d.subagent_session_id;
      if (typeof child === "string" && child && child !== this.id) {
        this.applyIn(this.subLane(child, d.agent_type, d.parent_tool_use_id), event);
      } else {
        this.applyIn(this.main, event);
      }
    }

    applyIn(lane, event) {
      const d = event.data || {};
      switch (event.type) {
        case "turn.started":
          if (lane.sub) lane.setStatus("running");
          else this.setTurn(event.turn_id, "running");
          break;
        case "turn.completed":
        case "turn.failed":
        case "turn.cancelled":
          this.turnEnded(lane, event);
          break;
        case "client.attached":
        case "client.detached":
          if (!lane.sub) this.loadPresence();
          break;
        case "session.created":
          break;
        case "message.delta":
          lane.delta(event);
          break;
        case "message.completed":
          lane.message(event);
          break;
        case "tool.confirmation_requested":
          lane.updateCall(d.tool_use_id, {
            name: d.tool_name, fx: d.side_effects, status: "awaiting_confirmation",
            input: d.input_summary,
          });
          this.addCard(event, lane);
          break;
        case "tool.confirmation_resolved": {
          const scope = d.scope === "session" ? " for the session" : "";
          const text = `${d.decision}${scope} by ${d.resolved_by}`;
          const status = d.decision === "allow" ? "running" : undefined;
          lane.updateCall(d.tool_use_id, { confirmation: text, status });
          const card = this.cards.get(d.request_id);
          if (card) this.settle(card, d.message ? `${text}: ${d.message}` : text, d);
          break;
        }
        case "tool.called":
          lane.updateCall(d.tool_use_id, {
            name: d.tool_name, fx: d.side_effects, status: "running", input: summarizeInput(d.input),
            agentType: agentTypeOf(d.input),
          });
          break;
        case "tool.output_delta":
          lane.output(d);
          break;
        case "tool.input_invalid":
          lane.updateCall(d.tool_use_id, {
            name: d.tool_name, status: "invalid",
            error: (d.errors || []).map((e) => `${e.path || "input"}: ${e.message}`).join("; "),
          });
          break;
        case "tool.completed":
          lane.updateCall(d.tool_use_id, { name: d.tool_name, status: "completed", ms: d.duration_ms });
          lane.result(d);
          break;
        case "tool.failed": {
          const blocked = blockedText(d);
          const call = lane.updateCall(d.tool_use_id, {
            name: d.tool_name, status: blocked ? "blocked" : "failed", ms: d.duration_ms,
            error: blocked ? `${blocked}: ${d.message}` : `${d.error_class}: ${d.message}`,
          });
          if (call && d.partial_output && !call.term) lane.output({ tool_use_id: d.tool_use_id, stream: "stdout", text: d.partial_output });
          break;
        }
        case "tool.planned":
          lane.updateCall(d.tool_use_id, {
            name: d.tool_name, status: "planned",
            input: withoutName(d.summary, d.tool_name) || summarizeInput(d.input),
            confirmation: "dry-run: recorded, not run",
          });
          break;
        case "hook.completed":
          lane.aboutCall(d.tool_use_id, hookText(d), hookLevel(d), "hook");
          break;
        case "guardrail.warning":
          lane.aboutCall(d.tool_use_id, `guardrail ${d.rule || "?"}: ${d.message || ""}`, "warn", "guardrail");
          break;
        case "quality_gate.completed":
          lane.gate(d);
          break;
        case "model.retry":
          lane.note(retryText(d), "warn", "retry");
          break;
        case "tools.changed":
          lane.note(toolsChangedText(d), "info", "tools");
          break;
        case "session.deleted":
          if (!lane.sub) this.ended("deleted");
          break;
        default:
          // Newer servers may send types this page does not know: show them plainly.
          lane.note(`${event.type}: ${describe(event)}`, "info", "generic");
          break;
      }
    }

    // The lane of a sub-agent, nested in the dispatch_subagent call that started
    // it: the call the server names (data.parent_tool_use_id), made now if the
    // stream has not shown it yet. Without the name (an older server) a guess:
    // the oldest unclaimed such call (of the same agent type if it says). A
    // block of its own when neither finds a call.
    subLane(child, agentType, parentToolUseId) {
      const known = this.subs.get(child);
      if (known) {
        known.setAgentType(agentType);
        return known;
      }
      const claimed = new Set([...this.subs.values()].map((lane) => lane.parentCall));
      let call = null;
      if (typeof parentToolUseId === "string" && parentToolUseId) {
        const named = this.main.calls.get(parentToolUseId)
          || this.main.updateCall(parentToolUseId, { name: "dispatch_subagent" });
        // One call starts one child; a second claimant gets a block of its own.
        call = claimed.has(named) ? null : named;
      } else {
        const open = [...this.main.calls.values()].filter(
          (c) => c.name === "dispatch_subagent" && !claimed.has(c),
        );
        const live = open.filter((c) => OPEN_CALL.includes(c.status));
        const pool = live.length ? live : open;
        call = pool.find((c) => agentType && c.agentType === agentType) || pool[0] || null;
      }
      const sub = {
        sessionId: child, agentType: agentType || "",
        labelNode: el("strong", { class: "subagent-label" }),
        statusNode: el("span", { class: "subagent-status" }),
      };
      const list = el("ol", { class: "conversation subagent-lane", "aria-label": "Sub-agent steps" });
      sub.box = el(
        "section",
        { class: "subagent", "data-subagent-session-id": child },
        el(
          "header",
          { class: "subagent-head" },
          sub.labelNode,
          sessionLink(child, "subagent-link"),
          sub.statusNode,
        ),
        list,
      );
      const lane = new Lane(this, list, sub);
      sub.labelNode.textContent = lane.label;
      lane.parentCall = call;
      if (call) {
        call.block.insertBefore(sub.box, call.errorLine);
      } else {
        this.main.add(el("li", { class: "tool-block subagent-orphan" }, sub.box));
      }
      this.subs.set(child, lane);
      if (!this.children.has(child)) {
        this.children.add(child);
        renderFacts(this);
      }
      return lane;
    }

    turnEnded(lane, event) {
      const d = event.data || {};
      const status = event.type.split(".")[1];
      if (lane.sub) {
        lane.setStatus(status);
      } else {
        this.setTurn(event.turn_id, status);
        if (d.model) {
          state.seenModels.set(this.id, d.model);
          $("session-model").textContent = modelText(state.sessions.get(this.id) || { id: this.id });
          renderSessions();
        }
      }
      for (const card of this.cards.values()) {
        if (card.lane === lane && card.turnId === event.turn_id && !card.resolved) this.settle(card, `turn ${status}`);
      }
      for (const call of lane.calls.values()) {
        if (OPEN_CALL.includes(call.status) && status !== "completed") lane.updateCall(call.id, { status });
      }
      if (lane.streaming && lane.streaming.turnId === event.turn_id) {
        lane.streaming.node.classList.remove("streaming");
        if (status !== "completed") lane.streaming.node.dataset.interrupted = status;
        lane.streaming = null;
      }
      if (Array.isArray(d.plan)) lane.plan(d, event.turn_id);
      if (status === "failed") {
        // The whole reason and message, as the server gave them.
        lane.add(el(
          "li",
          { class: "turn-note turn-failed", "data-turn-id": event.turn_id, "data-reason": d.reason || "" },
          el("strong", { text: lane.sub ? `${lane.label}: turn failed` : "Turn failed" }),
          el("span", { class: "failure", text: failureText(d) }),
        ));
      } else if (status === "cancelled") {
        const who = d.cancelled_by ? ` by ${d.cancelled_by}` : "";
        lane.add(el("li", {
          class: "turn-note turn-cancelled", "data-turn-id": event.turn_id,
          text: `Turn cancelled${who}${d.reason && d.reason !== "cancelled" ? ` (${d.reason})` : ""}`,
        }));
      }
    }

    addCard(event, lane = this.main) {
      const d = event.data;
      if (this.cards.has(d.request_id)) return;
      const expired = Date.parse(d.expires_at) <= Date.now();
      const card = {
        requestId: d.request_id, turnId: event.turn_id, resolved: false, answered: false,
        expiresAt: d.expires_at, lane,
        // A sub-agent's question is answered at its own (child) session.
        sessionPath: lane.sub ? `/sessions/${encodeURIComponent(lane.sub.sessionId)}` : this.path,
      };
      const uid = `c-${d.request_id.replace(/[^\w-]/g, "")}`;
      const resultLine = el("p", { class: "resolution", role: "status" });
      const message = el("input", {
        type: "text", class: "deny-message", placeholder: "Reason (sent to the model on deny)",
        "aria-label": "Reason for denying",
      });
      const buttons = [
        ["allow", "once", "Allow", "primary"],
        ["deny", "once", "Deny", "danger"],
        ["allow", "session", "Allow for session", "secondary"],
      ].map(([decision, scope, label, cls]) =>
        el("button", {
          type: "button", class: `${cls} answer`, "data-decision": decision, "data-scope": scope,
          title: scope === "session" && d.scope_text ? d.scope_text : undefined,
          onclick: () => this.answer(card, decision, scope, message.value),
        }, label),
      );
      const previewText = (d.preview && d.preview.text) || "";
      const preview = el("pre", { class: `preview preview-${(d.preview && d.preview.kind) || "text"}`, tabindex: "0", "aria-label": "Preview" });
      for (const line of previewText.split("\n")) {
        let cls = "";
        if (d.preview && d.preview.kind === "diff") {
          if (line.startsWith("+") && !line.startsWith("+++")) cls = "add";
          else if (line.startsWith("-") && !line.startsWith("---")) cls = "del";
          else if (line.startsWith("@@")) cls = "hunk";
        }
        preview.append(el("span", { class: cls, text: `${line}\n` }));
      }
      card.expires = el("span", { class: "expires", text: timeLeft(d.expires_at) });
      card.node = el(
        "article",
        {
          class: "card confirmation", "data-request-id": d.request_id, "data-tool-use-id": d.tool_use_id,
          role: "alertdialog", "aria-modal": "false", "aria-labelledby": `${uid}-t`, "aria-describedby": `${uid}-s`,
          tabindex: "-1",
        },
        el(
          "header", {},
          lane.sub ? el("span", { class: "card-agent", text: `${lane.label} asks:` }) : null,
          el("strong", { id: `${uid}-t`, text: d.tool_name }), " ", badge(d.side_effects), card.expires,
        ),
        el("p", { class: "summary", id: `${uid}-s`, title: d.input_summary || "", text: d.input_summary || "" }),
        (d.projected_modifications || []).length
          ? el("p", { class: "mods", text: `Would modify: ${d.projected_modifications.join(", ")}` })
          : null,
        preview,
        el("div", { class: "actions" }, ...buttons, message),
        // What "Allow for session" grants: for a shell, one program and
        // subcommand at one rating, never every later command.
        d.scope_text
          ? el("p", { class: "scope-text", text: `Allow for session = ${d.scope_text}` })
          : null,
        resultLine,
      );
      card.buttons = buttons;
      card.message = message;
      card.resultLine = resultLine;
      this.cards.set(d.request_id, card);
      // Waiting cards first, above the one-line resolved ones.
      const firstResolved = $("confirmations").querySelector(".confirmation.resolved");
      $("confirmations").insertBefore(card.node, firstResolved);
      if (expired) this.settle(card, "expired");
      this.renderPendingHint();
    }

    tick() {
      for (const card of this.cards.values()) {
        if (!card.resolved) card.expires.textContent = timeLeft(card.expiresAt);
      }
    }

    settle(card, text, resolution, own = false) {
      const wasOpen = !card.resolved;
      card.resolved = true;
      card.node.classList.add("resolved");
      // One line now: no longer a dialog asking for an answer.
      card.node.setAttribute("role", "group");
      card.node.removeAttribute("aria-modal");
      card.node.dataset.decision = resolution ? resolution.decision : "closed";
      if (resolution) card.node.dataset.resolvedBy = resolution.resolved_by;
      const hadFocus = card.node.contains(document.activeElement);
      for (const button of card.buttons) button.disabled = true;
      card.message.disabled = true;
      // Our own answer's outcome ("… (you)" or "already resolved by …") is the
      // more telling wording; the event that follows must not overwrite it.
      if (!card.answered || own) card.resultLine.textContent = text;
      card.resultLine.title = card.resultLine.textContent;
      if (wasOpen) {
        // Resolved cards sink below the waiting ones.
        $("confirmations").append(card.node);
        if (hadFocus) this.focusPending();
      }
      this.renderPendingHint();
    }

    async answer(card, decision, scope, message) {
      if (card.resolved) return;
      for (const button of card.buttons) button.disabled = true;
      const body = { decision, scope };
      if (decision === "deny" && message) body.message = message;
      const path = `${card.sessionPath}/turns/${encodeURIComponent(card.turnId)}`
        + `/confirmations/${encodeURIComponent(card.requestId)}`;
      try {
        const won = await api("POST", path, body);
        const winner = findResolution(won) || { decision, scope, resolved_by: state.clientName };
        card.answered = true;
        card.node.dataset.outcome = "won";
        const scopeText = winner.scope === "session" ? " for the session" : "";
        const reason = winner.message ? `: ${winner.message}` : "";
        const text = `${winner.decision}${scopeText} by ${winner.resolved_by} (you)${reason}`;
        this.settle(card, text, winner, true);
      } catch (err) {
        if (err.status === 409) {
          const winner = findResolution(err.body);
          card.answered = true;
          card.node.dataset.outcome = "lost";
          const text = winner
            ? `already resolved by ${winner.resolved_by}: ${winner.decision}`
            : `already resolved: ${err.message}`;
          this.settle(card, text, winner || undefined, true);
        } else {
          for (const button of card.buttons) button.disabled = false;
          card.resultLine.textContent = `could not answer: ${err.message}`;
        }
      }
    }

    pendingCards() {
      return [...this.cards.values()].filter((c) => !c.resolved);
    }

    focusPending() {
      const first = this.pendingCards()[0];
      if (!first) {
        $("message-input").focus();
        return;
      }
      first.node.scrollIntoView({ block: "start" });
      first.buttons[0].focus();
    }

    renderPendingHint() {
      const open = this.pendingCards().length;
      $("no-confirmations").hidden = open > 0;
      $("pending-title").textContent = open ? `Confirmations (${open} waiting)` : "Confirmations";
      $("pending-banner").hidden = open === 0;
      $("pending-banner-text").textContent = open === 1
        ? "A tool call is waiting for your decision."
        : `${plural(open, "tool call")} are waiting for your decision.`;
    }

    async send(text) {
      $("composer-error").textContent = "";
      $("send-message").disabled = true;
      try {
        const body = { message: text };
        // Sent only when ticked: an older server never sees the field.
        if ($("turn-dry-run").checked) body.dry_run = true;
        const started = await api("POST", `${this.path}/turns`, body);
        if (this.turnStatus !== "running" && started && started.turn_id && this.turn !== started.turn_id) {
          this.setTurn(started.turn_id, "running");
        }
        return true;
      } catch (err) {
        $("composer-error").textContent = `Not sent: ${err.message}`;
        return false;
      } finally {
        this.renderControls();
      }
    }

    async cancel() {
      if (!this.turn || this.turnStatus !== "running") return;
      $("composer-error").textContent = "";
      $("cancel-turn").disabled = true;
      try {
        await api("POST", `${this.path}/turns/${encodeURIComponent(this.turn)}/cancel`);
      } catch (err) {
        $("composer-error").textContent = `Could not cancel: ${err.message}`;
        this.renderControls();
      }
    }

    async remove() {
      try {
        await api("DELETE", this.path);
      } catch (err) {
        if (err.status !== 404) {
          $("composer-error").textContent = `Could not delete: ${err.message}`;
          return;
        }
      }
      state.sessions.delete(this.id);
      deselect();
    }
  }

  function deselect() {
    if (state.selected) state.selected.stop();
    state.selected = null;
    $("session-view").hidden = true;
    $("empty-view").hidden = false;
    $("pending-banner").hidden = true;
    renderSessions();
    renderConnection();
    history.replaceState(null, "", location.pathname);
  }

  // A link to a session's own view (a sub-agent's, or its parent's).
  function sessionLink(id, cls = "session-link") {
    return el("a", {
      class: cls, href: `#session=${encodeURIComponent(id)}`, title: id, "data-session-id": id,
      text: sessionLabel(id),
      onclick: (clicked) => {
        clicked.preventDefault();
        openSession(id);
      },
    });
  }

  // A session may be missing from the list (a sub-agent's worker): read it first.
  async function openSession(id) {
    if (!state.sessions.has(id)) await refreshSession(id);
    selectSession(id);
  }

  // Agent, profile, dry-run, parent and sub-agents of the selected session.
  function renderFacts(view) {
    if (state.selected !== view) return;
    const session = state.sessions.get(view.id) || {};
    for (const child of session.children || []) view.children.add(child);
    const fact = (id, value) => {
      $(id).replaceChildren(...(Array.isArray(value) ? value : [value || ""]));
      $(id).parentElement.hidden = !value || (Array.isArray(value) && !value.length);
    };
    fact("session-agent", session.agent || "");
    fact("session-profile", session.profile || "");
    fact("session-dry-run", session.dry_run ? "on: writes and commands are recorded, not run" : "");
    fact("session-parent", session.parent_session_id ? sessionLink(session.parent_session_id) : "");
    const links = [];
    for (const child of view.children) {
      if (links.length) links.push(", ");
      links.push(sessionLink(child));
    }
    fact("session-children", links);
  }

  function selectSession(id) {
    if (state.selected && state.selected.id === id) return;
    if (state.selected) state.selected.stop();
    const session = state.sessions.get(id);
    const view = new SessionView(id);
    state.selected = view;
    $("session-view").hidden = false;
    $("empty-view").hidden = true;
    $("session-title").textContent = sessionLabel(id);
    $("session-title").title = id;
    $("session-workspace").textContent = (session && session.workspace) || "";
    $("session-model").textContent = modelText(session || { id });
    $("session-clients").textContent = "-";
    $("composer-error").textContent = "";
    view.reset();
    renderFacts(view);
    view.start();
    // Details the list may lack (children, parent): read the session itself.
    refreshSession(id).then(() => renderFacts(view));
    renderSessions();
    renderConnection();
    history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
  }

  // ---------------------------------------------------------------- login

  function showLogin(message = "") {
    $("login").hidden = false;
    $("app").hidden = true;
    $("identity").hidden = true;
    $("pending-banner").hidden = true;
    $("login-error").textContent = message;
    $("name-input").value = state.clientName || `dashboard-${Math.random().toString(16).slice(2, 6)}`;
    $("token-input").focus();
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    if (state.globalSocket) state.globalSocket.stop();
    if (state.selected) state.selected.stop();
    state.globalSocket = null;
    state.selected = null;
    renderConnection();
    showLogin(message || "");
  }

  async function start() {
    $("login").hidden = true;
    $("app").hidden = false;
    $("identity").hidden = false;
    $("client-name-label").textContent = state.clientName;
    try {
      await loadSessions();
    } catch (err) {
      if (err.status !== 401) showLogin(`Could not load sessions: ${err.message}`);
      return;
    }
    state.globalSocket = new ResumableSocket({
      path: "/events",
      field: "seq",
      after: null, // the all-sessions timeline starts live
      onEvent: onGlobalEvent,
      onState: renderConnection,
      // Sessions created or deleted while we were away: the list is re-read.
      onReconnect: () => loadSessions().catch(() => {}),
    });
    state.globalSocket.start();
    const wanted = /session=([^&]+)/.exec(location.hash);
    if (wanted && !state.sessions.has(decodeURIComponent(wanted[1]))) {
      // A linked session the list does not show (a sub-agent's): ask for it.
      await refreshSession(decodeURIComponent(wanted[1]));
    }
    if (wanted && state.sessions.has(decodeURIComponent(wanted[1]))) {
      selectSession(decodeURIComponent(wanted[1]));
    } else if (state.sessions.size === 0) {
      $("new-session-panel").open = true;
    }
  }

  function init() {
    // A token may arrive in the URL fragment (never sent to the server): keep it
    // for this tab and take it out of the address bar.
    const fromHash = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (fromHash) {
      state.token = decodeURIComponent(fromHash[1]);
      sessionStorage.setItem(TOKEN_KEY, state.token);
      history.replaceState(null, "", location.pathname);
    }
    $("login-form").addEventListener("submit", (submitted) => {
      submitted.preventDefault();
      const name = $("name-input").value.trim();
      const token = $("token-input").value.trim();
      if (!token || !name) return;
      state.token = token;
      state.clientName = name;
      sessionStorage.setItem(TOKEN_KEY, token);
      sessionStorage.setItem(NAME_KEY, name);
      $("token-input").value = "";
      start();
    });
    $("sign-out").addEventListener("click", () => signOut(""));
    $("refresh-sessions").addEventListener("click", () => loadSessions().catch(() => {}));
    $("new-session-form").addEventListener("submit", (submitted) => {
      submitted.preventDefault();
      createSession(submitted.target);
    });
    const input = $("message-input");
    $("composer").addEventListener("submit", async (submitted) => {
      submitted.preventDefault();
      const text = input.value.trim();
      if (!text || !state.selected) return;
      if (await state.selected.send(text)) input.value = "";
    });
    input.addEventListener("keydown", (key) => {
      // Enter sends; Shift+Enter is a new line.
      if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
        key.preventDefault();
        $("composer").requestSubmit();
      }
    });
    $("cancel-turn").addEventListener("click", () => state.selected && state.selected.cancel());
    $("delete-session").addEventListener("click", () => {
      $("delete-text").textContent = `"${sessionLabel(state.selected.id)}" goes away for every client; `
        + "a running turn is cancelled first.";
      $("delete-dialog").showModal();
    });
    $("delete-dialog").addEventListener("close", () => {
      if ($("delete-dialog").returnValue === "delete" && state.selected) state.selected.remove();
    });
    $("pending-review").addEventListener("click", () => state.selected && state.selected.focusPending());
    if (!state.clientName) {
      state.clientName = `dashboard-${Math.random().toString(16).slice(2, 6)}`;
      sessionStorage.setItem(NAME_KEY, state.clientName);
    }
    if (state.token) start();
    else showLogin();
  }

  // Exposed for tests and debugging: read-only views of the connection state.
  window.toolrelayDashboard = {
    get cursors() {
      return {
        global: state.globalSocket && state.globalSocket.cursor,
        session: state.selected && state.selected.socket && state.selected.socket.cursor,
      };
    },
    get connects() {
      return {
        global: state.globalSocket ? state.globalSocket.connects : 0,
        session: state.selected && state.selected.socket ? state.selected.socket.connects : 0,
      };
    },
  };

  init();
})();
