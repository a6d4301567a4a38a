// The dashboard in a real headless Chromium (Debian's, driven by playwright-core): the pages
// load, the numbers match the API, the buttons change state, the keyboard reaches everything,
// and a screenshot of each page is written. Run by tests/it/dashboard.rs with BASE_URL (a
// spoold with a bearer token and some deliveries), TOKEN, TARGET (an origin with deliveries)
// and SHOTS (a directory). Exit status 0 when every check held.

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
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const shot = (name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

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

  // A running task's output is followed live: the first line, then the rest once the script
  // is let go; then the page shows how it ended.
  await page.goto(`${BASE_URL}/ui#/task/${process.env.TASK}`);
  await page.waitForSelector("#task-status");
  await eventually("the first line", async () => {
    assert.match(await page.textContent("#task-output"), /line 1/);
  });
  require("node:fs").writeFileSync(process.env.GO, "go");
  await eventually("the rest, live", async () => {
    assert.match(await page.textContent("#task-output"), /line 1\nline 2\nline 3/);
  });
  await page.waitForSelector("#task-status .status-succeeded");
  await shot("task");

  // Tasks and locks load.
  for (const [name, heading] of [["tasks", "Tasks"], ["locks", "Locks"]]) {
    await page.goto(`${BASE_URL}/ui#/${name}`);
    await page.waitForSelector(`h1:text('${heading}')`);
    await shot(name);
  }

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
