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

// An answer of the API's that is not a success: its HTTP status, and its error's code and
// message (or the status alone).
class ApiError extends Error {
  constructor(status, json) {
    super(json?.error ? `${json.error.code}: ${json.error.message}` : `HTTP ${status}`);
    this.status = status;
  }
}

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
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}

// A time as an operator reads it at a glance ("3 min ago", "in 2 h"), the exact UTC time on
// hover; refreshed while the page is open (see `tick`).
function ago(iso) {
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return String(iso ?? "");
  const seconds = Math.round((Date.now() - at) / 1000);
  const size = Math.abs(seconds);
  if (size < 5) return "now";
  const [n, unit] = size < 60 ? [size, "s"] : size < 3600 ? [Math.floor(size / 60), "min"]
    : size < 86400 ? [Math.floor(size / 3600), "h"] : [Math.floor(size / 86400), "d"];
  return seconds > 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`;
}
const time = (iso) => iso ? `<time datetime="${esc(iso)}" title="${esc(iso)} (UTC)">${esc(ago(iso))}</time>` : `<span class="muted">–</span>`;
setInterval(() => {
  for (const t of main.querySelectorAll("time[datetime]")) t.textContent = ago(t.getAttribute("datetime"));
}, 15000);

const badge = (s) => `<span class="badge s-${esc(s)}">${esc(s)}</span>`;
const idLink = (kind, id) => `<a class="id" href="#/${kind}/${esc(id)}" title="${esc(id)}">${esc(id)}</a>`;
// A value that may be long, cut with an ellipsis where it does not fit; whole on hover.
const cut = (text, cls = "") => `<span class="cut ${cls}" title="${esc(text)}">${esc(text)}</span>`;
const errorCell = (code, message) => code || message
  ? `<span class="cut" title="${esc([code, message].filter(Boolean).join(": "))}">${code ? `<span class="code">${esc(code)}</span>` : ""}${esc(message ?? "")}</span>`
  : "";

// A table whose columns take the given shares of its width (so it fits whatever is in it);
// `head` is [[label, width, numeric?], …].
function table(caption, head, rows, empty = "None.") {
  if (rows.length === 0) return `<p class="empty"><strong>${esc(caption)}</strong>: ${esc(empty)}</p>`;
  return `<table><caption>${esc(caption)}</caption><colgroup>${head.map(([, w]) => `<col class="w${w}">`).join("")}</colgroup>
    <thead><tr>${head.map(([h, , num]) => `<th scope="col"${num ? ' class="num"' : ""}>${esc(h)}</th>`).join("")}</tr></thead>
    <tbody>${rows.map((r) => `<tr>${r.join("")}</tr>`).join("")}</tbody></table>`;
}

const td = (html, cls = "") => `<td${cls ? ` class="${cls}"` : ""}>${html}</td>`;
const num = (html) => td(html, "num");

// Field names and values of a record; `wide` for long ones, one to a row.
const fields = (pairs, wide = false) => `<dl class="fields${wide ? " wide" : ""}">${pairs
  .filter(([, v]) => v !== undefined && v !== null && v !== "")
  .map(([k, v, id]) => `<dt>${esc(k)}</dt><dd${id ? ` id="${id}"` : ""}>${v}</dd>`).join("")}</dl>`;

// Attempts per minute over the last hour as bars: succeeded below, failed on top. Drawn to the
// width of its box.
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
  return `<figure id="chart" data-total="${total}"><svg class="chart" role="img" aria-label="${esc(label)}" viewBox="0 0 ${width} ${height}" preserveAspectRatio="none"><title>${esc(label)}</title>${bars}</svg>
    <figcaption>Attempts per minute, the last hour (the right end is now): succeeded, and failed on top.</figcaption></figure>`;
}

// Counts by status as cards, each a link to its listing; those that need a person (`needs`)
// or went wrong (`hurts`) first.
const DELIVERY_ORDER = ["unknown", "manual_review", "failed", "in_flight", "pending", "succeeded", "canceled"];
const TASK_ORDER = ["manual_review", "interrupted", "failed", "timed_out", "running", "pending", "succeeded", "canceled"];
const NEEDS = ["unknown", "manual_review", "interrupted"];
const HURTS = ["failed", "timed_out"];
function cards(counts, order, kind, attr) {
  const statuses = [...order.filter((s) => s in counts), ...Object.keys(counts).filter((s) => !order.includes(s))];
  return `<div class="cards">${statuses.map((s) => {
    const n = counts[s];
    const cls = [`card`, `s-${s}`, n === 0 ? "zero" : "", NEEDS.includes(s) ? "needs" : "", HURTS.includes(s) ? "hurts" : ""].filter(Boolean).join(" ");
    return `<a class="${esc(cls)}" href="#/${kind}?status=${esc(s)}"><span class="count" ${attr}="${esc(s)}">${esc(n)}</span><span class="label">${esc(s)}</span></a>`;
  }).join("")}</div>`;
}

// ---- pages ---------------------------------------------------------------------------------

async function overview() {
  const [stats, targets] = await Promise.all([api("GET", "/v1/stats"), api("GET", "/v1/targets?limit=100")]);
  const d = stats.deliveries;
  const t = stats.tasks ?? {};
  const unknown = d.unknown ?? 0, review = d.manual_review ?? 0, taskReview = t.manual_review ?? 0;
  const waiting = [
    unknown > 0 && `<a href="#/deliveries?status=unknown"><strong>${esc(unknown)}</strong> ${unknown === 1 ? "delivery" : "deliveries"} unknown</a> (may have arrived: reconciliation or a person settles it)`,
    review > 0 && `<a href="#/deliveries?status=manual_review"><strong>${esc(review)}</strong> ${review === 1 ? "delivery" : "deliveries"} in manual review</a>`,
    taskReview > 0 && `<a href="#/tasks?status=manual_review"><strong>${esc(taskReview)}</strong> ${taskReview === 1 ? "task" : "tasks"} in manual review</a>`,
  ].filter(Boolean);
  const attention = waiting.length > 0
    ? `<section class="attention" id="needs-a-person" data-count="${unknown + review + taskReview}"><h2>Needs a person</h2><ul>${waiting.map((w) => `<li>${w}</li>`).join("")}</ul></section>`
    : `<p class="calm" id="needs-a-person" data-count="0">Nothing needs a person.</p>`;
  const window = (name, w) => [
    td(esc(name)), num(esc(w.attempts)), num(esc(w.succeeded)),
    num(esc(w.retryableFailures)), num(esc(w.terminalFailures)), num(esc(w.unknown)),
  ];
  const trouble = targets.targets.filter((x) => x.paused || x.failedLastHour > 0);
  const size = `${(stats.databaseBytes / 1048576).toFixed(1)} MiB${stats.maxDatabaseBytes ? ` of ${(stats.maxDatabaseBytes / 1048576).toFixed(0)} MiB` : ""}`;
  return `<h1>Overview</h1>
    ${attention}
    <h2>Deliveries</h2>
    ${cards(d, DELIVERY_ORDER, "deliveries", "data-count")}
    ${Object.keys(t).length > 0 ? `<h2>Tasks</h2>${cards(t, TASK_ORDER, "tasks", "data-task-count")}` : ""}
    <div class="columns">
      <div>
        <h2>Attempts</h2>
        ${chart(stats.byMinute ?? [])}
        ${table("By outcome (retried: failed, to be tried again; failed: for good)", [["Window", 22], ["Attempts", 14, true], ["Succeeded", 16, true], ["Retried", 16, true], ["Failed", 16, true], ["Unknown", 16, true]],
          [window("last 5 minutes", stats.lastFiveMinutes), window("last hour", stats.lastHour)])}
      </div>
      <div>
        <h2>The queue</h2>
        <section class="panel">${fields([
          ["Oldest due", stats.oldestDueAt ? `${time(stats.oldestDueAt)} <span class="muted">(waiting ${esc(stats.oldestDueAge)})</span>` : "nothing is waiting"],
          ["Paused targets", `<span id="paused-targets">${esc(stats.pausedTargets)}</span>`],
          ["Database", esc(size)],
        ], true)}</section>
        ${table("Paused or failing targets", [["Target", 46], ["Pending", 16, true], ["Failed (1 h)", 20, true], ["Paused", 18]], trouble.map((x) => [
          td(`<a class="cut" href="#/deliveries?target=${encodeURIComponent(x.origin)}" title="${esc(x.origin)}">${esc(x.origin)}</a>`),
          num(esc(x.pending)), num(esc(x.failedLastHour)),
          td(x.paused ? cut(x.pauseReason ?? "paused") : `<span class="muted">no</span>`),
        ]), "No target is paused or failing.")}
      </div>
    </div>`;
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
  return `<section class="panel" aria-labelledby="bulk-heading">
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
  const statuses = ["", ...DELIVERY_ORDER];
  return `<h1>Deliveries</h1>
    <form class="inline" id="filter">
      <label>Status ${select("status", statuses, query.get("status") ?? "")}</label>
      <label>Target <input name="target" value="${esc(query.get("target") ?? "")}" placeholder="https://hooks.example.com"></label>
      <label>Last error code <input name="lastErrorCode" value="${esc(query.get("lastErrorCode") ?? "")}" placeholder="connect_failed" pattern="[a-z_]{1,64}"></label>
      <button type="submit">Show</button>
    </form>
    ${table("Newest first", [["Delivery", 14], ["Status", 10], ["Attempts", 7, true], ["Method", 6], ["URL", 30], ["Updated", 8], ["Last error", 25]], list.deliveries.map((d) => [
      td(idLink("delivery", d.id)), td(badge(d.status)), num(`${esc(d.attempts)}/${esc(d.maxAttempts)}`),
      td(esc(d.method)), td(cut(d.targetUrl, "mono"), "url"), td(time(d.updatedAt)),
      td(errorCell(d.lastErrorCode, d.lastError), "error"),
    ]), "No deliveries match.")}
    ${nextPage("deliveries", query, list.nextCursor)}
    ${bulkPanel("deliveries", query, `<button type="button" id="export">Export as NDJSON</button>`)}`;
}

