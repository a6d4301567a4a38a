// spoold's dashboard: one page, no dependencies, no build step. Every number comes from the
// API, called with the operator's bearer token (typed once, kept in this tab's session
// storage, sent in the Authorization header — never a cookie, so no other site can make the
// browser act with it). Everything shown is escaped; nothing the API returns becomes markup.

const main = document.getElementById("main");
const status = document.getElementById("status");
const forget = document.getElementById("forget");
const TOKEN_KEY = "spoold-token";

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

function say(text, error = false) {
  status.textContent = text;
  status.className = error ? "error" : "";
}

class Unauthorized extends Error {}

async function api(method, path, body) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) throw new Unauthorized();
  const text = await response.text();
  const json = text && response.headers.get("content-type")?.includes("json") ? JSON.parse(text) : text;
  if (!response.ok) {
    const message = json?.error ? `${json.error.code}: ${json.error.message}` : `HTTP ${response.status}`;
    throw new Error(message);
  }
  return json;
}

const statusCell = (s) => `<span class="status-${esc(s)}">${esc(s)}</span>`;
const idLink = (kind, id) => `<a class="id" href="#/${kind}/${esc(id)}">${esc(id)}</a>`;

function table(caption, head, rows, empty = "None.") {
  if (rows.length === 0) return `<p><strong>${esc(caption)}</strong>: ${esc(empty)}</p>`;
  return `<table><caption>${esc(caption)}</caption><thead><tr>${head
    .map((h) => `<th scope="col">${esc(h)}</th>`)
    .join("")}</tr></thead><tbody>${rows.map((r) => `<tr>${r.join("")}</tr>`).join("")}</tbody></table>`;
}

const td = (html, num = false) => `<td${num ? ' class="num"' : ""}>${html}</td>`;

// Attempts per minute over the last hour as bars: succeeded below, failed on top.
function chart(minutes) {
  const width = 600, height = 80, slot = width / Math.max(minutes.length, 1);
  const peak = Math.max(1, ...minutes.map((m) => m.attempts));
  const total = minutes.reduce((n, m) => n + m.attempts, 0);
  const bars = minutes.map((m, i) => {
    const failed = m.retryableFailures + m.terminalFailures + m.unknown + m.interrupted;
    const ok = (m.succeeded / peak) * height, bad = (failed / peak) * height;
    const x = (i * slot + 1).toFixed(1), w = Math.max(slot - 2, 1).toFixed(1);
    return `<rect class="ok" x="${x}" y="${(height - ok).toFixed(1)}" width="${w}" height="${ok.toFixed(1)}"></rect>` +
      `<rect class="bad" x="${x}" y="${(height - ok - bad).toFixed(1)}" width="${w}" height="${bad.toFixed(1)}"></rect>`;
  }).join("");
  const label = `Attempts per minute over the last hour: ${total} in all, at most ${peak === 1 && total === 0 ? 0 : peak} in a minute`;
  return `<figure id="chart" data-total="${total}"><svg role="img" aria-label="${esc(label)}" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}"><title>${esc(label)}</title>${bars}</svg>
    <figcaption>Attempts per minute, the last hour (the right end is now): succeeded, and failed on top.</figcaption></figure>`;
}

// ---- pages ---------------------------------------------------------------------------------

