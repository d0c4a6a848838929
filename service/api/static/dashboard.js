// The modelrouter dashboard: plain JS over the public API (docs/api.md), no build step.
"use strict";

// Every type the log can hold (tests/api/test_dashboard_assets.py keeps this list equal to
// service.core.events): the stream names each message after its type, and EventSource
// delivers a named message only to a listener for that name.
const EVENT_TYPES = [
  "download_cancel_requested", "download_cancelled", "download_failed", "download_finished",
  "download_interrupted", "download_progress", "download_requested", "download_resumed", "download_started",
  "instance_crashed", "instance_load_failed", "instance_loading", "instance_lost", "instance_ready",
  "instance_requested", "instance_stats", "instance_stop_requested", "instance_stopped",
  "instance_unresponsive", "key_changed", "key_created", "key_revoked", "loading_progress", "log_writes_resumed",
  "model_alias_removed", "model_aliased",
  "model_configured", "model_discovered", "model_measured", "model_removed", "models_reloaded",
  "node_devices_measured", "node_joined", "node_left", "node_lost", "partial_file_found",
  "partial_file_removed", "prompt_cache_discarded", "prompt_cache_restored", "prompt_cache_saved",
  "recovery_completed", "request_completed", "router_started", "router_stopped", "sleep_ended",
];
const NOISY = new Set(["download_progress", "loading_progress", "instance_stats"]); // they move bars and gauges, not the feed
const FEED_BACKLOG = 50; // events shown from before the page opened
const FEED_MAX = 300;
const KEY_STORE = "modelrouter.api_key";

const $ = (sel) => document.querySelector(sel);
const state = { models: [], jobs: new Map(), lastId: null, source: null, logSource: null, keyWaiters: [] };

// ---- HTTP with the API key ---------------------------------------------------------------

function apiKey() { return localStorage.getItem(KEY_STORE); }

function headers(extra) {
  const h = Object.assign({}, extra);
  const key = apiKey();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// Resolves once the user typed a key (the form shows only while someone waits for one).
function askForKey() {
  $("#key-form").hidden = false;
  $("#key-input").focus();
  return new Promise((resolve) => state.keyWaiters.push(resolve));
}

async function request(method, path, body) {
  for (;;) {
    const init = { method, headers: headers(body ? { "content-type": "application/json" } : {}) };
    if (body) init.body = JSON.stringify(body);
    const answer = await fetch(path, init);
    if (answer.status !== 401) return answer;
    localStorage.removeItem(KEY_STORE);
    await askForKey();
  }
}

// JSON, or an Error carrying the problem+json detail (RFC 9457).
async function api(method, path, body) {
  const answer = await request(method, path, body);
  const data = await answer.json().catch(() => null);
  if (!answer.ok) {
    const err = new Error((data && (data.detail || data.title)) || answer.status + " " + answer.statusText);
    err.status = answer.status;
    throw err;
  }
  return data;
}

function showError(err) {
  const box = $("#error");
  box.textContent = err ? String(err.message || err) : "";
  box.hidden = !err;
}

async function act(fn) {
  try { showError(null); await fn(); } catch (err) { showError(err); }
  scheduleRefresh();
}

// ---- elements (sizes and durations as text: format.js) ------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  node.append(...children.filter((c) => c != null));
  return node;
}

// ---- models ------------------------------------------------------------------------------

const openReasons = new Set(); // failed models whose reason is unfolded: kept across re-renders

// A failed (or unresponsive: hung, being killed) model's badge opens its reason, the hint and the last
// lines of its stderr.
function statusCell(m) {
  const st = m.status.value;
  const error = m.status.error;
  if ((st !== "failed" && st !== "unresponsive") || !error) return el("span", { class: "pill status-" + st }, st);
  const why = el("details", { class: "why", dataset: { model: m.id } },
    el("summary", { class: "pill status-" + st }, st),
    el("div", { class: "reason" }, error.message || error.reason || st),
    error.hint ? el("div", { class: "hint" }, "hint: " + error.hint) : null,
    error.stderr_tail ? el("pre", { class: "stderr" }, error.stderr_tail.trim().split("\n").slice(-12).join("\n")) : null);
  if (openReasons.has(m.id)) why.open = true;
  why.addEventListener("toggle", () => (why.open ? openReasons.add(m.id) : openReasons.delete(m.id)));
  return why;
}