// What the person settling an at-most-once delivery needs: how the target can be asked
// (fingerprint, reconcile query), what it answered (checks), and the decision itself.
function atMostOnce(d, checks, transitions) {
  const r = d.reconcile;
  const open = ["unknown", "manual_review"].includes(d.status);
  // Why it is where it is: the change that brought it there.
  const last = [...transitions].reverse().find((t) => t.to === d.status);
  const query = r ? fields([
    ["Query", `<code>${esc(r.method ?? "GET")} ${esc(r.url)}</code>`, "reconcile-query"],
    ["Matches at", r.matchesPointer ? `<code>${esc(r.matchesPointer)}</code>` : "the whole answer"],
    ["Remote id at", `<code>${esc(r.remoteIdPointer ?? "/id")}</code>`],
    ["Headers", r.headers && Object.keys(r.headers).length > 0 ? Object.entries(r.headers).map(([n, v]) => `<code>${esc(n)}: ${esc(v)}</code>`).join("<br>") : ""],
    ["Observation window", esc(r.observationWindow ?? "1h")],
  ], true) : `<p class="muted">No reconcile query: nothing asks the target; a person decides.</p>`;
  const resolve = open ? `
    <form id="resolve" class="inline">
      <label>Outcome <select name="outcome"><option value="succeeded">it arrived (succeeded)</option><option value="failed">it did not arrive (failed)</option><option value="resend">send it again</option></select></label>
      <label>Note <input name="note" required placeholder="why, for the transition log" size="40"></label>
      <button type="submit" class="primary">Resolve</button>
    </form>` : "";
  return `<section class="${open ? "attention" : "panel"}" id="at-most-once">
    <h2>${open ? "Needs a person: did it arrive?" : "At most once"}</h2>
    ${open ? `<p>This request may have reached the target and is never sent again by itself. Ask the target by the fingerprint, then resolve it.</p>` : ""}
    ${fields([
      ["Fingerprint", d.fingerprint ? `<code id="fingerprint">${esc(d.fingerprint)}</code>` : `<span class="muted">none</span>`],
      ["Why here", open && last && `<span id="why">${esc(last.reason)}${last.note ? `: ${esc(last.note)}` : ""}</span>`],
      ["Unknown since", d.unknownSince && time(d.unknownSince)],
      ["Window closes", d.reviewAt && time(d.reviewAt)],
      ["Next check", d.nextCheckAt && time(d.nextCheckAt)],
      ["Checks", d.checks !== undefined && esc(d.checks)],
      ["Remote id", d.remoteId && `<code>${esc(d.remoteId)}</code>`],
    ])}
    ${query}
    ${table("Checks of the target", [["At", 18], ["HTTP", 10, true], ["Matches", 10, true], ["Error", 50], ["Took", 12, true]], checks.map((c) => [
      td(time(c.at)), num(esc(c.httpStatus ?? "")), num(esc(c.matches ?? "")),
      td(errorCell(c.errorCode, c.error)), num(`${esc(c.durationMs)} ms`),
    ]), r ? "The target has not been asked yet." : "None: there is no query to ask with.")}
    ${resolve}
  </section>`;
}

