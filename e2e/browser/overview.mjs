// Opens relay's Settings page in the system Chromium through a one-time login link,
// waits for the Overview, and prints one JSON line: the Overview lines, the live
// table, the final DOM, and every response body the page received (base64). Saves a
// screenshot. Usage: node overview.mjs LOGIN_URL SCREENSHOT_PATH [PICK_ID]; with PICK_ID
// it then picks that session (#sandbox=PICK_ID) and also prints its sandbox panel's
// connections table and whether it comes before the lists of places. The audit rows too.
import { chromium } from "playwright-core";

const [url, shot, pick] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 640 } });
  const pending = [];
  page.on("response", (r) => {
    pending.push((async () => {
      let body = "";
      try { body = (await r.body()).toString("base64"); } catch (_) { /* redirects have none */ }
      return { url: r.url(), status: r.status(), body };
    })());
  });
  await page.goto(url, { waitUntil: "load" });
  await page.waitForSelector('#overview[data-ready="1"], #overview[data-ready="error"]', { timeout: 20000 });
  const ready = await page.getAttribute("#overview", "data-ready");
  const lines = await page.$$eval("#facts li", (els) => els.map((e) => e.textContent));
  const live = await page.$$eval("#live tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  let egress = null;
  let egressFirst = null;
  if (pick) {
    await page.evaluate((id) => { location.hash = "#sandbox=" + encodeURIComponent(id); }, pick);
    await page.waitForSelector('#sandbox[data-ready="1"], #sandbox[data-ready="error"]', { timeout: 20000 });
    egress = await page.$$eval("#sandbox-egress tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
    // The connections come before the lists of places (the system's some 40 lines).
    egressFirst = await page.evaluate(() => {
      const table = document.getElementById("sandbox-egress");
      const list = document.querySelector("#sandbox-body ul.places");
      return !!table && !!list && !!(table.compareDocumentPosition(list) & Node.DOCUMENT_POSITION_FOLLOWING);
    });
  }
  const audit = await page.$$eval("#audit-rows tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  const dom = await page.content();
  await page.screenshot({ path: shot, fullPage: true });
  const responses = await Promise.all(pending);
  process.stdout.write(JSON.stringify({ ready, lines, live, egress, egress_first: egressFirst, audit, dom, final_url: page.url(), responses }) + "\n");
} finally {
  await browser.close();
}
