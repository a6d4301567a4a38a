// The dashboard in a real headless Chromium (Debian's, driven by playwright-core) at 1280×800:
// the pages load and nothing on them is wider than the window, what needs a person comes
// first, the numbers match the API, times read as "3 min ago" with the exact time on hover,
// an at-most-once delivery in review shows its fingerprint, reconcile query and checks, a
// task its result, an unknown address is "not found", the buttons change state, the keyboard
// reaches everything, bulk actions count before they act, an export downloads what the API
// exports, and a screenshot of each page is written. Run by tests/it/dashboard.rs with
// BASE_URL (a spoold with a bearer token and some deliveries), TOKEN, TARGET (an origin with
// deliveries), TASK (a task that runs until GO exists), ORDER (an at-most-once delivery in
// manual review, reconciled by RECONCILE) and SHOTS (a directory). Exit status 0 when every
// check held.

const { chromium } = require("playwright-core");
const assert = require("node:assert/strict");
const path = require("node:path");

const { BASE_URL, TOKEN, TARGET, SHOTS } = process.env;

async function api(method, p) {
  const response = await fetch(BASE_URL + p, { method, headers: { Authorization: `Bearer ${TOKEN}` } });
  assert.ok(response.ok, `${method} ${p}: ${response.status}`);
  return response.json();
}

