// Tether operator console. No build step. Every value from the daemon is shown as text
// (textContent, text nodes), never as markup. The Activities are the daemon's Rust
// ActivityStore state: this page only replaces whole messages by id (no AG-UI rule here).
"use strict";

const state = {
  csrf: null, operator: null, loopback: true, offsetMs: 0, maxAgeS: 300,
  activities: new Map(), order: [], decisions: new Map(), notes: new Map(),
  devices: [], lastStop: new Map(), live: null,
  // Per robot, what the operator set on its card (the arm-supported tick, the last action's
  // answer): the card is rebuilt at every devices event, and keeps them.
  deviceUi: new Map(),
};

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function serverNow() { return Date.now() + state.offsetMs; }
function syncClock(doc) { if (doc && typeof doc.server_ms === "number") state.offsetMs = doc.server_ms - Date.now(); }

function angle(rad) {
  if (typeof rad !== "number") return "-";
  return `${(rad * 180 / Math.PI).toFixed(2)}\u00b0 (${rad.toFixed(4)} rad)`;
}
function clock(ms) { return typeof ms === "number" ? new Date(ms).toISOString().slice(11, 23) + " UTC" : "-"; }
function age(ms) { return typeof ms === "number" ? `${Math.max(0, (serverNow() - ms) / 1000).toFixed(1)} s` : "-"; }

// The session's CSRF token lives in this origin's storage, never in what a cookie alone
// fetches: a cookie goes to every port of the host (another local user's server could take
// it), this page's storage only to this origin.
const CSRF_KEY = "tether.console.csrf";
function storedCsrf() { try { return localStorage.getItem(CSRF_KEY); } catch (e) { return state.csrf; } }
function storeCsrf(token) {
  state.csrf = token;
  try { if (token) localStorage.setItem(CSRF_KEY, token); else localStorage.removeItem(CSRF_KEY); } catch (e) { /* memory only */ }
}