async function delivery(id) {
  const path = `/v1/deliveries/${encodeURIComponent(id)}`;
  const d = await api("GET", path).catch(missing("delivery", id));
  const [attempts, transitions, checks] = await Promise.all([
    api("GET", `${path}/attempts`),
    api("GET", `${path}/transitions`),
    d.mode === "at_most_once" ? api("GET", `${path}/checks`) : { checks: [] },
  ]);
  const body = d.body !== undefined ? JSON.stringify(d.body, null, 2) : d.bodyBase64 ? `base64: ${d.bodyBase64}` : "(none)";
  const buttons = [];
  if (d.status === "failed") buttons.push(`<button type="button" data-action="retry">Retry</button>`);
  if (d.status === "pending" || (d.status === "in_flight" && d.mode !== "at_most_once")) buttons.push(`<button type="button" data-action="cancel">Cancel</button>`);
  return `<p class="crumbs"><a href="#/deliveries">Deliveries</a> /</p>
    <h1>Delivery <span class="id">${esc(d.id)}</span> <span id="delivery-status">${badge(d.status)}</span></h1>
    <p><code class="cut" title="${esc(d.method)} ${esc(d.targetUrl)}">${esc(d.method)} ${esc(d.targetUrl)}</code></p>
    ${buttons.length > 0 ? `<div class="actions" id="actions">${buttons.join("")}</div>` : ""}
    ${d.lastError ? `<p>Last error: ${errorCell(d.lastErrorCode, d.lastError)}</p>` : ""}
    ${d.mode === "at_most_once" ? atMostOnce(d, checks.checks, transitions.transitions) : ""}
    <section class="panel"><h2>The delivery</h2>
    ${fields([
      ["Attempts", `${esc(d.attempts)}/${esc(d.maxAttempts)}${d.interruptedAttempts ? ` <span class="muted">(${esc(d.interruptedAttempts)} interrupted)</span>` : ""}`],
      ["Mode", esc(d.mode ?? "at_least_once")],
      ["Created", time(d.createdAt)],
      ["Updated", time(d.updatedAt)],
      ["Next attempt", d.nextAttemptAt && time(d.nextAttemptAt)],
      ["Not before", d.notBefore && time(d.notBefore)],
      ["Expires", d.expiresAt && time(d.expiresAt)],
      ["Last HTTP status", d.lastResponseCode && esc(d.lastResponseCode)],
      ["Idempotency key", d.idempotencyKey && `<code>${esc(d.idempotencyKey)}</code>`],
      ["Signed with", d.sign?.secretRef && `<code>${esc(d.sign.secretRef)}</code>`],
      ["Remote id", d.mode !== "at_most_once" && d.remoteId && `<code>${esc(d.remoteId)}</code>`],
    ])}</section>
    ${table("Headers (secret values masked)", [["Name", 30], ["Value", 70]], Object.entries(d.headers ?? {}).map(([n, v]) => [td(esc(n)), td(cut(v, "mono"))]))}
    <h2>Body</h2><pre>${esc(body)}</pre>
    <h2>Attempts</h2>
    ${table("Every attempt of every cycle", [["Cycle", 8, true], ["#", 6, true], ["Started", 14], ["Outcome", 14], ["HTTP", 8, true], ["Error", 50]], attempts.attempts.map((a) => [
      num(esc(a.cycle)), num(esc(a.number)), td(time(a.startedAt)), td(badge(a.outcome ?? "running")),
      num(esc(a.httpStatus ?? "")), td(errorCell(a.errorCode, a.error)),
    ]))}
    <h2>Transitions</h2>
    ${timeline(transitions.transitions)}`;
}