function renderModels() {
  const body = $("#models tbody");
  body.replaceChildren(...state.models.map((m) => {
    const st = m.status.value;
    const button = (label, fn) => el("button", { type: "button", dataset: { action: label }, onclick: () => act(fn) }, label);
    const actions = [];
    if (st === "unloaded" || st === "failed") actions.push(button("load", () => api("POST", "/models/load", { model: m.id })));
    if (st === "loaded" || st === "loading") actions.push(button("unload", () => api("POST", "/models/unload", { model: m.id })));
    if (st === "downloading" && m.status.progress) {
      actions.push(button("cancel", () => api("DELETE", "/downloads/" + encodeURIComponent(m.status.progress.job_id))));
    }
    if (m.can_remove) {
      actions.push(button("delete", () => confirm("Delete " + m.id + " and its files?") &&
        api("DELETE", "/models?force=true&model=" + encodeURIComponent(m.id))));
    }
    actions.push(button("history", () => showHistory(m.id)));
    return el("tr", { dataset: { model: m.id, status: st } },
      el("td", {}, m.id),
      el("td", {}, statusCell(m)),
      el("td", { class: "device" }, deviceText(m)),
      el("td", {}, m.size ? bytes(m.size) : ""),
      el("td", { class: "prompt-cache" }, promptCacheText(m)),
      el("td", {}, m.source),
      el("td", { class: "actions" }, ...actions));
  }));
  const select = $("#chat-model");
  const chosen = select.value;
  const usable = state.models.filter((m) => ["loaded", "unloaded", "loading"].includes(m.status.value));
  select.replaceChildren(...usable.map((m) => el("option", { value: m.id }, m.id + " (" + m.status.value + ")")));
  if (usable.some((m) => m.id === chosen)) select.value = chosen;
}

// ---- downloads ---------------------------------------------------------------------------

function renderJobs() {
  const jobs = [...state.jobs.values()].slice(-5).reverse();
  $("#downloads").replaceChildren(...jobs.map((j) => {
    const fraction = j.bytes_total ? Math.min(1, j.bytes_done / j.bytes_total) : (j.status === "finished" ? 1 : 0);
    const rate = j.bytes_per_second ? bytes(j.bytes_per_second) + "/s" : "—";
    const text = j.status === "running"
      ? `${bytes(j.bytes_done)} / ${bytes(j.bytes_total)} · ${rate} · ETA ${seconds(j.eta_seconds)}`
      : `${j.status} · ${bytes(j.bytes_done)} / ${bytes(j.bytes_total)}` + (j.error ? " · " + (j.error.reason || "") : "");
    return el("div", { class: "job", id: "job-" + j.job_id, dataset: { status: j.status, fraction: fraction.toFixed(4) } },
      el("div", {}, j.model),
      el("div", { class: "bar" }, el("div", { class: "fill", style: `width:${(fraction * 100).toFixed(1)}%` })),
      el("div", { class: "job-text" }, text));
  }));
}

function onProgress(event) {
  const d = event.data;
  const job = state.jobs.get(d.job_id) || { job_id: d.job_id, model: event.model, status: "running" };
  state.jobs.set(d.job_id, Object.assign(job, {
    status: "running", bytes_done: d.bytes_done, bytes_total: d.bytes_total,
    bytes_per_second: d.bytes_per_second, eta_seconds: d.eta_seconds,
  }));
  renderJobs();
}

// ---- refresh (driven by the event feed, coalesced) ---------------------------------------

let refreshTimer = null;
function scheduleRefresh() {
  if (refreshTimer === null) refreshTimer = setTimeout(refresh, 150);
}

async function refresh() {
  refreshTimer = null;
  try {
    const [models, downloads] = await Promise.all([api("GET", "/models"), api("GET", "/downloads")]);
    state.models = models.data;
    state.jobs = new Map(downloads.downloads.map((j) => [j.job_id, j]));
    renderModels();
    renderJobs();
  } catch (err) { showError(err); }
  await refreshUsage(); // usage.js
}