// No answer at all (the daemon down or restarting, the request never sent or its answer
// lost, or none within `timeoutMs`): status 0, code `no_answer`, said by each caller.
async function api(method, path, body, headers, timeoutMs) {
  const h = Object.assign({}, headers || {});
  if (body !== undefined) h["Content-Type"] = "application/json";
  const csrf = storedCsrf() || state.csrf;
  if (csrf && method !== "GET") h["X-CSRF-Token"] = csrf;
  const abort = new AbortController();
  const timer = timeoutMs ? setTimeout(() => abort.abort(), timeoutMs) : null;
  let response;
  try {
    response = await fetch(path, {
      method, headers: h, credentials: "same-origin", cache: "no-store", signal: abort.signal,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    const why = abort.signal.aborted ? `no answer within ${timeoutMs / 1000} s` : String(e);
    return { ok: false, status: 0, doc: { code: "no_answer", message: why } };
  } finally {
    if (timer) clearTimeout(timer);
  }
  let doc = {};
  try { doc = await response.json(); } catch (e) { doc = { code: "bad_answer", message: String(e) }; }
  return { ok: response.ok, status: response.status, doc };
}

// --- session ---

function showSession() {
  const inside = Boolean(state.operator);
  $("login-form").hidden = inside;
  $("logout").hidden = !inside;
  $("who").textContent = inside ? `logged in as ${state.operator}` : "not logged in";
  $("stop-token-label").hidden = state.loopback || inside;
  for (const b of document.querySelectorAll("button[data-needs-session]")) b.disabled = !inside;
  if (state.decisions.size) renderDecisions();  // each card's own rule (a too old read-back)
}

async function loadSession() {
  const { doc } = await api("GET", "/api/session");
  state.loopback = doc.loopback !== false;
  state.maxAgeS = doc.max_evidence_age_s || state.maxAgeS;
  if (doc.notice) $("notice").textContent = doc.notice;
  // Logged in needs the session's token too: a page of this origin stored it at login.
  const csrf = storedCsrf();
  state.operator = doc.logged_in && csrf ? doc.operator : null;
  state.csrf = doc.logged_in && csrf ? csrf : null;
  showSession();
}

async function login(event) {
  event.preventDefault();
  const input = $("credential");
  const { ok, doc } = await api("POST", "/api/login", { credential: input.value });
  input.value = "";
  if (!ok) {
    $("login-error").textContent = `${doc.code}: ${doc.message}`;
    return;
  }
  $("login-error").textContent = "";
  state.operator = doc.operator;
  storeCsrf(doc.csrf);
  showSession();
  connectLive();
}

async function logout() {
  const { ok, doc } = await api("POST", "/api/logout", {});
  if (!ok && doc.code === "no_answer") {
    $("login-error").textContent = `logout not confirmed: ${doc.message}; the session ends with its lifetime`;
  }
  state.operator = null;
  storeCsrf(null);
  showSession();
}

// --- stop: its own request, whatever the live stream does ---

// A stop's answer is waited for this long; past it the page says the robot may NOT be stopped.
const STOP_TIMEOUT_MS = 5000;
const STOP_ELSEWHERE = "use tether stop on the host or the hardware emergency stop";

async function stop(robot) {
  const clicked = performance.now();
  const result = $("stop-result");
  result.textContent = robot ? `stopping ${robot}\u2026` : "stopping every robot\u2026";
  const headers = { "X-Tether-Stop": "1" };
  const token = $("stop-token").value;
  if (token && !state.operator) headers["Authorization"] = `Bearer ${token}`;
  // This page's live feed holds one of the few connections a browser opens to a host (six
  // over HTTP/1.1, shared by every tab): let it go, so the stop is never queued behind feeds.
  const live = state.live;
  if (live) { live.close(); state.live = null; }
  const answer = await api("POST", "/api/stop", robot ? { robot } : {}, headers, STOP_TIMEOUT_MS);
  if (live) connectLive();
  const { ok, doc } = answer;
  if (!ok && doc.code === "no_answer") {
    result.textContent = `STOP NOT CONFIRMED: ${doc.message}: the robot may NOT be stopped; ${STOP_ELSEWHERE}`;
    result.className = "abnormal-text";
    return;
  }
  if (!ok) {
    result.textContent = `STOP REFUSED: ${doc.code}: ${doc.message}: the robot was NOT stopped by this page; ${STOP_ELSEWHERE}`;
    result.className = "abnormal-text";
    return;
  }
  result.className = "";
  const parts = [];
  for (const report of doc.stopped || []) {
    state.lastStop.set(report.robot, report);
    const joints = (report.joints || []).map((j) => `${j.name || j.joint}: ${j.state}`).join(", ");
    parts.push(`${report.robot} ${report.ok ? "stopped" : "NOT CONFIRMED"} (${joints}); latched until an operator resumes it`);
  }
  result.textContent = parts.join(" | ") || "no robot configured";
  // From the click to the read-back shown (the benchmark reads it).
  window.tetherLastStop = { ms: performance.now() - clicked, text: result.textContent };
  renderDevices();
}

// --- devices ---

function jointStateCell(report, name) {
  if (!report) return "-";
  const j = (report.joints || []).find((x) => (x.name || x.joint) === name);
  if (!j) return "-";
  const errors = (j.hardware_error || j.hardware_errors || []).join(", ");
  return `${j.state}${errors ? ` (${errors})` : ""}`;
}

function deviceUi(robot) {
  let ui = state.deviceUi.get(robot);
  if (!ui) state.deviceUi.set(robot, (ui = {}));
  return ui;
}

function renderDevices() {
  const box = $("devices");
  box.replaceChildren();
  if (!state.devices.length) { box.append(el("p", { class: "empty" }, "No device state yet.")); return; }
  for (const d of state.devices) {
    const report = state.lastStop.get(d.robot);
    const abnormal = d.latched || !d.available || d.error;
    const card = el("div", { class: `card device${abnormal ? " abnormal" : ""}`, dataset: { robot: d.robot } });
    card.append(el("h3", {}, d.robot,
      d.latched ? el("span", { class: "badge abnormal latched" }, "LATCHED: stopped until an operator resumes it") : null,
      !d.available ? el("span", { class: "badge alarm" }, "unavailable") : null));
    card.append(el("p", { class: "meta" }, `safe stop policy: ${d.safe_stop}`,
      d.error ? ` \u2014 ${d.error}` : ""));
    const joints = ((d.read_back || {}).joints) || {};
    const rows = Object.entries(joints).map(([name, j]) => {
      const errs = (j.hardware_errors || []).join(", ");
      return el("tr", { class: errs || !j.torque_on ? "abnormal" : "", dataset: { joint: name } },
        el("td", {}, name), el("td", {}, angle(j.position_rad)), el("td", {}, angle(j.goal_rad)),
        el("td", { class: "torque" }, j.torque_on ? "on" : "off"), el("td", {}, j.moving ? "moving" : "still"),
        el("td", {}, errs || "none"), el("td", { class: "after-stop" }, jointStateCell(report, name)));
    });
    card.append(el("table", {}, el("thead", {}, el("tr", {},
      ["joint", "present", "goal", "torque", "motion", "hardware errors", "after the last stop"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
    if (report) card.append(el("p", { class: "stop-report" },
      `last stop: ${report.ok ? "confirmed" : "NOT CONFIRMED"}; a stop latches: nothing moves on ${d.robot} until an operator resumes it.`));
    const ui = deviceUi(d.robot);
    const supported = el("input", { type: "checkbox", class: "arm-supported", checked: ui.supported === true,
      onchange: (e) => { ui.supported = e.target.checked; } });
    card.append(el("div", { class: "actions" },
      el("button", { type: "button", class: "stop-robot", onclick: () => stop(d.robot) }, `Stop ${d.robot}`),
      el("button", { type: "button", class: "resume", "data-needs-session": true, disabled: !state.operator,
        onclick: () => deviceAction(d.robot, "resume", {}, card) }, "Resume"),
      el("button", { type: "button", class: "reread", "data-needs-session": true, disabled: !state.operator,
        onclick: () => deviceAction(d.robot, "reread", {}, card) }, "Re-read device"),
      el("label", {}, supported, " the arm is supported"),
      el("button", { type: "button", class: "reboot", "data-needs-session": true, disabled: !state.operator,
        onclick: () => deviceAction(d.robot, "reboot", { arm_supported: supported.checked }, card) }, "Reboot / clear error"),
      el("span", { class: ui.bad ? "result abnormal-text" : "result", role: "status" }, ui.result || "")));
    box.append(card);
  }
}

async function deviceAction(robot, action, extra, card) {
  const { ok, doc } = await api("POST", "/api/device", Object.assign({ robot, action }, extra));
  const ui = deviceUi(robot);
  ui.result = ok && doc.not_latched ? `${action}: ${robot} is not latched, nothing to resume`
    : ok ? `${action} done` + (doc.refreshed && doc.refreshed.length ? `: new evidence revision for ${doc.refreshed.map((r) => `${r.key} (revision ${r.revision})`).join(", ")}` : "")
    : doc.code === "no_answer" ? `${action} NOT CONFIRMED: ${doc.message}: it may or may not have been done`
    : `${doc.code}: ${doc.message}`;
  ui.bad = !ok;
  if (ok && action === "reboot") ui.supported = false;  // confirmed for that one reboot only
  // The card may have been rebuilt meanwhile: write the answer into the one shown now.
  const shown = document.querySelector(`#devices .card.device[data-robot="${CSS.escape(robot)}"] .result`) || card.querySelector(".result");
  shown.textContent = ui.result;
  shown.className = ok ? "result" : "result abnormal-text";
}

// --- decisions ---

function joinTable(headers, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

function differenceTable(diff) {
  if (!diff || !diff.fields || !diff.fields.length) return el("p", { class: "meta" }, "no difference in the read-back");
  return joinTable(["joint", "field", `revision ${diff.revision}`, "now"], diff.fields.map((f) =>
    el("tr", { class: "abnormal" }, el("td", {}, f.joint), el("td", {}, f.field),
      el("td", {}, typeof f.before === "number" ? angle(f.before) : JSON.stringify(f.before)),
      el("td", {}, typeof f.after === "number" ? angle(f.after) : JSON.stringify(f.after)))));
}

function renderDecision(d) {
  const errors = Object.keys(d.hardware_errors || {}).length;
  const card = el("div", { class: `card decision${errors ? " alarm" : " abnormal"}`, dataset: { key: d.key, revision: String(d.revision) } });
  card.append(el("h3", {}, d.key));
  card.append(el("p", {}, el("span", { class: "reason" }, `reason: ${d.reason || "-"}`),
    el("span", { class: "badge revision" }, `revision ${d.revision}`),
    el("span", { class: "badge" }, `robot ${d.robot || "-"}`)));
  card.append(el("p", { class: "meta" }, "read-back at ", clock(d.read_at_ms), ", age ",
    el("span", { class: "age", dataset: { at: String(d.read_at_ms || "") } }, age(d.read_at_ms)),
    ` (decisions are refused on a read-back older than ${state.maxAgeS} s)`));
  card.append(joinTable(["joint", "commanded", "present", "commanded \u2212 present", "goal", "torque", "motion", "hardware errors"],
    (d.joints || []).map((j) => el("tr", { class: (j.hardware_errors || []).length ? "alarm" : "", dataset: { joint: j.name } },
      el("td", {}, j.name), el("td", { class: "commanded" }, angle(j.commanded_rad)), el("td", { class: "present" }, angle(j.present_rad)),
      el("td", {}, angle(j.error_rad)), el("td", {}, angle(j.goal_rad)), el("td", {}, j.torque_on ? "on" : "off"),
      el("td", {}, j.moving ? "moving" : "still"), el("td", {}, (j.hardware_errors || []).join(", ") || "none")))));
  card.append(el("details", {}, el("summary", {}, `staged and sent (${(d.sent || []).length} commands)`),
    joinTable(["when", "attempt", "instruction", "joint", "cause"], (d.sent || []).map((s) =>
      el("tr", {}, el("td", {}, clock(s.t_ms)), el("td", {}, s.attempt ?? "-"), el("td", {}, s.instruction ?? "-"),
        el("td", {}, s.joint ?? s.id ?? "-"), el("td", {}, s.cause ?? "-"))))));
  if ((d.changes || []).length) card.append(el("div", { class: "changes" }, el("strong", {}, "recorded with this revision: "), d.changes.join("; ")));
  if (d.since_previous) card.append(el("div", { class: "since" }, el("strong", {}, `changed since revision ${d.since_previous.revision}:`), differenceTable(d.since_previous)));
  const note = state.notes.get(d.key);
  const result = el("div", { class: `result${note && note.bad ? " abnormal-text" : ""}`, role: "alert" }, note ? note.text : "");
  if (note && note.diff) result.append(differenceTable(note.diff));
  // A read-back past the console's age bound: the daemon refuses a decision on it, so the
  // page says so and offers only a wait until the device is read again.
  const stale = tooOld(d);
  if (stale) card.append(el("p", { class: "abnormal-text too-old" },
    `This read-back is older than ${state.maxAgeS} s: a decision on it is refused. Use "Re-read device" on ${d.robot || "the robot"}'s card for a fresh revision.`));
  const buttons = [["done", "Done: it happened"], ["reissue", "Re-issue"], ["abandon", "Abandon"], ["wait", "Wait"]].map(([decision, label]) =>
    el("button", { type: "button", class: `decide ${decision}`, "data-needs-session": true,
      disabled: !state.operator || (stale && decision !== "wait"),
      dataset: { decision, revision: String(d.revision) }, onclick: () => decide(d, decision) }, `${label} (revision ${d.revision})`));
  card.append(el("div", { class: "actions" }, buttons), result);
  return card;
}

function tooOld(d) {
  if (d.too_old) return true;
  return typeof d.read_at_ms === "number" && serverNow() - d.read_at_ms > state.maxAgeS * 1000;
}

function renderDecisions() {
  const box = $("decisions");
  box.replaceChildren();
  if (!state.decisions.size) { box.append(el("p", { class: "empty" }, "Nothing awaits a decision.")); return; }
  for (const d of state.decisions.values()) box.append(renderDecision(d));
}

async function decide(d, decision) {
  const { ok, doc } = await api("POST", "/api/resolve", { key: d.key, decision, revision: d.revision });
  if (!ok && doc.code === "no_answer") {
    state.notes.set(d.key, { bad: true, text: `NO ANSWER: ${doc.message}: the decision may or may not be recorded; this list shows the activity as it is once the daemon answers again` });
  } else if (ok && doc.decision === "wait") {  // a wait records nothing
    const line = `${clock(serverNow())}: wait by ${doc.operator}: nothing recorded; ${doc.key} stays parked on revision ${doc.revision}`;
    state.notes.set(d.key, { text: line });
    $("decision-log").prepend(el("li", {}, line));
  } else if (ok) {
    const line = `${clock(serverNow())}: ${doc.decision} recorded by ${doc.operator} on revision ${doc.revision} for ${doc.key} (${doc.status})`;
    state.notes.set(d.key, { text: line });
    $("decision-log").prepend(el("li", {}, line));
  } else if (doc.current) {
    state.decisions.set(d.key, doc.current);
    state.notes.set(d.key, { bad: true, text: `REFUSED: ${doc.code}: ${doc.message}. Review revision ${doc.current.revision} below.`, diff: doc.current.since_previous });
  } else {
    state.notes.set(d.key, { bad: true, text: `REFUSED: ${doc.code}: ${doc.message}` });
  }
  renderDecisions();
}

// --- activities: whole messages by id, in the store's order ---

function activityState(m) {
  const c = m.content || {};
  const s = String(c.state || c.status || "");
  // A failed result (an abandoned move, say) settles too: its state says it failed.
  return c.failed === true && !/fail/i.test(s) ? `${s} (failed)`.trim() : s;
}

function renderActivity(m, node) {
  const s = activityState(m);
  const abnormal = /fail|unknown|await|error|refused|stopped/i.test(s);
  node.className = `card activity${abnormal ? " abnormal" : ""}`;
  node.replaceChildren(
    el("h3", {}, m.id),
    el("p", { class: "meta" }, `${m.activityType || "-"}${s ? ` \u2014 ${s}` : ""}`),
    el("pre", {}, JSON.stringify(m.content, null, 1)));
}

function applyActivities(doc) {
  const box = $("activities");
  if (doc.reset) {
    const keep = new Set(doc.activities.map((m) => m.id));
    for (const [id, entry] of state.activities) if (!keep.has(id)) { entry.node.remove(); state.activities.delete(id); }
    for (const m of doc.activities) upsert(box, m);
    // the store's order
    for (const m of doc.activities) box.append(state.activities.get(m.id).node);
  } else {
    for (const m of doc.upsert || []) upsert(box, m);
  }
  $("activity-count").textContent = `(${state.activities.size})`;
  window.tetherRendered = { activities: state.activities.size, at: performance.now(), seq: (window.tetherRendered || {}).seq + 1 || 1 };
}

function upsert(box, m) {
  let entry = state.activities.get(m.id);
  if (!entry) {
    entry = { node: el("div", { dataset: { id: m.id } }) };
    state.activities.set(m.id, entry);
    box.append(entry.node);
  }
  renderActivity(m, entry.node);
}

// --- the live feed ---

function connectLive() {
  if (state.live) state.live.close();
  if (!state.loopback && !state.operator) { $("live-state").textContent = "log in to see the live state"; return; }
  const live = new EventSource("/api/live");
  state.live = live;
  live.addEventListener("open", () => {
    $("live-state").textContent = "live"; $("live-state").className = "";
    // A daemon restarted meanwhile knows no session of the one before: ask who is logged in.
    loadSession().catch(() => {});
  });
  live.addEventListener("error", () => {
    $("live-state").textContent = "live stream down: reconnecting";
    $("live-state").className = "abnormal-text";
  });
  live.addEventListener("activities", (e) => { const doc = JSON.parse(e.data); syncClock(doc); applyActivities(doc); });
  live.addEventListener("parked", (e) => {
    const doc = JSON.parse(e.data);
    syncClock(doc);
    state.decisions = new Map(doc.decisions.map((d) => [d.key, d]));
    for (const key of [...state.notes.keys()]) if (!state.decisions.has(key)) state.notes.delete(key);
    renderDecisions();
    window.tetherDecisions = { count: state.decisions.size, at: performance.now() };
  });
  live.addEventListener("devices", (e) => {
    const doc = JSON.parse(e.data);
    syncClock(doc);
    state.devices = doc.devices;
    // A robot resumed since this page stopped it: its stop report is history, not its state.
    for (const d of doc.devices) if (!d.latched && state.lastStop.delete(d.robot) && !state.lastStop.size) {
      $("stop-result").textContent = "";
      $("stop-result").className = "";
    }
    renderDevices();
  });
  live.addEventListener("session", (e) => {
    // The session ended (a logout elsewhere, its lifetime, a restart). On loopback the live
    // state needs none: the stream goes on, and the page shows the login again.
    const doc = JSON.parse(e.data || "{}");
    if (!doc.loopback) live.close();
    state.operator = null; storeCsrf(null); showSession();
  });
}

// A tab out of sight lets its live feed go (every tab's feed holds one of the browser's few
// connections to this host) and opens it again when shown.
document.addEventListener("visibilitychange", () => {
  if (document.hidden) { if (state.live) { state.live.close(); state.live = null; } }
  else if (!state.live) connectLive();
});

function tick() {
  for (const span of document.querySelectorAll("span.age")) {
    const at = Number(span.dataset.at);
    if (at) span.textContent = age(at);
  }
  // A card whose read-back just went past the age bound is drawn again (its buttons too).
  for (const card of document.querySelectorAll("div.decision")) {
    const d = state.decisions.get(card.dataset.key);
    if (d && tooOld(d) && !card.querySelector(".too-old")) { renderDecisions(); break; }
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  $("stop-all").addEventListener("click", () => stop(null));
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  window.tetherStarted = performance.now();
  await loadSession();
  connectLive();
  setInterval(tick, 1000);
});