async function overview() {
  const [stats, targets] = await Promise.all([api("GET", "/v1/stats"), api("GET", "/v1/targets?limit=100")]);
  const d = stats.deliveries;
  const t = stats.tasks ?? {};
  const person = (d.unknown ?? 0) + (d.manual_review ?? 0);
  const rows = Object.entries(d).map(([s, n]) => [
    td(`<a href="#/deliveries?status=${esc(s)}">${statusCell(s)}</a>`),
    td(`<span data-count="${esc(s)}">${esc(n)}</span>`, true),
  ]);
  const taskRows = Object.entries(t).map(([s, n]) => [
    td(`<a href="#/tasks?status=${esc(s)}">${statusCell(s)}</a>`),
    td(`<span data-task-count="${esc(s)}">${esc(n)}</span>`, true),
  ]);
  const window = (name, w) => [
    td(esc(name)), td(esc(w.attempts), true), td(esc(w.succeeded), true),
    td(esc(w.retryableFailures), true), td(esc(w.terminalFailures), true), td(esc(w.unknown), true),
  ];
  const trouble = targets.targets.filter((t) => t.paused || t.failedLastHour > 0);
  return `<h1>Overview</h1>
    ${person > 0 ? `<p class="attention" id="needs-a-person"><strong>${esc(person)}</strong> deliveries need a person: ${esc(d.unknown ?? 0)} unknown, ${esc(d.manual_review ?? 0)} in manual review. <a href="#/deliveries?status=manual_review">Review them</a>.</p>` : ""}
    ${t.manual_review > 0 ? `<p class="attention" id="tasks-need-a-person"><strong>${esc(t.manual_review)}</strong> tasks are in manual review. <a href="#/tasks?status=manual_review">Review them</a>.</p>` : ""}
    ${table("Deliveries by status", ["Status", "Count"], rows)}
    ${taskRows.length > 0 ? table("Tasks by status", ["Status", "Count"], taskRows) : ""}
    <dl>
      <dt>Oldest due</dt><dd>${stats.oldestDueAt ? `${esc(stats.oldestDueAt)} (${esc(stats.oldestDueAge)} ago)` : "nothing is waiting"}</dd>
      <dt>Paused targets</dt><dd id="paused-targets">${esc(stats.pausedTargets)}</dd>
      <dt>Database</dt><dd>${esc((stats.databaseBytes / 1048576).toFixed(1))} MiB</dd>
    </dl>
    ${chart(stats.byMinute ?? [])}
    ${table("Attempts", ["Window", "Attempts", "Succeeded", "Failed, retried", "Failed for good", "Unknown"], [window("last 5 minutes", stats.lastFiveMinutes), window("last hour", stats.lastHour)])}
    ${table("Paused or failing targets", ["Target", "Pending", "Failed last hour", "Paused"], trouble.map((t) => [
      td(`<a href="#/deliveries?target=${encodeURIComponent(t.origin)}">${esc(t.origin)}</a>`),
      td(esc(t.pending), true), td(esc(t.failedLastHour), true),
      td(t.paused ? esc(t.pauseReason ?? "paused") : "no"),
    ]))}`;
}

// The deliveries listing's filter: the query of its page, of `/v1/deliveries` and `/v1/export`.
const DELIVERY_FILTER = ["status", "target", "lastErrorCode"];

const select = (name, values, chosen) =>
  `<select name="${name}">${values.map((v) => `<option value="${esc(v)}"${chosen === v ? " selected" : ""}>${esc(v || "any")}</option>`).join("")}</select>`;

// The link to a listing's next page, if there is one.
function nextPage(kind, query, cursor) {
  if (!cursor) return "";
  const next = new URLSearchParams(query);
  next.set("cursor", cursor);
  return `<p><a id="next-page" href="#/${kind}?${esc(next.toString())}">Next page</a></p>`;
}

// What a listing's bulk actions and export act on: everything its filter matches. The filters
// are the listing's query, in the shape each bulk endpoint takes.
const BULK = {
  deliveries: {
    path: "/v1/deliveries/bulk",
    noun: "deliveries",
    filter: (q) => ({
      ...(q.get("status") && { status: q.get("status") }),
      ...(q.get("target") && { targetOrigin: q.get("target") }),
      ...(q.get("lastErrorCode") && { lastErrorCode: q.get("lastErrorCode") }),
    }),
    actions: [["retry", "Retry the failed ones"], ["cancel", "Cancel the waiting ones"]],
    narrow: "a status, a target or an error code",
  },
  tasks: {
    path: "/v1/tasks/bulk",
    noun: "tasks",
    filter: (q) => ({ ...(q.get("status") && { status: q.get("status") }), ...(q.get("type") && { type: q.get("type") }) }),
    actions: [["retry", "Retry the ended ones"], ["cancel", "Cancel the pending and running ones"]],
    narrow: "a status or a type",
  },
};

