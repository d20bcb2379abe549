// Drives relay's Settings page in the system Chromium for
// e2e/tests/e2e/clients/settings_live.rs.
// Usage: node live.mjs LOGIN_URL SESSION_ID SHOT_DIR
//
// A conversation with the test on stdin/stdout, one JSON line each way, so every wait
// is on something the page shows (no sleeps):
//   page → {"phase":"ready", …}        the page is up with SESSION_ID listed running:
//          when its header said "live" and when the page had loaded (ms since the
//          navigation began, or null when it never did within LIVE_WAIT), the
//          header's text, and the layout at 1280 px (every identifier cell: its text,
//          its lines and whether it fits its cell; the page's width)
//   test → {"id":"t-…","state":"running"}  wait until that row shows that state
//   page → {"phase":"seen","id":…}     (repeated as the test asks)
//   test → {"done":true}
//   page → the final report: the sandbox of SESSION_ID as shown, the doctor and audit
//          rows, the live table, the DOM, every request the page made (method, URL)
//          and every response body it got (base64), the controls on the page, and the
//          screenshots' paths; and, the sandbox shown, the page at 390, 760 and
//          1280 px: its width and which navigation links the window cuts, with a
//          screenshot at each.
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";
import { join } from "node:path";

const [url, sessionId, shotDir] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const WAIT = 20000;
// Longer than the second the test allows, shorter than a long poll of /api/events
// (25 s), so a page that says "live" only when the first poll returns fails quickly.
const LIVE_WAIT = 5000;
const say = (v) => process.stdout.write(JSON.stringify(v) + "\n");
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const browser = await chromium.launch({
  executablePath,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const requests = [];
  const pending = [];
  page.on("request", (r) => requests.push({ method: r.method(), url: r.url() }));
  page.on("response", (r) => {
    pending.push((async () => {
      let body = "";
      try { body = (await r.body()).toString("base64"); } catch (_) { /* redirects have none */ }
      return { url: r.url(), status: r.status(), body };
    })());
  });
  await page.goto(url, { waitUntil: "load" });
  // The header says "live", waited for on the DOM and timed by the page's own clock.
  let liveMs = null;
  try {
    const at = await page.waitForFunction(
      () => document.getElementById("live-state").textContent === "live" && performance.now(),
      null,
      { polling: "raf", timeout: LIVE_WAIT },
    );
    liveMs = await at.jsonValue();
  } catch (_) { /* reported as null, with the header's text */ }
  const liveState = await page.textContent("#live-state");
  const loadMs = await page.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    return nav.loadEventEnd || nav.loadEventStart;
  });
  await page.waitForSelector('#overview[data-ready="1"]', { timeout: WAIT });
  const row = async (id, state) => {
    try {
      await page.waitForSelector(`#live tbody tr[data-id="${id}"][data-state="${state}"]`, { state: "attached", timeout: WAIT });
    } catch (err) {
      const rows = await page.$$eval("#live tbody tr", (rs) => rs.map((r) => r.textContent));
      throw new Error(`no row ${id} ${state} in ${JSON.stringify(rows)}: ${err.message}`);
    }
  };
  await row(sessionId, "running");
  await page.waitForSelector('#doctor[data-ready="1"]', { timeout: WAIT });
  const shots = [join(shotDir, "settings-live.png"), join(shotDir, "settings-live-sandbox.png")];
  await page.screenshot({ path: shots[0], fullPage: true });
  say({ phase: "ready", live_ms: liveMs, load_ms: loadMs, live_state: liveState, layout: await layout(page) });
  for (;;) {
    const { value, done } = await lines.next();
    if (done) throw new Error("the test closed stdin");
    const ask = JSON.parse(value);
    if (ask.done) break;
    await row(ask.id, ask.state);
    say({ phase: "seen", id: ask.id, state: ask.state });
  }
  // The sandbox of the session, picked by its link as a person would.
  await page.click(`#live tbody tr[data-id="${sessionId}"] a`);
  await page.waitForSelector('#sandbox[data-ready="1"]', { timeout: WAIT });
  await page.screenshot({ path: shots[1], fullPage: true });
  // The page at a phone's, a narrow window's and a laptop's width, the sandbox shown.
  const widths = [];
  for (const width of [390, 760, 1280]) {
    await page.setViewportSize({ width, height: 900 });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    const shot = join(shotDir, `settings-${width}.png`);
    await page.screenshot({ path: shot, fullPage: true });
    shots.push(shot);
    widths.push(await fits(page));
  }
  const texts = (sel) => page.$$eval(sel, (els) => els.map((e) => e.textContent));
  // The audit's page before the oldest row shown, by its link.
  const older = page.waitForResponse((r) => r.url().includes("/api/audit?") && r.url().includes("until="), { timeout: WAIT });
  await page.click("#audit-older");
  await older;
  const report = {
    final_url: page.url(),
    sandbox: {
      head: await page.textContent("#sandbox-head"),
      write: await texts("#sandbox-body ul.write li"),
      read: await texts("#sandbox-body ul.read li"),
      denied: await texts("#sandbox-body ul.denied li"),
      sockets: await texts("#sandbox-body ul.sockets li"),
      network: await page.textContent("#sandbox-network"),
    },
    probes_ran: await page.textContent("#probes-ran"),
    checks: await page.$$eval("#checks tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent))),
    audit: await page.$$eval("#audit-rows tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent))),
    live: await page.$$eval("#live tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent))),
    headers: await page.$$eval("#live thead th", (els) => els.map((e) => e.textContent)),
    controls: await page.$$eval(
      "form, button, input, textarea, select, [contenteditable], [onclick]",
      (els) => els.map((e) => e.outerHTML),
    ),
    links: await page.$$eval("a[href]", (els) => els.map((e) => e.getAttribute("href"))),
    dom: await page.content(),
    requests,
    responses: await Promise.all(pending),
    shots,
    widths,
  };
  say(report);
} finally {
  await browser.close();
}

// How the tables lay out: every identifier cell (td.mono: ids, actions, codes, check
// names, token fingerprints) of the three tables, with the most lines one of its texts
// takes and whether its content fits the cell; the viewport's and the page's widths.
async function layout(page) {
  return page.evaluate(() => {
    const lines = (td) => {
      let most = 0;
      const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
      for (let t = walk.nextNode(); t; t = walk.nextNode()) {
        if (!t.data.trim()) continue;
        const r = document.createRange();
        r.selectNodeContents(t);
        most = Math.max(most, r.getClientRects().length);
      }
      return most;
    };
    const cells = [];
    for (const table of ["live", "checks", "audit-rows"]) {
      for (const td of document.querySelectorAll(`#${table} tbody td.mono`)) {
        if (!td.textContent) continue;
        cells.push({ table, text: td.textContent, lines: lines(td), fits: td.scrollWidth <= td.clientWidth });
      }
    }
    return { width: window.innerWidth, page_width: document.documentElement.scrollWidth, cells };
  });
}

// Whether the page fits the window: its width against the window's, and the
// navigation links not wholly inside the window.
async function fits(page) {
  return page.evaluate(() => ({
    width: window.innerWidth,
    page_width: document.documentElement.scrollWidth,
    nav_cut: [...document.querySelectorAll("nav a")]
      .filter((a) => {
        const r = a.getBoundingClientRect();
        return r.left < 0 || r.right > window.innerWidth;
      })
      .map((a) => a.textContent),
  }));
}