// A status log, oldest first: when, from → to, and why.
const timeline = (entries) => `<ol class="timeline">${entries.map((t) => `<li>${time(t.at)} ${esc(t.from ?? "·")} → ${badge(t.to)} <span class="muted">(${esc(t.reason)}${t.note ? `: ${esc(t.note)}` : ""})</span></li>`).join("")}</ol>`;

// For `.catch`: a 404 of the record a page shows becomes the "not found" page.
const missing = (kind, id) => (e) => {
  if (e instanceof ApiError && e.status === 404) throw new NotFound(`There is no ${kind} with the id ${id} here (it may have been purged, or belong to another spoold).`);
  throw e;
};
class NotFound extends Error {}

async function targets() {
  const list = await api("GET", "/v1/targets?limit=500");
  return `<h1>Targets</h1>
    ${table("Targets with work, recent failures or a pause", [["Target", 30], ["Pending", 9, true], ["In flight", 9, true], ["Failed, last hour", 12, true], ["Last error", 14], ["Paused", 16], ["", 10]], list.targets.map((t) => [
      td(`<a class="cut" href="#/deliveries?target=${encodeURIComponent(t.origin)}" title="${esc(t.origin)}">${esc(t.origin)}</a>`),
      num(esc(t.pending)), num(esc(t.inFlight)), num(esc(t.failedLastHour)),
      td(errorCell(t.lastErrorCode, "")),
      td(t.paused ? cut(`${t.pauseReason ?? "paused"}${t.pausedUntil ? ` until ${t.pausedUntil}` : ""}`) : `<span class="muted">no</span>`),
      td(`<button type="button" data-target="${esc(t.origin)}" data-pause="${t.paused ? "resume" : "pause"}">${t.paused ? "Resume" : "Pause"}</button>`),
    ]), "No target has work waiting, recent failures or a pause.")}`;
}