function bulkPanel(kind, query, extra = "") {
  const bulk = BULK[kind];
  const filtered = Object.keys(bulk.filter(query)).length > 0;
  const buttons = filtered ? bulk.actions.map(([action, label]) => `<button type="button" data-bulk="${action}">${esc(label)}…</button>`) : [];
  return `<section aria-labelledby="bulk-heading">
    <h2 id="bulk-heading">Everything that matches</h2>
    <p class="muted">${filtered
      ? `Acts on every one of the ${bulk.noun} this filter matches, not only this page: counted first, done when you confirm.`
      : `Choose ${bulk.narrow} to act on every one of the ${bulk.noun} that match.`}</p>
    <div class="actions">${buttons.join("")}${extra}</div>
    <div id="bulk-confirm"></div>
  </section>`;
}

async function deliveries(query) {
  const params = new URLSearchParams({ limit: "50", order: "desc" });
  for (const key of [...DELIVERY_FILTER, "cursor"]) if (query.get(key)) params.set(key, query.get(key));
  const list = await api("GET", `/v1/deliveries?${params}`);
  const statuses = ["", "pending", "in_flight", "succeeded", "failed", "canceled", "unknown", "manual_review"];
  return `<h1>Deliveries</h1>
    <form class="inline" id="filter">
      <label>Status ${select("status", statuses, query.get("status") ?? "")}</label>
      <label>Target <input name="target" value="${esc(query.get("target") ?? "")}" placeholder="https://hooks.example.com"></label>
      <label>Last error code <input name="lastErrorCode" value="${esc(query.get("lastErrorCode") ?? "")}" placeholder="connect_failed" pattern="[a-z_]{1,64}"></label>
      <button type="submit">Show</button>
    </form>
    ${table("Newest first", ["Delivery", "Status", "Attempts", "Method", "URL", "Updated", "Last error"], list.deliveries.map((d) => [
      td(idLink("delivery", d.id)), td(statusCell(d.status)), td(`${esc(d.attempts)}/${esc(d.maxAttempts)}`, true),
      td(esc(d.method)), td(`<code>${esc(d.targetUrl)}</code>`), td(esc(d.updatedAt)),
      td(esc(d.lastErrorCode ?? "")),
    ]), "No deliveries match.")}
    ${nextPage("deliveries", query, list.nextCursor)}
    ${bulkPanel("deliveries", query, `<button type="button" id="export">Export as NDJSON</button>`)}`;
}