async function eventually(what, check) {
  const deadline = Date.now() + 10000;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) throw new Error(`${what}: ${e.message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  // Nothing on the page is wider than the window: no scrolling sideways, no element past
  // the right edge (long values are cut, whole on hover).
  const fits = async (name) => {
    const wide = await page.evaluate(() => {
      const width = document.documentElement.clientWidth;
      const out = [...document.querySelectorAll("body *")]
        .filter((e) => e.getBoundingClientRect().right > width + 0.5)
        .map((e) => `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ""}${e.className ? `.${String(e.className).split(" ").join(".")}` : ""} to ${Math.round(e.getBoundingClientRect().right)}`);
      if (document.documentElement.scrollWidth > width) out.unshift(`the page is ${document.documentElement.scrollWidth} px wide`);
      return out;
    });
    assert.deepEqual(wide, [], `${name}: wider than 1280 px`);
  };
  // The window as an operator first sees it, 1280×800.
  const shot = async (name) => {
    await fits(name);
    await page.screenshot({ path: path.join(SHOTS, `${name}.png`) });
  };

  // Without the token: asked for it, nothing shown. With it: the overview.
  await page.goto(`${BASE_URL}/ui`);
  await page.waitForSelector("#login");
  await shot("sign-in");
  await page.fill("input[name=token]", TOKEN);
  await page.press("input[name=token]", "Enter");
  await page.waitForSelector("h1:text('Overview')");

  // The counts are the API's.
  const stats = await api("GET", "/v1/stats");
  for (const [status, count] of Object.entries(stats.deliveries)) {
    assert.equal(await page.textContent(`[data-count="${status}"]`), String(count), status);
  }
  assert.equal(await page.textContent("#paused-targets"), String(stats.pausedTargets));
  // And the tasks': the test's talking task runs, its 51 for later wait.
  assert.equal(stats.tasks.running, 1);
  assert.equal(stats.tasks.pending, 51);
  for (const [status, count] of Object.entries(stats.tasks)) {
    assert.equal(await page.textContent(`[data-task-count="${status}"]`), String(count), `tasks ${status}`);
  }
  // What needs a person comes first, and says how many: the order in review.
  assert.equal(await page.evaluate(() => document.querySelector("main h1").nextElementSibling.id), "needs-a-person");
  const person = stats.deliveries.unknown + stats.deliveries.manual_review + stats.tasks.manual_review;
  assert.equal(stats.deliveries.manual_review, 1, "the order in review");
  assert.equal(await page.getAttribute("#needs-a-person", "data-count"), String(person));
  const order = await page.$$eval("[data-count]:not(#needs-a-person)", (cells) => cells.map((c) => c.dataset.count));
  assert.deepEqual(order.slice(0, 3), ["unknown", "manual_review", "failed"], "those needing a person first");
  // The chart's bars add up to the hour's attempts.
  assert.equal(stats.byMinute.length, 60);
  assert.equal(await page.getAttribute("#chart", "data-total"), String(stats.lastHour.attempts));
  assert.ok(stats.lastHour.attempts > 0, "attempts to draw");
  await shot("overview");

  // Failed deliveries: the same rows as the API's listing.
  await page.goto(`${BASE_URL}/ui#/deliveries?status=failed`);
  await page.waitForSelector("h1:text('Deliveries')");
  const failed = await api("GET", "/v1/deliveries?status=failed&limit=50&order=desc");
  assert.ok(failed.count > 0, "some failed deliveries to show");
  const shown = await page.$$eval("tbody tr td:first-child a", (links) => links.map((a) => a.textContent));
  assert.deepEqual(shown, failed.deliveries.map((d) => d.id));
  // A URL is whole on hover; a time reads "… ago", exact on hover.
  const rows = await page.$$eval("tbody tr", (trs) => trs.map((tr) => ({
    url: tr.querySelector("td.url .cut").title,
    when: tr.querySelector("time").textContent,
    exact: tr.querySelector("time").title,
    code: tr.querySelector("td.error .code").textContent,
  })));
  assert.deepEqual(rows.map((r) => r.url), failed.deliveries.map((d) => d.targetUrl));
  assert.deepEqual(rows.map((r) => r.exact), failed.deliveries.map((d) => `${d.updatedAt} (UTC)`));
  for (const r of rows) assert.match(r.when, /^(now|\d+ s ago)$/);
  assert.deepEqual(rows.map((r) => r.code), failed.deliveries.map(() => "http_status"));
  await shot("deliveries");

  // One delivery: its fields, attempts and transitions; Retry makes it pending again.
  const id = failed.deliveries[0].id;
  await page.click(`a[href="#/delivery/${id}"]`);
  await page.waitForSelector("#delivery-status");
  assert.equal((await page.textContent("#delivery-status")).trim(), "failed");
  assert.ok((await page.$$("ol.timeline li")).length >= 3, "the transitions");
  await shot("delivery");
  await page.click("button[data-action=retry]");
  await eventually("the retry shows", async () => {
    assert.notEqual((await page.textContent("#delivery-status")).trim(), "failed");
  });
  const after = await api("GET", `/v1/deliveries/${id}`);
  assert.notEqual(after.status, "failed", "retried through the API");
  assert.match(await page.textContent("#status"), /retry .*: done/);

  // Targets: pause and resume by button, seen by the API.
  await page.goto(`${BASE_URL}/ui#/targets`);
  await page.waitForSelector(`button[data-target="${TARGET}"]`);
  await page.click(`button[data-target="${TARGET}"][data-pause=pause]`);
  await eventually("paused", async () => {
    const t = (await api("GET", "/v1/targets?limit=500")).targets.find((x) => x.origin === TARGET);
    assert.ok(t?.paused, "paused in the API");
    await page.waitForSelector(`button[data-target="${TARGET}"][data-pause=resume]`, { timeout: 500 });
  });
  await shot("targets");
  await page.click(`button[data-target="${TARGET}"][data-pause=resume]`);
  await eventually("resumed", async () => {
    const t = (await api("GET", "/v1/targets?limit=500")).targets.find((x) => x.origin === TARGET);
    assert.ok(t && !t.paused, "resumed in the API");
  });

  // Everything that matches: the dry run counts (and changes nothing), the confirmation acts,
  // and the API agrees.
  await page.goto(`${BASE_URL}/ui#/deliveries?status=failed`);
  await page.waitForSelector("#filter");
  await page.fill("#filter input[name=lastErrorCode]", "http_status");
  await page.click("#filter button[type=submit]");
  await page.waitForSelector("button[data-bulk=retry]");
  assert.equal(await page.evaluate(() => location.hash), "#/deliveries?status=failed&lastErrorCode=http_status");
  const stillFailed = await api("GET", "/v1/deliveries?status=failed&lastErrorCode=http_status&limit=500");
  const shownFailed = await page.$$eval("tbody tr td.error .code", (cells) => cells.map((c) => c.textContent));
  assert.deepEqual(shownFailed, stillFailed.deliveries.map(() => "http_status"));
  assert.ok(stillFailed.count > 0, "failed deliveries left to retry in bulk");
  await page.click("button[data-bulk=retry]");
  await page.waitForSelector("#bulk-count");
  assert.equal(await page.getAttribute("#bulk-count", "data-changed"), String(stillFailed.count));
  assert.equal((await api("GET", "/v1/deliveries?status=failed&limit=500")).count, stillFailed.count, "a count changes nothing");
  await shot("bulk");
  await page.click("button[data-bulk-confirm=retry]");
  await eventually("the bulk retry is reported", async () => {
    assert.match(await page.textContent("#status"), new RegExp(`retry every matching one of the deliveries: ${stillFailed.count} changed, 0 left`));
  });
  // Sent again, and the receiver now says 200.
  await eventually("the retried deliveries arrive", async () => {
    for (const d of stillFailed.deliveries) {
      assert.equal((await api("GET", `/v1/deliveries/${d.id}`)).status, "succeeded", `${d.id} retried`);
    }
  });
  // "Do nothing" does nothing.
  await page.goto(`${BASE_URL}/ui#/deliveries?status=pending`);
  await page.waitForSelector("button[data-bulk=cancel]");
  const waiting = (await api("GET", "/v1/deliveries?status=pending&limit=500")).count;
  await page.click("button[data-bulk=cancel]");
  await page.click("button[data-bulk-dismiss]");
  assert.equal(await page.$("#bulk-count"), null);
  assert.equal((await api("GET", "/v1/deliveries?status=pending&limit=500")).count, waiting, "nothing canceled");

  // Export: every delivery the listing matches, one record a line, as the API exports them.
  await page.goto(`${BASE_URL}/ui#/deliveries`);
  await page.waitForSelector("#export");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#export")]);
  assert.match(download.suggestedFilename(), /^spoold-export-.*\.ndjson$/);
  const lines = require("node:fs").readFileSync(await download.path(), "utf8").split("\n");
  assert.equal(lines.pop(), "", "the file ends with a newline");
  const records = lines.map((line) => JSON.parse(line));
  const exported = await api("GET", "/v1/export?limit=500");
  assert.ok(exported.records.length > 0 && !exported.nextCursor);
  assert.deepEqual(records.map((r) => r.delivery.id).sort(), exported.records.map((r) => r.delivery.id).sort());
  assert.deepEqual(records.find((r) => r.delivery.id === id).delivery.body, exported.records.find((r) => r.delivery.id === id).delivery.body);
  await eventually("the export is reported", async () => {
    assert.match(await page.textContent("#status"), new RegExp(`export: ${records.length} deliveries saved`));
  });

  // Tasks: filtered by the form, a page at a time (50 a page), and cancelled in bulk.
  const later = await api("GET", "/v1/tasks?status=pending&type=talk&limit=500");
  assert.equal(later.count, 51, "the test's 51 tasks for later");
  await page.goto(`${BASE_URL}/ui#/tasks`);
  await page.waitForSelector("#task-filter");
  await page.selectOption("#task-filter select[name=status]", "pending");
  await page.selectOption("#task-filter select[name=type]", "talk");
  await page.click("#task-filter button[type=submit]");
  await page.waitForSelector("#next-page");
  assert.equal(await page.evaluate(() => location.hash), "#/tasks?status=pending&type=talk");
  // The listing before the filter (every task) has a next page too: wait for the filtered one.
  await eventually("the filtered first page", async () => {
    const firstPage = await page.$$eval("tbody tr td:first-child a", (links) => links.map((a) => a.textContent));
    assert.deepEqual(firstPage, later.tasks.slice(0, 50).map((t) => t.id));
  });
  await page.click("#next-page");
  await eventually("the second page", async () => {
    const rest = await page.$$eval("tbody tr td:first-child a", (links) => links.map((a) => a.textContent));
    assert.deepEqual(rest, [later.tasks[50].id]);
  });
  assert.equal(await page.$("#next-page"), null, "no third page");
  await page.click("button[data-bulk=cancel]");
  await page.waitForSelector("#bulk-count");
  assert.equal(await page.getAttribute("#bulk-count", "data-changed"), "51");
  await page.click("button[data-bulk-confirm=cancel]");
  await eventually("the tasks are canceled", async () => {
    assert.equal((await api("GET", "/v1/tasks?status=canceled&type=talk&limit=500")).count, 51);
  });

  // A running task's output is followed live: the first line, then the rest once the script
  // is let go; then the page shows how it ended.
  // While it runs, it holds its lock.
  await page.goto(`${BASE_URL}/ui#/locks`);
  await page.waitForSelector("h1:text('Locks')");
  assert.deepEqual(
    await page.$$eval("tbody tr", (trs) => trs.map((tr) => [tr.cells[0].textContent, tr.querySelector("a.id").textContent])),
    [["mailbox", process.env.TASK]],
  );
  await shot("locks");
  await page.goto(`${BASE_URL}/ui#/task/${process.env.TASK}`);
  await page.waitForSelector("#task-status");
  await eventually("the first line", async () => {
    assert.match(await page.textContent("#task-output"), /line 1/);
  });
  require("node:fs").writeFileSync(process.env.GO, "go");
  await eventually("the rest, live", async () => {
    assert.match(await page.textContent("#task-output"), /line 1\nline 2\nline 3/);
  });
  await page.waitForSelector("#task-status .s-succeeded");
  // Its result, as the script left it.
  const ended = await api("GET", `/v1/tasks/${process.env.TASK}`);
  assert.equal(ended.resultSummary, "said 3 lines");
  assert.equal(await page.textContent("#task-result"), ended.resultSummary);
  await shot("task");

  // The order in review: what the person deciding needs — its fingerprint, the query that
  // asks the target, the checks so far — and the decision, first.
  await page.goto(`${BASE_URL}/ui#/delivery/${process.env.ORDER}`);
  await page.waitForSelector("#at-most-once");
  assert.equal((await page.textContent("#delivery-status")).trim(), "manual_review");
  assert.equal(await page.textContent("#fingerprint"), "order-4711");
  assert.equal(await page.textContent("#reconcile-query code"), `GET ${process.env.RECONCILE}`);
  const checks = (await api("GET", `/v1/deliveries/${process.env.ORDER}/checks`)).checks;
  assert.ok(checks.length > 0 && checks[0].matches === 2, JSON.stringify(checks));
  assert.equal((await page.$$("#at-most-once tbody tr")).length, checks.length);
  assert.ok(await page.$("#at-most-once #resolve"), "the decision is there");
  assert.match(await page.textContent("#why"), /^multiple_matches: the target shows 2 matches/);
  assert.ok(await page.evaluate(() => document.querySelector("#at-most-once").getBoundingClientRect().top < 800), "on the first screen");
  await shot("at-most-once");

  // An address that is no page, or a record that is not there: "not found", not a listing.
  for (const [hash, said] of [
    ["#/deliveries/abc", "There is no page at #/deliveries/abc."],
    ["#/delivery/", "There is no page at #/delivery/."],
    [`#/delivery/${"0".repeat(32)}`, `There is no delivery with the id ${"0".repeat(32)} here`],
    [`#/task/${"0".repeat(32)}`, `There is no task with the id ${"0".repeat(32)} here`],
    ["#/nowhere", "There is no page at #/nowhere."],
  ]) {
    await page.goto(`${BASE_URL}/ui${hash}`);
    await page.waitForSelector("h1:text('Not found')");
    // Only the hash changes from one to the next: the page of the one before is "Not found"
    // too until this one is drawn.
    await eventually(`the not-found page of ${hash}`, async () => {
      const text = await page.textContent("#not-found");
      assert.ok(text.startsWith(said), `${hash}: ${text}`);
    });
  }
  await shot("not-found");

  // The tasks load, the one that ended with its result.
  await page.goto(`${BASE_URL}/ui#/tasks`);
  await page.waitForSelector("h1:text('Tasks')");
  const first = await page.$$eval("tbody tr:first-child td", (tds) => [tds[0].textContent, tds[5].textContent]);
  assert.deepEqual(first, [process.env.TASK, "said 3 lines"], "the oldest task, with its result");
  await shot("tasks");

  // The keyboard: from the top, Tab reaches the skip link, Enter moves focus to the content
  // (and stays on the page); Tab then walks the page's links.
  await page.goto(`${BASE_URL}/ui#/`);
  await page.reload();
  await page.waitForSelector("h1:text('Overview')");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Skip to content");
  await page.keyboard.press("Enter");
  assert.equal(await page.evaluate(() => document.activeElement.id), "main");
  assert.equal(await page.evaluate(() => location.hash), "#/");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.tagName), "A");

  // Forgetting the token asks for it again.
  await page.click("#forget");
  await page.waitForSelector("#login");

  assert.deepEqual(errors, [], "no script errors");
  await browser.close();
  console.log("dashboard: every check held");
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