async function tasks(query) {
  const params = new URLSearchParams({ limit: "50" });
  for (const key of ["status", "type", "cursor"]) if (query.get(key)) params.set(key, query.get(key));
  const [list, declared] = await Promise.all([api("GET", `/v1/tasks?${params}`), api("GET", "/v1/task-types")]);
  const statuses = ["", ...TASK_ORDER];
  // Tasks of a type removed since may still be listed by name.
  const types = ["", ...declared.types.map((t) => t.name)];
  if (query.get("type") && !types.includes(query.get("type"))) types.push(query.get("type"));
  return `<h1>Tasks</h1>
    <form class="inline" id="task-filter">
      <label>Status ${select("status", statuses, query.get("status") ?? "")}</label>
      <label>Type ${select("type", types, query.get("type") ?? "")}</label>
      <button type="submit">Show</button>
    </form>
    ${table("Oldest first", [["Task", 16], ["Type", 14], ["Status", 12], ["Attempt", 8, true], ["Created", 10], ["Result or error", 40]], list.tasks.map((t) => [
      td(idLink("task", t.id)), td(cut(t.type)), td(badge(t.status)), num(`${esc(t.attempt)}/${esc(t.maxAttempts)}`),
      td(time(t.createdAt)), td(t.errorCode || t.error ? errorCell(t.errorCode, t.error) : cut(t.resultSummary ?? "")),
    ]), "No tasks match.")}
    ${nextPage("tasks", query, list.nextCursor)}
    ${bulkPanel("tasks", query)}`;
}