async function delivery(id) {
  const [d, attempts, transitions] = await Promise.all([
    api("GET", `/v1/deliveries/${id}`),
    api("GET", `/v1/deliveries/${id}/attempts`),
    api("GET", `/v1/deliveries/${id}/transitions`),
  ]);
  const fields = ["status", "attempts", "maxAttempts", "mode", "lastError", "lastErrorCode", "lastResponseCode", "createdAt", "updatedAt", "nextAttemptAt", "expiresAt", "idempotencyKey", "remoteId"];
  const body = d.body !== undefined ? JSON.stringify(d.body, null, 2) : d.bodyBase64 ? `base64: ${d.bodyBase64}` : "(none)";
  const buttons = [];
  if (d.status === "failed") buttons.push(`<button type="button" data-action="retry">Retry</button>`);
  if (d.status === "pending" || (d.status === "in_flight" && d.mode !== "at_most_once")) buttons.push(`<button type="button" data-action="cancel">Cancel</button>`);
  const resolve = ["unknown", "manual_review"].includes(d.status) ? `
    <form id="resolve" class="inline">
      <label>Outcome <select name="outcome"><option value="succeeded">it arrived (succeeded)</option><option value="failed">it did not arrive (failed)</option><option value="resend">send it again</option></select></label>
      <label>Note <input name="note" required placeholder="why, for the transition log"></label>
      <button type="submit">Resolve</button>
    </form>` : "";
  return `<h1>Delivery <span class="id">${esc(d.id)}</span></h1>
    <p><code>${esc(d.method)} ${esc(d.targetUrl)}</code></p>
    <div class="actions" id="actions">${buttons.join("")}</div>${resolve}
    <dl>${fields.filter((f) => d[f] !== undefined).map((f) => `<dt>${esc(f)}</dt><dd${f === "status" ? ' id="delivery-status"' : ""}>${f === "status" ? statusCell(d.status) : esc(d[f])}</dd>`).join("")}</dl>
    ${table("Headers (secret values masked)", ["Name", "Value"], Object.entries(d.headers ?? {}).map(([n, v]) => [td(esc(n)), td(`<code>${esc(v)}</code>`)]))}
    <h2>Body</h2><pre>${esc(body)}</pre>
    ${table("Attempts", ["Cycle", "#", "Started", "Outcome", "HTTP", "Error"], attempts.attempts.map((a) => [
      td(esc(a.cycle), true), td(esc(a.number), true), td(esc(a.startedAt)), td(statusCell(a.outcome ?? "running")),
      td(esc(a.httpStatus ?? ""), true), td(esc(a.error ?? "")),
    ]))}
    <h2>Transitions</h2>
    <ol class="timeline">${transitions.transitions.map((t) => `<li><time>${esc(t.at)}</time> ${esc(t.from ?? "·")} → ${statusCell(t.to)} <span class="muted">(${esc(t.reason)}${t.note ? `: ${esc(t.note)}` : ""})</span></li>`).join("")}</ol>`;
}

async function targets() {
  const list = await api("GET", "/v1/targets?limit=500");
  return `<h1>Targets</h1>
    ${table("Targets with work, recent failures or a pause", ["Target", "Pending", "In flight", "Failed last hour", "Paused", ""], list.targets.map((t) => [
      td(`<a href="#/deliveries?target=${encodeURIComponent(t.origin)}">${esc(t.origin)}</a>`),
      td(esc(t.pending), true), td(esc(t.inFlight), true), td(esc(t.failedLastHour), true),
      td(t.paused ? `${esc(t.pauseReason ?? "paused")}${t.pausedUntil ? ` until ${esc(t.pausedUntil)}` : ""}` : "no"),
      td(`<button type="button" data-target="${esc(t.origin)}" data-pause="${t.paused ? "resume" : "pause"}">${t.paused ? "Resume" : "Pause"}</button>`),
    ]), "No target has work waiting, recent failures or a pause.")}`;
}

async function tasks(query) {
  const params = new URLSearchParams({ limit: "50" });
  for (const key of ["status", "type", "cursor"]) if (query.get(key)) params.set(key, query.get(key));
  const [list, declared] = await Promise.all([api("GET", `/v1/tasks?${params}`), api("GET", "/v1/task-types")]);
  const statuses = ["", "pending", "running", "succeeded", "failed", "timed_out", "interrupted", "canceled", "manual_review"];
  // Tasks of a type removed since may still be listed by name.
  const types = ["", ...declared.types.map((t) => t.name)];
  if (query.get("type") && !types.includes(query.get("type"))) types.push(query.get("type"));
  return `<h1>Tasks</h1>
    <form class="inline" id="task-filter">
      <label>Status ${select("status", statuses, query.get("status") ?? "")}</label>
      <label>Type ${select("type", types, query.get("type") ?? "")}</label>
      <button type="submit">Show</button>
    </form>
    ${table("Oldest first", ["Task", "Type", "Status", "Attempt", "Created", "Error"], list.tasks.map((t) => [
      td(idLink("task", t.id)), td(esc(t.type)), td(statusCell(t.status)), td(`${esc(t.attempt)}/${esc(t.maxAttempts)}`, true),
      td(esc(t.createdAt)), td(esc(t.errorCode ?? "")),
    ]), "No tasks match.")}
    ${nextPage("tasks", query, list.nextCursor)}
    ${bulkPanel("tasks", query)}`;
}

