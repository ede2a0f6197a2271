// m serve playground: a chat page over this server's public OpenAI-compatible API.
// Plain browser JavaScript, no dependencies. Paths are relative so the page also
// works behind a reverse proxy that mounts the server under a prefix.
"use strict";

(() => {
  const KEY_STORAGE = "mellea.playground.apiKey";
  const SETTINGS_STORAGE = "mellea.playground.settings";
  const CHAT_URL = "v1/chat/completions";
  const MODELS_URL = "v1/models";

  const $ = (id) => document.getElementById(id);
  const el = {
    modelName: $("model-name"),
    dot: $("server-dot"),
    banner: $("banner"),
    messages: $("messages"),
    empty: $("empty"),
    composer: $("composer"),
    prompt: $("prompt"),
    send: $("send"),
    stop: $("stop"),
    systemPrompt: $("system-prompt"),
    temperature: $("temperature"),
    maxTokens: $("max-tokens"),
    seed: $("seed"),
    requirements: $("requirements"),
    clear: $("clear"),
    keyPanel: $("key-panel"),
    keyMessage: $("key-message"),
    apiKey: $("api-key"),
    forgetKey: $("forget-key"),
    keyButton: $("key-button"),
    settingsToggle: $("settings-toggle"),
    programAbout: $("program-about"),
  };

  const state = {
    model: document.querySelector('meta[name="mellea-model"]').content,
    history: [], // the conversation sent with each request (without the system prompt)
    chat: 0, // bumped by "New chat", so a reply still finishing cannot join the new one
    controller: null, // AbortController of the reply being streamed
    afterKey: null, // what to retry once the user has entered an API key
    stickToBottom: true, // follow the stream unless the user scrolled up
  };

  // ---- storage (localStorage can be unavailable, e.g. in some private modes) ----

  function load(name) {
    try {
      return window.localStorage.getItem(name);
    } catch {
      return null;
    }
  }

  function store(name, value) {
    try {
      if (value === null) window.localStorage.removeItem(name);
      else window.localStorage.setItem(name, value);
    } catch {
      // not persisted; the value still holds for this page
    }
  }

  let memoryKey = load(KEY_STORAGE);

  function authHeaders() {
    return memoryKey ? { Authorization: `Bearer ${memoryKey}` } : {};
  }

  // ---- settings ----

  const SETTING_FIELDS = ["systemPrompt", "temperature", "maxTokens", "seed", "requirements"];

  function restoreSettings() {
    let saved = {};
    try {
      saved = JSON.parse(load(SETTINGS_STORAGE) || "{}");
    } catch {
      saved = {};
    }
    for (const name of SETTING_FIELDS) {
      if (typeof saved[name] === "string") el[name].value = saved[name];
    }
  }

  function saveSettings() {
    const values = {};
    for (const name of SETTING_FIELDS) values[name] = el[name].value;
    store(SETTINGS_STORAGE, JSON.stringify(values));
  }

  function numberField(input, integer) {
    const text = input.value.trim();
    if (text === "") return undefined;
    const value = Number(text);
    if (!Number.isFinite(value) || (integer && !Number.isInteger(value))) {
      throw new Error(`${input.closest("label").querySelector(".label").textContent} must be a ${integer ? "whole " : ""}number`);
    }
    return value;
  }

  function requestBody() {
    const messages = [];
    const system = el.systemPrompt.value.trim();
    if (system) messages.push({ role: "system", content: system });
    messages.push(...state.history);
    const body = {
      model: state.model,
      messages,
      stream: true,
      // include_program_events: the program's attempts and requirement verdicts, live.
      stream_options: { include_usage: true, include_program_events: true },
    };
    const temperature = numberField(el.temperature, false);
    const maxTokens = numberField(el.maxTokens, true);
    const seed = numberField(el.seed, true);
    if (temperature !== undefined) body.temperature = temperature;
    if (maxTokens !== undefined) body.max_tokens = maxTokens;
    if (seed !== undefined) body.seed = seed;
    const requirements = el.requirements.value
      .split("\n")
      .map((line) => line.trim())
      .filter(Boolean);
    if (requirements.length) body.requirements = requirements;
    return body;
  }

  // ---- small DOM helpers ----

  function node(tag, className, attrs = {}) {
    const made = document.createElement(tag);
    if (className) made.className = className;
    for (const [name, value] of Object.entries(attrs)) made.setAttribute(name, value);
    return made;
  }

  function nearBottom() {
    const m = el.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }

  function scrollDown(force) {
    if (force || state.stickToBottom) el.messages.scrollTop = el.messages.scrollHeight;
  }

  function showBanner(text) {
    el.banner.textContent = text;
    el.banner.hidden = !text;
  }

  function setBusy(busy) {
    el.send.hidden = busy;
    el.stop.hidden = !busy;
    el.stop.disabled = !busy;
    el.composer.dataset.busy = busy ? "true" : "false";
    if (!busy) el.prompt.focus();
  }

  function autoGrow() {
    el.prompt.style.height = "auto";
    el.prompt.style.height = `${Math.min(el.prompt.scrollHeight, 220)}px`;
  }

  // ---- messages ----

  function addUserMessage(text) {
    el.empty.hidden = true;
    const wrap = node("div", "message user", { "data-testid": "message-user" });
    wrap.append(node("div", "role"));
    wrap.firstChild.textContent = "You";
    const bubble = node("div", "bubble", { "data-testid": "user-content" });
    bubble.textContent = text;
    wrap.append(bubble);
    el.messages.append(wrap);
    scrollDown(true);
  }

  // One assistant reply: its DOM and what the stream has told us so far.
  class Reply {
    constructor() {
      this.wrap = node("div", "message assistant", {
        "data-testid": "message-assistant",
        "data-state": "waiting",
      });
      const role = node("div", "role");
      role.textContent = state.model;
      this.bubble = node("div", "bubble");
      this.reasoning = null;
      this.content = node("div", "content", { "data-testid": "reply-content" });
      this.renderQueued = false;
      this.tools = node("div", "tool-calls", { "data-testid": "tool-calls" });
      this.stats = node("div", "stats", { "data-testid": "reply-stats" });
      this.program = null; // the attempts panel, once the program reports an attempt
      this.bubble.append(this.content, this.tools);
      this.wrap.append(role, this.bubble, this.stats);
      el.messages.append(this.wrap);

      this.text = "";
      this.toolCalls = []; // by stream index: {id, name, arguments, argsEl}
      this.started = performance.now();
      this.firstToken = null;
      this.finished = null;
      this.finishReason = null;
      this.usage = null;
      scrollDown(true);
    }

    set state(value) {
      this.wrap.dataset.state = value;
    }

    markToken() {
      if (this.firstToken === null) this.firstToken = performance.now();
      this.state = "streaming";
    }

    addReasoning(text) {
      if (!this.reasoning) {
        this.reasoning = node("details", "reasoning", { "data-testid": "reasoning", open: "" });
        const summary = node("summary");
        summary.textContent = "Reasoning";
        this.reasoningText = node("div", "reasoning-text", { "data-testid": "reasoning-content" });
        this.reasoning.append(summary, this.reasoningText);
        this.bubble.prepend(this.reasoning);
      }
      this.markToken();
      this.reasoningText.append(text);
    }

    addContent(text) {
      this.markToken();
      // The answer has started: fold the reasoning away (the user can reopen it).
      if (this.reasoning && this.text === "") this.reasoning.open = false;
      this.text += text;
      // Re-render at most once a frame, however fast the chunks come.
      if (!this.renderQueued) {
        this.renderQueued = true;
        requestAnimationFrame(() => this.renderContent());
      }
    }

    renderContent() {
      this.renderQueued = false;
      this.content.replaceChildren(renderMarkdown(this.text));
      scrollDown(false);
    }

    addToolCall(piece) {
      this.markToken();
      const index = piece.index ?? this.toolCalls.length;
      let call = this.toolCalls[index];
      if (!call) {
        const box = node("div", "tool-call", { "data-testid": "tool-call" });
        const head = node("div", "tool-head");
        const label = node("span");
        label.textContent = "Tool call";
        const name = node("span", "tool-name", { "data-testid": "tool-name" });
        const id = node("span", "tool-id");
        const args = node("pre", "tool-args", { "data-testid": "tool-arguments" });
        head.append(label, name, id);
        box.append(head, args);
        this.tools.append(box);
        call = { id: "", name: "", arguments: "", nameEl: name, idEl: id, argsEl: args };
        this.toolCalls[index] = call;
      }
      if (piece.id) {
        call.id = piece.id;
        call.idEl.textContent = piece.id;
      }
      const fn = piece.function || {};
      if (fn.name) {
        call.name += fn.name;
        call.nameEl.textContent = call.name;
      }
      if (fn.arguments) {
        call.arguments += fn.arguments;
        call.argsEl.textContent = call.arguments;
      }
    }

    // A program event (stream_options.include_program_events): attempts and verdicts go
    // into a panel folded under the answer.
    addProgramEvent(event) {
      if (event.type === "program.done") return;
      if (!this.program) {
        const panel = node("details", "attempts", { "data-testid": "attempts" });
        this.programSummary = node("summary", "", { "data-testid": "attempts-summary" });
        this.programList = node("div", "attempt-list");
        panel.append(this.programSummary, this.programList);
        this.bubble.append(panel);
        this.program = panel;
        this.attempts = new Map();
      }
      const attempt = this.attemptBox(event);
      if (event.type === "attempt.delta") {
        this.markToken();
        attempt.text.append(event.text);
        this.programSummary.textContent = `Attempt ${event.attempt + 1}: generating…`;
      } else if (event.type === "requirement.checked") {
        const item = node("li", event.passed ? "verdict passed" : "verdict failed", {
          "data-testid": "verdict",
          "data-passed": String(event.passed),
        });
        item.textContent = `${event.passed ? "✓" : "✗"} ${event.description ?? "requirement"}`;
        if (event.reason) {
          const why = node("span", "verdict-reason");
          why.textContent = ` — ${event.reason}`;
          item.append(why);
        }
        attempt.verdicts.append(item);
        this.programSummary.textContent = `Attempt ${event.attempt + 1}: checking requirements…`;
      } else if (event.type === "attempt.chosen") {
        attempt.box.classList.add("chosen");
        attempt.box.dataset.chosen = "true";
        attempt.label.textContent = `${attemptName(event)} · chosen`;
        const count = event.attempt_count;
        const met = event.requirements_met ? "requirements met" : "requirements not met";
        this.programSummary.textContent =
          `${count} attempt${count === 1 ? "" : "s"} · ${met} · showing attempt ${event.attempt + 1}`;
        this.program.dataset.met = String(Boolean(event.requirements_met));
      }
      scrollDown(false);
    }

    // One box per attempt of each sampling run (a program may sample more than once).
    attemptBox(event) {
      const key = `${event.run ?? 0}:${event.attempt}`;
      if (!this.attempts.has(key)) {
        const box = node("div", "attempt", { "data-testid": "attempt" });
        const label = node("div", "attempt-label");
        label.textContent = attemptName(event);
        const text = node("div", "attempt-text", { "data-testid": "attempt-text" });
        const verdicts = node("ul", "verdicts");
        box.append(label, text, verdicts);
        this.programList.append(box);
        this.attempts.set(key, { box, label, text, verdicts });
      }
      return this.attempts.get(key);
    }

    showError(message) {
      const box = node("div", "error", { "data-testid": "reply-error" });
      box.textContent = message;
      this.bubble.append(box);
    }

    // Pretty-print complete JSON arguments once the stream is over.
    tidyToolCalls() {
      for (const call of this.toolCalls) {
        if (!call) continue;
        try {
          call.argsEl.textContent = JSON.stringify(JSON.parse(call.arguments), null, 2);
        } catch {
          // not (yet) JSON: leave it as streamed
        }
      }
    }

    end(outcome) {
      this.finished = this.finished ?? performance.now();
      this.renderContent();
      this.state = outcome;
      this.tidyToolCalls();
      this.renderStats(outcome);
    }

    renderStats(outcome) {
      this.stats.replaceChildren();
      const add = (testid, label, value, extraClass = "", title = "") => {
        const stat = node("span", `stat ${extraClass}`.trim(), { "data-testid": testid });
        if (title) stat.title = title;
        const strong = node("b");
        strong.textContent = value;
        stat.append(label ? `${label} ` : "", strong);
        this.stats.append(stat);
      };
      if (this.firstToken !== null) {
        add("stat-ttft", "TTFT", formatSeconds((this.firstToken - this.started) / 1000), "",
          "Time to first token: from sending the request to the first streamed token");
      }
      const usage = this.usage;
      const generation = (this.finished - this.started) / 1000;
      if (usage && typeof usage.completion_tokens === "number" && generation > 0) {
        add("stat-tps", "", `${(usage.completion_tokens / generation).toFixed(1)} tok/s`, "",
          "Completion tokens over the generation time (request sent to last token)");
      }
      if (usage && typeof usage.prompt_tokens === "number") {
        add("stat-prompt-tokens", "prompt", String(usage.prompt_tokens));
      }
      if (usage && typeof usage.completion_tokens === "number") {
        add("stat-completion-tokens", "completion", String(usage.completion_tokens));
      }
      add("stat-time", "time", formatSeconds(generation));
      const finish = outcome === "done" ? this.finishReason || "unknown" : outcome;
      add("stat-finish", "finish", finish, `finish-${finish}`,
        outcome === "stopped" ? "You stopped this reply" : "The finish reason the server sent");
    }

    remove() {
      this.wrap.remove();
    }

    // What this reply adds to the conversation for the next request.
    asMessage() {
      const calls = this.toolCalls.filter(Boolean).map((call) => ({
        id: call.id,
        type: "function",
        function: { name: call.name, arguments: call.arguments },
      }));
      if (!this.text && !calls.length) return null;
      const message = { role: "assistant", content: this.text };
      if (calls.length) message.tool_calls = calls;
      return message;
    }
  }

  function attemptName(event) {
    const run = event.run ? `Run ${event.run + 1} · ` : "";
    return `${run}Attempt ${event.attempt + 1}`;
  }

  // A small, safe subset of Markdown (fenced code, inline code, bold, headings), built as
  // DOM nodes: model output never reaches innerHTML. Everything else stays plain text.
  function renderMarkdown(text) {
    const fragment = document.createDocumentFragment();
    const parts = text.split(/^```[^\n]*\n?/m);
    parts.forEach((part, i) => {
      if (i % 2 === 1) {
        const pre = node("pre", "code-block");
        const code = node("code");
        code.textContent = part.replace(/\n$/, "");
        pre.append(code);
        fragment.append(pre);
      } else {
        renderProse(part, fragment);
      }
    });
    return fragment;
  }

  function renderProse(text, into) {
    const lines = text.split("\n");
    lines.forEach((line, i) => {
      const heading = /^#{1,6}\s+(.*)$/.exec(line);
      if (heading) {
        const strong = node("strong", "heading");
        renderInline(heading[1], strong);
        into.append(strong);
      } else {
        renderInline(line, into);
      }
      if (i < lines.length - 1) into.append("\n");
    });
  }

  function renderInline(text, into) {
    const pattern = /`([^`\n]+)`|\*\*([^*\n]+)\*\*/g;
    let last = 0;
    for (const match of text.matchAll(pattern)) {
      if (match.index > last) into.append(text.slice(last, match.index));
      const made = match[1] !== undefined ? node("code") : node("strong");
      made.textContent = match[1] ?? match[2];
      into.append(made);
      last = match.index + match[0].length;
    }
    if (last < text.length) into.append(text.slice(last));
  }

  function formatSeconds(seconds) {
    return seconds < 10 ? `${seconds.toFixed(2)} s` : `${seconds.toFixed(1)} s`;
  }

  // ---- the wire: fetch + a streaming SSE parser ----

  class HttpError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function errorMessage(response) {
    const text = await response.text().catch(() => "");
    try {
      const error = JSON.parse(text).error;
      if (error && error.message) {
        return error.param ? `${error.message} (param: ${error.param})` : error.message;
      }
    } catch {
      // not JSON
    }
    return text.trim().slice(0, 300) || response.statusText || "request failed";
  }

  function describeError(error) {
    const parts = [error.message || "the server reported an error"];
    if (error.code) parts.push(`(${error.code})`);
    return parts.join(" ");
  }

  // The `data:` payloads of an SSE body, one per event; comment lines (`: ping`) are skipped.
  async function* sseData(body, signal) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    const onAbort = () => reader.cancel().catch(() => {});
    signal.addEventListener("abort", onAbort);
    let buffer = "";
    let data = [];
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        const lines = buffer.split(/\r\n|\r|\n/);
        buffer = lines.pop(); // the last piece may be an incomplete line
        for (const line of lines) {
          if (line === "") {
            if (data.length) yield data.join("\n");
            data = [];
          } else if (line.startsWith(":")) {
            continue;
          } else if (line.startsWith("data:")) {
            const rest = line.slice(5);
            data.push(rest.startsWith(" ") ? rest.slice(1) : rest);
          }
          // other SSE fields (event:, id:, retry:) are not used by this API
        }
      }
      if (buffer.startsWith("data:")) data.push(buffer.slice(5).trimStart());
      if (data.length) yield data.join("\n");
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  async function streamReply(body, reply, signal) {
    const response = await fetch(CHAT_URL, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream", ...authHeaders() },
      body: JSON.stringify(body),
      signal,
    });
    if (!response.ok) throw new HttpError(response.status, await errorMessage(response));
    if (!response.body) throw new Error("this browser cannot stream responses");
    let sawDone = false;
    for await (const payload of sseData(response.body, signal)) {
      if (payload === "[DONE]") {
        sawDone = true;
        break;
      }
      let chunk;
      try {
        chunk = JSON.parse(payload);
      } catch {
        continue;
      }
      if (chunk.error) {
        reply.showError(describeError(chunk.error));
        reply.errored = true;
        continue;
      }
      if (chunk.usage) reply.usage = chunk.usage;
      if (chunk.mellea) reply.addProgramEvent(chunk.mellea);
      for (const choice of chunk.choices || []) {
        const delta = choice.delta || {};
        const reasoning = delta.reasoning_content ?? delta.reasoning;
        if (reasoning) reply.addReasoning(reasoning);
        if (delta.content) reply.addContent(delta.content);
        for (const call of delta.tool_calls || []) reply.addToolCall(call);
        if (choice.finish_reason) {
          reply.finishReason = choice.finish_reason;
          reply.finished = performance.now();
        }
      }
      scrollDown(false);
    }
    if (!sawDone && !signal.aborted && !reply.errored) {
      reply.showError("The connection closed before the reply was complete.");
      reply.errored = true;
    }
  }

  // ---- sending ----

  async function runReply() {
    let body;
    try {
      body = requestBody();
    } catch (error) {
      showBanner(error.message);
      return;
    }
    showBanner("");
    const reply = new Reply();
    const controller = new AbortController();
    state.controller = controller;
    state.stickToBottom = true;
    setBusy(true);
    const chat = state.chat;
    let outcome = "done";
    try {
      await streamReply(body, reply, controller.signal);
      if (controller.signal.aborted) outcome = "stopped";
      else if (reply.errored) outcome = "error";
    } catch (error) {
      if (controller.signal.aborted) {
        outcome = "stopped";
      } else if (error instanceof HttpError && error.status === 401) {
        // Ask for the key, then send the same conversation again.
        reply.remove();
        state.controller = null;
        setBusy(false);
        askForKey(memoryKey ? "That key was refused. Enter a valid key." : null, runReply);
        return;
      } else {
        outcome = "error";
        const message =
          error instanceof HttpError
            ? `HTTP ${error.status}: ${error.message}`
            : `Could not reach the server: ${error.message}`;
        reply.showError(message);
      }
    }
    reply.end(outcome);
    const message = reply.asMessage();
    if (message && chat === state.chat) state.history.push(message);
    if (state.controller === controller) state.controller = null;
    setBusy(false);
    scrollDown(false);
  }

  function send() {
    if (state.controller) return;
    const text = el.prompt.value.trim();
    if (!text) return;
    if (!el.keyPanel.hidden) {
      el.apiKey.focus();
      return;
    }
    try {
      requestBody(); // refuse bad settings before the message joins the conversation
    } catch (error) {
      showBanner(error.message);
      return;
    }
    el.prompt.value = "";
    autoGrow();
    addUserMessage(text);
    state.history.push({ role: "user", content: text });
    runReply();
  }

  function stop() {
    if (state.controller) state.controller.abort();
  }

  function newChat() {
    stop();
    state.chat += 1;
    state.history = [];
    for (const message of el.messages.querySelectorAll(".message")) message.remove();
    el.empty.hidden = false;
    showBanner("");
    el.prompt.focus();
  }

  // ---- API key ----

  function askForKey(message, then) {
    state.afterKey = then;
    el.keyMessage.textContent =
      message || "Enter the key given to m serve --api-key. It is kept in this browser only.";
    el.keyPanel.hidden = false;
    el.forgetKey.hidden = !memoryKey;
    el.apiKey.value = "";
    el.apiKey.focus();
  }

  function saveKey(event) {
    event.preventDefault();
    const key = el.apiKey.value.trim();
    if (!key) {
      el.apiKey.focus();
      return;
    }
    memoryKey = key;
    store(KEY_STORAGE, key);
    el.apiKey.value = "";
    el.keyPanel.hidden = true;
    el.keyButton.hidden = false;
    const then = state.afterKey;
    state.afterKey = null;
    if (then) then();
    else el.prompt.focus();
  }

  function forgetKey() {
    memoryKey = null;
    store(KEY_STORAGE, null);
    el.keyButton.hidden = true;
    askForKey(null, checkServer);
  }

  // ---- start-up ----

  // What the program says about itself (GET /v1/models): its docstring and parameters.
  function describeProgram(about) {
    if (!about) return;
    const doc = about.description || (about.serve && about.serve.description);
    const params = (about.serve && about.serve.parameters) || [];
    el.programAbout.replaceChildren();
    if (doc) {
      const text = node("p", "program-doc", { "data-testid": "program-doc" });
      text.textContent = doc;
      el.programAbout.append(text);
    }
    const line = node("p", "muted program-params", { "data-testid": "program-params" });
    line.textContent = `serve() takes: ${["input", ...params].join(", ")}`;
    el.programAbout.append(line);
    el.programAbout.hidden = false;
  }

  async function checkServer() {
    try {
      const response = await fetch(MODELS_URL, { headers: authHeaders() });
      if (response.status === 401) {
        el.dot.className = "dot bad";
        askForKey(memoryKey ? "That key was refused. Enter a valid key." : null, checkServer);
        return;
      }
      if (!response.ok) throw new Error(await errorMessage(response));
      const models = await response.json();
      const card = models.data && models.data[0];
      const id = card && card.id;
      if (id) {
        state.model = id;
        el.modelName.textContent = id;
      }
      describeProgram(card && card.mellea);
      el.dot.className = "dot ok";
      el.dot.title = "Connected";
    } catch (error) {
      el.dot.className = "dot bad";
      el.dot.title = `Not connected: ${error.message}`;
    }
  }

  el.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  el.prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  el.prompt.addEventListener("input", autoGrow);
  el.stop.addEventListener("click", stop);
  el.clear.addEventListener("click", newChat);
  el.keyPanel.addEventListener("submit", saveKey);
  el.forgetKey.addEventListener("click", forgetKey);
  el.keyButton.addEventListener("click", () =>
    askForKey("Enter a new key, or forget the stored one.", null),
  );
  el.messages.addEventListener("scroll", () => {
    state.stickToBottom = nearBottom();
  });
  el.settingsToggle.addEventListener("click", () => {
    const hidden = document.body.classList.toggle("settings-hidden");
    el.settingsToggle.setAttribute("aria-expanded", String(!hidden));
  });
  for (const name of SETTING_FIELDS) el[name].addEventListener("input", saveSettings);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.controller) stop();
  });

  restoreSettings();
  if (window.matchMedia("(max-width: 900px)").matches) {
    document.body.classList.add("settings-hidden");
    el.settingsToggle.setAttribute("aria-expanded", "false");
  }
  el.keyButton.hidden = !memoryKey;
  setBusy(false);
  checkServer();
})();