async function task(id) {
  const path = `/v1/tasks/${encodeURIComponent(id)}`;
  const t = await api("GET", path).catch(missing("task", id));
  const [attempts, transitions, steps] = await Promise.all([
    api("GET", `${path}/attempts`),
    api("GET", `${path}/transitions`),
    api("GET", `${path}/steps`),
  ]);
  let output = "";
  if (attempts.attempts.length > 0 && t.status !== "running") {
    output = await api("GET", `${path}/output`).catch((e) => `(${e.message})`);
  }
  const buttons = [];
  if (["pending", "running", "manual_review"].includes(t.status)) buttons.push(`<button type="button" data-task-action="cancel">Cancel</button>`);
  if (["failed", "timed_out", "interrupted", "manual_review"].includes(t.status)) buttons.push(`<button type="button" data-task-action="retry">Retry</button>`);
  return `<p class="crumbs"><a href="#/tasks">Tasks</a> /</p>
    <h1>Task <span class="id">${esc(t.id)}</span> <span class="muted">${esc(t.type)}</span> <span id="task-status">${badge(t.status)}${t.cancelRequested ? ` <span class="muted">(cancel requested)</span>` : ""}</span></h1>
    ${buttons.length > 0 ? `<div class="actions">${buttons.join("")}</div>` : ""}
    ${t.status === "manual_review" ? `<p class="attention">This task waits for a person: retry it, cancel it, or resolve it (<code>spoolctl task resolve ${esc(t.id)} --succeeded | --failed --note …</code>).</p>` : ""}
    ${t.resultSummary !== undefined ? `<h2>Result</h2><pre id="task-result">${esc(t.resultSummary)}</pre>` : ""}
    ${t.error ? `<h2>Error</h2><p>${errorCell(t.errorCode, t.error)}</p>` : ""}
    <section class="panel"><h2>The task</h2>
    ${fields([
      ["Attempt", `${esc(t.attempt)}/${esc(t.maxAttempts)}`],
      ["Exit", t.exitCode !== undefined ? esc(t.exitCode) : t.signal !== undefined ? `signal ${esc(t.signal)}` : ""],
      ["Created", time(t.createdAt)],
      ["Started", t.startedAt && time(t.startedAt)],
      ["Finished", t.finishedAt && time(t.finishedAt)],
      ["Next run", t.nextRunAt && time(t.nextRunAt)],
      ["Queue deadline", t.queueDeadline && time(t.queueDeadline)],
      ["Retry deadline", t.retryDeadline && time(t.retryDeadline)],
      ["Idempotency key", t.idempotencyKey && `<code>${esc(t.idempotencyKey)}</code>`],
      ["Scope", `<code>${esc(t.scope)}</code>`],
      ["Locks", t.locks?.length ? t.locks.map((l) => `<code>${esc(l)}</code>`).join(", ") : ""],
      ["Ending", t.ending && esc(t.ending)],
    ])}</section>
    ${table("Parameters", [["Name", 30], ["Value", 70]], Object.entries(t.params ?? {}).map(([n, v]) => [td(`<code>${esc(n)}</code>`), td(cut(v, "mono"))]), "No parameters.")}
    <h2>Attempts</h2>
    ${table("Every attempt", [["#", 6, true], ["Started", 14], ["Outcome", 14], ["Exit", 8, true], ["Error", 58]], attempts.attempts.map((a) => [
      num(esc(a.number)), td(time(a.startedAt)), td(badge(a.outcome ?? "running")), num(esc(a.exitCode ?? a.signal ?? "")), td(errorCell(a.errorCode, a.error)),
    ]))}
    ${table("Steps done", [["Step", 50], ["Attempt", 15, true], ["At", 35]], steps.steps.map((s) => [td(cut(s.name, "mono")), num(esc(s.attempt)), td(time(s.at))]), "No steps reported.")}
    <h2>Output of the latest attempt${t.status === "running" ? " (live)" : ""}</h2><pre id="task-output" aria-live="off">${t.status === "running" ? "" : esc(output || "(none)")}</pre>
    <h2>Transitions</h2>
    ${timeline(transitions.transitions)}`;
}