async function task(id) {
  const [t, attempts, transitions, steps] = await Promise.all([
    api("GET", `/v1/tasks/${id}`),
    api("GET", `/v1/tasks/${id}/attempts`),
    api("GET", `/v1/tasks/${id}/transitions`),
    api("GET", `/v1/tasks/${id}/steps`),
  ]);
  let output = "";
  if (attempts.attempts.length > 0 && t.status !== "running") {
    output = await api("GET", `/v1/tasks/${id}/output`).catch((e) => `(${e.message})`);
  }
  const buttons = [];
  if (["pending", "running", "manual_review"].includes(t.status)) buttons.push(`<button type="button" data-task-action="cancel">Cancel</button>`);
  if (["failed", "timed_out", "interrupted", "manual_review"].includes(t.status)) buttons.push(`<button type="button" data-task-action="retry">Retry</button>`);
  return `<h1>Task <span class="id">${esc(t.id)}</span> <span class="muted">${esc(t.type)}</span></h1>
    <div class="actions">${buttons.join("")}</div>
    <dl><dt>Status</dt><dd id="task-status">${statusCell(t.status)}${t.cancelRequested ? " (cancel requested)" : ""}</dd>
      <dt>Attempt</dt><dd>${esc(t.attempt)}/${esc(t.maxAttempts)}</dd>
      <dt>Parameters</dt><dd><code>${esc(JSON.stringify(t.params))}</code></dd>
      ${t.error ? `<dt>Error</dt><dd>${esc(t.error)}</dd>` : ""}</dl>
    ${table("Attempts", ["#", "Started", "Outcome", "Exit", "Error"], attempts.attempts.map((a) => [
      td(esc(a.number), true), td(esc(a.startedAt)), td(statusCell(a.outcome ?? "running")), td(esc(a.exitCode ?? a.signal ?? ""), true), td(esc(a.error ?? "")),
    ]))}
    ${table("Steps done", ["Step", "Attempt", "At"], steps.steps.map((s) => [td(`<code>${esc(s.name)}</code>`), td(esc(s.attempt), true), td(esc(s.at))]), "No steps reported.")}
    <h2>Output of the latest attempt${t.status === "running" ? " (live)" : ""}</h2><pre id="task-output" aria-live="off">${t.status === "running" ? "" : esc(output || "(none)")}</pre>
    <h2>Transitions</h2>
    <ol class="timeline">${transitions.transitions.map((x) => `<li><time>${esc(x.at)}</time> ${esc(x.from ?? "·")} → ${statusCell(x.to)} <span class="muted">(${esc(x.reason)}${x.note ? `: ${esc(x.note)}` : ""})</span></li>`).join("")}</ol>`;
}

async function locks() {
  const list = await api("GET", "/v1/locks");
  return `<h1>Locks</h1>
    ${table("Held locks", ["Lock", "Held by", "Type", "Since", "Waiting"], list.locks.map((l) => [
      td(`<code>${esc(l.name)}</code>`), td(idLink("task", l.taskId)), td(esc(l.taskType)), td(esc(l.since)), td(esc(l.waiting.length), true),
    ]), "No lock is held.")}`;
}

function login(message) {
  forget.hidden = true;
  return `<h1>Sign in</h1>
    <p>${esc(message)}</p>
    <form id="login" class="inline">
      <label>Bearer token <input name="token" type="password" autocomplete="current-password" required></label>
      <button type="submit">Use this token</button>
    </form>
    <p class="muted">Kept in this tab only (session storage), sent as <code>Authorization: Bearer …</code>.</p>`;
}

// ---- routing and actions -------------------------------------------------------------------