// ---- live event feed ---------------------------------------------------------------------

function details(e) {
  const d = e.data || {};
  const size = d.bytes_total != null ? bytes(d.bytes_total) : d.total_bytes != null ? bytes(d.total_bytes) : null;
  const ms = d.load_ms ?? d.duration_ms;
  return [d.reason, d.status_code, size, ms != null ? Math.round(ms) + " ms" : null, d.message]
    .filter((b) => b != null).join(" · ");
}

function describe(e) {
  const more = details(e);
  return `${e.type}${e.model ? " " + e.model : ""}${more ? " · " + more : ""}`;
}

function onEvent(message) {
  state.lastId = Number(message.lastEventId);
  const event = JSON.parse(message.data);
  if (event.type === "download_progress") onProgress(event);
  if (NOISY.has(event.type)) return;
  const feed = $("#feed");
  feed.prepend(el("li", { value: event.position, dataset: { type: event.type } },
    new Date(event.recorded_at).toLocaleTimeString() + " " + describe(event)));
  while (feed.children.length > FEED_MAX) feed.lastChild.remove();
  scheduleRefresh();
}

function setConn(name) {
  const pill = $("#conn");
  pill.dataset.state = name;
  pill.textContent = name;
}

// A reconnect by EventSource itself sends Last-Event-ID: nothing is missed. Only when it
// gives up (a 401, or a 503 when too many streams are open) is a new one opened here,
// from the last id seen.
async function connect() {
  let after = state.lastId;
  if (after === null) {
    const health = await (await fetch("/health")).json();
    after = Math.max(0, health.position - FEED_BACKLOG);
  }
  const params = new URLSearchParams({ after: String(after) });
  if (apiKey()) params.set("api_key", apiKey());
  const source = new EventSource("/events/stream?" + params);
  state.source = source;
  for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
  source.onopen = () => { setConn("live"); scheduleRefresh(); };
  source.onerror = async () => {
    if (source.readyState !== EventSource.CLOSED) { setConn("reconnecting"); return; }
    setConn("down");
    try { await api("GET", "/events?limit=1"); } catch (err) { /* a 401 has asked for the key */ }
    setTimeout(connect, 1000);
  };
}

// ---- history -----------------------------------------------------------------------------

// The history's columns worth a glance (docs/api.md); the rest stays in the JSON.
const HISTORY_COLUMNS = {
  downloads: ["requested_at", "duration_seconds", "bytes_total", "resumed_bytes", "outcome", "reason"],
  loads: ["requested_at", "reason", "load_ms", "uptime_seconds", "requests_served", "ended", "signal"],
};