async function locks() {
  const list = await api("GET", "/v1/locks");
  return `<h1>Locks</h1>
    ${table("Held locks", [["Lock", 30], ["Held by", 22], ["Type", 16], ["Since", 14], ["Waiting", 18, true]], list.locks.map((l) => [
      td(cut(l.name, "mono")), td(idLink("task", l.taskId)), td(cut(l.taskType)), td(time(l.since)), num(esc(l.waiting.length)),
    ]), "No lock is held.")}`;
}

function notFound(what) {
  return `<h1>Not found</h1>
    <p id="not-found">${esc(what)}</p>
    <p><a href="#/">Overview</a> · <a href="#/deliveries">Deliveries</a> · <a href="#/tasks">Tasks</a></p>`;
}

function login(message) {
  forget.hidden = true;
  return `<h1>Sign in</h1>
    <p>${esc(message)}</p>
    <form id="login" class="inline">
      <label>Bearer token <input name="token" type="password" autocomplete="current-password" required></label>
      <button type="submit" class="primary">Use this token</button>
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
    // Each page has one shape of address; anything else is not a page.
    const [page, id, ...rest] = parts;
    const one = id === undefined;
    const record = id !== undefined && id !== "" && rest.length === 0;
    let html;
    if (page === undefined) html = await overview();
    else if (page === "deliveries" && one) html = await deliveries(query);
    else if (page === "delivery" && record) html = await delivery(id);
    else if (page === "targets" && one) html = await targets();
    else if (page === "tasks" && one) html = await tasks(query);
    else if (page === "task" && record) html = await task(id);
    else if (page === "locks" && one) html = await locks();
    else html = notFound(`There is no page at ${location.hash}.`);
    main.innerHTML = html;
    forget.hidden = !sessionStorage.getItem(TOKEN_KEY);
    if (parts[0] === "task" && document.querySelector("#task-status .s-running")) follow(parts[1]);
  } catch (e) {
    if (e instanceof NotFound) {
      main.innerHTML = notFound(e.message);
    } else if (e instanceof Unauthorized) {
      main.innerHTML = login(sessionStorage.getItem(TOKEN_KEY) ? "That token was refused." : "This spoold asks for a bearer token.");
    } else {
      say(e.message, true);
      main.innerHTML = `<h1>Could not load this page</h1><p>${esc(e.message)}</p>`;
    }
  }
  // After the first page, a new page takes the focus (a screen reader starts reading it) and
  // starts at the top; the first leaves the focus at the top, where Tab finds the skip link.
  if (rendered) {
    main.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }
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
        <div class="actions"><button type="button" class="primary" data-bulk-confirm="${esc(action)}">${esc(action[0].toUpperCase() + action.slice(1))} ${esc(r.changed)} ${bulk.noun}</button><button type="button" data-bulk-dismiss>Do nothing</button></div>`;
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