let refresh = null;
// The output stream of a running task's attempt being followed, stopped when the page changes.
let following = null;

// Follow a running attempt's output as it is written (the API streams it until the attempt
// ends), then show the task as it ended.
async function follow(id) {
  following = new AbortController();
  const pre = document.getElementById("task-output");
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    const response = await fetch(`/v1/tasks/${id}/output?follow=true`, { headers, signal: following.signal });
    if (!response.ok || !response.body) return;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pre.textContent += value;
    }
    refresh = setTimeout(render, 300);
  } catch (e) {
    if (e.name !== "AbortError") say(`output: ${e.message}`, true);
  }
}
let rendered = false;

// The page (`#/deliveries?status=failed` → ["deliveries"] and its query).
function route() {
  const [path, search = ""] = location.hash.replace(/^#/, "").split("?");
  return { parts: path.split("/").filter(Boolean), query: new URLSearchParams(search) };
}

async function render() {
  clearTimeout(refresh);
  following?.abort();
  following = null;
  const { parts, query } = route();
  for (const a of document.querySelectorAll("nav a")) {
    const here = a.getAttribute("href").replace(/^#/, "").split("/")[1] ?? "";
    a.toggleAttribute("aria-current", here === (parts[0] ?? "") || (here === "deliveries" && parts[0] === "delivery") || (here === "tasks" && parts[0] === "task"));
    if (a.hasAttribute("aria-current")) a.setAttribute("aria-current", "page");
  }
  try {
    let html;
    switch (parts[0] ?? "") {
      case "": html = await overview(); break;
      case "deliveries": html = await deliveries(query); break;
      case "delivery": html = await delivery(parts[1]); break;
      case "targets": html = await targets(); break;
      case "tasks": html = await tasks(query); break;
      case "task": html = await task(parts[1]); break;
      case "locks": html = await locks(); break;
      default: html = "<h1>Not found</h1>";
    }
    main.innerHTML = html;
    forget.hidden = !sessionStorage.getItem(TOKEN_KEY);
    if (parts[0] === "task" && document.querySelector("#task-status .status-running")) follow(parts[1]);
  } catch (e) {
    if (e instanceof Unauthorized) {
      main.innerHTML = login(sessionStorage.getItem(TOKEN_KEY) ? "That token was refused." : "This spoold asks for a bearer token.");
    } else {
      say(e.message, true);
      main.innerHTML = `<h1>Could not load this page</h1><p>${esc(e.message)}</p>`;
    }
  }
  // After the first page, a new page takes the focus (a screen reader starts reading it); the
  // first leaves it at the top, where Tab finds the skip link.
  if (rendered) main.focus();
  rendered = true;
}

// Run an action, say how it went (what `call` returns, or "done"), and show the page again.
async function act(what, call) {
  try {
    const outcome = await call();
    say(`${what}: ${typeof outcome === "string" ? outcome : "done"}.`);
  } catch (e) {
    say(`${what}: ${e.message}`, true);
  }
  await render();
}

// A bulk action's first step: a dry run, whose count the operator confirms (or not).
async function bulkCount(action) {
  const { parts, query } = route();
  const bulk = BULK[parts[0]];
  const box = document.getElementById("bulk-confirm");
  try {
    const r = await api("POST", bulk.path, { action, filter: bulk.filter(query), dryRun: true });
    box.innerHTML = r.changed === 0
      ? `<p id="bulk-count">${esc(action)}: none of the ${esc(r.matched)} matching ${bulk.noun} is in a status it applies to.</p>`
      : `<p id="bulk-count" data-changed="${esc(r.changed)}"><strong>${esc(action)}</strong> would change ${esc(r.changed)} of the ${esc(r.matched)} matching ${bulk.noun} (${esc(r.skipped)} left as they are). What matches when you confirm is what changes.</p>
        <div class="actions"><button type="button" data-bulk-confirm="${esc(action)}">${esc(action[0].toUpperCase() + action.slice(1))} ${esc(r.changed)} ${bulk.noun}</button><button type="button" data-bulk-dismiss>Do nothing</button></div>`;
    box.querySelector("button")?.focus();
    say("");
  } catch (e) {
    if (e instanceof Unauthorized) return render();
    say(`${action}: ${e.message}`, true);
  }
}

function bulkDo(action) {
  const { parts, query } = route();
  const bulk = BULK[parts[0]];
  act(`${action} every matching one of the ${bulk.noun}`, async () => {
    const r = await api("POST", bulk.path, { action, filter: bulk.filter(query) });
    return `${r.changed} changed, ${r.skipped} left as they were`;
  });
}

// The listing's deliveries, all of them, as `spoolctl export` writes them (one record a line),
// saved by the browser. Built in the tab's memory: for a large queue, use spoolctl.
async function exportDeliveries() {
  const params = new URLSearchParams({ limit: "500" });
  const { query } = route();
  for (const key of DELIVERY_FILTER) if (query.get(key)) params.set(key, query.get(key));
  const lines = [];
  try {
    for (;;) {
      say(`export: ${lines.length} deliveries so far…`);
      const page = await api("GET", `/v1/export?${params}`);
      for (const record of page.records) lines.push(`${JSON.stringify(record)}\n`);
      if (!page.nextCursor) break;
      params.set("cursor", page.nextCursor);
    }
  } catch (e) {
    if (e instanceof Unauthorized) return render();
    return say(`export: ${e.message}`, true);
  }
  const url = URL.createObjectURL(new Blob(lines, { type: "application/x-ndjson" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = `spoold-export-${new Date().toISOString().replace(/[:.]/g, "-")}.ndjson`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
  say(`export: ${lines.length} deliveries saved (it holds their secrets: keep the file private).`);
}

main.addEventListener("click", (event) => {
  const button = event.target.closest("button");
  if (!button) return;
  const id = location.hash.split("/")[2]?.split("?")[0];
  if (button.dataset.action) {
    act(`${button.dataset.action} ${id}`, () => api("POST", `/v1/deliveries/${id}/${button.dataset.action}`));
  } else if (button.dataset.taskAction) {
    act(`${button.dataset.taskAction} ${id}`, () => api("POST", `/v1/tasks/${id}/${button.dataset.taskAction}`));
  } else if (button.dataset.pause) {
    const target = button.dataset.target;
    act(`${button.dataset.pause} ${target}`, () => api("POST", `/v1/targets/${encodeURIComponent(target)}/${button.dataset.pause}`));
  } else if (button.dataset.bulk) {
    bulkCount(button.dataset.bulk);
  } else if (button.dataset.bulkConfirm) {
    bulkDo(button.dataset.bulkConfirm);
  } else if (button.hasAttribute("data-bulk-dismiss")) {
    document.getElementById("bulk-confirm").innerHTML = "";
  } else if (button.id === "export") {
    exportDeliveries();
  }
});

main.addEventListener("submit", (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  if (event.target.id === "login") {
    sessionStorage.setItem(TOKEN_KEY, form.get("token"));
    say("");
    render();
  } else if (event.target.id === "filter" || event.target.id === "task-filter") {
    const [kind, keys] = event.target.id === "filter" ? ["deliveries", DELIVERY_FILTER] : ["tasks", ["status", "type"]];
    const query = new URLSearchParams();
    for (const key of keys) if (form.get(key)) query.set(key, form.get(key));
    location.hash = `#/${kind}?${query}`;
  } else if (event.target.id === "resolve") {
    const id = location.hash.split("/")[2];
    act(`resolve ${id}`, () => api("POST", `/v1/deliveries/${id}/resolve`, { outcome: form.get("outcome"), note: form.get("note") }));
  }
});

// The skip link moves focus to the content without touching the route (the hash).
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});

forget.addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  render();
});
// A new page starts without the last page's message.
window.addEventListener("hashchange", () => {
  say("");
  render();
});
render();