function table(rows, columns) {
  if (!rows.length) return el("p", { class: "muted" }, "nothing yet");
  const all = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cols = columns ? columns.filter((c) => all.includes(c)) : all;
  const cell = (v, c) => {
    if (v == null) return "";
    if (typeof v === "object") return JSON.stringify(v);
    if (c.endsWith("_at")) return new Date(v).toLocaleString();
    if (c.startsWith("bytes_") || c === "resumed_bytes") return bytes(v);
    if (c.endsWith("_seconds")) return seconds(v);
    if (c.endsWith("_ms")) return Math.round(v) + " ms";
    return String(v);
  };
  return el("table", {},
    el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", {}, c)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...cols.map((c) => el("td", {}, cell(r[c], c)))))));
}

// The timeline from GET /models/{id}/history; where the service has none (older versions),
// the model's own events from GET /events?model=.
let historyAsked = 0; // the latest click: an older answer arriving after it (another model's) is dropped

async function showHistory(model) {
  const asked = ++historyAsked;
  $("#history-model").textContent = model;
  showLog(model);
  const box = $("#history");
  // Until the answer comes, show nothing rather than the last timeline (perhaps another model's).
  box.replaceChildren();
  delete box.dataset.source;
  const path = "/models/" + model.split("/").map(encodeURIComponent).join("/") + "/history";
  const answer = await request("GET", path);
  if (asked !== historyAsked) return;
  if (answer.ok) {
    const data = await answer.json();
    const parts = Object.entries(data).filter(([, v]) => Array.isArray(v));
    const totals = Object.entries(data).filter(([k, v]) => typeof v === "number" || (k !== "model" && typeof v === "string"));
    box.replaceChildren(
      el("p", {}, totals.map(([k, v]) => `${k.replace(/_/g, " ")}: ${v}`).join(" · ")),
      ...parts.flatMap(([name, rows]) => [el("h3", {}, name), table(rows, HISTORY_COLUMNS[name])]));
    box.dataset.source = "history";
    return;
  }
  const page = await api("GET", "/events?limit=1000&model=" + encodeURIComponent(model));
  if (asked !== historyAsked) return;
  const rows = page.events.filter((e) => !NOISY.has(e.type)).reverse()
    .map((e) => ({ position: e.position, recorded_at: e.recorded_at, type: e.type, detail: details(e) }));
  box.replaceChildren(table(rows));
  box.dataset.source = "events";
}

// ---- a model's worker log ------------------------------------------------------------------

const LOG_MAX = 2000; // lines kept on the page

// The latest instance's log, followed (GET /logs/stream): the last lines, then each new one.
// EventSource sends no headers, so the key travels as ?api_key= (accepted on the streams only).
function showLog(model) {
  if (state.logSource) state.logSource.close();
  $("#log-model").textContent = model;
  const box = $("#worker-log");
  box.replaceChildren();
  box.dataset.state = "connecting";
  const params = new URLSearchParams({ model, tail: "200" });
  if (apiKey()) params.set("api_key", apiKey());
  const source = new EventSource("/logs/stream?" + params);
  state.logSource = source;
  source.onopen = () => { box.dataset.state = "live"; };
  source.addEventListener("log", (msg) => {
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.append(msg.data + "\n");
    while (box.childNodes.length > LOG_MAX) box.firstChild.remove();
    if (atEnd) box.scrollTop = box.scrollHeight;
  });
  source.onerror = () => {
    if (source.readyState !== EventSource.CLOSED) return; // it reconnects with Last-Event-ID by itself
    box.dataset.state = "none";
    if (!box.childNodes.length) box.append(el("span", { class: "muted" }, "no log for this model (never loaded here)"));
  };
}

// ---- chat --------------------------------------------------------------------------------

const conversation = [];

async function sendChat(ev) {
  ev.preventDefault();
  const model = $("#chat-model").value;
  const input = $("#chat-input");
  const log = $("#chat-log");
  conversation.push({ role: "user", content: input.value });
  log.append(el("div", { class: "msg user" }, "> " + input.value));
  input.value = "";
  const reply = el("div", { class: "msg assistant", dataset: { done: "false" } });
  log.append(reply);
  try {
    const answer = await request("POST", "/v1/chat/completions",
      { model, messages: conversation, stream: true, max_tokens: 128 });
    if (!answer.ok) throw new Error((await answer.json().catch(() => ({}))).detail || answer.statusText);
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      const lines = buffer.split("\n");
      buffer = lines.pop();
      for (const line of lines) {
        if (!line.startsWith("data:") || line.includes("[DONE]")) continue;
        const delta = JSON.parse(line.slice(5)).choices?.[0]?.delta?.content;
        if (delta) reply.textContent += delta;
      }
    }
    conversation.push({ role: "assistant", content: reply.textContent });
  } catch (err) {
    reply.textContent = "error: " + err.message;
  }
  reply.dataset.done = "true";
  scheduleRefresh();
}

// ---- start -------------------------------------------------------------------------------

function init() {
  $("#key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    localStorage.setItem(KEY_STORE, $("#key-input").value.trim());
    $("#key-input").value = "";
    $("#key-form").hidden = true;
    $("#forget-key").hidden = false;
    state.keyWaiters.splice(0).forEach((resolve) => resolve());
  });
  $("#forget-key").hidden = !apiKey();
  $("#forget-key").addEventListener("click", () => { localStorage.removeItem(KEY_STORE); location.reload(); });
  $("#download-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const model = $("#download-repo").value.trim();
    act(async () => { await api("POST", "/models", { model }); $("#download-repo").value = ""; });
  });
  $("#chat-form").addEventListener("submit", sendChat);
  initUsage(); // usage.js
  refresh();
  connect();
}

init();
