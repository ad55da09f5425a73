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
    for (const key of ["command", "path", "pattern", "url"]) {
      if (typeof input[key] === "string") return input[key];
    }
    const text = JSON.stringify(input);
    return text.length > 120 ? `${text.slice(0, 119)}…` : text;
  }

  function describe(event) {
    const d = event.data || {};
    switch (event.type) {
      case "session.created": return `workspace ${d.workspace || ""}`;
      case "session.deleted": return d.reason || "deleted";
      case "client.attached": return `${d.client_name} attached`;
      case "client.detached": return `${d.client_name} left${d.reason ? ` (${d.reason})` : ""}`;
      case "turn.started": return `${d.source || "turn"} by ${d.created_by || "?"}`;
      case "turn.failed":
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
      case "tool.failed": return `${d.tool_name}: ${d.error_class}: ${d.message}`;
      default: return "";
    }
  }

  function appendTimeline(list, event, withSession) {
    // Streamed text arrives in many small deltas: grow one row per message
    // instead of adding a row per fragment. data-session-seqs lists every
    // event a row stands for, so nothing is hidden.
    const top = list.firstElementChild;
    if (
      event.type === "message.delta" && top && top.dataset.type === "message.delta"
      && top.dataset.sessionId === event.session_id && top.dataset.turnId === String(event.turn_id)
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
        ? el("span", { class: "tl-session", title: event.session_id, text: shortId(event.session_id) })
        : null,
      el("span", { class: "tl-text", text: describe(event) }),
    );
    list.prepend(item);
    while (list.childElementCount > MAX_TIMELINE) list.lastElementChild.remove();
  }


  // ------------------------------------------------------------- sessions

  function renderSessions() {
    const list = $("session-list");
    list.replaceChildren();
    const sessions = [...state.sessions.values()].sort((a, b) =>
      String(b.created_at || "").localeCompare(String(a.created_at || "")),
    );
    for (const session of sessions) {
      const selected = state.selected && state.selected.id === session.id;
      const button = el(
        "button",
        {
          type: "button",
          class: "session-item",
          "data-session-id": session.id,
          "aria-current": selected ? "true" : undefined,
          onclick: () => selectSession(session.id),
        },
        el("span", { class: "session-name", text: session.name || shortId(session.id) }),
        el("span", { class: "session-ws", text: session.workspace || "" }),
        el("span", { class: `session-status st-${session.status || "idle"}`, text: session.status || "idle" }),
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
    } else if (known && (event.type === "turn.started" || TERMINAL_TURN.has(event.type))) {
      known.status = event.type === "turn.started" ? "running" : "idle";
      renderSessions();
    }
  }

  // ---------------------------------------------------------- session view

  class SessionView {
    constructor(id) {
      this.id = id;
      this.calls = new Map(); // tool_use_id -> {row, data}
      this.cards = new Map(); // request_id -> card state
      this.turn = null;
      this.socket = null;
    }

    start() {
      this.socket = new ResumableSocket({
        path: `/sessions/${encodeURIComponent(this.id)}/events`,
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
    }

    stop() {
      if (this.socket) this.socket.stop();
    }

    reset() {
      this.calls.clear();
      this.cards.clear();
      $("calls-body").replaceChildren();
      $("confirmations").replaceChildren();
      $("session-timeline").replaceChildren();
      this.renderPendingHint();
    }

    ended(why) {
      $("session-turn").textContent = `session ended (${why})`;
    }

    async loadPresence() {
      try {
        const body = await api("GET", `/sessions/${encodeURIComponent(this.id)}/clients`);
        const names = listOf(body, "clients").map((c) => c.client_name);
        if (state.selected === this) $("session-clients").textContent = names.join(", ") || "-";
      } catch (err) {
        if (state.selected === this) $("session-clients").textContent = "?";
      }
    }

    apply(event) {
      if (state.selected !== this) return;
      appendTimeline($("session-timeline"), event, false);
      const d = event.data || {};
      switch (event.type) {
        case "turn.started":
          this.turn = event.turn_id;
          $("session-turn").textContent = `${shortId(event.turn_id)} running`;
          break;
        case "turn.completed":
        case "turn.failed":
        case "turn.cancelled": {
          const status = event.type.split(".")[1];
          $("session-turn").textContent = `${shortId(event.turn_id)} ${status}`;
          for (const card of this.cards.values()) {
            if (card.turnId === event.turn_id && !card.resolved) this.settle(card, `turn ${status}`);
          }
          for (const call of this.calls.values()) {
            if (["requested", "awaiting_confirmation", "running"].includes(call.status) && status !== "completed") {
              this.updateCall(call.id, { status });
            }
          }
          break;
        }
        case "client.attached":
        case "client.detached":
          this.loadPresence();
          break;
        case "message.completed":
          for (const block of (d.message && d.message.content) || []) {
            if (block.type === "tool_use") {
              this.updateCall(block.id, { name: block.name, input: summarizeInput(block.input) });
            }
          }
          break;
        case "tool.confirmation_requested":
          this.updateCall(d.tool_use_id, {
            name: d.tool_name, fx: d.side_effects, status: "awaiting_confirmation",
            input: d.input_summary,
          });
          this.addCard(event);
          break;
        case "tool.confirmation_resolved": {
          const scope = d.scope === "session" ? " for the session" : "";
          const text = `${d.decision}${scope} by ${d.resolved_by}`;
          const status = d.decision === "allow" ? "running" : undefined;
          this.updateCall(d.tool_use_id, { confirmation: text, status });
          const card = this.cards.get(d.request_id);
          if (card) this.settle(card, d.message ? `${text}: ${d.message}` : text, d);
          break;
        }
        case "tool.called":
          this.updateCall(d.tool_use_id, {
            name: d.tool_name, fx: d.side_effects, status: "running", input: summarizeInput(d.input),
          });
          break;
        case "tool.input_invalid":
          this.updateCall(d.tool_use_id, { name: d.tool_name, status: "invalid" });
          break;
        case "tool.completed":
          this.updateCall(d.tool_use_id, { name: d.tool_name, status: "completed", ms: d.duration_ms });
          break;
        case "tool.failed":
          this.updateCall(d.tool_use_id, {
            name: d.tool_name, status: "failed", ms: d.duration_ms, error: `${d.error_class}: ${d.message}`,
          });
          break;
        case "session.deleted":
          this.ended("deleted");
          break;
        default:
          break;
      }
    }

    updateCall(toolUseId, patch) {
      if (!toolUseId) return;
      let call = this.calls.get(toolUseId);
      if (!call) {
        call = { id: toolUseId, name: "?", fx: "", input: "", status: "requested", ms: null, confirmation: "", error: "" };
        call.row = el("tr", { "data-tool-use-id": toolUseId });
        this.calls.set(toolUseId, call);
        $("calls-body").append(call.row);
      }
      for (const [key, value] of Object.entries(patch)) {
        if (value !== undefined && value !== null && value !== "") call[key] = value;
      }
      call.row.dataset.status = call.status;
      call.row.replaceChildren(
        el("td", { class: "call-name", text: call.name }),
        el("td", {}, call.fx ? badge(call.fx) : ""),
        el("td", { class: "call-input", title: call.input, text: call.input }),
        el("td", {}, statusTag(call.status), call.error ? el("div", { class: "call-error", text: call.error }) : null),
        el("td", { class: "call-duration", text: duration(call.ms) }),
        el("td", { class: "call-confirmation", text: call.confirmation }),
      );
    }

    addCard(event) {
      const d = event.data;
      if (this.cards.has(d.request_id)) return;
      const expired = Date.parse(d.expires_at) <= Date.now();
      const card = { requestId: d.request_id, turnId: event.turn_id, resolved: false, answered: false };
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
      card.node = el(
        "article",
        { class: "card confirmation", "data-request-id": d.request_id, "aria-label": `Confirm ${d.tool_name}` },
        el("header", {}, el("strong", { text: d.tool_name }), " ", badge(d.side_effects),
          el("span", { class: "expires", text: `expires ${clock(d.expires_at)}` })),
        el("p", { class: "summary", text: d.input_summary || "" }),
        (d.projected_modifications || []).length
          ? el("p", { class: "mods", text: `Would modify: ${d.projected_modifications.join(", ")}` })
          : null,
        preview,
        el("div", { class: "actions" }, ...buttons, message),
        resultLine,
      );
      card.buttons = buttons;
      card.message = message;
      card.resultLine = resultLine;
      this.cards.set(d.request_id, card);
      $("confirmations").append(card.node);
      if (expired) this.settle(card, "expired");
      this.renderPendingHint();
    }

    settle(card, text, resolution, own = false) {
      card.resolved = true;
      card.node.classList.add("resolved");
      card.node.dataset.decision = resolution ? resolution.decision : "closed";
      if (resolution) card.node.dataset.resolvedBy = resolution.resolved_by;
      for (const button of card.buttons) button.disabled = true;
      card.message.disabled = true;
      // Our own answer's outcome ("… (you)" or "already resolved by …") is the
      // more telling wording; the event that follows must not overwrite it.
      if (!card.answered || own) card.resultLine.textContent = text;
      this.renderPendingHint();
    }

    async answer(card, decision, scope, message) {
      if (card.resolved) return;
      for (const button of card.buttons) button.disabled = true;
      const body = { decision, scope };
      if (decision === "deny" && message) body.message = message;
      const path = `/sessions/${encodeURIComponent(this.id)}/turns/${encodeURIComponent(card.turnId)}`
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

    renderPendingHint() {
      const open = [...this.cards.values()].filter((c) => !c.resolved).length;
      $("no-confirmations").hidden = open > 0;
      $("pending-title").textContent = open ? `Confirmations (${open} waiting)` : "Confirmations";
    }
  }

  function selectSession(id) {
    if (state.selected && state.selected.id === id) return;
    if (state.selected) state.selected.stop();
    const session = state.sessions.get(id);
    const view = new SessionView(id);
    state.selected = view;
    $("session-view").hidden = false;
    $("empty-view").hidden = true;
    $("session-title").textContent = session && session.name ? session.name : `Session ${id}`;
    $("session-workspace").textContent = (session && session.workspace) || "";
    $("session-turn").textContent = "idle";
    $("session-clients").textContent = "-";
    view.reset();
    view.start();
    renderSessions();
    renderConnection();
    history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
  }

  // ---------------------------------------------------------------- login

  function showLogin(message = "") {
    $("login").hidden = false;
    $("app").hidden = true;
    $("identity").hidden = true;
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
    if (wanted && state.sessions.has(decodeURIComponent(wanted[1]))) {
      selectSession(decodeURIComponent(wanted[1]));
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
